# The two commands a new user needs:  make demo   and   make test
# make demo creates .venv (if missing) with only what zarchive itself needs (numpy, pandas, muutils,
# zstandard, safetensors, isal and the CPU build of torch), installs zarchive, and runs the demo.
# make test adds the test extras to the same .venv and runs the suite (without the tests marked slow).
# Every install into .venv takes its exact versions from requirements-ci.txt (written by make lock), so
# pip resolves in one pass and never considers PyPI's CUDA build of torch.
# CI (.ci/run) also runs  make lint  (ruff, mypy),  make docs  (the documentation site, strict) and
# make test-floors  (the whole suite, slow tests
# included, on the lowest dependency versions pyproject.toml allows, in .venv-floors).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch 2.13.0+cpu: on this project's machines pip finds it on local disk; elsewhere add PyTorch's CPU
# index: make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
PIN := -c requirements-ci.txt $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
NO_TORCH = echo "== if pip found no torch==2.13.0+cpu above, run make again with TORCH_INDEX=https://download.pytorch.org/whl/cpu"; exit 1
FLOORS_VENV ?= .venv-floors
FPY := $(FLOORS_VENV)/bin/python
LINTED := zarchive tests benchmarks
DEMO_OUT ?= outputs/run.zarc

.PHONY: browser demo test test-slow test-floors lint docs bench venv lock clean

# .venv itself, its pip upgraded first to the version requirements-ci.txt was resolved with.
$(VENV)/.created:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "zarchive needs Python 3.11 or newer; run make PYTHON=python3.12 (or another 3.11+)")'
	@echo "== creating $(VENV) with $$($(PYTHON) --version), then upgrading its pip"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q $(PIN) --upgrade pip
	touch $@

# make demo: zarchive and its own dependencies.
$(VENV)/.installed-base: $(VENV)/.created pyproject.toml requirements-ci.txt
	@echo "== installing zarchive and its dependencies: numpy, pandas, torch (CPU), muutils, zstandard, safetensors, isal"
	$(PIP) install $(PIN) -e . || { $(NO_TORCH); }
	touch $@

# make test: the same with the test extras, in one pip run (one resolution, one build of zarchive), so
# it also stands for .installed-base.
$(VENV)/.installed: $(VENV)/.created pyproject.toml requirements-ci.txt
	@echo "== installing zarchive, its dependencies and the test extras (pytest, hypothesis, lightning, hydra, moto, ...)"
	$(PIP) install $(PIN) -e ".[test,hf]" || { $(NO_TORCH); }
	touch $(VENV)/.installed-base $@

$(VENV)/.installed-bench: $(VENV)/.installed
	$(PIP) install -q $(PIN) -e ".[test,hf,bench]"
	touch $@

# ruff and mypy at the exact versions of the `lint` extra, beside the test extras: mypy reads the
# types of numpy, torch and pandas from this environment.
$(VENV)/.installed-lint: $(VENV)/.installed
	$(PIP) install -q $(PIN) -e ".[test,hf,lint]"
	touch $@

# The floors, with requirements-ci.txt's versions for everything requirements-floors.txt does not pin
# (check_floors.py --constraints writes the two together).
$(FLOORS_VENV)/.installed: pyproject.toml requirements-ci.txt requirements-floors.txt
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(PYTHON) .ci/check_floors.py --constraints $(FLOORS_VENV)/constraints.txt
	$(FPY) -m pip install -q $(PIN) --upgrade pip
	$(FPY) -m pip install -q -c $(FLOORS_VENV)/constraints.txt $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -e ".[test]" || { $(NO_TORCH); }
	$(FPY) .ci/check_floors.py --installed
	touch $@

venv: $(VENV)/.installed

# The JavaScript reader's npm dependencies, exactly as js/package-lock.json has them (npm ci), for its
# tests, which pytest runs (tests/test_js_reader.py); they skip and say why where node or npm is missing.
js/node_modules/.package-lock.json: js/package-lock.json
	@if command -v npm >/dev/null; then echo "== installing the JavaScript reader's npm dependencies (npm ci)"; \
		npm ci --prefix js --no-audit --no-fund --loglevel=error; \
	else echo "== no npm here: the JavaScript reader's tests will skip"; fi

# The viewer's browser tests drive Debian's chromium through chromium-driver: make test installs both
# with apt-get when it runs as root on a machine that has apt-get and lacks them; elsewhere those
# tests skip and say why.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "== installing chromium and chromium-driver (apt-get), for the viewer's browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else echo "== no chromium + chromedriver here, and not root with apt-get: the browser tests will skip"; fi

demo: $(VENV)/.installed-base
	@echo "== running the demo: $(PY) -m zarchive.demo --out $(DEMO_OUT)"
	@$(PY) -m zarchive.demo --out $(DEMO_OUT)

test: $(VENV)/.installed browser js/node_modules/.package-lock.json
	$(PY) -m pytest -q -m "not slow" tests

# the tests marked slow (also run by CI, in make test-floors), then a long fuzzing run (~4 minutes)
test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow tests
	ZARCHIVE_FUZZ_EXAMPLES=5000 $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz.py

# All three checks run; any failure fails the target.
lint: $(VENV)/.installed-lint
	@status=0; \
	set -x; \
	$(VENV)/bin/ruff check $(LINTED) || status=1; \
	$(VENV)/bin/ruff format --check $(LINTED) || status=1; \
	$(VENV)/bin/mypy zarchive || status=1; \
	exit $$status

# The documentation site (mkdocs.yml): guides from docs/, the API reference from the docstrings, built into
# site/ with every warning an error (a broken link, anchor or reference fails the build).
$(VENV)/.installed-docs: $(VENV)/.installed-base
	$(PIP) install -q $(PIN) -e ".[docs]"
	touch $@

docs: $(VENV)/.installed-docs
	$(VENV)/bin/mkdocs build --strict --quiet

test-floors: $(FLOORS_VENV)/.installed
	$(FPY) .ci/check_floors.py --installed
	$(FPY) -m pytest -q -p no:cacheprovider tests

# Re-resolve requirements-ci.txt for what it does not pin yet; UPGRADE="name ..." moves those packages too.
lock: $(VENV)/.created
	$(PY) .ci/lock.py $(UPGRADE)

bench: $(VENV)/.installed-bench
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) $(FLOORS_VENV) outputs site .pytest_cache .hypothesis .mypy_cache .ruff_cache build *.egg-info
