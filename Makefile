# The two commands a new user needs:  make demo   and   make test
# Each creates .venv (if missing) with the pinned CPU build of torch, installs zarchive, and runs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PIN := -c requirements-ci.txt

.PHONY: demo test test-long bench venv clean

$(VENV)/.installed: pyproject.toml requirements-ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(PIN) -e ".[test]"
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed
	$(PIP) install -q $(PIN) -e ".[test,bench]"
	touch $@

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m zarchive.demo

test: $(VENV)/.installed
	$(PY) -m pytest -q tests

bench: $(VENV)/.installed-bench
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
