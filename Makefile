# `make run` and `make test` do all set-up on a fresh machine (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Install torch pinned, in the same pip command as the package: an unpinned torch would
# resolve to a multi-GB CUDA build (shared/environment.md).
TORCH_PIN ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install run test lint format bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)" -e ".[all]"
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) -m cgdispatch demo
	$(PY) -m cgdispatch sweep --preset smoke --out runs/smoke --resume
	$(PY) -m cgdispatch report runs/smoke --out runs/smoke/report

test: install
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: install
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf build .pytest_cache .ruff_cache
