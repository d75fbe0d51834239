"""The claims table: each qualitative claim of the paper, our estimate with its 95% interval,
and a verdict, generated from the stage outputs (never written by hand).

Verdicts: ``supported`` when the interval lies on the claimed side of 0, ``reversed`` when it
lies on the other side, ``not distinguishable`` when it contains 0. pass@k differences are
paired over problems with seeds resampled per method (:mod:`tagrpo.metrics.compare`); the
diagnostics' comparisons are paired over training questions at the last checkpoint of the
TA-GRPO policy the diagnostics stage probed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tagrpo.metrics.compare import (
    Estimate,
    SeedRuns,
    paired_difference,
    problem_counts,
    score_with_interval,
    seed_runs,
    widening,
)

TA = "ta_grpo"


@dataclass(frozen=True)
class Claim:
    claim: str  # the paper's claim, in words
    measure: str  # what we estimate (positive = the claim holds)
    estimate: Estimate | None  # None: a method it needs was not run
    unit: str = "points"  # how the value is shown: points (x100) or plain
    updates: str = ""  # optimiser updates of the compared runs ("TA / baseline")

    def row(self) -> list[str]:
        if self.estimate is None:
            return [self.claim, self.measure, "not run", "not run", self.updates or "not run"]
        scale = 100.0 if self.unit == "points" else 1.0
        value = (
            f"{scale * self.estimate.value:+.2f} [{scale * self.estimate.low:+.2f}, "
            f"{scale * self.estimate.high:+.2f}]"
        )
        return [self.claim, self.measure, value, self.estimate.verdict, self.updates]


def load_policy_runs(root: Path, policies: Sequence[str], ks: Sequence[int]) -> SeedRuns:
    """Per-problem pass@k of the given policies (one method's seeds), from their evaluations."""
    from tagrpo.layout import evaluate_outputs

    counts = []
    for policy in policies:
        path = root / evaluate_outputs(policy)["responses"]
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the evaluate stage of {policy}")
        counts.append(problem_counts(pd.read_parquet(path, columns=_COLUMNS)))
    return seed_runs(counts, ks)


def load_seed_runs(
    root: Path, seeds: Mapping[str, Sequence[int]], ks: Sequence[int], data_multiple: float = 1.0
) -> dict[str, SeedRuns]:
    """Each method's per-problem pass@k over its seeds (``seeds[method]``), from
    ``evals/<method>-s<seed>``."""
    from tagrpo.layout import policy_name

    return {
        method: load_policy_runs(
            root, [policy_name(method, seed, data_multiple) for seed in method_seeds], ks
        )
        for method, method_seeds in seeds.items()
    }


_COLUMNS = ["benchmark", "question_id", "correct"]


def difference_table(
    runs: Mapping[str, SeedRuns],
    groups: Mapping[str, Sequence[str]],
    baselines: Sequence[str],
    n_resamples: int = 2000,
) -> pd.DataFrame:
    """TA-GRPO minus each baseline, per benchmark group and k (long form)."""
    rows = []
    for baseline in baselines:
        if baseline not in runs or TA not in runs:
            continue
        for group, members in groups.items():
            for estimate in paired_difference(runs[TA], runs[baseline], members, n_resamples):
                rows.append(
                    {
                        "baseline": baseline,
                        "group": group,
                        "k": estimate.k,
                        "difference": estimate.value,
                        "ci_low": estimate.low,
                        "ci_high": estimate.high,
                        "verdict": estimate.verdict,
                    }
                )
    return pd.DataFrame(rows)


def score_table(
    runs: Mapping[str, SeedRuns], groups: Mapping[str, Sequence[str]], n_resamples: int = 2000
) -> pd.DataFrame:
    """Every method's score per benchmark group and k, with bootstrap intervals (long form)."""
    rows = []
    for method, method_runs in runs.items():
        for group, members in groups.items():
            for estimate in score_with_interval(method_runs, members, n_resamples):
                rows.append(
                    {
                        "method": method,
                        "seeds": method_runs.values.shape[0],
                        "group": group,
                        "k": estimate.k,
                        "pass_at_k": estimate.value,
                        "ci_low": estimate.low,
                        "ci_high": estimate.high,
                    }
                )
    return pd.DataFrame(rows)


def _diagnostic(
    comparisons: pd.DataFrame | None, policy: str, measure: str, first: str, second: str, sign: int
) -> Estimate | None:
    if comparisons is None or comparisons.empty:
        return None
    part = comparisons[
        (comparisons["policy"] == policy)
        & (comparisons["measure"] == measure)
        & (comparisons["first"] == first)
        & (comparisons["second"] == second)
        & (comparisons["label"] != "base")
    ]
    if part.empty:
        return None
    last = part.iloc[-1]
    values = sorted([sign * last["ci_low"], sign * last["ci_high"]])
    return Estimate(0, float(sign * last["difference"]), float(values[0]), float(values[1]))


def build_claims(
    runs: Mapping[str, SeedRuns],
    all_benchmarks: Sequence[str],
    comparisons: pd.DataFrame | None,
    diagnostics_policy: str | None,
    k_large: int,
    n_resamples: int = 2000,
    updates: Mapping[str, str] | None = None,
) -> list[Claim]:
    """The paper's qualitative claims, each with our estimate (see the module docstring).

    ``updates``: each method's optimiser updates (:func:`tagrpo.report.training.
    updates_by_method`), shown beside every claim: "TA / baseline" for a comparison of two
    methods, TA-GRPO's alone for the diagnostics (one policy).
    """
    counts = dict(updates or {})

    def count(method: str) -> str:
        return counts.get(method, "not run")

    def versus(baseline: str) -> str:
        return f"{count(TA)} / {count(baseline)}"

    def gap(baseline: str) -> Estimate | None:
        if TA not in runs or baseline not in runs:
            return None
        estimates = paired_difference(runs[TA], runs[baseline], all_benchmarks, n_resamples)
        return next(e for e in estimates if e.k == k_large)

    def widens(baseline: str) -> Estimate | None:
        if TA not in runs or baseline not in runs:
            return None
        return widening(
            runs[TA], runs[baseline], all_benchmarks, runs[TA].ks[0], k_large, n_resamples
        )

    policy = diagnostics_policy or ""
    every = "all benchmarks"
    return [
        Claim(
            "Fewer identical-reward groups than GRPO (Fig. 3)",
            "q0 G-group minus TA joint (N+1)G-group identical-reward rate, same policy",
            _diagnostic(comparisons, policy, "identical_rewards", "joint", "original", -1),
            updates=f"{count(TA)} (one policy)",
        ),
        Claim(
            "Fewer identical-reward groups than the matched budget",
            "q0 (N+1)G-group minus TA joint (N+1)G-group rate (same size)",
            _diagnostic(comparisons, policy, "identical_rewards", "joint", "original_N1G", -1),
            updates=f"{count(TA)} (one policy)",
        ),
        Claim(
            f"TA-GRPO beats GRPO at pass@{k_large}",
            f"pass@{k_large}, TA-GRPO minus GRPO, {every}",
            gap("grpo"),
            updates=versus("grpo"),
        ),
        Claim(
            "The gain over GRPO widens with k",
            f"(TA - GRPO at pass@{k_large}) minus (TA - GRPO at pass@1)",
            widens("grpo"),
            updates=versus("grpo"),
        ),
        Claim(
            f"TA-GRPO beats GRPO with dynamic sampling at pass@{k_large}",
            f"pass@{k_large}, TA-GRPO minus GRPO w/ DS, {every}",
            gap("grpo_ds"),
            updates=versus("grpo_ds"),
        ),
        Claim(
            f"TA-GRPO beats the matched budget (N+1)xGRPO at pass@{k_large} (Fig. 6)",
            f"pass@{k_large}, TA-GRPO minus (N+1)xGRPO, {every}",
            gap("grpo_x4"),
            updates=versus("grpo_x4"),
        ),
        Claim(
            f"TA-GRPO beats TA-GRPO* at pass@{k_large} (Fig. 8)",
            f"pass@{k_large}, TA-GRPO minus TA-GRPO*, {every}",
            gap("ta_grpo_star"),
            updates=versus("ta_grpo_star"),
        ),
        Claim(
            f"Ratios under q0 (Eq. 4) help at pass@{k_large}",
            f"pass@{k_large}, TA-GRPO minus unanchored TA-GRPO, {every}",
            gap("ta_grpo_unanchored"),
            updates=versus("ta_grpo_unanchored"),
        ),
        Claim(
            "Responses to the neighbours are more diverse (Fig. 4)",
            "within-prompt embedding distance, neighbours minus q0, same policy",
            _diagnostic(comparisons, policy, "distance", "neighbour_each", "original", 1),
            unit="plain",
            updates=f"{count(TA)} (one policy)",
        ),
    ]


def claims_table(claims: Sequence[Claim]) -> str:
    from tagrpo.report.markdown import markdown_table

    return markdown_table(
        [
            "claim (paper)",
            "our measure (positive = claim holds)",
            "estimate [95% CI]",
            "verdict",
            "optimiser updates (TA-GRPO / other)",
        ],
        [claim.row() for claim in claims],
    )
