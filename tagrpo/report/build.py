"""The ``report`` stage's work: ``reports/report.md`` and its figures, from the stages' outputs.

Reads exactly the policies the params train (``runs``) and the base policy; a missing output is
an error, never a silently shorter table.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tagrpo.config.params import Params
from tagrpo.metrics.compare import chance_pass_at_k
from tagrpo.pipeline.layout import (
    BASE_POLICY,
    base_model_outputs,
    check_equivalence_outputs,
    data_outputs,
    diagnostics_outputs,
    evaluate_outputs,
    policy_name,
    report_outputs,
)
from tagrpo.report import paper
from tagrpo.report.anchoring import anchoring_figure, load_anchoring_histories
from tagrpo.report.chance import (
    CHANCE_CEILING,
    MIN_MARGIN,
    chance_floor,
    multiple_choice_options,
    uninformative_from,
)
from tagrpo.report.claims import (
    FAMILY_SIZE,
    build_claims,
    claims_table,
    difference_table,
    load_policy_runs,
    load_seed_runs,
    score_table,
    underpowered,
)
from tagrpo.report.family import FAMILY_SIZE as V3_FAMILY_SIZE
from tagrpo.report.family import (
    build_v3_claims,
    family_settings,
    load_draw_inputs,
    registered_family,
)
from tagrpo.report.markdown import markdown_table, passk_curves, passk_long_table, table1
from tagrpo.report.training import (
    load_training_summaries,
    reward_figure,
    training_section,
    updates_by_method,
)


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


def truncation_table(root: Path, passk: pd.DataFrame) -> str:
    """Percent of each benchmark's responses cut at the token limit, per policy (rows in the
    order of ``passk``), from each evaluation's metrics file (``<benchmark>/truncated_rate``);
    ``-`` where it is not recorded."""
    policies = list(dict.fromkeys(passk["policy"]))
    names = list(dict.fromkeys(passk.loc[passk["kind"] == "benchmark", "name"]))
    rows = []
    for policy in policies:
        path = root / evaluate_outputs(policy).metrics
        metrics = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        cells = [metrics.get(f"{name}/truncated_rate") for name in names]
        rows.append([policy, *("-" if c is None else f"{100 * c:.1f}" for c in cells)])
    lines = ["| policy | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def report_title(config: Params) -> str:
    """report.title, with the profile named when the title does not name it (a profile that
    keeps the embedded default's title must not read as the embedded default)."""
    title, profile = config.report.title, config.common.profile
    if profile.lower() in title.lower():
        return title
    return f"{title} [profile {profile!r}]"


def data_section(counts: dict[str, Any]) -> str:
    rows = [
        [key, fields["rows_in"], fields["kept"], fields["rejected"]]
        for key, fields in counts["sources"].items()
    ]
    total = counts["total"]
    rows.append(["**total**", total["rows_in"], total["kept"], total["rejected"]])
    reasons = counts.get("rejections_by_reason") or {}
    reason_line = (
        "\n\nRejections by reason: " + ", ".join(f"{k} {v}" for k, v in reasons.items())
        if reasons
        else ""
    )
    return (
        "## Data\n\nEvery upstream row is kept or rejected with a reason (rows in = kept + "
        "rejected).\n\n"
        + markdown_table(["split/source", "rows in", "kept", "rejected"], rows)
        + reason_line
    )


def base_model_section(metrics: dict[str, float], phrasings: pd.DataFrame) -> str:
    lines = ["## Base policy", ""]
    if "parameters" in metrics:
        lines.append(
            f"Warm-started tiny Llama: {int(metrics['parameters']):,} parameters, "
            f"vocabulary {int(metrics['vocab_size'])}, SFT on {int(metrics['sft_examples']):,} "
            f"examples, final loss {metrics['sft_final_loss']:.3f}, "
            f"{metrics['sft_seconds']:.0f} s on CPU."
        )
        lines.append("")
    if "probe/success_original" not in metrics:
        lines.append("No phrasing probe was run for this profile.")
        return "\n".join(lines)
    figures = [
        ["training questions probed", int(metrics["probe/questions"])],
        ["success on original phrasing", f"{100 * metrics['probe/success_original']:.1f}%"],
        [
            "original G-groups with mixed rewards",
            f"{100 * metrics['probe/original/mixed_rate']:.1f}%",
        ],
        [
            "original G-groups all correct / all wrong",
            f"{100 * metrics['probe/original/all_correct_rate']:.1f}% / "
            f"{100 * metrics['probe/original/all_wrong_rate']:.1f}%",
        ],
        [
            "neighbour NxG groups with identical rewards",
            f"{100 * metrics.get('probe/neighbours/zero_gradient_rate', float('nan')):.1f}%",
        ],
        [
            "joint (N+1)xG groups with identical rewards",
            f"{100 * metrics['probe/joint/zero_gradient_rate']:.1f}%",
        ],
        [
            "success spread across phrasings (max - min)",
            f"{100 * metrics['probe/phrasing_spread']:.1f} points",
        ],
    ]
    lines += [markdown_table(["signal", "value"], figures), ""]
    lines.append("Success by phrasing family (the same questions, each posed in every family):")
    lines.append("")
    lines.append(
        markdown_table(
            ["phrasing", "success", "responses"],
            [
                [r.phrasing, f"{100 * r.success:.1f}%", int(r.responses)]
                for r in phrasings.itertuples()
            ],
        )
    )
    return "\n".join(lines)


def read_passk(root: Path, policies: list[str]) -> pd.DataFrame:
    """Every policy's pass@k table (an error naming the first one missing)."""
    frames = []
    for policy in policies:
        path = root / evaluate_outputs(policy)["passk"]
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the evaluate stage of {policy}")
        frames.append(pd.read_csv(path))
    return pd.concat(frames, ignore_index=True)


def in_distribution_benchmarks(config: Params) -> tuple[str, list[str]]:
    """The group named by ``report.in_distribution`` and its benchmarks (every benchmark when
    it is null)."""
    name = config.report.in_distribution
    if name is None:
        return "all benchmarks", sorted(config.benchmark_names())
    return name, list(config.evaluate.groups[name])


def primary_benchmarks(config: Params) -> tuple[str, list[str]]:
    """The group named by ``report.primary_group`` and its benchmarks (validated free-form);
    every free-form benchmark when it is null."""
    name = config.report.primary_group
    if name is None:
        options = multiple_choice_options(config)
        return "free-form benchmarks", sorted(set(config.benchmark_names()) - set(options))
    return name, list(config.evaluate.groups[name])


def _histories(root: Path, policies: Sequence[str], column: str) -> list[list[float]]:
    """Each policy's per-step ``column`` from its training history (an error naming a missing
    file or column)."""
    from tagrpo.pipeline.layout import train_outputs

    histories = []
    for policy in policies:
        path = root / train_outputs(policy)["history"]
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the train stage of {policy}")
        frame = pd.read_csv(path)
        if column not in frame.columns:
            raise KeyError(f"{path} has no column {column!r}")
        histories.append(frame.sort_values("step")[column].tolist())
    return histories


def _strategy_responses(root: Path, policies: Sequence[str]) -> dict[str, pd.DataFrame]:
    """The evaluated responses (with ``correct``: V3's pass@k per path) of each policy that
    carry a ``strategy`` label (none in a world with one solution template: then nothing is
    read)."""
    import pyarrow.parquet as pq

    from tagrpo.metrics.testbed import STRATEGY_COLUMN

    frames = {}
    for policy in policies:
        path = root / evaluate_outputs(policy)["responses"]
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the evaluate stage of {policy}")
        if STRATEGY_COLUMN in pq.read_schema(path).names:
            columns = ["benchmark", "question_id", "correct", STRATEGY_COLUMN]
            frames[policy] = pd.read_parquet(path, columns=columns)
    return frames


def run_bands(config: Params, root: Path) -> Any:
    """The bands this run is judged against: its pre-registration's (``report.preregistration``),
    world v2's when it names none."""
    from tagrpo.report import validity

    if config.report.preregistration is None:
        return validity.DEFAULT_BANDS
    return validity.bands_from_preregistration(root / config.report.preregistration)


def base_criteria(
    config: Params, root: Path, passk: pd.DataFrame, policies: Sequence[str] = ()
) -> tuple[dict[str, Any], pd.DataFrame]:
    """The validity criteria that the base model alone decides (V2, V3, the edges, the harder
    group's band, the identical-reward regime), by name, and the strategy-entropy summary of
    the base and ``policies``. The report's table and ``tagrpo.report.draws`` (the same rows
    over several base draws) both use it."""
    from tagrpo.metrics.testbed import phrasing_dispersion
    from tagrpo.report import validity

    ks = config.evaluate.ks
    bands = run_bands(config, root)
    probe_path = root / base_model_outputs()["probe_samples"]
    probe = pd.read_parquet(probe_path) if probe_path.exists() else None
    dispersion = (
        phrasing_dispersion(probe, config.evaluate.bootstrap_resamples, config.common.seed)
        if probe is not None and not probe.empty
        else None
    )
    strategy, strategies = validity.strategy_criterion(
        _strategy_responses(root, [BASE_POLICY, *policies]),
        primary_benchmarks(config),
        ks[-1],
        config.evaluate.bootstrap_resamples,
        config.common.seed,
        bands,
    )
    base_passk = passk[passk["policy"] == BASE_POLICY]
    benchmarks = sorted(config.benchmark_names())
    edges = validity.edge_criteria(
        base_passk, benchmarks, multiple_choice_options(config), ks[-1], bands
    )
    criteria: dict[str, Any] = {
        "V2": validity.phrasing_criterion(dispersion),
        "V3": strategy,
        **{c.name: c for c in edges},
    }
    harder = validity.harder_criterion(base_passk, config.report.harder_group, ks[-1], bands)
    if harder is not None:
        criteria[harder.name] = harder
    probe_metrics = json.loads((root / base_model_outputs().metrics).read_text())
    criteria["regime"] = validity.regime_criterion(
        probe_metrics.get("probe/original/zero_gradient_rate"),
        int(probe_metrics.get("probe/original/groups", 0)),
        bands,
    )
    return criteria, strategies


def policy_entropy_table(strategies: pd.DataFrame, samples: int) -> str:
    """V3's per-policy strategy entropy, labelled with what it is read from (the evaluation's
    ``samples`` responses per question), so it is not mistaken for the over-training table's."""
    rows = [
        [
            r.policy,
            f"{r.entropy_bits:.2f}",
            f"{100 * r.questions_with_two_or_more:.0f}%",
            r.strategies,
        ]
        for r in strategies.itertuples()
    ]
    return "\n".join(
        [
            "Strategy entropy per policy (bits, mean over the evaluated questions; each "
            f"question's entropy read from the policy's {samples} evaluation responses to it):",
            "",
            markdown_table(
                ["policy", "entropy (bits)", "questions with >= 2 strategies", "strategies"], rows
            ),
        ]
    )


def strategy_over_training_table(frame: pd.DataFrame, group_size: int, samples: int) -> str:
    """The over-training entropy per method and checkpoint, and a note on why its base value
    differs from the validity section's (other questions, fewer responses per question)."""
    table = (
        frame.groupby(["method", "fraction"], sort=False)["entropy_bits"]
        .agg(["mean", "count"])
        .reset_index()
    )
    rows = [
        [m, f"{f:.2f}", f"{v:.3f}", str(int(c))]
        for m, f, v, c in table[["method", "fraction", "mean", "count"]].itertuples(index=False)
    ]
    base = frame.loc[frame["method"] == "base", "entropy_bits"]
    # The same policy reads lower here: a plug-in entropy from G answers is biased down more
    # than one from n (n > G), and the questions are the training batch's, not the benchmarks'.
    note = (
        f"The base's value here{f' ({base.iloc[0]:.3f})' if len(base) else ''} is not the "
        "testbed-validity section's base entropy: this table reads each training question's "
        f"first G = {group_size} responses (the base-model probe at fraction 0, the rollout "
        "dumps after), that one each evaluated benchmark question's "
        f"{samples} evaluation responses. Different questions, and an entropy read from fewer "
        "responses per question is lower (the plug-in estimate is biased down), so compare "
        "the rows of one table, not values across the two."
    )
    return "\n".join(
        [markdown_table(["method", "fraction", "entropy (bits)", "runs"], rows), "", note]
    )


def validity_section(
    config: Params,
    root: Path,
    runs: Mapping[str, Any],
    base: Any,
    passk: pd.DataFrame,
    table_path: Path | None = None,
) -> tuple[str, dict[str, float]]:
    """The "Testbed validity" table (:mod:`tagrpo.report.validity`) and its PASS/FAIL metrics;
    the same rows as a CSV at ``table_path`` (what ``tagrpo.report.draws`` reads across
    runs)."""
    from tagrpo.report import validity
    from tagrpo.report.claims import negative_controls

    benchmarks = sorted(config.benchmark_names())
    group, members = in_distribution_benchmarks(config)
    grpo_policies = (
        [policy_name("grpo", seed) for seed in config.runs.seeds_of("grpo")]
        if "grpo" in runs
        else []
    )
    histories = _histories(root, grpo_policies, "original/reward_mean")
    controls = negative_controls(list(runs))
    primary = primary_benchmarks(config)
    base_only, strategies = base_criteria(config, root, passk, [*config.runs.policies()])
    bands = run_bands(config, root)
    resolution, power = validity.resolution_criterion(
        runs.get("ta_grpo"), runs.get("grpo"), primary, config.primary_k(), bands
    )
    criteria = [
        validity.rl_gain(runs.get("grpo"), base, group, members, bands),
        validity.reward_trend(histories),
        base_only["V2"],
        base_only["V3"],
        validity.control_criterion(
            runs.get("grpo"),
            (controls[0], runs[controls[0]]) if controls else None,
            benchmarks,
        ),
        resolution,
        *(c for name, c in base_only.items() if name not in ("V2", "V3")),
    ]
    lines = [
        "## Testbed validity",
        "",
        "Can this run's miniature measure what the project is for? Each criterion (issue 21; "
        f"thresholds: {bands.source}, fixed before any method comparison is "
        "read) is computed from this run's outputs. Intervals are 95%, t-based on crossed "
        "variance components of seeds and problems (see the statistics section); a criterion "
        "that cannot be measured fails. V5 is blind: it states the design's resolution, not "
        "the primary estimate.",
        "",
        validity.validity_table(criteria),
    ]
    if not strategies.empty:
        lines += ["", policy_entropy_table(strategies, config.evaluate.n)]
    if power:
        lines += ["", power]
    passed = sum(c.passed for c in criteria)
    lines += ["", f"**{passed} of {len(criteria)} criteria pass.**"]
    if table_path is not None:
        pd.DataFrame(
            [
                {
                    "criterion": c.name,
                    "requirement": c.requirement,
                    "measured": c.measured,
                    "verdict": "PASS" if c.passed else "FAIL",
                }
                for c in criteria
            ]
        ).to_csv(table_path, index=False)
    metrics = {f"validity/{c.key}": float(c.passed) for c in criteria}
    return "\n".join(lines), metrics


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
            _scores_markdown(
                scores, config.primary_k(), multiple_choice_options(config), groups, updates
            ),
            "",
            _differences_markdown(differences, updates),
        ]
    )
    headline = claim_metrics(claims)
    headline.update(validity_metrics)
    return validity, table, section, headline


