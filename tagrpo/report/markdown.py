"""Report building blocks: Table 1-style pass@k tables (with the chance floors of multiple-choice
benchmarks), pass@k curves, count tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.chance import chance_floor
from tagrpo.report.palette import method_colour, seed_style
from tagrpo.report.plot_data import split_policy
from tagrpo.report.style import (
    CHANCE_SHADED_LABEL,
    chance_line,
    fill_legend,
    k_axis,
    panels_with_legend,
    save,
)


def percent(value: float | None) -> str:
    """A share as a percentage with one decimal; ``n/a`` for a missing or NaN value."""
    return "n/a" if value is None or value != value else f"{100 * value:.1f}"


def chance_label(name: str, options: Mapping[str, int]) -> str:
    """The row label of a chance floor: a benchmark's options, or a group's mean of floors."""
    if name in options:
        return f"chance ({options[name]} options)"
    return "chance (mean of its benchmarks' floors; free-form 0)"


def table1(
    passk: pd.DataFrame,
    k: int,
    groups: Mapping[str, Sequence[str]],
    *,
    options: Mapping[str, int],
) -> str:
    """pass@k in percent, one row per policy: each group's benchmarks then its average; a last
    row with the chance pass@k of the multiple-choice benchmarks (``options``: their answers)
    and of the groups holding one (``-``: free-form)."""
    at_k = passk[passk["k"] == k]
    header = ["policy"]
    for group, members in groups.items():
        header += [*members, f"{group} avg"]
    rows = []
    for policy, frame in at_k.groupby("policy", sort=False):
        values = dict(zip(frame["name"], frame["pass_at_k"] * 100, strict=True))
        row: list[Any] = [policy]
        for group, members in groups.items():
            row += [values.get(member, "n/a") for member in members]
            row.append(values.get(group, "n/a"))
        rows.append(row)
    if any(name in options for members in groups.values() for name in members):
        chance: list[Any] = ["chance (uniform guess)"]
        for group, members in groups.items():
            for name in [*members, group]:
                floor = chance_floor(name, k, options, groups)
                chance.append("-" if floor is None else 100 * floor)
        rows.append(chance)
    return markdown_table(header, rows)


def passk_long_table(
    passk: pd.DataFrame, *, options: Mapping[str, int], groups: Mapping[str, Sequence[str]]
) -> str:
    """Every (benchmark or group, policy, k) with its bootstrap 95% CI, in percent; a
    multiple-choice benchmark (``options``) and a group holding one open with their chance
    pass@k row."""
    ks = sorted(passk["k"].unique())
    rows = []
    names = list(dict.fromkeys(passk["name"]))
    for name in names:
        if chance_floor(name, 1, options, groups) is not None:
            floors = [100 * (chance_floor(name, int(k), options, groups) or 0.0) for k in ks]
            rows.append([chance_label(name, options), name, *[f"{f:.1f}" for f in floors]])
        for policy, frame in passk[passk["name"] == name].groupby("policy", sort=False):
            by_k = {row.k: row for row in frame.itertuples()}
            cells = []
            for k in ks:
                if k not in by_k:
                    cells.append("n/a")
                    continue
                row = by_k[k]
                if pd.isna(row.ci_low):
                    cells.append(f"{100 * row.pass_at_k:.1f}")
                else:
                    cells.append(
                        f"{100 * row.pass_at_k:.1f} "
                        f"[{100 * row.ci_low:.1f}, {100 * row.ci_high:.1f}]"
                    )
            rows.append([policy, name, *cells])
    return markdown_table(["policy", "benchmark", *[f"pass@{k}" for k in ks]], rows)


def passk_curves(
    passk: pd.DataFrame,
    path: Path,
    title: str,
    *,
    options: Mapping[str, int],
    groups: Mapping[str, Sequence[str]],
) -> None:
    """One panel per benchmark or group: pass@k against k (log2 axis labelled 1, 2, 4, ...),
    one line per policy: its method's colour, its seed's line style (intervals: the tables);
    the chance floor of a multiple-choice benchmark, or of a group holding one, dashed."""
    from matplotlib.lines import Line2D  # matplotlib: only when a figure is drawn

    names = list(dict.fromkeys(passk["name"]))
    ks = sorted(int(k) for k in passk["k"].unique())
    figure, panels, legend_axis = panels_with_legend(len(names), columns=3)
    methods: dict[str, str] = {}
    seeds: set[str] = set()
    chance = None
    for axis, name in zip(panels, names, strict=True):
        for policy, frame in passk[passk["name"] == name].groupby("policy", sort=False):
            method, seed, _ = split_policy(policy)
            methods[method] = method_colour(method)
            if seed != "":
                seeds.add(seed)
            frame = frame.sort_values("k")
            axis.plot(
                frame["k"], 100 * frame["pass_at_k"], marker="o", ms=2.5, color=methods[method],
                linestyle=seed_style(seed), lw=2.0 if method == "base" else 1.1,
            )  # fmt: skip
        if chance_floor(name, 1, options, groups) is not None:
            floors = [100 * (chance_floor(name, k, options, groups) or 0.0) for k in ks]
            chance = chance_line(axis, ks, floors, shade=True)
        k_axis(axis, ks)
        axis.set_title(f"{name} ({options[name]} options)" if name in options else name)
        axis.set_ylabel("pass@k (%)")
        axis.grid(alpha=0.3)
    entries = [(Line2D([], [], color=c, lw=2), m) for m, c in methods.items()]
    entries += [
        (Line2D([], [], color="#444444", linestyle=seed_style(s)), f"seed {s}")
        for s in sorted(seeds, key=int)
    ]
    if chance is not None:
        entries.append((chance, CHANCE_SHADED_LABEL))
    fill_legend(legend_axis, entries, title="method / seed")
    figure.suptitle(title)
    figure.tight_layout()
    save(figure, path)
