"""Seeds x problems pass@k, group scores and paired differences with bootstrap intervals."""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd
import pytest

from tagrpo.metrics.compare import (
    Components,
    Estimate,
    NotMeasurable,
    SeedRuns,
    chance_pass_at_k,
    difference_parts,
    equivalence_test,
    group_weights,
    half_width,
    holm_adjust,
    mean_difference_interval,
    measurability,
    paired_difference,
    problem_counts,
    score_with_interval,
    seed_runs,
    sign_test_p,
    split_seeds,
    widening,
)
from tagrpo.metrics.draws import draw_paired_difference, draw_score_with_interval
from tagrpo.metrics.passk import pass_at_k_per_problem

pytestmark = pytest.mark.core


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
    estimates = score_with_interval(runs, ["a", "b"])
    # pass@1: a = 1.0; b = (0.25 + 0) / 2 = 0.125 -> (1 + 0.125) / 2
    assert estimates[0].value == pytest.approx(0.5625)
    # pass@4: a = 1, b = (1 + 0) / 2 -> 0.75
    assert estimates[2].value == pytest.approx(0.75)
    assert estimates[0].low <= 0.5625 <= estimates[0].high
    only_a = score_with_interval(runs, ["a"])
    assert [e.value for e in only_a] == [1.0, 1.0, 1.0]
    assert (only_a[0].low, only_a[0].high) == (1.0, 1.0)  # nothing varies: no width


def test_paired_difference_and_verdicts() -> None:
    good, bad = _runs(GOOD, GOOD), _runs(BAD, BAD)
    difference = paired_difference(good, bad, ["a"])
    assert [(e.k, e.value, e.low, e.high) for e in difference] == [
        (1, 1.0, 1.0, 1.0),
        (2, 1.0, 1.0, 1.0),
        (4, 1.0, 1.0, 1.0),
    ]
    assert difference[0].verdict == "supported"
    assert paired_difference(bad, good, ["a"])[0].verdict == "reversed"
    same = paired_difference(good, good, ["a", "b"])
    assert all(e.value == 0.0 and e.verdict == "not distinguishable" for e in same)


def test_seed_variation_widens_the_interval() -> None:
    mixed = _runs(GOOD, BAD)  # one seed learned, one did not
    difference = paired_difference(mixed, _runs(BAD, BAD), ["a"])
    # One problem: no problem variance. Seeds score 1 and 0: var 0.5, / 2 seeds = 0.25, se 0.5,
    # 1 degree of freedom: 0.5 +/- 12.7 * 0.5, clipped to [-1, 1]; p = 2 P(t_1 > 1) = 0.5.
    assert difference[0].value == pytest.approx(0.5)
    assert (difference[0].se, difference[0].df, difference[0].seeds) == (0.5, 1.0, (2, 2))
    assert (difference[0].low, difference[0].high) == (-1.0, 1.0)
    assert difference[0].p_value == pytest.approx(0.5)
    assert difference[0].verdict == "not distinguishable"
    assert not difference[0].conditional


def test_widening_of_the_gap_with_k() -> None:
    runs_good, runs_bad = _runs(GOOD), _runs(BAD)
    gap = widening(runs_good, runs_bad, ["b"], 1, 4)
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
    estimate = mean_difference_interval(np.array([0.1, 0.1, 0.1, np.nan]))
    assert (estimate.value, estimate.low, estimate.high) == pytest.approx((0.1, 0.1, 0.1))
    assert sign_test_p(np.array([1.0] * 10)) == pytest.approx(2 / 2**10)
    assert sign_test_p(np.array([1.0, -1.0])) == 1.0
    assert chance_pass_at_k(4, 32) == pytest.approx(1 - 0.75**32)
    assert chance_pass_at_k(4, 1) == 0.25


