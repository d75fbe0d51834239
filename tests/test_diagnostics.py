"""Figures 3-4 diagnostics with their controls: exact rates per grouping and size, paired
comparisons, solution-only embeddings, within-variant distances, the section and figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tagrpo.backends.base import Completion, SamplingParams
from tagrpo.config.params import config_with
from tagrpo.evaluation.diagnostics_stage import checkpoint_label, checkpoints_to_probe
from tagrpo.evaluation.vanishing_diversity import (
    COMPARISONS,
    diversity_comparison,
    question_groups,
    rate_comparisons,
    sample_training_questions,
    solution_text,
    variant_distances,
    zero_gradient_rows,
)
from tagrpo.report.vanishing_diversity import diagnostics_figure, diagnostics_section
from tagrpo.splits.training_set import TrainQuestion

pytestmark = pytest.mark.core

G, N = 2, 2


class ScriptedBackend:
    """Completions whose text says which variant and sample they are (no model)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def prompt_text(self, messages) -> str:
        return messages[0]["content"]

    def generate(self, conversations, sampling: SamplingParams):
        self.calls.append((len(conversations), sampling.n))
        return [
            [Completion(f"{c[0]['content']} #{i}", 2, True, (1, 2)) for i in range(sampling.n)]
            for c in conversations
        ]


def _questions() -> list[TrainQuestion]:
    return [
        TrainQuestion("a", "What is 1 + 1?", "2", neighbours=("Add 1 to 1.", "Sum 1 and 1.")),
        TrainQuestion("b", "What is 2 + 2?", "4", neighbours=("Add 2 to 2.", "Sum 2 and 2.")),
    ]


def _frame(rewards: dict[str, dict[int, list[float]]]) -> pd.DataFrame:
    rows = []
    for qid, by_variant in rewards.items():
        for variant, values in by_variant.items():
            for index, reward in enumerate(values):
                rows.append(
                    {
                        "question_id": qid,
                        "variant": variant,
                        "sample_index": index,
                        "reward": reward,
                        "prompt": f"problem {qid}",
                        "response": f"{qid}-{variant}-{index}",
                    }
                )
    return pd.DataFrame(rows)


# q0 gets (N+1)G = 6 responses, each neighbour G = 2.
REWARDS = {
    # q0's first G all correct, then a wrong one: original identical, original_NG mixed.
    "a": {0: [1, 1, 0, 1, 1, 1], 1: [1, 1], 2: [0, 1]},
    # every response wrong: identical everywhere.
    "b": {0: [0, 0, 0, 0, 0, 0], 1: [0, 0], 2: [0, 0]},
}


def test_sampling_layout_and_seeds_per_variant() -> None:
    backend = ScriptedBackend()

    def grade(responses, answers, kinds):
        return [(r.endswith("#0"), "", "ok") for r in responses]

    sampling = SamplingParams(n=G, max_new_tokens=4, seed=3)
    frame = sample_training_questions(backend, _questions(), G, N, sampling, grade)
    assert backend.calls == [(2, (N + 1) * G), (2, G), (2, G)]
    counts = frame.groupby(["question_id", "variant"]).size().to_dict()
    assert counts == {("a", 0): 6, ("a", 1): 2, ("a", 2): 2, ("b", 0): 6, ("b", 1): 2, ("b", 2): 2}
    assert frame.loc[frame["variant"] == 1, "prompt"].tolist()[:1] == ["Add 1 to 1."]
    assert frame["reward"].sum() == 2 * (N + 1)  # sample #0 of each variant of each question
    with pytest.raises(ValueError, match="N=3 needed"):
        sample_training_questions(backend, _questions(), G, 3, sampling, grade)


def test_rates_per_grouping_with_their_sizes() -> None:
    groups = question_groups(_frame(REWARDS), G, N)
    rows = {row["grouping"]: row for row in zero_gradient_rows(groups, G, N)}
    sizes = {name: row["group_size"] for name, row in rows.items()}
    assert sizes == {
        "original": 2,
        "neighbour_each": 2,
        "neighbours": 4,
        "original_NG": 4,
        "joint": 6,
        "original_N1G": 6,
    }
    rate = {name: row["zero_gradient_rate"] for name, row in rows.items()}
    # a: original [1,1] identical; neighbours q1 [1,1] identical, q2 [0,1] mixed -> each 0.5;
    # pooled [1,1,0,1] mixed; original_NG [1,1,0,1] mixed; joint mixed; original_N1G mixed.
    # b: identical everywhere.
    assert rate == {
        "original": 1.0,
        "neighbour_each": 0.75,
        "neighbours": 0.5,
        "original_NG": 0.5,
        "joint": 0.5,
        "original_N1G": 0.5,
    }
    assert rows["original"]["all_correct_rate"] == 0.5 and rows["original"]["all_wrong_rate"] == 0.5
    comparisons = {(c.first, c.second): c for c in rate_comparisons(groups)}
    assert set(comparisons) == set(COMPARISONS)
    paper = comparisons[("neighbours", "original")]
    assert paper.estimate.value == -0.5 and paper.questions == 2
    assert comparisons[("neighbours", "original_NG")].estimate.value == 0.0
    assert comparisons[("neighbour_each", "original")].estimate.value == -0.25