def paper_sections(config: Params, root: Path, out: dict[str, Path]) -> str:
    """The paper's Table 1 and Figures 5-8 (:mod:`tagrpo.report.paper`), beside its numbers
    when the base model is one of the paper's."""
    from tagrpo.pipeline.layout import BASE_POLICY

    ks = config.evaluate.ks
    k = ks[-1]
    runs = {"base": load_policy_runs(root, [BASE_POLICY], ks)}
    methods = config.runs.all_methods()
    runs.update(load_seed_runs(root, {m: config.runs.seeds_of(m) for m in methods}, ks))
    benchmarks = sorted(config.benchmark_names())
    groups = dict(config.evaluate.groups)
    columns = {b: [b] for b in benchmarks} | groups | {"average": benchmarks}
    options = multiple_choice_options(config)
    frame = paper.scores(runs, columns)
    frame["chance"] = [
        100 * f if (f := chance_floor(c, int(k), options, columns)) is not None else float("nan")
        for c, k in zip(frame["column"], frame["k"], strict=True)
    ]
    frame.to_csv(out["paper_scores"], index=False)
    floors_at_k = {c: paper_floor(c, k, options, columns) for c in columns}
    hub_id = config.base_model.hub.hub_id if config.base_model.kind == "hub" else None
    model = paper.paper_model(hub_id)
    ordered = [b for members in groups.values() for b in members]
    ordered += [b for b in benchmarks if b not in ordered]
    table_columns = []
    for name, members in groups.items():
        table_columns += [*members, name]
    table_columns += [b for b in benchmarks if b not in table_columns]
    table, wide = paper.table1(frame, table_columns, k, model, floors_at_k)
    wide.to_csv(out["table1"], index=False)
    figures = out["figures"]
    figures.mkdir(parents=True, exist_ok=True)
    paper.curves_figure(
        frame[frame["column"].isin(ordered)], ordered, figures / "figure5_passk.png", options
    )
    paper.curves_grid_figure(
        frame[frame["column"].isin(ordered)], ordered, figures / "passk_intervals.png", options
    )
    averages = [*groups, "average"]
    paper.bars_figure(
        frame, paper.MATCHED, [*ordered, *averages], k, "Matched budget (paper Figure 6)",
        figures / "figure6_matched_budget.png", floors_at_k,
    )  # fmt: skip
    paper.bars_figure(
        frame, paper.ABLATION, averages, k, "Ablation (paper Figure 8)",
        figures / "figure8_ablation.png", floors_at_k,
    )  # fmt: skip
    scaling = config.runs.data_scaling
    scaled = {
        (method, multiple): load_policy_runs(
            root, [policy_name(method, s, multiple) for s in scaling.seeds], ks
        )
        for method in scaling.methods
        for multiple in scaling.multiples
    }
    scaling_frame = paper.scaling_frame(
        {m: r for m, r in runs.items() if m in (*scaling.methods, "ta_grpo")},
        scaled,
        benchmarks,
        k,
    )
    scaling_frame.to_csv(out["data_scaling"], index=False)
    if scaling.multiples:  # the report shows Figure 7 only then (no one-point "curve")
        paper.scaling_figure(
            scaling_frame, scaling.methods, k, figures / "figure7_data_scaling.png",
            floors_at_k["average"],
        )  # fmt: skip
    link = out_link(out)
    updates = updates_by_method(load_training_summaries(root, config.runs.policies()))
    updates_line = "Optimiser updates per method: " + ", ".join(
        f"{method} {_updates_of(updates, method)}" for method in methods
    )
    beside = (
        f"The run's base model is {model}: the paper's Table 1 rows follow ours, with the "
        "difference."
        if model
        else "The base model is not one of the paper's four, so no published row sits beside ours."
    )
    lines = [
        f"## The paper's figures and tables (pass@{k} unless stated; percent, 95% intervals)",
        "",
        f"Table 1: pass@{k} per benchmark and the group averages. {beside}",
        "",
        table,
        "",
        updates_line + ".",
        "",
        "Figure 5: pass@k curves per benchmark, every method (the mean over its seeds; shaded: "
        "the 95% intervals of the base policy and TA-GRPO, every method's in Table 1 and "
        "`reports/tables/paper_scores.csv`; dashed: the chance floor of a multiple-choice "
        "benchmark).",
        "",
        f"![Figure 5]({link}/figure5_passk.png)",
        "",
        "Figure 6: the matched response budget ((N+1)xGRPO, with and without DS). "
        + updates_line
        + ".",
        "",
        f"![Figure 6]({link}/figure6_matched_budget.png)",
        "",
        (
            f"Figure 7: data scaling: {', '.join(scaling.methods)} on 1x to "
            f"{max(scaling.multiples):g}x training questions against TA-GRPO on 1x "
            "(average over all benchmarks)."
            if scaling.multiples
            else "Figure 7: data scaling: **not run in this profile** "
            "(`runs.data_scaling.multiples` is empty; `profiles/data-scaling.yaml` runs "
            "them): the 1x scores only, no figure."
        ),
        "",
        markdown_table(
            ["method", "data", f"average pass@{k} [95% CI]"],
            [
                [r.method, f"{r.data_multiple:g}x", f"{r.value:.1f} [{r.low:.1f}, {r.high:.1f}]"]
                for r in scaling_frame.itertuples()
            ]
            + (
                [["chance (uniform guess)", "", f"{floors_at_k['average']:.1f}"]]
                if floors_at_k["average"] is not None
                else []
            ),
        ),
        *(["", f"![Figure 7]({link}/figure7_data_scaling.png)"] if scaling.multiples else []),
        "",
        "Figure 8: the ablation: GRPO, TA-GRPO* (rephrasings, per-rephrasing groups and "
        "ratios), unanchored TA-GRPO (joint groups, own-prompt ratios), TA-GRPO. "
        + updates_line
        + ".",
        "",
        f"![Figure 8]({link}/figure8_ablation.png)",
    ]
    quoted = paper.quoted_numbers(model)
    if quoted:
        lines += ["", f"The paper's other figures for {model}:", "", quoted]
    return "\n".join(lines)


