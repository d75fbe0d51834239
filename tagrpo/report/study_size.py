"""The main study's size from the pilot (``python -m tagrpo.report.study --size``;
``preregistration/study-v3.md``, "The size rule" and its amendments 1 and 2).

From the pilot's committed draw records (3 base draws, GRPO and TA-GRPO with 2 seeds each):
the problem component of TA-GRPO minus GRPO at the primary endpoint (``V_prob``), each
method's seed-level variance (``s2_ta``, ``s2_grpo``) and the method-by-draw variance
(``s2_md``); from the records' own seconds, what one main draw costs. Then every design (D
draws, S seeds per draw) with its projected 95% half-width and hours, and the design the rule
chooses. Its output is the table committed as ``reports/study/size.md`` and the ``size``
section that study-v3.yaml gains in the commit after it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.metrics.compare import SeedRuns
from tagrpo.metrics.draws import (
    draw_difference_parts,
    draw_seed_components,
    projected_draw_half_width,
)
from tagrpo.plumbing.markdown import markdown_table


@dataclass(frozen=True)
class SizeInputs:
    """The pilot's variance components at the primary endpoint (fractions squared)."""

    problem: float  # V_prob: the problem component of the estimate (its variance part)
    problem_df: float
    s2_ta: float
    s2_grpo: float
    s2_md: float
    between: float  # the per-draw contrast's variance over the pilot's draws, as measured
    draws: int
    seeds: int


def size_inputs(
    ta: Sequence[SeedRuns], grpo: Sequence[SeedRuns], members: Sequence[str], k: int
) -> SizeInputs:
    """:class:`SizeInputs` from the pilot's draws (same seeds in every draw, >= 2 draws):
    ``s2_md`` = the per-draw contrast's variance over draws less (s2_ta + s2_grpo) / seeds,
    truncated at 0 (rule 1)."""
    ta_parts, grpo_parts = (draw_seed_components(runs, members, k) for runs in (ta, grpo))
    if ta_parts.seeds != grpo_parts.seeds:
        raise ValueError(f"TA-GRPO has {ta_parts.seeds} seeds a draw, GRPO {grpo_parts.seeds}")
    _, parts = draw_difference_parts(ta, grpo, members)
    index = ta[0].ks.index(int(k))
    between = float(parts.score_variance[0][index])
    seeds = ta_parts.seeds
    return SizeInputs(
        problem=float(parts.problem[index]),
        problem_df=max(parts.problems - parts.strata, 1.0),
        s2_ta=ta_parts.seed,
        s2_grpo=grpo_parts.seed,
        s2_md=max(between - (ta_parts.seed + grpo_parts.seed) / seeds, 0.0),
        between=between,
        draws=ta_parts.draws,
        seeds=seeds,
    )


def projected_half_width(inputs: SizeInputs, draws: int, seeds: int) -> float:
    """Rule 2: MS = s2_md + s2_ta / S + s2_grpo / max(S, 3), the problem term and the draw term
    (MS / D, D - 1 df) in quadrature, each with its own t quantile."""
    mean_square = inputs.s2_md + inputs.s2_ta / seeds + inputs.s2_grpo / max(seeds, 3)
    return projected_draw_half_width(inputs.problem, inputs.problem_df, mean_square, draws)


# --------------------------------------------------------------------------- the cost (rule 3)

# The family's methods other than GRPO, with S seeds a main draw (study-v3.yaml main.runs).
S_METHODS = ("ta_grpo", "ta_grpo_unanchored", "ta_grpo_star", "grpo_ds", "grpo_x4", "grpo_x4_ds")
FIXED_STAGES = ("preflight", "data", "base_model", "rephrase", "check_equivalence", "report")


def _seconds(path: Path) -> float:
    value = json.loads(path.read_text())["seconds"]
    return float(value["total_s"] if isinstance(value, dict) else value)


def _mean(values: Sequence[float], what: str) -> float:
    if not values:
        raise ValueError(f"no pilot record has {what}")
    return float(sum(values) / len(values))


