"""The clipped policy loss (Eq. 2/4) and the low-variance KL loss on hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from tagrpo.algorithms import low_var_kl, policy_loss, token_log_probs


def test_token_log_probs() -> None:
    logits = torch.tensor([[[0.0, math.log(3.0)], [math.log(4.0), 0.0]]])
    values = token_log_probs(logits, torch.tensor([[1, 1]]))
    assert values.tolist()[0] == pytest.approx([math.log(3 / 4), math.log(1 / 5)])


def test_low_var_kl_is_k3() -> None:
    logp = torch.tensor([math.log(0.5), math.log(0.2)])
    ref = torch.tensor([math.log(0.25), math.log(0.2)])
    kl = low_var_kl(logp, ref)
    assert kl[0].item() == pytest.approx(0.5 - math.log(0.5) - 1.0)  # ratio ref/p = 1/2
    assert kl[1].item() == 0.0


def test_clipped_surrogate_token_then_response_means() -> None:
    # Two responses: 3 tokens and 1 token (the 4th column of row 2 is padding).
    old = torch.zeros(2, 3)
    logp = torch.tensor([[math.log(1.5), 0.0, math.log(0.7)], [math.log(0.9), 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    advantages = torch.tensor([2.0, -1.0])
    out = policy_loss(logp, old, advantages, mask, kl_coef=0.0)
    # Row 1 (A=2): min(r A, clip(r) A) per token = [1.2*2, 1*2, 0.7*2]; mean over 3 tokens.
    row1 = -(2.4 + 2.0 + 1.4) / 3
    # Row 2 (A=-1): r = 0.9 inside the clip range -> -(0.9 * -1) = 0.9.
    row2 = 0.9
    assert out.policy_loss.item() == pytest.approx((row1 + row2) / 2)
    assert out.loss.item() == pytest.approx((row1 + row2) / 2)
    assert out.clip_fraction.item() == pytest.approx(1 / 4)  # only r=1.5 with A>0 binds
    assert out.ratio_mean.item() == pytest.approx((1.5 + 1.0 + 0.7 + 0.9) / 4)
    # Negative advantage with a small ratio: the clip at 0.8 binds (max of the two losses).
    low = policy_loss(
        torch.log(torch.tensor([[0.5]])),
        torch.zeros(1, 1),
        torch.tensor([-1.0]),
        torch.ones(1, 1),
        kl_coef=0.0,
    )
    assert low.policy_loss.item() == pytest.approx(0.8)
    assert low.clip_fraction.item() == 1.0


def test_weights_and_kl_term() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.25]]))
    ref = torch.log(torch.tensor([[0.25, 0.25], [0.25, 0.25]]))
    mask = torch.ones(2, 2)
    weights = torch.tensor([0.75, 0.25])
    out = policy_loss(
        logp, logp.detach(), torch.tensor([1.0, 1.0]), mask, weights, ref, kl_coef=0.5
    )
    k3 = 0.5 - math.log(0.5) - 1.0
    assert out.kl.item() == pytest.approx(0.75 * k3)
    assert out.policy_loss.item() == pytest.approx(-1.0)  # ratios 1, A = 1, weights sum to 1
    assert out.loss.item() == pytest.approx(-1.0 + 0.5 * 0.75 * k3)


def test_gradient_raises_logp_of_positive_advantage_tokens() -> None:
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    out = policy_loss(logp, logp.detach(), torch.tensor([1.5]), torch.ones(1, 2), kl_coef=0.0)
    out.loss.backward()
    # d(-mean_t r A)/d logp_t = -A / |o| at r = 1.
    assert logp.grad.tolist() == [[-0.75, -0.75]]
