"""Base draws as built checkouts, read together: each checkout's params (checked to be one
world and RL budget), its validity rows recomputed from evaluations and training histories,
and the pieces the calibration and confirmatory tables of :mod:`tagrpo.report.draws` share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.plumbing.markdown import markdown_table

COLUMNS = ("criterion", "requirement", "measured", "verdict")


# Rows that are not acceptance rows of world v3 (V5 needs TA-GRPO, which calibration never
# trains) are shown but do not decide a draw.
NOT_ACCEPTANCE = ("V5",)


# Sections no stage's result depends on: how runs execute (runtime) and how the report reads
# them (report). A key added to them after a checkout ran may be filled from this checkout's
# params.yaml to read that run; a missing key of any other section is an error.
FILLABLE_SECTIONS = ("runtime", "report")
# Experiment keys added after some checkouts ran, each with the one value that the code before
# it had (no choice existed then), so a run of that code reads as what it was.
KEYS_OLDER_CODE_LACKED: dict[str, tuple[Any, str]] = {
    "common.grading.grader": ("tagrpo", "before the key every answer was graded by tagrpo's"),
    "data.verify_sources": (False, "before the key no source file was checked by manifest"),
}


def checkout_config(root: Path) -> tuple[object, list[str]]:
    """A built checkout's params, validated by this code; keys that this code's schema asks for
    and the checkout (run by older code) lacks are filled (returned, to be said): from the
    current directory's params.yaml when they belong to :data:`FILLABLE_SECTIONS`, with the
    value the older code had for those of :data:`KEYS_OLDER_CODE_LACKED`; any other missing key
    is the schema's error."""
    from tagrpo.config.params import (
        ConfigError,
        deep_merge,
        load_config,
        read_yaml_mapping,
        validate_params,
    )

    try:
        return load_config(root / "params.yaml"), []
    except ConfigError as error:
        missing = [
            line.strip("- ").split(":")[0]
            for line in error.problems
            if line.endswith("required key is missing")
        ]
        if len(missing) != len(error.problems) or not all(
            key.split(".")[0] in FILLABLE_SECTIONS or key in KEYS_OLDER_CODE_LACKED
            for key in missing
        ):
            raise
    own = read_yaml_mapping(root / "params.yaml")
    current = read_yaml_mapping(Path("params.yaml"))
    filled = deep_merge({s: current[s] for s in FILLABLE_SECTIONS}, own)
    merged = {**own, **{s: filled[s] for s in FILLABLE_SECTIONS}}
    for key in missing:
        if key in KEYS_OLDER_CODE_LACKED:
            *parents, leaf = key.split(".")
            section = merged
            for name in parents:
                section = section.setdefault(name, {})
            section[leaf] = KEYS_OLDER_CODE_LACKED[key][0]
    return validate_params(merged, str(root / "params.yaml")), missing


def recomputed_rows(root: Path, harder: Sequence[str] = ()) -> pd.DataFrame:
    """A full run's validity rows computed here, by this code, from the run's evaluations and
    training histories (not read from its report: a calibration checkout may have run an older
    report), with the bands of its pre-registration; plus the ``harder`` groups' bands."""
    import tempfile

    from tagrpo.plumbing.layout import BASE_POLICY
    from tagrpo.report import validity
    from tagrpo.report.claims import load_policy_runs, load_seed_runs
    from tagrpo.report.inputs import read_passk, run_bands
    from tagrpo.report.validity_section import validity_section

    config, _ = checkout_config(root)
    ks = config.evaluate.ks
    methods = config.runs.all_methods()
    runs = load_seed_runs(root, {m: config.runs.seeds_of(m) for m in methods}, ks)
    base = load_policy_runs(root, [BASE_POLICY], ks)
    passk = read_passk(root, [BASE_POLICY, *config.runs.policies()])
    with tempfile.TemporaryDirectory() as scratch:
        table = Path(scratch) / "validity.csv"
        validity_section(config, root, runs, base, passk, table)
        rows = pd.read_csv(table)[list(COLUMNS)]
    extra = []
    for group in harder:
        criterion = validity.harder_criterion(
            passk[passk["policy"] == BASE_POLICY], group, ks[-1], run_bands(config, root)
        )
        if criterion is not None:
            extra.append(criterion.row())
    return pd.concat([rows, pd.DataFrame(extra, columns=list(COLUMNS))], ignore_index=True)


def competition_lengths(config: object) -> dict[int, str]:
    """Chain length -> group, for the groups named ``competition*`` whose one benchmark has one
    chain length (world v3's calibration evaluates the competition group at lengths 4 and 5)."""
    lengths = {}
    benchmarks = config.data.synthetic.benchmarks  # type: ignore[attr-defined]
    for group, members in config.evaluate.groups.items():  # type: ignore[attr-defined]
        if not group.startswith("competition") or len(members) != 1:
            continue
        spec = benchmarks[members[0]]
        if len(spec.lengths) != 1:
            raise ValueError(f"group {group}: {members[0]} mixes chain lengths {spec.lengths}")
        lengths[int(next(iter(spec.lengths)))] = group
    return lengths


