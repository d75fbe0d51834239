"""The ``report`` stage's work: ``reports/report.md`` and its figures, from the stages' outputs.

Reads exactly the policies the params train (``runs``) and the base policy; a missing output is
an error, never a silently shorter table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.config.params import Params
from tagrpo.layout import (
    BASE_POLICY,
    base_model_outputs,
    check_equivalence_outputs,
    data_outputs,
    diagnostics_outputs,
    evaluate_outputs,
    policy_name,
    report_outputs,
)
from tagrpo.metrics.compare import chance_pass_at_k
from tagrpo.report.chance import (
    CHANCE_CEILING,
    MIN_MARGIN,
    chance_floor,
    multiple_choice_options,
    uninformative_from,
)
from tagrpo.report.markdown import markdown_table, passk_curves, passk_long_table, table1
from tagrpo.report.training import load_training_summaries, training_section


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


def statistics_sections(
    config: Params, root: Path, out: dict[str, Path]
) -> tuple[str, str, dict[str, Any]]:
    """The claims table (markdown), the scores/differences section, and headline metrics.

    Writes ``out["claims"]`` (the table alone: README quotes it), ``out["scores"]`` and
    ``out["differences"]`` (long-form CSVs behind the tables).
    """
    from tagrpo.report.claims import (
        build_claims,
        claims_table,
        difference_table,
        load_seed_runs,
        score_table,
    )

    methods = config.runs.all_methods()
    seeds = {method: config.runs.seeds_of(method) for method in methods}
    ks = config.evaluate.ks
    runs = load_seed_runs(root, seeds, ks)
    benchmarks = sorted(config.benchmark_names())
    groups = {**config.evaluate.groups, "all benchmarks": benchmarks}
    comparisons_path = root / diagnostics_outputs()["comparisons"]
    comparisons = pd.read_csv(comparisons_path) if comparisons_path.exists() else None
    ta_policies = [p for p in config.diagnostics.policies if p.startswith("ta_grpo-")]
    claims = build_claims(
        runs,
        benchmarks,
        comparisons,
        ta_policies[0] if ta_policies else None,
        ks[-1],
        config.evaluate.bootstrap_resamples,
    )
    table = claims_table(claims)
    out["claims"].write_text(table + "\n")
    scores = score_table(runs, groups, config.evaluate.bootstrap_resamples)
    baselines = [m for m in methods if m != "ta_grpo"]
    differences = difference_table(runs, groups, baselines, config.evaluate.bootstrap_resamples)
    scores.to_csv(out["scores"], index=False)
    differences.to_csv(out["differences"], index=False)
    section = "\n".join(
        [
            "## pass@k over seeds: scores and differences",
            "",
            "Scores are means over each method's seeds (column *seeds*) of benchmark-group "
            "averages (the "
            "paper's Table 1 averages: the mean over a group's benchmarks of their mean over "
            "problems); differences are TA-GRPO minus each method. 95% intervals: bootstrap "
            "over problems (within benchmarks, paired between the two methods) and over each "
            "method's seeds. Percentage points.",
            "",
            _scores_markdown(scores, ks[-1], multiple_choice_options(config), groups),
            "",
            _differences_markdown(differences),
        ]
    )
    headline = {
        f"claims/{i}/{c.estimate.verdict if c.estimate else 'not run'}": 1.0
        for i, c in enumerate(claims)
    }
    headline.update(
        {f"claims/{i}/estimate": c.estimate.value for i, c in enumerate(claims) if c.estimate}
    )
    return table, section, headline


def paper_sections(config: Params, root: Path, out: dict[str, Path]) -> str:
    """The paper's Table 1 and Figures 5-8 (:mod:`tagrpo.report.paper`), beside its numbers
    when the base model is one of the paper's."""
    from tagrpo.layout import BASE_POLICY
    from tagrpo.report import paper
    from tagrpo.report.claims import load_policy_runs, load_seed_runs

    ks = config.evaluate.ks
    k = ks[-1]
    n_resamples = config.evaluate.bootstrap_resamples
    runs = {"base": load_policy_runs(root, [BASE_POLICY], ks)}
    methods = config.runs.all_methods()
    runs.update(load_seed_runs(root, {m: config.runs.seeds_of(m) for m in methods}, ks))
    benchmarks = sorted(config.benchmark_names())
    groups = dict(config.evaluate.groups)
    columns = {b: [b] for b in benchmarks} | groups | {"average": benchmarks}
    options = multiple_choice_options(config)
    frame = paper.scores(runs, columns, n_resamples)
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
        n_resamples,
    )
    scaling_frame.to_csv(out["data_scaling"], index=False)
    paper.scaling_figure(
        scaling_frame, scaling.methods, k, figures / "figure7_data_scaling.png",
        floors_at_k["average"],
    )  # fmt: skip
    link = out_link(out)
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
        "Figure 5: pass@k curves per benchmark, every method (the mean over its seeds; shaded: "
        "the 95% intervals of the base policy and TA-GRPO, every method's in Table 1 and "
        "`reports/tables/paper_scores.csv`; dashed: the chance floor of a multiple-choice "
        "benchmark).",
        "",
        f"![Figure 5]({link}/figure5_passk.png)",
        "",
        "Figure 6: the matched response budget ((N+1)xGRPO, with and without DS).",
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
        "ratios), unanchored TA-GRPO (joint groups, own-prompt ratios), TA-GRPO.",
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


