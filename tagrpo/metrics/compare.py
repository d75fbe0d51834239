"""pass@k of policies trained with several seeds, and paired differences between methods, with
intervals that count both the problems and the seeds.

For a method with seeds ``s = 1..S`` and problems ``j`` (every benchmark's problems, aligned
across methods by ``(benchmark, question_id)``), ``P[s, j, k]`` is the unbiased pass@k of
problem ``j`` from seed ``s``'s ``n`` samples. A benchmark's score is the mean over its
problems; a group's (the paper's Table 1 averages) the mean over its benchmarks; a method's
score the mean over its seeds. So every estimate is ``mean_s sum_j w_j P[s, j, k]`` with weights
``w_j = 1 / (benchmarks in the group x problems in j's benchmark)``.

Intervals (95%) add two variance components and use a t quantile:

* **problems**: the variance of the estimate over a bootstrap of the problems (``n_resamples``
  draws, resampled within each benchmark, the same indices for every method compared: paired
  over problems), computed on each method's seed-averaged per-problem values;
* **seeds**: for each method with ``S >= 2`` seeds, ``var_s(score_s) / S``, the sample variance
  of its per-seed scores on the evaluated problems (training randomness and evaluation sampling
  together) over the number of seeds. Seeds of different methods are different training runs:
  no pairing is assumed. A method with one seed has no estimate of this component: its
  intervals are *conditional on that run* (:attr:`Estimate.conditional`), never silently
  widened or narrowed.

``se = sqrt(problems + seeds)``; the degrees of freedom are Welch-Satterthwaite's, with the
bootstrap component's taken as infinite and each seed component's as ``S - 1`` (so with 3
seeds whose scores vary, the quantile approaches t with 2 degrees of freedom, 4.30, instead of
1.96; resampling 3 seeds gave only 10 distinct draws and no width at all with 1 seed). The
interval is ``estimate +/- t * se`` clipped to what the quantity can take, and the two-sided
p-value of "the difference is 0" comes from the same t. Its interval excluding 0 is what
"distinguishable" means before the family-wise adjustment (:func:`holm_adjust`) of the report's
claims table; :func:`equivalence_test` is the TOST of "equal within a margin".
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


def _interval(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1.0 - CONFIDENCE) / 2.0
    return np.quantile(draws, alpha, axis=0), np.quantile(draws, 1.0 - alpha, axis=0)


@dataclass(frozen=True)
class Estimate:
    """An estimate at one k with its 95% interval; ``p_value`` is two-sided for "it is 0",
    ``se`` and ``df`` the standard error and t degrees of freedom behind both, ``seeds`` the
    seeds of each method it compares (empty when unknown)."""

    k: int
    value: float
    low: float
    high: float
    p_value: float = float("nan")
    se: float = float("nan")
    df: float = float("inf")
    seeds: tuple[int, ...] = ()

    @property
    def conditional(self) -> bool:
        """A method behind it has one seed: its interval holds for that run only (no
        between-seed variance could be estimated)."""
        return any(count == 1 for count in self.seeds)

    @property
    def verdict(self) -> str:
        """For a difference expected to be positive: ``supported`` when the interval is above
        0, ``reversed`` when below, ``not distinguishable`` when it contains 0."""
        if self.low > 0:
            return "supported"
        if self.high < 0:
            return "reversed"
        return "not distinguishable"


@dataclass(frozen=True)
class VarianceParts:
    """What an estimate's standard error is made of, per k (for the power calculation):
    ``problems`` the bootstrap variance over problems; ``per_seed[i]`` the sample variance of
    method i's per-seed scores (nan with one seed) and ``seeds[i]`` its number of seeds."""

    problems: np.ndarray
    per_seed: tuple[np.ndarray, ...]
    seeds: tuple[int, ...]


