"""Quoted blocks of the documentation: every number README.md and docs/ state about the committed
run, the defaults or the profiles is rendered from its source, never typed.

A block in Markdown::

    <!-- quote: SOURCE ARG ... -->
    (rendered text, rewritten by --write)
    <!-- end quote -->

``SOURCE`` is a key of :data:`SOURCES`; its function gets the repository root and the words
after it and returns the block's text. ``python -m tagrpo.pipeline.doc_quotes`` lists the
stale blocks with a diff (exit 1); ``--write`` re-renders them in place.
``tests/test_doc_quotes.py`` fails on a stale block, an unknown source or an unclosed marker.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tagrpo.config.data import SyntheticBenchmark
from tagrpo.config.params import Params, load_config, validate_params
from tagrpo.config.profiles import merged_with_profile
from tagrpo.pipeline.code_quotes import CODE_SOURCES
from tagrpo.pipeline.cost_quotes import COST_SOURCES
from tagrpo.plumbing.dvc_stages import expand_stages, pipeline_outputs, safe_load
from tagrpo.plumbing.paths import project_root

# A marker is a line of its own (one in the middle of a line, e.g. in backticks, is prose).
BLOCK = re.compile(
    r"^<!-- quote: (?P<spec>[^\n]*?) -->\n(?P<body>.*?)^<!-- end quote -->",
    re.DOTALL | re.MULTILINE,
)
OPENING = re.compile(r"^<!-- quote:", re.MULTILINE)

Renderer = Callable[[Path, list[str]], str]


class QuoteError(ValueError):
    """A block names an unknown source, bad arguments or a source file that is missing."""


def documents(root: Path) -> list[Path]:
    """The Markdown files whose blocks are kept: README.md, docs/, the package READMEs."""
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    files += sorted((root / "tagrpo").rglob("README.md"))
    return [f for f in files if f.is_file()]


# --- the sources -----------------------------------------------------------------------------


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _expect(args: list[str], count: int, usage: str) -> None:
    if len(args) != count:
        raise QuoteError(f"{usage} (got {args})")


def _read(root: Path, relative: str) -> str:
    path = root / relative
    if not path.is_file():
        raise QuoteError(f"{relative}: no such file (the block's source)")
    return path.read_text(encoding="utf-8")


def validity_table(root: Path, args: list[str]) -> str:
    """The first table under a report's "## Testbed validity" (default reports/report.md)."""
    relative = args[0] if args else "reports/report.md"
    section = _read(root, relative).split("## Testbed validity", 1)
    if len(section) != 2:
        raise QuoteError(f"{relative} has no '## Testbed validity' section")
    lines = [line for line in section[1].split("\n## ", 1)[0].splitlines() if line]
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[first:end])


def validity_row(root: Path, criterion: str) -> list[str]:
    """A validity row's cells (criterion, requirement, measured, verdict)."""
    for line in validity_table(root, []).splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == criterion:
            return cells
    raise QuoteError(f"reports/report.md: no validity row {criterion!r}")


def controls(root: Path, args: list[str]) -> str:
    """The committed run's two controls in one sentence, value and verdict from the table."""
    positive, negative = validity_row(root, "V1 (policy)"), validity_row(root, "V4")
    interval = r"[+-]\d+\.\d+ \[[+-]\d+\.\d+, [+-]\d+\.\d+\]"
    v1 = re.search(interval, positive[2])
    v4 = re.search(interval, negative[2])
    if not (v1 and v4):
        raise QuoteError(f"reports/report.md: V1 or V4 without an interval: {positive}, {negative}")
    positive_verdict = {"PASS": "passes", "FAIL": "fails"}[positive[3]]
    negative_verdict = {"PASS": "is detected", "FAIL": "is not detected"}[negative[3]]
    return (
        f"The positive control {positive_verdict} (V1: GRPO minus the base, pass@1 in"
        f" distribution, {v1.group(0)} points) and the negative control {negative_verdict}"
        f" (V4: GRPO minus the flipped-advantage control, {v4.group(0)} points)."
    )