def out_link(out: dict[str, Path]) -> str:
    """The figures folder as linked from the report."""
    import os

    layout = report_outputs()
    return Path(os.path.relpath(layout["figures"], layout["report"].parent)).as_posix()


def _interval(value: float, low: float, high: float) -> str:
    return f"{100 * value:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def _scores_markdown(
    scores: pd.DataFrame,
    k_large: int,
    options: Mapping[str, int],
    groups: Mapping[str, Sequence[str]],
) -> str:
    rows = []
    for (method, group), part in scores.groupby(["method", "group"], sort=False):
        by_k = part.set_index("k")
        floors = [chance_floor(group, k, options, groups) for k in (1, k_large)]
        rows.append(
            [method, group, int(part["seeds"].iloc[0])]
            + [_interval(*by_k.loc[k, ["pass_at_k", "ci_low", "ci_high"]]) for k in (1, k_large)]
            + ["-" if None in floors else " / ".join(f"{100 * f:.1f}" for f in floors)]
        )
    header = ["method", "group", "seeds", "pass@1", f"pass@{k_large}"]
    return markdown_table([*header, f"chance pass@1 / pass@{k_large}"], rows)


def _differences_markdown(differences: pd.DataFrame) -> str:
    if differences.empty:
        return "TA-GRPO was not run: no differences to report."
    ks = sorted(differences["k"].unique())
    rows = []
    for (baseline, group), part in differences.groupby(["baseline", "group"], sort=False):
        by_k = part.set_index("k")
        rows.append(
            [f"TA-GRPO - {baseline}", group]
            + [_interval(*by_k.loc[k, ["difference", "ci_low", "ci_high"]]) for k in ks]
        )
    return markdown_table(["difference", "group", *[f"pass@{k}" for k in ks]], rows)


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
    claims, statistics, headline = statistics_sections(config, root, out)
    paper_figures = paper_sections(config, root, out)
    sections = [
        f"# {config.report.title}",
        "",
        f"Profile `{config.common.profile}`, git commit `{git['git_commit'][:12]}` (dirty: "
        f"{git['git_dirty']}). Generated by `dvc repro`; every number below comes from this "
        "run's stage outputs.",
        "",
        "## The paper's claims, as this run measures them",
        "",
        claims,
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
    report_path.write_text("\n".join(sections))
    return {"policies": float(len(trained) + 1), "largest_k": float(largest_k), **headline}
