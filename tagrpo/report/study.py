"""The decisive study of world v3 over base draws (issue 42, ``preregistration/world-v3.md``):
every claim row paired by draw, the A/A null, V1-V5 on every draw and V5 over the draws,
written as the committed study report folder; with ``--power``, Part B's size calculation.

**How a study run is organised: one built checkout per base draw.** Each is a checkout of the
project at one commit with ``profiles/study.yaml`` applied and ``base_model.warmstart.seed`` set
to the draw, built by ``dvc repro`` (one DVC cache shared by all, so the stages that do not
depend on the base draw, the data stage among them, run once)::

    git worktree add ../study-d0 main && cd ../study-d0
    dvc cache dir --local /path/to/shared/cache
    tagrpo params apply profiles/study.yaml
    tagrpo params set base_model.warmstart.seed=0
    dvc repro                                   # then the same for each registered draw

    python -m tagrpo.report.study --run draw0=../study-d0 --run draw1=../study-d1 ... \\
        --out reports/profiles/study

Why not ``dvc exp run --queue -S base_model.warmstart.seed=D`` alone: a queued experiment
runs in a temporary copy and keeps its results as a git ref plus the DVC cache, and ``dvc exp
apply`` puts one experiment at a time into the workspace; this analysis reads every draw's
evaluations, training histories and diagnostics at once. Queued experiments do serve to run
the draws side by side (``dvc queue start -j N``); each then becomes a checkout with ``dvc exp
branch <exp> study-dD``, ``git worktree add ../study-dD study-dD`` and ``dvc checkout`` there
(the cache shared): the same built checkouts, each with its ``dvc.lock`` and params committed
on its branch.

The command refuses checkouts that are not one experiment: their params must be equal but for
``base_model.warmstart.seed`` and the keys that say where a run executes
(:data:`EXECUTION_KEYS`: devices, batch sizes, tracking, timeouts), and no two may be the
same draw. It then checks the runs against the pre-registration's study section (Part B's
draws and seeds per draw, the methods with those seeds on every draw, the data-scaling runs,
the primary endpoint, the TOST margin, the confirmatory world seed) and its provenance (the
pre-registration committed and unchanged in each checkout, each draw's ``dvc.lock``); a
mismatch is an error naming it, or with ``--exploratory`` a listed deviation under a report
headed "EXPLORATORY: not the pre-registered study".

Part B (``--power``), from the confirmatory draws' GRPO-only checkouts (base, GRPO with its
seeds, the negative control): the cheapest design (D >= 2 draws, S >= 2 seeds per draw) whose
projected 95% half-width of the primary endpoint is at most ``study.v5_max_half_width``, under
the registered assumptions (:func:`power_table`); D = 5, S = 5 when none reaches it.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tagrpo.metrics.compare import (
    SeedRuns,
    draw_difference_parts,
    draw_paired_difference,
    draw_score_with_interval,
    draw_seed_components,
    estimate_half_width,
    projected_draw_half_width,
)
from tagrpo.report.claims import Claim, claims_table, underpowered
from tagrpo.report.family import (
    FAMILY_SIZE,
    DrawInputs,
    FamilySettings,
    build_v3_claims,
    family_settings,
    load_draw_inputs,
    registered_family,
)
from tagrpo.report.markdown import markdown_table

# Dotted params keys (and prefixes) that say where and how a run executes, never what it
# computes: draws may differ in them (a draw trained on a GPU, another on the CPU).
EXECUTION_KEYS = (
    "runtime",
    "common.tracking",
    "common.data_dir",
    "common.grading",
    "common.torch_threads",
    "local",
    "hf",
    "vllm",
)
DRAW_KEY = "base_model.warmstart.seed"
# Part B's search (world-v3.md, "Study size"): D >= 2 draws and S >= 2 seeds per draw, capped.
MIN_DRAWS, MAX_DRAWS, MIN_SEEDS, MAX_SEEDS = 2, 5, 2, 5
LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")


def parse_runs(items: Sequence[str]) -> dict[str, Path]:
    """``LABEL=PATH`` arguments as {label: path}: labels distinct, folder-safe, paths built
    checkouts (holding ``params.yaml``)."""
    checkouts: dict[str, Path] = {}
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise ValueError(f"--run {item!r}: expected LABEL=PATH")
        if not LABEL.match(label):
            raise ValueError(f"--run {item!r}: a label is letters, digits, '_', '.', '-'")
        if label in checkouts:
            raise ValueError(f"--run {label} is given twice")
        root = Path(path)
        if not (root / "params.yaml").is_file():
            raise FileNotFoundError(f"--run {label}: {root / 'params.yaml'} does not exist")
        checkouts[label] = root
    if not checkouts:
        raise ValueError("no --run LABEL=PATH: one per base draw")
    return checkouts


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def _executes(key: str) -> bool:
    return any(key == prefix or key.startswith(f"{prefix}.") for prefix in EXECUTION_KEYS)


def experiment_differences(params: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The params keys (other than the base draw's and :data:`EXECUTION_KEYS`) in which the
    draws' checkouts differ, each named with its values: a study's draws are one experiment."""
    flats = {label: _flatten(values) for label, values in params.items()}
    keys = sorted(set().union(*flats.values()))
    problems = []
    for key in keys:
        if key == DRAW_KEY or _executes(key):
            continue
        values = {label: flat.get(key, "<absent>") for label, flat in flats.items()}
        if len({repr(v) for v in values.values()}) > 1:
            shown = ", ".join(f"{label}: {value!r}" for label, value in values.items())
            problems.append(f"{key} differs between draws ({shown})")
    return problems