def _matrix(per_seed: list[list[float]], benchmarks: list[str]) -> SeedRuns:
    """SeedRuns from a seeds x problems matrix of pass@1 values (one k)."""
    values = np.asarray(per_seed, dtype=float)[:, :, None]
    index = pd.MultiIndex.from_tuples([(b, str(j)) for j, b in enumerate(benchmarks)])
    return SeedRuns(values, index, (1,))


def test_seed_component_is_t_based_with_satterthwaite_df_and_grows_with_seed_variance() -> None:
    # Every problem of a seed has the same value: the problem bootstrap varies nothing, so the
    # interval is the seeds' alone. A: seeds 0.5, 0.6, 0.7 (var 0.01); B: 0.4 three times.
    benchmarks = ["x", "x", "y", "y"]
    a = _matrix([[v] * 4 for v in (0.5, 0.6, 0.7)], benchmarks)
    b = _matrix([[0.4] * 4] * 3, benchmarks)
    (estimate,) = paired_difference(a, b, ["x", "y"])
    assert estimate.value == pytest.approx(0.2)
    assert estimate.se == pytest.approx(0.05773502691896258)  # sqrt(0.01 / 3)
    assert estimate.df == pytest.approx(2.0)  # only A's seeds vary: S - 1
    # 0.2 +/- t(2, 0.975) = 4.3027 x se
    assert (estimate.low, estimate.high) == pytest.approx(
        (0.2 - 0.24841377117503302, 0.2 + 0.24841377117503302)
    )
    assert estimate.p_value == pytest.approx(0.07417990022744855)
    # The same mean with seeds further apart (0.4, 0.6, 0.8: var 0.04): twice the se.
    spread = _matrix([[v] * 4 for v in (0.4, 0.6, 0.8)], benchmarks)
    (wider,) = paired_difference(spread, b, ["x", "y"])
    assert wider.value == pytest.approx(0.2)
    assert wider.high - wider.low == pytest.approx(2 * 0.49682754235006604)
    assert wider.p_value == pytest.approx(0.22540333075851665)


def test_a_one_seed_method_is_conditional_and_pairing_cancels_shared_problem_difficulty() -> None:
    # Problems differ wildly in difficulty, but B is A shifted by 0.1 on every problem: paired
    # over problems, the difference does not vary under resampling; one seed each: no seed term.
    a = _matrix([[0.9, 0.1, 0.5, 0.3]], ["x", "x", "y", "y"])
    b = _matrix([[0.8, 0.0, 0.4, 0.2]], ["x", "x", "y", "y"])
    (estimate,) = paired_difference(a, b, ["x", "y"])
    assert estimate.value == pytest.approx(0.1)
    assert estimate.se == pytest.approx(0.0, abs=1e-12)
    assert estimate.conditional and estimate.seeds == (1, 1)
    # Nothing varies but rounding (0.9 - 0.8 is not 0.1 - 0.0): never read as a finding.
    assert measurability(estimate).startswith("zero variance")
    three = _matrix([[0.9, 0.1, 0.5, 0.3]] * 3, ["x", "x", "y", "y"])
    assert not paired_difference(three, three, ["x"])[0].conditional


def test_problem_component_is_the_stratified_variance_of_the_problems() -> None:
    # One seed; benchmark x has 4 problems, y has 2. Problems drawn within benchmarks: the
    # score's variance is sum_h W_h^2 s_h^2 / n_h with the unbiased s_h^2 (x: 1/3, y: 0.08),
    # sum_h (n_h - 1) = 4 degrees of freedom.
    values = [0.0, 1.0, 0.0, 1.0, 0.2, 0.6]
    runs = _matrix([values], ["x", "x", "x", "x", "y", "y"])
    (estimate,) = score_with_interval(runs, ["x", "y"])
    assert estimate.se**2 == pytest.approx(0.25 * (1 / 3) / 4 + 0.25 * 0.08 / 2)  # 0.030833
    assert estimate.value == pytest.approx((0.5 + 0.4) / 2)
    assert estimate.df == 4.0 and estimate.conditional
    assert estimate.high - estimate.value == pytest.approx(0.4875277382027791)  # t(4) x se