def paper_floor(
    column: str, k: int, options: Mapping[str, int], columns: Mapping[str, Sequence[str]]
) -> float | None:
    """A column's chance pass@k in percent (None: free-form)."""
    floor = chance_floor(column, k, options, columns)
    return None if floor is None else 100 * floor


def chance_section(
    passk: pd.DataFrame, options: Mapping[str, int], groups: Mapping[str, Sequence[str]]
) -> str:
    """The chance floors of the multiple-choice benchmarks beside the base policy, and the k
    from which each stops being informative (:func:`tagrpo.report.chance.uninformative_from`)."""
    lines = ["## Chance floors of the multiple-choice benchmarks", ""]
    if not options:
        lines.append("Every benchmark of this profile is free-form: guessing scores nothing.")
        return "\n".join(lines)
    ks = sorted(int(k) for k in passk["k"].unique())
    base = passk[passk["policy"] == BASE_POLICY]
    rows, verdicts = [], []
    for name, count in options.items():
        by_k = {int(r.k): float(r.pass_at_k) for r in base[base["name"] == name].itertuples()}
        if not by_k:
            raise KeyError(f"{name}: the base policy has no pass@k for this benchmark")
        chance = [chance_pass_at_k(count, k) for k in ks]
        rows.append([f"{name}: chance ({count} options)", *[f"{100 * c:.1f}" for c in chance]])
        rows.append([f"{name}: base policy", *[f"{100 * by_k[k]:.1f}" for k in ks]])
        margins = [by_k[k] - c for k, c in zip(ks, chance, strict=True)]
        rows.append([f"{name}: base minus chance", *[f"{100 * m:+.1f}" for m in margins]])
        k, why = uninformative_from(count, ks, by_k)
        verdict = (
            f"informative up to pass@{ks[-1]} ({why})"
            if k is None
            else f"stops being informative at pass@{k}: {why}"
        )
        verdicts.append(f"- **{name}** ({count} options): {verdict}.")
    holding = [g for g, members in groups.items() if any(m in options for m in members)]
    lines += [
        "pass@k of a uniform guesser among a question's options is "
        "1 - (1 - 1/options)^k; every pass@k table of this report shows it beside the "
        "multiple-choice rows (a *chance* row or column), and the figures draw it dashed. A "
        "group average holding a multiple-choice benchmark has the mean of its benchmarks' "
        "floors (a free-form answer "
        f"counts 0){': ' + ', '.join(holding) if holding else ''}.",
        "",
        markdown_table(["percent", *[f"pass@{k}" for k in ks]], rows),
        "",
        f"A multiple-choice benchmark stops being informative at the smallest k where guessing "
        f"reaches {100 * CHANCE_CEILING:.0f}% pass@k, or where the base policy is less than "
        f"{100 * MIN_MARGIN:.0f} points above guessing (its score then measures the guess, not "
        "the model):",
        "",
        *verdicts,
    ]
    return "\n".join(lines)


