"""Fixtures shared by several test modules.

Each builds what its tests need, so any test runs alone (``pytest -k NAME``) and in any order:

- ``clean_tracking_env``: none of the caller's MLflow store, parent run or data directory;
- ``empty_project``: the working directory is a checkout with a complete params.yaml (the
  embedded defaults, MLflow experiment ``EMPTY_PROJECT_EXPERIMENT``) and no DVC stage
  (``scratch_project.write_empty_project``, for tests that need several);
- ``saved``: every matplotlib figure a test saves, to check what it draws;
- ``tiny_lm``: a random tiny Llama and its tokenizer (``tests/tiny_policy.py``), one per module;
- ``smoke_run``: this tree as a fresh clone (committed dvc.lock and outputs) with
  ``profiles/smoke.yaml`` applied, reproduced once by ``dvc repro`` (session-scoped; slow:
  every stage of the DAG), for tests/test_pipeline_smoke.py:
  each of its tests (the repro checks, the plots page, the Prefect deployment rerun, the DVC
  experiment) requests it, so none relies on another having run first;
- ``vllm_server``: a genuine ``vllm serve`` of the engines environment (tests/vllm_engine.py),
  one start (1-2 minutes) for every genuine-engine module of the session;
- ``wall_seconds``: log how long a part of a test took; printed in the summary ("wall seconds"),
  never asserted (speed belongs to benchmarks/).

And the harness's hooks (tests/harness.py): a NOT TESTED skip fails when ``CI=true``
(tests/not_tested.py), a test marked both ``core`` and ``slow`` is refused, logged wall
seconds are printed in the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import (  # noqa: F401  (hooks and a fixture, registered by being here)
    pytest_collection_finish,
    pytest_collection_modifyitems,
    pytest_configure_node,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_testnodedown,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
    wall_seconds,
)
from not_tested import not_tested
from scratch_project import SmokeRun, run_checked, scratch_project, write_empty_project

# What a stage reads from the environment before params.yaml: the tracking store, the parent
# run of a pipeline (tagrpo.plumbing.tracking.PARENT_RUN_ENV) and the benchmark data directory.
TRACKING_ENV = ("MLFLOW_TRACKING_URI", "TAGRPO_PARENT_RUN_ID", "TAGRPO_DATA_DIR")


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every matplotlib figure saved during the test (drawn, then written as usual): figure
    tests check what is drawn (axes, series, labels), not the file's size."""
    from matplotlib.figure import Figure

    figures: list[Figure] = []
    original = Figure.savefig

    def record(self: Figure, *args: Any, **kwargs: Any) -> None:
        figures.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return figures


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
    """This tree as a user's fresh clone (the committed dvc.lock and outputs, no DVC cache),
    ``tagrpo params apply profiles/smoke.yaml``, then one ``dvc repro``: the README's profile
    path (every stage runs; about 12-40 minutes on 2 busy cores)."""
    checkout = tmp_path_factory.mktemp("smoke-checkout")
    env = scratch_project(checkout, "profiles/smoke.yaml", fresh_clone=True)
    log = run_checked(["dvc", "repro"], checkout, env, timeout=55 * 60)
    return SmokeRun(checkout, env, log)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    """:class:`vllm_engine.VLLMServer` serving SmolLM2-135M-Instruct as ``policy`` on a free
    loopback port; stopped at the end of the session (or on any failure, Ctrl-C included), with
    nothing left on its port or in its processes. Skips, NOT TESTED, without ``make engines``."""
    from vllm_engine import VLLMServer, alive, engines_missing, port_in_use

    if engines_missing():
        not_tested(str(engines_missing()))
    running = VLLMServer(tmp_path_factory.mktemp("vllm") / "server.log")
    with running:
        yield running
    assert not port_in_use(running.port), f"port {running.port} still in use after stop"
    left = [pid for pid in running.pids if alive(pid)]
    assert not left, f"server processes left after stop: {left}"
