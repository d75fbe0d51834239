"""pass@k of policies trained with several seeds, and paired differences between methods, with
intervals that count the problems, the seeds and their interaction once each.

For a method with seeds ``s = 1..S`` and problems ``j`` (every benchmark's problems, aligned
across methods by ``(benchmark, question_id)``), ``P[s, j, k]`` is the unbiased pass@k of
problem ``j`` from seed ``s``'s ``n`` samples. A benchmark's score is the mean over its
problems; a group's (the paper's Table 1 averages) the mean over its benchmarks; a method's
score the mean over its seeds. So every estimate is ``mean_s sum_j w_j P[s, j, k]`` with weights
``w_j = 1 / (benchmarks in the group x problems in j's benchmark)``.

**The model** (crossed seeds x problems, per method and k)::

    P[s, j] = mu + seed_s + problem_j + interaction_sj

``seed_s`` (variance ``sigma_seed^2``) is what a training run shifts on every problem;
``problem_j`` (drawn within its benchmark) is the problem's difficulty; ``interaction_sj``
(variance ``sigma_int_j^2``) is the run's own luck on that problem together with the binomial
noise of evaluating it from ``n`` samples. Then

    Var(score) = sigma_seed^2 / S + sum_j w_j^2 sigma_problem^2 + sum_j w_j^2 sigma_int_j^2 / S

(``sigma_problem^2 / J + sigma_int^2 / (S J)`` with equal weights). In a difference of two
methods the problems are shared (paired): their common difficulty cancels and only the
method-by-problem part of ``problem_j`` remains; the seeds of different methods are different
training runs, not paired.

**Estimation** (method of moments, per k; every quantity unbiased before truncation):

* ``MS_m``, the sample variance of method m's per-seed scores, estimates
  ``sigma_seed^2 + sum_j w_j^2 sigma_int_j^2`` (``S_m - 1`` degrees of freedom);
* ``sum_j w_j^2 var_s(P[s, j])`` estimates ``sum_j w_j^2 (sigma_seed^2 + sigma_int_j^2)``; the
  two together give the interaction ``I_m = sum_j w_j^2 sigma_int_j^2`` and the seed component
  ``sigma_seed^2 = MS_m - I_m`` (the mean covariance of two problems over seeds);
* ``Q``, the stratified variance of the seed-averaged per-problem contrast
  (``sum_h W_h^2 s_h^2 / n_h`` over benchmarks h: the analytic form of a bootstrap over problems
  within benchmarks, with the unbiased ``s_h^2``), estimates the problem part plus
  ``sum_m I_m / S_m``: the interaction averaged over seeds is in every problem's value. The
  problem component is therefore ``Q - sum_m I_m / S_m``, truncated at 0, with
  ``sum_h (n_h - 1)`` degrees of freedom.

The old interval added ``Q`` and ``MS_m / S_m``: the interaction ``I_m / S_m`` twice (too wide).
Here the variance of an estimate is

    problem component + sum_m MS_m / S_m

each piece once: the seeds' mean square carries the seed effect with the interaction of the
measured design, the problem component what is left of ``Q``. It is a linear combination of
mean squares, so its degrees of freedom are Welch-Satterthwaite's over ``MS_m / S_m``
(``S_m - 1`` each) and the problem component (``sum_h (n_h - 1)``): with 3 seeds a side and a
seed term that dominates, close to t with 4 degrees of freedom. The interval is
``estimate +/- t * se`` clipped to what the quantity can take, and the two-sided p-value of
"the difference is 0" comes from the same t. A seeded simulation of the crossed model (an A/A
null, ``tests/test_metrics_compare.py``) checks its coverage with 2, 3 and 5 seeds a side:
95.9-96.4% of 95% intervals cover 0 at 10,000 simulations each (slightly conservative: the
problem component truncated at 0, which is 0 in an A/A, and Welch's df with 2-3 seeds); the
old interval covered 97.5-99.3%. Not a hierarchical bootstrap: with 2-3 seeds a resample of
the seeds has 3-10 distinct draws, and none with 1.

A method with one seed has no ``MS_m`` or ``I_m``: its seed effect is not counted (its
intervals are *conditional on that run*, :attr:`Estimate.conditional`) and its interaction stays
in the problem component. The base policy, the one model every method starts from, is such a
side.

Projections (the report's power table, :func:`half_width`) use the components themselves:
``seed_m = max(MS_m - I_m, 0)``, ``I_m`` (scaling as 1 / problems) and the problem component
(scaling as 1 / problems), so with another number of seeds or problems the seed-level variance
is ``(seed_m + I_m / multiple) / S'``.

An interval excluding 0 is what "distinguishable" means before the family-wise adjustment
(:func:`holm_adjust`) of the report's claims table; :func:`equivalence_test` is the TOST of
"equal within a margin". A comparison with zero variance (nothing varies: e.g. every pass@k
is 0) is :class:`NotMeasurable`, never a finding (:func:`measurability`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tagrpo.metrics.passk import pass_at_k_per_problem

CONFIDENCE = 0.95
# A standard error below this (1e-7 points) is floating-point rounding of inputs that do not
# vary (0.9 - 0.8 and 0.1 - 0.0 differ by 2e-17): zero variance.
ZERO_SE = 1e-9


class NotMeasurable(ValueError):
    """A comparison the data cannot support (too few seeds, nothing that varies): its row must
    read "not measurable", never a finding."""


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


def benchmark_strata(problems: pd.MultiIndex) -> list[np.ndarray]:
    """Each benchmark's problem indices: problems are sampled, and resampled, within these."""
    names = problems.get_level_values(0)
    return [np.flatnonzero(names == name) for name in pd.unique(names)]