@dataclass(frozen=True)
class Provenance:
    """One checkout's git state: its HEAD commit, whether its tracked files are modified, the
    commit that last changed the pre-registration and whether that file is unchanged there."""

    head: str | None
    dirty: bool | None
    registration_commit: str | None
    registration_clean: bool | None
    lock_sha256: str | None


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance(root: Path, registration: str) -> Provenance:
    """:class:`Provenance` of a checkout (None fields: not a git checkout, or no dvc.lock)."""
    head = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    commit = _git(root, "log", "-1", "--format=%H", "--", registration) if head else None
    changed = _git(root, "status", "--porcelain", "--", registration) if head else None
    lock = root / "dvc.lock"
    return Provenance(
        head=head,
        dirty=None if status is None else bool(status),
        registration_commit=commit or None,
        registration_clean=None if changed is None else changed == "",
        lock_sha256=hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else None,
    )


def registration_deviations(
    registration: Mapping[str, Any],
    configs: Mapping[str, Any],
    provenances: Mapping[str, Provenance],
) -> list[str]:
    """Where the runs depart from the pre-registration's study section and its provenance
    rules (an empty list: the pre-registered study). ``configs``: each draw's params."""
    study = registration["study"]
    first = next(iter(configs.values()))
    runs = first.runs
    deviations = []
    draws = study.get("base_draws")
    seeds_per_draw = study.get("seeds_per_draw")
    if draws is None or seeds_per_draw is None:
        deviations.append(
            "Part B is not filled in (study.base_draws and study.seeds_per_draw are null): the "
            "study's size is not fixed"
        )
    run_draws = sorted(config.base_model.warmstart.seed for config in configs.values())
    if draws is not None and sorted(draws) != run_draws:
        deviations.append(f"base draws {run_draws} run, {sorted(draws)} registered")
    world = registration.get("confirmatory", {}).get("world_seed")
    if world is None:
        deviations.append("no confirmatory world seed is registered (the freeze)")
    elif first.data.synthetic.seed != world:
        deviations.append(
            f"data.synthetic.seed is {first.data.synthetic.seed}, the confirmatory world {world}"
        )
    methods = list(study["methods"])
    trained = runs.all_methods()
    missing = [m for m in methods if m not in trained]
    if missing:
        deviations.append(f"registered methods not trained: {missing}")
    extra = [m for m in trained if m not in methods]
    if extra:
        deviations.append(f"methods trained beyond the registered ones: {extra}")
    for method in methods:
        if method in trained and seeds_per_draw is not None:
            count = len(runs.seeds_of(method))
            if count != seeds_per_draw:
                deviations.append(
                    f"{method} has {count} seeds per draw, {seeds_per_draw} registered"
                )
    scaling, registered_scaling = runs.data_scaling, study["data_scaling"]
    if list(scaling.methods) != list(registered_scaling["methods"]) or [
        float(m) for m in scaling.multiples
    ] != [float(m) for m in registered_scaling["multiples"]]:
        deviations.append(
            f"data-scaling runs {list(scaling.methods)} x {list(scaling.multiples)}, registered "
            f"{registered_scaling['methods']} x {registered_scaling['multiples']}"
        )
    if "grpo" in trained and list(scaling.seeds) != list(runs.seeds_of("grpo")):
        deviations.append(
            f"data-scaling seeds {list(scaling.seeds)}, not the study's {runs.seeds_of('grpo')}"
        )
    margin = float(study["tost_margin"])
    if not np.isclose(first.report.equivalence_margin, margin):
        deviations.append(
            f"report.equivalence_margin {first.report.equivalence_margin}, registered {margin}"
        )
    endpoint = study["primary_endpoint"]
    if endpoint.get("group") is None or endpoint.get("k") is None:
        deviations.append("the primary endpoint (group, k) is not registered (the freeze)")
    elif (first.report.primary_group, first.report.primary_k) != (
        endpoint["group"],
        int(endpoint["k"]),
    ):
        deviations.append(
            f"primary endpoint ({first.report.primary_group}, {first.report.primary_k}) run, "
            f"({endpoint['group']}, {endpoint['k']}) registered"
        )
    for label, state in provenances.items():
        if state.registration_commit is None:
            deviations.append(f"{label}: the pre-registration is not committed in its checkout")
        elif state.registration_clean is False:
            deviations.append(f"{label}: the pre-registration is modified in its checkout")
        if state.dirty:
            deviations.append(f"{label}: its checkout has uncommitted changes to tracked files")
        if state.lock_sha256 is None:
            deviations.append(f"{label}: no dvc.lock (the outputs are not a recorded dvc repro)")
    return deviations


