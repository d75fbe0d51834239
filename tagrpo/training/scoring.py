"""Token ids the model is scored on, and their log-probabilities (the anchoring of Eq. 4).

Every response is scored as ``anchor prompt + response``: the anchor is q0's prompt for
TA-GRPO (``anchor="original"``: old, reference and current log-probabilities of a neighbour's
response are conditioned on the *original* question) and the prompt the response was sampled
from for every other method (``anchor="own"``). Sequences are right-padded, so positions run
0..L-1 for every row without position-id bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tagrpo.algorithms.loss import token_log_probs
from tagrpo.algorithms.methods import MethodSpec
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
    """Right-padded ``prompt + response`` rows; ``target_mask[b, t]`` marks positions whose
    next token ``input_ids[b, t + 1]`` is a response token (the tokens that get a loss)."""

    input_ids: torch.Tensor  # [B, W]
    attention_mask: torch.Tensor  # [B, W]
    target_mask: torch.Tensor  # [B, W - 1], bool
    lengths: torch.Tensor  # [B] prompt + response length per row

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def rows(self, index: torch.Tensor | slice) -> ScoringBatch:
        """A sub-batch trimmed to its longest row."""
        lengths = self.lengths[index]
        width = int(lengths.max())
        return ScoringBatch(
            self.input_ids[index][:, :width],
            self.attention_mask[index][:, :width],
            self.target_mask[index][:, : width - 1],
            lengths,
        )


def build_scoring_batch(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int
) -> ScoringBatch:
    """Concatenate each prompt with its response, right-pad, and mark response targets."""
    if len(prompts) != len(responses):
        raise ValueError("one prompt per response")
    if any(len(r) == 0 for r in responses):
        raise ValueError("empty response: nothing to score")
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses, strict=True)]
    width = max(lengths)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    targets = torch.zeros((len(prompts), max(width - 1, 1)), dtype=torch.bool)
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        ids = list(prompt) + list(response)
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        # Logits at position t predict token t + 1: response tokens sit at
        # len(prompt) .. len(ids) - 1, so their predictions come from t = len(prompt) - 1 ...
        targets[row, len(prompt) - 1 : len(ids) - 1] = True
    return ScoringBatch(input_ids, attention, targets, torch.tensor(lengths))


def forward_log_probs(model, batch: ScoringBatch, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each next token, ``[B, W - 1]`` (masked positions are garbage).

    Logits are divided by the sampling ``temperature`` first: the distribution the responses
    were sampled from, and what verl's actor scores (``logits.div_(temperature)``).
    """
    device = next(model.parameters()).device
    logits = model(
        input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device)
    ).logits
    if temperature != 1.0:
        logits = logits / temperature
    return token_log_probs(logits[:, :-1], batch.input_ids[:, 1:].to(device))


@torch.no_grad()
def score_log_probs(
    model, batch: ScoringBatch, micro_batch: int, temperature: float = 1.0
) -> torch.Tensor:
    """:func:`forward_log_probs` without gradients, in micro-batches, padded to ``[B, W-1]``."""
    width = batch.input_ids.shape[1] - 1
    out = torch.zeros((len(batch), width), dtype=torch.float32)
    for start in range(0, len(batch), micro_batch):
        rows = slice(start, start + micro_batch)
        sub = batch.rows(rows)
        values = forward_log_probs(model, sub, temperature).float().cpu()
        out[rows, : values.shape[1]] = values
    return out
