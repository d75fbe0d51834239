"""What every report figure shares: panels with the legend in its own column (never over the
data), the k axis labelled 1, 2, 4, ..., the chance floor as a dashed line, and a figure that
says "not run in this profile" instead of drawing an empty axis. Colours:
:mod:`tagrpo.report.palette`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tagrpo.report.palette import CHANCE_COLOUR, CHANCE_DASH

CHANCE_LABEL = "chance (uniform guess)"
CHANCE_SHADED_LABEL = "chance (uniform guess;\nshaded: at or below it)"


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def panels_with_legend(
    count: int,
    columns: int,
    panel_size: tuple[float, float] = (4.0, 3.1),
    legend_width: float = 2.4,
) -> tuple[Any, list[Any], Any]:
    """A figure of ``count`` panels on a grid of ``columns`` and a legend column on the right
    (its axis spans every row): (figure, panels, legend axis)."""
    plt = pyplot()
    columns = max(1, min(columns, count))
    rows = -(-count // columns)
    width, height = panel_size
    figure = plt.figure(figsize=(width * columns + legend_width, height * rows))
    ratios = [width] * columns + [legend_width]
    grid = figure.add_gridspec(rows, columns + 1, width_ratios=ratios)
    panels = [figure.add_subplot(grid[i // columns, i % columns]) for i in range(count)]
    legend_axis = figure.add_subplot(grid[:, columns])
    legend_axis.axis("off")
    return figure, panels, legend_axis


def fill_legend(
    legend_axis: Any, entries: Sequence[tuple[Any, str]], title: str | None = None
) -> None:
    """The legend of ``(handle, label)`` entries in its own axis (left-aligned, no frame)."""
    handles = [handle for handle, _ in entries]
    labels = [label for _, label in entries]
    legend_axis.legend(
        handles, labels, loc="center left", frameon=False, fontsize=8, title=title, borderaxespad=0
    )


def k_axis(axis: Any, ks: Sequence[int]) -> None:
    """A log2 k axis with a tick labelled at each evaluated k (1, 2, 4, ..., not 2^0, 2^1)."""
    from matplotlib.ticker import NullLocator

    ks = sorted(int(k) for k in ks)
    axis.set_xscale("log", base=2)
    axis.set_xticks(ks, [str(k) for k in ks])
    axis.xaxis.set_minor_locator(NullLocator())
    axis.set_xlabel("k")


def chance_line(
    axis: Any, xs: Sequence[float], floors: Sequence[float], shade: bool = False
) -> Any:
    """The chance floor (percent) at ``xs``, grey dashed over the data, and with ``shade`` the
    region below it grey (a curve riding the floor still shows it); returns the line."""
    (line,) = axis.plot(
        xs, floors, color=CHANCE_COLOUR, linestyle=(0, CHANCE_DASH), linewidth=2.0, zorder=5
    )
    if shade:
        axis.fill_between(xs, 0, floors, color=CHANCE_COLOUR, alpha=0.15, lw=0, zorder=0)
    return line


def not_run_figure(path: Path, title: str, message: str) -> None:
    """A figure that states why it has no data (instead of an empty or one-point axis)."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6.0, 2.2))
    axis.axis("off")
    axis.set_title(title)
    axis.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=10)
    save(figure, path)


def save(figure: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    pyplot().close(figure)