def resample_problems(strata: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """One bootstrap draw of problem indices, within each benchmark (its size kept)."""
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


def measurability(estimate: Estimate) -> str | None:
    """Why an estimate cannot be read as a finding (None: it can). With zero variance (every
    per-seed, per-problem value the same, e.g. all 0) a t statistic is infinite or undefined:
    "supported" or "equivalent" at p < 0.001 would be an artefact of nothing varying."""
    if not np.isfinite(estimate.se):
        return "no standard error"
    if estimate.se < ZERO_SE:
        return (
            "zero variance: nothing varies across the seeds and problems compared (e.g. "
            "every pass@k is 0)"
        )
    return None


def satterthwaite(terms: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """``(variance, df)`` of a sum of independent variance terms ``(value, df)``: the sum and
    Welch-Satterthwaite's ``(sum v)^2 / sum(v^2 / df)`` (infinite when nothing is random)."""
    total = float(sum(value for value, _ in terms))
    denominator = sum(value * value / df for value, df in terms if value > 0)
    return total, (total * total / denominator if denominator > 0 else float("inf"))


@dataclass(frozen=True)
class Components:
    """The crossed variance components of one contrast at one k (see the module docstring):
    ``problem`` the method-by-problem part at the measured problems (``sigma_problem^2 sum
    w_j^2``, >= 0); per method, ``seed[i]`` its ``sigma_seed^2`` (>= 0) and ``interaction[i]``
    its ``sum_j w_j^2 sigma_int_j^2`` (>= 0), both nan with one seed; ``seeds[i]`` its seeds;
    ``problems`` and ``strata`` the weighted problems and benchmarks (``problems - strata``
    degrees of freedom for the problem part)."""

    problem: float
    seed: tuple[float, ...]
    interaction: tuple[float, ...]
    seeds: tuple[int, ...]
    problems: int
    strata: int

    def design_variance(
        self, seeds: Sequence[int] | None = None, problem_multiple: float = 1.0
    ) -> tuple[float, float]:
        """``(variance, df)`` of the contrast with ``seeds[i]`` seeds per method (default: the
        measured ones) and ``problem_multiple`` times the problems: ``problem / multiple +
        sum_i (seed_i + interaction_i / multiple) / seeds_i``. A method needs >= 2 seeds, and a
        measured seed component, to be projected."""
        if problem_multiple <= 0:
            raise ValueError("problem_multiple must be > 0")
        counts = tuple(self.seeds if seeds is None else seeds)
        if len(counts) != len(self.seed):
            raise ValueError(f"{len(self.seed)} methods, {len(counts)} seed counts")
        terms = [
            (
                self.problem / problem_multiple,
                max(problem_multiple * self.problems - self.strata, 1.0),
            )
        ]
        for seed, interaction, count in zip(self.seed, self.interaction, counts, strict=True):
            if count < 2 or not (np.isfinite(seed) and np.isfinite(interaction)):
                raise ValueError(
                    "a per-seed variance is unknown (it needs >= 2 measured seeds and >= 2 "
                    "projected)"
                )
            terms.append(((seed + interaction / problem_multiple) / count, count - 1.0))
        return satterthwaite(terms)


@dataclass(frozen=True)
class VarianceParts:
    """What an estimate's standard error is made of, per k (arrays over ks): the crossed
    components of :class:`Components` plus ``score_variance[i]``, the sample variance of
    method i's per-seed scores (``MS_i``; nan with one seed), which the measured interval uses
    as it is (see the module docstring)."""

    problem: np.ndarray
    seed: tuple[np.ndarray, ...]
    interaction: tuple[np.ndarray, ...]
    score_variance: tuple[np.ndarray, ...]
    seeds: tuple[int, ...]
    problems: int
    strata: int

    def at(self, index: int) -> Components:
        """The components at ``ks[index]``."""
        return Components(
            float(self.problem[index]),
            tuple(float(v[index]) for v in self.seed),
            tuple(float(v[index]) for v in self.interaction),
            self.seeds,
            self.problems,
            self.strata,
        )

    def measured(self, index: int) -> tuple[float, float]:
        """``(se, df)`` of the estimate at ``ks[index]``: the problem component plus each
        method's ``MS / S`` (a one-seed method adds none: conditional on its run)."""
        terms = [(float(self.problem[index]), max(self.problems - self.strata, 1.0))]
        for variance, count in zip(self.score_variance, self.seeds, strict=True):
            if count >= 2:
                terms.append((float(variance[index]) / count, count - 1.0))
        total, df = satterthwaite(terms)
        return float(np.sqrt(total)), df


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


def quadrature_interval(
    terms: Sequence[tuple[float, float]], confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """``(se, df)`` of a sum of independent variance terms ``(value, df)`` where each term keeps
    its own t quantile: the half-width is the quadrature sum ``sqrt(sum (t_df_i * sqrt(v_i))^2)``
    and ``df`` the effective degrees of freedom at which ``t_df * se`` equals it (``se`` the
    square root of the sum), so a t interval and its p-value from ``(se, df)`` reproduce it.

    Why not Welch-Satterthwaite over the base draws: with 2-3 draws the draw term has 1-2
    degrees of freedom, and when its mean square comes out small the pooled df jumps and the
    interval narrows exactly when it should not; the pre-registered A/A simulation of world v3
    covered 0 in 92.3% (seed-dominated) and 89.8% (draw-dominated) of 95% intervals with 2
    draws. Each term with its own quantile covers >= 94% there (conservative, 98%, where the
    problem component dominates)."""
    from scipy.optimize import brentq
    from scipy.special import stdtrit  # t.ppf as a plain ufunc: the same values, ~15x faster

    quantile = 0.5 + confidence / 2.0
    total = float(sum(value for value, _ in terms))
    if total <= 0.0:
        return 0.0, float("inf")
    half = float(np.sqrt(sum(value * float(stdtrit(df, quantile)) ** 2 for value, df in terms)))
    ratio = half / np.sqrt(total)
    if ratio <= float(stdtrit(1e9, quantile)) + 1e-12:
        return float(np.sqrt(total)), float("inf")
    df = brentq(lambda d: float(stdtrit(d, quantile)) - ratio, 1e-3, 1e9, xtol=1e-10)
    return float(np.sqrt(total)), float(df)


def _stratified_variance(
    values: np.ndarray, strata: list[np.ndarray], weights: np.ndarray
) -> np.ndarray:
    """Variance of ``sum_j w_j values[j, k]`` over draws of each benchmark's problems:
    ``sum_h W_h^2 s_h^2 / n_h`` (``s_h^2`` the unbiased variance within benchmark h, ``W_h`` its
    weight; a one-problem benchmark contributes nothing, as a bootstrap of it would)."""
    total = np.zeros(values.shape[1])
    for members in strata:
        weight = float(weights[members].sum())
        if weight == 0.0 or members.size < 2:
            continue
        if not np.allclose(weights[members], weights[members][0]):
            raise ValueError("the weights of a benchmark's problems must be equal")
        total += weight**2 * values[members].var(axis=0, ddof=1) / members.size
    return total


def _seed_moments(side: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(MS, I)`` per k of one method ``side[s, j, k]``: the sample variance of its per-seed
    scores and the interaction ``sum_j w_j^2 sigma_int_j^2`` (truncated at 0); nan with one
    seed. ``E[MS] = sigma_seed^2 + I`` and ``E[sum_j w_j^2 var_s P[s, j]] = W2 sigma_seed^2 + I``
    (``W2 = sum_j w_j^2``), solved for I."""
    if side.shape[0] < 2:
        missing = np.full(side.shape[2], np.nan)
        return missing, missing
    squares = weights**2
    mean_square = np.einsum("sjk,j->sk", side, weights).var(axis=0, ddof=1)
    per_problem = np.einsum("jk,j->k", side.var(axis=0, ddof=1), squares)
    w2 = float(squares.sum())
    if w2 >= 1.0:  # one problem: seed and interaction are one thing, counted as the seed's
        return mean_square, np.zeros_like(mean_square)
    interaction = (per_problem - w2 * mean_square) / (1.0 - w2)
    return mean_square, np.maximum(interaction, 0.0)


def crossed_contrast(
    sides: Sequence[np.ndarray],
    signs: Sequence[float],
    weights: np.ndarray,
    problems: pd.MultiIndex,
) -> tuple[np.ndarray, VarianceParts]:
    """``sum_i signs[i] * score(sides[i])`` per k (``sides[i][s, j, k]``) and its crossed
    variance components; the problems are shared by every side (paired)."""
    strata = [members for members in benchmark_strata(problems) if weights[members].sum() > 0]
    means = sum(sign * side.mean(axis=0) for sign, side in zip(signs, sides, strict=True))
    point = np.einsum("jk,j->k", means, weights)
    moments = [_seed_moments(side, weights) for side in sides]
    seeds = tuple(int(side.shape[0]) for side in sides)
    problem = _stratified_variance(means, strata, weights)
    for (_, interaction), count in zip(moments, seeds, strict=True):
        if count >= 2:
            problem = problem - interaction / count
    parts = VarianceParts(
        problem=np.maximum(problem, 0.0),
        seed=tuple(np.maximum(ms - i, 0.0) for ms, i in moments),
        interaction=tuple(i for _, i in moments),
        score_variance=tuple(ms for ms, _ in moments),
        seeds=seeds,
        problems=int(sum(members.size for members in strata)),
        strata=len(strata),
    )
    return point, parts


def interval_estimates(
    point: np.ndarray, parts: VarianceParts, ks: Sequence[int], bounds: tuple[float, float]
) -> list[Estimate]:
    """One :class:`Estimate` per k from a contrast's point and parts, clipped to ``bounds``."""
    estimates = []
    for i, k in enumerate(ks):
        se, df = parts.measured(i)
        low, high, p_value = t_interval(float(point[i]), se, df)
        low, high = max(low, bounds[0]), min(high, bounds[1])
        estimates.append(Estimate(int(k), float(point[i]), low, high, p_value, se, df, parts.seeds))
    return estimates


def score_with_interval(runs: SeedRuns, benchmarks: Sequence[str]) -> list[Estimate]:
    """A method's score on a benchmark group at every k, with its interval (clipped to [0, 1])."""
    weights = group_weights(runs.problems, benchmarks)
    point, parts = crossed_contrast([runs.values], [1.0], weights, runs.problems)
    return interval_estimates(point, parts, runs.ks, (0.0, 1.0))


def difference_parts(
    first: SeedRuns, second: SeedRuns, benchmarks: Sequence[str]
) -> tuple[np.ndarray, VarianceParts]:
    """``first - second`` per k and its variance components (see :func:`paired_difference`)."""
    if not first.problems.equals(second.problems) or first.ks != second.ks:
        raise ValueError("the two methods were evaluated on different problems or ks")
    weights = group_weights(first.problems, benchmarks)
    return crossed_contrast([first.values, second.values], [1.0, -1.0], weights, first.problems)


def paired_difference(
    first: SeedRuns, second: SeedRuns, benchmarks: Sequence[str]
) -> list[Estimate]:
    """``first - second`` on a benchmark group at every k: paired over problems, each method's
    seeds counted once with their interaction (see the module docstring); clipped to [-1, 1]."""
    point, parts = difference_parts(first, second, benchmarks)
    return interval_estimates(point, parts, first.ks, (-1.0, 1.0))


def estimate_half_width(estimate: Estimate, confidence: float = CONFIDENCE) -> float:
    """The half-width ``t_df * se`` of an estimate's interval before any clipping (V5 reads
    it: the design's resolution, not the estimate)."""
    from scipy.stats import t as student

    return float(student.ppf(0.5 + confidence / 2.0, estimate.df)) * estimate.se


def split_seeds(runs: SeedRuns) -> tuple[SeedRuns, SeedRuns]:
    """A method's seeds in two halves, the first ``S // 2`` against the rest: an A/A contrast
    (the same method both sides), whose interval should cover 0 in 95% of such splits."""
    half = runs.values.shape[0] // 2
    if half < 2:
        raise NotMeasurable(
            f"{runs.values.shape[0]} seeds: an A/A split needs >= 2 seeds a half (>= 4 seeds)"
        )
    return (
        SeedRuns(runs.values[:half], runs.problems, runs.ks),
        SeedRuns(runs.values[half:], runs.problems, runs.ks),
    )


def widening(
    first: SeedRuns,
    second: SeedRuns,
    benchmarks: Sequence[str],
    k_small: int,
    k_large: int,
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
    point, parts = crossed_contrast(
        [growth(first), growth(second)], [1.0, -1.0], weights, first.problems
    )
    return interval_estimates(point, parts, [k_large], (-2.0, 2.0))[0]


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
    ``max_{l <= i} min(1, (m - l + 1) p_(l))``. Every member counts in m: a row that was not
    run, or cannot be measured, enters with p = 1 (the caller's job), so m is the family the
    report defines and never shrinks with what was run; a missing (nan) p-value is an error."""
    values = np.asarray(p_values, dtype=np.float64)
    if np.isnan(values).any():
        raise ValueError(
            "a p-value is missing (nan): a row that was not run counts in the family with p = 1"
        )
    if ((values < 0) | (values > 1)).any():
        raise ValueError(f"p-values must lie in [0, 1], got {values.tolist()}")
    adjusted = np.full(values.shape, np.nan)
    order = np.argsort(values, kind="stable")
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
    """Two one-sided t tests (Schuirmann's TOST) on an estimate's se and df.

    Raises :class:`NotMeasurable` when a side has fewer than 2 seeds (or its seeds are
    unknown): without the between-seed variance a narrow interval is narrow only for those
    runs, and "equivalent" would claim more than they show; and when the estimate has zero
    variance (e.g. every pass@k is 0): two identical constants are not evidence of equal
    methods."""
    from scipy.stats import t as student

    if margin <= 0:
        raise ValueError(f"the equivalence margin must be > 0, got {margin}")
    if not estimate.seeds or min(estimate.seeds) < 2:
        seeds = " vs ".join(map(str, estimate.seeds)) or "unknown"
        raise NotMeasurable(
            f"seeds {seeds}: an equivalence test needs >= 2 seeds per arm (the between-seed "
            "variance)"
        )
    reason = measurability(estimate)
    if reason is not None:
        raise NotMeasurable(reason)
    value, se, df = estimate.value, estimate.se, estimate.df
    above_lower = float(student.sf((value + margin) / se, df))  # H0: difference <= -margin
    below_upper = float(student.cdf((value - margin) / se, df))  # H0: difference >= margin
    quantile = float(student.ppf(1.0 - alpha, df))
    return Equivalence(
        value, margin, max(above_lower, below_upper), value - quantile * se,
        value + quantile * se, alpha,
    )  # fmt: skip


def half_width(
    components: Components, seeds: Sequence[int] | None = None, problem_multiple: float = 1.0
) -> float:
    """The 95% half-width ``t * se`` of a contrast with ``seeds[i]`` seeds per method (default:
    the measured ones) and ``problem_multiple`` times the problems, from its crossed variance
    components (:meth:`Components.design_variance`): the power calculation of the report's
    V5."""
    variance, df = components.design_variance(seeds, problem_multiple)
    low, high, _ = t_interval(0.0, float(np.sqrt(variance)), df)
    return (high - low) / 2.0


__all__ = [
    "Components",
    "Equivalence",
    "Estimate",
    "NotMeasurable",
    "SeedRuns",
    "VarianceParts",
    "benchmark_strata",
    "chance_pass_at_k",
    "crossed_contrast",
    "difference_parts",
    "equivalence_test",
    "estimate_half_width",
    "group_weights",
    "half_width",
    "holm_adjust",
    "interval_estimates",
    "mean_difference_interval",
    "measurability",
    "paired_difference",
    "problem_counts",
    "quadrature_interval",
    "resample_problems",
    "satterthwaite",
    "score_with_interval",
    "seed_runs",
    "sign_test_p",
    "split_seeds",
    "t_interval",
    "widening",
]