def run_seconds(records: Sequence[Path], default_root: Path, cost: Mapping[str, Any]) -> dict:
    """Seconds of each piece of a main draw (rule 3): the pilot records' means for what the
    pilot ran; the methods it did not, from the committed default's training seconds scaled by
    the pilot's GRPO over the default's; the DS methods and the 2.5x data run by their factors."""
    train: dict[str, list[float]] = {}
    trained_evals: list[float] = []
    fixed: dict[str, list[float]] = {}
    base_eval, diagnostics, overheads = [], [], []
    always_run = always_changed_stages(default_root)
    for record in records:
        draw = json.loads((record / "DRAW.json").read_text())
        for path in sorted((record / "metrics/train").glob("*.json")):
            method = path.stem.rpartition("-s")[0]
            train.setdefault(method, []).append(_seconds(path))
        for path in sorted((record / "metrics/eval").glob("*.json")):
            seconds = _seconds(path)
            (base_eval if path.stem == "base" else trained_evals).append(seconds)
        for stage in FIXED_STAGES:
            path = record / "metrics" / f"{stage}.json"
            if path.exists() and "seconds" in json.loads(path.read_text()):
                fixed.setdefault(stage, []).append(_seconds(path))
        policies = len(yaml_params(record)["diagnostics"]["policies"]) + 1  # and the base
        diagnostics.append(_seconds(record / "metrics/diagnostics.json") / policies)
        overhead = last_start_overhead(record, draw, always_run)
        if overhead is not None:
            overheads.append(overhead)
    grpo = _mean(train.get("grpo", []), "GRPO runs")
    default_grpo = _mean(
        [_seconds(p) for p in sorted((default_root / "metrics/train").glob("grpo-s*.json"))],
        "the default's GRPO seconds",
    )
    scale = grpo / default_grpo
    default_x4 = _seconds(default_root / "metrics/train/grpo_x4-s0.json")
    per_run = {
        "grpo": grpo,
        "ta_grpo": _mean(train.get("ta_grpo", []), "TA-GRPO runs"),
        "ta_grpo_unanchored": _mean(train.get("ta_grpo_unanchored", []), "unanchored runs"),
        "grpo_x4": default_x4 * scale,
        "grpo_flipped": grpo,
    }
    per_run["ta_grpo_star"] = per_run["ta_grpo"]
    per_run["grpo_ds"] = float(cost["ds_factor"]) * grpo
    per_run["grpo_x4_ds"] = float(cost["ds_factor"]) * per_run["grpo_x4"]
    per_run["grpo_data2.5x"] = float(cost["data_multiple_factor"]) * grpo
    return {
        "train": per_run,
        "evaluate_trained": _mean(trained_evals, "trained evaluations"),
        "evaluate_base": _mean(base_eval, "the base's evaluation"),
        "diagnostics_per_policy": _mean(diagnostics, "diagnostics"),
        "fixed": {stage: _mean(values, stage) for stage, values in fixed.items()},
        "overhead_per_stage": _mean(overheads, "a last start that ran a stage"),
        "grpo_scale_from_default": scale,
    }


def always_changed_stages(root: Path) -> list[str]:
    """The stages of ``root``'s dvc.yaml that run on every ``dvc repro`` (``always_changed``)."""
    import yaml

    stages = (yaml.safe_load((root / "dvc.yaml").read_text()) or {}).get("stages", {})
    return sorted(name for name, stage in stages.items() if stage.get("always_changed"))


def last_start_overhead(
    record: Path, draw: Mapping[str, Any], always_run: Sequence[str] = ()
) -> float | None:
    """Seconds per stage that the draw's last start (the one that finished it) spent outside
    its stages' own work (process start-up, DVC's bookkeeping): its wall time less the
    ``seconds`` of the metrics of the stages it ran (those its dvc.lock records and the start
    did not find recorded, and those DVC runs on every start), over their number; None if it
    ran none (a record collected again). Every stage of that start ran to its end, so the two
    sides count the same work."""
    import yaml

    if "stages_recorded_at_start" not in draw:
        raise ValueError(
            f"{record / 'DRAW.json'}: no stages_recorded_at_start (a record of an older study "
            "command): the per-stage overhead cannot be measured from it"
        )
    before = set(draw["stages_recorded_at_start"])
    lock = yaml.safe_load((record / "dvc.lock").read_text())["stages"]
    # A stage DVC reruns on every start (``always_run``: the preflight) ran in this one too.
    ran = [stage for name, stage in lock.items() if name not in before or name in always_run]
    if not ran:
        return None
    own = 0.0
    for stage in ran:
        for out in stage.get("outs", []):
            path = record / str(out["path"])
            metrics = path.suffix == ".json" and str(out["path"]).startswith("metrics/")
            if metrics and path.is_file() and "seconds" in json.loads(path.read_text()):
                own += _seconds(path)
    wall = float(draw["seconds_this_start"])
    if wall + 1.0 < own:
        raise ValueError(
            f"{record / 'DRAW.json'}: its last start's stages report {own:.0f} s of their own "
            f"work in a start of {wall:.0f} s"
        )
    return max(wall - own, 0.0) / len(ran)


