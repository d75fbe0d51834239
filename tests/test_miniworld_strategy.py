"""The mini world's two solution paths: worked answers, failure modes, labels and entropy."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from tagrpo.config.base_model import WarmStartCorpus
from tagrpo.config.common import MiniWorldSettings
from tagrpo.config.params import embedded
from tagrpo.metrics.testbed import strategy_entropy
from tagrpo.miniworld.dataset import problem_space
from tagrpo.miniworld.strategy import AMBIGUOUS, UNKNOWN, strategy_of
from tagrpo.miniworld.tasks import MiniProblem, reference_response
from tagrpo.training.warmstart import build_corpus

PROBLEM = MiniProblem(12, (7, -4, 8))


@pytest.mark.parametrize("strategy", ["forward", "backward"])
@pytest.mark.parametrize("misread", [(), (0,), (1, 2)])
def test_worked_answers_are_labelled_with_their_path(strategy, misread):
    response = reference_response(PROBLEM, strategy=strategy, misread=misread)
    assert strategy_of(PROBLEM, response) == strategy


def test_strategy_labels_of_sampled_text():
    # A wrong total or a flipped sign does not change the path: the first term's size does.
    assert strategy_of(PROBLEM, "12 - 7 = 5. 5 + 4 = 9. \\boxed{9}") == "forward"
    assert strategy_of(PROBLEM, "12 + 8 = 21. 21 - 4 = 17. \\boxed{17}") == "backward"
    assert strategy_of(PROBLEM, "The answer is \\boxed{23}.") == UNKNOWN
    assert strategy_of(PROBLEM, "12 + 4 = 16. 16 - 7 = 9.") == UNKNOWN  # neither first term
    assert strategy_of(PROBLEM, "11 + 7 = 18. 18 - 4 = 14.") == UNKNOWN  # not the start
    # First and last changes of one size (possible outside the world's space): both paths.
    assert strategy_of(MiniProblem(3, (4, 1, -4)), "3 + 4 = 7. 7 + 1 = 8.") == AMBIGUOUS


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


def test_corpus_mixes_paths_and_labels_them():
    config = embedded(WarmStartCorpus, examples=4000, choice_fraction=0.0)
    world = embedded(MiniWorldSettings)
    corpus = build_corpus(
        problem_space(world, config.lengths), config, set(), big_from=world.big_from, seed=0
    )
    backward = [e for e in corpus if e.strategy == "backward"]
    assert 0.45 < len(backward) / len(corpus) < 0.55
    for example in random.Random(0).sample(corpus, 300):
        assert strategy_of(example.problem, example.response) == example.strategy


def test_corpus_strategies_are_validated():
    with pytest.raises(ValueError, match="unknown strategies"):
        embedded(WarmStartCorpus, strategies={"sideways": 1.0})
    with pytest.raises(ValueError, match="not all 0"):
        embedded(WarmStartCorpus, strategies={"forward": 0.0, "backward": 0.0})
