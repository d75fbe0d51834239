"""The pilot's report (``python -m tagrpo.report.study --pilot``) from draw records made here:
the draws recorded and waiting, the registered contrasts paired by draw, the share of problems
never solved and the anchoring diagnostic, each from the records' numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tagrpo.report import study_pilot
from tagrpo.report.study_pilot import PILOT_LABEL, pilot_markdown

ROOT = Path(__file__).resolve().parents[1]
REGISTRATION = yaml.safe_load((ROOT / "preregistration/study-v3.yaml").read_text())
N = 64
PROBLEMS = 40
# Correct samples of n = 64 per problem on the competition benchmark: GRPO never solves the
# first quarter of its problems, TA-GRPO the first half, the unanchored variant none; the rest
# at a per-problem rate so that the contrasts have a spread.
NEVER_SOLVED = {"grpo": 0.25, "ta_grpo": 0.5, "ta_grpo_unanchored": 0.0}


def _responses(method: str, seed: int, draw: int) -> pd.DataFrame:
    rng = np.random.default_rng(1_000 * draw + 10 * seed + len(method))
    rows = []
    for benchmark in ("mini_chains", "study_long", "mini_unseen", "mini_long"):
        for problem in range(PROBLEMS):
            never = benchmark == "study_long" and problem < NEVER_SOLVED[method] * PROBLEMS
            correct = 0 if never else int(rng.integers(1, N + 1))
            rows += [
                {"benchmark": benchmark, "question_id": f"q{problem}", "correct": i < correct}
                for i in range(N)
            ]
    return pd.DataFrame(rows)


def _record(folder: Path, draw: int) -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["base_model"]["warmstart"]["seed"] = draw
    params["evaluate"]["n"] = N
    folder.mkdir(parents=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for method, seeds in REGISTRATION["pilot"]["runs"].items():
        for seed in seeds:
            policy = f"{method}-s{seed}"
            (folder / "evals" / policy).mkdir(parents=True)
            _responses(method, seed, draw).to_parquet(folder / f"evals/{policy}/responses.parquet")
            summary = {"seconds": 1.0}
            if method == "ta_grpo":  # the unanchored runs recorded no diagnostic here
                summary |= {
                    "anchoring/log_ratio_mean_mean": -0.5 - draw,
                    "anchoring/log_ratio_p1_mean": -3.0,
                    "anchoring/log_ratio_p99_mean": 1.25,
                    "anchoring/ess_fraction_mean": 0.4 + 0.1 * seed,
                }
            (folder / "metrics/train").mkdir(parents=True, exist_ok=True)
            (folder / f"metrics/train/{policy}.json").write_text(json.dumps(summary))
    (folder / "DRAW.json").write_text(json.dumps({"device": f"cpu kind {draw}"}))
    return folder


def test_the_pilot_report_reads_its_numbers_from_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The acceptance rows come from the draw's own validity code (tested on checkouts).
    import tagrpo.report.draw_checkouts as draw_checkouts

    rows = pd.DataFrame({"criterion": ["edges"], "verdict": ["PASS"]})
    monkeypatch.setattr(draw_checkouts, "recomputed_rows", lambda record: rows)
    records = [_record(tmp_path / f"draw{d}", d) for d in (0, 1)] + [tmp_path / "draw2"]

    figure = tmp_path / "pilot-contrasts.png"
    text = pilot_markdown(records, REGISTRATION, "the test", figure=figure)

    assert f"**{PILOT_LABEL}**" in text
    assert "![The pilot's contrasts at pass@16 on competition](pilot-contrasts.png)" in text
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"Draws recorded: 2 of 3 (still running or not started: {tmp_path / 'draw2'})" in text
    assert "### draw0 (SFT seed 0; cpu kind 0)" in text and "### draw1 (SFT seed 1;" in text
    lines = text.splitlines()
    # Every registered contrast on every group at pass@1 and the primary k, paired by draw.
    groups = REGISTRATION["groups"]
    for first, second in study_pilot.CONTRASTS:
        for group in groups:
            for k in (1, REGISTRATION["primary_endpoint"]["k"]):
                assert any(
                    line.startswith(f"| {first} - {second} | {group} | pass@{k} |")
                    for line in lines
                ), (first, second, group, k)
    # Never solved on the competition group: exactly the shares made above.
    header = next(line for line in lines if line.startswith("| method | "))
    competition = header.strip("|").split("|").index(" competition ")
    shares = {
        line.strip("|").split("|")[0].strip(): line.strip("|").split("|")[competition].strip()
        for line in lines
        if line.startswith(("| grpo |", "| ta_grpo |", "| ta_grpo_unanchored |"))
    }
    assert shares == {"grpo": "25.0%", "ta_grpo": "50.0%", "ta_grpo_unanchored": "0.0%"}
    # The anchoring diagnostic of every TA-type run, "not recorded" where a run has none.
    assert "| draw1 | ta_grpo-s1 | -1.500 | -3.000 | 1.250 | 0.500 |" in lines
    assert "| draw0 | ta_grpo_unanchored-s0 | not recorded | not recorded | not recorded | " \
        "not recorded |" in lines  # fmt: skip


def test_a_pilot_with_no_record_yet_says_so(tmp_path: Path) -> None:
    text = pilot_markdown([tmp_path / "draw0"], REGISTRATION, "the test")
    assert text.endswith(
        f"Draws recorded: 0 of 1 (still running or not started: {tmp_path}/draw0)."
    )


def test_the_measured_speed_up_is_reported_as_measured(tmp_path: Path) -> None:
    parallel = tmp_path / "parallel.json"
    measured = {
        "method": "grpo",
        "steps_per_draw": 6,
        "serial_s": 44.9,
        "side_by_side_s": 27.3,
        "speedup": 1.65,
        "load_average_before": [3.56, 3.28, 3.13],
        "device": "a CPU",
        "commit": "0553ede3c9690244284a9fffd9943cad0218dbb0",
        "measured": "2026-12-02T02:16:57+00:00",
    }
    parallel.write_text(json.dumps(measured))
    text = pilot_markdown([tmp_path / "draw0"], REGISTRATION, "the test", parallel=parallel)
    assert (
        "6 grpo steps a draw): 44.9 s one after the other, 27.3 s side by side, **1.65x**, on a "
        "CPU at 0553ede3c969, 2026-12-02T02:16:57+00:00, load average 3.56 before it"
    ) in text


def test_only_the_registered_rows_decide_a_draw() -> None:
    deciding = REGISTRATION["pilot"]["deciding_rows"]
    decides = {
        "edges: mini_chains": True,
        "harder: competition": True,
        "regime": True,
        "V2": True,
        "V3": True,
        "V1 (policy)": False,
        "V1 (reward)": False,
        "V4": False,
        "V5": False,
    }
    assert {row: study_pilot.row_decides(row, deciding) for row in decides} == decides


def test_a_failed_deciding_row_leaves_the_draw_not_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tagrpo.report.draw_checkouts as draw_checkouts

    rows = pd.DataFrame(
        {"criterion": ["V1 (reward)", "regime", "V3"], "verdict": ["FAIL", "PASS", "FAIL"]}
    )
    monkeypatch.setattr(draw_checkouts, "recomputed_rows", lambda record: rows)
    text = pilot_markdown([_record(tmp_path / "draw0", 0)], REGISTRATION, "the test")
    assert "### draw0 (SFT seed 0; cpu kind 0): **NOT accepted**" in text
    assert "| no | V1 (reward) | FAIL |" in text and "| yes | V3 | FAIL |" in text
    rows.loc[2, "verdict"] = "PASS"  # V1 does not decide
    text = pilot_markdown([tmp_path / "draw0"], REGISTRATION, "the test")
    assert "### draw0 (SFT seed 0; cpu kind 0): **accepted**" in text


def test_records_of_older_code_read_with_the_value_that_code_had(tmp_path: Path) -> None:
    """The pilot's records ran at a commit before common.grading.grader and data.verify_sources
    existed: read with the one value that code had, and said; another missing key is an error."""
    from tagrpo.config.params import ConfigError
    from tagrpo.report.draw_checkouts import checkout_config

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    del params["common"]["grading"]["grader"], params["data"]["verify_sources"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    config, filled = checkout_config(tmp_path)
    assert sorted(filled) == ["common.grading.grader", "data.verify_sources"]
    assert config.common.grading.grader == "tagrpo" and config.data.verify_sources is False
    del params["train"]["kl_coef"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match=r"train\.kl_coef"):
        checkout_config(tmp_path)
