"""Token-by-token sampling that stops computing for responses that have finished.

transformers' ``generate`` keeps every sequence of a batch in every step until the longest
one ends, feeding padding to the finished ones. With n = 64 samples of a short answer, most
rows finish long before the last: in the mini world's evaluation the mean response has about
25 tokens and the budget is 48, so about half of the rows' forward passes and of the sampler's
work was spent on rows already done. :func:`decode` drops finished rows from the batch (and
from the KV cache) whenever they reach ``compact_share`` of it.

The distribution is the one ``generate`` samples from: logits in float32, divided by the
temperature (when it is not 1), transformers' own top-p filter (when top-p < 1), softmax, one
draw per row (by the inverse CDF, one uniform number per row; ``torch.multinomial`` on
request); greedy takes the arg-max. The positions and attention mask of a left-padded batch are
the ones ``generate`` builds. With the multinomial sampler and
without compaction the tokens are those of ``generate`` for the same seed
(``tests/test_backend_models.py``); the inverse-CDF draw and dropping rows change which random
numbers the rows receive, not their distribution.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper


def inverse_cdf_draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row: the first whose cumulative probability exceeds a uniform draw scaled
    to the row's total. The distribution of ``torch.multinomial(probs, 1)`` from one random
    number per row instead of one per vocabulary entry: on the CPU ``multinomial`` draws an
    Exp(1) variate for every entry, 10.3 of an evaluation's 39 s of sampling (profiled; 5.3 ms
    for 512 rows x 512 tokens). A token of probability 0 is never drawn (its cumulative sum
    equals its predecessor's, which the draw already exceeded)."""
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(probs.shape[0], 1, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)


def multinomial_draw(probs: torch.Tensor) -> torch.Tensor:
    """``generate``'s draw (the same random numbers, so the same tokens for the same seed)."""
    return torch.multinomial(probs, num_samples=1).squeeze(1)


SAMPLERS = {"inverse_cdf": inverse_cdf_draw, "multinomial": multinomial_draw}

# Drop finished rows once they are this share of the live batch: each drop copies the cache
# of the rows that stay, so dropping at every finish would cost more than it saves.
COMPACT_SHARE = 0.25


@torch.no_grad()
def decode(
    model,
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    cache: DynamicCache,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    eos_token_id: int,
    pad_token_id: int,
    compact_share: float | None = COMPACT_SHARE,
    sampler: str = "inverse_cdf",
) -> torch.Tensor:
    """Sample up to ``max_new_tokens`` after each left-padded row of ``input_ids``.

    ``cache`` holds the keys and values of every row's prompt except its last token (which the
    first step reads); ``temperature`` 0 is greedy; ``compact_share`` None never drops rows;
    ``sampler`` is :data:`SAMPLERS`' key (``multinomial``: ``generate``'s random numbers).
    Returns the new tokens, ``[rows, steps]`` as ``generate`` does: after a row's
    end-of-sequence token come padding tokens.
    """
    draw = SAMPLERS[sampler]
    rows = input_ids.shape[0]
    greedy = temperature == 0
    warpers = []
    if not greedy and temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if not greedy and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p))
    device = input_ids.device
    live = torch.arange(rows, device=device)  # batch position -> original row
    mask = attention.clone()
    step_input = input_ids[:, -1:]
    positions = (mask.sum(-1, keepdim=True) - 1).clamp(min=0)
    done = torch.zeros(rows, dtype=torch.bool, device=device)  # finished, per live position
    drawn = input_ids.new_full((rows, max_new_tokens), pad_token_id)
    steps = 0
    for step in range(max_new_tokens):
        logits = model(
            input_ids=step_input,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        ).logits[:, -1, :]
        scores = logits.to(dtype=torch.float32, copy=True)
        for warp in warpers:
            scores = warp(None, scores)
        next_tokens = scores.argmax(dim=-1) if greedy else draw(scores.softmax(dim=-1))
        next_tokens = next_tokens.masked_fill(done, pad_token_id)
        drawn[live, step] = next_tokens
        steps = step + 1
        done |= next_tokens == eos_token_id
        if bool(done.all()):
            break
        step_input = next_tokens[:, None]
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        positions = positions + 1
        if compact_share is not None and int(done.sum()) >= compact_share * len(done):
            keep = (~done).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            live, done = live[keep], done[keep]
            step_input, mask, positions = step_input[keep], mask[keep], positions[keep]
    return drawn[:, :steps]
