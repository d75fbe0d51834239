"""The testbed validity criteria (issue 21): reward trend, phrasing dispersion, strategy
entropy, controls, resolution, the benchmarks' edges, the harder group's band and the
identical-reward regime, on small hand-made inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tagrpo.metrics.compare import Components, SeedRuns
from tagrpo.metrics.testbed import (
    path_dependence,
    phrasing_dispersion,
    quarter_means,
    reward_rise,
    strategy_entropy,
)
from tagrpo.report import validity


def test_quarter_means_and_reward_rise_over_seeds() -> None:
    assert quarter_means([0, 1, 2, 3, 4, 5, 6, 7]) == (0.5, 6.5)
    assert quarter_means([0.1, 0.3]) == (0.1, 0.3)  # one step each
    # Three runs rising by 0.1, 0.2, 0.3: mean 0.2, se 0.1 / sqrt(3), t with 2 df.
    runs = [[0.0, 0.0, 0.5, 0.5, 0.5, 0.5, rise, rise] for rise in (0.1, 0.2, 0.3)]
    estimate = reward_rise(runs)
    assert estimate.value == pytest.approx(0.2)
    assert estimate.se == pytest.approx(0.1 / math.sqrt(3))
    assert estimate.df == 2.0 and estimate.seeds == (3,)
    assert estimate.low == pytest.approx(0.2 - 4.302652729749462 * 0.1 / math.sqrt(3))
    with pytest.raises(ValueError, match="at least 2 steps"):
        reward_rise([[0.5]])
    with pytest.raises(ValueError, match="missing"):
        quarter_means([0.1, float("nan")])


def test_reward_rise_of_one_run_is_welch_over_its_quarters() -> None:
    # 8 steps: quarters of 2. First (0.1, 0.3), last (0.6, 0.8): rise 0.5, se sqrt(0.02/2 * 2).
    estimate = reward_rise([[0.1, 0.3, 0.0, 0.0, 0.0, 0.0, 0.6, 0.8]])
    assert estimate.value == pytest.approx(0.5)
    assert estimate.se == pytest.approx(math.sqrt(0.02))
    assert estimate.df == pytest.approx(2.0)  # Welch with equal variances and sizes
    assert estimate.conditional
    short = validity.reward_trend([[0.1, 0.2, 0.3, 0.4]])  # the smoke profile's one short run
    assert not short.passed and short.measured.startswith("not measurable: one GRPO run of 4")
    # Welch: se = sqrt(2e-4 / 2 + 2e-4 / 2), 2 df: 0.70 +/- 4.3027 x 0.01414.
    rising = validity.reward_trend([[0.10, 0.12, 0.0, 0.0, 0.0, 0.0, 0.80, 0.82]])
    assert rising.passed and rising.measured.startswith("+70.00 [+63.92, +76.08] points")


def _probe(successes: dict[str, dict[str, int]], samples: int = 4) -> pd.DataFrame:
    rows = []
    for question, by_phrasing in successes.items():
        for phrasing, correct in by_phrasing.items():
            for index in range(samples):
                rows.append(
                    {
                        "question_id": question,
                        "phrasing": phrasing,
                        "reward": float(index < correct),
                    }
                )
    return pd.DataFrame(rows)


def test_phrasing_dispersion_against_binomial_noise() -> None:
    # q1: 4/4 vs 0/4 (X2 = 8); q2: 2/4 vs 2/4 (X2 = 0); q3: never correct (no information).
    probe = _probe({"q1": {"a": 4, "b": 0}, "q2": {"a": 2, "b": 2}, "q3": {"a": 0, "b": 0}})
    result = phrasing_dispersion(probe, permutations=20000, seed=0)
    assert (result.questions, result.constant, result.phrasings, result.samples) == (2, 1, 2, 4)
    assert result.statistic == pytest.approx(8.0)
    assert result.df == 2 and result.dispersion == pytest.approx(4.0)
    assert result.p_value == pytest.approx(math.exp(-4.0))  # chi-square, 2 df
    # Exact permutation law: each informative question splits 4 successes of 8 into two halves:
    # X2 = 8 with probability 2/70, 2 with 32/70, 0 with 36/70; P(sum >= 8) = 2/70 + 68/70 * 2/70.
    assert result.permutation_p == pytest.approx(2 / 70 + 68 / 70 * 2 / 70, abs=0.005)
    # Excess variance: q1 0.5 - 0.25 * 8/7 / 4, q2 0 - the same, q3 0: mean 0.119..., sqrt.
    assert result.excess_sd == pytest.approx(math.sqrt((0.5 - 2 * 0.25 * 8 / 7 / 4) / 3))


def test_phrasing_dispersion_refuses_an_unbalanced_probe() -> None:
    probe = _probe({"q1": {"a": 4, "b": 0}, "q2": {"a": 2}})
    with pytest.raises(ValueError, match="question q2: every question needs the same phrasings"):
        phrasing_dispersion(probe, permutations=10)
    with pytest.raises(ValueError, match="0 or 1"):
        phrasing_dispersion(probe.assign(reward=0.5), permutations=10)


def test_strategy_entropy_per_question_and_its_absence() -> None:
    responses = pd.DataFrame(
        {
            "benchmark": ["b"] * 12,
            "question_id": ["q1"] * 4 + ["q2"] * 4 + ["q3"] * 4,
            "strategy": ["a", "a", "b", "b", "a", "a", "a", "a", "a", "b", "c", "c"],
            "correct": [True, False] * 6,
        }
    )
    table = strategy_entropy(responses)
    assert table["entropy_bits"].tolist() == pytest.approx([1.0, 0.0, 1.5])
    assert table["strategies"].tolist() == [2, 1, 3]
    assert strategy_entropy(responses.drop(columns="strategy")) is None
    criterion, summary = validity.strategy_criterion({"base": responses}, ("g", ["b"]), 2)
    assert summary["entropy_bits"].tolist() == pytest.approx([2.5 / 3])
    # The entropy is still reported; the verdict is V3's path test (here every path succeeds
    # as often as the base: nothing to gain from both).
    assert "entropy 0.83 bits per question, 67% of questions with >= 2 strategies" in (
        criterion.measured
    )
    assert not criterion.passed
    absent, _ = validity.strategy_criterion(
        {"base": responses.drop(columns="strategy")}, ("g", ["b"]), 2
    )
    assert not absent.passed
    assert absent.measured.startswith("not measurable: the world has one solution template")


def _paths(rows: list[tuple[str, str, str, int, int]]) -> pd.DataFrame:
    """Responses from (benchmark, question, strategy, correct, wrong) counts."""
    records = [
        {"benchmark": bench, "question_id": qid, "strategy": path, "correct": correct}
        for bench, qid, path, right, wrong in rows
        for correct in [True] * right + [False] * wrong
    ]
    return pd.DataFrame(records)


def test_v3_the_base_needs_both_paths() -> None:
    # Benchmark p: forward always right, backward always wrong; r the reverse. Every problem
    # has q = 0.5 overall: base pass@2 = 1 - 0.5^2 = 0.75; forward alone 1 on p and 0 on r
    # (0.5), backward the same: the base gains +25 points from using both. Resampling the
    # problems within a benchmark changes nothing: the interval is the point.
    both = _paths(
        [
            (bench, f"{bench}{j}", path, 2 * (path == good), 2 * (path != good))
            for bench, good in (("p", "forward"), ("r", "backward"))
            for j in (1, 2)
            for path in ("forward", "backward")
        ]
    )
    result = path_dependence(both, ["p", "r"], 2, n_resamples=50)
    assert (result.base, result.paths) == (0.75, {"backward": 0.5, "forward": 0.5})
    assert (result.difference, result.low, result.high) == (0.25, 0.25, 0.25)
    assert result.problems == 4 and result.filled == {"backward": 0, "forward": 0}
    criterion, _ = validity.strategy_criterion({"base": both}, ("competition", ["p", "r"]), 2)
    assert criterion.passed
    assert criterion.requirement == (
        "the base needs both paths: base pass@2 minus its best single path's, competition: "
        "lower 95% bound >= +3 points"
    )
    assert criterion.measured.startswith(
        "base 75.0%, backward alone 50.0%, forward alone 50.0%: +25.00 [+25.00, +25.00] points "
        "over 4 problems; entropy 1.00 bits per question"
    )
    # The same entropy, but each path as good as the base on every problem: FAIL (the old V3
    # passed on the entropy alone).
    equal = _paths(
        [(b, f"{b}{j}", path, 1, 1) for b in ("p", "r") for j in (1, 2)
         for path in ("forward", "backward")]
    )  # fmt: skip
    flat, _ = validity.strategy_criterion({"base": equal}, ("competition", ["p", "r"]), 2)
    assert not flat.passed and "+0.00 [+0.00, +0.00] points" in flat.measured
    assert "entropy 1.00 bits per question" in flat.measured


def test_v3_a_problem_without_a_path_takes_its_overall_rate() -> None:
    # p1: forward 1 of 2, no backward response (takes q = 0.5); p2: forward 0 of 2, backward
    # 2 of 2 (q = 0.5). pass@2: base 0.75 on both; forward 0.75 and 0; backward 0.75 and 1.
    responses = _paths(
        [("p", "p1", "forward", 1, 1), ("p", "p2", "forward", 0, 2), ("p", "p2", "backward", 2, 0),
         ("p", "p2", "unknown", 0, 0)]
    )  # fmt: skip
    result = path_dependence(responses, ["p"], 2, n_resamples=400, seed=1)
    assert result.paths == {"backward": 0.875, "forward": 0.375}
    assert result.best == "backward" and result.difference == -0.125
    assert result.filled == {"backward": 1, "forward": 0}
    # Draws of (p1, p1) give 0, of (p2, p2) -0.25: the interval's ends.
    assert (result.low, result.high) == (-0.25, 0.0)
    assert path_dependence(responses.assign(strategy="unknown"), ["p"], 2) is None


def _constant(per_seed: list[float], problems: int = 4) -> SeedRuns:
    """Seeds x problems with one value per seed, two benchmarks, pass@1 and pass@32."""
    values = np.repeat(np.asarray(per_seed, dtype=float)[:, None, None], problems, axis=1)
    values = np.concatenate([values, values], axis=2)
    names = ["x"] * (problems // 2) + ["y"] * (problems - problems // 2)
    index = pd.MultiIndex.from_tuples([(b, str(j)) for j, b in enumerate(names)])
    return SeedRuns(values, index, (1, 32))


def test_controls_and_rl_gain_criteria() -> None:
    base = _constant([0.10])
    grpo = _constant([0.30, 0.31, 0.29])
    gain = validity.rl_gain(grpo, base, "competition", ["x", "y"])
    assert gain.passed and gain.measured.startswith("+20.00 [")
    small = validity.rl_gain(_constant([0.15, 0.16, 0.14]), base, "c", ["x", "y"])
    assert not small.passed  # +5 points: below the +10 required, however narrow
    flipped = _constant([0.02, 0.03, 0.01])
    detected = validity.control_criterion(grpo, ("grpo_flipped", flipped), ["x", "y"])
    assert detected.passed and "grpo_flipped: +28.00" in detected.measured
    missing = validity.control_criterion(grpo, None, ["x", "y"])
    assert not missing.passed and "not run" in missing.measured


def test_v1_is_judged_on_the_lower_bound() -> None:
    # +12 points on average, but the seeds (0.20, 0.24, 0.22) leave a lower 95% bound of
    # 12 - 4.303 x 1.155 = +7.03 points: RL's gain is not shown to reach +10 (old: PASS on the
    # point estimate).
    gain = validity.rl_gain(_constant([0.20, 0.24, 0.22]), _constant([0.10]), "c", ["x", "y"])
    assert not gain.passed
    assert gain.measured.startswith("+12.00 [+7.03, +16.97] points (3 GRPO seeds)")
    assert gain.requirement == "GRPO - base, pass@1, c: lower 95% bound >= +10 points"
    zero = validity.rl_gain(_constant([0.0, 0.0]), _constant([0.0]), "c", ["x", "y"])
    assert not zero.passed and zero.measured.startswith("not measurable: zero variance")


def test_v4_needs_two_seeds_of_the_negative_control() -> None:
    grpo = _constant([0.30, 0.31, 0.29])
    one = validity.control_criterion(grpo, ("grpo_flipped", _constant([0.02])), ["x", "y"])
    assert not one.passed  # old: PASS, conditional on the one run
    assert one.measured == (
        "not measurable: grpo_flipped has 1 seed; its between-seed variance needs at least 2"
    )
    two = validity.control_criterion(grpo, ("grpo_flipped", _constant([0.02, 0.03])), ["x", "y"])
    assert two.passed


def test_resolution_and_power_from_the_variance_components() -> None:
    # Seeds vary by 0.01 around their mean on every problem alike: seed component 1e-4 each,
    # no interaction, no problem variance.
    ta, grpo = _constant([0.50, 0.51, 0.52]), _constant([0.40, 0.41, 0.42])
    criterion, power = validity.resolution_criterion(ta, grpo, ("competition", ["x", "y"]), 32)
    # se^2 = 1e-4/3 * 2, df = 4: half-width 2.776 * 0.008165 = 2.27 points > 2: FAIL.
    assert not criterion.passed
    # Blind: the design's half-width, seeds and problems, never the estimate (+10 points).
    assert criterion.measured == "+/-2.27 points (seeds 3 vs 3, 4 problems, t with 4.0 df)"
    assert criterion.requirement == (
        "TA-GRPO - GRPO, pass@32, competition: the design's 95% half-width <= 2 points "
        "(blind: no estimate shown)"
    )
    # 5 seeds: se^2 = 2 x 1e-4 / 5, df 8, t 2.306: 1.46 points at any number of problems.
    assert "| 5 | 1.46 | 1.46 | 1.46 | 1.46 | 4 (1.00x) |" in power
    assert "| 3 | 2.27 | 2.27 | 2.27 | 2.27 | not reachable (> 64x) |" in power
    assert "method-by-problem 0.000; seed 1.000, 1.000; seed x problem interaction" in power
    seeds_only = Components(0.0, (1e-4, 1e-4), (0.0, 0.0), (3, 3), 4, 2)
    assert validity.needed_problem_multiple(seeds_only, 3) is None  # seeds alone too wide
    # No seed variance: t(100 m - 2) x sqrt(4e-4 / m) = 0.02 at m = 3.8658 (3.84 with z).
    problems_only = Components(4e-4, (0.0, 0.0), (0.0, 0.0), (3, 3), 100, 2)
    assert validity.needed_problem_multiple(problems_only, 3) == pytest.approx(
        3.865752360868424, rel=1e-9
    )
    small = Components(1e-4, (0.0, 0.0), (0.0, 0.0), (3, 3), 100, 2)
    assert validity.needed_problem_multiple(small, 3) == 1.0  # already there


def test_resolution_with_one_seed_a_side_is_not_measurable() -> None:
    # One run each and identical scores: the interval is +/-0 conditional on those runs, which
    # says nothing about the design's resolution (it passed vacuously before).
    ta, grpo = _constant([0.0]), _constant([0.0])
    criterion, power = validity.resolution_criterion(ta, grpo, ("g", ["x", "y"]), 32)
    assert not criterion.passed
    assert criterion.measured == (
        "not measurable: seeds 1 vs 1; the between-seed variance needs at least 2 seeds per method"
    )
    assert "Not computable: a method has one seed" in power
    one_side, _ = validity.resolution_criterion(_constant([0.5, 0.6]), grpo, ("g", ["x", "y"]), 32)
    assert not one_side.passed and one_side.measured.startswith("not measurable: seeds 2 vs 1")


def test_edges_per_benchmark() -> None:
    names = ["free", "choice", "easy", "hard", "guess"]
    passk = pd.DataFrame(
        {
            "name": names * 2,
            "kind": ["benchmark"] * 10,
            "k": [1] * 5 + [32] * 5,
            # pass@1 of the five, then pass@32
            "pass_at_k": [0.20, 0.12, 0.70, 0.01, 0.07, 0.60, 0.84, 0.95, 0.03, 0.81],
        }
    )
    options = {"choice": 20, "guess": 20}
    criteria = validity.edge_criteria(passk, names, options, 32)
    # free-form at pass@32: 60% passes, 95% is above the ceiling, 3% within 5 points of 0.
    # Multiple choice at pass@1 against 1/20 = 5%: 12% is 7 points above (it passes, though
    # its pass@32 of 84% is only 3.4 above that of guessing); 7% only 2 points above.
    assert [c.passed for c in criteria] == [True, True, False, False, False]
    assert criteria[1].requirement == "base pass@1 <= 90% and >= chance + 5 points"
    assert criteria[1].measured == "12.0% (chance 5.0%, 20 options; margin +7.0 points)"
    assert criteria[0].requirement == "base pass@32 <= 90% and >= chance + 5 points"
    with pytest.raises(KeyError, match="missing: the base policy has no pass@32"):
        validity.edge_criteria(passk, ["missing"], {}, 32)


def test_harder_group_band_on_the_base_group_means() -> None:
    def passk(at_1: float, at_32: float) -> pd.DataFrame:
        # A benchmark that shares the group's name is not the group.
        return pd.DataFrame(
            {
                "name": ["competition"] * 4,
                "kind": ["group", "group", "benchmark", "benchmark"],
                "k": [1, 32, 1, 32],
                "pass_at_k": [at_1, at_32, 0.99, 0.99],
            }
        )

    criterion = validity.harder_criterion(passk(0.20, 0.62), "competition", 32)
    assert (criterion.name, criterion.key) == ("harder: competition", "harder/competition")
    assert criterion.requirement == "base pass@1 in [5, 30]% and pass@32 in [40, 85]%"
    assert criterion.measured == "pass@1 20.0%, pass@32 62.0%" and criterion.passed
    # The band's ends are inside it; just outside either band fails.
    assert validity.harder_criterion(passk(0.05, 0.85), "competition", 32).passed
    assert validity.harder_criterion(passk(0.30, 0.40), "competition", 32).passed
    for at_1, at_32 in ((0.04, 0.62), (0.31, 0.62), (0.20, 0.39), (0.20, 0.86)):
        assert not validity.harder_criterion(passk(at_1, at_32), "competition", 32).passed
    assert validity.harder_criterion(passk(0.20, 0.62), None, 32) is None  # no harder group
    with pytest.raises(KeyError, match="group competition: the base policy has no pass@1"):
        validity.harder_criterion(passk(0.20, 0.62), "competition", 16)


def test_regime_band_with_a_wilson_interval() -> None:
    criterion = validity.regime_criterion(0.5, 100)
    assert criterion.requirement == "base identical-reward rate of q0 G-groups in [40, 80]%"
    # Wilson at p = 0.5, n = 100: centre 0.5, half-width 1.96 sqrt(0.0025 + 1.96^2 / 40000) /
    # (1 + 1.96^2 / 100) = 0.0962.
    assert criterion.measured == "50.0% [40.4, 59.6] of 100 groups" and criterion.passed
    assert (
        validity.regime_criterion(0.40, 100).passed and validity.regime_criterion(0.80, 10).passed
    )
    # Judged on the rate, not its interval: 85% fails although its interval reaches 80%.
    high = validity.regime_criterion(0.85, 20)
    assert not high.passed and float(high.measured.split("[")[1].split(",")[0]) < 80
    assert not validity.regime_criterion(0.39, 1000).passed
    for rate, groups in ((None, 0), (0.5, 0)):
        absent = validity.regime_criterion(rate, groups)
        assert absent.measured == "not measurable: no phrasing probe" and not absent.passed


def test_v3_with_a_policy_that_took_no_known_path() -> None:
    """The smoke profile's untrained policy writes no equation: its entropy is NaN and V3 fails
    for the base instead of the report crashing."""
    from tagrpo.report.validity import strategy_criterion

    unknown = pd.DataFrame(
        {"benchmark": ["b"] * 2, "question_id": ["q1", "q2"], "strategy": ["unknown"] * 2}
    )
    criterion, summary = strategy_criterion(
        {"base": unknown.assign(correct=False)}, ("g", ["b"]), 2
    )
    assert not criterion.passed
    assert np.isnan(summary.loc[0, "entropy_bits"])
    assert summary.loc[0, "questions_with_two_or_more"] == 0.0
    assert summary.loc[0, "strategies"] == 0


def test_bands_come_from_the_pre_registration(tmp_path) -> None:
    """The report judges a run by its pre-registration's bands: world v2's file gives the old
    thresholds, world v3's its own (V1 +5, competition pass@1 >= 2% and pass@32 in
    [25, 85]%, regime [30, 85]%), and a file without a band is refused, naming it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "preregistration"
    assert validity.bands_from_preregistration(root / "world-v2.yaml") == validity.Bands(
        path_group="in_distribution", source="`world-v2.yaml`"
    )
    v3 = validity.bands_from_preregistration(root / "world-v3.yaml")
    assert (v3.min_rl_gain, v3.min_path_gain, v3.max_half_width) == (0.05, 0.03, 0.02)
    assert (v3.base_ceiling, v3.chance_margin) == (0.90, 0.05)
    assert v3.harder_pass_at_1 == (0.02, 1.0) and v3.harder_pass_at_k == (0.25, 0.85)
    assert v3.identical_band == (0.30, 0.85)
    # V3 on the in-distribution group, whatever report.primary_group is (v3's: competition).
    assert v3.path_group == "in_distribution"

    gain = validity.rl_gain(_constant([0.20, 0.24, 0.22]), _constant([0.10]), "c", ["x", "y"], v3)
    assert gain.passed and gain.requirement.endswith(">= +5 points")  # +7.03: passes v3 only

    def passk(at_1: float, at_32: float) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "name": ["c", "c"],
                "kind": ["group", "group"],
                "k": [1, 32],
                "pass_at_k": [at_1, at_32],
            }
        )

    harder = validity.harder_criterion(passk(0.03, 0.30), "c", 32, v3)
    assert harder.passed and harder.requirement == "base pass@1 >= 2% and pass@32 in [25, 85]%"
    for at_1, at_32 in ((0.019, 0.5), (0.5, 0.24), (0.5, 0.86)):
        assert not validity.harder_criterion(passk(at_1, at_32), "c", 32, v3).passed
    assert validity.regime_criterion(0.31, 100, v3).passed
    assert not validity.regime_criterion(0.86, 100, v3).passed

    broken = tmp_path / "broken.yaml"
    text = (root / "world-v3.yaml").read_text().replace("regime_identical_q0_groups", "regime")
    broken.write_text(text)
    with pytest.raises(ValueError, match="regime_identical_q0_groups"):
        validity.bands_from_preregistration(broken)
