"""The testbed-validity rows over several base draws: is the world robust to the base model?

The base model is a random factor like the RL seed (a result that holds for one SFT seed, or
one CPU kind, is luck), so world v2's acceptance asks every criterion to pass for each of
several independent base draws (``preregistration/world-v2.md``). Each draw is a built
checkout: a full run (its report wrote ``reports/tables/validity.csv``: every row, V1 and V4
included) or a base-only run (``dvc repro evaluate_base``: the rows the base alone decides, from
:func:`tagrpo.report.build.base_criteria`, as the calibration uses).

    python -m tagrpo.report.draws --run seed0=/work/draw0 --run seed1=/work/draw1 \\
        --out reports/world-v2/base-draws.md
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run", action="append", required=True, metavar="LABEL=PATH",
        help="a draw's label and its built checkout (repeat per draw)",
    )  # fmt: skip
    parser.add_argument(
        "--harder", action="append", default=[], metavar="GROUP",
        help="(base-only draws) judge this group against the harder group's band too",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="write the markdown here (default: print)")
    args = parser.parse_args(argv)
    draws = {}
    for item in args.run:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            parser.error(f"--run {item!r}: expected LABEL=PATH")
        draws[label] = draw_rows(Path(path), args.harder)
    text = draws_markdown(draws)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
