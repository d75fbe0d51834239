"""The study's statistics over base draws (tagrpo.metrics.compare): a within-policy mean over
draws, the widening on pass@k and on -log(1 - pass@k), the A/A split within draws, GRPO's
seed and draw components and the projected half-width of Part B, on hand-made numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as student

from tagrpo.metrics.compare import (
    NotMeasurable,
    SeedRuns,
    estimate_half_width,
    quadrature_interval,
)
from tagrpo.metrics.draws import (
    draw_log_miss_widening,
    draw_mean,
    draw_paired_difference,
    draw_seed_components,
    draw_split_seeds,
    draw_widening,
    projected_draw_half_width,
)

pytestmark = pytest.mark.core

ONE = pd.MultiIndex.from_arrays([["x"], ["1"]])
TWO = pd.MultiIndex.from_arrays([["x", "x"], ["1", "2"]])


def _runs(rows: list[list[float]], index: pd.MultiIndex = TWO, ks=(1,)) -> SeedRuns:
    """``rows[s][j]`` at one k (or ``rows[s][j]`` a list over ks)."""
    values = np.array(rows, dtype=float)
    if values.ndim == 2:
        values = values[:, :, None]
    return SeedRuns(values, index, tuple(ks))


def test_draw_mean_of_a_within_policy_difference() -> None:
    """Per draw the seeds' mean over problems, then the mean over draws; with every problem
    alike the problem component is 0 and the variance is the draws' mean square / draws."""
    draws = [_runs([[0.2, 0.2], [0.4, 0.4]]), _runs([[0.26, 0.26], [0.30, 0.30]])]
    (estimate,) = draw_mean(draws, ["x"])
    assert estimate.value == pytest.approx(0.29)  # (0.3 + 0.28) / 2
    assert estimate.se == pytest.approx(np.sqrt(np.var([0.3, 0.28], ddof=1) / 2))
    assert estimate.df == pytest.approx(1.0) and estimate.seeds == (2,)
    assert estimate.high == pytest.approx(0.29 + student.ppf(0.975, 1) * estimate.se)
    # One draw: seeds x problems within it (the seeds' mean square / 2, 1 df).
    (within,) = draw_mean(draws[:1], ["x"])
    assert within.value == pytest.approx(0.3) and within.seeds == (2,)
    assert within.se == pytest.approx(np.sqrt(np.var([0.2, 0.4], ddof=1) / 2))
    # Bounds clip the interval, not the estimate.
    (clipped,) = draw_mean(draws, ["x"], bounds=(0.0, 0.3))
    assert clipped.high == 0.3 and clipped.value == pytest.approx(0.29)


def test_draw_widening_is_the_paired_difference_of_each_runs_growth() -> None:
    ks = (1, 4)
    # TA grows by 0.3 and 0.1 (draw 0's seeds), 0.2 (draw 1); GRPO by 0.1 in both draws.
    ta = [
        _runs([[[0.2, 0.5]], [[0.2, 0.3]]], ONE, ks),
        _runs([[[0.3, 0.5]]], ONE, ks),
    ]
    grpo = [_runs([[[0.1, 0.2]]], ONE, ks), _runs([[[0.2, 0.3]]], ONE, ks)]
    estimate = draw_widening(ta, grpo, ["x"], 1, 4)
    # Per draw: (0.2 - 0.1) and (0.2 - 0.1): the mean 0.1, no variance between draws.
    assert estimate.value == pytest.approx(0.1) and estimate.k == 4
    assert estimate.se == pytest.approx(0.0, abs=1e-12)
    grown = draw_paired_difference(
        [_runs([[0.3], [0.1]], ONE), _runs([[0.2]], ONE)],
        [_runs([[0.1]], ONE), _runs([[0.1]], ONE)],
        ["x"],
    )[0]
    assert grown.value == pytest.approx(estimate.value)