def test_crossed_components_count_the_interaction_once() -> None:
    # A: 2 seeds x 4 problems of one benchmark (w_j = 1/4, sum w^2 = 1/4); B constant.
    # A's seed scores 0.6 and 0.4: MS = 0.02. Per-problem variances over seeds 0, 0.08, 0,
    # 0.08: sum w^2 var = 0.01, so the interaction I = (0.01 - 0.25 x 0.02) / 0.75 = 1/150 and
    # the seed component 0.02 - 1/150 = 1/75. The seed-averaged differences 0, 0.2, 0.2, 0.4
    # vary by Q = s^2 / 4 = 1/150, which holds I / 2 = 1/300: the method-by-problem part is
    # 1/300. Variance: 1/300 + MS / 2 = 1/75 (the old interval added Q + MS / 2 = 1/60: the
    # interaction twice). df: (1/75)^2 / ((1/300)^2 / 3 + (1/100)^2 / 1) = 12/7.
    a = _matrix([[0.3, 0.7, 0.5, 0.9], [0.3, 0.3, 0.5, 0.5]], ["x"] * 4)
    b = _matrix([[0.3] * 4] * 2, ["x"] * 4)
    point, parts = difference_parts(a, b, ["x"])
    assert point.tolist() == pytest.approx([0.2])
    components = parts.at(0)
    assert components.problem == pytest.approx(1 / 300)
    assert components.seed == pytest.approx((1 / 75, 0.0))
    assert components.interaction == pytest.approx((1 / 150, 0.0))
    assert (components.problems, components.strata, components.seeds) == (4, 1, (2, 2))
    (estimate,) = paired_difference(a, b, ["x"])
    assert estimate.se == pytest.approx(np.sqrt(1 / 75))
    assert estimate.df == pytest.approx(12 / 7)
    assert estimate.high - estimate.value == pytest.approx(0.5852599537765338)
    # The design's variance at the measured seeds and problems is the same sum.
    assert components.design_variance() == pytest.approx((1 / 75, 12 / 7))
    # One method alone: the same components (B added nothing).
    (score,) = score_with_interval(a, ["x"])
    assert score.se == pytest.approx(np.sqrt(1 / 75))


def test_a_a_split_of_a_method_s_seeds() -> None:
    runs = _matrix([[0.1 * s, 0.2] for s in range(5)], ["x", "x"])
    first, second = split_seeds(runs)
    assert first.values.shape[0] == 2 and second.values.shape[0] == 3
    assert first.values[:, 0, 0].tolist() == pytest.approx([0.0, 0.1])
    with pytest.raises(NotMeasurable, match="3 seeds: an A/A split needs >= 2 seeds a half"):
        split_seeds(_matrix([[0.1, 0.2]] * 3, ["x", "x"]))


def test_holm_adjustment_is_the_textbook_step_down() -> None:
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjust([0.01, 0.02, 0.03]) == pytest.approx([0.03, 0.04, 0.04])
    # A row not run counts with p = 1 (the caller's): m stays 4, never 3.
    assert holm_adjust([0.01, 1.0, 0.02, 0.9]) == pytest.approx([0.04, 1.0, 0.06, 1.0])
    with pytest.raises(ValueError, match="a p-value is missing"):
        holm_adjust([0.01, float("nan"), 0.02, 0.9])
    assert holm_adjust([0.5, 0.6]) == [1.0, 1.0]
    with pytest.raises(ValueError, match="p-values must lie in"):
        holm_adjust([1.5])


