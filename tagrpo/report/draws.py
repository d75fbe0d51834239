"""The testbed-validity rows over several base draws: is the world robust to the base model?

The base model is a random factor like the RL seed (a result that holds for one SFT seed, or
one CPU kind, is luck), so world v2's acceptance asks every criterion to pass for each of
several independent base draws (``preregistration/world-v2.md``). Each draw is a built
checkout: a full run (its report wrote ``reports/tables/validity.csv``: every row, V1 and V4
included) or a base-only run (``dvc repro evaluate_base``: the rows the base alone decides, from
:func:`tagrpo.report.validity_section.base_criteria`, as the calibration uses).

    python -m tagrpo.report.draws --run seed0=/work/draw0 --run seed1=/work/draw1 \\
        --out reports/world-v2/base-draws.md

World v3's calibration (``--calibration``, ``preregistration/world-v3.md``) also applies the
pre-registered rules over the draws: the competition length L_c (the base's pass@1 floor and
pass@32 band on every draw, for each candidate length's group), the primary endpoint (the first
(group, k) whose GRPO pass@k, a draw's mean over its seeds, lies in the band on every draw), and
the verdict on every acceptance row of every draw, with GRPO minus the base over the draws (the
draw as the replicated unit, :func:`tagrpo.metrics.draws.draw_paired_difference`).

Its confirmatory draws (``--confirmatory``, rule 7 of ``world-v3.md``): base draws 0, 1, 2 of
the confirmatory world (``profiles/confirmatory.yaml``), judged with the frozen candidate's L_c
and primary endpoint (``outcome.frozen: true`` in ``world-v3.yaml``; neither is re-chosen).
Refused unless every draw has the registered confirmatory world seed and the frozen RL budget
and the draws are exactly the registered ones. **Accepted** when every acceptance row passes on
every draw; the frozen primary endpoint's GRPO pass@k against its band (a design check for
Part B) and GRPO minus the base are shown, not deciding.

    python -m tagrpo.report.draws --confirmatory --run draw0=PATH --run draw1=PATH \\
        --run draw2=PATH --out reports/world-v3/draws.md
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.draw_checkouts import (
    COLUMNS,
    Draws,
    acceptance,
    competition_lengths,
    gain_line,
    grpo_policies,
    header_line,
    load_draws,
    shown_only,
)
from tagrpo.report.study_checkouts import parse_runs


def draw_rows(root: Path, harder: Sequence[str] = ()) -> pd.DataFrame:
    """A draw's validity rows (``COLUMNS``), from its report or, base-only, computed here
    (``harder``: the groups to judge against the harder group's band, default
    ``report.harder_group``; the calibration compares two chain lengths)."""
    from tagrpo.config.params import load_config
    from tagrpo.plumbing.layout import BASE_POLICY, report_outputs
    from tagrpo.report.inputs import read_passk, run_bands
    from tagrpo.report.validity_section import base_criteria

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


def calibration_markdown(checkouts: Mapping[str, Path], command: str) -> tuple[str, bool]:
    """World v3's calibration over base draws (each a built checkout of the calibration
    profile with one ``base_model.warmstart.seed``): the competition rule, the primary-endpoint
    rule, every acceptance row per draw and GRPO minus the base over the draws; returns the
    markdown and whether the candidate passes."""
    from tagrpo.plumbing.layout import BASE_POLICY
    from tagrpo.report.inputs import read_passk

    draws = load_draws(checkouts)
    first, bands, labels = draws.first, draws.bands, draws.labels
    rules = draws.registration["calibration"]["primary_endpoint_rule"]
    k = first.evaluate.ks[-1]
    lengths = competition_lengths(first)
    grpo = grpo_policies(first)
    base = {label: read_passk(root, [BASE_POLICY]) for label, root in checkouts.items()}
    trained = {label: read_passk(root, grpo) for label, root in checkouts.items()}
    chosen, competition_rows = competition_rule(base, lengths, bands, k)
    order = [(g, int(kk)) for g, kk in rules["order"]]
    band = tuple(rules["grpo_mean_pass_at_k_band"])
    endpoint, endpoint_rows = primary_endpoint_rule(trained, order, band, chosen)
    rows, decided = acceptance(draws, lengths, chosen)
    draws_passing = [
        label for label, frame in decided.items() if (frame["verdict"] == "PASS").all()
    ]
    passed = chosen is not None and endpoint is not None and len(draws_passing) == len(rows)
    lines = [
        header_line(command, draws),
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
        gain_line(draws, grpo),
        "",
        "**Acceptance rows** (every row on every draw):",
        "",
        draws_markdown(decided),
        "",
        "Rows shown but not deciding (V5 needs TA-GRPO, which calibration never trains; the "
        "competition length the rule did not choose):",
        "",
        shown_only(rows, decided),
        "",
        f"**Verdict: {'PASS' if passed else 'FAIL'}** (L_c {'found' if chosen else 'not found'}; "
        f"primary endpoint {'found' if endpoint else 'not found'}; every acceptance row passes "
        f"on {len(draws_passing)} of {len(rows)} draws"
        + (f": {', '.join(draws_passing)}" if draws_passing else "")
        + ").",
    ]
    return "\n".join(lines), passed


# The frozen candidate's RL budget keys a confirmatory draw must have run with (train.KEY).
FROZEN_BUDGET = ("epochs", "learning_rate", "min_lr_ratio", "batch_questions")


def _frozen_candidate(draws: Draws) -> dict[str, Any]:
    """The registration's one candidate with ``outcome.frozen: true``, after checking the
    draws against it and the ``confirmatory`` section: the world seed, the set of base draws
    and the frozen RL budget (a ValueError naming the key and both values)."""
    registration, source = draws.registration, draws.first.report.preregistration
    frozen = [
        c for c in registration.get("candidates") or [] if (c.get("outcome") or {}).get("frozen")
    ]
    if len(frozen) != 1:
        raise ValueError(
            f"{source}: {len(frozen)} candidates with outcome.frozen: true "
            f"({[c.get('id') for c in frozen]}); the confirmatory draws judge exactly one"
        )
    candidate, plan = frozen[0], registration["confirmatory"]
    for label, config in draws.configs.items():
        if config.data.synthetic.seed != plan["world_seed"]:
            raise ValueError(
                f"draw {label}: data.synthetic.seed is {config.data.synthetic.seed}, not "
                f"confirmatory.world_seed {plan['world_seed']}"
            )
        for key in FROZEN_BUDGET:
            value, registered = getattr(config.train, key), candidate["rl_budget"][key]
            if value != registered:
                raise ValueError(
                    f"draw {label}: train.{key} is {value}, not the frozen candidate "
                    f"{candidate['id']}'s rl_budget.{key} {registered}"
                )
    registered_draws = sorted(int(seed) for seed in plan["base_draws"])
    missing = sorted(set(registered_draws) - set(draws.seeds.values()))
    extra = sorted(set(draws.seeds.values()) - set(registered_draws))
    if missing or extra:
        raise ValueError(
            f"the draws' base_model.warmstart.seed {sorted(draws.seeds.values())} are not "
            f"confirmatory.base_draws {registered_draws}: missing {missing}, extra {extra}"
        )
    return candidate


def confirmatory_markdown(checkouts: Mapping[str, Path], command: str) -> tuple[str, bool]:
    """World v3's confirmatory draws (rule 7 of ``world-v3.md``; each a built checkout of the
    confirmatory profile with one ``base_model.warmstart.seed``), judged with the frozen
    candidate's L_c (not re-chosen): every acceptance row on every draw; the frozen primary
    endpoint's GRPO pass@k against its band (a design check, not deciding) and GRPO minus the
    base over the draws. Returns the markdown and whether the candidate is accepted."""
    from tagrpo.report.inputs import read_passk

    draws = load_draws(checkouts)
    first, labels = draws.first, draws.labels
    candidate = _frozen_candidate(draws)
    outcome = candidate["outcome"]
    length = int(outcome["competition_length"])
    for label, config in draws.configs.items():
        if length not in competition_lengths(config):
            raise ValueError(
                f"draw {label}: no competition group at the frozen competition_length {length} "
                f"(chain lengths evaluated: {sorted(competition_lengths(config))})"
            )
    lengths = competition_lengths(first)
    chosen = lengths[length]
    rows, decided = acceptance(draws, lengths, chosen)
    deciding = list(dict.fromkeys(c for frame in decided.values() for c in frame["criterion"]))
    failing = {}
    for label, frame in decided.items():
        verdict = dict(zip(frame["criterion"], frame["verdict"], strict=True))
        measured = dict(zip(frame["criterion"], frame["measured"], strict=True))
        failing[label] = [
            f"{name} ({measured.get(name, 'not run')})"
            for name in deciding
            if verdict.get(name) != "PASS"
        ]
    draws_passing = [label for label in labels if not failing[label]]
    registered = sorted(int(seed) for seed in draws.registration["confirmatory"]["base_draws"])
    passed = len(draws_passing) == len(labels) and sorted(draws.seeds.values()) == registered
    grpo = grpo_policies(first)
    group, k = outcome["primary_endpoint"]["group"], int(outcome["primary_endpoint"]["k"])
    band = draws.registration["calibration"]["primary_endpoint_rule"]["grpo_mean_pass_at_k_band"]
    trained = {label: read_passk(root, grpo) for label, root in checkouts.items()}
    inside, endpoint_rows = primary_endpoint_rule(trained, [(group, k)], tuple(band), chosen)
    budget = candidate["rl_budget"]
    lines = [
        header_line(command, draws),
        "",
        f"**Frozen** (candidate {candidate['id']}, RL budget {budget.get('name', '')}; "
        f"{', '.join(f'train.{key} {budget[key]}' for key in FROZEN_BUDGET)}; not re-chosen "
        f"here): L_c = chains of {length}, the group `{chosen}`; the primary endpoint: group "
        f"`{endpoint_rows[0][0]}`, pass@{k}.",
        "",
        f"**The primary endpoint's band** (a design check for Part B; it does not decide "
        f"acceptance): GRPO's pass@{k} on `{endpoint_rows[0][0]}`, each draw's mean over its "
        f"{len(grpo)} seeds (%): {endpoint_rows[0][2]}; in the registered band "
        f"[{100 * band[0]:g}, {100 * band[1]:g}]% on every draw: {'yes' if inside else 'no'}.",
        "",
        gain_line(draws, grpo),
        "",
        "**Acceptance rows** (every row on every draw):",
        "",
        draws_markdown(decided),
        "",
        "Rows shown but not deciding (V5 needs TA-GRPO, which the confirmatory draws never "
        "train; a competition length other than the frozen L_c):",
        "",
        shown_only(rows, decided),
        "",
        f"**Verdict: {'ACCEPTED' if passed else 'NOT ACCEPTED'}** (every acceptance row passes "
        f"on {len(draws_passing)} of {len(labels)} confirmatory draws"
        + (f": {', '.join(draws_passing)}" if draws_passing else "")
        + (
            "; failing: "
            + "; ".join(
                f"{label}: {', '.join(failing[label])}" for label in labels if failing[label]
            )
            if not passed
            else ""
        )
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
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--calibration", action="store_true",
        help="world v3's calibration: apply the pre-registered competition and primary-endpoint "
        "rules over the draws and judge every acceptance row",
    )  # fmt: skip
    mode.add_argument(
        "--confirmatory", action="store_true",
        help="world v3's confirmatory draws: judge every acceptance row on every draw with the "
        "frozen candidate's L_c (accepted when all pass)",
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
    try:  # a label given twice is refused, not silently the last one's draw
        checkouts = parse_runs(args.run)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    if args.calibration or args.confirmatory:
        flag = "--calibration" if args.calibration else "--confirmatory"
        command = f"python -m tagrpo.report.draws {flag} " + " ".join(
            f"--run {label}=..." for label in checkouts
        )
        judge = calibration_markdown if args.calibration else confirmatory_markdown
        text, _ = judge(checkouts, command)
    else:
        text = draws_markdown({label: draw_rows(p, args.harder) for label, p in checkouts.items()})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
