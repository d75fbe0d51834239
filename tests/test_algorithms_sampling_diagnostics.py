"""Dynamic sampling (drop all-equal groups, refill) and the zero-gradient diagnostics."""

from __future__ import annotations

import numpy as np
import pytest

from tagrpo.algorithms import (
    collapse_rates,
    is_informative,
    rollout_layout,
    step_diagnostics,
)
from tagrpo.algorithms.dynamic_sampling import dynamic_sampling
from tagrpo.metrics.groups import group_stats

pytestmark = pytest.mark.core


def _stream(groups: list[list[float]]):
    """A data stream of pre-graded groups; records how many were requested per round."""
    position = {"next": 0}
    requests: list[int] = []

    def draw(k: int) -> list[tuple[int, list[float]]]:
        requests.append(k)
        start = position["next"]
        position["next"] += k
        return [(i, groups[i]) for i in range(start, min(start + k, len(groups)))]

    return draw, requests


def test_is_informative() -> None:
    assert is_informative([1, 0, 0])
    assert not is_informative([1, 1, 1])
    assert not is_informative([0.0, 0.0])
    assert not is_informative([1.0])


def test_refill_replaces_exactly_the_dropped_groups() -> None:
    groups = [
        [1, 0, 1, 1],  # kept
        [1, 1, 1, 1],  # dropped: all correct
        [0, 0, 0, 0],  # dropped: all wrong
        [0, 1, 0, 0],  # kept
        [0, 0, 0, 0],  # round 2 draws 2: dropped
        [1, 1, 0, 1],  # kept
        [1, 0, 0, 0],  # round 3 draws 1: kept, batch full
        [1, 0, 1, 0],  # never drawn
    ]
    draw, requests = _stream(groups)
    result = dynamic_sampling(draw, lambda record: record[1], batch_size=4)
    assert [index for index, _ in result.kept] == [0, 3, 5, 6]
    assert requests == [4, 2, 1]
    assert result.rounds == 3 and result.drawn == 7 and result.filled
    assert (result.dropped_all_correct, result.dropped_all_wrong) == (1, 2)
    assert result.responses_generated == 28 and result.responses_kept == 16
    assert result.extra_rollouts == 12  # the 3 dropped groups x 4 responses
    assert [index for index, _ in result.dropped] == [1, 2, 4]


def test_no_refill_when_every_group_is_mixed_and_partial_batch_after_max_rounds() -> None:
    draw, requests = _stream([[1, 0]] * 3)
    result = dynamic_sampling(draw, lambda record: record[1], batch_size=3)
    assert (result.rounds, result.extra_rollouts, requests) == (1, 0, [3])
    draw, requests = _stream([[0, 0]] * 10 + [[1, 0]])
    result = dynamic_sampling(draw, lambda record: record[1], batch_size=2, max_rounds=3)
    assert not result.filled and result.kept == [] and requests == [2, 2, 2]
    assert result.dropped_all_wrong == 6 and result.extra_rollouts == 12


def test_collapse_rates_agree_with_group_stats() -> None:
    rng = np.random.default_rng(3)
    rewards = (rng.random(80) < rng.choice([0.0, 0.5, 1.0], size=10).repeat(8)).astype(float)
    ids = np.repeat(np.arange(10), 8)
    rates = collapse_rates(rewards, ids)
    reference = group_stats(rewards.reshape(10, 8)).as_dict()
    assert rates == pytest.approx(reference)


def test_a_joint_group_collapses_only_when_its_original_group_does() -> None:
    """Figure 1/3's mechanism: a joint (N+1)G group is all-equal only if its q0 group is, so per
    step the joint zero-gradient rate never exceeds the original's; strictly less whenever a
    collapsed q0 group has a neighbour that answers differently (seeded random steps)."""
    rng = np.random.default_rng(0)
    strictly_less = 0
    for _ in range(200):
        questions = int(rng.integers(1, 6))
        layout = rollout_layout(questions, (0, 1, 2, 3), 4)
        success = rng.choice([0.0, 0.1, 0.5, 0.9, 1.0], size=questions)[layout.question]
        rewards = (rng.random(layout.question.size) < success).astype(float)
        metrics = step_diagnostics(rewards, layout.question, layout.variant)
        original, joint = (
            metrics["original/zero_gradient_rate"],
            metrics["joint/zero_gradient_rate"],
        )
        assert joint <= original
        grid = rewards.reshape(questions, 4, 4)  # question, variant, response
        rescued = sum(np.ptp(grid[q, 0]) == 0 and np.ptp(grid[q]) > 0 for q in range(questions))
        assert original - joint == pytest.approx(rescued / questions)
        strictly_less += rescued > 0
    assert strictly_less > 20  # the draw exercises the rescue, not only equal rates


def test_step_diagnostics_split_original_neighbours_joint() -> None:
    layout = rollout_layout(2, (0, 1, 2), 2)
    rewards = np.array(
        [
            *[1, 1, 0, 1, 1, 0],  # question 0: original all correct, neighbours mixed
            *[0, 0, 0, 0, 0, 0],  # question 1: everything wrong
        ],
        dtype=float,
    )
    metrics = step_diagnostics(rewards, layout.question, layout.variant)
    assert metrics["original/zero_gradient_rate"] == 1.0
    assert metrics["original/all_correct_rate"] == 0.5
    assert metrics["original/all_wrong_rate"] == 0.5
    assert metrics["neighbours/zero_gradient_rate"] == 0.5
    assert metrics["neighbours/all_wrong_rate"] == 0.5
    assert metrics["joint/zero_gradient_rate"] == 0.5
    assert metrics["joint/all_correct_rate"] == 0.0
    assert metrics["joint/mixed_rate"] == 0.5
    assert metrics["reward_mean"] == pytest.approx(4 / 12)
    assert "train/zero_gradient_rate" not in metrics
