"""`tagrpo compare` against a real MLflow store (SQLite) filled the way the stages fill it."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from tagrpo.cli import main
from tagrpo.compare import combine, compare, latest_evaluations, parse_metrics
from tagrpo.config.params import config_with
from tagrpo.tracking import PARENT_RUN_ENV, log_metrics, metric_name, stage_run
from tagrpo.tracking_assets import log_passk_intervals


def _evaluation(
    config, policy: str, method: str, seed: int, value: float, data_multiple: str = "1"
) -> str:
    """An evaluate stage's run: its pass@k metrics file keys, its intervals."""
    passk = pd.DataFrame(
        [
            ["mini_arith", "benchmark", 1, value, value - 0.05, value + 0.05],
            ["mini_arith", "benchmark", 4, value + 0.2, value + 0.1, value + 0.3],
            ["competition", "group", 4, value + 0.1, float("nan"), float("nan")],
        ],
        columns=["name", "kind", "k", "pass_at_k", "ci_low", "ci_high"],
    )
    tags = {"policy": policy, "method": method, "seed": str(seed), "data_multiple": data_multiple}
    with stage_run("evaluate", config, key=policy, tags=tags, log_sections=("evaluate",)) as run:
        log_metrics({f"{r.name}/pass@{r.k}": r.pass_at_k for r in passk.itertuples()})
        log_passk_intervals(passk)
    time.sleep(0.01)  # distinct start times: "latest" is well defined
    return run.info.run_id


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv(PARENT_RUN_ENV, raising=False)
    smoke = config_with({"common.profile": "smoke", "common.tracking.experiment": "cmp"})
    other = config_with({"common.profile": "other", "common.tracking.experiment": "cmp"})
    _evaluation(smoke, "base", "base", 0, 0.30)
    _evaluation(smoke, "ta_grpo-s0", "ta_grpo", 0, 0.10)  # superseded by the next one
    _evaluation(smoke, "grpo-s0", "grpo", 0, 0.40)
    _evaluation(smoke, "ta_grpo-s0", "ta_grpo", 0, 0.50)
    _evaluation(smoke, "grpo-s1", "grpo", 1, 0.44)
    _evaluation(smoke, "grpo_data2.0x-s0", "grpo", 0, 0.90, "2")  # a column of its own
    _evaluation(other, "ta_grpo-s0", "ta_grpo", 0, 0.99)  # another profile: not compared
    _evaluation(smoke, "avspo-s0", "avspo", 0, 0.20)  # the most recent: sets the profile
    return uri


def test_metric_names_are_namespaced() -> None:
    assert metric_name("mini_arith/pass@4") == "pass_at_k/mini_arith/4"
    assert metric_name("competition/pass@32") == "pass_at_k/competition/32"
    assert metric_name("probe/success_original") == "probe/success_original"
    assert metric_name("a@b") == "a_at_b"
    passk, intervals = parse_metrics(
        {
            "pass_at_k/mini_arith/4": 0.5,
            "pass_at_k_ci/mini_arith/4/low": 0.4,
            "pass_at_k_ci/mini_arith/4/high": 0.6,
            "seconds": 3.0,
        }
    )
    assert passk == {("mini_arith", 4): 0.5}
    assert intervals == {("mini_arith", 4): (0.4, 0.6)}


def test_latest_run_per_policy_of_the_latest_profile(store: str) -> None:
    from mlflow.tracking import MlflowClient

    profile, runs = latest_evaluations(MlflowClient(store), "cmp")
    assert profile == "smoke"
    by_policy = {run.policy: run for run in runs}
    assert set(by_policy) == {
        "base",
        "ta_grpo-s0",
        "grpo-s0",
        "grpo-s1",
        "grpo_data2.0x-s0",
        "avspo-s0",
    }
    assert by_policy["ta_grpo-s0"].passk[("mini_arith", 1)] == pytest.approx(0.50)
    assert by_policy["ta_grpo-s0"].intervals[("mini_arith", 1)] == pytest.approx((0.45, 0.55))
    assert ("competition", 4) not in by_policy["ta_grpo-s0"].intervals  # groups: no CI

    table = compare(runs, profile)
    # base first, then the registry's order; data-scaling columns after their method
    assert table.methods[:3] == ["base", "grpo", "grpo_data2.0x"]
    assert table.cells[("mini_arith", 1, "grpo_data2.0x")].value == pytest.approx(0.90)
    assert table.rows[-1] == ("competition", 4)  # benchmarks (with CIs) before groups
    two_seeds = table.cells[("mini_arith", 1, "grpo")]
    assert two_seeds.seeds == 2 and two_seeds.value == pytest.approx(0.42)
    # mean 0.42, sd 0.0283 over 2 seeds: t(0.975, 1) = 12.706 -> half-width 0.254
    assert two_seeds.high - two_seeds.value == pytest.approx(12.706 * 0.02828 / 2**0.5, rel=1e-3)
    one_seed = table.cells[("mini_arith", 1, "ta_grpo")]
    assert (one_seed.low, one_seed.high, one_seed.seeds) == pytest.approx((0.45, 0.55, 1))
    assert combine([], ("x", 1)) is None


def test_compare_cli_prints_the_table_with_intervals(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["compare", "--experiment", "cmp", "--method", "ta_grpo", "--method", "grpo"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert "profile 'smoke'" in lines[0]
    header = next(line for line in lines if line.startswith("benchmark"))
    assert header.split() == ["benchmark", "k", "grpo", "ta_grpo"]
    row = next(line for line in lines if line.startswith("mini_arith") and " 1 " in line)
    assert "50.0 [45.0, 55.0]" in row  # ta_grpo's latest run, not the superseded 10.0
    assert "42.0 [" in row  # grpo: mean of two seeds with its t-interval
    assert "99.0" not in out and "avspo" not in header
    assert "ta_grpo: seed 0 run" in out

    assert main(["compare", "--experiment", "cmp", "--format", "csv", "--k", "4"]) == 0
    csv_lines = capsys.readouterr().out.strip().splitlines()
    assert csv_lines[0] == "benchmark,k,method,pass_at_k,low,high,seeds"
    assert all(",4," in line for line in csv_lines[1:])


def test_compare_cli_fails_loudly(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--experiment", "missing"]) == 2
    assert "no MLflow experiment 'missing'" in capsys.readouterr().err
    assert main(["compare", "--experiment", "cmp", "--method", "grpo_x4"]) == 2
    assert "no finished evaluation of ['grpo_x4']" in capsys.readouterr().err
