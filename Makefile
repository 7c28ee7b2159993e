# Two commands for a fresh machine: `make demo` (the main job on the embedded default) and
# `make test` (the test suite). Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-full lint bench bench-quick clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@# The distribution was called `monitor` before it was conformal-monitor: drop that copy.
	$(BIN)/pip uninstall --quiet --yes monitor >/dev/null 2>&1 || true
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)  ## stable → benign covariate → concept → extreme covariate shift, on real data, SQLite
	$(BIN)/monitor demo

test: $(STAMP)  ## the CI suite (statistical tests in their fast form), on two processes
	$(BIN)/pytest -q -p no:cacheprovider -n 2

test-full: $(STAMP)  ## everything, including the slow full-size statistical and reliability runs
	$(BIN)/pytest -q -p no:cacheprovider -m ""

lint: $(STAMP)
	$(BIN)/ruff check monitor connectors tests bench alembic
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)  ## every benchmark at full size, figures and doc tables (minutes)
	$(BIN)/monitor bench

bench-quick: $(STAMP)  ## the CI-size harness (seconds)
	$(BIN)/monitor bench --quick

clean:
	rm -rf $(VENV) monitor.db .pytest_cache .mypy_cache .ruff_cache
