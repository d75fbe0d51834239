"""The ``report`` stage's work: ``reports/report.md`` and its figures, from the stages' outputs.

Reads exactly the policies the params train (``runs``) and the base policy; a missing output is
an error, never a silently shorter table.
"""

from __future__ import annotations

import json
import os
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
    report_outputs,
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

    methods, seeds = config.runs.methods, config.runs.seeds
    ks = config.evaluate.ks
    runs = load_seed_runs(root, methods, seeds, ks)
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
            f"## pass@k with {len(seeds)} seed(s) per method: scores and differences",
            "",
            f"Scores are means over seeds {list(seeds)} of benchmark-group averages (the "
            "paper's Table 1 averages: the mean over a group's benchmarks of their mean over "
            "problems); differences are TA-GRPO minus each method. 95% intervals: bootstrap "
            "over problems (within benchmarks, paired between the two methods) and over each "
            "method's seeds. Percentage points.",
            "",
            _scores_markdown(scores, ks[-1]),
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


def _interval(value: float, low: float, high: float) -> str:
    return f"{100 * value:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def _scores_markdown(scores: pd.DataFrame, k_large: int) -> str:
    rows = []
    for (method, group), part in scores.groupby(["method", "group"], sort=False):
        by_k = part.set_index("k")
        rows.append(
            [method, group, int(part["seeds"].iloc[0])]
            + [_interval(*by_k.loc[k, ["pass_at_k", "ci_low", "ci_high"]]) for k in (1, k_large)]
        )
    return markdown_table(["method", "group", "seeds", "pass@1", f"pass@{k_large}"], rows)


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
    passk_curves(passk, curves, f"pass@k ({config.common.profile})")
    layout = report_outputs()
    link_path = Path(os.path.relpath(layout["figures"] / curves.name, layout["report"].parent))
    link = link_path.as_posix()
    claims, statistics, headline = statistics_sections(config, root, out)
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
        table1(passk, largest_k, groups),
        "",
        "## pass@1 (percent)",
        "",
        table1(passk, 1, groups),
        "",
        "## pass@k with bootstrap 95% confidence intervals over problems (percent)",
        "",
        passk_long_table(passk),
        "",
        "## pass@k curves",
        "",
        f"![pass@k curves]({link})",
        "",
    ]
    report_path.write_text("\n".join(sections))
    return {"policies": float(len(trained) + 1), "largest_k": float(largest_k), **headline}