def claim(root: Path, args: list[str]) -> str:
    """One row of reports/claims.md as a sentence (``claim "first words of the claim"``)."""
    _expect(args, 1, "claim: the claim's first words")
    for line in _read(root, "reports/claims.md").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0].startswith(args[0]):
            claim_text, measure, estimate, _, _, holm, verdict = cells[:7]
            return f"{claim_text} ({measure}): {estimate} points, Holm p {holm}: **{verdict}**."
    raise QuoteError(f"reports/claims.md: no claim starts with {args[0]!r}")


def whole_file(root: Path, args: list[str]) -> str:
    """A generated file verbatim (``file reports/claims.md``)."""
    _expect(args, 1, "file: one path")
    return _read(root, args[0]).strip()


def paragraph(root: Path, args: list[str]) -> str:
    """The paragraph of a generated file that starts with the given words
    (``paragraph reports/world-v3/draws.md "**The primary endpoint's band**"``)."""
    _expect(args, 2, "paragraph: a path and the paragraph's first words")
    for block in _read(root, args[0]).split("\n\n"):
        if block.strip().startswith(args[1]):
            return block.strip()
    raise QuoteError(f"{args[0]}: no paragraph starts with {args[1]!r}")


def _config(root: Path, profile: str | None) -> Params:
    if profile is None:
        return load_config(root / "params.yaml")
    path = root / "profiles" / f"{profile}.yaml"
    if not path.is_file():
        raise QuoteError(f"no profile {profile!r} ({path.relative_to(root)})")
    return validate_params(merged_with_profile(path, root / "params.yaml"), str(path))


def _value(config: Params, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif hasattr(value, part):
            value = getattr(value, part)
        else:
            raise QuoteError(f"{key}: not a params key")
    return value


def _shown(value: Any) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, (dict, list)):
        return "`" + json.dumps(value, separators=(", ", ": ")) + "`"
    return f"`{value}`"


def params_table(root: Path, args: list[str]) -> str:
    """Keys and their values: ``params KEY ...`` (params.yaml) or ``params --profile NAME KEY
    ...`` (params.yaml with profiles/NAME.yaml merged, as ``tagrpo params apply`` writes it)."""
    profile = None
    if args[:1] == ["--profile"]:
        profile, args = args[1], args[2:]
    if not args:
        raise QuoteError("params: at least one key")
    config = _config(root, profile)
    where = f"profiles/{profile}.yaml over params.yaml" if profile else "params.yaml"
    return _table(
        ["key", f"value ({where})"], [[f"`{k}`", _shown(_value(config, k))] for k in args]
    )


def profile_keys(root: Path, args: list[str]) -> str:
    """Keys under several profiles, a column each (``profile-keys NAME ... -- KEY ...``, each
    profile merged over params.yaml as ``tagrpo params apply`` writes it; ``embedded`` is
    params.yaml as committed): what one profile sets beside another."""
    if "--" not in args:
        raise QuoteError(f"profile-keys: profiles, then -- and the keys (got {args})")
    names, keys = args[: args.index("--")], args[args.index("--") + 1 :]
    if not names or not keys:
        raise QuoteError(f"profile-keys: at least one profile and one key (got {args})")
    configs = [_config(root, None if name == "embedded" else name) for name in names]
    return _table(
        ["key", *[f"`{name}`" for name in names]],
        [[f"`{key}`", *[_shown(_value(config, key)) for config in configs]] for key in keys],
    )


REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(?P<version>\S+)")


def _pinned(root: Path, relative: str) -> dict[str, str]:
    pins = {}
    for line in _read(root, relative).splitlines():
        match = REQUIREMENT.match(line.strip())
        if match:
            pins[match.group("name").lower().replace("_", "-")] = match.group("version")
    return pins


def pinned_versions(root: Path, args: list[str]) -> str:
    """The versions requirements files pin, a column each (``pins FILE ... -- PACKAGE ...``):
    a package a file does not pin with ``==`` reads "not pinned"."""
    if "--" not in args:
        raise QuoteError(f"pins: requirements files, then -- and the packages (got {args})")
    files, packages = args[: args.index("--")], args[args.index("--") + 1 :]
    if not files or not packages:
        raise QuoteError(f"pins: at least one file and one package (got {args})")
    pins = [_pinned(root, relative) for relative in files]
    unknown = [name for name in packages if not any(name in pinned for pinned in pins)]
    if unknown:
        raise QuoteError(f"pins: {', '.join(unknown)} pinned in none of {', '.join(files)}")
    rows = [
        [f"`{name}`", *[f"`{pinned[name]}`" if name in pinned else "not pinned" for pinned in pins]]
        for name in packages
    ]
    return _table(["package", *[f"`{relative}`" for relative in files]], rows)


