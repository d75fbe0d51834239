"""pass@k of policies trained with several seeds, and paired differences between methods, with
bootstrap intervals over problems and seeds.

For a method with seeds ``s = 1..S`` and problems ``j`` (every benchmark's problems, aligned
across methods by ``(benchmark, question_id)``), ``P[s, j, k]`` is the unbiased pass@k of
problem ``j`` from seed ``s``'s ``n`` samples. A benchmark's score is the mean over its
problems; a group's (the paper's Table 1 averages) the mean over its benchmarks; a method's
score the mean over its seeds. So every estimate is ``mean_s sum_j w_j P[s, j, k]`` with weights
``w_j = 1 / (benchmarks in the group x problems in j's benchmark)``.

Intervals (95% percentile bootstrap, ``n_resamples`` draws): problems are resampled within each
benchmark, the same indices for every method compared (paired over problems: the same
questions); seeds are resampled per method, independently (seeds of different methods are
different training runs: no pairing is assumed). A difference "A - B" is estimated on each
draw from the same resampled problems. Its interval excluding 0 is what "distinguishable"
means in the report's claims table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tagrpo.metrics.passk import pass_at_k_per_problem

CONFIDENCE = 0.95


@dataclass(frozen=True)
class SeedRuns:
    """One method's per-problem pass@k: ``values[s, j, i]`` for seed s, problem j, k = ks[i]."""

    values: np.ndarray
    problems: pd.MultiIndex  # (benchmark, question_id), aligned across methods
    ks: tuple[int, ...]


def problem_counts(responses: pd.DataFrame) -> pd.DataFrame:
    """``(benchmark, question_id) -> n, c``: samples and correct samples per problem."""
    grouped = responses.groupby(["benchmark", "question_id"], sort=True)["correct"]
    return grouped.agg(n="size", c="sum")


def seed_runs(counts_per_seed: Sequence[pd.DataFrame], ks: Sequence[int]) -> SeedRuns:
    """Stack the per-problem counts of each seed (same problems, same n) into :class:`SeedRuns`."""
    if not counts_per_seed:
        raise ValueError("no seed to stack")
    index = counts_per_seed[0].index
    for counts in counts_per_seed[1:]:
        if not counts.index.equals(index):
            raise ValueError("seeds were evaluated on different problems")
    ks = tuple(int(k) for k in ks)
    values = np.stack(
        [
            np.stack(
                [pass_at_k_per_problem(c["n"].to_numpy(), c["c"].to_numpy(), k) for k in ks],
                axis=-1,
            )
            for c in counts_per_seed
        ]
    )
    return SeedRuns(values, index, ks)


def group_weights(problems: pd.MultiIndex, benchmarks: Sequence[str]) -> np.ndarray:
    """``w_j``: mean over the given benchmarks of each benchmark's mean over its problems."""
    names = problems.get_level_values(0)
    missing = sorted(set(benchmarks) - set(names))
    if missing:
        raise ValueError(f"benchmarks {missing} have no evaluated problems")
    weights = np.zeros(len(problems))
    for benchmark in benchmarks:
        members = names == benchmark
        weights[members] = 1.0 / (members.sum() * len(benchmarks))
    return weights


def _strata(problems: pd.MultiIndex) -> list[np.ndarray]:
    names = problems.get_level_values(0)
    return [np.flatnonzero(names == name) for name in pd.unique(names)]


