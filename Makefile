# FlashAttention from first principles: set up, run, test.
#   make lab      start JupyterLab on notebooks/ (sets up .venv first if needed)
#   make test     library tests and strict nbval over every notebook
# Variables: PYTHON (the interpreter that creates .venv), HOST, PORT, BROWSER=no for a headless machine.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8888
BROWSER ?= yes
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg

.PHONY: setup lab test test-lib test-notebooks execute student clean

setup: $(STAMP)

# Re-installs only when pyproject.toml changes; the venv itself is created once.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

lab: setup
	$(BIN)/jupyter lab --notebook-dir=notebooks --ip=$(HOST) --port=$(PORT) \
		$(if $(filter no,$(BROWSER)),--no-browser,) $(if $(filter 0,$(shell id -u)),--allow-root,)

test: setup
	$(BIN)/python -m pytest tests $(NOTEBOOKS) $(NBVAL)

test-lib: setup
	$(BIN)/python -m pytest tests

test-notebooks: setup
	$(BIN)/python -m pytest $(NOTEBOOKS) $(NBVAL)

# Re-execute every notebook in place, then scrub widget state and metadata (keeping outputs and counts).
execute: setup
	for nb in $(NOTEBOOKS); do \
		$(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=600 "$$nb" || exit 1; \
		$(BIN)/nbstripout --keep-output --keep-count "$$nb" || exit 1; \
	done

# Learner copies without the solution cells, in exercises/ (a copy you have changed is never overwritten).
student: setup
	$(BIN)/python tools/student.py $(if $(FORCE),--force $(FORCE),)

# Removes what the build made; never notebooks/, data/ or exercises/ (a learner's work).
clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis *.egg-info
	find lab tests -name __pycache__ -type d -prune -exec rm -rf {} +
	find notebooks -name .ipynb_checkpoints -type d -prune -exec rm -rf {} +

# In a real browser and as a static site (Debian's chromium: `apt-get install chromium`; no browser download).
#   make site      build/site/: a page per notebook from its committed outputs, math typeset by KaTeX
#   make test-ui   builds the site, opens every page, then runs every notebook with a slider in JupyterLab
#                  in headless Chromium and moves each slider with the keyboard; screenshots in build/ui/
UI_STAMP := $(VENV)/.installed-ui
KATEX_VERSION := 0.19.1
KATEX := $(VENV)/katex/node_modules/katex

.PHONY: setup-ui site test-ui

setup-ui: $(UI_STAMP)

# The ui extra (Playwright for Python, mistune, Pygments) and KaTeX from npm, installed into .venv.
$(UI_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,ui]'
	npm install --no-audit --no-fund --silent --prefix $(VENV)/katex katex@$(KATEX_VERSION)
	touch $(UI_STAMP)

site: setup-ui
	$(BIN)/python tools/build_site.py --out build/site --katex $(KATEX)

test-ui: site
	$(BIN)/python tools/ui_check.py --site build/site