@dataclass(frozen=True)
class Study:
    """The study's checkouts, as read and checked: each draw's params and inputs, the
    pre-registration (path relative to a checkout, its document and SHA-256)."""

    checkouts: dict[str, Path]
    configs: dict[str, Any]
    registration_path: str
    registration: dict[str, Any]
    digest: str
    provenances: dict[str, Provenance] = field(default_factory=dict)


def read_study(checkouts: Mapping[str, Path]) -> Study:
    """Read and check the draws' checkouts: one experiment (:func:`experiment_differences`),
    distinct base draws, one world v3 pre-registration (the same bytes in every checkout)."""
    from tagrpo.config.params import read_yaml_mapping, validate_params

    raw = {label: read_yaml_mapping(root / "params.yaml") for label, root in checkouts.items()}
    configs = {label: validate_params(values, label) for label, values in raw.items()}
    differences = experiment_differences(raw)
    if differences:
        raise ValueError("the draws are not one experiment:\n" + "\n".join(differences))
    seeds = {label: config.base_model.warmstart.seed for label, config in configs.items()}
    if len(set(seeds.values())) != len(seeds):
        raise ValueError(f"two checkouts are the same base draw: {seeds}")
    first = next(iter(configs.values()))
    if first.base_model.kind != "warmstart":
        raise ValueError("the study's base draws are warm-starts (base_model.kind: warmstart)")
    relative = first.report.preregistration
    if relative is None:
        raise ValueError("report.preregistration names no pre-registration")
    digests = {}
    for label, root in checkouts.items():
        path = root / relative
        if not path.is_file():
            raise FileNotFoundError(f"{label}: {path} does not exist")
        digests[label] = hashlib.sha256(path.read_bytes()).hexdigest()
    if len(set(digests.values())) != 1:
        raise ValueError(f"the draws' pre-registrations differ: {digests}")
    root0 = next(iter(checkouts.values()))
    if registered_family(root0 / relative) != "v3":
        raise ValueError(f"{relative} is not world v3's pre-registration: no study over draws")
    import yaml

    registration = yaml.safe_load((root0 / relative).read_text(encoding="utf-8"))
    return Study(
        checkouts=dict(checkouts),
        configs=configs,
        registration_path=relative,
        registration=registration,
        digest=next(iter(digests.values())),
        provenances={label: provenance(root, relative) for label, root in checkouts.items()},
    )


# --------------------------------------------------------------------------- the analysis


@dataclass(frozen=True)
class StudyResult:
    """What the study computed: the claims over draws, each draw's own claims, the validity
    rows per draw, V5 over draws, and the long-form tables."""

    claims: list[Claim]
    per_draw: dict[str, list[Claim]]
    validity: dict[str, pd.DataFrame]
    v5: dict[str, Any]
    scores: pd.DataFrame
    differences: pd.DataFrame


def v5_over_draws(claims: Sequence[Claim], draws: int, target: float) -> dict[str, Any]:
    """V5 over the draws: the primary endpoint's 95% half-width from the draw-level analysis
    (blind: the half-width, not the estimate) against ``target``; one draw cannot measure it."""
    primary = next(c for c in claims if c.claim.endswith("(primary endpoint)"))
    requirement = (
        f"TA-GRPO - GRPO at the primary endpoint, over the draws: 95% half-width <= "
        f"{100 * target:.0f} points (blind: no estimate shown)"
    )
    if draws < 2:
        measured, passed, width = (
            "not measurable: one base draw (no draw-level variance)",
            False,
            None,
        )
    elif primary.estimate is None:
        measured, passed, width = "not run: TA-GRPO or GRPO missing", False, None
    elif primary.refusal:
        measured, passed, width = f"not measurable: {primary.refusal}", False, None
    else:
        width = estimate_half_width(primary.estimate)
        measured = (
            f"+/-{100 * width:.2f} points ({draws} draws, t with {primary.estimate.df:.1f} "
            "effective df)"
        )
        passed = width <= target
    return {
        "criterion": "V5 (over draws)",
        "requirement": requirement,
        "measured": measured,
        "verdict": "PASS" if passed else "FAIL",
        "half_width": width,
    }