def runs_table(root: Path, args: list[str]) -> str:
    """Which methods train with which seeds (``runs`` of params.yaml, or ``runs NAME``: with
    profiles/NAME.yaml merged)."""
    runs = _config(root, args[0] if args else None).runs
    groups = [
        ("runs.methods", runs.methods, runs.seeds),
        ("runs.control_methods", runs.control_methods, runs.control_seeds),
        ("runs.one_seed_methods", runs.one_seed_methods, runs.one_seed),
    ]
    rows = [
        [f"`{method}`", ", ".join(map(str, seeds)), f"`{key}`"]
        for key, methods, seeds in groups
        for method in methods
    ]
    scaling = runs.data_scaling
    for method in scaling.methods if scaling.multiples else []:
        multiples = ", ".join(f"{m:g}x" for m in scaling.multiples)
        seeds = ", ".join(map(str, scaling.seeds))
        rows.append([f"`{method}` on {multiples} the questions", seeds, "`runs.data_scaling`"])
    return _table(["method", "seeds", "from"], rows)


def _stage_seconds(metrics: dict[str, Any]) -> float | None:
    seconds = metrics.get("seconds")
    if isinstance(seconds, dict):  # check_equivalence: its parts and their total
        seconds = seconds.get("total_s")
    return float(seconds) if isinstance(seconds, (int, float)) else None


def _stage_rows(root: Path) -> list[tuple[str, float]]:
    rows = []
    for path in sorted((root / "metrics").rglob("*.json")):
        seconds = _stage_seconds(json.loads(path.read_text(encoding="utf-8")))
        if seconds is not None:
            rows.append((str(path.relative_to(root)), seconds))
    if not rows:
        raise QuoteError("metrics/: no stage metrics with seconds (the committed run's)")
    return rows


def stage_seconds(root: Path, args: list[str]) -> str:
    """The committed run's seconds per stage kind (``metrics/<kind>.json`` or
    ``metrics/<kind>/*.json``), from the metrics each stage wrote: its own work, not the stage
    process's start-up or DVC's bookkeeping."""
    kinds: dict[str, list[float]] = {}
    for relative, seconds in _stage_rows(root):
        parts = Path(relative).parts
        kind = parts[1] if len(parts) > 2 else Path(parts[1]).stem
        kinds.setdefault(kind, []).append(seconds)
    rows = [
        [
            kind,
            str(len(times)),
            f"{sum(times):,.0f}",
            f"{min(times):,.0f}-{max(times):,.0f}" if len(times) > 1 else "",
        ]
        for kind, times in kinds.items()
    ]
    total = sum(sum(times) for times in kinds.values())
    rows.append(["**all**", str(sum(len(t) for t in kinds.values())), f"**{total:,.0f}**", ""])
    return _table(["stage (its metrics)", "files", "seconds", "each"], rows)


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"
    return str(value)


def metric_values(root: Path, args: list[str]) -> str:
    """Values of the committed run's metrics (``metrics "metrics/train/*.json" KEY ...``): one
    row per file, one column per key."""
    if len(args) < 2:
        raise QuoteError("metrics: a glob under the repository and at least one key")
    pattern, keys = args[0], args[1:]
    files = sorted(root.glob(pattern))
    if not files:
        raise QuoteError(f"{pattern}: no such files (the block's source)")
    rows = []
    for path in files:
        values = json.loads(path.read_text(encoding="utf-8"))
        missing = [key for key in keys if key not in values]
        if missing:
            raise QuoteError(f"{path.relative_to(root)}: no {', '.join(missing)}")
        cells = [_number(values[key]) for key in keys]
        rows.append([f"`{path.relative_to(root)}`", *cells])
    return _table(["metrics file", *[f"`{key}`" for key in keys]], rows)


