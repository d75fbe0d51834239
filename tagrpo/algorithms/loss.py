"""The policy loss of Eq. 2 / Eq. 4 with the KL loss of Appendix B (torch, any backend).

Per token: the clipped surrogate ``min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)`` with
``r = exp(logp - old_logp)``, as verl's ``vanilla`` policy loss computes it: the log-ratio is
clamped to [-20, 20] before ``exp`` and, for negative advantages, the loss is capped at
``-A * c`` with ``c = 3`` (dual-clip PPO). With one optimiser update per batch both only matter
off-policy (the second mini-batch of a step); they are here so that both backends optimise the
same objective. It is averaged over each response's tokens (``1/|o_i|``) and
then over the responses with ``response_weights`` (``1/G`` within a group, times
``1/#questions`` over the batch: the expectation over q of Eq. 2, or ``1/((N+1)G)`` in Eq. 4).
The loss to minimise is ``-J + kl_coef * KL`` where KL is the low-variance estimator ("k3",
``kl_loss_type=low_var_kl`` in verl) of KL(pi_theta || pi_ref), aggregated the same way.

Which prompt the log-probabilities are conditioned on (q0 for TA-GRPO) is decided by whoever
builds the token ids (:mod:`tagrpo.training.scoring`); this module only sees log-probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CLIP_LOW = 0.2
CLIP_HIGH = 0.2
KL_COEF = 0.001
KL_CLAMP = 10.0  # verl clamps the k3 estimate to [-10, 10] for stability
LOG_RATIO_CLAMP = 20.0  # verl: clamp(logp - old_logp, -20, 20) before exp
DUAL_CLIP = 3.0  # verl's clip_ratio_c: the loss of a negative-advantage token is <= -A * 3


def token_log_probs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[targets]`` per position, computed in float32."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def low_var_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || pi_ref) per token: ``exp(d) - d - 1``, ``d = ref - logp``."""
    delta = ref_log_probs - log_probs
    return (torch.exp(delta) - delta - 1.0).clamp(min=-KL_CLAMP, max=KL_CLAMP)


def masked_response_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each row's masked positions (``1/|o_i| sum_t``); rows with no token give 0."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


@dataclass
class LossOutput:
    loss: torch.Tensor  # what to minimise: -J + kl_coef * KL
    policy_loss: torch.Tensor  # -J
    kl: torch.Tensor  # aggregated low-variance KL (0 when no reference is given)
    clip_fraction: torch.Tensor  # share of response tokens where the clip binds
    ratio_mean: torch.Tensor  # mean token ratio (1 on the first update of a step)


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    response_weights: torch.Tensor | None = None,
    ref_log_probs: torch.Tensor | None = None,
    clip_low: float = CLIP_LOW,
    clip_high: float = CLIP_HIGH,
    kl_coef: float = KL_COEF,
    dual_clip: float = DUAL_CLIP,
    token_mean_over: float | None = None,
) -> LossOutput:
    """Eq. 2/4 plus the KL loss, for a ``[responses, tokens]`` grid.

    ``advantages`` has one value per response; ``response_weights`` (default ``1/responses``)
    weight each response's token-mean, so micro-batches of one mini-batch add up exactly when
    each is given its share of the mini-batch's weights.

    ``token_mean_over`` switches to verl's ``token-mean`` aggregation (the authors' scripts):
    every token of the mini-batch weighs alike, the loss is the sum over this grid's response
    tokens divided by the mini-batch's total response tokens (so micro-batches add up).
    """
    mask = response_mask.to(log_probs.dtype)
    rows = log_probs.shape[0]
    if response_weights is None:
        response_weights = torch.full((rows,), 1.0 / max(rows, 1), dtype=log_probs.dtype)
    response_weights = response_weights.to(device=log_probs.device, dtype=log_probs.dtype)
    advantage = advantages.to(device=log_probs.device, dtype=log_probs.dtype).unsqueeze(-1)
    log_ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    unclipped_loss = -ratio * advantage
    clipped_loss = -clipped * advantage
    per_token = torch.maximum(unclipped_loss, clipped_loss)
    # Dual clip: a negative advantage with a huge ratio would dominate the batch.
    capped = torch.minimum(per_token, -advantage * dual_clip)
    per_token = torch.where(advantage < 0, capped, per_token)
    if token_mean_over is not None:
        policy = (per_token * mask).sum() / token_mean_over
    else:
        policy = (masked_response_mean(per_token, mask) * response_weights).sum()
    if ref_log_probs is not None:
        kl_tokens = low_var_kl(log_probs, ref_log_probs)
        if token_mean_over is not None:
            kl = (kl_tokens * mask).sum() / token_mean_over
        else:
            kl = (masked_response_mean(kl_tokens, mask) * response_weights).sum()
    else:
        kl = torch.zeros((), dtype=log_probs.dtype, device=log_probs.device)
    tokens = mask.sum().clamp(min=1.0)
    with torch.no_grad():
        # verl's pg_clipfrac: tokens where the clipped term is the binding one
        was_clipped = (clipped_loss > unclipped_loss).to(mask.dtype) * mask
        clip_fraction = was_clipped.sum() / tokens
        ratio_mean = (ratio * mask).sum() / tokens
    return LossOutput(policy + kl_coef * kl, policy, kl, clip_fraction, ratio_mean)
