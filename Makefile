# FlashAttention from first principles: set up, run, test.
#   make lab      start JupyterLab on the course (sets up .venv first if needed)
#   make test     library tests and strict nbval over every notebook
# Variables: PYTHON (the interpreter that creates .venv), HOST, PORT, BROWSER=no for a headless machine,
#   TORCH_INDEX (where torch comes from; see below).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8888
BROWSER ?= yes
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg

.PHONY: setup lock lab test lint format test-lib test-notebooks test-portability test-installed execute student grade clean

setup: $(STAMP)

# torch (the version pinned in pyproject.toml). On Linux, pip's default index serves the CUDA build, several
# GB; without an NVIDIA driver (no nvidia-smi) the CPU build comes from PyTorch's CPU index instead.
# A GPU user picks a build with e.g. `make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128`;
# `TORCH_INDEX=` (empty) leaves the choice to pip. macOS and Windows wheels on PyPI are CPU builds already.
TORCH_VERSION := 2.13.0
ifeq ($(shell uname -s),Linux)
ifeq ($(shell command -v nvidia-smi),)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
endif
endif
TORCH_INDEX ?=

# The versions `make test` passed with, one lock file per platform and Python (locks/README.md): `make setup`
# installs exactly those. Where no lock matches (another OS, another Python), it says so and installs from
# pyproject.toml's ranges, an untested combination; `make lock` makes one.
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
LOCK := locks/$(shell uname -s | tr A-Z a-z)-$(shell uname -m)-py$(PY_VERSION).txt
CONSTRAINTS = $(if $(wildcard $(LOCK)),-c $(LOCK),)

# Re-installs only when pyproject.toml or the lock changes; the venv itself is created once. torch comes
# alone from its index (its dependencies, like everything else, from PyPI under the lock).
$(STAMP): pyproject.toml $(wildcard $(LOCK))
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(if $(CONSTRAINTS),echo "== versions from $(LOCK)",echo "== no $(LOCK): installing from pyproject.toml's ranges (untested here; make lock)")
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install --progress-bar on --no-deps torch==$(TORCH_VERSION) --index-url $(TORCH_INDEX),)
	$(BIN)/python -m pip install --progress-bar on $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP)

# How versions move: resolve the newest versions pyproject.toml allows into $(LOCK), install them, run the
# tests. Commit the lock only if `make test` passed.
lock: setup
	$(BIN)/python -m pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --upgrade --extra test --extra ui --strip-extras --no-emit-index-url \
		--no-emit-find-links --no-emit-trusted-host --output-file $(LOCK) pyproject.toml
	$(BIN)/python tools/lock.py $(LOCK)
	$(BIN)/python -m pip install --progress-bar on -c $(LOCK) -e '.[test]'
	touch $(STAMP)
	$(MAKE) test

