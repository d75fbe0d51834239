"""MLflow stage runs (tags, params, nesting, secret masking) and params/profile handling."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tagrpo.params import apply_profile, deep_merge, load_params, stage_params
from tagrpo.paths import project_root
from tagrpo.tracking import PARENT_RUN_ENV, flatten_params, log_metrics, stage_run


def test_flatten_params_nests_masks_secrets_and_truncates() -> None:
    flat = flatten_params(
        {
            "rephrase": {"openai": {"model": "gpt", "api_key": "sk-live", "access_token": "t"}},
            "ks": [1, 2],
            "long": "x" * 6000,
        }
    )
    assert flat["rephrase.openai.model"] == "gpt"
    assert flat["rephrase.openai.api_key"] == "***"
    assert flat["rephrase.openai.access_token"] == "***"
    assert flat["ks"] == "[1, 2]"
    assert len(flat["long"]) == 5000 and flat["long"].endswith("...")
    assert "sk-live" not in str(flat)


@pytest.fixture
def tracking_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv(PARENT_RUN_ENV, raising=False)
    return uri


def test_stage_run_tags_commit_stage_and_logs_params(
    tracking_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    params = {"n": 4, "common": {"seed": 7, "tracking": {"experiment": "t-exp"}}}
    with stage_run("evaluate", params, run_name="evaluate-base", tags={"policy": "base"}) as run:
        log_metrics({"bench/pass@1": 0.25, "nan": float("nan"), "label": "text"})
        run_id = run.info.run_id
    client = mlflow.tracking.MlflowClient(tracking_store)
    stored = client.get_run(run_id)
    expected_sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=project_root(), capture_output=True, text=True
    ).stdout.strip()
    assert stored.data.tags["stage"] == "evaluate"
    assert stored.data.tags["policy"] == "base"
    assert stored.data.tags["git_commit"] == expected_sha
    assert stored.data.tags["git_dirty"] in {"true", "false"}
    assert stored.data.params["n"] == "4"
    assert stored.data.params["common.seed"] == "7"
    # '@' is not allowed in MLflow keys; NaN and non-numeric values are not logged.
    assert stored.data.metrics == {"bench/pass_at_1": 0.25}
    assert client.get_experiment(stored.info.experiment_id).name == "t-exp"

    # A second stage started under an orchestrator's run nests under it.
    monkeypatch.setenv(PARENT_RUN_ENV, run_id)
    with stage_run("report", {"common": {"tracking": {"experiment": "t-exp"}}}) as child:
        child_id = child.info.run_id
    assert client.get_run(child_id).data.tags["mlflow.parentRunId"] == run_id


def test_stage_run_can_be_disabled(tracking_store: str, capsys) -> None:
    with stage_run("data", {"common": {"tracking": {"enabled": False}}}) as run:
        assert run is None
        log_metrics({"x": 1.0})  # no active run: a no-op, not an error
    assert "disabled" in capsys.readouterr().out


def test_deep_merge_replaces_scalars_and_lists_and_merges_mappings() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 3}
    merged = deep_merge(base, {"a": {"c": [9]}, "e": {"f": 1}})
    assert merged == {"a": {"b": 1, "c": [9]}, "d": 3, "e": {"f": 1}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 3}  # input untouched


def test_stage_params_adds_common_and_rejects_unknown_sections(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"common": {"seed": 3}, "data": {"source": "synthetic"}}))
    assert stage_params("data", path) == {"source": "synthetic", "common": {"seed": 3}}
    with pytest.raises(KeyError, match="no section 'train'"):
        stage_params("train", path)
    path.write_text("- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        load_params(path)


def test_apply_profile_rewrites_params_with_the_override(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"data": {"source": "synthetic", "limit": 5}}))
    profile = tmp_path / "local.yaml"
    profile.write_text(yaml.safe_dump({"data": {"source": "local"}}))
    merged = apply_profile(profile, params)
    assert merged == {"data": {"source": "local", "limit": 5}}
    assert load_params(params) == merged


def test_shipped_profiles_only_override_known_keys() -> None:
    """A typo in a profile would silently add a param nobody reads: every key must exist."""
    default = load_params(project_root() / "params.yaml")

    def unknown(override: dict, base: dict, prefix: str = "") -> list[str]:
        missing = []
        for key, value in override.items():
            if key not in base:
                missing.append(prefix + key)
            elif isinstance(value, dict) and isinstance(base[key], dict):
                missing += unknown(value, base[key], f"{prefix}{key}.")
        return missing

    profiles = sorted((project_root() / "profiles").glob("*.yaml"))
    assert profiles
    for profile in profiles:
        override = yaml.safe_load(profile.read_text()) or {}
        assert unknown(override, default) == [], profile.name
