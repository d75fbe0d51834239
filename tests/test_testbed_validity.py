"""The testbed validity criteria (issue 21): reward trend, phrasing dispersion, strategy
entropy, controls, resolution and the benchmarks' edges, on small hand-made inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tagrpo.metrics.compare import SeedRuns
from tagrpo.metrics.testbed import (
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
            "question_id": ["q1"] * 4 + ["q2"] * 4 + ["q3"] * 4,
            "strategy": ["a", "a", "b", "b", "a", "a", "a", "a", "a", "b", "c", "c"],
        }
    )
    table = strategy_entropy(responses)
    assert table["entropy_bits"].tolist() == pytest.approx([1.0, 0.0, 1.5])
    assert table["strategies"].tolist() == [2, 1, 3]
    assert strategy_entropy(responses.drop(columns="strategy")) is None
    criterion, summary = validity.strategy_criterion({"base": responses})
    assert criterion.passed and summary["entropy_bits"].tolist() == pytest.approx([2.5 / 3])
    absent, _ = validity.strategy_criterion({"base": responses.drop(columns="strategy")})
    assert not absent.passed
    assert absent.measured.startswith("not measurable: the world has one solution template")


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
    gain = validity.rl_gain(grpo, base, "competition", ["x", "y"], 100)
    assert gain.passed and gain.measured.startswith("+20.00 [")
    small = validity.rl_gain(_constant([0.15, 0.16, 0.14]), base, "c", ["x", "y"], 100)
    assert not small.passed  # +5 points: below the +10 required, however narrow
    flipped = _constant([0.02, 0.03, 0.01])
    detected = validity.control_criterion(grpo, ("grpo_flipped", flipped), ["x", "y"], 100)
    assert detected.passed and "grpo_flipped: +28.00" in detected.measured
    missing = validity.control_criterion(grpo, None, ["x", "y"], 100)
    assert not missing.passed and "not run" in missing.measured


def test_resolution_and_power_from_the_variance_components() -> None:
    # Seeds vary by 0.01 around their mean: per-seed variance 1e-4 each, no problem variance.
    ta, grpo = _constant([0.50, 0.51, 0.52]), _constant([0.40, 0.41, 0.42])
    criterion, power = validity.resolution_criterion(ta, grpo, ["x", "y"], 32, 100)
    # se^2 = 1e-4/3 * 2, df = 4: half-width 2.776 * 0.008165 = 2.27 points > 2: FAIL.
    assert not criterion.passed and criterion.measured.startswith("+/-2.27 points")
    # 5 seeds: se^2 = 2 x 1e-4 / 5, df 8, t 2.306: 1.46 points at any number of problems.
    assert "| 5 | 1.46 | 1.46 | 1.46 | 1.46 | 4 (1.00x) |" in power
    assert "| 3 | 2.27 | 2.27 | 2.27 | 2.27 | not reachable (> 64x) |" in power
    assert validity.needed_problem_multiple(0.0, [1e-4, 1e-4], 3) is None  # seeds alone too wide
    # No seed variance: se = sqrt(4e-4 / m) must reach 0.02 / 1.96, so m = 4e-4 (1.96/0.02)^2.
    assert validity.needed_problem_multiple(4e-4, [0.0, 0.0], 3) == pytest.approx(
        4e-4 * (1.959963984540054 / 0.02) ** 2, rel=1e-6
    )
    assert validity.needed_problem_multiple(1e-4, [0.0, 0.0], 3) == 1.0  # already there


def test_resolution_with_one_seed_a_side_is_not_measurable() -> None:
    # One run each and identical scores: the interval is +/-0 conditional on those runs, which
    # says nothing about the design's resolution (it passed vacuously before).
    ta, grpo = _constant([0.0]), _constant([0.0])
    criterion, power = validity.resolution_criterion(ta, grpo, ["x", "y"], 32, 100)
    assert not criterion.passed
    assert criterion.measured == (
        "not measurable: seeds 1 vs 1; the between-seed variance needs at least 2 seeds per method"
    )
    assert "Not computable: a method has one seed" in power
    one_side, _ = validity.resolution_criterion(_constant([0.5, 0.6]), grpo, ["x", "y"], 32, 100)
    assert not one_side.passed and one_side.measured.startswith("not measurable: seeds 2 vs 1")


def test_edges_per_benchmark() -> None:
    passk = pd.DataFrame(
        {
            "name": ["free", "choice", "easy", "hard"],
            "kind": ["benchmark"] * 4,
            "k": [32] * 4,
            "pass_at_k": [0.60, 0.84, 0.95, 0.03],
        }
    )
    criteria = validity.edge_criteria(passk, ["free", "choice", "easy", "hard"], {"choice": 20}, 32)
    # free-form 60%: passes; 20 options: chance 1 - 0.95^32 = 80.6%, the base only 3.4 points
    # above it; 95% above the ceiling; 3% within 5 points of a free-form chance of 0.
    assert [c.passed for c in criteria] == [True, False, False, False]
    assert "chance 80.6%, 20 options; margin +3.4 points" in criteria[1].measured
    with pytest.raises(KeyError, match="missing: the base policy has no pass@32"):
        validity.edge_criteria(passk, ["missing"], {}, 32)


def test_v3_with_a_policy_that_took_no_known_path() -> None:
    """The smoke profile's untrained policy writes no equation: its entropy is NaN and V3 fails
    for the base instead of the report crashing."""
    from tagrpo.report.validity import strategy_criterion

    unknown = pd.DataFrame(
        {"benchmark": ["b"] * 2, "question_id": ["q1", "q2"], "strategy": ["unknown"] * 2}
    )
    criterion, summary = strategy_criterion({"base": unknown})
    assert not criterion.passed
    assert np.isnan(summary.loc[0, "entropy_bits"])
    assert summary.loc[0, "questions_with_two_or_more"] == 0.0
    assert summary.loc[0, "strategies"] == 0
