"""Report building blocks: Table 1-style pass@k tables, pass@k curves, count tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.2f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def percent(value: float | None) -> str:
    """A share as a percentage with one decimal; ``n/a`` for a missing or NaN value."""
    return "n/a" if value is None or value != value else f"{100 * value:.1f}"


def table1(passk: pd.DataFrame, k: int, groups: Mapping[str, Sequence[str]]) -> str:
    """pass@k in percent, one row per policy: each group's benchmarks then its average."""
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
    return markdown_table(header, rows)


def passk_long_table(passk: pd.DataFrame) -> str:
    """Every (policy, benchmark or group, k) with its bootstrap 95% CI, in percent."""
    ks = sorted(passk["k"].unique())
    rows = []
    for (policy, name), frame in passk.groupby(["policy", "name"], sort=False):
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
                    f"{100 * row.pass_at_k:.1f} [{100 * row.ci_low:.1f}, {100 * row.ci_high:.1f}]"
                )
        rows.append([policy, name, *cells])
    return markdown_table(["policy", "benchmark", *[f"pass@{k}" for k in ks]], rows)


def passk_curves(passk: pd.DataFrame, path: Path, title: str) -> None:
    """One panel per benchmark or group: pass@k against k (log2 axis), one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(passk["name"]))
    columns = min(3, len(names))
    rows = -(-len(names) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False)
    for axis, name in zip(axes.flat, names, strict=False):
        for policy, frame in passk[passk["name"] == name].groupby("policy", sort=False):
            frame = frame.sort_values("k")
            axis.plot(frame["k"], 100 * frame["pass_at_k"], marker="o", label=policy)
            if frame["ci_low"].notna().all():
                axis.fill_between(
                    frame["k"], 100 * frame["ci_low"], 100 * frame["ci_high"], alpha=0.15
                )
        axis.set_xscale("log", base=2)
        axis.set_title(name)
        axis.set_xlabel("k")
        axis.set_ylabel("pass@k (%)")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(names) :]:
        axis.axis("off")
    axes.flat[0].legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
