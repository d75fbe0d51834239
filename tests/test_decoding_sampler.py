"""The inverse-CDF draw of :mod:`tagrpo.backends.decoding`: the token it picks for a given
uniform number (exactly), never a token of probability 0, and ``torch.multinomial``'s
distribution (a chi-square test over many draws)."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from tagrpo.backends import decoding

pytestmark = pytest.mark.core


def test_the_draw_is_the_first_token_whose_cumulative_probability_exceeds_u(monkeypatch):
    probs = torch.tensor([[0.1, 0.0, 0.3, 0.6], [0.0, 0.5, 0.0, 0.5], [0.25, 0.25, 0.25, 0.25]])
    cases = [  # (u per row, expected tokens): u is scaled by the row's total (1 here)
        ([0.0, 0.0, 0.0], [0, 1, 0]),
        ([0.1, 0.5, 0.2499], [2, 3, 0]),  # 0.1 is token 0's upper edge: token 1 has p = 0
        ([0.3999, 0.4999, 0.75], [2, 1, 3]),
        ([0.9999999, 0.9999999, 0.9999999], [3, 3, 3]),
    ]
    for u, expected in cases:
        uniform = torch.tensor(u)[:, None]
        monkeypatch.setattr(torch, "rand", lambda *shape, uniform=uniform, **kw: uniform)
        assert decoding.inverse_cdf_draw(probs).tolist() == expected


def test_a_row_whose_probabilities_sum_below_one_stays_in_the_vocabulary(monkeypatch):
    probs = torch.tensor([[0.2, 0.3, 0.49999]])  # float rounding: the total is not exactly 1
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: torch.tensor([[0.9999999]]))
    assert decoding.inverse_cdf_draw(probs).tolist() == [2]


def test_the_draws_follow_the_distribution_and_skip_zero_probability_tokens():
    torch.manual_seed(0)
    logits = torch.randn(3, 12) * 2
    logits[:, 5] = -float("inf")  # probability 0
    probs = logits.softmax(-1)
    draws = torch.stack([decoding.inverse_cdf_draw(probs) for _ in range(20_000)])
    for row in range(3):
        counts = torch.bincount(draws[:, row], minlength=12).double()
        assert counts[5] == 0
        keep = probs[row] > 0
        expected = probs[row][keep].double() * draws.shape[0]
        statistic = float((((counts[keep] - expected) ** 2) / expected).sum())
        # 10 df: p = 1e-4 at 35.6 (fails 1 run in 10,000 by chance; a biased draw fails always)
        assert statistic < stats.chi2.ppf(1 - 1e-4, int(keep.sum()) - 1), statistic


def test_multinomial_stays_available_for_generates_tokens():
    probs = torch.tensor([[0.2, 0.8], [0.6, 0.4]])
    torch.manual_seed(3)
    expected = torch.multinomial(probs, 1).squeeze(1)
    torch.manual_seed(3)
    assert torch.equal(decoding.SAMPLERS["multinomial"](probs), expected)
