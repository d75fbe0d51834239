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
from tagrpo.plumbing.layout import (
    BASE_POLICY,
    base_model_outputs,
    check_equivalence_outputs,
    data_outputs,
    diagnostics_outputs,
    evaluate_outputs,
    policy_name,
    report_outputs,
    train_outputs,
)
from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.anchoring import anchoring_figure, load_anchoring_histories
from tagrpo.report.chance import multiple_choice_options
from tagrpo.report.claims import FAMILY_SIZE
from tagrpo.report.family import FAMILY_SIZE as V3_FAMILY_SIZE
from tagrpo.report.inputs import (
    claims_family,
    draw_label,
    parity_responses,
    preregistration_line,
    primary_benchmarks,
    read_passk,
    training_histories,
)
from tagrpo.report.markdown import passk_curves, passk_long_table, table1
from tagrpo.report.paper_section import chance_section, paper_sections
from tagrpo.report.statistics_section import statistics_sections
from tagrpo.report.training import load_training_summaries, reward_figure, training_section
from tagrpo.report.validity_section import strategy_section


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
    files = counts.get("source_files")
    return (
        "## Data\n\nEvery upstream row is kept or rejected with a reason (rows in = kept + "
        "rejected).\n\n"
        + markdown_table(["split/source", "rows in", "kept", "rejected"], rows)
        + reason_line
        + (f"\n\n{source_files_sentence(files)}" if files else "")
    )


def source_files_sentence(record: dict[str, Any]) -> str:
    """What the data stage found of the local source files beside their manifests (rows and
    SHA-256), and whether they had to match (``data.verify_sources``)."""
    files = record["files"]
    by_status: dict[str, list[str]] = {}
    for name, entry in files.items():
        by_status.setdefault(entry["manifest"], []).append(name)
    differing = [
        f"`{name}` ({files[name]['rows']} rows, sha256 {files[name]['sha256'][:12]}…; manifest "
        f"{files[name]['expected_rows']} rows, {files[name]['expected_sha256'][:12]}…)"
        for name in by_status.get("differs", [])
    ]
    unlisted = [f"`{name}`" for name in by_status.get("no manifest", [])]
    if record["verify_sources"]:
        text = (
            f"The {len(files)} source files were checked against their manifests (rows and "
            "SHA-256 of the shared data's SOURCES.md) before use: "
            f"{len(by_status.get('matches', []))} match"
        )
    else:
        text = (
            "**`data.verify_sources` is false**: the source files were read without having to "
            f"match their manifests (a user's own copy); of {len(files)}, "
            f"{len(by_status.get('matches', []))} match"
        )
    if differing:
        text += f", {len(differing)} differ: " + ", ".join(differing)
    if unlisted:
        text += f"; {len(unlisted)} have no manifest (not checked): " + ", ".join(unlisted)
    return text + "."


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


def devices_line(root: Path, trained: list[str]) -> str:
    """Which device made which run (preregistration/world-v3.md): the ``device`` of the base
    policy's, each training's and each evaluation's metrics file, grouped by device. A file
    written before stages recorded it says ``not recorded``."""
    stages = [("base_model", base_model_outputs().metrics)]
    stages += [(f"train {policy}", train_outputs(policy).metrics) for policy in trained]
    stages += [
        (f"evaluate {policy}", evaluate_outputs(policy).metrics)
        for policy in [BASE_POLICY, *trained]
    ]
    by_device: dict[str, list[str]] = {}
    for label, path in stages:
        metrics = json.loads((root / path).read_text(encoding="utf-8"))
        by_device.setdefault(metrics.get("device", "not recorded"), []).append(label)
    if len(by_device) == 1:
        (device,) = by_device
        return f"Device: the base policy, every training and every evaluation on `{device}`."
    parts = [f"`{device}`: {', '.join(labels)}" for device, labels in by_device.items()]
    return "Devices (results differ across CPU kinds): " + "; ".join(parts) + "."


def grader_parity_section(config: Params, root: Path, policies: list[str]) -> str:
    """The grader-parity tables of every policy's evaluated responses
    (:func:`tagrpo.evaluation.parity.parity_section`); the mini world's benchmarks must agree."""
    from tagrpo.evaluation.parity import parity_section
    from tagrpo.report.examples import WITHHELD

    mini_world = config.data.source == "synthetic"
    # The texts only where answers must agree (which disagreements are bugs); a paper-scale
    # run's texts are gigabytes.
    responses = parity_responses(root, policies, with_texts=mini_world)
    must_agree = {b for t in responses.values() for b in t["benchmark"]} if mini_world else set()
    grader = config.common.grading.grader
    heading = f"## Grader parity (pass@k above: `common.grading.grader: {grader}`)"
    return parity_section(responses, config.evaluate.ks, must_agree, WITHHELD, heading)


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
        method: training_histories(
            root,
            [policy_name(method, seed) for seed in config.runs.seeds_of(method)],
            "original/reward_mean",
        )
        for method in config.runs.all_methods()
    }
    reward_figure(rewards, figures_dir / "training_reward.png")
    figure_link = Path(os.path.relpath(layout["figures"], layout["report"].parent)).as_posix()
    strategy_text = strategy_section(config, root, figures_dir, figure_link)
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
        devices_line(root, trained),
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
        strategy_text,
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
        grader_parity_section(config, root, [BASE_POLICY, *trained]),
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
