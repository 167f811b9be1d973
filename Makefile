# The two commands a new user needs:  make demo   and   make test
# Each creates .venv (if missing) with the pinned CPU build of torch, installs zarchive, and runs.
# CI (.ci/run) also runs  make lint  (ruff, mypy) and  make test-floors  (the suite on the lowest
# dependency versions pyproject.toml allows, in .venv-floors).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PIN := -c requirements-ci.txt
FLOORS_VENV ?= .venv-floors
FPY := $(FLOORS_VENV)/bin/python
LINTED := zarchive tests benchmarks

.PHONY: demo test test-long test-floors lint bench venv clean

$(VENV)/.installed: pyproject.toml requirements-ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(PIN) -e ".[test]"
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed
	$(PIP) install -q $(PIN) -e ".[test,bench]"
	touch $@

# ruff and mypy at the exact versions of the `lint` extra, beside the test extras: mypy reads the
# types of numpy, torch and pandas from this environment.
$(VENV)/.installed-lint: $(VENV)/.installed
	$(PIP) install -q $(PIN) -e ".[test,lint]"
	touch $@

# pip is upgraded first: an old pip prefers PyPI's CUDA torch 2.13.0 to the local 2.13.0+cpu.
$(FLOORS_VENV)/.installed: pyproject.toml requirements-ci.txt requirements-floors.txt
	$(PYTHON) .ci/check_floors.py
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FPY) -m pip install -q --upgrade pip
	$(FPY) -m pip install -q $(PIN) -c requirements-floors.txt -e ".[test]"
	$(FPY) .ci/check_floors.py --installed
	touch $@

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m zarchive.demo

test: $(VENV)/.installed
	$(PY) -m pytest -q tests

# All three checks run; any failure fails the target.
lint: $(VENV)/.installed-lint
	@status=0; \
	set -x; \
	$(VENV)/bin/ruff check $(LINTED) || status=1; \
	$(VENV)/bin/ruff format --check $(LINTED) || status=1; \
	$(VENV)/bin/mypy zarchive || status=1; \
	exit $$status

test-floors: $(FLOORS_VENV)/.installed
	$(FPY) .ci/check_floors.py --installed
	$(FPY) -m pytest -q -p no:cacheprovider tests

bench: $(VENV)/.installed-bench
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(FLOORS_VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache build *.egg-info