def test_equivalence_by_two_one_sided_tests() -> None:
    near = equivalence_test(Estimate(32, 0.005, 0.0, 0.0, se=0.01, seeds=(3, 3)), margin=0.02)
    # max(P(Z > (0.005 + 0.02) / 0.01), P(Z < (0.005 - 0.02) / 0.01)) = max(0.0062, 0.0668)
    assert near.p_value == pytest.approx(0.06680720126885807)
    assert (near.low, near.high) == pytest.approx((-0.011448536269514722, 0.021448536269514724))
    assert not near.equivalent  # the 90% interval reaches past +0.02
    centred = equivalence_test(Estimate(32, 0.0, 0.0, 0.0, se=0.01, seeds=(2, 2)), margin=0.02)
    assert centred.p_value == pytest.approx(0.022750131948179195) and centred.equivalent
    with pytest.raises(ValueError, match="margin must be > 0"):
        equivalence_test(Estimate(1, 0.0, 0.0, 0.0, se=0.01, seeds=(3, 3)), 0.0)


def test_equivalence_refuses_one_seed_and_zero_variance() -> None:
    # One seed a side: the between-seed variance is unknown, so "equivalent" is not shown.
    with pytest.raises(NotMeasurable, match="seeds 3 vs 1: an equivalence test needs >= 2"):
        equivalence_test(Estimate(32, 0.0, 0.0, 0.0, se=0.001, seeds=(3, 1)), margin=0.02)
    with pytest.raises(NotMeasurable, match="seeds unknown"):
        equivalence_test(Estimate(32, 0.0, 0.0, 0.0, se=0.001), margin=0.02)
    # The smoke profile's all-zero pass@k, 2 seeds a side: zero variance, not "equivalent".
    zeros = _matrix([[0.0] * 4] * 2, ["x", "x", "y", "y"])
    (estimate,) = paired_difference(zeros, zeros, ["x", "y"])
    assert estimate.se == 0.0 and measurability(estimate).startswith("zero variance")
    with pytest.raises(NotMeasurable, match="zero variance"):
        equivalence_test(estimate, margin=0.02)


def test_half_width_for_seeds_and_problems_from_the_components() -> None:
    # Method-by-problem 1e-4 at 100 problems in 2 benchmarks; each method: seed 2e-4,
    # interaction 1e-4, 3 seeds: 1e-4 + 2 x (3e-4 / 3) = 3e-4, df 9 / (1/98 + 1) = 8.909.
    components = Components(1e-4, (2e-4, 2e-4), (1e-4, 1e-4), (3, 3), 100, 2)
    assert components.design_variance() == pytest.approx((3e-4, 882 / 99))
    assert half_width(components) == pytest.approx(0.03924274193725072)
    # Twice the problems and 6 seeds: 0.5e-4 + 2 x (2e-4 + 0.5e-4) / 6 = 1.3333e-4 (the
    # interaction shrinks with the problems, the seed part does not), df 176 / 7.
    assert components.design_variance([6, 6], 2.0) == pytest.approx((4e-4 / 3, 176 / 7))
    assert half_width(components, [6, 6], problem_multiple=2.0) == pytest.approx(
        0.02377465317481519
    )
    with pytest.raises(ValueError, match="per-seed variance is unknown"):
        half_width(Components(1e-4, (float("nan"), 2e-4), (1e-4, 1e-4), (1, 3), 100, 2))


# The A/A simulation of the crossed model: three benchmarks of 150, 90 and 60 problems whose
# difficulties (logit) are drawn around 0.5, -0.5 and -1.5 with SD 2; a seed shifts every
# problem's logit by N(0, 0.05^2), a seed x problem interaction by N(0, 0.8^2) (the run's own
# luck: the interaction dominates the seed effect, as in the committed run); n = 64 binomial
# samples per problem and seed. Both arms are drawn identically (GRPO's seeds split in two).
AA_SIZES = (150, 90, 60)
AA_SAMPLES = 64
AA_KS = (1, 32)
AA_SIMULATIONS = 2000
# 95% +/- 2.5 points: 5 binomial SEs of 2000 simulations (sqrt(0.95 x 0.05 / 2000) = 0.49
# points). At 10,000 simulations the method covers 96.0-96.4% with 2 and 3 seeds a side and
# 95.9-96.0% with 5 (slightly conservative: the method-by-problem component is truncated at 0
# and is 0 here; Welch's df with 2-3 seeds); the old double-counting interval covered up to
# 99%.
AA_MARGIN = 0.025


