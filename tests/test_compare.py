"""`tagrpo compare` against a real MLflow store (SQLite) filled the way the stages fill it."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

from tagrpo.config.params import config_with
from tagrpo.pipeline.cli import build_parser, main
from tagrpo.pipeline.compare import (
    by_checkout,
    combine,
    compare,
    latest_evaluations,
    parse_metrics,
    render,
)
from tagrpo.pipeline.stage_run import stage_run
from tagrpo.plumbing.tracking import (
    PARENT_RUN_ENV,
    checkout_id,
    log_metrics,
    metric_name,
)
from tagrpo.plumbing.tracking_assets import log_passk_intervals

COMMIT = "a" * 40


def _evaluation(
    config,
    policy: str,
    method: str,
    seed: int,
    value: float,
    data_multiple: str = "1",
    commit: str = COMMIT,
) -> str:
    """An evaluate stage's run: its pass@k metrics file keys, its intervals."""
    passk = pd.DataFrame(
        [
            ["mini_chains", "benchmark", 1, value, value - 0.05, value + 0.05],
            ["mini_chains", "benchmark", 4, value + 0.2, value + 0.1, value + 0.3],
            ["competition", "group", 4, value + 0.1, float("nan"), float("nan")],
        ],
        columns=["name", "kind", "k", "pass_at_k", "ci_low", "ci_high"],
    )
    tags = {
        "policy": policy,
        "method": method,
        "seed": str(seed),
        "data_multiple": data_multiple,
        "git_commit": commit,
        "git_dirty": "false",
    }
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
    # The checkout's params.yaml says profile "embedded"; a smoke run came last.
    embedded = config_with({"common.tracking.experiment": "cmp"})
    smoke = config_with({"common.profile": "smoke", "common.tracking.experiment": "cmp"})
    _evaluation(embedded, "base", "base", 0, 0.30)
    _evaluation(embedded, "ta_grpo-s0", "ta_grpo", 0, 0.10)  # superseded by the next one
    _evaluation(embedded, "grpo-s0", "grpo", 0, 0.40)
    _evaluation(embedded, "ta_grpo-s0", "ta_grpo", 0, 0.50)
    _evaluation(embedded, "grpo-s1", "grpo", 1, 0.44)
    _evaluation(embedded, "grpo_data2.0x-s0", "grpo", 0, 0.90, "2")  # a column of its own
    _evaluation(embedded, "avspo-s0", "avspo", 0, 0.20)
    _evaluation(smoke, "ta_grpo-s0", "ta_grpo", 0, 0.0)  # the most recent: another profile
    _evaluation(smoke, "grpo-s0", "grpo", 0, 0.0)
    return uri


def test_metric_names_are_namespaced() -> None:
    assert metric_name("mini_chains/pass@4") == "pass_at_k/mini_chains"  # a curve, step = k
    assert metric_name("competition/pass@32") == "pass_at_k/competition"
    assert metric_name("probe/success_original") == "probe/success_original"
    assert metric_name("a@b") == "a_at_b"
    # Runs logged before pass@k became curves still read.
    passk, intervals = parse_metrics(
        {
            "pass_at_k/mini_chains/4": 0.5,
            "pass_at_k_ci/mini_chains/4/low": 0.4,
            "pass_at_k_ci/mini_chains/4/high": 0.6,
            "seconds": 3.0,
        }
    )
    assert passk == {("mini_chains", 4): 0.5}
    assert intervals == {("mini_chains", 4): (0.4, 0.6)}


def test_latest_run_per_policy_of_the_profile(store: str) -> None:
    from mlflow.tracking import MlflowClient

    runs = latest_evaluations(MlflowClient(store), "cmp", "embedded", checkout_id())
    by_policy = {run.policy: run for run in runs}
    assert set(by_policy) == {
        "base",
        "ta_grpo-s0",
        "grpo-s0",
        "grpo-s1",
        "grpo_data2.0x-s0",
        "avspo-s0",
    }
    assert by_policy["ta_grpo-s0"].passk == pytest.approx(
        {("mini_chains", 1): 0.50, ("mini_chains", 4): 0.70, ("competition", 4): 0.60}
    )
    intervals = by_policy["ta_grpo-s0"].intervals
    assert set(intervals) == {("mini_chains", 1), ("mini_chains", 4)}  # groups: no CI
    assert intervals[("mini_chains", 1)] == pytest.approx((0.45, 0.55))
    assert intervals[("mini_chains", 4)] == pytest.approx((0.60, 0.80))

    table = compare(runs, "embedded")
    # base first, then the registry's order; data-scaling columns after their method
    assert table.methods[:3] == ["base", "grpo", "grpo_data2.0x"]
    assert table.cells[("mini_chains", 1, "grpo_data2.0x")].value == pytest.approx(0.90)
    assert table.rows[-1] == ("competition", 4)  # benchmarks (with CIs) before groups
    two_seeds = table.cells[("mini_chains", 1, "grpo")]
    assert two_seeds.seeds == 2 and two_seeds.value == pytest.approx(0.42)
    # mean 0.42, sd 0.0283 over 2 seeds: t(0.975, 1) = 12.706 -> half-width 0.254
    assert two_seeds.high - two_seeds.value == pytest.approx(12.706 * 0.02828 / 2**0.5, rel=1e-3)
    one_seed = table.cells[("mini_chains", 1, "ta_grpo")]
    assert (one_seed.low, one_seed.high, one_seed.seeds) == pytest.approx((0.45, 0.55, 1))
    assert combine([], ("x", 1)) is None


