"""World v3's analysis over base draws (tagrpo.metrics.draws.draw_paired_difference): the
A/A simulation the pre-registration asks for (>= 93% of 95% intervals cover 0, in a seed-, a
draw- and a problem-dominated setting, with 2 and 3 draws). Not in the core tier: 6 x 1000
simulated studies."""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd
import pytest

from tagrpo.metrics.compare import SeedRuns
from tagrpo.metrics.draws import draw_paired_difference
from tagrpo.metrics.passk import pass_at_k_per_problem

SAMPLES = 64
KS = (1, 32)
SIZES = (60, 40, 20)  # three benchmarks' problems


@cache
def _design() -> tuple[np.ndarray, np.ndarray, pd.MultiIndex]:
    """pass@k of c correct of 64 (``table[c, i]`` for k = KS[i]), each problem's benchmark and
    the problems' index."""
    table = np.stack([pass_at_k_per_problem(SAMPLES, np.arange(SAMPLES + 1), k) for k in KS], -1)
    benchmark = np.repeat(np.arange(len(SIZES)), SIZES)
    index = pd.MultiIndex.from_arrays(
        [[f"b{h}" for h in benchmark], [str(j) for j in range(benchmark.size)]]
    )
    return table, benchmark, index


# The A/A simulation over base draws (world v3's analysis: the draw is the replicated unit).
# Each simulation draws a world's problems once; each base draw shifts every problem's logit by
# a draw effect and a draw x problem effect shared by both arms (the same base); each arm gets
# its own draw x arm effect, seed effects and seed x problem interactions, and (problem-
# dominated setting) a persistent arm x problem effect drawn once for every draw. Both arms
# have the same distribution: 0 is the truth. The pre-registration asks >= 93% coverage (the
# test fails at 92%); 1000 simulations give a binomial SE of 0.69 points at 95%. Measured with
# 600 (300 problems): the quadrature interval covered 94.3-98.3%, Welch-Satterthwaite's pooled
# df 89.8-94.8% (under 93% with 2 draws).
DRAW_SETTINGS = {  # SDs on the logit scale
    "seed-dominated": {"seed": 0.35, "interaction": 0.3, "draw_arm": 0.0, "arm_problem": 0.0},
    "draw-dominated": {"seed": 0.05, "interaction": 0.5, "draw_arm": 0.3, "arm_problem": 0.0},
    "problem-dominated": {"seed": 0.05, "interaction": 0.3, "draw_arm": 0.0, "arm_problem": 0.8},
}
DRAW_SIMULATIONS = 1000
DRAW_SEEDS = 3


def _draw_arms(
    rng: np.random.Generator, draws: int, sd: dict[str, float]
) -> tuple[list[SeedRuns], list[SeedRuns]]:
    table, benchmark, index = _design()
    difficulty = rng.normal(np.array([0.5, -0.5, -1.5])[benchmark], 2.0)
    persistent = [rng.normal(0.0, sd["arm_problem"], benchmark.size) for _ in range(2)]
    arms: tuple[list[SeedRuns], list[SeedRuns]] = ([], [])
    for _ in range(draws):
        base = difficulty + rng.normal(0.0, 0.3) + rng.normal(0.0, 0.4, benchmark.size)
        for arm in range(2):
            logit = (
                base
                + persistent[arm]
                + rng.normal(0.0, sd["draw_arm"])
                + rng.normal(0.0, sd["seed"], (DRAW_SEEDS, 1))
                + rng.normal(0.0, sd["interaction"], (DRAW_SEEDS, benchmark.size))
            )
            correct = rng.binomial(SAMPLES, 1.0 / (1.0 + np.exp(-logit)))
            arms[arm].append(SeedRuns(table[correct], index, KS))
    return arms


@pytest.mark.parametrize("draws", [2, 3])
@pytest.mark.parametrize("setting", sorted(DRAW_SETTINGS))
def test_a_a_over_base_draws_covers_zero(setting: str, draws: int) -> None:
    rng = np.random.default_rng(7 + draws + 10 * sorted(DRAW_SETTINGS).index(setting))
    names = [f"b{h}" for h in range(len(SIZES))]
    covered = np.zeros(len(KS))
    for _ in range(DRAW_SIMULATIONS):
        first, second = _draw_arms(rng, draws, DRAW_SETTINGS[setting])
        estimates = draw_paired_difference(first, second, names)
        covered += [e.low <= 0.0 <= e.high for e in estimates]
    coverage = covered / DRAW_SIMULATIONS
    assert all(c >= 0.93 for c in coverage), dict(zip(KS, coverage, strict=True))
