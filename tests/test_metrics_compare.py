"""Seeds x problems pass@k, group scores and paired differences with bootstrap intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tagrpo.metrics.compare import (
    chance_pass_at_k,
    group_weights,
    mean_difference_interval,
    paired_difference,
    problem_counts,
    score_with_interval,
    seed_runs,
    sign_test_p,
    widening,
)


def _responses(correct_by_problem: dict[tuple[str, str], list[bool]]) -> pd.DataFrame:
    rows = [
        {"benchmark": bench, "question_id": qid, "correct": value}
        for (bench, qid), values in correct_by_problem.items()
        for value in values
    ]
    return pd.DataFrame(rows)


# Two benchmarks of unequal size: "a" has 1 problem, "b" has 2; n = 4 samples each.
GOOD = {("a", "1"): [1, 1, 1, 1], ("b", "1"): [1, 0, 0, 0], ("b", "2"): [0, 0, 0, 0]}
BAD = {("a", "1"): [0, 0, 0, 0], ("b", "1"): [0, 0, 0, 0], ("b", "2"): [0, 0, 0, 0]}


def _runs(*seeds: dict) -> object:
    counts = [
        problem_counts(_responses({k: [bool(x) for x in v] for k, v in s.items()})) for s in seeds
    ]
    return seed_runs(counts, [1, 2, 4])


def test_group_score_is_the_mean_over_benchmarks_of_their_problem_means() -> None:
    runs = _runs(GOOD)
    weights = group_weights(runs.problems, ["a", "b"])
    assert weights.tolist() == [0.5, 0.25, 0.25]
    estimates = score_with_interval(runs, ["a", "b"], n_resamples=200)
    # pass@1: a = 1.0; b = (0.25 + 0) / 2 = 0.125 -> (1 + 0.125) / 2
    assert estimates[0].value == pytest.approx(0.5625)
    # pass@4: a = 1, b = (1 + 0) / 2 -> 0.75
    assert estimates[2].value == pytest.approx(0.75)
    assert estimates[0].low <= 0.5625 <= estimates[0].high
    only_a = score_with_interval(runs, ["a"], n_resamples=50)
    assert [e.value for e in only_a] == [1.0, 1.0, 1.0]
    assert (only_a[0].low, only_a[0].high) == (1.0, 1.0)  # nothing varies: no width


def test_paired_difference_and_verdicts() -> None:
    good, bad = _runs(GOOD, GOOD), _runs(BAD, BAD)
    difference = paired_difference(good, bad, ["a"], n_resamples=200)
    assert [(e.k, e.value, e.low, e.high) for e in difference] == [
        (1, 1.0, 1.0, 1.0),
        (2, 1.0, 1.0, 1.0),
        (4, 1.0, 1.0, 1.0),
    ]
    assert difference[0].verdict == "supported"
    assert paired_difference(bad, good, ["a"], n_resamples=50)[0].verdict == "reversed"
    same = paired_difference(good, good, ["a", "b"], n_resamples=200)
    assert all(e.value == 0.0 and e.verdict == "not distinguishable" for e in same)


def test_seed_variation_widens_the_interval() -> None:
    mixed = _runs(GOOD, BAD)  # one seed learned, one did not
    difference = paired_difference(mixed, _runs(BAD, BAD), ["a"], n_resamples=500, seed=1)
    assert difference[0].value == pytest.approx(0.5)
    assert difference[0].low == 0.0 and difference[0].high == 1.0
    assert difference[0].verdict == "not distinguishable"


def test_widening_of_the_gap_with_k() -> None:
    runs_good, runs_bad = _runs(GOOD), _runs(BAD)
    gap = widening(runs_good, runs_bad, ["b"], 1, 4, n_resamples=300)
    # gap at 1: 0.125; at 4: 0.5 -> widening 0.375
    assert gap.value == pytest.approx(0.375)
    assert gap.low <= gap.value <= gap.high


def test_problem_misalignment_is_refused() -> None:
    other = _runs({("a", "1"): [1, 1, 1, 1], ("b", "9"): [0] * 4, ("b", "2"): [0] * 4})
    with pytest.raises(ValueError, match="different problems"):
        paired_difference(_runs(GOOD), other, ["a"])
    counts = [problem_counts(_responses(GOOD)), problem_counts(_responses(BAD)).iloc[:2]]
    with pytest.raises(ValueError, match="different problems"):
        seed_runs(counts, [1])


def test_paired_mean_sign_test_and_chance() -> None:
    estimate = mean_difference_interval(np.array([0.1, 0.1, 0.1, np.nan]), n_resamples=100)
    assert (estimate.value, estimate.low, estimate.high) == pytest.approx((0.1, 0.1, 0.1))
    assert sign_test_p(np.array([1.0] * 10)) == pytest.approx(2 / 2**10)
    assert sign_test_p(np.array([1.0, -1.0])) == 1.0
    assert chance_pass_at_k(4, 32) == pytest.approx(1 - 0.75**32)
    assert chance_pass_at_k(4, 1) == 0.25
