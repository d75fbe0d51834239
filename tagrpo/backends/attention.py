"""Grouped-query attention on the CPU without copying the KV cache for every query head.

transformers' ``sdpa`` attention repeats each key/value head for its query heads
(``repeat_kv``: a full copy of the cache per layer and token) whenever an attention mask is
given, which left-padded batches always have; torch's own ``enable_gqa`` is used only without a
mask, because on CUDA a mask sends it to the slow math kernel. On the CPU, torch's kernel takes
``enable_gqa`` with a mask and returns bitwise the same values. Profiled on the mini-world
policy (4 query heads, 2 key/value heads), ``repeat_kv`` was 12 of the 35 s of an evaluation's
sampling.

:data:`ATTENTION` (``tagrpo_sdpa``) is transformers' ``sdpa`` everywhere except on CPU tensors
of grouped-query models in passes without gradients (sampling, scoring, evaluation), where it
passes the unrepeated cache with ``enable_gqa=True``. It is registered with transformers'
attention and mask registries on import; it is a run-time setting of a loaded model and never
reaches a saved ``config.json`` (verl and vLLM read those).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION = "tagrpo_sdpa"


def sdpa_gqa_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa_attention_forward``, with ``enable_gqa`` on CPU tensors."""
    groups = getattr(module, "num_key_value_groups", 1)
    # Forward values are bitwise the same, gradients are not (the key/value heads' gradients
    # are summed in another order, ~1e-7 relative): passes that build a graph keep transformers'
    # path, so trained weights do not depend on this module.
    differentiable = torch.is_grad_enabled() and (
        query.requires_grad or key.requires_grad or value.requires_grad
    )
    if (
        query.device.type != "cpu"
        or groups == 1
        or differentiable
        or kwargs.get("output_attentions", False)
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    # The same causal rule as transformers: the flag only for a prefill without a mask.
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = query.shape[2] > 1 and attention_mask is None and is_causal
    output = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=is_causal,
        enable_gqa=True,
    )
    return output.transpose(1, 2).contiguous(), None


def use_gqa_attention(model: torch.nn.Module) -> torch.nn.Module:
    """Switch a loaded transformers model that runs on sdpa to :data:`ATTENTION`, in place.

    Models on another implementation (eager, flash attention) are left as they are.
    """
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(ATTENTION)
    return model


AttentionInterface.register(ATTENTION, sdpa_gqa_attention_forward)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)