def _resampled_problems(strata: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    return np.concatenate([rng.choice(members, size=members.size) for members in strata])


def _score(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``mean_s sum_j w_j values[s, j, :]`` -> one value per k."""
    return np.einsum("sjk,j->sk", values, weights).mean(axis=0)


@dataclass(frozen=True)
class Estimate:
    k: int
    value: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        """For a difference expected to be positive: ``supported`` when the interval is above
        0, ``reversed`` when below, ``not distinguishable`` when it contains 0."""
        if self.low > 0:
            return "supported"
        if self.high < 0:
            return "reversed"
        return "not distinguishable"


def _interval(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1.0 - CONFIDENCE) / 2.0
    return np.quantile(draws, alpha, axis=0), np.quantile(draws, 1.0 - alpha, axis=0)


def score_with_interval(
    runs: SeedRuns, benchmarks: Sequence[str], n_resamples: int = 2000, seed: int = 0
) -> list[Estimate]:
    """A method's score on a benchmark group at every k, with its bootstrap interval."""
    weights = group_weights(runs.problems, benchmarks)
    rng = np.random.default_rng(seed)
    strata = _strata(runs.problems)
    draws = np.empty((n_resamples, len(runs.ks)))
    for b in range(n_resamples):
        rows = _resampled_problems(strata, rng)
        seeds = rng.integers(0, runs.values.shape[0], size=runs.values.shape[0])
        # Resampling within benchmarks keeps their sizes: the weights still sum to 1.
        draws[b] = _score(runs.values[seeds][:, rows], weights[rows])
    low, high = _interval(draws)
    point = _score(runs.values, weights)
    return [
        Estimate(k, float(point[i]), float(low[i]), float(high[i])) for i, k in enumerate(runs.ks)
    ]


def paired_difference(
    first: SeedRuns,
    second: SeedRuns,
    benchmarks: Sequence[str],
    n_resamples: int = 2000,
    seed: int = 0,
) -> list[Estimate]:
    """``first - second`` on a benchmark group at every k: paired over problems, seeds
    resampled per method (see the module docstring)."""
    if not first.problems.equals(second.problems) or first.ks != second.ks:
        raise ValueError("the two methods were evaluated on different problems or ks")
    weights = group_weights(first.problems, benchmarks)
    rng = np.random.default_rng(seed)
    strata = _strata(first.problems)
    draws = np.empty((n_resamples, len(first.ks)))
    for b in range(n_resamples):
        rows = _resampled_problems(strata, rng)
        w = weights[rows]
        a = rng.integers(0, first.values.shape[0], size=first.values.shape[0])
        c = rng.integers(0, second.values.shape[0], size=second.values.shape[0])
        draws[b] = _score(first.values[a][:, rows], w) - _score(second.values[c][:, rows], w)
    low, high = _interval(draws)
    point = _score(first.values, weights) - _score(second.values, weights)
    return [
        Estimate(k, float(point[i]), float(low[i]), float(high[i])) for i, k in enumerate(first.ks)
    ]


def widening(
    first: SeedRuns,
    second: SeedRuns,
    benchmarks: Sequence[str],
    k_small: int,
    k_large: int,
    n_resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """How much the gap ``first - second`` grows from pass@k_small to pass@k_large (the
    paper's "the gain widens with k"), with its paired bootstrap interval."""
    i, j = first.ks.index(k_small), first.ks.index(k_large)
    weights = group_weights(first.problems, benchmarks)
    rng = np.random.default_rng(seed)
    strata = _strata(first.problems)
    draws = np.empty(n_resamples)
    for b in range(n_resamples):
        rows = _resampled_problems(strata, rng)
        w = weights[rows]
        a = rng.integers(0, first.values.shape[0], size=first.values.shape[0])
        c = rng.integers(0, second.values.shape[0], size=second.values.shape[0])
        gap = _score(first.values[a][:, rows], w) - _score(second.values[c][:, rows], w)
        draws[b] = gap[j] - gap[i]
    gap = _score(first.values, weights) - _score(second.values, weights)
    low, high = _interval(draws[:, None])
    return Estimate(k_large, float(gap[j] - gap[i]), float(low[0]), float(high[0]))


def mean_difference_interval(
    differences: np.ndarray, n_resamples: int = 2000, seed: int = 0
) -> Estimate:
    """Mean of per-unit paired differences (units: questions) with a bootstrap interval."""
    values = np.asarray(differences, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return Estimate(0, float("nan"), float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    draws = rng.choice(values, size=(n_resamples, values.size)).mean(axis=1)
    low, high = _interval(draws[:, None])
    return Estimate(0, float(values.mean()), float(low[0]), float(high[0]))


def sign_test_p(differences: np.ndarray) -> float:
    """Two-sided exact sign test of the median difference being 0 (ties dropped)."""
    from scipy.stats import binomtest  # scipy: only the claims need the test

    values = np.asarray(differences, dtype=np.float64)
    values = values[~np.isnan(values) & (values != 0)]
    if values.size == 0:
        return float("nan")
    return float(binomtest(int((values > 0).sum()), int(values.size)).pvalue)


def chance_pass_at_k(options: int, k: int) -> float:
    """pass@k of a uniform guesser among ``options`` answers (the floor a benchmark must clear)."""
    return 1.0 - (1.0 - 1.0 / options) ** k


__all__ = [
    "Estimate",
    "SeedRuns",
    "chance_pass_at_k",
    "group_weights",
    "mean_difference_interval",
    "paired_difference",
    "problem_counts",
    "score_with_interval",
    "seed_runs",
    "sign_test_p",
    "widening",
]