def committed_run(root: Path, args: list[str]) -> str:
    """How many stages the committed run has (dvc.lock), what its stages' own seconds add up
    to (their metrics), what its outputs weigh (dvc.lock's sizes) and its device."""
    lock = yaml.safe_load(_read(root, "dvc.lock"))["stages"]
    size = sum(out.get("size", 0) for stage in lock.values() for out in stage.get("outs", []))
    seconds = sum(seconds for _, seconds in _stage_rows(root))
    device = json.loads(_read(root, "metrics/base_model.json")).get("device", "not recorded")
    return (
        f"{len(lock)} stages (`dvc.lock`); the stages' own seconds add up to {seconds:,.0f}"
        f" (their metrics files; process start-up and DVC's bookkeeping come on top);"
        f" outputs {size / 1e6:,.0f} MB (`dvc.lock`'s sizes); device `{device}`."
    )


def profile_stages(root: Path, args: list[str]) -> str:
    """How many DVC stages, trainings and evaluations each profile's DAG has: dvc.yaml expanded
    with params.yaml and the profile merged, as ``tagrpo plan --profile NAME`` lists them
    (``profile-stages NAME ...``; ``embedded`` is params.yaml as committed)."""
    if not args:
        raise QuoteError("profile-stages: at least one profile")
    dvc_yaml = safe_load(_read(root, "dvc.yaml"))
    rows = []
    for name in args:
        if name == "embedded":
            params = safe_load(_read(root, "params.yaml"))
        else:
            path = root / "profiles" / f"{name}.yaml"
            if not path.is_file():
                raise QuoteError(f"no profile {name!r} ({path.relative_to(root)})")
            params = merged_with_profile(path, root / "params.yaml")
        stages = expand_stages(dvc_yaml, params).values()
        trainings = sum(stage.stage.startswith("train") for stage in stages)
        evaluations = sum(stage.stage.startswith("evaluate") for stage in stages)
        rows.append([f"`{name}`", str(len(stages)), str(trainings), str(evaluations)])
    return _table(["profile", "DVC stages", "trainings", "evaluations"], rows)


def committed_outputs(root: Path, args: list[str]) -> str:
    """How many files of the committed run's outputs (dvc.yaml's outs) git holds, per folder:
    a folder's other tracked files (reports/'s archives of earlier worlds, the study's records)
    are not the run's."""
    outputs = [out.rstrip("/") for out in pipeline_outputs(root)]
    rows = []
    for folder in args or ["metrics", "plots", "evals", "reports"]:
        listed = subprocess.run(
            ["git", "ls-files", folder], cwd=root, capture_output=True, text=True, check=True
        ).stdout.split()
        own = [f for f in listed if any(f == o or f.startswith(o + "/") for o in outputs)]
        rows.append([f"`{folder}/`", str(len(own))])
    return _table(["folder", "files in git"], rows)


def mini_world(root: Path, args: list[str]) -> str:
    """The mini world as params.yaml draws it and the base model as the committed run built it."""
    config = load_config(root / "params.yaml")
    world, synthetic = config.common.miniworld, config.data.synthetic
    warmstart = config.base_model.warmstart
    built = json.loads(_read(root, "metrics/base_model.json"))
    groups = {name: group for group, names in config.evaluate.groups.items() for name in names}
    rows = [
        ["world seed (`data.synthetic.seed`)", f"{synthetic.seed}"],
        [
            "a problem (`common.miniworld`)",
            f"start {world.start_min}-{world.start_max}, changes +/-1-{world.max_change},"
            f" running totals within 0-{world.max_total}; a change >= {world.big_from} is big",
        ],
        ["training questions (`data.synthetic.train_size`)", f"{synthetic.train_size}"],
        ["training chain lengths (`common.miniworld.train_lengths`)", _shown(world.train_lengths)],
    ]
    for name, bench in synthetic.benchmarks.items():
        lengths = ", ".join(str(n) for n in bench.lengths)
        kind = f"multiple choice, {bench.options} options" if bench.multiple_choice else "free-form"
        rows.append(
            [
                f"benchmark `{name}` (group `{groups.get(name, '-')}`)",
                f"{bench.size} problems, chains of {lengths}, families {', '.join(bench.families)};"
                f" {kind}",
            ]
        )
    corpus = warmstart.corpus
    rows += [
        [
            "primary endpoint (`report.primary_group`, `report.primary_k`)",
            f"`{config.report.primary_group}`, pass@{config.report.primary_k}",
        ],
        ["base model parameters (`metrics/base_model.json`)", f"{built['parameters']:,.0f}"],
        ["base model shape (`base_model.warmstart.model`)", _shown(warmstart.model)],
        ["warm-start examples (`base_model.warmstart.corpus.examples`)", f"{corpus.examples:,}"],
        [
            "warm-start chain lengths (`base_model.warmstart.corpus.lengths`)",
            _shown(corpus.lengths),
        ],
        [
            "misread rate, multiple-choice share (`base_model.warmstart.corpus`)",
            f"`misread_rate` {corpus.misread_rate}, `choice_fraction` {corpus.choice_fraction}",
        ],
    ]
    return _table(["what", "value"], rows)