def yaml_params(record: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((record / "params.yaml").read_text())


def main_draw_seconds(pieces: Mapping[str, Any], seeds: int) -> float:
    """One main draw with S seeds per draw (study-v3.yaml main.runs), from :func:`run_seconds`."""
    counts = {m: seeds for m in S_METHODS}
    counts |= {"grpo": max(seeds, 3), "grpo_flipped": 2, "grpo_data2.5x": max(seeds, 2)}
    trainings = sum(counts.values())
    seconds = sum(pieces["train"][m] * n for m, n in counts.items())
    seconds += trainings * pieces["evaluate_trained"] + pieces["evaluate_base"]
    seconds += (seeds + 2) * pieces["diagnostics_per_policy"]  # S TA-GRPO seeds, GRPO, the base
    seconds += sum(pieces["fixed"].values())
    stages = len(FIXED_STAGES) + 1 + 1 + 2 * trainings  # + evaluate base + diagnostics
    return seconds + stages * pieces["overhead_per_stage"]


def design_table(
    inputs: SizeInputs,
    pieces: Mapping[str, Any],
    rule: Mapping[str, Any],
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Every design of rule 4 with its projected half-width and hours (amendment 1:
    ceil(D / 2) x one main draw's seconds), and the chosen one."""
    low_d, high_d = rule["designs"]["draws"]
    low_s, high_s = rule["designs"]["seeds_per_draw"]
    rows = []
    for draws in range(int(low_d), int(high_d) + 1):
        for seeds in range(int(low_s), int(high_s) + 1):
            hours = math.ceil(draws / 2) * main_draw_seconds(pieces, seeds) / 3600.0
            rows.append(
                {
                    "draws": draws,
                    "seeds_per_draw": seeds,
                    "half_width": projected_half_width(inputs, draws, seeds),
                    "hours": hours,
                }
            )
    frame = pd.DataFrame(rows)
    feasible = frame[frame["hours"] <= float(rule["cost_ceiling_hours"])]
    chosen, why = None, ""
    for bound, label in (
        (float(rule["choose_half_width_at_most"]), "the cheapest feasible design within"),
        (float(rule["then_half_width_at_most"]), "no feasible design within the first bound; the "
         "cheapest within V5's"),
    ):  # fmt: skip
        reaching = feasible[feasible["half_width"] <= bound].sort_values(
            ["hours", "draws"], kind="stable"
        )
        if not reaching.empty:
            chosen, why = reaching.iloc[0], f"{label} {100 * bound:.0f} points"
            break
    if chosen is None and not feasible.empty:
        chosen = feasible.sort_values(["half_width", "hours"], kind="stable").iloc[0]
        why = "no feasible design reaches V5: the feasible design with the smallest half-width"
    if chosen is None:
        raise ValueError("no design fits the cost ceiling: the rule chooses none")
    return frame, {
        "draws": int(chosen["draws"]),
        "seeds_per_draw": int(chosen["seeds_per_draw"]),
        "projected_half_width": round(float(chosen["half_width"]), 4),
        "projected_hours": round(float(chosen["hours"]), 2),
        "why": why,
    }


def size_markdown(
    records: Sequence[Path], registration: Mapping[str, Any], default_root: Path, command: str
) -> tuple[str, dict[str, Any]]:
    """The size table from the pilot's records, and the ``size`` section it chooses."""
    from tagrpo.plumbing.layout import policy_name
    from tagrpo.report.claims import load_policy_runs
    from tagrpo.report.draw_checkouts import checkout_config

    endpoint = registration["primary_endpoint"]
    group, k = str(endpoint["group"]), int(endpoint["k"])
    members = list(registration["groups"][group])
    configs = [checkout_config(record)[0] for record in records]
    ks = configs[0].evaluate.ks
    seeds = registration["pilot"]["runs"]

    def runs(method: str) -> list[SeedRuns]:
        names = [policy_name(method, s) for s in seeds[method]]
        return [load_policy_runs(record, names, ks) for record in records]

    inputs = size_inputs(runs("ta_grpo"), runs("grpo"), members, k)
    pieces = run_seconds(records, default_root, registration["size_rule"]["cost"])
    frame, chosen = design_table(inputs, pieces, registration["size_rule"])
    grid = frame.pivot(index="draws", columns="seeds_per_draw", values="half_width")
    hours = frame.pivot(index="draws", columns="seeds_per_draw", values="hours")
    cells = [
        [
            f"D = {d}",
            *(f"{100 * grid.loc[d, s]:.2f} ({hours.loc[d, s]:.1f} h)" for s in grid.columns),
        ]
        for d in grid.index
    ]
    points = {name: 1e4 * getattr(inputs, name) for name in ("problem", "s2_ta", "s2_grpo",
                                                           "s2_md", "between")}  # fmt: skip
    chosen_seeds = ", ".join(
        str(s) for s in registration["main"]["base_draws_in_order"][: chosen["draws"]]
    )
    text = "\n".join(
        [
            "# The study's size, from the pilot",
            "",
            f"Made by `{command}` from the pilot's records "
            + ", ".join(f"`{r}`" for r in records)
            + " under `preregistration/study-v3.yaml` (the size rule and its amendments 1 and 2).",
            "",
            f"Primary endpoint: TA-GRPO - GRPO at pass@{k} on `{group}` "
            f"({int(inputs.problem_df + len(members))} problems), {inputs.draws} pilot draws, "
            f"{inputs.seeds} seeds per method and draw.",
            "",
            "Measured (points^2): the problem component of the estimate "
            f"{points['problem']:.3f} ({inputs.problem_df:g} df); seed-level variance of one "
            f"seed's score: TA-GRPO {points['s2_ta']:.3f}, GRPO {points['s2_grpo']:.3f} "
            f"(pooled within draws, {inputs.draws * (inputs.seeds - 1)} df each); the per-draw "
            f"contrast's variance over the draws {points['between']:.3f}, so the method-by-draw "
            f"variance {points['s2_md']:.3f} (less (TA + GRPO) / {inputs.seeds}, truncated at 0).",
            "",
            "One main draw's seconds (rule 3; the pilot's seconds as measured, 2 draws side by "
            "side): per training "
            + ", ".join(f"{m} {s:.0f}" for m, s in pieces["train"].items())
            + f"; per trained evaluation {pieces['evaluate_trained']:.0f}, the base's "
            f"{pieces['evaluate_base']:.0f}; diagnostics per policy "
            f"{pieces['diagnostics_per_policy']:.0f}; fixed stages "
            + ", ".join(f"{s} {v:.0f}" for s, v in pieces["fixed"].items())
            + f"; per-stage overhead {pieces['overhead_per_stage']:.1f} (GRPO here / the "
            f"default's: {pieces['grpo_scale_from_default']:.2f}x).",
            "",
            "Projected 95% half-width in points (hours of this machine, ceil(D / 2) x one draw):",
            "",
            markdown_table(["", *(f"S = {s}" for s in grid.columns)], cells),
            "",
            f"**Chosen: D = {chosen['draws']} draws (SFT seeds {chosen_seeds}), S = "
            f"{chosen['seeds_per_draw']} seeds per draw**: {chosen['why']}; projected "
            f"+/-{100 * chosen['projected_half_width']:.2f} points in "
            f"{chosen['projected_hours']:.1f} hours.",
        ]
    )
    return text, chosen


def registration_with_size(text: str, size: Mapping[str, Any]) -> str:
    """study-v3.yaml's text with its one ``size: null`` line replaced by ``size`` (the rest
    byte for byte as committed); refused when the size is already set or the line is not there
    once."""
    import re

    import yaml

    if yaml.safe_load(text).get("size") is not None:
        raise ValueError("the registration already has its size: the main study's size is set once")
    lines = re.findall(r"^size: null\b.*$", text, flags=re.MULTILINE)
    if len(lines) != 1:
        raise ValueError(f"the registration has {len(lines)} 'size: null' lines, not one")
    block = yaml.safe_dump({"size": dict(size)}, sort_keys=False).rstrip("\n")
    updated = text.replace(lines[0], block, 1)
    if yaml.safe_load(updated)["size"] != dict(size):
        raise ValueError("the size written does not read back as chosen")
    return updated