def prune_unlinked_figures(report: str, figures_dir: Path, link: str) -> list[str]:
    """Remove every file of ``figures_dir`` the report text does not link (as
    ``<link>/<name>``); returns their names. The folder is the report stage's own output (it
    starts empty), so what this removes was drawn for a section the report leaves out (main
    drew Figure 7's "not run" placeholder and committed it unlinked); any such figure would
    otherwise stay committed beside a report that never shows it."""
    removed = []
    for path in sorted(figures_dir.iterdir()) if figures_dir.is_dir() else []:
        if path.is_file() and f"({link}/{path.name})" not in report:
            path.unlink()
            removed.append(path.name)
    return removed


def out_link(out: dict[str, Path]) -> str:
    """The figures folder as linked from the report."""

    layout = report_outputs()
    return Path(os.path.relpath(layout["figures"], layout["report"].parent)).as_posix()


def _interval(value: float, low: float, high: float) -> str:
    return f"{100 * value:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def _updates_of(updates: Mapping[str, str], method: str) -> str:
    if method not in updates:
        raise KeyError(f"no training summary of {method}: its optimiser updates are unknown")
    return updates[method]


def _scores_markdown(
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
            [method, group, int(part["seeds"].iloc[0]), _updates_of(updates, method)]
            + [_interval(*by_k.loc[k, ["pass_at_k", "ci_low", "ci_high"]]) for k in (1, k_large)]
            + ["-" if None in floors else " / ".join(f"{100 * f:.1f}" for f in floors)]
        )
    header = ["method", "group", "seeds", "updates", "pass@1", f"pass@{k_large}"]
    return markdown_table([*header, f"chance pass@1 / pass@{k_large}"], rows)


