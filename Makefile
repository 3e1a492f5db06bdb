# make lab   - JupyterLab on notebooks/ (127.0.0.1, with a token); sets everything up first
# make test  - the whole suite: unit tests, every notebook under nbval, the browser test
# make bench - the benchmarks: ratios measured side by side in one run
# make strip - clear notebook outputs and widget state before committing (nbstripout)
TORCH ?= 2.13.0
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup lab test bench strip clean

setup: $(STAMP)

# torch is installed first and pinned: a bare range would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==$(TORCH)"
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

lab: $(STAMP)
	$(VENV)/bin/workbench lab --dir notebooks

# WORKBENCH_QUICK=1 shrinks the notebooks' work; their defaults are for people.
test: $(STAMP)
	WORKBENCH_QUICK=1 $(PY) -m pytest -q tests --nbval-lax notebooks --timeout=900 -p no:cacheprovider

bench: $(STAMP)
	$(PY) -m workbench.bench

strip: $(STAMP)
	$(VENV)/bin/nbstripout --keep-id notebooks/*.ipynb

clean:
	rm -rf $(VENV) runs test-output
