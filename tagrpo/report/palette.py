"""The one palette of every figure: the report's PNGs (:mod:`tagrpo.report`) and the DVC plot
templates (:mod:`tagrpo.pipeline.plots`) both take their colours and line styles from here.

Methods are told apart by colour (TA-GRPO red, as in the paper; the base policy black, drawn
apart from every trained method), seeds by line style, and a multiple-choice benchmark's
chance floor is a grey dashed line.
"""

from __future__ import annotations

BASE_COLOUR = "#000000"
CHANCE_COLOUR = "#555555"
CHANCE_DASH = (4, 3)  # on/off lengths in points: matplotlib's (0, CHANCE_DASH), Vega's strokeDash
# Fixed colours for the registered methods (matplotlib's tab10 without its grey); a method
# registered later takes the next unused colour of SPARE_COLOURS.
METHOD_COLOURS = {
    "grpo": "#1f77b4",
    "grpo_ds": "#17becf",
    "grpo_x4": "#2ca02c",
    "grpo_x4_ds": "#bcbd22",
    "ta_grpo_star": "#ff7f0e",
    "ta_grpo_unanchored": "#9467bd",
    "ta_grpo": "#d62728",
    "avspo": "#8c564b",
}
SPARE_COLOURS = ("#e377c2", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")
# Seed 0 solid, 1 dashed, 2 dotted, 3 dash-dot, then again (matplotlib names).
SEED_STYLES = ("-", "--", ":", "-.")


def method_colours() -> dict[str, str]:
    """``base`` black, then every registered method (:data:`tagrpo.algorithms.METHODS`) its own
    colour; an error when the methods outnumber the colours."""
    # The method registry loads numpy and pydantic; building the plots page needs neither.
    from tagrpo.algorithms import METHODS

    colours = {"base": BASE_COLOUR}
    spare = [c for c in SPARE_COLOURS if c not in METHOD_COLOURS.values()]
    for method in METHODS:
        if method in METHOD_COLOURS:
            colours[method] = METHOD_COLOURS[method]
        elif spare:
            colours[method] = spare.pop(0)
        else:
            raise ValueError(f"no colour left for method {method!r}: extend SPARE_COLOURS")
    return colours


def method_colour(method: str) -> str:
    """The colour of ``method`` (``base`` included); an error naming an unknown method."""
    colours = method_colours()
    if method not in colours:
        raise KeyError(f"no colour for {method!r}: not a registered method ({sorted(colours)})")
    return colours[method]


def seed_style(seed: str | int) -> str:
    """The line style of a seed (``""`` - the base policy - solid)."""
    if seed == "":
        return SEED_STYLES[0]
    return SEED_STYLES[int(seed) % len(SEED_STYLES)]