def _differences_markdown(differences: pd.DataFrame, updates: Mapping[str, str]) -> str:
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
                f"{_updates_of(updates, 'ta_grpo')} / {_updates_of(updates, baseline)}",
            ]
            + [_interval(*by_k.loc[k, ["difference", "ci_low", "ci_high"]]) for k in ks]
        )
    header = ["difference", "group", "seeds", "updates TA / other", *[f"pass@{k}" for k in ks]]
    return markdown_table(header, rows)


def _strategy_section(config: Params, root: Path, figures_dir: Path, figure_link: str) -> str:
    """Strategy entropy over training per method (:mod:`tagrpo.report.strategies`): a figure and
    its table, or why there is none (a world with one solution path, or no probe)."""
    from tagrpo.data.schema import read_questions
    from tagrpo.report.strategies import strategy_figure, strategy_over_training

    heading = ["## Strategy entropy over training", ""]
    probe_path = root / base_model_outputs()["probe_samples"]
    train_path = root / data_outputs()["processed"] / "train.parquet"
    probe = pd.read_parquet(probe_path) if probe_path.exists() else None
    questions = read_questions(str(train_path)) if train_path.exists() else []
    if probe is None or probe.empty or not all("family" in q.meta for q in questions[:1]):
        return "\n".join(
            [*heading, "Not measurable: the solution paths are the mini world's (no probe of "
             "mini-world questions in this profile)."]
        )  # fmt: skip
    frame = strategy_over_training(
        root,
        {
            m: [policy_name(m, s) for s in config.runs.seeds_of(m)]
            for m in config.runs.all_methods()
        },
        config.train.checkpoints,
        config.train.group_size,
        probe,
        {q.id: q.problem for q in questions},
    )
    strategy_figure(frame, figures_dir / "strategy_entropy.png")
    return "\n".join(
        [
            *heading,
            "Per question, the entropy (bits) of the solution paths its first G responses to "
            "q0 took (forward or backward; 1 = both equally, 0 = one only), averaged over the "
            "questions of the base probe (fraction 0) and of the batch dumped at each checkpoint; "
            "each line the mean over the method's seeds, each seed a faint point. A fall is a "
            "narrowing of the policy's solution paths (the paper's diversity collapse).",
            "",
            f"![Strategy entropy over training]({figure_link}/strategy_entropy.png)",
            "",
            strategy_over_training_table(frame, config.train.group_size, config.evaluate.n),
        ]
    )


