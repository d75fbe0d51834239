"""MLflow stage runs: tags, params, nesting, secret masking (runs a dead process left RUNNING:
tests/test_dead_runs.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tagrpo.config.params import config_with
from tagrpo.pipeline.stage_run import stage_run
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.tracking import (
    KEY_PARAMS,
    PARAMS_ARTIFACT,
    PARENT_RUN_ENV,
    flatten_params,
    log_metrics,
    redact_tree,
)


def test_flatten_params_nests_masks_secrets_and_truncates() -> None:
    flat = flatten_params(
        {
            "rephrase": {"openai": {"model": "gpt", "api_key": "sk-live", "access_token": "t"}},
            "leaked": "sk-proj-abcdefghijklmnop1234",  # key-shaped under an innocent name
            "ks": [1, 2, "Bearer abcdefghijklmn"],
            "long": "x" * 6000,
        }
    )
    assert flat["rephrase.openai.model"] == "gpt"
    assert flat["rephrase.openai.api_key"] == "***"
    assert flat["rephrase.openai.access_token"] == "***"
    assert flat["leaked"] == "***"
    assert flat["ks"] == '[1, 2, "***"]'
    assert len(flat["long"]) == 5000 and flat["long"].endswith("...")
    assert "sk-live" not in str(flat) and "sk-proj" not in str(flat)
    # The params.json artifact is redacted the same way, at every depth.
    tree = redact_tree(
        {"openai": {"api_key": "sk-live", "model": "gpt"}, "ks": ["Bearer abcdefghijklmn"]}
    )
    assert tree == {"openai": {"api_key": "***", "model": "gpt"}, "ks": ["***"]}


@pytest.fixture
def tracking_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv(PARENT_RUN_ENV, raising=False)
    return uri


def test_stage_run_tags_commit_stage_and_logs_params(
    tracking_store: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import mlflow

    config = config_with({"common.seed": 7, "common.tracking.experiment": "t-exp"})
    with stage_run(
        "evaluate",
        config,
        key="base",
        dvc_name="evaluate_base",  # as stages/evaluate.py names it
        tags={"policy": "base"},
        log_sections=("evaluate",),
        run_params={"run": {"n": 4}},
    ) as run:
        # The metrics file's keys, in its (text) order: 1, 16, 2, 32, 4, 8.
        ks = (1, 16, 2, 32, 4, 8)
        log_metrics({f"bench/pass@{k}": k / 100 for k in ks} | {"nan": float("nan"), "label": "x"})
        run_id = run.info.run_id
    client = mlflow.tracking.MlflowClient(tracking_store)
    stored = client.get_run(run_id)
    expected_sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=project_root(), capture_output=True, text=True
    ).stdout.strip()
    assert stored.info.status == "FINISHED"
    assert stored.data.tags["stage"] == "evaluate"
    assert stored.data.tags["policy"] == "base"
    assert stored.data.tags["tagrpo.dvc_stage"] == "evaluate_base"  # DVC's name of that stage
    assert stored.data.tags["tagrpo.pid"] == str(os.getpid())
    assert stored.data.tags["git_commit"] == expected_sha
    assert stored.data.tags["git_dirty"] in {"true", "false"}
    assert stored.data.tags["profile"] == "embedded"
    assert stored.data.tags["model"] == "warmstart-llama-h128-l2"
    assert stored.data.tags["backend"] == "hf"  # evaluate.backend
    # A short list of key params as columns; every value of the sections in params.json.
    assert stored.data.params["run.n"] == "4"
    assert stored.data.params["common.seed"] == "7"
    assert stored.data.params["evaluate.n"] == "64"
    assert "evaluate.bootstrap_resamples" not in stored.data.params
    assert "common.grading.workers" not in stored.data.params
    assert set(stored.data.params) <= {*KEY_PARAMS, "run.n"}
    artifact = json.loads(
        Path(client.download_artifacts(run_id, PARAMS_ARTIFACT, str(tmp_path))).read_text()
    )
    assert artifact["evaluate"]["bootstrap_resamples"] == 1000
    assert artifact["common"]["grading"]["workers"] == 2
    # pass@k is one curve per benchmark, step = k (MLflow draws a line over k, in numeric
    # order); NaN and non-numbers are not logged. The table shows the largest k's value.
    assert stored.data.metrics == {"pass_at_k/bench": 0.32}
    history = client.get_metric_history(run_id, "pass_at_k/bench")
    assert sorted((m.step, m.value) for m in history) == [
        (1, 0.01),
        (2, 0.02),
        (4, 0.04),
        (8, 0.08),
        (16, 0.16),
        (32, 0.32),
    ]
    # What the UI orders the chart's x axis by: the step, a number.
    assert all(isinstance(m.step, int) for m in history)
    experiment = client.get_experiment(stored.info.experiment_id)
    # The experiment opens on its runs, not on MLflow's GenAI overview.
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert stored.data.tags["tagrpo.checkout"] == f"{socket.gethostname()}:{project_root()}"
    assert client.get_experiment(stored.info.experiment_id).name == "t-exp"

    # A second stage started under an orchestrator's run nests under it.
    monkeypatch.setenv(PARENT_RUN_ENV, run_id)
    with stage_run("report", config) as child:
        child_id = child.info.run_id
    assert client.get_run(child_id).data.tags["mlflow.parentRunId"] == run_id


def test_a_failed_or_interrupted_stage_ends_its_run(tracking_store: str) -> None:
    import mlflow

    config = config_with({"common.tracking.experiment": "t-exp"})
    client = mlflow.tracking.MlflowClient(tracking_store)
    with pytest.raises(RuntimeError), stage_run("data", config) as run:
        failed = run.info.run_id
        raise RuntimeError("boom")
    with pytest.raises(KeyboardInterrupt), stage_run("data", config) as run:
        killed = run.info.run_id
        raise KeyboardInterrupt
    assert client.get_run(failed).info.status == "FAILED"
    assert client.get_run(killed).info.status == "KILLED"


def test_stage_run_can_be_disabled(tracking_store: str, capsys) -> None:
    with stage_run("data", config_with({"common.tracking.enabled": False})) as run:
        assert run is None
        log_metrics({"x": 1.0})  # no active run: a no-op, not an error
    assert "disabled" in capsys.readouterr().out


def test_key_shapes_never_reach_mlflow_tags_run_names_or_params(
    tracking_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40.4: a dvc command line carries what the user typed (`dvc exp run -S
    rephrase.openai.model=sk-...`), a stage's tags and an error message too: every value is
    checked for key shapes before MLflow stores it; checksums and run ids stay readable."""
    from mlflow.tracking import MlflowClient

    from tagrpo.pipeline.parent_run import DvcProcess, _create_parent_run
    from tagrpo.pipeline.stage_run import record_stage_failure

    key = "sk-proj" + "A1b2C3d4E5f6G7h8"
    client = MlflowClient(tracking_store)
    experiment = client.create_experiment("keys")
    dvc = DvcProcess(
        os.getpid(), 1, ("exp", "run", "-S", f"rephrase.openai.model={key}"), str(Path.cwd())
    )
    parent = client.get_run(_create_parent_run(client, experiment, config_with(), dvc))
    stored = json.dumps([parent.data.tags, parent.data.params, parent.info.run_name])
    assert key not in stored and "rephrase.openai.model=[redacted" in stored

    config = config_with({"common.tracking.experiment": "keys"})
    md5 = "c0c08093f1e2d3c4b5a6978877665544"
    with stage_run("train", config, key="grpo-s0", tags={"note": f"from {key}"}) as run:
        run_id = run.info.run_id
    stored = client.get_run(run_id)
    assert key not in json.dumps([stored.data.tags, stored.data.params])
    failed = record_stage_failure("evaluate", 1, RuntimeError(f"{md5} != {md5}: {key}"))
    tags = client.get_run(failed).data.tags
    assert key not in json.dumps(tags) and tags["tagrpo.error"].startswith(f"RuntimeError: {md5}")