def test_widening_on_minus_log_of_the_miss_rate_and_its_delta_method_interval() -> None:
    ks = (1, 8)
    # Scores (one problem, one seed per draw): TA 0.5 / 0.9 and 0.3 / 0.7; GRPO 0.4 / 0.8 in
    # both draws. Means over draws: TA 0.4 / 0.8, GRPO 0.4 / 0.8: no widening on any scale.
    ta = [_runs([[[0.5, 0.9]]], ONE, ks), _runs([[[0.3, 0.7]]], ONE, ks)]
    grpo = [_runs([[[0.4, 0.8]]], ONE, ks), _runs([[[0.4, 0.8]]], ONE, ks)]
    estimate = draw_log_miss_widening(ta, grpo, ["x"], 1, 8)
    assert estimate.value == pytest.approx(0.0, abs=1e-12)
    # Delta method: each value scaled by 1 / (1 - its side's score at that k): TA's growths
    # 0.9/0.2 - 0.5/0.6 and 0.7/0.2 - 0.3/0.6; GRPO's 0.8/0.2 - 0.4/0.6 in both draws.
    per_draw = np.array([0.9 / 0.2 - 0.5 / 0.6, 0.7 / 0.2 - 0.3 / 0.6]) - (0.8 / 0.2 - 0.4 / 0.6)
    assert estimate.se == pytest.approx(np.sqrt(per_draw.var(ddof=1) / 2))
    assert estimate.df == pytest.approx(1.0)
    # An exact transform: TA 0.5 / 0.9 in both draws against GRPO 0.4 / 0.8.
    ta_up = [_runs([[[0.5, 0.9]]], ONE, ks)] * 2
    value = draw_log_miss_widening(ta_up, grpo, ["x"], 1, 8).value
    expected = (-np.log(0.1) + np.log(0.2)) - (-np.log(0.5) + np.log(0.6))
    assert value == pytest.approx(expected)
    with pytest.raises(NotMeasurable, match="infinite"):
        draw_log_miss_widening([_runs([[[0.5, 1.0]]], ONE, ks)] * 2, grpo, ["x"], 1, 8)


def test_a_a_split_within_each_draw() -> None:
    three = _runs([[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]])
    first, second = draw_split_seeds([three, three])
    assert [r.values.shape[0] for r in first] == [1, 1]
    assert [r.values.shape[0] for r in second] == [2, 2]
    assert first[0].values[0, 0, 0] == 0.1
    with pytest.raises(NotMeasurable, match=">= 2 seeds per draw"):
        draw_split_seeds([three, _runs([[0.1, 0.1]])])
    with pytest.raises(NotMeasurable, match=">= 4 seeds"):
        draw_split_seeds([three])  # one draw: the within-draw split needs 2 seeds a half


def test_grpo_seed_and_draw_components() -> None:
    """One problem (weight 1): per-seed scores d0 [0.5, 0.7], d1 [0.1, 0.3], d2 [0.3, 0.5]:
    within-draw variance 0.02 each (pooled 0.02, 3 df); draw means 0.6, 0.2, 0.4 vary by
    0.04; the draws' own component 0.04 - 0.02 / 2 = 0.03."""
    draws = [_runs([[v] for v in pair], ONE) for pair in ([0.5, 0.7], [0.1, 0.3], [0.3, 0.5])]
    parts = draw_seed_components(draws, ["x"], 1)
    assert parts.seed == pytest.approx(0.02) and parts.seed_df == 3.0
    assert parts.between == pytest.approx(0.04) and parts.draw == pytest.approx(0.03)
    assert (parts.draws, parts.seeds) == (3, 2)
    assert parts.draw_mean_square(4, 2.0) == pytest.approx(2 * (0.03 + 0.02 / 4))
    # Draws that vary less than their seeds' part: the draws' own component is 0.
    flat = [_runs([[v] for v in pair], ONE) for pair in ([0.5, 0.7], [0.5, 0.7])]
    assert draw_seed_components(flat, ["x"], 1).draw == 0.0
    with pytest.raises(ValueError, match="same >= 2 seeds"):
        draw_seed_components([draws[0], _runs([[0.4]], ONE)], ["x"], 1)
    with pytest.raises(ValueError, match=">= 2 base draws"):
        draw_seed_components(draws[:1], ["x"], 1)


def test_projected_half_width_adds_each_terms_t_half_width_in_quadrature() -> None:
    problem, draw_ms = 1e-4, 8e-4
    for draws in (2, 3, 5):
        width = projected_draw_half_width(problem, 250.0, draw_ms, draws)
        expected = np.sqrt(
            student.ppf(0.975, 250.0) ** 2 * problem
            + student.ppf(0.975, draws - 1) ** 2 * draw_ms / draws
        )
        assert width == pytest.approx(expected, rel=1e-9)
        se, df = quadrature_interval([(problem, 250.0), (draw_ms / draws, draws - 1.0)])
        assert width == pytest.approx(student.ppf(0.975, df) * se, rel=1e-9)
    with pytest.raises(ValueError, match=">= 2 draws"):
        projected_draw_half_width(problem, 250.0, draw_ms, 1)


def test_estimate_half_width_is_before_clipping() -> None:
    draws = [_runs([[0.9, 0.9]]), _runs([[0.1, 0.1]])]  # a huge draw term: clipped to [0, 1]
    (estimate,) = draw_mean(draws, ["x"], bounds=(0.0, 1.0))
    assert estimate.low == 0.0 and estimate.high == 1.0
    assert estimate_half_width(estimate) == pytest.approx(
        student.ppf(0.975, 1.0) * np.sqrt(np.var([0.9, 0.1], ddof=1) / 2)
    )
