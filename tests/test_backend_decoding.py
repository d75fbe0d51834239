"""Dropping finished rows (tagrpo/backends/decoding.py) keeps every row's continuation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.decoding import decode
from tagrpo.backends.hf import HFBackend
from tagrpo.backends.kv_cache import sampling_cache
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.miniworld.warmstart import TinyModelConfig, build_model, save_policy
from tagrpo.models import load_causal_lm
from tagrpo.prompts import chat_messages

PROBLEMS = ["What is 1 plus 2?", "Compute 7 - 3.", "Ana has 4 apples and gets 5 more."]
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(1)
    corpus = [f"<|im_start|>user\n{p}<|im_end|>\n" for p in PROBLEMS] * 20
    tokenizer = train_tokenizer(corpus, vocab_size=300)
    directory = tmp_path_factory.mktemp("decoding_policy")
    model = build_model(tokenizer, TinyModelConfig(hidden_size=32, intermediate_size=64))
    # Larger random weights than the initialiser's: its greedy text is one token repeated.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in model.parameters():
            if weight.dim() == 2:
                weight.copy_(
                    torch.randn(weight.shape, generator=generator) * 2 / weight.shape[1] ** 0.5
                )
    save_policy(model, tokenizer, directory)
    return directory


def _run(model, tokenizer, eos: int, share: float | None, temperature: float, seed: int = 0):
    backend = HFBackend(model, tokenizer)
    prompts = [backend.prompt_ids(chat_messages(p)) for p in PROBLEMS]
    width = max(len(ids) for ids in prompts)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(prompts), width), pad)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
    # Prompts of different lengths (left padding) and several copies of each, as in sampling.
    assert attention.min() == 0
    copies = 4
    cache = backend._prefilled_cache(input_ids[:, :-1], attention[:, :-1], copies)
    torch.manual_seed(seed)
    return decode(
        model,
        input_ids.repeat_interleave(copies, dim=0),
        attention.repeat_interleave(copies, dim=0),
        cache,
        max_new_tokens=NEW_TOKENS,
        temperature=temperature,
        top_p=1.0,
        eos_token_id=eos,
        pad_token_id=pad,
        compact_share=share,
    )


def _until_eos(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


def test_dropping_finished_rows_keeps_every_greedy_continuation(policy: Path) -> None:
    """Greedy decoding draws no random numbers, so every row must continue exactly as in the
    full batch: the cache, mask and positions of the rows that stay are carried over intact."""
    model, tokenizer = load_causal_lm(policy)
    full = _run(model, tokenizer, tokenizer.eos_token_id, None, temperature=0).tolist()

    # A random tiny model rarely says its end token: the end token of this test is the one
    # whose first occurrence ends the rows at the most different steps (or never).
    def end_steps(token: int) -> set[int]:
        return {row.index(token) if token in row else NEW_TOKENS for row in full}

    eos = max(sorted({token for row in full for token in row}), key=lambda t: len(end_steps(t)))
    reference = [_until_eos(row, eos) for row in _run(model, tokenizer, eos, None, 0).tolist()]
    assert len(end_steps(eos)) >= 2 and any(row[-1] == eos for row in reference)

    for share in (0.01, 0.25, 0.9):  # drop at every finish, at a quarter, almost never
        dropped = _run(model, tokenizer, eos, share, temperature=0).tolist()
        assert [_until_eos(row, eos) for row in dropped] == reference
        for row in dropped:  # after the end token, only padding
            if eos in row:
                assert set(row[row.index(eos) + 1 :]) <= {tokenizer.pad_token_id}


def test_sampling_without_dropping_draws_the_tokens_of_generate(policy: Path) -> None:
    model, tokenizer = load_causal_lm(policy)
    prompts = [HFBackend(model, tokenizer).prompt_ids(chat_messages(p)) for p in PROBLEMS]
    sampling = SamplingParams(n=5, temperature=0.7, max_new_tokens=10, seed=0)
    torch.manual_seed(3)
    ours = HFBackend(model, tokenizer, compact_finished=False)._sample(prompts, 5, sampling)
    width = max(len(ids) for ids in prompts)
    input_ids = torch.full((len(prompts), width), tokenizer.pad_token_id)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
    torch.manual_seed(3)
    with torch.no_grad():
        reference = model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            do_sample=True,
            temperature=0.7,
            top_p=1.0,
            top_k=None,
            max_new_tokens=10,
            num_return_sequences=5,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    expected = [
        [t for t in row if t != tokenizer.pad_token_id] for row in reference[:, width:].tolist()
    ]
    assert [[t for t in c.token_ids if t != tokenizer.pad_token_id] for c in ours] == expected


def test_sampling_with_dropping_is_seeded_and_respects_the_budget(policy: Path) -> None:
    model, tokenizer = load_causal_lm(policy)
    eos = tokenizer.eos_token_id
    first = _run(model, tokenizer, eos, 0.25, temperature=1.0, seed=7)
    again = _run(model, tokenizer, eos, 0.25, temperature=1.0, seed=7)
    other = _run(model, tokenizer, eos, 0.25, temperature=1.0, seed=8)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert first.shape[0] == 3 * 4 and first.shape[1] <= NEW_TOKENS


def test_the_cache_grows_and_shrinks_with_the_batch(policy: Path) -> None:
    model, _ = load_causal_lm(policy)
    cache = sampling_cache(model.config)
    keys = torch.randn(4, model.config.num_key_value_heads, 3, 8)
    for layer in cache.layers:
        layer.update(keys, keys + 1)
    cache.batch_select_indices(torch.tensor([0, 2]))
    layer = cache.layers[0]
    assert torch.equal(layer.keys, keys[[0, 2]])
    step = torch.randn(2, model.config.num_key_value_heads, 1, 8)
    layer.update(step, step)
    assert torch.equal(layer.keys[:, :, :3], keys[[0, 2]])
    assert torch.equal(layer.keys[:, :, 3:], step)