def world_summary(root: Path, args: list[str]) -> str:
    """The mini world and its base model in a few sentences (params.yaml, the committed run's
    metrics/base_model.json)."""
    config = load_config(root / "params.yaml")
    world, synthetic = config.common.miniworld, config.data.synthetic
    corpus, model = config.base_model.warmstart.corpus, config.base_model.warmstart.model
    built = json.loads(_read(root, "metrics/base_model.json"))
    groups = {name: group for group, names in config.evaluate.groups.items() for name in names}
    usual_families = SyntheticBenchmark.model_fields["families"].get_default(
        call_default_factory=True
    )
    benchmarks = "; ".join(
        f"`{name}`, {bench.size} problems, chains of {', '.join(map(str, bench.lengths))}"
        f" (group `{groups.get(name, '-')}`"
        + (f", family {', '.join(bench.families)}" if bench.families != usual_families else "")
        + ")"
        for name, bench in synthetic.benchmarks.items()
    )
    return (
        f"A problem is a start value ({world.start_min}-{world.start_max}) and a chain of"
        f" signed changes (+/-1-{world.max_change}), posed in the phrasing families"
        f" {', '.join(corpus.family_weights)}; the answer is the total, in `\\boxed{{}}`."
        f" Training: {synthetic.train_size} questions, chains of"
        f" {', '.join(map(str, world.train_lengths))}. Benchmarks: {benchmarks}."
        f" The primary endpoint: `{config.report.primary_group}` at pass@{config.report.primary_k}."
        f" The base policy is a Llama of {built['parameters']:,.0f} parameters"
        f" ({model.num_layers} layers), warm-started on"
        f" {corpus.examples:,} worked examples that hold none of these problems."
    )


def scores(root: Path, args: list[str]) -> str:
    """pass@k of each method on a group (``scores GROUP K``), from reports/tables/scores.csv."""
    _expect(args, 2, "scores: a group and k")
    group, k = args
    rows = [
        [
            f"`{row['method']}`",
            row["seeds"],
            f"{100 * float(row['pass_at_k']):.1f} [{100 * float(row['ci_low']):.1f}, "
            f"{100 * float(row['ci_high']):.1f}]",
        ]
        for row in csv.DictReader(_read(root, "reports/tables/scores.csv").splitlines())
        if row["group"] == group and row["k"] == k
    ]
    if not rows:
        raise QuoteError(f"reports/tables/scores.csv: no rows for group {group}, k {k}")
    return _table(["method", "seeds", f"pass@{k} on {group} (%, 95% CI)"], rows)


def _float(cell: str) -> float | None:
    return float(cell) if cell not in ("", "nan") else None