def t_interval(
    value: float, se: float, df: float, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """``(low, high, two-sided p of 0)`` of a t-based estimate (normal when df is infinite)."""
    from scipy.stats import t as student

    if not np.isfinite(se) or se < 0:
        raise ValueError(f"standard error must be finite and >= 0, got {se}")
    quantile = float(student.ppf(0.5 + confidence / 2.0, df))
    if se == 0.0:
        return value, value, (1.0 if value == 0.0 else 0.0)
    p_value = float(2.0 * student.sf(abs(value) / se, df))
    return value - quantile * se, value + quantile * se, p_value


def combine(
    problems: float, per_seed: Sequence[float], seeds: Sequence[int]
) -> tuple[float, float]:
    """``(se, df)``: the bootstrap variance over problems plus each method's ``var_s / S``
    (skipped with one seed: conditional on that run); Welch-Satterthwaite degrees of freedom
    with the bootstrap component's infinite."""
    total, denominator = float(problems), 0.0
    for variance, count in zip(per_seed, seeds, strict=True):
        if count < 1:
            raise ValueError("a method needs at least one seed")
        if count == 1:
            continue
        share = float(variance) / count
        total += share
        denominator += share * share / (count - 1)
    df = total * total / denominator if denominator > 0 else float("inf")
    return float(np.sqrt(total)), float(df)


def _contrast(
    sides: Sequence[np.ndarray],
    signs: Sequence[float],
    weights: np.ndarray,
    problems: pd.MultiIndex,
    n_resamples: int,
    seed: int,
) -> tuple[np.ndarray, VarianceParts]:
    """``sum_i signs[i] * score(sides[i])`` per k (``sides[i][s, j, k]``) and its variance parts.

    The problems are resampled once per draw, the same rows for every side (paired)."""
    if n_resamples < 2:
        raise ValueError("n_resamples must be >= 2")
    rng = np.random.default_rng(seed)
    strata = _strata(problems)
    means = sum(sign * side.mean(axis=0) for sign, side in zip(signs, sides, strict=True))
    point = np.einsum("jk,j->k", means, weights)
    rows = np.stack([_resampled_problems(strata, rng) for _ in range(n_resamples)])
    # Resampling within benchmarks keeps their sizes: the weights still sum to 1.
    draws = np.einsum("bjk,bj->bk", means[rows], weights[rows])
    per_seed = tuple(
        np.einsum("sjk,j->sk", side, weights).var(axis=0, ddof=1)
        if side.shape[0] > 1
        else np.full(side.shape[2], np.nan)
        for side in sides
    )
    parts = VarianceParts(draws.var(axis=0, ddof=1), per_seed, tuple(s.shape[0] for s in sides))
    return point, parts


def _estimates(
    point: np.ndarray, parts: VarianceParts, ks: Sequence[int], bounds: tuple[float, float]
) -> list[Estimate]:
    estimates = []
    for i, k in enumerate(ks):
        se, df = combine(parts.problems[i], [v[i] for v in parts.per_seed], parts.seeds)
        low, high, p_value = t_interval(float(point[i]), se, df)
        low, high = max(low, bounds[0]), min(high, bounds[1])
        estimates.append(Estimate(int(k), float(point[i]), low, high, p_value, se, df, parts.seeds))
    return estimates


def score_with_interval(
    runs: SeedRuns, benchmarks: Sequence[str], n_resamples: int = 2000, seed: int = 0
) -> list[Estimate]:
    """A method's score on a benchmark group at every k, with its interval (clipped to [0, 1])."""
    weights = group_weights(runs.problems, benchmarks)
    point, parts = _contrast([runs.values], [1.0], weights, runs.problems, n_resamples, seed)
    return _estimates(point, parts, runs.ks, (0.0, 1.0))


def difference_parts(
    first: SeedRuns,
    second: SeedRuns,
    benchmarks: Sequence[str],
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[np.ndarray, VarianceParts]:
    """``first - second`` per k and its variance parts (see :func:`paired_difference`)."""
    if not first.problems.equals(second.problems) or first.ks != second.ks:
        raise ValueError("the two methods were evaluated on different problems or ks")
    weights = group_weights(first.problems, benchmarks)
    return _contrast(
        [first.values, second.values], [1.0, -1.0], weights, first.problems, n_resamples, seed
    )


def paired_difference(
    first: SeedRuns,
    second: SeedRuns,
    benchmarks: Sequence[str],
    n_resamples: int = 2000,
    seed: int = 0,
) -> list[Estimate]:
    """``first - second`` on a benchmark group at every k: paired over problems, each method's
    seed variance added (see the module docstring); clipped to [-1, 1]."""
    point, parts = difference_parts(first, second, benchmarks, n_resamples, seed)
    return _estimates(point, parts, first.ks, (-1.0, 1.0))


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
    paper's "the gain widens with k"): the same intervals, on each seed's and problem's
    ``pass@k_large - pass@k_small``."""
    if not first.problems.equals(second.problems) or first.ks != second.ks:
        raise ValueError("the two methods were evaluated on different problems or ks")
    i, j = first.ks.index(k_small), first.ks.index(k_large)

    def growth(runs: SeedRuns) -> np.ndarray:
        return (runs.values[:, :, j] - runs.values[:, :, i])[:, :, None]

    weights = group_weights(first.problems, benchmarks)
    point, parts = _contrast(
        [growth(first), growth(second)], [1.0, -1.0], weights, first.problems, n_resamples, seed
    )
    return _estimates(point, parts, [k_large], (-2.0, 2.0))[0]


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


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down family-wise adjustment: the i-th smallest of m p-values becomes
    ``max_{l <= i} min(1, (m - l + 1) p_(l))``. NaN (a row that was not run) stays NaN and is
    not counted in m."""
    values = np.asarray(p_values, dtype=np.float64)
    present = np.flatnonzero(~np.isnan(values))
    if ((values[present] < 0) | (values[present] > 1)).any():
        raise ValueError(f"p-values must lie in [0, 1], got {values.tolist()}")
    adjusted = np.full(values.shape, np.nan)
    order = present[np.argsort(values[present], kind="stable")]
    m, running = order.size, 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * values[index]))
        adjusted[index] = running
    return adjusted.tolist()


