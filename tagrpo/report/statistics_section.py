"""The report's statistics sections: the claims with their intervals, the score and
difference tables, beside the validity section they are read with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tagrpo.config.params import Params
from tagrpo.plumbing.layout import BASE_POLICY, diagnostics_outputs, policy_name
from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.chance import chance_floor, multiple_choice_options
from tagrpo.report.claims import (
    build_claims,
    claims_table,
    difference_table,
    load_policy_runs,
    load_seed_runs,
    score_table,
    underpowered,
)
from tagrpo.report.family import build_v3_claims, family_settings
from tagrpo.report.family_inputs import load_draw_inputs
from tagrpo.report.inputs import (
    claims_family,
    draw_label,
    in_distribution_benchmarks,
    judging_problem,
    primary_benchmarks,
)
from tagrpo.report.training import load_training_summaries, updates_by_method, updates_of
from tagrpo.report.validity_section import validity_section


def _interval(value: float, low: float, high: float) -> str:
    return f"{100 * value:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def claim_key(claim: str) -> str:
    """A claim's words as a metric name: ``Fewer identical-reward groups than GRPO (Fig. 3)``
    -> ``fewer_identical_reward_groups_than_grpo_fig_3``."""
    return re.sub(r"[^a-z0-9]+", "_", claim.lower()).strip("_")[:80]


def claim_metrics(claims: Sequence[Any]) -> dict[str, float]:
    """Per claim, named by its words (not its row number, not its verdict): the estimate, its
    Holm-adjusted p and ``supported`` (1 or 0); the verdicts in words are the claims table
    (reports/claims.md, an artifact of the report's run)."""
    metrics: dict[str, float] = {}
    for claim in claims:
        key = f"claims/{claim_key(claim.claim)}"
        if claim.estimate is not None and np.isfinite(claim.estimate.value):
            metrics[f"{key}/estimate"] = float(claim.estimate.value)
        if np.isfinite(claim.holm_p):
            metrics[f"{key}/holm_p"] = float(claim.holm_p)
        metrics[f"{key}/supported"] = float(claim.verdict in ("supported", "equivalent"))
    return metrics


def statistics_sections(
    config: Params, root: Path, out: dict[str, Path], passk: pd.DataFrame
) -> tuple[str, str, str, dict[str, Any]]:
    """The validity table, the claims table (markdown), the scores/differences section, and
    headline metrics.

    Writes ``out["claims"]`` (the table alone: docs/results.md quotes it), ``out["scores"]`` and
    ``out["differences"]`` (long-form CSVs behind the tables).
    """

    methods = config.runs.all_methods()
    seeds = {method: config.runs.seeds_of(method) for method in methods}
    ks = config.evaluate.ks
    runs = load_seed_runs(root, seeds, ks)
    base = load_policy_runs(root, [BASE_POLICY], ks)
    benchmarks = sorted(config.benchmark_names())
    groups = {**config.evaluate.groups, "all benchmarks": benchmarks}
    comparisons_path = root / diagnostics_outputs()["comparisons"]
    comparisons = pd.read_csv(comparisons_path) if comparisons_path.exists() else None
    ta_policies = [p for p in config.diagnostics.policies if p.startswith("ta_grpo-")]
    scaling = config.runs.data_scaling
    scaled_grpo = None
    if "grpo" in scaling.methods and scaling.multiples:
        largest = max(scaling.multiples)
        scaled_grpo = (
            largest,
            load_policy_runs(root, [policy_name("grpo", s, largest) for s in scaling.seeds], ks),
        )
    updates = updates_by_method(load_training_summaries(root, config.runs.policies()))
    problem = judging_problem(config, root)
    if problem:
        raise ValueError(problem)
    if claims_family(config, root) == "v3":
        # World v3's family (m = 11) with this checkout as its one base draw: the crossed
        # seeds x problems model within it, every row conditional on that draw.
        claims = build_v3_claims(
            {draw_label(config): load_draw_inputs(config, root)},
            family_settings(config, primary_benchmarks(config)),
        )
    else:
        claims = build_claims(
            runs,
            benchmarks,
            comparisons,
            ta_policies[0] if ta_policies else None,
            config.primary_k(),
            base=base,
            in_distribution=in_distribution_benchmarks(config),
            scaled_grpo=scaled_grpo,
            equivalence_margin=config.report.equivalence_margin,
            updates=updates,
            primary=primary_benchmarks(config),
            options=multiple_choice_options(config),
        )
    validity, validity_metrics = validity_section(
        config, root, runs, base, passk, out.get("validity")
    )
    if validity_metrics.get("validity/V5") != 1.0:
        claims = underpowered(claims)
    table = claims_table(claims)
    out["claims"].write_text(table + "\n")
    scores = score_table(runs, groups)
    baselines = [m for m in methods if m != "ta_grpo"]
    differences = difference_table(runs, groups, baselines)
    scores.to_csv(out["scores"], index=False)
    differences.to_csv(out["differences"], index=False)
    section = "\n".join(
        [
            "## pass@k over seeds: scores and differences",
            "",
            "Scores are means over each method's seeds (column *seeds*) of benchmark-group "
            "averages (the "
            "paper's Table 1 averages: the mean over a group's benchmarks of their mean over "
            "problems); differences are TA-GRPO minus each method. 95% intervals from crossed "
            "variance components (seeds x problems, paired over problems between the two "
            "methods): the variance of each method's per-seed scores over its seeds (seed "
            "effect and seed x problem interaction), plus the method-by-problem variance left "
            "after that interaction is taken out of the problems' variance (counted once, not "
            "twice), with a t quantile (Welch-Satterthwaite degrees of freedom); a method with "
            "one seed adds no seed term, so its rows hold for that run only (*conditional*). "
            "These are exploratory: unadjusted for their number "
            "(the claims table adjusts its family by Holm). Percentage points. *Updates*: the "
            "optimiser updates of each method's runs (they differ between methods with "
            "`train.batch_unit: rows`).",
            "",
            scores_markdown(
                scores, config.primary_k(), multiple_choice_options(config), groups, updates
            ),
            "",
            differences_markdown(differences, updates),
        ]
    )
    headline = claim_metrics(claims)
    headline.update(validity_metrics)
    return validity, table, section, headline


def scores_markdown(
    scores: pd.DataFrame,
    k_large: int,
    options: Mapping[str, int],
    groups: Mapping[str, Sequence[str]],
    updates: Mapping[str, str],
) -> str:
    rows = []
    for (method, group), part in scores.groupby(["method", "group"], sort=False):
        by_k = part.set_index("k")
        floors = [chance_floor(group, k, options, groups) for k in (1, k_large)]
        rows.append(
            [method, group, int(part["seeds"].iloc[0]), updates_of(updates, method)]
            + [_interval(*by_k.loc[k, ["pass_at_k", "ci_low", "ci_high"]]) for k in (1, k_large)]
            + ["-" if None in floors else " / ".join(f"{100 * f:.1f}" for f in floors)]
        )
    header = ["method", "group", "seeds", "updates", "pass@1", f"pass@{k_large}"]
    return markdown_table([*header, f"chance pass@1 / pass@{k_large}"], rows)


def differences_markdown(differences: pd.DataFrame, updates: Mapping[str, str]) -> str:
    if differences.empty:
        return "TA-GRPO was not run: no differences to report."
    ks = sorted(differences["k"].unique())
    rows = []
    for (baseline, group), part in differences.groupby(["baseline", "group"], sort=False):
        by_k = part.set_index("k")
        seeds = part["seeds"].iloc[0] + (" (conditional)" if part["conditional"].iloc[0] else "")
        rows.append(
            [
                f"TA-GRPO - {baseline}",
                group,
                seeds,
                f"{updates_of(updates, 'ta_grpo')} / {updates_of(updates, baseline)}",
            ]
            + [_interval(*by_k.loc[k, ["difference", "ci_low", "ci_high"]]) for k in ks]
        )
    header = ["difference", "group", "seeds", "updates TA / other", *[f"pass@{k}" for k in ks]]
    return markdown_table(header, rows)