def test_compare_cli_uses_the_checkouts_profile_not_the_latest_run(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["compare", "--experiment", "cmp", "--method", "ta_grpo", "--method", "grpo"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    # params.yaml's profile, although the most recent evaluations are smoke runs (all zero).
    assert lines[0] == f"pass@k (%), profile 'embedded', checkout {checkout_id()}"
    assert lines[1] == (
        "[several seeds: mean and t 95% CI over seeds; "
        "* one seed: bootstrap 95% CI over problems, conditional on that seed]"
    )
    header = next(line for line in lines if line.startswith("benchmark"))
    assert header.split() == ["benchmark", "k", "grpo", "ta_grpo"]
    row = next(line for line in lines if line.startswith("mini_chains") and " 1 " in line)
    # ta_grpo's latest run (not the superseded 10.0), one seed: its interval is marked.
    assert "50.0 [45.0, 55.0]*" in row
    assert "42.0 [" in row and "42.0 [12." not in row  # grpo: two seeds' mean, t-interval
    assert row.count("*") == 1
    assert "avspo" not in header and "MIXED" not in out
    assert "ta_grpo: seed 0 run" in out and f"all runs at commit {COMMIT[:8]}" in out

    assert main(["compare", "--experiment", "cmp", "--profile", "smoke", "--k", "1"]) == 0
    smoke = capsys.readouterr().out
    assert "profile 'smoke'" in smoke and "0.0 [" in smoke

    assert main(["compare", "--experiment", "cmp", "--format", "csv", "--k", "4"]) == 0
    csv_lines = capsys.readouterr().out.strip().splitlines()
    assert csv_lines[0] == "benchmark,k,method,pass_at_k,low,high,seeds,interval,checkout"
    assert all(",4," in line for line in csv_lines[1:])
    ta_grpo = next(line for line in csv_lines if line.startswith("mini_chains,4,ta_grpo,"))
    assert ta_grpo.endswith(f",1,bootstrap_given_seed,{checkout_id()}")
    grpo = next(line for line in csv_lines if line.startswith("mini_chains,4,grpo,"))
    assert grpo.endswith(f",2,t_over_seeds,{checkout_id()}")


def test_runs_of_several_commits_are_labelled(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_with({"common.tracking.experiment": "cmp"})
    _evaluation(config, "grpo-s1", "grpo", 1, 0.46, commit="b" * 40)
    assert main(["compare", "--experiment", "cmp", "--method", "grpo", "--k", "1"]) == 0
    out = capsys.readouterr().out
    assert f"MIXED: runs from 2 commits ({'a' * 8}, {'b' * 8}); each run's is below" in out
    assert f"commit {'a' * 8})" in out and f"commit {'b' * 8})" in out


def test_runs_of_other_checkouts_are_never_mixed_in(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    config = config_with({"common.tracking.experiment": "cmp"})
    other = "otherhost:/elsewhere/tagrpo"
    run_id = _evaluation(config, "ta_grpo-s0", "ta_grpo", 0, 0.77)
    MlflowClient(store).set_tag(run_id, "tagrpo.checkout", other)  # as that checkout tags it

    assert main(["compare", "--experiment", "cmp", "--method", "ta_grpo", "--k", "1"]) == 0
    mine = capsys.readouterr().out
    assert "50.0 [45.0, 55.0]*" in mine and "77.0" not in mine  # this checkout's latest

    assert main(["compare", "--experiment", "cmp", "--checkout", "all", "--k", "1"]) == 0
    both = capsys.readouterr().out
    titles = [line for line in both.splitlines() if line.startswith("pass@k (%)")]
    assert sorted(titles) == sorted(
        f"pass@k (%), profile 'embedded', checkout {where}" for where in (checkout_id(), other)
    )
    assert "77.0 [72.0, 82.0]*" in both and "50.0 [45.0, 55.0]*" in both

    runs = latest_evaluations(MlflowClient(store), "cmp", "embedded", None)
    assert set(by_checkout(runs)) == {checkout_id(), other}
    with pytest.raises(ValueError, match="several checkouts"):
        compare(runs, "embedded")
    assert main(["compare", "--experiment", "cmp", "--checkout", "nohost:/x"]) == 2
    assert "(8 in other checkouts: --checkout all shows them)" in capsys.readouterr().err
    table = compare(by_checkout(runs)[other], "embedded")
    assert render(table).splitlines()[0].endswith(f"checkout {other}")


def test_compare_cli_fails_loudly(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--experiment", "missing"]) == 2
    assert "no MLflow experiment 'missing'" in capsys.readouterr().err
    assert main(["compare", "--experiment", "cmp", "--method", "grpo_x4"]) == 2
    assert "no finished evaluation of ['grpo_x4']" in capsys.readouterr().err


def test_compare_help_says_95_percent() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    text = subparsers.choices["compare"].format_help()
    assert "95% intervals" in text and "%%" not in text


def test_a_k_or_benchmark_no_run_has_is_refused_with_those_there_are(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--k 1 --k 32 with ks 1 and 4 logged: not a table of k=1 alone (issue 33.10)."""
    assert main(["compare", "--experiment", "cmp", "--k", "1", "--k", "32"]) == 2
    assert capsys.readouterr().err == (
        "tagrpo compare: no pass@k for k 32 in the evaluations of profile 'embedded': they "
        f"have k 1, 4 ({store})\n"
    )
    assert main(["compare", "--experiment", "cmp", "--benchmark", "aime24"]) == 2
    assert capsys.readouterr().err == (
        "tagrpo compare: no pass@k for benchmark or group aime24 in the evaluations of profile "
        f"'embedded': they have benchmark or group competition, mini_chains ({store})\n"
    )
    assert main(["compare", "--experiment", "cmp", "--k", "4"]) == 0
    assert "mini_chains" in capsys.readouterr().out
