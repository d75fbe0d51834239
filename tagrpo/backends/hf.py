"""Batched sampling with a transformers model (CPU, or one GPU for small models).

Prompts are sorted by length and sampled in batches of at most ``max_batch_sequences``
sequences (prompts x samples), never one sample at a time. Each batch reseeds torch from
``sampling.seed`` and the batch's first prompt position, so results do not depend on how many
batches ran before (e.g. after a resumed run). Each prompt is read once; its samples are
drawn by :func:`tagrpo.backends.decoding.decode`, the distribution of transformers'
``generate`` without computing rows that have finished.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from tagrpo.backends.base import Completion, Messages, SamplingParams
from tagrpo.backends.decoding import COMPACT_SHARE, decode
from tagrpo.backends.kv_cache import sampling_cache
from tagrpo.plumbing.progress import bar

PROGRESS_MIN_SEQUENCES = 2048


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of the prompts padded on the left: every prompt ends at
    the last column, where generation continues."""
    width = max(len(ids) for ids in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention[row, width - len(ids) :] = 1
    return input_ids, attention


class PromptTooLongError(ValueError):
    """A prompt plus the response budget exceeds the model's context."""


class HFBackend:
    """A :class:`~tagrpo.backends.base.GenerationBackend` over a loaded HF causal LM."""

    def __init__(
        self, model, tokenizer, max_batch_sequences: int = 256, compact_finished: bool = True
    ) -> None:
        if max_batch_sequences < 1:
            raise ValueError("max_batch_sequences must be >= 1")
        self.model = model
        # False: the tokens of `generate` (tests): its multinomial draw, no row dropped.
        self.compact_finished = compact_finished
        self.tokenizer = tokenizer
        self.max_batch_sequences = max_batch_sequences
        self.tokenizer.padding_side = "left"

    def prompt_text(self, messages: Messages) -> str:
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )

    def prompt_ids(self, messages: Messages) -> list[int]:
        return self.tokenizer(self.prompt_text(messages), add_special_tokens=False)["input_ids"]

    @torch.no_grad()
    def generate(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> list[list[Completion]]:
        encoded = [self.prompt_ids(messages) for messages in conversations]
        self._check_lengths(encoded, sampling.max_new_tokens)
        order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i]), i))
        # Several prompts per batch when n is small; n is split across batches when it is large.
        prompts_per_batch = max(1, self.max_batch_sequences // sampling.n)
        samples_per_call = min(sampling.n, self.max_batch_sequences)
        results: list[list[Completion]] = [[] for _ in encoded]
        total = len(encoded) * sampling.n
        # A bar only for calls long enough to wait on (a training step's draw is short).
        shown = bar(total if total >= PROGRESS_MIN_SEQUENCES else 0, "sampling", "seq")
        with shown:
            for start in range(0, len(order), prompts_per_batch):
                batch_indices = order[start : start + prompts_per_batch]
                for offset in range(0, sampling.n, samples_per_call):
                    count = min(samples_per_call, sampling.n - offset)
                    torch.manual_seed(sampling.seed * 1_000_003 + start * 1009 + offset)
                    prompts = [encoded[i] for i in batch_indices]
                    completions = self._sample(prompts, count, sampling)
                    for position, index in enumerate(batch_indices):
                        results[index].extend(
                            completions[position * count : (position + 1) * count]
                        )
                    if total >= PROGRESS_MIN_SEQUENCES:
                        shown.update(len(batch_indices) * count)
        return results

    def _check_lengths(self, encoded: list[list[int]], max_new_tokens: int) -> None:
        """Refuse prompts that cannot fit the model's context (instead of failing in the
        attention kernel or running out of memory)."""
        context = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        if not context:
            return
        too_long = [
            (i, len(ids)) for i, ids in enumerate(encoded) if len(ids) + max_new_tokens > context
        ]
        if too_long:
            index, length = max(too_long, key=lambda item: item[1])
            raise PromptTooLongError(
                f"{len(too_long)} of {len(encoded)} prompts do not fit the model's context of "
                f"{context} tokens with {max_new_tokens} new tokens (the longest, #{index}, has "
                f"{length} prompt tokens); shorten the inputs (data.max_problem_chars) or the "
                "responses"
            )

    def _prefilled_cache(
        self, input_ids: torch.Tensor, attention: torch.Tensor, copies: int
    ) -> DynamicCache:
        """The KV cache of the (left-padded) prompts, each repeated ``copies`` times."""
        cache = sampling_cache(self.model.config)
        if input_ids.shape[1] == 0:
            return cache
        positions = (attention.cumsum(-1) - 1).clamp(min=0)  # as generate() numbers them
        self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )
        cache.batch_repeat_interleave(copies)
        return cache

    def _sample(
        self, prompts: list[list[int]], count: int, sampling: SamplingParams
    ) -> list[Completion]:
        pad_id = self.tokenizer.pad_token_id
        input_ids, attention = left_padded(prompts, pad_id)
        device = self.model.device
        input_ids, attention = input_ids.to(device), attention.to(device)
        # Each prompt is read once and its KV cache copied to its `count` samples
        # (`num_return_sequences` would run the prompt `count` times), the cache grows in place
        # (kv_cache.py), and finished responses leave the batch (decoding.py). Measured on CPU:
        # ~2x each; the tokens are those of `generate` until rows are dropped.
        cache = self._prefilled_cache(input_ids[:, :-1], attention[:, :-1], count)
        new_tokens = decode(
            self.model,
            input_ids.repeat_interleave(count, dim=0),
            attention.repeat_interleave(count, dim=0),
            cache,
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=pad_id,
            compact_share=COMPACT_SHARE if self.compact_finished else None,
            sampler="inverse_cdf" if self.compact_finished else "multinomial",
        ).cpu()
        # The id read once: the tokenizer's attribute lookup (``convert_tokens_to_ids`` behind
        # ``__getattr__``) inside the scan cost 14% of an evaluation's sampling (profiled).
        eos_id = self.tokenizer.eos_token_id
        completions = []
        for row in new_tokens.tolist():
            finished = eos_id in row
            kept = row[: row.index(eos_id)] if finished else row
            completions.append(
                Completion(
                    text=self.tokenizer.decode(kept, skip_special_tokens=True),
                    num_tokens=len(kept) + (1 if finished else 0),
                    finished=finished,
                    token_ids=tuple([*kept, eos_id] if finished else kept),
                )
            )
        return completions