def score_tables(
    inputs: Mapping[str, DrawInputs],
    groups: Mapping[str, Sequence[str]],
    ks: Sequence[int],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method's score over the draws per group and k, and TA-GRPO minus every other
    method (long form; the draw as the replicated unit; exploratory: unadjusted)."""
    draws = list(inputs.values())
    methods = {"base": [d.base for d in draws]} if all(d.base is not None for d in draws) else {}
    methods.update({m: [d.runs[m] for d in draws] for m in draws[0].runs})
    for key in draws[0].scaled:
        methods[f"{key[0]}_data{key[1]:g}x"] = [d.scaled[key] for d in draws]
    scores, differences = [], []
    for method, sides in methods.items():
        for group, members in groups.items():
            for estimate in draw_score_with_interval(sides, members):
                if estimate.k in ks:
                    scores.append(_long(estimate, method=method, group=group))
            if method == "ta_grpo" or "ta_grpo" not in methods:
                continue
            for estimate in draw_paired_difference(methods["ta_grpo"], sides, members):
                if estimate.k in ks:
                    differences.append(_long(estimate, baseline=method, group=group))
    return pd.DataFrame(scores), pd.DataFrame(differences)


def _long(estimate: Any, **keys: Any) -> dict[str, Any]:
    return {
        **keys,
        "k": estimate.k,
        "value": estimate.value,
        "ci_low": estimate.low,
        "ci_high": estimate.high,
        "se": estimate.se,
        "df": estimate.df,
        "p_value": estimate.p_value,
        "replicates": " vs ".join(str(n) for n in estimate.seeds),
    }


def analyse(study: Study) -> StudyResult:
    """Every claim row over the draws (:func:`tagrpo.report.family.build_v3_claims`), each
    draw alone, V1-V5 recomputed on every draw with its pre-registration's bands, V5 over the
    draws, and the scores and differences tables."""
    from tagrpo.report.draws import recomputed_rows
    from tagrpo.report.inputs import primary_benchmarks, run_bands

    first_label = next(iter(study.configs))
    first = study.configs[first_label]
    root0 = study.checkouts[first_label]
    settings: FamilySettings = family_settings(first, primary_benchmarks(first))
    inputs = {
        label: load_draw_inputs(study.configs[label], root)
        for label, root in study.checkouts.items()
    }
    claims = build_v3_claims(inputs, settings)
    per_draw = {label: build_v3_claims({label: draw}, settings) for label, draw in inputs.items()}
    validity = {label: recomputed_rows(root) for label, root in study.checkouts.items()}
    v5 = v5_over_draws(claims, len(inputs), run_bands(first, root0).max_half_width)
    if v5["verdict"] != "PASS":
        claims = underpowered(claims)
    benchmarks = sorted(first.benchmark_names())
    groups = {**first.evaluate.groups, "all benchmarks": benchmarks}
    scores, differences = score_tables(inputs, groups, sorted({1, settings.k}))
    return StudyResult(claims, per_draw, validity, v5, scores, differences)


# --------------------------------------------------------------------------- the report


def claims_frame(claims: Sequence[Claim]) -> pd.DataFrame:
    """The claims table as numbers (one row per claim, in the table's order)."""
    rows = []
    for claim in claims:
        estimate = claim.estimate
        shown = estimate is not None and not claim.refusal
        rows.append(
            {
                "claim": claim.claim,
                "kind": claim.kind,
                "in_family": claim.in_family,
                "measure": claim.measure,
                "estimate": estimate.value if shown else np.nan,
                "ci_low": (claim.equivalence or estimate).low if shown else np.nan,
                "ci_high": (claim.equivalence or estimate).high if shown else np.nan,
                "interval": "90% (TOST)" if claim.equivalence is not None else "95%",
                "se": estimate.se if shown else np.nan,
                "df": estimate.df if shown else np.nan,
                "p_value": claim.p_value,
                "holm_p": claim.holm_p,
                "seeds": claim.seeds,
                "verdict": claim.verdict,
                "unit": claim.unit,
            }
        )
    return pd.DataFrame(rows)


def _cell(claim: Claim) -> str:
    if claim.estimate is None:
        return "not run"
    if claim.refusal:
        return "not measurable"
    scale = 100.0 if claim.unit == "points" else 1.0
    e = claim.estimate
    return f"{scale * e.value:+.2f} [{scale * e.low:+.2f}, {scale * e.high:+.2f}]"


def per_draw_table(per_draw: Mapping[str, Sequence[Claim]]) -> tuple[str, pd.DataFrame]:
    """Each row's estimate within each draw alone (its crossed seeds x problems model,
    conditional on that draw; 95%, unadjusted): markdown and long form."""
    labels = list(per_draw)
    names = [claim.claim for claim in per_draw[labels[0]]]
    rows, long = [], []
    for index, name in enumerate(names):
        cells = []
        for label in labels:
            claim = per_draw[label][index]
            cells.append(_cell(claim))
            shown = claim.estimate is not None and not claim.refusal
            long.append(
                {
                    "claim": name,
                    "draw": label,
                    "estimate": claim.estimate.value if shown else np.nan,
                    "ci_low": claim.estimate.low if shown else np.nan,
                    "ci_high": claim.estimate.high if shown else np.nan,
                    "unit": claim.unit,
                    "cell": cells[-1],
                }
            )
        rows.append([name, *cells])
    return markdown_table(["claim", *labels], rows), pd.DataFrame(long)


def _validity_markdown(
    validity: Mapping[str, pd.DataFrame], v5: Mapping[str, Any]
) -> tuple[str, pd.DataFrame]:
    from tagrpo.report.draws import draws_markdown

    passed = [label for label, frame in validity.items() if (frame["verdict"] == "PASS").all()]
    long = pd.concat(
        [frame.assign(draw=label) for label, frame in validity.items()]
        + [pd.DataFrame([{k: v5[k] for k in ("criterion", "requirement", "measured", "verdict")}])
           .assign(draw="over draws")],
        ignore_index=True,
    )  # fmt: skip
    text = "\n".join(
        [
            draws_markdown(validity),
            "",
            markdown_table(
                ["criterion", "requirement", "measured", "verdict"],
                [[v5["criterion"], v5["requirement"], v5["measured"], v5["verdict"]]],
            ),
            "",
            f"**V1-V5 and every band pass on {len(passed)} of {len(validity)} draws; V5 over "
            f"the draws: {v5['verdict']}.**",
        ]
    )
    return text, long[["draw", "criterion", "requirement", "measured", "verdict"]]


def _percent_table(frame: pd.DataFrame, key: str, ks: Sequence[int]) -> str:
    if frame.empty:
        return "TA-GRPO was not run: no differences."
    rows = []
    for (name, group), part in frame.groupby([key, "group"], sort=False):
        by_k = part.set_index("k")
        cells = [
            f"{100 * by_k.loc[k, 'value']:.1f} [{100 * by_k.loc[k, 'ci_low']:.1f}, "
            f"{100 * by_k.loc[k, 'ci_high']:.1f}]"
            for k in ks
        ]
        rows.append([name, group, part["replicates"].iloc[0], *cells])
    return markdown_table([key, "group", "draws", *(f"pass@{k}" for k in ks)], rows)


def design_table(study: Study) -> str:
    """Per draw: its SFT seed, checkout commit, dvc.lock hash and where it ran."""
    rows = []
    for label, config in study.configs.items():
        state = study.provenances.get(label)
        head = state.head[:12] if state and state.head else "not a git checkout"
        dirty = "" if not state or state.dirty is None else (" (modified)" if state.dirty else "")
        lock = state.lock_sha256[:12] if state and state.lock_sha256 else "missing"
        device = (
            f"train {config.train.backend}/{config.local.device}, evaluate "
            f"{config.evaluate.backend}/{config.hf.device}, diagnostics "
            f"{config.diagnostics.backend}"
        )
        rows.append([label, config.base_model.warmstart.seed, head + dirty, lock, device])
    return markdown_table(
        ["draw", "SFT seed", "checkout commit", "dvc.lock SHA-256", "devices (params)"], rows
    )


def study_markdown(
    study: Study, result: StudyResult, command: str, deviations: Sequence[str]
) -> tuple[str, str, dict[str, pd.DataFrame]]:
    """The study report (markdown), the claims table alone, and the CSV tables by name."""
    from tagrpo.report.inputs import preregistration_line

    first_label = next(iter(study.configs))
    first = study.configs[first_label]
    root0 = study.checkouts[first_label]
    draws = len(study.configs)
    k = first.primary_k()
    group = first.report.primary_group or "every free-form benchmark"
    seeds = {m: len(first.runs.seeds_of(m)) for m in first.runs.all_methods()}
    registered = study.registration["study"]
    validity_text, validity_long = _validity_markdown(result.validity, result.v5)
    per_draw_text, per_draw_long = per_draw_table(result.per_draw)
    claims = claims_table(result.claims)
    ks = sorted({1, k})
    header = [
        "# The decisive study of world v3: the paper's claims over base draws",
        "",
    ]
    if deviations:
        header += [
            "**EXPLORATORY: not the pre-registered study.** It departs from the "
            "pre-registration in:",
            "",
            *(f"- {line}" for line in deviations),
            "",
        ]
    conditional = (
        " With one draw every row is the crossed seeds x problems model within it, "
        "conditional on that base draw."
        if draws == 1
        else ""
    )
    text = "\n".join(
        [
            *header,
            f"Made by `{command}` (tagrpo.report.study) from {draws} built checkout(s), one per "
            "base draw; every number below is computed from their stage outputs.",
            "",
            preregistration_line(first, root0),
            "",
            "## Design",
            "",
            f"World seed {first.data.synthetic.seed}; base draws (SFT seeds) "
            + ", ".join(str(c.base_model.warmstart.seed) for c in study.configs.values())
            + " (registered: "
            + f"{registered.get('base_draws')}, seeds per draw {registered.get('seeds_per_draw')}"
            + "). Seeds per draw: "
            + ", ".join(f"{m} {n}" for m, n in seeds.items())
            + "; data-scaling runs: "
            + (
                ", ".join(
                    f"{m} at {mult:g}x"
                    for m in first.runs.data_scaling.methods
                    for mult in first.runs.data_scaling.multiples
                )
                or "none"
            )
            + f" ({len(first.runs.data_scaling.seeds)} seeds per draw). Primary endpoint: "
            f"TA-GRPO minus GRPO at pass@{k} on `{group}`.",
            "",
            design_table(study),
            "",
            "## Testbed validity on every draw (V1-V5, the bands) and V5 over the draws",
            "",
            validity_text,
            "",
            "## The paper's claims over the base draws",
            "",
            "Contrasts are paired by draw: per draw, the mean over its seeds of one method "
            "minus the other's, on the problems every policy answered; the estimate is the "
            "mean over the draws, its variance the method-by-problem component plus the "
            "draws' mean square over their number, each with its own t quantile (problems - "
            "benchmarks and draws - 1 degrees of freedom), the half-widths added in quadrature "
            "(pre-registration amendment 1); p-values and the TOST use the effective degrees "
            "of freedom of that width. The negative control and the A/A null (GRPO's seeds "
            "split in two within each draw) come first, outside the family; the family of "
            f"{FAMILY_SIZE} rows follows in the registered order, adjusted by Holm (a row not "
            "run or not measurable counts with p = 1 and reads not supported). Rows marked "
            "*outside the family* are reported beside their family row, unadjusted."
            + conditional
            + (
                ' V5 over the draws fails: every family row is labelled "underpowered: not '
                'evidence".'
                if result.v5["verdict"] != "PASS"
                else ""
            ),
            "",
            claims,
            "",
            "## Each draw alone",
            "",
            "Each row within one draw (the crossed seeds x problems model of that draw: "
            "conditional on it; 95%, unadjusted): how the draws agree. Percentage points, "
            "bits for the strategy entropy, cosine distance for the embeddings, "
            "-log(1 - pass@k) units for its widening.",
            "",
            per_draw_text,
            "",
            "## Scores and differences over the draws (exploratory, unadjusted)",
            "",
            "pass@k (percent) of every method, the mean over draws of each draw's seed mean, "
            "with its 95% interval over draws (the draw as the replicated unit):",
            "",
            _percent_table(result.scores, "method", ks),
            "",
            "TA-GRPO minus each method, paired by draw (percentage points):",
            "",
            _percent_table(result.differences, "baseline", ks),
            "",
            "## Provenance",
            "",
            "Each draw's `params.yaml` and `dvc.lock` are copied under `draws/<draw>/` beside "
            "this report; `tables/` holds every table above as CSV.",
        ]
    )
    tables = {
        "claims": claims_frame(result.claims),
        "validity_by_draw": validity_long,
        "per_draw": per_draw_long,
        "scores": result.scores,
        "differences": result.differences,
    }
    return text, claims, tables


def write_study(
    study: Study,
    result: StudyResult,
    out: Path,
    command: str,
    deviations: Sequence[str],
) -> Path:
    """Write the study folder: ``report.md``, ``claims.md``, ``tables/*.csv`` and each draw's
    ``params.yaml`` and ``dvc.lock`` under ``draws/<label>/``; returns the report's path."""
    text, claims, tables = study_markdown(study, result, command, deviations)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(out / "tables" / f"{name}.csv", index=False)
    for label, root in study.checkouts.items():
        folder = out / "draws" / label
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("params.yaml", "dvc.lock"):
            if (root / name).is_file():
                shutil.copyfile(root / name, folder / name)
    (out / "claims.md").write_text(claims + "\n", encoding="utf-8")
    report = out / "report.md"
    report.write_text(text + "\n", encoding="utf-8")
    return report


# --------------------------------------------------------------------------- Part B


@dataclass(frozen=True)
class PowerInputs:
    """Part B's measured inputs at the primary endpoint: GRPO's seed-level variance and
    between-draw components (:class:`tagrpo.metrics.compare.DrawSeedComponents`) and the
    problem component of GRPO minus the base over the draws (with its degrees of freedom)."""

    group: str
    k: int
    seed: float
    draw: float
    between: float
    draws: int
    seeds: int
    problem: float
    problem_df: float


def power_inputs(
    grpo: Sequence[SeedRuns], base: Sequence[SeedRuns], group: str, members: Sequence[str], k: int
) -> PowerInputs:
    """:class:`PowerInputs` from the confirmatory draws' GRPO runs and bases (>= 2 draws)."""
    components = draw_seed_components(grpo, members, k)
    _, parts = draw_difference_parts(grpo, base, members)
    index = grpo[0].ks.index(int(k))
    return PowerInputs(
        group=group,
        k=int(k),
        seed=components.seed,
        draw=components.draw,
        between=components.between,
        draws=components.draws,
        seeds=components.seeds,
        problem=float(parts.problem[index]),
        problem_df=max(parts.problems - parts.strata, 1.0),
    )


def power_table(inputs: PowerInputs, target: float) -> tuple[pd.DataFrame, tuple[int, int], bool]:
    """The projected 95% half-width of TA-GRPO minus GRPO at the primary endpoint for every
    design (D draws in 2..5, S seeds per draw in 2..5), under the registered assumptions
    (world-v3.md, "Study size"): pairing by draw removes nothing, so a contrast's per-draw
    values have the mean square ``2 x (draw + seed / S)`` (twice GRPO's between-draw variance of
    its mean score, the seeds' part scaled to S; the seed-level variance twice GRPO's); the
    problem component is GRPO minus the base's; each term with its own t quantile, in quadrature
    (:func:`tagrpo.metrics.compare.projected_draw_half_width`, as the analysis computes it).

    The cheapest design is the one with the fewest trainings per method (D x S), of equal cost
    the fewer draws (each draw adds a warm-start, a base evaluation and the diagnostics), whose
    half-width is <= ``target``; (5, 5) when none is (the bool: whether one reached it)."""
    rows = []
    for draws in range(MIN_DRAWS, MAX_DRAWS + 1):
        for seeds in range(MIN_SEEDS, MAX_SEEDS + 1):
            mean_square = 2.0 * (inputs.draw + inputs.seed / seeds)
            width = projected_draw_half_width(inputs.problem, inputs.problem_df, mean_square, draws)
            rows.append(
                {
                    "draws": draws,
                    "seeds_per_draw": seeds,
                    "trainings_per_method": draws * seeds,
                    "draw_mean_square": mean_square,
                    "half_width": width,
                    "reaches": width <= target,
                }
            )
    frame = pd.DataFrame(rows).sort_values(
        ["trainings_per_method", "draws"], kind="stable", ignore_index=True
    )
    reaching = frame[frame["reaches"]]
    if reaching.empty:
        return frame, (MAX_DRAWS, MAX_SEEDS), False
    best = reaching.iloc[0]
    return frame, (int(best["draws"]), int(best["seeds_per_draw"])), True


def power_markdown(checkouts: Mapping[str, Path], command: str) -> tuple[str, tuple[int, int]]:
    """Part B from the confirmatory draws' checkouts (base, GRPO with >= 2 seeds each): the
    measured components, the table of designs and the chosen (D, S)."""
    import yaml

    from tagrpo.config.params import load_config
    from tagrpo.pipeline.layout import BASE_POLICY, policy_name
    from tagrpo.report.claims import load_policy_runs
    from tagrpo.report.inputs import preregistration_line, run_bands

    if len(checkouts) < MIN_DRAWS:
        raise ValueError(
            f"Part B needs the confirmatory draws (>= {MIN_DRAWS}), got {len(checkouts)}"
        )
    configs = {label: load_config(root / "params.yaml") for label, root in checkouts.items()}
    first_label = next(iter(configs))
    first, root0 = configs[first_label], checkouts[first_label]
    seeds = {label: c.base_model.warmstart.seed for label, c in configs.items()}
    if len(set(seeds.values())) != len(seeds):
        raise ValueError(f"two checkouts are the same base draw: {seeds}")
    for label, config in configs.items():
        if config.data.synthetic != first.data.synthetic or config.train != first.train:
            raise ValueError(f"draw {label}: another world or RL budget than the first draw's")
        if config.runs.seeds_of("grpo") != first.runs.seeds_of("grpo"):
            raise ValueError(f"draw {label}: other GRPO seeds than the first draw's")
    if first.report.preregistration is None:
        raise ValueError("report.preregistration names no pre-registration")
    registration = yaml.safe_load((root0 / first.report.preregistration).read_text())
    endpoint = registration["study"]["primary_endpoint"]
    if endpoint.get("group") is not None and endpoint.get("k") is not None:
        group, k = str(endpoint["group"]), int(endpoint["k"])
        source = "the pre-registration's primary endpoint"
    else:
        group, k = first.report.primary_group, first.primary_k()
        source = (
            "**not registered yet**: the run's report.primary_group and primary k (record the "
            "freeze's primary endpoint before Part B)"
        )
    if group is None:
        raise ValueError("no primary group: register the primary endpoint (group, k)")
    members = list(first.evaluate.groups[group])
    ks = first.evaluate.ks
    grpo_policies = [policy_name("grpo", s) for s in first.runs.seeds_of("grpo")]
    grpo = [load_policy_runs(root, grpo_policies, ks) for root in checkouts.values()]
    base = [load_policy_runs(root, [BASE_POLICY], ks) for root in checkouts.values()]
    inputs = power_inputs(grpo, base, group, members, k)
    target = run_bands(first, root0).max_half_width
    frame, (draws, per_draw), reached = power_table(inputs, target)
    chosen_line = (
        f"**Chosen: D = {draws} draws, S = {per_draw} seeds per draw** (the cheapest design "
        f"whose projected half-width is <= {100 * target:.0f} points: {draws * per_draw} "
        "trainings per method)."
        if reached
        else f"**No design with D <= {MAX_DRAWS} and S <= {MAX_SEEDS} reaches "
        f"{100 * target:.0f} points: the study runs D = {MAX_DRAWS}, S = {MAX_SEEDS} and reports "
        "V5 as it comes out.**"
    )
    grid = frame.pivot(index="draws", columns="seeds_per_draw", values="half_width")
    rows = [
        [f"D = {d}", *(f"{100 * grid.loc[d, s]:.2f}" for s in grid.columns)] for d in grid.index
    ]
    text = "\n".join(
        [
            "# World v3, Part B: the study's size",
            "",
            f"Made by `{command}` (tagrpo.report.study --power) from the confirmatory draws "
            + ", ".join(f"{label} (SFT seed {seeds[label]})" for label in configs)
            + f": base, GRPO with {inputs.seeds} seeds per draw.",
            "",
            preregistration_line(first, root0),
            "",
            f"Primary endpoint ({source}): pass@{k} on `{group}` ({len(members)} benchmark(s), "
            f"{int(inputs.problem_df + len(members))} problems).",
            "",
            "Measured (points^2): GRPO's seed-level variance of one seed's score "
            f"{1e4 * inputs.seed:.3f} (pooled within draws, {inputs.draws * (inputs.seeds - 1)}"
            f" df); the between-draw variance of its mean score {1e4 * inputs.between:.3f}, "
            f"of which the draws' own {1e4 * inputs.draw:.3f} (less the seeds' part, "
            f"{1e4 * inputs.seed:.3f} / {inputs.seeds}; truncated at 0); the problem component "
            f"of GRPO minus the base {1e4 * inputs.problem:.3f} ({inputs.problem_df:g} df).",
            "",
            "Projection (world-v3.md, Study size): a contrast's per-draw values have the mean "
            "square 2 x (draws' own + seed-level / S) (pairing by draw assumed to remove "
            "nothing; both methods as variable as GRPO), the problem component that of GRPO "
            "minus the base; the half-width adds the problem term (problems - benchmarks df) "
            "and the draw term (mean square / D, D - 1 df) in quadrature, each with its own t "
            "quantile, as the study's analysis does.",
            "",
            "Projected 95% half-width (points) by draws D and seeds per draw S:",
            "",
            markdown_table(["", *(f"S = {s}" for s in grid.columns)], rows),
            "",
            chosen_line,
            "",
            "Part B then reads, in `preregistration/world-v3.yaml`: `study.base_draws` (the "
            f"{draws} SFT seeds of the study's draws) and `study.seeds_per_draw: {per_draw}`.",
        ]
    )
    return text, (draws, per_draw)


# --------------------------------------------------------------------------- command


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run", action="append", default=[], metavar="LABEL=PATH",
        help="a base draw's label and its built checkout (repeat per draw)",
    )  # fmt: skip
    parser.add_argument(
        "--power", action="store_true",
        help="Part B: the study's size from the confirmatory draws' GRPO-only checkouts",
    )  # fmt: skip
    parser.add_argument(
        "--exploratory", action="store_true",
        help="analyse checkouts that depart from the pre-registration (Part B unfilled, other "
        "draws or seeds): the report is headed EXPLORATORY and lists every deviation",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=None,
        help="the study folder (default reports/profiles/study); with --power a markdown file "
        "(default: print)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        checkouts = parse_runs(args.run)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    labels = " ".join(f"--run {label}=..." for label in checkouts)
    if args.power:
        text, _ = power_markdown(checkouts, f"python -m tagrpo.report.study --power {labels}")
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n", encoding="utf-8")
        else:
            print(text)
        return
    study = read_study(checkouts)
    deviations = registration_deviations(study.registration, study.configs, study.provenances)
    if deviations and not args.exploratory:
        raise SystemExit(
            "the runs are not the pre-registered study (--exploratory to analyse them anyway, "
            "under a report that says so):\n- " + "\n- ".join(deviations)
        )
    command = "python -m tagrpo.report.study " + ("--exploratory " if deviations else "") + labels
    result = analyse(study)
    report = write_study(
        study, result, args.out or Path("reports/profiles/study"), command, deviations
    )
    print(f"{report}: V5 over the draws {result.v5['verdict']}")


if __name__ == "__main__":
    main()
