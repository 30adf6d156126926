# biomoe — set-up is part of every target: a virtualenv is created and the package installed
# on first use. TORCH selects the torch requirement: CI and CPU machines here use the local CPU
# build (torch==2.13.0); on a GPU machine use e.g. `make fit TORCH=torch` (CUDA wheel, several GB).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
EXTRAS ?= dev
CONFIG ?= configs/default.yaml
PYTEST_ARGS ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.biomoe-installed

.PHONY: install fit test data smoke-2gpu bench notebook clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@touch $(STAMP)

install: $(STAMP)

fit: install
	$(PY) cli.py fit --config $(CONFIG)

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

data:
	bash scripts/fetch_data.sh

clean:
	rm -rf runs lightning_logs .pytest_cache

# GPU targets run with whatever python has torch+CUDA (the venv if present, else python3).
RUNPY := $(shell test -x $(PY) && echo $(PY) || echo python3)
BENCH_ARGS ?= --sweep

bench:
	$(RUNPY) -m biomoe.bench --out results/bench $(BENCH_ARGS)
