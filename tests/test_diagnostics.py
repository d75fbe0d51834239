"""Checkpoint diagnostics (paper Figures 3-4): phrasings, zero-gradient rows, distances, report."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tagrpo.config.params import config_with
from tagrpo.data.training_set import TrainQuestion
from tagrpo.evaluation.diagnostics import (
    distance_rows,
    distance_summary,
    phrased_training_questions,
    zero_gradient_rows,
)
from tagrpo.evaluation.diagnostics_run import checkpoint_label, checkpoints_to_probe
from tagrpo.report.diagnostics import diagnostics_figure, diagnostics_section

UNIT = {"a": [1.0, 0.0], "b": [0.0, 1.0]}


def embed(texts):
    return np.array([UNIT[text] for text in texts])


def samples(rows: list[tuple[str, bool, str, float]]) -> pd.DataFrame:
    """(question, is_original, response, reward) rows in the sample_phrasings schema."""
    return pd.DataFrame(
        [
            {
                "question_id": q,
                "phrasing": "q0" if original else "q1",
                "is_original": original,
                "response": response,
                "reward": reward,
            }
            for q, original, response, reward in rows
        ]
    )


# Question A: originals all correct, neighbours mixed. Question B: everything wrong.
FRAME = samples(
    [
        ("A", True, "a", 1.0),
        ("A", True, "a", 1.0),
        ("A", False, "a", 1.0),
        ("A", False, "b", 0.0),
        ("A", False, "b", 1.0),
        ("A", False, "a", 1.0),
        ("B", True, "a", 0.0),
        ("B", True, "b", 0.0),
        ("B", False, "a", 0.0),
        ("B", False, "a", 0.0),
        ("B", False, "a", 0.0),
        ("B", False, "a", 0.0),
    ]
)


def test_phrased_training_questions_label_q0_and_neighbours() -> None:
    question = TrainQuestion("m1", "What is 2+3?", "5", neighbours=("Add 2 and 3.", "2 plus 3?"))
    (phrased,) = phrased_training_questions([question])
    assert phrased.phrasings == {"q0": "What is 2+3?", "q1": "Add 2 and 3.", "q2": "2 plus 3?"}
    assert phrased.original == "q0" and phrased.answer == "5"
    with pytest.raises(ValueError, match="no neighbours"):
        phrased_training_questions([TrainQuestion("m2", "What is 1+1?", "2")])


def test_zero_gradient_rows_split_original_neighbours_joint() -> None:
    rows = {row["grouping"]: row for row in zero_gradient_rows(FRAME)}
    assert rows["original"]["zero_gradient_rate"] == 1.0
    assert rows["original"]["all_correct_rate"] == 0.5
    assert rows["original"]["all_wrong_rate"] == 0.5
    assert rows["neighbours"]["zero_gradient_rate"] == 0.5  # A mixed, B all wrong
    assert rows["neighbours"]["all_wrong_rate"] == 0.5
    assert rows["joint"]["zero_gradient_rate"] == 0.5
    assert rows["original"]["success"] == 0.5
    assert rows["neighbours"]["success"] == 3 / 8
    assert rows["joint"]["responses"] == 12


def test_distance_rows_and_summary_exact() -> None:
    spread = distance_rows(FRAME, embed).set_index(["question_id", "response_set"])
    # A original: a, a -> 0. A neighbours: a b b a -> 4 orthogonal pairs of 6 -> 2/3.
    assert spread.loc[("A", "original"), "mean_distance"] == pytest.approx(0.0)
    assert spread.loc[("A", "neighbours"), "mean_distance"] == pytest.approx(2 / 3)
    # B original: a, b -> 1. B neighbours: all a -> 0.
    assert spread.loc[("B", "original"), "mean_distance"] == pytest.approx(1.0)
    assert spread.loc[("B", "neighbours"), "mean_distance"] == pytest.approx(0.0)
    assert spread.loc[("A", "neighbours"), "responses"] == 4
    summary = distance_summary(distance_rows(FRAME, embed))
    assert summary["original/distance_mean"] == pytest.approx(0.5)
    assert summary["neighbours/distance_mean"] == pytest.approx(1 / 3)
    assert summary["paired_questions"] == 2
    assert summary["neighbours_more_diverse_rate"] == 0.5


def test_single_response_sets_give_nan_not_zero() -> None:
    frame = samples([("A", True, "a", 1.0), ("A", False, "a", 0.0), ("A", False, "b", 1.0)])
    summary = distance_summary(distance_rows(frame, embed))
    assert math.isnan(summary["original/distance_mean"])
    assert summary["neighbours/distance_mean"] == pytest.approx(1.0)
    assert summary["paired_questions"] == 0
    assert math.isnan(summary["neighbours_more_diverse_rate"])


def test_checkpoints_to_probe(tmp_path: Path) -> None:
    for name in ("checkpoint-025", "checkpoint-100"):
        (tmp_path / "models" / "ta_grpo-s0" / "checkpoints" / name).mkdir(parents=True)
    params = {
        "diagnostics.policies": ["ta_grpo-s0"],
        "diagnostics.checkpoints": ["checkpoint-025", "checkpoint-100"],
    }
    probes = checkpoints_to_probe(config_with(params), tmp_path)
    assert [(policy, name) for policy, name, _ in probes] == [
        ("base", "base"),
        ("ta_grpo-s0", "checkpoint-025"),
        ("ta_grpo-s0", "checkpoint-100"),
    ]
    assert probes[0][2] == tmp_path / "models" / "base"
    assert checkpoint_label("checkpoint-050") == "50%"
    assert checkpoint_label("base") == "base"
    with pytest.raises(FileNotFoundError, match="checkpoint-075"):
        checkpoints_to_probe(
            config_with({**params, "diagnostics.checkpoints": ["checkpoint-075"]}), tmp_path
        )


def test_report_section_and_figure(tmp_path: Path) -> None:
    zero, spread = [], []
    for label in ("base", "25%"):
        for row in zero_gradient_rows(FRAME):
            zero.append({"policy": "ta_grpo-s0", "label": label, **row})
        spread.append(distance_rows(FRAME, embed).assign(policy="ta_grpo-s0", label=label))
    zero_frame, spread_frame = pd.DataFrame(zero), pd.concat(spread, ignore_index=True)
    figure = tmp_path / "diagnostics.png"
    diagnostics_figure(zero_frame, spread_frame, figure)
    assert figure.stat().st_size > 5000
    text = diagnostics_section(zero_frame, spread_frame, "diagnostics.png", 2, 2, 2, "minilm")
    lines = [line for line in text.splitlines() if line.startswith("| ta_grpo-s0")]
    assert len(lines) == 2
    # success 50.0 / 37.5, original 100.0 (50.0 / 50.0), neighbours 50.0, joint 50.0,
    # distances 0.500 / 0.333, neighbours more diverse for 1 of 2 questions.
    assert lines[0] == (
        "| ta_grpo-s0 | base | 50.0 / 37.5 | 100.0 | 50.0 / 50.0 | 50.0 | 50.0 | "
        "0.500 / 0.333 | 50.0 |"
    )
    assert "![diagnostics](diagnostics.png)" in text
