"""The clipped policy loss (Eq. 2/4) and the low-variance KL loss on hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from tagrpo.algorithms import low_var_kl, policy_loss, token_log_probs

pytestmark = pytest.mark.core


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


def test_dual_clip_and_log_ratio_clamp_match_verls_vanilla_loss() -> None:
    """The same numbers as verl 0.9.1's ``compute_policy_loss_vanilla`` (dual clip c = 3,
    log-ratio clamped to [-20, 20]), hand-computed per token, one token per response."""
    old = torch.zeros(4, 1)
    # ratios: e^2 (huge, negative advantage: dual clip), e^25 -> clamped to e^20, 1.5, 0.5
    log_probs = torch.tensor([[2.0], [25.0], [math.log(1.5)], [math.log(0.5)]])
    advantages = torch.tensor([-1.0, -2.0, 1.0, -1.0])
    mask = torch.ones(4, 1)
    out = policy_loss(log_probs, old, advantages, mask, torch.full((4,), 0.25), kl_coef=0.0)
    # token 1: max(e^2, 1.2) * 1 = e^2 = 7.39 -> capped at 3 (A<0); token 2: e^20*2 -> 6;
    # token 3: max(-1.5, -1.2) = -1.2 (positive A, the upper clip binds); token 4: A<0,
    # max(0.5, 0.8) = 0.8, below the cap 3.
    expected = 0.25 * (3.0 + 6.0 - 1.2 + 0.8)
    assert out.policy_loss.item() == pytest.approx(expected, rel=1e-6)
    no_cap = policy_loss(log_probs, old, advantages, mask, torch.full((4,), 0.25), kl_coef=0.0,
                         dual_clip=1e9)  # fmt: skip
    assert no_cap.policy_loss.item() > 1e6  # without it the e^20 token dominates


def test_verls_vanilla_loss_gives_the_same_value() -> None:
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    torch.manual_seed(0)
    old = torch.randn(6, 5)
    log_probs = old + torch.randn(6, 5)
    advantages = torch.randn(6)
    mask = (torch.rand(6, 5) > 0.3).float()
    mask[:, 0] = 1.0
    ours = policy_loss(log_probs, old, advantages, mask, kl_coef=0.0)
    config = OmegaConf.create(
        {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0,
         "global_batch_info": {}}
    )  # fmt: skip
    theirs, _ = compute_policy_loss_vanilla(
        old, log_probs, advantages.unsqueeze(-1).expand(-1, 5), mask,
        loss_agg_mode="seq-mean-token-mean", config=config,
    )  # fmt: skip
    assert ours.policy_loss.item() == pytest.approx(theirs.item(), rel=1e-5)


def test_token_mean_weighs_every_token_alike() -> None:
    """verl's token-mean (the authors' scripts): sum over tokens / all tokens of the batch."""
    old = torch.zeros(2, 3)
    log_probs = torch.zeros(2, 3)  # ratio 1 everywhere
    advantages = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])  # 1 token and 3 tokens
    seq = policy_loss(log_probs, old, advantages, mask, kl_coef=0.0)
    token = policy_loss(log_probs, old, advantages, mask, kl_coef=0.0, token_mean_over=4.0)
    assert seq.policy_loss.item() == pytest.approx(0.5 * (-1.0) + 0.5 * 1.0)  # 0
    assert token.policy_loss.item() == pytest.approx((-1.0 + 3.0) / 4.0)  # 0.5
