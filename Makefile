# make lab   - JupyterLab on notebooks/ (127.0.0.1, with a token); sets everything up first
# make test  - the whole suite: ruff, unit tests, every notebook run in a real browser (its claims and
#              legibility checked, a picture of each in test-output/notebooks/)
# make bench - the benchmarks: ratios measured side by side in one run, written to docs/results/
# make docs  - the documentation site into site/ (MkDocs, strict); make docs-serve: on 127.0.0.1:8000
# make strip - clear notebook outputs and widget state before committing (nbstripout)
# make gpu-check OUT=DIR - every GPU path in one command, under 8 minutes; DIR/gpucheck.json
# make slurm-up / slurm-down - a real SLURM cluster of this machine in SLURM_DIR (root; Debian's
#                slurmctld slurmd slurm-client munge), to try `workbench submit` on;
#                SLURM_NODES=2: two nodes, each a test host with its own address and slurmd
TORCH ?= 2.13.0
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT   ?= gpucheck-out
SLURM_DIR ?= slurm-cluster
SLURM_NODES ?= 1

.PHONY: setup tcmalloc lab test bench docs docs-serve strip gpu-check clean slurm-up slurm-down

setup: $(STAMP)

# torch is installed first and pinned: a bare range would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==$(TORCH)"
	$(PY) -m pip install -q -e '.[dev]'
	@$(MAKE) -s tcmalloc
	touch $(STAMP)

# Runs start with tcmalloc where it is installed, and only there is a CPU rank's peak predicted
# (workbench.train.trainer.peak_unpredictable): the setup brings it where it can, and says so where not.
tcmalloc:
	@if $(PY) -c "import sys; from workbench.machine.allocator import tcmalloc_path; sys.exit(not tcmalloc_path())"; then \
		echo "setup: tcmalloc is installed; runs start with it (run.allocator: auto)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libtcmalloc-minimal4 >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && \
		    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libtcmalloc-minimal4 >/dev/null 2>&1; }; }; then \
		echo "setup: installed tcmalloc (libtcmalloc-minimal4); runs start with it (run.allocator: auto)"; \
	else \
		echo "setup: tcmalloc is not installed and could not be installed from here (as root: apt install libtcmalloc-minimal4);" \
			"runs use the C library's malloc, and a CPU rank's peak memory is not predicted"; \
	fi

lab: $(STAMP)
	$(VENV)/bin/workbench lab --dir notebooks

# WORKBENCH_QUICK=1 shrinks the notebooks' work; their defaults are for people. Most tests spend
# their time starting Python and torch in one process at a time, so two run side by side (a file
# and its notebook cells stay on one worker); tests marked `alone` set up a load of their own (busy
# processes) and run afterwards with the machine to themselves.
PYTEST := WORKBENCH_QUICK=1 $(PY) -m pytest -q --timeout=900 -p no:cacheprovider --durations=30
test: $(STAMP)
	$(VENV)/bin/ruff check workbench tests examples tools
	$(VENV)/bin/ruff format --check workbench tests examples tools
	$(MKDOCS) build --strict --quiet
	$(PYTEST) -n 2 --dist loadfile -m "not alone" tests
	$(PYTEST) -m alone tests

# The site's pages hold markers the build fills from the code (the CLI reference) and from the results
# files (tools/docs_hooks.py); --strict fails on a broken link or a page left out.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
docs: $(STAMP)
	$(MKDOCS) build --strict

docs-serve: $(STAMP)
	$(MKDOCS) serve --strict --dev-addr 127.0.0.1:8000

bench: $(STAMP)
	$(PY) -m tools.bench

# No setup first: a GPU machine may have torch but no network, no venv and no Jupyter. The venv's
# python when there is one, else python3 with this checkout on PYTHONPATH. Skips at once without a GPU.
gpu-check:
	@py=$$(test -x $(PY) && echo $(PY) || echo python3); \
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $$py -m tools.gpucheck --out "$(OUT)"

slurm-up: $(STAMP)
	$(PY) -m tools.localslurm up $(SLURM_DIR) --nodes $(SLURM_NODES)

slurm-down: $(STAMP)
	$(PY) -m tools.localslurm down $(SLURM_DIR)

strip: $(STAMP)
	$(VENV)/bin/nbstripout --keep-id notebooks/*.ipynb

clean:
	rm -rf $(VENV) runs test-output site $(SLURM_DIR)
