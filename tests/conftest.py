"""Fixtures shared by several test modules.

Each builds what its tests need, so any test runs alone (``pytest -k NAME``) and in any order:

- ``clean_tracking_env``: none of the caller's MLflow store, parent run or data directory;
- ``empty_project``: the working directory is a checkout with a complete params.yaml (the
  embedded defaults, MLflow experiment ``EMPTY_PROJECT_EXPERIMENT``) and no DVC stage
  (``scratch_project.write_empty_project``, for tests that need several);
- ``tiny_lm``: a random tiny Llama and its tokenizer (``tests/tiny_policy.py``), one per module;
- ``smoke_run``: this tree as a scratch repo with ``profiles/smoke.yaml``, reproduced once by
  ``dvc repro`` (session-scoped; slow: every stage of the DAG), for tests/test_pipeline_smoke.py:
  each of its tests (the repro checks, the plots page, the Prefect deployment rerun, the DVC
  experiment) requests it, so none relies on another having run first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scratch_project import SmokeRun, run_checked, scratch_project, write_empty_project

# What a stage reads from the environment before params.yaml: the tracking store, the parent
# run of a pipeline (tagrpo.pipeline.tracking.PARENT_RUN_ENV) and the benchmark data directory.
TRACKING_ENV = ("MLFLOW_TRACKING_URI", "TAGRPO_PARENT_RUN_ID", "TAGRPO_DATA_DIR")


@pytest.fixture
def clean_tracking_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in TRACKING_ENV:
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def empty_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_tracking_env) -> Path:
    """The working directory: :func:`write_empty_project` in ``tmp_path``."""
    write_empty_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def tiny_lm() -> tuple[Any, Any]:
    """``(model, tokenizer)`` of :func:`tiny_policy.tiny_policy` with seed 0, shared by the tests
    of a module (a test that trains it trains a copy). A module overrides it for another seed."""
    from tiny_policy import tiny_policy  # torch: imported by the tests that use it only

    return tiny_policy(seed=0)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    """This tree as a fresh git repo without outputs, ``profiles/smoke.yaml`` applied, after one
    cold ``dvc repro`` (about 12-40 minutes on 2 busy cores)."""
    checkout = tmp_path_factory.mktemp("smoke-checkout")
    env = scratch_project(checkout, "profiles/smoke.yaml")
    return SmokeRun(checkout, env, run_checked(["dvc", "repro"], checkout, env))