@cache
def _aa_design() -> tuple[np.ndarray, np.ndarray, pd.MultiIndex]:
    """pass@k of c correct of 64 (``table[c, i]`` for k = AA_KS[i]), each problem's benchmark
    and the problems' index."""
    table = np.stack(
        [pass_at_k_per_problem(AA_SAMPLES, np.arange(AA_SAMPLES + 1), k) for k in AA_KS], axis=-1
    )
    benchmark = np.repeat(np.arange(len(AA_SIZES)), AA_SIZES)
    index = pd.MultiIndex.from_arrays(
        [[f"b{h}" for h in benchmark], [str(j) for j in range(benchmark.size)]]
    )
    return table, benchmark, index


def _aa_arms(rng: np.random.Generator, seeds: int) -> tuple[SeedRuns, SeedRuns]:
    table, benchmark, index = _aa_design()
    difficulty = rng.normal(np.array([0.5, -0.5, -1.5])[benchmark], 2.0)
    arms = []
    for _ in range(2):
        logit = (
            difficulty
            + rng.normal(0.0, 0.05, (seeds, 1))
            + rng.normal(0.0, 0.8, (seeds, benchmark.size))
        )
        correct = rng.binomial(AA_SAMPLES, 1.0 / (1.0 + np.exp(-logit)))
        arms.append(SeedRuns(table[correct], index, AA_KS))
    return arms[0], arms[1]


@pytest.mark.parametrize("seeds", [2, 3, 5])
def test_a_a_intervals_cover_zero_at_their_nominal_rate(seeds: int) -> None:
    rng = np.random.default_rng(2024 + seeds)
    names = [f"b{h}" for h in range(len(AA_SIZES))]
    covered = np.zeros(len(AA_KS))
    for _ in range(AA_SIMULATIONS):
        first, second = _aa_arms(rng, seeds)
        estimates = paired_difference(first, second, names)
        covered += [e.low <= 0.0 <= e.high for e in estimates]
    coverage = covered / AA_SIMULATIONS
    assert all(abs(c - 0.95) <= AA_MARGIN for c in coverage), dict(
        zip(AA_KS, coverage, strict=True)
    )


def test_draw_paired_difference_is_the_mean_of_per_draw_differences() -> None:
    """Two draws, one problem-free check by hand: per draw the seeds' mean difference, then
    the mean over draws; its variance the draws' mean square / 2 (the problem component is
    0 when every problem moves alike), with 1 degree of freedom."""
    index = pd.MultiIndex.from_arrays([["x", "x"], ["1", "2"]])

    def runs(*seed_values: float) -> SeedRuns:
        values = np.array([[[v], [v]] for v in seed_values])  # the same on both problems
        return SeedRuns(values, index, (1,))

    first = [runs(0.5, 0.7), runs(0.3, 0.3)]  # draw means 0.6, 0.3
    second = [runs(0.2), runs(0.2)]  # a base per draw
    (estimate,) = draw_paired_difference(first, second, ["x"])
    assert estimate.value == pytest.approx(0.25)  # (0.4 + 0.1) / 2
    assert estimate.se == pytest.approx(np.sqrt(np.var([0.4, 0.1], ddof=1) / 2))
    assert estimate.df == pytest.approx(1.0) and estimate.seeds == (2,)
    (score,) = draw_score_with_interval(first, ["x"])
    assert score.value == pytest.approx(0.45)
    # One draw: the crossed seeds x problems model within it.
    assert draw_paired_difference(first[:1], second[:1], ["x"])[0].seeds == (2, 1)
    with pytest.raises(ValueError, match="2 draws of one side, 1"):
        draw_paired_difference(first, second[:1], ["x"])
