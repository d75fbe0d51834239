"""The A/A coverage study-v3 registers (``preregistration/study-v3.md``, "Analysis"): on the
registered design, 95% intervals of a contrast between two arms with the same distribution
must cover 0 in ``study.analysis.aa_coverage_band`` of simulated studies, both sides checked
(too narrow and too wide both fail): the main study's D draws x S seeds at the primary
endpoint's k over the draws (study-v3.yaml ``size``), and a seed-dominated case within one
draw. Each simulated arm: per-problem logits of a benchmark of the registered size, with the
variation the case names, binomially sampled at the endpoint's n; its intervals by the
analysis the study uses (:func:`tagrpo.metrics.draws.draw_paired_difference`, or within one
draw :func:`tagrpo.metrics.compare.paired_difference`). 1000 simulations a case: a binomial SE
of 0.69 points at 95%. The tests (tests/test_study_aa.py) hold it to the band; the main
report prints it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from tagrpo.metrics.compare import SeedRuns, paired_difference
from tagrpo.metrics.draws import draw_paired_difference
from tagrpo.metrics.passk import pass_at_k_per_problem

SIMULATIONS = 1000
BENCHMARK = "study_long"
# SDs on the logit scale: seed-dominated (the seeds' and seed-by-problem variation), and
# draw-dominated (a method-by-draw effect as large as a seed's).
SETTINGS = {
    "seed-dominated": {"seed": 0.35, "interaction": 0.3, "draw_arm": 0.0},
    "draw-dominated": {"seed": 0.1, "interaction": 0.5, "draw_arm": 0.3},
}
# The registered cases: (name, over the design's draws or within one, setting, rng seed).
CASES = (
    ("the design, draw-dominated", "design", "draw-dominated", 11),
    ("the design, seed-dominated", "design", "seed-dominated", 12),
    ("one draw, seed-dominated", "one draw", "seed-dominated", 23),
)


@cache
def _table(samples: int, k: int, problems: int) -> tuple[np.ndarray, pd.MultiIndex]:
    table = pass_at_k_per_problem(samples, np.arange(samples + 1), k)[:, None]
    index = pd.MultiIndex.from_arrays([[BENCHMARK] * problems, [str(j) for j in range(problems)]])
    return table, index


def _arms(
    rng: np.random.Generator, draws: int, seeds: int, sd: Mapping[str, float], design: tuple
) -> tuple[list[SeedRuns], list[SeedRuns]]:
    samples, k, problems = design
    table, index = _table(samples, k, problems)
    difficulty = rng.normal(-2.5, 2.0, problems)  # chains of 4: pass@16 mostly unsaturated
    arms: tuple[list[SeedRuns], list[SeedRuns]] = ([], [])
    for _ in range(draws):
        base = difficulty + rng.normal(0.0, 0.3) + rng.normal(0.0, 0.4, problems)
        for arm in range(2):
            logit = (
                base
                + rng.normal(0.0, sd["draw_arm"])
                + rng.normal(0.0, sd["seed"], (seeds, 1))
                + rng.normal(0.0, sd["interaction"], (seeds, problems))
            )
            correct = rng.binomial(samples, 1.0 / (1.0 + np.exp(-logit)))
            arms[arm].append(SeedRuns(table[correct], index, (k,)))
    return arms


def coverage(
    registration: Mapping[str, Any], draws: int, seeds: int, setting: str, seed: int
) -> float:
    """The share of simulated A/A studies whose 95% interval covers 0."""
    endpoint = registration["primary_endpoint"]
    design = (
        int(endpoint["n"]),
        int(endpoint["k"]),
        int(registration["benchmark"]["spec"]["size"]),
    )
    rng = np.random.default_rng(seed)
    covered = 0
    for _ in range(SIMULATIONS):
        first, second = _arms(rng, draws, seeds, SETTINGS[setting], design)
        if draws == 1:
            (estimate,) = paired_difference(first[0], second[0], [BENCHMARK])
        else:
            (estimate,) = draw_paired_difference(first, second, [BENCHMARK])
        covered += estimate.low <= 0.0 <= estimate.high
    return covered / SIMULATIONS


def registered_design(registration: Mapping[str, Any]) -> tuple[int, int]:
    """The main study's D x S (study-v3.yaml ``size``; the pilot's draws x 2 before it is set)."""
    size = registration.get("size") or {
        "draws": len(registration["pilot"]["base_draws"]),
        "seeds_per_draw": 2,
    }
    return int(size["draws"]), int(size["seeds_per_draw"])


def coverage_rows(registration: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every registered case: its design, coverage and verdict against the band."""
    draws, seeds = registered_design(registration)
    low, high = (float(x) for x in registration["study"]["analysis"]["aa_coverage_band"])
    rows = []
    for name, over, setting, seed in CASES:
        case_draws = draws if over == "design" else 1
        covered = coverage(registration, case_draws, seeds, setting, seed)
        rows.append(
            {
                "case": name,
                "draws": case_draws,
                "seeds": seeds,
                "coverage": covered,
                "verdict": "PASS" if low <= covered <= high else "FAIL",
            }
        )
    return rows
