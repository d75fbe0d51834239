"""Report figures a researcher reads at a glance, and the chance floors of multiple-choice
benchmarks: one palette shared with the DVC plots, a colour per method and a line style per
seed, the k axis labelled 1..32, the legend beside the panels (never over the data), a figure
whose runs are not in the profile saying so, and chance pass@k beside every multiple-choice row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from choice_benchmark import WITH_MINI_CHOICE
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from tagrpo.config.params import config_with, load_config
from tagrpo.metrics.compare import chance_pass_at_k
from tagrpo.report import paper
from tagrpo.report.chance import multiple_choice_options, uninformative_from
from tagrpo.report.markdown import passk_curves, passk_long_table, table1
from tagrpo.report.palette import BASE_COLOUR, CHANCE_COLOUR, method_colour

KS = (1, 2, 4, 8, 16, 32)
OPTIONS = {"choice": 20}
GROUPS = {"ood": ["arith", "choice"]}


def _policy_passk() -> pd.DataFrame:
    """evals/*/passk.csv rows of base, two GRPO seeds and a TA-GRPO seed."""
    rows = []
    for policy, shift in (
        ("base", 0.0),
        ("grpo-s0", 0.01),
        ("grpo-s1", 0.02),
        ("ta_grpo-s0", 0.03),
    ):
        for name, kind in (("arith", "benchmark"), ("choice", "benchmark"), ("ood", "group")):
            for k in KS:
                value = min(1.0, 0.05 * k**0.8 + shift)
                low, high = (np.nan, np.nan) if kind == "group" else (value - 0.02, value + 0.02)
                rows.append(
                    {"policy": policy, "name": name, "kind": kind, "k": k, "pass_at_k": value,
                     "ci_low": low, "ci_high": high}
                )  # fmt: skip
    return pd.DataFrame(rows)


def _method_frame(methods: tuple[str, ...], columns: tuple[str, ...]) -> pd.DataFrame:
    """paper.scores' long form (percent) for ``methods`` over ``columns``."""
    rows = []
    for index, method in enumerate(methods):
        for column in columns:
            for k in KS:
                value = min(100.0, 5 * k**0.8 + index)
                rows.append(
                    {"method": method, "column": column, "k": k, "value": value,
                     "low": value - 3, "high": value + 3}
                )  # fmt: skip
    return pd.DataFrame(rows)


def _data_axes(figure: Figure) -> list[Any]:
    return [a for a in figure.axes if a.axison]


def _overlaps(a: Any, b: Any) -> bool:
    return not (a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0)


def _renderer(figure: Figure) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)  # the saved figure was closed: draw it again
    canvas.draw()
    return canvas.get_renderer()


def _legends(figure: Figure) -> list[Any]:
    return [*figure.legends, *(a.get_legend() for a in figure.axes if a.get_legend())]


def test_report_and_dvc_plots_share_one_palette(tmp_path: Path, saved: list[Figure]) -> None:
    import tagrpo.pipeline.plots
    import tagrpo.report.palette

    assert tagrpo.pipeline.plots.method_colours is tagrpo.report.palette.method_colours
    scale = tagrpo.pipeline.plots.passk_template()["spec"]["layer"][0]["encoding"]["color"]["scale"]
    dvc_colours = dict(zip(scale["domain"], scale["range"], strict=True))
    methods = ("base", "grpo", "grpo_ds", "ta_grpo")
    paper.curves_figure(_method_frame(methods, ("arith",)), ["arith"], tmp_path / "f5.png", {})
    (panel,) = _data_axes(saved[-1])
    drawn = [to_hex(line.get_color()) for line in panel.get_lines()]
    assert drawn == [dvc_colours[m] for m in methods]


def test_every_method_its_own_colour_and_the_base_apart() -> None:
    from tagrpo.algorithms import METHODS
    from tagrpo.report.palette import method_colours

    colours = method_colours()
    assert set(colours) == {"base", *METHODS}
    assert len(set(colours.values())) == len(colours)
    assert colours["base"] == "#000000" and colours["ta_grpo"] == "#d62728"
    assert CHANCE_COLOUR not in colours.values()


def test_policy_curves_colour_by_method_style_by_seed_and_k_labelled(
    tmp_path: Path, saved: list[Figure]
) -> None:
    passk_curves(_policy_passk(), tmp_path / "c.png", "t", options=OPTIONS, groups=GROUPS)
    figure = saved[-1]
    panels = _data_axes(figure)
    assert [p.get_title() for p in panels] == ["arith", "choice (20 options)", "ood"]
    arith = panels[0]
    # The four policies, in order, and no other line (no chance floor on a free-form panel).
    policies = ["base", "grpo-s0", "grpo-s1", "ta_grpo-s0"]
    drawn = arith.get_lines()
    assert len(drawn) == 4
    lines = {
        p: (to_hex(line.get_color()), line.get_linestyle())
        for p, line in zip(policies, drawn, strict=True)
    }
    assert lines["base"] == ("#000000", "-")
    assert lines["grpo-s0"] == ("#1f77b4", "-") and lines["grpo-s1"] == ("#1f77b4", "--")
    assert lines["ta_grpo-s0"] == ("#d62728", "-")
    for panel in panels:
        assert [t.get_text() for t in panel.get_xticklabels()] == ["1", "2", "4", "8", "16", "32"]
    # The legend sits in its own column, clear of every panel.
    renderer = _renderer(figure)
    (legend,) = _legends(figure)
    box = legend.get_window_extent(renderer)
    assert not any(_overlaps(box, p.get_window_extent(renderer)) for p in panels)
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[:3] == ["base", "grpo", "ta_grpo"]  # one entry per method, not per policy
    assert "seed 0" in labels and "seed 1" in labels


def test_chance_floor_drawn_on_multiple_choice_panels_only(
    tmp_path: Path, saved: list[Figure]
) -> None:
    passk_curves(_policy_passk(), tmp_path / "c.png", "t", options=OPTIONS, groups=GROUPS)
    arith, choice, ood = _data_axes(saved[-1])
    chance = [
        line
        for line in choice.get_lines()
        if line.get_linestyle() == "--" and to_hex(line.get_color()) == "#555555"
    ]
    assert len(chance) == 1
    assert list(chance[0].get_ydata()) == [100 * chance_pass_at_k(20, k) for k in KS]
    (floor,) = ood.get_lines()[4:]  # the group's floor: mean of arith (0) and choice
    assert list(floor.get_ydata()) == pytest.approx([50 * chance_pass_at_k(20, k) for k in KS])
    assert len(arith.get_lines()) == 4
    # Figure 5 the same, with only the base and TA-GRPO shaded.
    methods = ("base", "grpo", "grpo_ds", "grpo_x4", "ta_grpo")
    frame = _method_frame(methods, ("arith", "choice"))
    paper.curves_figure(frame, ["arith", "choice"], tmp_path / "f5.png", OPTIONS)
    f5_arith, f5_choice = _data_axes(saved[-1])
    assert len(f5_arith.collections) == 2  # base and ta_grpo bands, not five
    assert [t.get_text() for t in f5_choice.get_xticklabels()] == [str(k) for k in KS]
    assert f5_choice.get_lines()[-1].get_ydata()[-1] == 100 * chance_pass_at_k(20, 32)


def test_a_figure_whose_runs_are_not_in_the_profile_says_so(
    tmp_path: Path, saved: list[Figure]
) -> None:
    one_x = pd.DataFrame(
        [{"method": m, "data_multiple": 1.0, "value": 60.0, "low": 55.0, "high": 65.0}
         for m in ("grpo", "ta_grpo")]
    )  # fmt: skip
    paper.scaling_figure(one_x, ["grpo"], 32, tmp_path / "f7.png")
    texts = [t.get_text() for a in saved[-1].axes for t in a.texts]
    assert any("not run in this profile" in t for t in texts)
    assert not _data_axes(saved[-1])  # no empty or one-point axis
    frame = _method_frame(("grpo", "ta_grpo"), ("arith",))
    paper.bars_figure(frame, ("grpo_x4", "grpo_x4_ds"), ["arith"], 32, "t", tmp_path / "f6.png")
    texts = [t.get_text() for a in saved[-1].axes for t in a.texts]
    assert texts == ["Not run in this profile: grpo_x4, grpo_x4_ds."]


def test_no_data_scaling_run_and_no_ta_grpo_give_an_empty_frame_and_a_not_run_figure(
    tmp_path: Path, saved: list[Figure]
) -> None:
    frame = paper.scaling_frame({}, {}, ["arith"], 32)
    assert frame.empty
    assert list(frame.columns) == ["method", "data_multiple", "value", "low", "high"]
    paper.scaling_figure(frame, [], 32, tmp_path / "f7.png")
    texts = [t.get_text() for a in saved[-1].axes for t in a.texts]
    assert any("not run in this profile" in t for t in texts)


def test_bars_legend_beside_and_chance_marked(tmp_path: Path, saved: list[Figure]) -> None:
    frame = _method_frame(("grpo", "ta_grpo"), ("arith", "choice"))
    floors = {"arith": None, "choice": 100 * chance_pass_at_k(20, 32)}
    paper.bars_figure(
        frame, paper.ABLATION, ["arith", "choice"], 32, "t", tmp_path / "f8.png", floors
    )
    figure = saved[-1]
    (axis,) = _data_axes(figure)
    assert "not run in this profile: ta_grpo_star, ta_grpo_unanchored" in axis.get_title()
    (chance,) = [line for line in axis.get_lines() if to_hex(line.get_color()) == CHANCE_COLOUR]
    assert list(chance.get_ydata()) == [floors["choice"]] * 2
    renderer = _renderer(figure)
    (legend,) = _legends(figure)
    assert not _overlaps(legend.get_window_extent(renderer), axis.get_window_extent(renderer))


def test_tables_show_the_exact_chance_beside_multiple_choice_rows() -> None:
    passk = _policy_passk()
    at_32 = f"{100 * chance_pass_at_k(20, 32):.2f}"
    group_32 = f"{100 * chance_pass_at_k(20, 32) / 2:.2f}"
    lines = table1(passk, 32, GROUPS, options=OPTIONS).splitlines()
    assert lines[0] == "| policy | arith | choice | ood avg |"
    assert lines[-1] == f"| chance (uniform guess) | - | {at_32} | {group_32} |"
    assert table1(passk, 32, {"g": ["arith"]}, options=OPTIONS).count("chance") == 0
    long = passk_long_table(passk, options=OPTIONS, groups=GROUPS).splitlines()
    first_choice = next(i for i, line in enumerate(long) if "| choice |" in line)
    floors = " | ".join(f"{100 * chance_pass_at_k(20, k):.1f}" for k in KS)
    assert long[first_choice] == f"| chance (20 options) | choice | {floors} |"
    assert long[first_choice + 1].startswith("| base | choice |")
    assert sum("chance" in line for line in long) == 2  # choice and the ood group, once each
    frame = _method_frame(("grpo",), ("arith", "choice", "ood"))
    floors_at_32 = {"arith": None, "choice": 100 * chance_pass_at_k(20, 32), "ood": None}
    text, _ = paper.table1(frame, ["arith", "choice", "ood"], 32, None, floors_at_32)
    assert (
        text.splitlines()[-1]
        == f"| chance (uniform guess) | - | {100 * chance_pass_at_k(20, 32):.1f} | - |"
    )


def test_scores_table_has_a_chance_column_for_groups_holding_a_choice_benchmark() -> None:
    from tagrpo.report.statistics_section import scores_markdown

    scores = pd.DataFrame(
        [{"method": "grpo", "group": g, "seeds": 3, "k": k, "pass_at_k": 0.5, "ci_low": 0.4,
          "ci_high": 0.6} for g in ("competition", "ood") for k in (1, 32)]
    )  # fmt: skip
    groups = {"competition": ["arith"], "ood": ["arith", "choice"]}
    lines = scores_markdown(scores, 32, OPTIONS, groups, {"grpo": "10"}).splitlines()
    assert lines[0].endswith("| chance pass@1 / pass@32 |")
    assert lines[2].endswith("| - |")
    floors = f"{50 * chance_pass_at_k(20, 1):.1f} / {50 * chance_pass_at_k(20, 32):.1f}"
    assert lines[3].endswith(f"| {floors} |")


def test_uninformative_from_one_definition() -> None:
    # GPQA-like: 4 options, a base well above guessing: guessing passes 90% at k = 16.
    base = {1: 0.5, 2: 0.7, 4: 0.85, 8: 0.95, 16: 0.99, 32: 1.0}
    assert uninformative_from(4, KS, base) == (16, "guessing reaches 99.0% (>= 90%)")
    # A base policy at chance (world v2's rejected mini_choice): uninformative from k = 1.
    at_chance = {k: chance_pass_at_k(20, k) - 0.0002 for k in KS}
    k, why = uninformative_from(20, KS, at_chance)
    assert k == 1 and why.startswith("the base policy is 0.02 points below guessing")
    # Well above guessing with 20 options: informative at every k up to 32.
    assert uninformative_from(20, KS, {k: 0.95 for k in KS}) == (None, "informative at every k")
    with pytest.raises(KeyError, match="pass@32"):
        uninformative_from(20, KS, {k: 0.95 for k in KS[:-1]})


def test_chance_section_states_the_k_for_each_choice_benchmark() -> None:
    from tagrpo.report.paper_section import chance_section

    passk = _policy_passk()
    section = chance_section(passk, OPTIONS, GROUPS)
    assert "## Chance floors of the multiple-choice benchmarks" in section
    assert "- **choice** (20 options): stops being informative at pass@" in section
    assert chance_section(passk, {}, GROUPS).endswith("guessing scores nothing.")


def test_multiple_choice_options_come_from_the_data_source() -> None:
    assert multiple_choice_options(load_config()) == {}  # world v2 has no multiple choice
    with_choice = config_with(WITH_MINI_CHOICE)
    assert multiple_choice_options(with_choice) == {"mini_choice": 10}
    hub = config_with(
        {
            "data.source": "hub",
            "evaluate.groups": {"ood": ["gpqa_diamond"]},
            "report.in_distribution": "ood",
            "report.primary_group": None,  # its one group is multiple choice
            "report.harder_group": None,  # no competition group
        }
    )
    assert multiple_choice_options(hub) == {"gpqa_diamond": 4}


def test_training_reward_figure_mean_over_seeds_with_a_clipped_band(
    tmp_path: Path, saved: list[Figure]
) -> None:
    from tagrpo.report.training import reward_figure

    histories = {
        "grpo": [[0.0, 0.1, 0.2, 0.3], [0.0, 0.3, 0.2, 0.5], [0.0, 0.2, 0.2, 0.4]],
        "ta_grpo": [[0.1, 0.2, 0.3, 0.4]],  # one seed: a line, no band
    }
    reward_figure(histories, tmp_path / "reward.png")
    (figure,) = saved
    grpo, ta, *_ = figure.axes
    mean = grpo.lines[0]
    assert list(mean.get_ydata()) == pytest.approx([0.0, 20.0, 20.0, 40.0])  # percent
    assert to_hex(mean.get_color()) == method_colour("grpo")
    band = grpo.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == 0.0  # step 1: every seed 0, clipped at 0 (never below a reward of 0)
    assert len(ta.collections) == 0  # no band with one seed
    assert [line.get_linestyle() for line in ta.lines] == ["--", "-"]  # GRPO's mean, dashed
    assert ta.get_title() == "ta_grpo (1 seed)"


def test_passk_grid_one_panel_per_benchmark_and_method_each_over_the_base(
    tmp_path: Path, saved: list[Figure]
) -> None:
    rows = [
        {"method": method, "column": column, "k": k, "value": value + k, "low": value,
         "high": value + 2 * k}
        for method, value in (("base", 10.0), ("grpo", 12.0), ("ta_grpo", 14.0))
        for column in ("arith", "choice")
        for k in KS
    ]  # fmt: skip
    paper.curves_grid_figure(pd.DataFrame(rows), ["arith", "choice"], tmp_path / "g.png", OPTIONS)
    (figure,) = saved
    panels = figure.axes
    assert len(panels) == 4  # 2 benchmarks x 2 trained methods
    assert [p.get_title() for p in panels[:2]] == ["grpo", "ta_grpo"]
    for index, panel in enumerate(panels):
        method = ("grpo", "ta_grpo")[index % 2]
        colours = [to_hex(line.get_color()) for line in panel.lines]
        assert colours[:2] == [BASE_COLOUR, method_colour(method)]
        assert len(panel.collections) == 2  # both intervals shaded
    # The multiple-choice row has its chance floor; the free-form row has none.
    assert [to_hex(line.get_color()) for line in panels[2].lines][-1] == to_hex(CHANCE_COLOUR)
    assert all(to_hex(line.get_color()) != to_hex(CHANCE_COLOUR) for line in panels[0].lines)


def test_anchoring_figure_draws_a_one_step_run(tmp_path: Path, saved: list[Figure]) -> None:
    """A one-step run (the real-tiny profile) has one point per series: the mean and ESS are
    drawn as markers and the token bands as vertical bars (a line or a fill drew nothing)."""
    from tagrpo.report.anchoring import HISTORY_COLUMNS, anchoring_figure

    row = dict.fromkeys(HISTORY_COLUMNS, 0.5) | {"step": 1}
    row |= {"anchoring/log_ratio_p1": -0.4, "anchoring/log_ratio_p99": 1.2}
    anchoring_figure({"ta_grpo-s0": pd.DataFrame([row])}, tmp_path / "a.png")
    top, bottom = saved[0].axes[0], saved[0].axes[1]
    assert [line.get_marker() for line in top.get_lines() if len(line.get_xdata()) == 1] == ["s"]
    bars = [segment for c in top.collections for segment in c.get_segments()]
    assert sorted((s[0][1], s[1][1]) for s in bars) == [(-0.4, 1.2), (0.5, 0.5)]
    assert {line.get_marker() for line in bottom.get_lines()} == {"s", "o"}