def claims_family(config: Params, root: Path) -> str:
    """``v3`` or ``v2``: the claims family of the pre-registration the run names
    (:func:`tagrpo.report.family.registered_family`; none: world v2's)."""
    relative = config.report.preregistration
    return registered_family(root / relative if relative is not None else None)


def draw_label(config: Params) -> str:
    """The base draw a checkout is: its warm-start's SFT seed (``SFT seed 0``)."""
    if config.base_model.kind != "warmstart":
        return f"the {config.base_model.kind} base model"
    return f"SFT seed {config.base_model.warmstart.seed}"


def claims_intro(config: Params, root: Path) -> str:
    """The paragraph above the claims table: how its rows are tested and adjusted (world v2's
    family or world v3's, :func:`claims_family`)."""
    k, group = config.primary_k(), primary_benchmarks(config)[0]
    if claims_family(config, root) == "v3":
        return (
            "The negative control and the A/A null (GRPO's seeds split in two; its interval "
            "must cover 0) open the table, outside the family; the paper's claims below them "
            f"are world v3's pre-registered family of {V3_FAMILY_SIZE} rows, adjusted by Holm "
            "(*Holm p*; a verdict needs Holm p < 0.05): a row not run or not measurable counts "
            "with p = 1. Rows marked *outside the family* (the widening on -log(1 - pass@k), "
            "the embedding distance) are reported beside the family row they belong to, "
            f"unadjusted. The primary endpoint is TA-GRPO minus GRPO at pass@{k} on the "
            f"`report.primary_group` group ({group}); the other pass@{k} rows are on the "
            "free-form benchmarks. This checkout is one base draw "
            f"({draw_label(config)}): every row is the crossed seeds x problems model within "
            "it, conditional on that draw; the study over draws is `python -m "
            "tagrpo.report.study`. The section 5.5 row is an equivalence test (TOST) with a "
            f"margin of +/-{100 * config.report.equivalence_margin:.1f} points (90% interval), "
            "each arm with >= 2 seeds."
        )
    return (
        "The controls open the table (tested at 5% each; with >= 4 GRPO seeds an A/A "
        "control, GRPO's first half of seeds minus its second half, whose interval should "
        "cover 0); the paper's claims below them are one fixed family of "
        f"{FAMILY_SIZE} rows, adjusted by Holm (*Holm p*; a verdict needs Holm p < 0.05): a "
        "row not run or not measurable counts with p = 1, so the family never shrinks with "
        "what a profile runs. The primary endpoint (TA-GRPO minus GRPO at "
        f"pass@{k}) and its widening with k are on the "
        f"`report.primary_group` group ({group}); the other "
        f"pass@{k} rows on the free-form benchmarks (a multiple-choice "
        "benchmark is reported at pass@1 only). *seeds*: the seeds of the two methods "
        "compared; *conditional*: a side has one run, so the interval holds for that run "
        "only; *not measurable*: nothing varies (zero variance) or, for the equivalence test, "
        "a side has fewer than 2 seeds. The section 5.5 row is an equivalence test (TOST) "
        f"with a margin of +/-{100 * config.report.equivalence_margin:.1f} points, shown with "
        "its 90% interval."
    )