@dataclass(frozen=True)
class Draws:
    """Built checkouts of base draws (label -> root), each with its params (``configs``),
    checked to share one world and RL budget; the first's pre-registration and bands."""

    checkouts: Mapping[str, Path]
    configs: dict[str, Any]
    seeds: dict[str, int]  # base_model.warmstart.seed per draw
    filled: list[str]  # keys filled from the current params.yaml (checkout_config)
    registration: dict[str, Any]
    bands: Any

    @property
    def first(self) -> Any:
        return next(iter(self.configs.values()))

    @property
    def labels(self) -> list[str]:
        return list(self.checkouts)


def load_draws(checkouts: Mapping[str, Path]) -> Draws:
    """Each checkout's params (:func:`checkout_config`); refused, naming the draw: two
    checkouts of one base draw, a world (``data.synthetic``) or RL budget (``train``) other
    than the first's, no ``report.preregistration``."""
    import yaml

    from tagrpo.report.inputs import run_bands

    if not checkouts:
        raise ValueError("no draw to judge")
    loaded = {label: checkout_config(root) for label, root in checkouts.items()}
    configs = {label: config for label, (config, _) in loaded.items()}
    filled = sorted({key for _, keys in loaded.values() for key in keys})
    (label0, first), root0 = next(iter(configs.items())), next(iter(checkouts.values()))
    seeds = {label: c.base_model.warmstart.seed for label, c in configs.items()}
    for label, config in configs.items():
        same = [other for other in configs if other != label and seeds[other] == seeds[label]]
        if same:
            raise ValueError(
                f"draw {label}: the same base draw as {same[0]} "
                f"(base_model.warmstart.seed {seeds[label]})"
            )
        for key in ("data.synthetic", "train"):
            if attrgetter(key)(config) != attrgetter(key)(first):
                raise ValueError(
                    f"draw {label}: its {key} differs from draw {label0}'s (another world or "
                    "RL budget)"
                )
        if config.report.preregistration is None:
            raise ValueError(
                f"draw {label}: report.preregistration names no pre-registration to judge by"
            )
    registration = yaml.safe_load((root0 / first.report.preregistration).read_text())
    return Draws(checkouts, configs, seeds, filled, registration, run_bands(first, root0))


def grpo_policies(config: Any) -> list[str]:
    from tagrpo.plumbing.layout import policy_name

    return [policy_name("grpo", seed) for seed in config.runs.seeds_of("grpo")]


def acceptance(
    draws: Draws, lengths: Mapping[int, str], chosen: str | None
) -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    """Every draw's rows (:func:`recomputed_rows`, with the competition groups other than
    ``report.harder_group``) and its deciding rows: not :data:`NOT_ACCEPTANCE`, not the rows of
    a competition length other than ``chosen``'s."""
    first = draws.first
    others = [group for group in lengths.values() if group != first.report.harder_group]
    dropped = {
        name
        for group in lengths.values()
        if group != chosen
        for name in (f"harder: {group}", *(f"edges: {b}" for b in first.evaluate.groups[group]))
    }
    rows = {label: recomputed_rows(root, others) for label, root in draws.checkouts.items()}
    decided = {
        label: frame[~frame["criterion"].isin([*NOT_ACCEPTANCE, *dropped])]
        for label, frame in rows.items()
    }
    return rows, decided


def shown_only(rows: Mapping[str, pd.DataFrame], decided: Mapping[str, pd.DataFrame]) -> str:
    """The rows no draw decides by: each draw's measured value."""
    deciding = {name for frame in decided.values() for name in frame["criterion"]}
    measured = [dict(zip(f["criterion"], f["measured"], strict=True)) for f in rows.values()]
    others = [c for f in rows.values() for c in f["criterion"] if c not in deciding]
    return markdown_table(
        ["criterion", *rows],
        [[name, *(m.get(name, "") for m in measured)] for name in dict.fromkeys(others)],
    )


def header_line(command: str, draws: Draws) -> str:
    first = draws.first
    return (
        f"Made by `{command}` (tagrpo.report.draws), under `{first.report.preregistration}` "
        f"({draws.bands.source}); world seed {first.data.synthetic.seed}, base draws "
        + ", ".join(f"{label} (SFT seed {draws.seeds[label]})" for label in draws.labels)
        + "."
        + (
            f" Keys this code's schema added after the runs, filled from the current "
            f"params.yaml to read them (no stage depends on them): {', '.join(draws.filled)}."
            if draws.filled
            else ""
        )
    )


def gain_line(draws: Draws, grpo: Sequence[str]) -> str:
    """GRPO minus the base, pass@1, in-distribution, over the draws (the draw as the
    replicated unit; one draw: conditional on it)."""
    from tagrpo.metrics.draws import draw_paired_difference
    from tagrpo.plumbing.layout import BASE_POLICY
    from tagrpo.report.claims import load_policy_runs
    from tagrpo.report.inputs import in_distribution_benchmarks

    group, members = in_distribution_benchmarks(draws.first)
    ks = draws.first.evaluate.ks
    roots = draws.checkouts.values()
    gain = draw_paired_difference(
        [load_policy_runs(root, grpo, ks) for root in roots],
        [load_policy_runs(root, [BASE_POLICY], ks) for root in roots],
        members,
    )[0]
    return (
        f"**GRPO minus the base, pass@1, {group}, over the {len(roots)} draw(s)** "
        + (
            "(the draw as the replicated unit)"
            if len(roots) > 1
            else "(one draw: seeds x problems within it, conditional on that base draw)"
        )
        + f": {100 * gain.value:+.2f} [{100 * gain.low:+.2f}, {100 * gain.high:+.2f}] points "
        f"({gain.df:.1f} effective df)."
    )