# JupyterLab on the repository: the course in notebooks/, your copies in exercises/ (`make student`).
# It opens on exercises/ when you have made your copies, on notebooks/ otherwise.
START_DIR = $(if $(wildcard exercises/*.ipynb),exercises,notebooks)

lab: setup
	$(BIN)/jupyter lab --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/$(START_DIR) --ip=$(HOST) --port=$(PORT) \
		$(if $(filter no,$(BROWSER)),--no-browser,) $(if $(filter 0,$(shell id -u)),--allow-root,)

# Two workers of one thread each keep two cores busy without oversubscribing them (pytest-xdist; each
# notebook stays on one worker, its cells in order). What strict nbval compares does not depend on the
# thread count (lab/notebook.py, `measured`), and test-portability runs the notebooks on every core too.
XDIST := -n 2 --dist loadscope
test: lint
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest $(XDIST) tests $(NOTEBOOKS) $(NBVAL)

# One formatter and linter over the repository, notebooks included (configuration in pyproject.toml).
# `make format` rewrites what `make lint` would refuse.
lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test-lib: setup
	$(BIN)/python -m pytest tests

test-notebooks: setup
	$(BIN)/python -m pytest $(NOTEBOOKS) $(NBVAL)

# Strict nbval must hold on every learner's machine, not only on the one that executed the notebooks. These
# settings change the arithmetic the way another CPU would: torch's vector kernels (no AVX or AVX2 only),
# MKL's instruction set, one thread, every core. A cell that prints a machine-dependent number bare fails here
# (the rule: lab/notebook.py, `measured`). CI runs it after `make test`.
PORTABILITY := ATEN_CPU_CAPABILITY=default \
               ATEN_CPU_CAPABILITY=avx2,MKL_ENABLE_INSTRUCTIONS=AVX2 \
               OMP_NUM_THREADS=1,MKL_NUM_THREADS=1 \
               OMP_NUM_THREADS=$(shell nproc 2>/dev/null || echo 2)
test-portability: setup
	for setting in $(PORTABILITY); do \
		echo "== strict nbval under $$setting"; \
		env $$(echo $$setting | tr , ' ') $(BIN)/python -m pytest -q $(NOTEBOOKS) $(NBVAL) || exit 1; \
	done

# The Colab path: the wheel installed outside the checkout runs every notebook (tests/test_installed.py).
test-installed: setup
	$(BIN)/python -m pytest -q tests/test_installed.py --installed

# Re-execute every notebook in place, then scrub widget state and metadata (keeping outputs and counts).
# Published outputs come from the machine's own arithmetic: the portability settings (torch's and MKL's
# vector units, numpy's CPU features, thread counts) are for testing only and are cleared here.
NATIVE := env -u ATEN_CPU_CAPABILITY -u MKL_ENABLE_INSTRUCTIONS -u NPY_DISABLE_CPU_FEATURES \
          -u OMP_NUM_THREADS -u MKL_NUM_THREADS
execute: setup
	for nb in $(NOTEBOOKS); do \
		$(NATIVE) $(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=600 "$$nb" || exit 1; \
		$(BIN)/nbstripout --keep-output --keep-count "$$nb" || exit 1; \
	done

# Learner copies without the solution cells, in exercises/ (a copy you have changed is never overwritten).
# The committed copies in learner/ (what the Colab and Binder links open): tools/student.py --publish.
student: setup
	$(BIN)/python tools/student.py $(if $(FORCE),--force $(FORCE),)

# Run learners' copies and tabulate each exercise's verdict: exercises/ (yours), or DIR=class/ with one
# sub-folder of copies per learner; ONLY="03 05" grades those notebooks only. Reports in DIR/grades/
# (INSTRUCTORS.md).
grade: setup
	$(BIN)/python tools/grade.py $(or $(DIR),exercises) $(if $(ONLY),--only $(ONLY),)

# Removes what the build made; never notebooks/, data/ or exercises/ (a learner's work).
clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis *.egg-info
	find lab labbench tests -name __pycache__ -type d -prune -exec rm -rf {} +
	find notebooks -name .ipynb_checkpoints -type d -prune -exec rm -rf {} +

# In a real browser and as a static site (Debian's chromium: `apt-get install chromium`; no browser download).
#   make site      build/site/: a page per notebook from its committed outputs, math typeset by KaTeX
#   make test-ui   builds the site, opens every page, then runs every notebook with a slider in JupyterLab
#                  in headless Chromium and moves each slider with the keyboard; screenshots in build/ui/
UI_STAMP := $(VENV)/.installed-ui
KATEX_VERSION := 0.19.1
KATEX := $(VENV)/katex/node_modules/katex

.PHONY: setup-ui site test-ui check-chromium

setup-ui: $(UI_STAMP)

# The ui extra (Playwright for Python, mistune, Pygments) and KaTeX from npm, installed into .venv.
$(UI_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet $(CONSTRAINTS) -e '.[test,ui]'
	npm install --no-audit --no-fund --silent --prefix $(VENV)/katex katex@$(KATEX_VERSION)
	touch $(UI_STAMP)

site: setup-ui
	$(BIN)/python tools/build_site.py --out build/site --katex $(KATEX)

# Checked before anything is built: the browser check drives Debian's Chromium and downloads none.
CHROMIUM := /usr/bin/chromium
check-chromium:
	@test -x $(CHROMIUM) || { echo "make test-ui needs Chromium at $(CHROMIUM), which is missing."; \
		echo "On Debian or Ubuntu: sudo apt-get install chromium   (make site alone does not need it)"; exit 1; }

test-ui: check-chromium site
	$(BIN)/python tools/ui_check.py --site build/site
