# `make run` and `make test` do all set-up on a fresh machine (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Install torch pinned, in the same pip command as the package: an unpinned torch would
# resolve to a multi-GB CUDA build (shared/environment.md).
TORCH_PIN ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install run test lint format bench clean notebooks lab dashboard browser oracle oracle-scheduler oracle-prefix
# notebook kernels, nbval and servers import this checkout's cgdispatch (editable install or not)
NOTEBOOK_ENV := PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}
NBVAL_ARGS := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg
# one worker per core (at most 4), each test file on one worker: a notebook's cells run in
# order in one kernel, and a file's module fixtures are built once
XDIST_ARGS := -n auto --maxprocesses 4 --dist loadfile
DASHBOARD_NOTEBOOK ?= notebooks/dashboard.ipynb
DASHBOARD_PORT ?= 8866
LAB_PORT ?= 8888

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)" -e ".[all]"
	touch $(STAMP)

install: $(STAMP)

# the README's decision (its `tune` command, README.md): printed last by `make run` and the
# headline of the offline report (build/report/headline.txt)
README_TUNE ?= --model llama-3.1-8b --device H200 --trace sharegpt --rate 8 --max-num-seqs 256

# the main job on the built-in default (toy model; CPU without a GPU): dispatcher demo, the
# smoke sweep (resumable) and its report, every notebook headless with an HTML report, and
# the README's tune decision, printed last
run: install
	$(PY) -m cgdispatch demo
	$(PY) -m cgdispatch sweep --preset smoke --out build/smoke --resume
	$(PY) -m cgdispatch report build/smoke --out build/smoke/report
	mkdir -p build/report && $(PY) -m cgdispatch tune $(README_TUNE) > build/report/headline.txt
	$(NOTEBOOK_ENV) $(PY) scripts/run_notebooks.py
	@echo "== the README's decision (python -m cgdispatch tune $(README_TUNE)):"
	@cat build/report/headline.txt

# one pytest run: unit, CLI and browser tests in tests/, nbval on the committed notebooks
test: install browser
	$(NOTEBOOK_ENV) $(PY) -m pytest -q $(XDIST_ARGS) $(NBVAL_ARGS) tests notebooks

# Debian's Chromium for the real-browser tests (never `playwright install`); as root only,
# elsewhere the browser tests skip and say why
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# execute every notebook headless (papermill) into build/notebooks/, HTML report in build/report/
notebooks: install
	$(NOTEBOOK_ENV) $(PY) scripts/run_notebooks.py

lab: install
	$(NOTEBOOK_ENV) $(VENV)/bin/jupyter-lab --no-browser --ip 127.0.0.1 --port $(LAB_PORT) \
		$(if $(filter 0,$(shell id -u)),--allow-root) --ServerApp.root_dir=notebooks

dashboard: install
	$(NOTEBOOK_ENV) $(VENV)/bin/voila $(DASHBOARD_NOTEBOOK) --no-browser --port $(DASHBOARD_PORT) \
		--Voila.ip=127.0.0.1

# every benchmark exits 1 on a missed target (benchmarks/targets.py): the run stops there
bench: install
	@for b in benchmarks/bench_*.py; do echo "== $$b"; \
		$(PY) $$b || { echo "make bench: $$b missed a target or failed (above)"; exit 1; }; done

clean:
	rm -rf build .pytest_cache .ruff_cache

# The vLLM oracle (tests/data/vllm_oracle/README.md): one virtualenv per vLLM version under
# .oracle/, built from scratch (torch CPU, the vLLM wheel with --no-deps, the pinned
# pure-Python packages its imports need, no Triton), then vLLM's own config resolution and
# dispatch run on random configs and batches and rewrite the JSON fixtures. `make test`
# never needs it. About 6 minutes on 2 cores (README.md).
ORACLE_DIR ?= .oracle
ORACLE_VERSIONS ?= 0.33.0 0.34.0
ORACLE_PYTHON ?= python3
ORACLE_DATA := tests/data/vllm_oracle

oracle:
	@set -e; for v in $(ORACLE_VERSIONS); do \
		venv=$(ORACLE_DIR)/vllm-$$v; \
		case $$v in 0.33.*) cases=600;; *) cases=500;; esac; \
		echo "== vLLM $$v: virtualenv $$venv"; \
		rm -rf $$venv; $(ORACLE_PYTHON) -m venv $$venv; \
		$$venv/bin/pip install -q "$(TORCH_PIN)"; \
		$$venv/bin/pip download -q --no-deps vllm==$$v -d $(ORACLE_DIR)/wheels; \
		$$venv/bin/pip install -q --no-deps $(ORACLE_DIR)/wheels/vllm-$$v-*.whl; \
		$$venv/bin/pip install -q --no-deps -r scripts/vllm_oracle_requirements.txt; \
		$$venv/bin/pip install -q --no-deps xgrammar==0.2.8; \
		$$venv/bin/python scripts/vllm_oracle.py --out $(ORACLE_DATA)/vllm-$$v.json --cases $$cases; \
	done

# vLLM's own Scheduler / AsyncScheduler on random traces (scripts/vllm_sched_oracle.py), in the
# virtualenvs `make oracle` builds; rewrites tests/data/vllm_oracle/scheduler-*.json (~1 min)
oracle-scheduler:
	@set -e; for v in $(ORACLE_VERSIONS); do \
		test -x $(ORACLE_DIR)/vllm-$$v/bin/python || { echo "run make oracle first"; exit 1; }; \
		$(ORACLE_DIR)/vllm-$$v/bin/python scripts/vllm_sched_oracle.py \
			--out $(ORACLE_DATA)/scheduler-$$v.json --cases 400; \
	done

# the same with vLLM's prefix caching on, traces with shared prefixes; rewrites
# tests/data/vllm_oracle/scheduler-prefix-*.json (~4 min)
oracle-prefix:
	@set -e; for v in $(ORACLE_VERSIONS); do \
		test -x $(ORACLE_DIR)/vllm-$$v/bin/python || { echo "run make oracle first"; exit 1; }; \
		$(ORACLE_DIR)/vllm-$$v/bin/python scripts/vllm_sched_oracle.py --prefix \
			--out $(ORACLE_DATA)/scheduler-prefix-$$v.json --cases 320 --seed 20261205; \
	done
