"""Token ids the model is scored on, and their log-probabilities (the anchoring of Eq. 4).

Every response is scored as ``anchor prompt + response``: the anchor is q0's prompt for
TA-GRPO (``anchor="original"``: old, reference and current log-probabilities of a neighbour's
response are conditioned on the *original* question) and the prompt the response was sampled
from for every other method (``anchor="own"``). A step scores G or (N+1)G responses per prompt,
so each distinct prompt is read once per pass and shares its keys and values with its responses
(measured with ``benchmarks/local_train_step.py``: the prompt was more than half of the tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from tagrpo.algorithms.loss import token_log_probs
from tagrpo.algorithms.methods import MethodSpec
from tagrpo.backends.hf import left_padded
from tagrpo.splits.training_set import TrainQuestion


def anchor_variant(spec: MethodSpec, variant: int) -> int:
    """The prompt variant a response to ``variant`` is scored under."""
    return 0 if spec.anchor == "original" else variant


def scoring_prompts(
    spec: MethodSpec,
    questions: Sequence[TrainQuestion],
    variants: Sequence[int],
    prompt_ids,
) -> list[list[int]]:
    """Anchor prompt token ids per response; ``prompt_ids(messages) -> ids`` tokenises.

    Identical prompts are tokenised once (a step has few distinct prompts).
    """
    cache: dict[tuple[str, int], list[int]] = {}
    result = []
    for question, variant in zip(questions, variants, strict=True):
        key = (question.id, anchor_variant(spec, int(variant)))
        if key not in cache:
            cache[key] = list(prompt_ids(question.messages(key[1])))
        result.append(cache[key])
    return result


@dataclass
class ScoringBatch:
    """Responses with their prompts, each distinct prompt stored once.

    ``response_ids`` is right-padded ``[B, R]``; ``target_mask[b, j]`` marks the response's
    tokens (``j < lengths[b]``), the positions that get a loss; ``prompt_of_row[b]`` indexes
    ``prompts``. The G responses to one prompt share it: a forward pass reads each distinct
    prompt once (:func:`forward_log_probs`).
    """

    prompts: list[tuple[int, ...]]
    prompt_of_row: torch.Tensor  # [B], long
    response_ids: torch.Tensor  # [B, R]
    target_mask: torch.Tensor  # [B, R], bool
    lengths: torch.Tensor  # [B] response length per row
    pad_id: int

    def __len__(self) -> int:
        return int(self.response_ids.shape[0])

    def rows(self, index: torch.Tensor | slice) -> ScoringBatch:
        """A sub-batch trimmed to its longest response."""
        lengths = self.lengths[index]
        width = int(lengths.max())
        return ScoringBatch(
            self.prompts,
            self.prompt_of_row[index],
            self.response_ids[index][:, :width],
            self.target_mask[index][:, :width],
            lengths,
            self.pad_id,
        )


def build_scoring_batch(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int
) -> ScoringBatch:
    """Pair each response with its prompt (identical prompts stored once); right-pad."""
    if len(prompts) != len(responses):
        raise ValueError("one prompt per response")
    if any(len(r) == 0 for r in responses):
        raise ValueError("empty response: nothing to score")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("empty prompt: the first response token has nothing to follow")
    distinct: dict[tuple[int, ...], int] = {}
    prompt_of_row = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
    lengths = [len(r) for r in responses]
    width = max(lengths)
    response_ids = torch.full((len(responses), width), pad_id, dtype=torch.long)
    for row, response in enumerate(responses):
        response_ids[row, : len(response)] = torch.tensor(list(response), dtype=torch.long)
    lengths_t = torch.tensor(lengths)
    target_mask = torch.arange(width)[None, :] < lengths_t[:, None]
    return ScoringBatch(
        list(distinct),
        torch.tensor(prompt_of_row, dtype=torch.long),
        response_ids,
        target_mask,
        lengths_t,
        pad_id,
    )


def forward_log_probs(model, batch: ScoringBatch, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each response token under its prompt, ``[B, R]`` (masked positions
    are garbage).

    Each distinct prompt of the batch but its last token is read once (left-padded, positions
    as ``generate`` numbers them) and its keys and values are given to each of its responses;
    then every row reads its prompt's last token and its response, so position ``j`` predicts
    response token ``j``. The same log-probabilities as a pass over ``prompt + response`` per
    row, without recomputing a prompt for each of its G responses or padding every row to the
    longest prompt plus the longest response; gradients flow through the shared keys and
    values. Logits are divided by the sampling ``temperature`` first: the distribution the
    responses were sampled from, and what verl's actor scores (``logits.div_(temperature)``).
    """
    device = next(model.parameters()).device
    used, local = torch.unique(batch.prompt_of_row, return_inverse=True)
    prompts = [batch.prompts[i] for i in used.tolist()]
    prefix_ids, prefix_mask = left_padded([p[:-1] for p in prompts], batch.pad_id)
    cache = DynamicCache(config=model.config)
    if prefix_ids.shape[1] > 0:
        positions = (prefix_mask.cumsum(-1) - 1).clamp(min=0)
        model(
            input_ids=prefix_ids.to(device),
            attention_mask=prefix_mask.to(device),
            position_ids=positions.to(device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache.batch_select_indices(local.to(device))
    last = torch.tensor([p[-1] for p in prompts], dtype=torch.long)[local]
    width = batch.response_ids.shape[1]
    step_ids = torch.cat([last[:, None], batch.response_ids[:, :-1]], dim=1)
    step_mask = batch.target_mask.long()
    mask = torch.cat([prefix_mask[local], step_mask], dim=1)
    start = torch.tensor([len(p) - 1 for p in prompts], dtype=torch.long)[local]
    positions = start[:, None] + torch.arange(width)[None, :]
    logits = model(
        input_ids=step_ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        past_key_values=cache,
        use_cache=True,
    ).logits
    if temperature != 1.0:
        logits = logits / temperature
    return token_log_probs(logits, batch.response_ids.to(device))


@torch.no_grad()
def score_log_probs(
    model, batch: ScoringBatch, micro_batch: int, temperature: float = 1.0
) -> torch.Tensor:
    """:func:`forward_log_probs` without gradients, in micro-batches, padded to ``[B, R]``."""
    width = batch.response_ids.shape[1]
    out = torch.zeros((len(batch), width), dtype=torch.float32)
    for start in range(0, len(batch), micro_batch):
        rows = slice(start, start + micro_batch)
        sub = batch.rows(rows)
        values = forward_log_probs(model, sub, temperature).float().cpu()
        out[rows, : values.shape[1]] = values
    return out