@dataclass(frozen=True)
class Equivalence:
    """TOST of ``|difference| < margin``: ``p_value`` the larger of the two one-sided p-values;
    ``low``/``high`` the ``1 - 2 alpha`` interval (90% for alpha 0.05), inside (-margin, margin)
    exactly when ``p_value < alpha``."""

    value: float
    margin: float
    p_value: float
    low: float
    high: float
    alpha: float = 0.05

    @property
    def equivalent(self) -> bool:
        return self.p_value < self.alpha


def equivalence_test(estimate: Estimate, margin: float, alpha: float = 0.05) -> Equivalence:
    """Two one-sided t tests (Schuirmann's TOST) on an estimate's se and df."""
    from scipy.stats import t as student

    if margin <= 0:
        raise ValueError(f"the equivalence margin must be > 0, got {margin}")
    value, se, df = estimate.value, estimate.se, estimate.df
    if not np.isfinite(se):
        raise ValueError("the estimate carries no standard error")
    if se == 0.0:
        p_value = 0.0 if abs(value) < margin else 1.0
        return Equivalence(value, margin, p_value, value, value, alpha)
    above_lower = float(student.sf((value + margin) / se, df))  # H0: difference <= -margin
    below_upper = float(student.cdf((value - margin) / se, df))  # H0: difference >= margin
    quantile = float(student.ppf(1.0 - alpha, df))
    return Equivalence(
        value, margin, max(above_lower, below_upper), value - quantile * se,
        value + quantile * se, alpha,
    )  # fmt: skip


def half_width(
    problems: float, per_seed: Sequence[float], seeds: Sequence[int], problem_multiple: float = 1.0
) -> float:
    """The 95% half-width with ``seeds[i]`` seeds per method and ``problem_multiple`` times the
    problems (the bootstrap variance scales as 1 / problems; each method's per-seed variance is
    the measured one): the power calculation of the report's V5."""
    if problem_multiple <= 0:
        raise ValueError("problem_multiple must be > 0")
    if any(count >= 2 and not np.isfinite(v) for v, count in zip(per_seed, seeds, strict=True)):
        raise ValueError("a per-seed variance is unknown (it needs >= 2 measured seeds)")
    se, df = combine(problems / problem_multiple, per_seed, seeds)
    low, high, _ = t_interval(0.0, se, df)
    return (high - low) / 2.0


__all__ = [
    "Equivalence",
    "Estimate",
    "SeedRuns",
    "VarianceParts",
    "chance_pass_at_k",
    "combine",
    "difference_parts",
    "equivalence_test",
    "group_weights",
    "half_width",
    "holm_adjust",
    "mean_difference_interval",
    "paired_difference",
    "problem_counts",
    "score_with_interval",
    "seed_runs",
    "sign_test_p",
    "t_interval",
    "widening",
]