def preregistration_line(config: Params, root: Path) -> str:
    """Which pre-registration the run is judged under: its path, SHA-256 and the commit that
    last changed it (the study's first training must come after that commit)."""
    relative = config.report.preregistration
    if relative is None:
        return "No pre-registration (`report.preregistration: null`)."
    path = root / relative
    if not path.is_file():
        raise FileNotFoundError(f"report.preregistration: {path} does not exist")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    try:
        commit = subprocess.run(
            ["git", "log", "-1", "--format=%H", "--", relative],
            cwd=root, capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = ""
    committed = f", last committed at `{commit[:12]}`" if commit else " (not committed)"
    return f"Pre-registration: `{relative}`, SHA-256 `{digest}`{committed}."


def build_report(
    config: Params, root: Path, out: dict[str, Path], git: dict[str, str]
) -> dict[str, Any]:
    """Write the report, its figures and tables (``out``); returns headline metrics."""
    report_path, figures_dir = out["report"], out["figures"]
    trained = config.runs.policies()
    base = base_model_outputs()
    counts = json.loads((root / data_outputs().metrics).read_text())
    equivalence = (root / check_equivalence_outputs()["section"]).read_text().strip()
    diagnostics = (root / diagnostics_outputs()["section"]).read_text().strip()
    base_metrics = json.loads((root / base.metrics).read_text())
    phrasings = pd.read_csv(root / base["phrasing_plot"])
    passk = read_passk(root, [BASE_POLICY, *trained])
    groups = config.evaluate.groups
    largest_k = int(passk["k"].max())
    figures_dir.mkdir(parents=True, exist_ok=True)
    curves = figures_dir / "passk_curves.png"
    options = multiple_choice_options(config)
    passk_curves(
        passk, curves, f"pass@k per policy ({config.common.profile})", options=options,
        groups=groups,
    )  # fmt: skip
    layout = report_outputs()
    link_path = Path(os.path.relpath(layout["figures"] / curves.name, layout["report"].parent))
    link = link_path.as_posix()
    validity, claims, statistics, headline = statistics_sections(config, root, out, passk)
    rewards = {
        method: _histories(
            root,
            [policy_name(method, seed) for seed in config.runs.seeds_of(method)],
            "original/reward_mean",
        )
        for method in config.runs.all_methods()
    }
    reward_figure(rewards, figures_dir / "training_reward.png")
    figure_link = Path(os.path.relpath(layout["figures"], layout["report"].parent)).as_posix()
    strategy_section = _strategy_section(config, root, figures_dir, figure_link)
    anchoring_path = figures_dir / "anchoring_shift.png"
    measured = config.train.anchoring_diagnostic
    histories = load_anchoring_histories(root, trained) if measured else {}
    anchoring_figure(histories, anchoring_path, measured)
    anchoring_link = Path(
        os.path.relpath(layout["figures"] / anchoring_path.name, layout["report"].parent)
    ).as_posix()
    paper_figures = paper_sections(config, root, out)
    sections = [
        f"# {report_title(config)}",
        "",
        f"Profile `{config.common.profile}`, git commit `{git['git_commit'][:12]}` (dirty: "
        f"{git['git_dirty']}). Generated by `dvc repro`; every number below comes from this "
        "run's stage outputs.",
        "",
        preregistration_line(config, root),
        "",
        validity,
        "",
        "## The paper's claims, as this run measures them",
        "",
        claims_intro(config, root),
        "",
        claims,
        "",
        "## Training reward and pass@k of every method",
        "",
        "Training reward on the original questions per step, per method: the mean over its "
        "seeds, shaded by the 95% interval of that mean over seeds (a one-seed method has no "
        "band), GRPO's mean dashed for comparison.",
        "",
        f"![Training reward per method]({figure_link}/training_reward.png)",
        "",
        "pass@k per benchmark of every method over the base policy, each with its 95% interval "
        "(seeds and problems, as in the tables).",
        "",
        f"![pass@k with intervals]({figure_link}/passk_intervals.png)",
        "",
        strategy_section,
        "",
        statistics,
        "",
        chance_section(passk, options, groups),
        "",
        paper_figures,
        "",
        data_section(counts),
        "",
        equivalence,
        "",
        base_model_section(base_metrics, phrasings),
        "",
        training_section(
            load_training_summaries(root, trained),
            config.train.group_size,
            config.train.n_neighbours,
            config.train.estimators,
            anchoring_link,
            measured,
        ),
        "",
        diagnostics,
        "",
        f"## pass@{largest_k} (percent), as in the paper's Table 1",
        "",
        table1(passk, largest_k, groups, options=options),
        "",
        "## pass@1 (percent)",
        "",
        table1(passk, 1, groups, options=options),
        "",
        "## Truncated responses (percent of each benchmark's samples)",
        "",
        f"A response cut at `evaluate.max_new_tokens` ({config.evaluate.max_new_tokens}) is "
        "graded wrong: read every pass@k above beside its truncation rate.",
        "",
        truncation_table(root, passk),
        "",
        "## pass@k with bootstrap 95% confidence intervals over problems (percent)",
        "",
        passk_long_table(passk, options=options, groups=groups),
        "",
        "## pass@k curves",
        "",
        "Every policy: its method's colour, its seed's line style (the base policy black); "
        "intervals in the table above; dashed: the chance floor.",
        "",
        f"![pass@k curves]({link})",
        "",
    ]
    if config.report.example_responses:
        from tagrpo.report.examples import example_responses_section

        shown = {
            policy: pd.read_parquet(root / evaluate_outputs(policy)["responses"])
            for policy in [BASE_POLICY, *trained]
        }
        sections += [example_responses_section(shown, config.report.example_responses), ""]
    text = "\n".join(sections)
    report_path.write_text(text)
    prune_unlinked_figures(text, figures_dir, figure_link)
    return {"policies": float(len(trained) + 1), "largest_k": float(largest_k), **headline}
