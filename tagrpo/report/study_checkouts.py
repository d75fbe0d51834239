"""A study's checkouts, one per base draw, read and checked as one experiment: their params
equal but for the draw and :data:`EXECUTION_KEYS`, no draw twice, and the runs against the
pre-registration's study section and its provenance (:func:`registration_deviations`).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tagrpo.report.family import (
    registered_family,
)

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
    # The claims family and its reading (world v3's: "v3", no "no effect" verdict, V5 from the
    # run's bands; study-v3's records: "study-v3", its margin and its V5 bound).
    family: str = "v3"
    no_effect_margin: float | None = None
    v5_target: float | None = None
    # Keys this code's params have and a record's older code lacked, filled to read it
    # (tagrpo.report.draw_checkouts.checkout_config); the report says which.
    filled: list[str] = field(default_factory=list)


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


def study_v3_seed_counts(rules: Mapping[str, Any], seeds_per_draw: int) -> dict[str, int]:
    """The seeds per draw study-v3.yaml's ``main.runs`` gives each method for S seeds (its
    formulas, ``S`` and ``max(S, n)``, evaluated)."""
    counts = {}
    for method, rule in rules.items():
        text = str(rule).replace(" ", "")
        if text == "S":
            counts[method] = seeds_per_draw
        elif text.startswith("max(S,") and text.endswith(")"):
            counts[method] = max(seeds_per_draw, int(text[len("max(S,") : -1]))
        else:
            counts[method] = int(text)
    return counts


def study_v3_deviations(registration: Mapping[str, Any], configs: Mapping[str, Any]) -> list[str]:
    """Where the main study's records depart from study-v3.yaml: its draws (the first D of the
    registered order), each method's seeds per draw (``main.runs`` at S), the world, the
    primary endpoint and the competition benchmark."""
    size = registration.get("size")
    if not size:
        return ["study-v3.yaml has no size: the main study's D and S are not fixed"]
    draws, seeds = int(size["draws"]), int(size["seeds_per_draw"])
    deviations = []
    registered = sorted(registration["main"]["base_draws_in_order"][:draws])
    run = sorted(c.base_model.warmstart.seed for c in configs.values())
    if run != registered:
        deviations.append(f"base draws {run} recorded, {registered} registered")
    counts = study_v3_seed_counts(registration["main"]["runs"], seeds)
    for label, config in configs.items():
        runs = config.runs
        for method, count in counts.items():
            if method.startswith("grpo_data"):
                multiple = float(method.removeprefix("grpo_data").removesuffix("x"))
                have = (
                    len(runs.data_scaling.seeds)
                    if "grpo" in runs.data_scaling.methods
                    and multiple in runs.data_scaling.multiples
                    else 0
                )
            else:
                have = len(runs.seeds_of(method)) if method in runs.all_methods() else 0
            if have != count:
                deviations.append(f"{label}: {method} has {have} seeds, {count} registered")
        if config.data.synthetic.seed != registration["world_seed"]:
            deviations.append(f"{label}: world seed {config.data.synthetic.seed}")
        endpoint = registration["primary_endpoint"]
        if (config.report.primary_group, config.report.primary_k) != (
            endpoint["group"],
            int(endpoint["k"]),
        ):
            deviations.append(f"{label}: another primary endpoint than the registered one")
        name = registration["benchmark"]["name"]
        spec = config.data.synthetic.benchmarks.get(name)
        if spec is None or spec.size != registration["benchmark"]["spec"]["size"]:
            deviations.append(f"{label}: no {name} benchmark of the registered size")
    return deviations


def read_records(records: Mapping[str, Path], registration_path: Path) -> Study:
    """The main study's committed draw records (reports/study/main/draw<seed>/) as a
    :class:`Study` under study-v3's registration: one experiment (the params equal but for the
    draw and where runs execute), distinct draws; each record's provenance from its DRAW.json
    (the commit its phase ran) and its dvc.lock. A record's params are read as its code ran
    them: keys this code added since are filled with what that code had (``filled``)."""
    import json

    import yaml

    from tagrpo.config.params import read_yaml_mapping
    from tagrpo.report.draw_checkouts import checkout_config

    raw = {label: read_yaml_mapping(root / "params.yaml") for label, root in records.items()}
    loaded = {label: checkout_config(root) for label, root in records.items()}
    configs = {label: config for label, (config, _) in loaded.items()}
    filled = sorted({key for _, keys in loaded.values() for key in keys})
    differences = experiment_differences(raw)
    if differences:
        raise ValueError("the draws are not one experiment:\n" + "\n".join(differences))
    seeds = [config.base_model.warmstart.seed for config in configs.values()]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"two records are the same base draw: {seeds}")
    registration = yaml.safe_load(registration_path.read_text(encoding="utf-8"))
    provenances = {}
    for label, root in records.items():
        draw = json.loads((root / "DRAW.json").read_text())
        lock = root / "dvc.lock"
        provenances[label] = Provenance(
            head=str(draw["commit"]),
            dirty=False,
            registration_commit=str(draw["commit"]),
            registration_clean=True,
            lock_sha256=hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else None,
        )
    return Study(
        checkouts=dict(records),
        configs=configs,
        registration_path=str(registration_path),
        registration=registration,
        digest=hashlib.sha256(registration_path.read_bytes()).hexdigest(),
        provenances=provenances,
        family="study-v3",
        no_effect_margin=float(registration["study"]["no_effect_margin"]),
        v5_target=float(registration["study"]["v5_max_half_width"]),
        filled=filled,
    )
