"""Contrasts and scores over base draws: the base draw as a level of variance.

A world's base policy is one SFT draw; methods trained from it share it. Over >= 2 draws the
draw is the replicated unit: each draw's seed-averaged value per problem goes through the
crossed model of :mod:`tagrpo.metrics.compare` with the draws in the place of seeds, and the
variance is the method-by-problem component plus the draws' mean square over their number,
each term with its own t quantile (:func:`quadrature_interval`). With one draw every function
here is its within-draw counterpart in :mod:`tagrpo.metrics.compare` (conditional on that
draw). The study's power calculation (:func:`draw_seed_components`,
:func:`projected_draw_half_width`) splits a method's score into seed and draw parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tagrpo.metrics.compare import (
    CONFIDENCE,
    Estimate,
    NotMeasurable,
    SeedRuns,
    VarianceParts,
    crossed_contrast,
    group_weights,
    interval_estimates,
    paired_difference,
    quadrature_interval,
    score_with_interval,
    split_seeds,
    t_interval,
    widening,
)


def _draw_means(draws: Sequence[SeedRuns]) -> tuple[np.ndarray, pd.MultiIndex, tuple[int, ...]]:
    """``means[d, j, k]``: each base draw's mean over its seeds, on the problems every draw
    answered (the same world: the same benchmark problems in every draw)."""
    if not draws:
        raise ValueError("no base draw")
    problems, ks = draws[0].problems, draws[0].ks
    for runs in draws[1:]:
        if not runs.problems.equals(problems) or runs.ks != ks:
            raise ValueError("the base draws were evaluated on different problems or ks")
    return np.stack([runs.values.mean(axis=0) for runs in draws]), problems, ks


def _draw_estimates(
    point: np.ndarray,
    parts: VarianceParts,
    ks: Sequence[int],
    bounds: tuple[float, float],
) -> list[Estimate]:
    """Estimates over base draws (one replicated side: the draws' values): the problem
    component and the draws' mean square over their number, each with its own quantile
    (:func:`quadrature_interval`)."""
    draws = parts.seeds[0]
    estimates = []
    for i, k in enumerate(ks):
        terms = [
            (float(parts.problem[i]), max(parts.problems - parts.strata, 1.0)),
            (float(parts.score_variance[0][i]) / draws, draws - 1.0),
        ]
        se, df = quadrature_interval(terms)
        low, high, p_value = t_interval(float(point[i]), se, df)
        low, high = max(low, bounds[0]), min(high, bounds[1])
        estimates.append(Estimate(int(k), float(point[i]), low, high, p_value, se, df, (draws,)))
    return estimates


def draw_difference_parts(
    first: Sequence[SeedRuns], second: Sequence[SeedRuns], benchmarks: Sequence[str]
) -> tuple[np.ndarray, VarianceParts]:
    """``first - second`` over >= 2 base draws, paired by draw, and its variance parts with
    the draws in the place of seeds (``score_variance[0]``: the draws' mean square of the
    per-draw contrast; ``problem``: the method-by-problem component left after the draws'
    interaction is taken out); see :func:`draw_paired_difference`."""
    if len(first) != len(second):
        raise ValueError(f"{len(first)} draws of one side, {len(second)} of the other")
    if len(first) < 2:
        raise ValueError("the draw-level parts need >= 2 base draws")
    first_means, problems, ks = _draw_means(first)
    second_means, second_problems, second_ks = _draw_means(second)
    if not second_problems.equals(problems) or second_ks != ks:
        raise ValueError("the two sides were evaluated on different problems or ks")
    weights = group_weights(problems, benchmarks)
    return crossed_contrast([first_means - second_means], [1.0], weights, problems)


def draw_paired_difference(
    first: Sequence[SeedRuns], second: Sequence[SeedRuns], benchmarks: Sequence[str]
) -> list[Estimate]:
    """``first - second`` over base draws, paired by draw (``first[d]`` and ``second[d]``
    trained from draw d's base; a base policy is a one-seed "method" of its draw): the mean over
    draws of each draw's seed-averaged difference, at every k.

    The base draw is the replicated unit: each draw's difference ``C[d, j]`` (its seeds'
    mean of one side minus the other's) goes through the crossed model of the module docstring
    with the draws in the place of seeds: the variance is the method-by-problem component plus
    the draws' mean square over the number of draws (draws - 1 degrees of freedom), each term
    with its own t quantile (:func:`quadrature_interval`). Seed, seed-by-problem,
    draw-by-method and draw-by-method-by-problem variation all enter through the draws' mean
    square, each once. The estimate's ``seeds`` are the draws. With one draw it is
    :func:`paired_difference` within it (its ``seeds`` the seeds: conditional on that base
    draw, which the caller must say)."""
    if len(first) != len(second):
        raise ValueError(f"{len(first)} draws of one side, {len(second)} of the other")
    if len(first) == 1:
        return paired_difference(first[0], second[0], benchmarks)
    point, parts = draw_difference_parts(first, second, benchmarks)
    return _draw_estimates(point, parts, first[0].ks, (-1.0, 1.0))


def draw_mean(
    draws: Sequence[SeedRuns],
    benchmarks: Sequence[str],
    bounds: tuple[float, float] = (-1.0, 1.0),
) -> list[Estimate]:
    """The mean of a per-(seed, problem) quantity over base draws (each draw's mean over its
    seeds, then the mean over draws), with the draw as the replicated unit as in
    :func:`draw_paired_difference`; clipped to ``bounds``. For a difference measured within one
    policy (a seed's rate on one group of its responses minus another's, per question): one
    side, whose seed-by-problem pairing the difference keeps. With one draw: the crossed seeds x
    problems model within it (one seed: conditional on that run)."""
    if len(draws) == 1:
        runs = draws[0]
        weights = group_weights(runs.problems, benchmarks)
        point, parts = crossed_contrast([runs.values], [1.0], weights, runs.problems)
        return interval_estimates(point, parts, runs.ks, bounds)
    means, problems, ks = _draw_means(draws)
    weights = group_weights(problems, benchmarks)
    point, parts = crossed_contrast([means], [1.0], weights, problems)
    return _draw_estimates(point, parts, ks, bounds)


def draw_score_with_interval(
    draws: Sequence[SeedRuns], benchmarks: Sequence[str]
) -> list[Estimate]:
    """A method's score over base draws (each draw's seed mean, then the mean over draws), with
    the draw as the replicated unit (see :func:`draw_paired_difference`); clipped to [0, 1]."""
    if len(draws) == 1:
        return score_with_interval(draws[0], benchmarks)
    return draw_mean(draws, benchmarks, (0.0, 1.0))


def _growth(runs: SeedRuns, k_small: int, k_large: int) -> SeedRuns:
    """Each seed's and problem's ``pass@k_large - pass@k_small`` as a one-k :class:`SeedRuns`."""
    i, j = runs.ks.index(k_small), runs.ks.index(k_large)
    growth = (runs.values[:, :, j] - runs.values[:, :, i])[:, :, None]
    return SeedRuns(growth, runs.problems, (int(k_large),))


def draw_widening(
    first: Sequence[SeedRuns],
    second: Sequence[SeedRuns],
    benchmarks: Sequence[str],
    k_small: int,
    k_large: int,
) -> Estimate:
    """How much the gap ``first - second`` grows from pass@k_small to pass@k_large, over base
    draws paired by draw (:func:`draw_paired_difference` on each seed's and problem's
    ``pass@k_large - pass@k_small``); with one draw, :func:`widening` within it."""
    if len(first) == 1 and len(second) == 1:
        return widening(first[0], second[0], benchmarks, k_small, k_large)
    return draw_paired_difference(
        [_growth(runs, k_small, k_large) for runs in first],
        [_growth(runs, k_small, k_large) for runs in second],
        benchmarks,
    )[0]


def _draws_score(draws: Sequence[SeedRuns], benchmarks: Sequence[str]) -> np.ndarray:
    """A method's score per k: the mean over draws of its seeds' mean group score."""
    means, problems, _ = _draw_means(draws)
    weights = group_weights(problems, benchmarks)
    return np.einsum("djk,j->k", means, weights) / len(draws)


def draw_log_miss_widening(
    first: Sequence[SeedRuns],
    second: Sequence[SeedRuns],
    benchmarks: Sequence[str],
    k_small: int,
    k_large: int,
) -> Estimate:
    """The widening of :func:`draw_widening` on the scale ``L(p) = -log(1 - pass@k)`` of the
    group scores (a gain near a ceiling counts more there):
    ``[L(A_large) - L(B_large)] - [L(A_small) - L(B_small)]`` with ``A``, ``B`` the two sides'
    scores (their means over draws and seeds). Its standard error and degrees of freedom are the
    delta method's: the same analysis on the per-(seed, problem) values scaled by
    ``dL/dp = 1 / (1 - score)`` of their side and k (a side at a score of 1 has no finite ``L``:
    :class:`NotMeasurable`)."""
    scores = []
    scaled_sides = []
    for side in (first, second):
        score = _draws_score(side, benchmarks)
        ks = side[0].ks
        chosen = np.array([ks.index(k_small), ks.index(k_large)])
        if (score[chosen] >= 1.0 - 1e-12).any():
            raise NotMeasurable(
                "a side scores 1 at a compared k: -log(1 - pass@k) is infinite there"
            )
        slope = 1.0 / (1.0 - np.minimum(score, 1.0 - 1e-12))
        scaled_sides.append(
            [SeedRuns(runs.values * slope[None, None, :], runs.problems, runs.ks) for runs in side]
        )
        scores.append(-np.log1p(-score[chosen]))
    linear = draw_widening(scaled_sides[0], scaled_sides[1], benchmarks, k_small, k_large)
    value = float((scores[0][1] - scores[1][1]) - (scores[0][0] - scores[1][0]))
    low, high, p_value = t_interval(value, linear.se, linear.df)
    return Estimate(int(k_large), value, low, high, p_value, linear.se, linear.df, linear.seeds)


def draw_split_seeds(draws: Sequence[SeedRuns]) -> tuple[list[SeedRuns], list[SeedRuns]]:
    """A method's seeds in two halves within each base draw (the first ``S // 2`` against the
    rest): the A/A contrast over draws, paired by draw, whose interval should cover 0. Over
    >= 2 draws a half needs one seed (the draws' mean square carries the variance); with one
    draw, :func:`split_seeds` (>= 2 seeds a half)."""
    if len(draws) == 1:
        first, second = split_seeds(draws[0])
        return [first], [second]
    halves: tuple[list[SeedRuns], list[SeedRuns]] = ([], [])
    for runs in draws:
        count = runs.values.shape[0]
        if count < 2:
            raise NotMeasurable(
                f"{count} seed in a draw: an A/A split over draws needs >= 2 seeds per draw"
            )
        half = count // 2
        halves[0].append(SeedRuns(runs.values[:half], runs.problems, runs.ks))
        halves[1].append(SeedRuns(runs.values[half:], runs.problems, runs.ks))
    return halves


@dataclass(frozen=True)
class DrawSeedComponents:
    """One method's score over base draws split into its parts (the study's power calculation):
    ``seed`` the seed-level variance of one seed's score (the within-draw sample variance of
    the per-seed scores, pooled over draws, ``seed_df = draws x (seeds - 1)`` degrees of
    freedom; seed and seed-by-problem variation together), ``draw`` the between-draw variance
    of a draw's true mean score (the draws' sample variance of their seed means less
    ``seed / seeds``, truncated at 0), ``between`` that sample variance as measured."""

    seed: float
    seed_df: float
    draw: float
    between: float
    draws: int
    seeds: int

    def draw_mean_square(self, seeds: int, multiplier: float = 1.0) -> float:
        """The draws' expected mean square of a draw's seed mean with ``seeds`` seeds:
        ``multiplier x (draw + seed / seeds)``."""
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {seeds}")
        return multiplier * (self.draw + self.seed / seeds)


def draw_seed_components(
    draws: Sequence[SeedRuns], benchmarks: Sequence[str], k: int
) -> DrawSeedComponents:
    """:class:`DrawSeedComponents` of one method at pass@k on ``benchmarks``, from >= 2 draws
    with the same >= 2 seeds each."""
    if len(draws) < 2:
        raise ValueError("the between-draw variance needs >= 2 base draws")
    counts = {runs.values.shape[0] for runs in draws}
    if len(counts) != 1 or min(counts) < 2:
        raise ValueError(f"every draw needs the same >= 2 seeds, got {sorted(counts)}")
    seeds = counts.pop()
    _, problems, ks = _draw_means(draws)
    index = ks.index(int(k))
    weights = group_weights(problems, benchmarks)
    scores = np.stack([runs.values[:, :, index] @ weights for runs in draws])  # draws x seeds
    seed = float(scores.var(axis=1, ddof=1).mean())
    between = float(scores.mean(axis=1).var(ddof=1))
    return DrawSeedComponents(
        seed=seed,
        seed_df=float(len(draws) * (seeds - 1)),
        draw=max(between - seed / seeds, 0.0),
        between=between,
        draws=len(draws),
        seeds=seeds,
    )


def projected_draw_half_width(
    problem: float, problem_df: float, draw_mean_square: float, draws: int
) -> float:
    """The 95% half-width of a contrast over ``draws`` base draws whose method-by-problem
    component is ``problem`` (``problem_df`` degrees of freedom) and whose per-draw values have
    the mean square ``draw_mean_square``: each term with its own t quantile, added in quadrature
    (:func:`quadrature_interval`), as the study's analysis computes it."""
    from scipy.stats import t as student

    if draws < 2:
        raise ValueError("a draw-level half-width needs >= 2 draws")
    se, df = quadrature_interval([(problem, problem_df), (draw_mean_square / draws, draws - 1.0)])
    return float(student.ppf(0.5 + CONFIDENCE / 2.0, df)) * se


__all__ = [
    "DrawSeedComponents",
    "draw_difference_parts",
    "draw_log_miss_widening",
    "draw_mean",
    "draw_paired_difference",
    "draw_score_with_interval",
    "draw_seed_components",
    "draw_split_seeds",
    "draw_widening",
    "projected_draw_half_width",
]
