"""Strategy entropy over training: labels from rollout dumps and the base probe, and the
evaluation's per-response strategy column (the testbed's V3)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tagrpo.data.schema import Question
from tagrpo.evaluation.runner import label_strategies
from tagrpo.miniworld.dataset import SOURCE, problem_meta
from tagrpo.miniworld.tasks import MiniProblem, reference_response, render
from tagrpo.plumbing.layout import checkpoint_name, train_outputs
from tagrpo.report.strategies import strategy_figure, strategy_over_training

PROBLEM = MiniProblem(4, (5, 6))
FORWARD = reference_response(PROBLEM)
BACKWARD = reference_response(PROBLEM, strategy="backward")


def _dump(root: Path, policy: str, fraction: float, responses: list[str]) -> None:
    folder = root / train_outputs(policy)["rollouts"]
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {"question_id": "q1", "variant": 0, "sample_index": i, "response": text,
         "prompt_used": f"<|im_start|>user\n{render(PROBLEM, 'words')}<|im_end|>"}
        for i, text in enumerate(responses)
    ]  # fmt: skip
    # A neighbour's responses (variant 1) are not the policy's answers to q0: never counted.
    rows += [{**rows[0], "variant": 1, "response": BACKWARD}] * 4
    pd.DataFrame(rows).to_parquet(folder / f"{checkpoint_name(fraction)}.parquet")


def test_entropy_per_checkpoint_from_the_first_g_answers_to_q0(tmp_path: Path, saved) -> None:
    # ta_grpo: 2 forward + 2 backward (1 bit); the 5th answer is past G=4 and is not read.
    _dump(tmp_path, "ta_grpo-s0", 1.0, [FORWARD, BACKWARD, FORWARD, BACKWARD, FORWARD])
    # grpo: one path only, and a response with no equation (left out of the mix).
    _dump(tmp_path, "grpo-s0", 1.0, [FORWARD, FORWARD, "\\boxed{15}", FORWARD])
    probe = pd.DataFrame(
        {"question_id": ["q1"] * 5, "is_original": [True] * 4 + [False],
         "sample_index": [0, 1, 2, 3, 0],
         "response": [FORWARD, FORWARD, FORWARD, BACKWARD, BACKWARD]}
    )  # fmt: skip
    frame = strategy_over_training(
        tmp_path,
        {"ta_grpo": ["ta_grpo-s0"], "grpo": ["grpo-s0"]},
        [0.25, 1.0],  # a short run: the 25% dump shares the last step and is not written
        4,
        probe,
        {"q1": render(PROBLEM, "expr")},
    ).set_index("policy")
    assert frame.loc["ta_grpo-s0", "entropy_bits"] == 1.0
    assert frame.loc["grpo-s0", "entropy_bits"] == 0.0
    # Base: 3 forward, 1 backward among the original phrasing's 4 answers.
    assert frame.loc["base", "entropy_bits"] == pytest.approx(0.811278, abs=1e-6)
    assert frame.loc["base", "fraction"] == 0.0
    strategy_figure(frame.reset_index(), tmp_path / "figure.png")
    # What is drawn: one panel, one line per method from the base (at 0) to its checkpoint,
    # the base as its own point, the axes and legend labelled.
    (figure,) = saved
    (axis,) = figure.axes
    lines = {line.get_label(): line for line in axis.get_lines()}
    assert sorted(lines) == ["grpo", "ta_grpo"]
    base = 0.811278
    for method, end in (("ta_grpo", 1.0), ("grpo", 0.0)):
        assert list(lines[method].get_xdata()) == [0.0, 1.0]
        assert lines[method].get_ydata() == pytest.approx([base, end], abs=1e-6)
    base_points = [c for c in axis.collections if c.get_label() == "base"]
    assert len(base_points) == 1
    (point,) = base_points[0].get_offsets().tolist()
    assert point == pytest.approx([0.0, base], abs=1e-6)
    assert axis.get_xlabel() == "fraction of training"
    assert axis.get_ylabel() == "strategy entropy (bits per question)"
    assert axis.get_ylim() == (0.0, 1.05)
    legend = sorted(text.get_text() for text in axis.get_legend().get_texts())
    assert legend == ["base", "grpo", "ta_grpo"]


def test_a_missing_checkpoint_dump_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match="no checkpoint dump: run the train stage of grpo-s0"
    ):
        strategy_over_training(
            tmp_path, {"grpo": ["grpo-s0"]}, [0.5], 4, pd.DataFrame(
                columns=["question_id", "is_original", "sample_index", "response"]
            ), {},
        )  # fmt: skip


def _question(qid: str, source: str = SOURCE) -> Question:
    return Question(
        id=qid, source=source, split="test", problem=render(PROBLEM, "expr"),
        answer="15", answer_kind="math", meta=problem_meta(PROBLEM, "expr"),
    )  # fmt: skip


def test_evaluation_labels_mini_world_responses_only() -> None:
    responses = pd.DataFrame(
        {"question_id": ["a", "a", "a"], "response": [FORWARD, BACKWARD, "no idea"]}
    )
    labelled = label_strategies(responses, {"mini": [_question("a")]})
    assert labelled["strategy"].tolist() == ["forward", "backward", "unknown"]
    other = label_strategies(responses, {"math": [_question("a", source="math")]})
    assert "strategy" not in other.columns
