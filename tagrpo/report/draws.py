"""The testbed-validity rows over several base draws: is the world robust to the base model?

The base model is a random factor like the RL seed (a result that holds for one SFT seed, or
one CPU kind, is luck), so world v2's acceptance asks every criterion to pass for each of
several independent base draws (``preregistration/world-v2.md``). Each draw is a built
checkout: a full run (its report wrote ``reports/tables/validity.csv``: every row, V1 and V4
included) or a base-only run (``dvc repro evaluate_base``: the rows the base alone decides, from
:func:`tagrpo.report.build.base_criteria`, as the calibration uses).

    python -m tagrpo.report.draws --run seed0=/work/draw0 --run seed1=/work/draw1 \\
        --out reports/world-v2/base-draws.md

World v3's calibration (``--calibration``, ``preregistration/world-v3.md``) also applies the
pre-registered rules over the draws: the competition length L_c (the base's pass@1 floor and
pass@32 band on every draw, for each candidate length's group), the primary endpoint (the first
(group, k) whose GRPO pass@k, a draw's mean over its seeds, lies in the band on every draw), and
the verdict on every acceptance row of every draw, with GRPO minus the base over the draws (the
draw as the replicated unit, :func:`tagrpo.metrics.compare.draw_paired_difference`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from tagrpo.report.markdown import markdown_table

COLUMNS = ("criterion", "requirement", "measured", "verdict")


def draw_rows(root: Path, harder: Sequence[str] = ()) -> pd.DataFrame:
    """A draw's validity rows (``COLUMNS``), from its report or, base-only, computed here
    (``harder``: the groups to judge against the harder group's band, default
    ``report.harder_group``; the calibration compares two chain lengths)."""
    from tagrpo.config.params import load_config
    from tagrpo.pipeline.layout import BASE_POLICY, report_outputs
    from tagrpo.report.build import base_criteria, read_passk, run_bands

    table = root / report_outputs()["validity"]
    if table.exists():
        rows = pd.read_csv(table)
        missing = set(COLUMNS) - set(rows.columns)
        if missing:
            raise ValueError(f"{table} lacks columns {sorted(missing)}")
        return rows[list(COLUMNS)]
    from tagrpo.report import validity

    config = load_config(root / "params.yaml")
    passk = read_passk(root, [BASE_POLICY])
    criteria, _ = base_criteria(config, root, passk)
    for group in harder:
        criterion = validity.harder_criterion(
            passk, group, config.evaluate.ks[-1], run_bands(config, root)
        )
        criteria[criterion.name] = criterion
    return pd.DataFrame(
        [
            {
                "criterion": c.name,
                "requirement": c.requirement,
                "measured": c.measured,
                "verdict": "PASS" if c.passed else "FAIL",
            }
            for c in criteria.values()
        ]
    )


# Rows that are not acceptance rows of world v3 (V5 needs TA-GRPO, which calibration never
# trains) are shown but do not decide a draw.
NOT_ACCEPTANCE = ("V5",)


def _group_passk(passk: pd.DataFrame, policy: str, group: str) -> dict[int, float]:
    rows = passk[
        (passk["policy"] == policy) & (passk["kind"] == "group") & (passk["name"] == group)
    ]
    return {int(r.k): float(r.pass_at_k) for r in rows.itertuples()}


def competition_rule(
    base_by_draw: Mapping[str, pd.DataFrame],
    lengths: Mapping[int, str],
    bands: object,
    k: int,
    target: float = 0.55,
) -> tuple[str | None, list[list[str]]]:
    """L_c: the group (of ``lengths``: chain length -> group) whose base pass@1 and pass@k lie in
    the competition band on every draw; of two, the one whose mean pass@k is closer to
    ``target``; None when none does. Returns the chosen group and a table row per length."""
    low1, high1 = bands.harder_pass_at_1  # type: ignore[attr-defined]
    lowk, highk = bands.harder_pass_at_k  # type: ignore[attr-defined]
    rows, passing = [], {}
    for length, group in sorted(lengths.items()):
        values = {label: _group_passk(p, "base", group) for label, p in base_by_draw.items()}
        missing = [label for label, v in values.items() if 1 not in v or k not in v]
        if missing:
            raise KeyError(f"group {group}: draws {missing} have no base pass@1 and pass@{k}")
        inside = all(low1 <= v[1] <= high1 and lowk <= v[k] <= highk for v in values.values())
        mean_k = float(np.mean([v[k] for v in values.values()]))
        if inside:
            passing[group] = abs(mean_k - target)
        cells = [f"{100 * v[1]:.1f} / {100 * v[k]:.1f}" for v in values.values()]
        rows.append(
            [str(length), group, *cells, f"{100 * mean_k:.1f}", "PASS" if inside else "FAIL"]
        )
    chosen = min(passing, key=passing.get) if passing else None  # type: ignore[arg-type]
    return chosen, rows


def primary_endpoint_rule(
    grpo_by_draw: Mapping[str, pd.DataFrame],
    order: Sequence[tuple[str, int]],
    band: tuple[float, float],
    competition_group: str | None,
) -> tuple[tuple[str, int] | None, list[list[str]]]:
    """The first (group, k) of ``order`` whose GRPO pass@k, each draw's mean over its seeds,
    lies in ``band`` on every draw ("competition" is the chosen L_c's group); None when none
    does (or no L_c was found and the order reaches the competition group)."""
    rows = []
    for group, k in order:
        name = competition_group if group == "competition" else group
        if name is None:
            rows.append([group, str(k), "no L_c", "FAIL"])
            continue
        means = {}
        for label, passk in grpo_by_draw.items():
            policies = sorted(set(passk["policy"]))
            values = [_group_passk(passk, policy, name).get(k) for policy in policies]
            if any(v is None for v in values) or not values:
                raise KeyError(f"draw {label}: GRPO has no pass@{k} on group {name}")
            means[label] = float(np.mean(values))
        inside = all(band[0] <= v <= band[1] for v in means.values())
        cells = ", ".join(f"{label} {100 * v:.1f}" for label, v in means.items())
        rows.append([name, str(k), cells, "PASS" if inside else "FAIL"])
        if inside:
            return (name, k), rows
    return None, rows


def draws_markdown(draws: Mapping[str, pd.DataFrame]) -> str:
    """A verdict table (a row per criterion, a column per draw), then each draw's measured
    values; a criterion a draw did not measure reads "not run" and fails the draw."""
    if not draws:
        raise ValueError("no draw to tabulate")
    order: list[str] = []
    for rows in draws.values():
        order += [name for name in rows["criterion"] if name not in order]
    requirement = {}
    for rows in draws.values():
        requirement.update(dict(zip(rows["criterion"], rows["requirement"], strict=True)))
    verdicts = {
        label: dict(zip(rows["criterion"], rows["verdict"], strict=True))
        for label, rows in draws.items()
    }
    table = markdown_table(
        ["criterion", "requirement", *draws],
        [
            [name, requirement[name], *(verdicts[label].get(name, "not run") for label in draws)]
            for name in order
        ],
    )
    passed = [
        label for label in draws if all(verdicts[label].get(name) == "PASS" for name in order)
    ]
    lines = [
        table,
        "",
        f"**Every criterion passes in {len(passed)} of {len(draws)} draws**"
        + (f" ({', '.join(passed)})." if passed else "."),
    ]
    for label, rows in draws.items():
        lines += ["", f"### {label}", "", markdown_table(list(COLUMNS), rows.values.tolist())]
    return "\n".join(lines)


def recomputed_rows(root: Path, harder: Sequence[str] = ()) -> pd.DataFrame:
    """A full run's validity rows computed here, by this code, from the run's evaluations and
    training histories (not read from its report: a calibration checkout may have run an older
    report), with the bands of its pre-registration; plus the ``harder`` groups' bands."""
    import tempfile

    from tagrpo.config.params import load_config
    from tagrpo.pipeline.layout import BASE_POLICY
    from tagrpo.report import validity
    from tagrpo.report.build import read_passk, run_bands, validity_section
    from tagrpo.report.claims import load_policy_runs, load_seed_runs

    config = load_config(root / "params.yaml")
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


def _competition_lengths(config: object) -> dict[int, str]:
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


def calibration_markdown(checkouts: Mapping[str, Path], command: str) -> tuple[str, bool]:
    """World v3's calibration over base draws (each a built checkout of the calibration
    profile with one ``base_model.warmstart.seed``): the competition rule, the primary-endpoint
    rule, every acceptance row per draw and GRPO minus the base over the draws; returns the
    markdown and whether the candidate passes."""
    import yaml

    from tagrpo.config.params import load_config
    from tagrpo.metrics.compare import draw_paired_difference
    from tagrpo.pipeline.layout import BASE_POLICY, policy_name
    from tagrpo.report.build import in_distribution_benchmarks, read_passk, run_bands
    from tagrpo.report.claims import load_policy_runs

    configs = {label: load_config(root / "params.yaml") for label, root in checkouts.items()}
    first = next(iter(configs.values()))
    seeds = {label: c.base_model.warmstart.seed for label, c in configs.items()}
    if len(set(seeds.values())) != len(seeds):
        raise ValueError(f"two checkouts are the same base draw: {seeds}")
    for label, config in configs.items():
        if config.data.synthetic != first.data.synthetic or config.train != first.train:
            raise ValueError(f"draw {label}: another world or RL budget than the first draw's")
    if first.report.preregistration is None:
        raise ValueError("report.preregistration names no pre-registration to judge by")
    root0 = next(iter(checkouts.values()))
    registration = yaml.safe_load((root0 / first.report.preregistration).read_text())
    rules = registration["calibration"]["primary_endpoint_rule"]
    bands = run_bands(first, root0)
    k = first.evaluate.ks[-1]
    lengths = _competition_lengths(first)
    grpo = [policy_name("grpo", seed) for seed in first.runs.seeds_of("grpo")]
    base = {label: read_passk(root, [BASE_POLICY]) for label, root in checkouts.items()}
    trained = {label: read_passk(root, grpo) for label, root in checkouts.items()}
    chosen, competition_rows = competition_rule(base, lengths, bands, k)
    order = [(g, int(kk)) for g, kk in rules["order"]]
    band = tuple(rules["grpo_mean_pass_at_k_band"])
    endpoint, endpoint_rows = primary_endpoint_rule(trained, order, band, chosen)
    others = [group for group in lengths.values() if group != first.report.harder_group]
    dropped = {
        name
        for group in lengths.values()
        if group != chosen
        for name in (f"harder: {group}", *(f"edges: {b}" for b in first.evaluate.groups[group]))
    }
    rows = {label: recomputed_rows(root, others) for label, root in checkouts.items()}
    decided = {
        label: frame[~frame["criterion"].isin([*NOT_ACCEPTANCE, *dropped])]
        for label, frame in rows.items()
    }
    draws_passing = [
        label for label, frame in decided.items() if (frame["verdict"] == "PASS").all()
    ]
    group, members = in_distribution_benchmarks(first)
    ks = first.evaluate.ks
    gain = draw_paired_difference(
        [load_policy_runs(root, grpo, ks) for root in checkouts.values()],
        [load_policy_runs(root, [BASE_POLICY], ks) for root in checkouts.values()],
        members,
    )[0]
    passed = chosen is not None and endpoint is not None and len(draws_passing) == len(rows)
    labels = list(checkouts)
    deciding = {name for frame in decided.values() for name in frame["criterion"]}
    measured = [dict(zip(f["criterion"], f["measured"], strict=True)) for f in rows.values()]
    others = [c for f in rows.values() for c in f["criterion"] if c not in deciding]
    shown_only = markdown_table(
        ["criterion", *labels],
        [[name, *(m.get(name, "") for m in measured)] for name in dict.fromkeys(others)],
    )
    lines = [
        f"Made by `{command}` (tagrpo.report.draws), under `{first.report.preregistration}` "
        f"({bands.source}); world seed {first.data.synthetic.seed}, base draws "
        + ", ".join(f"{label} (SFT seed {seeds[label]})" for label in labels)
        + ".",
        "",
        f"**Competition rule** (base pass@1 >= {100 * bands.harder_pass_at_1[0]:g}% and "
        f"pass@{k} in [{100 * bands.harder_pass_at_k[0]:g}, {100 * bands.harder_pass_at_k[1]:g}]%"
        " on every draw; of two, the mean pass@32 closer to 55%): "
        + (f"L_c = the group `{chosen}`." if chosen else "no length passes: the candidate fails."),
        "",
        markdown_table(
            [
                "chain length",
                "group",
                *(f"{label} pass@1 / @{k}" for label in labels),
                f"mean pass@{k}",
                "rule",
            ],
            competition_rows,
        ),
        "",
        "**Primary endpoint rule** (GRPO's pass@k, each draw's mean over its "
        f"{len(grpo)} seeds, in [{100 * rules['grpo_mean_pass_at_k_band'][0]:g}, "
        f"{100 * rules['grpo_mean_pass_at_k_band'][1]:g}]% on every draw, in the registered "
        "order): "
        + (
            f"group `{endpoint[0]}`, pass@{endpoint[1]}."
            if endpoint
            else "no (group, k) qualifies: the candidate fails."
        ),
        "",
        markdown_table(["group", "k", "GRPO pass@k per draw (%)", "rule"], endpoint_rows),
        "",
        f"**GRPO minus the base, pass@1, {group}, over the {len(labels)} draw(s)** "
        + (
            "(the draw as the replicated unit)"
            if len(labels) > 1
            else "(one draw: seeds x problems within it, conditional on that base draw)"
        )
        + f": {100 * gain.value:+.2f} [{100 * gain.low:+.2f}, {100 * gain.high:+.2f}] points "
        f"({gain.df:.1f} effective df).",
        "",
        "**Acceptance rows** (every row on every draw):",
        "",
        draws_markdown(decided),
        "",
        "Rows shown but not deciding (V5 needs TA-GRPO, which calibration never trains; the "
        "competition length the rule did not choose):",
        "",
        shown_only,
        "",
        f"**Verdict: {'PASS' if passed else 'FAIL'}** (L_c {'found' if chosen else 'not found'}; "
        f"primary endpoint {'found' if endpoint else 'not found'}; every acceptance row passes "
        f"on {len(draws_passing)} of {len(rows)} draws"
        + (f": {', '.join(draws_passing)}" if draws_passing else "")
        + ").",
    ]
    return "\n".join(lines), passed


def confirmatory_seed(commit: str, used: Sequence[int]) -> int:
    """World v3's confirmatory world seed, drawn after the freeze (``world-v3.md``, step 6): the
    first 8 hex digits of the freeze commit's SHA-1 as an integer, modulo 1,000,000; while that
    is a seed used before, add 1. Nobody can choose it, and anyone can recompute it."""
    if len(commit) < 8 or any(c not in "0123456789abcdef" for c in commit.lower()):
        raise ValueError(f"{commit!r} is not a commit's hex SHA-1")
    seed = int(commit[:8], 16) % 1_000_000
    while seed in set(used):
        seed += 1
    return seed


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run", action="append", default=[], metavar="LABEL=PATH",
        help="a draw's label and its built checkout (repeat per draw)",
    )  # fmt: skip
    parser.add_argument(
        "--harder", action="append", default=[], metavar="GROUP",
        help="(base-only draws) judge this group against the harder group's band too",
    )  # fmt: skip
    parser.add_argument(
        "--calibration", action="store_true",
        help="world v3's calibration: apply the pre-registered competition and primary-endpoint "
        "rules over the draws and judge every acceptance row",
    )  # fmt: skip
    parser.add_argument(
        "--seed-from-commit", metavar="SHA",
        help="print world v3's confirmatory world seed drawn from the freeze commit (the "
        "pre-registration's used seeds are skipped) and stop",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the markdown here (default: print)")
    args = parser.parse_args(argv)
    if args.seed_from_commit:
        import yaml

        registration = yaml.safe_load(Path("preregistration/world-v3.yaml").read_text())
        used = registration["confirmatory"]["used_world_seeds"]
        print(confirmatory_seed(args.seed_from_commit, used))
        return
    if not args.run:
        parser.error("--run LABEL=PATH is required (one per draw)")
    checkouts = {}
    for item in args.run:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            parser.error(f"--run {item!r}: expected LABEL=PATH")
        checkouts[label] = Path(path)
    if args.calibration:
        command = "python -m tagrpo.report.draws --calibration " + " ".join(
            f"--run {label}=..." for label in checkouts
        )
        text, _ = calibration_markdown(checkouts, command)
    else:
        text = draws_markdown({label: draw_rows(p, args.harder) for label, p in checkouts.items()})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
