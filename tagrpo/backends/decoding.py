"""Token-by-token sampling that stops computing for responses that have finished.

transformers' ``generate`` keeps every sequence of a batch in every step until the longest
one ends, feeding padding to the finished ones. With n = 64 samples of a short answer, most
rows finish long before the last: in the mini world's evaluation the mean response has about
25 tokens and the budget is 48, so about half of the rows' forward passes and of the sampler's
work was spent on rows already done. :func:`decode` drops finished rows from the batch (and
from the KV cache) whenever they reach ``compact_share`` of it.

The distribution is the one ``generate`` samples from: logits in float32, divided by the
temperature (when it is not 1), transformers' own top-p filter (when top-p < 1), softmax, one
``torch.multinomial`` draw per row; greedy takes the arg-max. The positions and attention mask
of a left-padded batch are the ones ``generate`` builds. Without compaction the tokens are
those of ``generate`` for the same seed (``tests/test_backend_models.py``); dropping rows
changes which random numbers later rows receive, not their distribution.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

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
) -> torch.Tensor:
    """Sample up to ``max_new_tokens`` after each left-padded row of ``input_ids``.

    ``cache`` holds the keys and values of every row's prompt except its last token (which the
    first step reads); ``temperature`` 0 is greedy; ``compact_share`` None never drops rows.
    Returns the new tokens, ``[rows, steps]`` as ``generate`` does: after a row's
    end-of-sequence token come padding tokens.
    """
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
        if greedy:
            next_tokens = scores.argmax(dim=-1)
        else:
            next_tokens = torch.multinomial(scores.softmax(dim=-1), num_samples=1).squeeze(1)
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