def study(root: Path, args: list[str]) -> str:
    """The study's verdicts (``study FOLDER``: a report folder of ``python -m
    tagrpo.report.study``): a sentence of the draws' validity and V5 over the draws
    (``tables/validity_by_draw.csv``), then the controls' and every family row's estimate,
    Holm p and verdict (``tables/claims.csv``)."""
    _expect(args, 1, "study: the report folder")
    validity = list(
        csv.DictReader(_read(root, f"{args[0]}/tables/validity_by_draw.csv").splitlines())
    )
    over = [row for row in validity if row["draw"] == "over draws"]
    if len(over) != 1:
        raise QuoteError(f"{args[0]}/tables/validity_by_draw.csv: no single 'over draws' row")
    draws: dict[str, bool] = {}
    for row in validity:
        if row["draw"] != "over draws":
            draws[row["draw"]] = draws.get(row["draw"], True) and row["verdict"] == "PASS"
    judged = "V1-V5" if any(row["criterion"] == "V5" for row in validity) else "V1-V4"
    passed = [draw for draw, ok in draws.items() if ok]
    sentence = (
        f"{judged} and every band pass on {len(passed)} of {len(draws)} draws"
        + (f" ({', '.join(passed)})" if passed else "")
        + f"; V5 over the draws: {over[0]['measured']}, **{over[0]['verdict']}**."
    )
    rows = []
    for row in csv.DictReader(_read(root, f"{args[0]}/tables/claims.csv").splitlines()):
        if row["in_family"] != "True" and "control" not in row["kind"]:
            continue  # the rows beside a family row stay in the report
        value, low, high = (_float(row[key]) for key in ("estimate", "ci_low", "ci_high"))
        scale, unit = (100.0, " points") if row["unit"] == "points" else (1.0, "")
        shown = (
            f"{scale * value:+.2f} [{scale * low:+.2f}, {scale * high:+.2f}]{unit}"
            + (" (90%, TOST)" if row["interval"] != "95%" else "")
            if value is not None and low is not None and high is not None
            else "-"
        )
        holm = _float(row["holm_p"])
        rows.append(
            [row["claim"], shown, f"{holm:.3f}" if holm is not None else "-", row["verdict"]]
        )
    return sentence + "\n\n" + _table(["row", "estimate [interval]", "Holm p", "verdict"], rows)


SOURCES: dict[str, Renderer] = {
    "validity": validity_table,
    "controls": controls,
    "claim": claim,
    "file": whole_file,
    "paragraph": paragraph,
    "params": params_table,
    "profile-keys": profile_keys,
    "pins": pinned_versions,
    "runs": runs_table,
    "stage-seconds": stage_seconds,
    "committed-run": committed_run,
    "metrics": metric_values,
    "committed-outputs": committed_outputs,
    "profile-stages": profile_stages,
    "mini-world": mini_world,
    "world-summary": world_summary,
    "scores": scores,
    "study": study,
    **COST_SOURCES,  # plan-cost: docs/paper-scale.md's cost tables
    **CODE_SOURCES,  # constants: a benchmark's target, a test's tolerance, as the code has them
}


# --- the blocks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    spec: str
    body: str
    start: int
    end: int


def blocks(text: str, where: str = "") -> Iterator[Block]:
    """The quote blocks of ``text``; an opening marker without its end is refused."""
    found = list(BLOCK.finditer(text))
    if len(found) != len(OPENING.findall(text)):
        raise QuoteError(f"{where}: a '<!-- quote: ... -->' without its '<!-- end quote -->'")
    for match in found:
        yield Block(match.group("spec"), match.group("body"), match.start(), match.end())


def render(spec: str, root: Path) -> str:
    words = shlex.split(spec)
    if not words or words[0] not in SOURCES:
        raise QuoteError(f"quote: unknown source {spec!r} (known: {sorted(SOURCES)})")
    return SOURCES[words[0]](root, words[1:]).strip() + "\n"


def refreshed(text: str, root: Path, where: str = "") -> str:
    """``text`` with every block re-rendered from its source."""
    pieces, last = [], 0
    for block in blocks(text, where):
        pieces += [text[last : block.start], f"<!-- quote: {block.spec} -->\n"]
        pieces += [render(block.spec, root), "<!-- end quote -->"]
        last = block.end
    return "".join([*pieces, text[last:]])


def stale(root: Path) -> dict[Path, str]:
    """Each document whose blocks differ from their sources, with the unified diff."""
    diffs = {}
    for doc in documents(root):
        text = doc.read_text(encoding="utf-8")
        new = refreshed(text, root, str(doc.relative_to(root)))
        if new != text:
            name = str(doc.relative_to(root))
            diffs[doc] = "".join(
                difflib.unified_diff(
                    text.splitlines(True), new.splitlines(True), name, f"{name} (rendered)"
                )
            )
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="re-render stale blocks in place")
    args = parser.parse_args(argv)
    root = project_root()
    diffs = stale(root)
    for doc, diff in diffs.items():
        if args.write:
            doc.write_text(refreshed(doc.read_text(encoding="utf-8"), root), encoding="utf-8")
            print(f"rewrote {doc.relative_to(root)}")
        else:
            print(diff)
    if diffs and not args.write:
        print(f"{len(diffs)} document(s) with stale quotes: rerun with --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
