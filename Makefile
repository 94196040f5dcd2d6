# Two commands: `make demo` runs the main job, `make test` runs the whole test suite.
# Each creates/updates the virtual environment in .venv and installs what it needs: the demo only the
# package and its dependencies (`pip install -e .`), the tests also the [dev] extras (torch, transformers,
# JupyterLab, Playwright, ...).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed

.PHONY: demo test lint bench venv system-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	@touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP) $(DEMO_STAMP)

venv: $(STAMP)

system-deps:
	@bash scripts/install_system_deps.sh

demo: $(DEMO_STAMP)
	@bash scripts/install_system_deps.sh --quiet --demo
	$(PY) -m caten_lab.cli demo

test: $(STAMP)
	@bash scripts/install_system_deps.sh --quiet
	$(PY) -m ruff check caten_lab tests bench assets
	$(PY) -m pytest -n 2 --dist loadscope tests

lint: $(STAMP)
	$(PY) -m ruff check caten_lab tests bench assets
	$(PY) -m ruff format --check caten_lab tests bench assets

bench: $(STAMP)
	$(PY) bench/air_scaling.py --quick

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