def test_a_question_without_the_layout_is_an_error() -> None:
    broken = {"a": {0: [1, 1], 1: [1, 1], 2: [0, 1]}}  # q0 has G, not (N+1)G responses
    with pytest.raises(ValueError, match="layout"):
        question_groups(_frame(broken), G, N)


def test_solution_text_drops_the_restated_problem() -> None:
    problem = "Tom has 3 apples and buys 4 more apples. How many apples does Tom have now?"
    response = "Tom has 3 apples and buys 4 more apples. 3 + 4 = 7. The answer is \\boxed{7}."
    assert solution_text(response, problem) == "3 + 4 = 7. The answer is \\boxed{7}."
    assert solution_text("3 + 4 = 7.", problem) == "3 + 4 = 7."  # short: kept
    assert solution_text(problem, problem) == problem  # nothing left: the whole response


def test_within_variant_distances_and_their_paired_comparison() -> None:
    frame = _frame(
        {"a": {0: [1] * 6, 1: [1, 1], 2: [1, 1]}, "b": {0: [0] * 6, 1: [0, 0], 2: [0, 0]}}
    )
    vectors = {
        # q0 responses identical (distance 0); q1 orthogonal pair (1); q2 identical (0).
        "a-0-0": [1, 0], "a-0-1": [1, 0], "a-1-0": [1, 0], "a-1-1": [0, 1],
        "a-2-0": [1, 0], "a-2-1": [1, 0],
        "b-0-0": [1, 0], "b-0-1": [0, 1], "b-1-0": [1, 0], "b-1-1": [1, 0],
        "b-2-0": [1, 0], "b-2-1": [1, 0],
    }  # fmt: skip

    def embed(texts):
        return np.array([vectors[t] for t in texts], dtype=float)

    distances = variant_distances(frame, embed, G)
    assert len(distances) == 6  # only the first G responses of q0 count
    by = distances.set_index(["question_id", "variant"])["mean_distance"]
    assert by[("a", 0)] == 0.0 and by[("a", 1)] == 1.0 and by[("b", 0)] == 1.0
    comparison = diversity_comparison(distances)
    # a: mean(1, 0) - 0 = 0.5; b: mean(0, 0) - 1 = -1 -> mean -0.25
    assert comparison.estimate.value == pytest.approx(-0.25)
    assert comparison.questions == 2 and comparison.p_value == 1.0


def test_report_section_and_figure(tmp_path: Path, saved) -> None:
    groups = question_groups(_frame(REWARDS), G, N)
    zero = pd.DataFrame(
        [{"policy": "ta_grpo-s0", "label": "base", **r} for r in zero_gradient_rows(groups, G, N)]
    )
    compared = pd.DataFrame(
        [{"policy": "ta_grpo-s0", "label": "base", **c.as_row()} for c in rate_comparisons(groups)]
    )
    distances = pd.DataFrame(
        {
            "policy": "ta_grpo-s0",
            "label": "base",
            "question_id": ["a", "a", "a"],
            "variant": [0, 1, 2],
            "responses": 2,
            "mean_distance": [0.1, 0.2, 0.3],
        }
    )
    figure = tmp_path / "d.png"
    diagnostics_figure(zero, distances, figure)
    # What is drawn: per policy, (a) one line per grouping at its identical-reward rate (%),
    # labelled with its size, (b) q0's and the neighbours' distances as two box series.
    (drawn,) = saved
    rates, boxes = drawn.axes
    assert rates.get_title() == "ta_grpo-s0: gradient vanishing by group (size in legend)"
    lines = rates.get_lines()
    assert len(lines) == len(zero) == len(set(zero["grouping"]))
    by_label = {line.get_label(): list(line.get_ydata()) for line in lines}
    assert sorted(v for values in by_label.values() for v in values) == pytest.approx(
        sorted(100 * zero["zero_gradient_rate"])
    )
    assert sorted(t.get_text() for t in rates.get_legend().get_texts()) == sorted(by_label)
    assert [t.get_text() for t in rates.get_xticklabels()] == ["base"]
    legend = [t.get_text() for t in boxes.get_legend().get_texts()]
    assert legend == ["q0 (G responses)", "neighbours (mean of N variants' G)"]
    # Box medians: q0's one question at 0.1, the neighbours' mean of 0.2 and 0.3.
    medians = [line for line in boxes.get_lines() if line.get_label().startswith("_")]
    assert any(list(m.get_ydata()) == pytest.approx([0.1, 0.1]) for m in medians)
    assert any(list(m.get_ydata()) == pytest.approx([0.25, 0.25]) for m in medians)
    section = diagnostics_section(zero, compared, "d.png", 2, G, N, "minilm")
    assert "| q0, G = 2 (%) | one neighbour, G = 2 (%) | N neighbours, NxG = 4 (%) |" in section
    assert "| ta_grpo-s0 | base | 50.0 | 100.0 | 75.0 | 50.0 | 50.0 | 50.0 | 50.0 |" in section
    assert "N neighbours, NxG - q0, G | -50.000 pts [" in section
    assert "![diagnostics](d.png)" in section


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
