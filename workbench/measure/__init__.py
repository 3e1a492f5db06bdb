"""The measurement core every lab uses: one timer (warm-up, device sync, median and spread) and one
verdict rule (faster / slower / within noise). Part of the shared base: imports only the base."""
