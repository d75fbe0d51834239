"""The mini world's two solution paths: worked answers, failure modes, labels and entropy."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from tagrpo.config.base_model import WarmStartCorpus
from tagrpo.config.params import embedded
from tagrpo.grading.extract import last_boxed
from tagrpo.metrics.testbed import strategy_entropy
from tagrpo.miniworld.strategy import AMBIGUOUS, UNKNOWN, strategy_of
from tagrpo.miniworld.tasks import (
    MiniProblem,
    ProblemSpace,
    can_slip,
    reference_response,
    slipped_result,
)
from tagrpo.miniworld.warmstart import build_corpus


@pytest.mark.parametrize(
    ("problem", "strategy", "slip", "text"),
    [
        (MiniProblem("add", (4, 7)), "forward", False, "4 + 7 = 11."),
        (MiniProblem("add", (4, 7)), "backward", False, "7 + 4 = 11."),
        (MiniProblem("add", (4, 7)), "backward", True, "7 + 4 = 1."),
        (MiniProblem("sub", (9, 3)), "backward", False, "3 + 6 = 9."),
        (MiniProblem("add3", (4, 5, 6)), "backward", False, "5 + 6 = 11. 4 + 11 = 15."),
        (MiniProblem("add3", (4, 5, 6)), "backward", True, "5 + 6 = 11. 4 + 11 = 5."),
        (MiniProblem("addsub", (8, 2, 5)), "backward", False, "2 - 5 = -3. 8 - 3 = 5."),
        (MiniProblem("addsub", (8, 6, 5)), "backward", False, "6 - 5 = 1. 8 + 1 = 9."),
    ],
)
def test_backward_path_worked_answers(problem, strategy, slip, text):
    response = reference_response(problem, strategy=strategy, slip=slip)
    assert response.startswith(text)
    expected = slipped_result(problem) if slip else problem.answer
    assert last_boxed(response) == str(expected)
    assert strategy_of(problem, response) == strategy


def test_each_failure_mode_belongs_to_its_path():
    problem = MiniProblem("add3", (4, 5, 6))
    with pytest.raises(ValueError, match="forward path"):
        reference_response(problem, misread=True, strategy="backward")
    with pytest.raises(ValueError, match="backward path"):
        reference_response(problem, slip=True, strategy="forward")
    with pytest.raises(ValueError, match="unknown strategy"):
        reference_response(problem, strategy="sideways")
    assert can_slip(problem) and not can_slip(MiniProblem("add", (2, 3)))
    assert slipped_result(MiniProblem("add", (2, 3))) == 5


def test_strategy_labels_of_sampled_text():
    problem = MiniProblem("add3", (4, 5, 6))
    # A forward answer with a misread still starts forward; a wrong sum does not change the path.
    assert strategy_of(problem, reference_response(problem, misread=True)) == "forward"
    assert strategy_of(problem, "4 + 5 = 8. 8 + 6 = 14. \\boxed{14}") == "forward"
    assert strategy_of(problem, "The answer is \\boxed{15}.") == UNKNOWN
    assert strategy_of(problem, "9 + 9 = 18.") == UNKNOWN
    # 3 + 3 + 3: both paths start with "3 + 3".
    assert strategy_of(MiniProblem("add3", (3, 3, 3)), "3 + 3 = 6. 6 + 3 = 9.") == AMBIGUOUS
    # The backward difference is told by b and a, whatever r it wrote.
    assert strategy_of(MiniProblem("sub", (9, 3)), "3 + 5 = 9.") == "backward"


def test_strategy_entropy_counts_known_paths_only():
    labels = ["forward", "backward", "backward", "backward", UNKNOWN, AMBIGUOUS]
    frame = pd.DataFrame(
        {
            "question_id": ["q1"] * 6 + ["q2"] * 3 + ["q3"] * 2,
            "strategy": [*labels, "forward", "forward", UNKNOWN, UNKNOWN, UNKNOWN],
        }
    )
    table = strategy_entropy(frame).set_index("question_id")
    p = 0.25
    assert table.loc["q1", "entropy_bits"] == pytest.approx(
        -(p * math.log2(p) + (1 - p) * math.log2(1 - p))
    )
    assert table.loc["q1", "strategies"] == 2
    assert table.loc["q2", "entropy_bits"] == 0.0 and table.loc["q2", "strategies"] == 1
    assert "q3" not in table.index  # no response took a known path


def test_corpus_mixes_paths_and_keeps_failure_modes_apart():
    config = embedded(
        WarmStartCorpus,
        examples=4000,
        strategies={"forward": 0.5, "backward": 0.5},
        carry_slip=1.0,
        choice_fraction=0.0,
    )
    corpus = build_corpus(ProblemSpace(), config, exclude_keys=set(), seed=0)
    backward = [e for e in corpus if e.strategy == "backward"]
    assert 0.45 < len(backward) / len(corpus) < 0.55
    assert not any(e.misread for e in backward)
    assert not any(e.slip for e in corpus if e.strategy == "forward")
    # carry_slip=1: every backward answer whose result has a ten drops it, no other slips.
    assert all(e.slip == can_slip(e.problem) for e in backward)
    for example in random.Random(0).sample(corpus, 200):
        assert strategy_of(example.problem, example.response) in (example.strategy, AMBIGUOUS)


def test_corpus_strategies_are_validated():
    with pytest.raises(ValueError, match="unknown strategies"):
        embedded(WarmStartCorpus, strategies={"sideways": 1.0})
    with pytest.raises(ValueError, match="not all 0"):
        embedded(WarmStartCorpus, strategies={"forward": 0.0, "backward": 0.0})
