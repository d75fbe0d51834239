"""The real DAG, end to end, at smoke scale: `dvc repro` in a copy of this working tree.

This is the only test that runs the stages as DVC runs them (separate processes, params from
params.yaml, outputs checked against dvc.yaml). It uses ``profiles/smoke.yaml``: every stage of
the DAG in about five minutes on 2 cores; its numbers mean nothing, their bookkeeping does.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from scratch_project import ROOT, run_checked, scratch_project

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smoke_checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """This tree as a fresh git repo without outputs, with the smoke profile applied."""
    target = tmp_path_factory.mktemp("checkout")
    return target, scratch_project(target, "profiles/smoke.yaml")


def test_dvc_repro_runs_every_stage_and_reconciles(smoke_checkout) -> None:
    checkout, env = smoke_checkout
    log = run_checked(["dvc", "repro"], checkout, env)
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name in stages:
        assert f"'{name}" in log, f"stage {name} did not run"

    data = json.loads((checkout / "metrics" / "data.json").read_text())
    for counts in [*data["sources"].values(), data["total"]]:
        assert counts["rows_in"] == counts["kept"] + counts["rejected"]
    assert data["sources"]["train/miniworld"]["kept"] == 8
    assert data["sources"]["extra/miniworld"]["kept"] == 12  # the data-scaling pool

    base = json.loads((checkout / "metrics" / "base_model.json").read_text())
    assert base["probe/questions"] == 6.0
    assert 0.0 <= base["probe/success_original"] <= 1.0

    evaluation = json.loads((checkout / "metrics" / "eval" / "base.json").read_text())
    assert evaluation["responses"] == (6 + 4 + 4 + 4) * 4
    assert {"mini_arith/pass@4", "competition/pass@1", "ood/pass@2"} <= set(evaluation)
    assert "mini_arith/pass@8" not in evaluation  # k > n is never reported

    report = (checkout / "reports" / "report.md").read_text()
    assert "pass@4" in report and "train/miniworld" in report
    assert "## Rephrasings and their equivalence checks" in report
    assert "## Diagnostics: gradient vanishing and response diversity" in report
    assert report.count("| ta_grpo-s0 |") >= 3  # base, 50%, 100% (2 training steps)
    diagnostics = json.loads((checkout / "metrics" / "diagnostics.json").read_text())
    assert diagnostics["questions"] == 4.0
    assert 0.0 <= diagnostics["ta_grpo-s0/checkpoint-100/joint/zero_gradient_rate"] <= 1.0
    assert (checkout / "reports" / "diagnostics.png").stat().st_size > 1000
    assert (checkout / "reports" / "figures" / "passk_curves.png").stat().st_size > 1000
    # The claims table, the statistics and every figure/table of the paper, generated.
    assert "## The paper's claims, as this run measures them" in report
    claims = (checkout / "reports" / "claims.md").read_text()
    assert claims.splitlines()[0].startswith("| claim (paper) |") and claims.strip() in report
    for figure in (
        "figure5_passk",
        "figure6_matched_budget",
        "figure7_data_scaling",
        "figure8_ablation",
    ):
        assert (checkout / "reports" / "figures" / f"{figure}.png").stat().st_size > 1000
        assert f"figures/{figure}.png" in report
    scaling = pd.read_csv(checkout / "reports" / "tables" / "data_scaling.csv")
    assert sorted(set(scaling["data_multiple"])) == [1.0, 1.5, 2.0, 2.5]
    scaled = json.loads((checkout / "metrics" / "train" / "grpo_data2.5x-s0.json").read_text())
    one_x = json.loads((checkout / "metrics" / "train" / "grpo-s0.json").read_text())
    assert scaled["steps"] > one_x["steps"]  # same epochs over 2.5x the questions

    # Every stage run is in the project's MLflow store, tagged with stage and commit.
    head = run_checked(["git", "rev-parse", "HEAD"], checkout, env).strip()
    with sqlite3.connect(checkout / "mlflow.db") as db:
        tags = db.execute(
            "SELECT r.run_uuid, t.key, t.value FROM runs r JOIN tags t ON r.run_uuid = t.run_uuid"
        ).fetchall()
    by_run: dict[str, dict[str, str]] = {}
    for run, key, value in tags:
        by_run.setdefault(run, {})[key] = value
    stage_tags = {tags.get("stage") for tags in by_run.values()}
    assert {"data", "base_model", "train", "evaluate", "diagnostics", "report"} <= stage_tags
    assert {tags.get("git_commit") for tags in by_run.values()} == {head}

    # Nothing changed: the second repro reruns nothing.
    again = run_checked(["dvc", "repro"], checkout, env)
    assert "Data and pipelines are up to date" in again


def test_prefect_pipeline_flow_runs_dvc_under_a_parent_run(smoke_checkout) -> None:
    """The Prefect flow (ephemeral server, offline) drives dvc and nests stage runs."""
    checkout, env = smoke_checkout
    env = {
        **env,
        "PREFECT_HOME": str(checkout / ".prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "DO_NOT_TRACK": "true",
    }
    output = run_checked([sys.executable, "-m", "flows.pipeline"], checkout, env)
    # The flow prints its metrics as indented JSON; Prefect's own log lines surround it.
    flat, _ = json.JSONDecoder().raw_decode(output, output.index('{\n "'))
    assert "eval/base.mini_arith/pass@1" in flat
    assert "data.total.rows_in" in flat
    with sqlite3.connect(checkout / "mlflow.db") as db:
        parents = db.execute(
            "SELECT r.run_uuid FROM runs r JOIN tags t ON r.run_uuid = t.run_uuid "
            "WHERE t.key = 'stage' AND t.value = 'pipeline'"
        ).fetchall()
    assert len(parents) == 1


def test_every_dvc_stage_has_a_prefect_flow() -> None:
    from flows.stages import STAGE_FLOWS

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert set(stages) == set(STAGE_FLOWS)
