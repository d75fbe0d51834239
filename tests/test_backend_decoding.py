"""Dropping finished rows (tagrpo/backends/decoding.py) keeps every row's continuation.

Without dropping, the tokens are those of ``generate``: tests/test_backend_models.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_policy import save_chat_policy

from tagrpo.backends.decoding import decode
from tagrpo.backends.hf import HFBackend, left_padded
from tagrpo.backends.kv_cache import sampling_cache
from tagrpo.backends.models import load_causal_lm
from tagrpo.data.prompts import chat_messages

PROBLEMS = ["What is 1 plus 2?", "Compute 7 - 3.", "Ana has 4 apples and gets 5 more."]
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("decoding_policy")
    return save_chat_policy(directory, PROBLEMS, seed=1, weight_scale=2.0)


def _run(model, tokenizer, eos: int, share: float | None, temperature: float, seed: int = 0):
    backend = HFBackend(model, tokenizer)
    prompts = [backend.prompt_ids(chat_messages(p)) for p in PROBLEMS]
    pad = tokenizer.pad_token_id
    input_ids, attention = left_padded(prompts, pad)
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


def test_dropping_finished_rows_keeps_every_greedy_continuation(policy_dir: Path) -> None:
    """Greedy decoding draws no random numbers, so every row must continue exactly as in the
    full batch: the cache, mask and positions of the rows that stay are carried over intact."""
    model, tokenizer = load_causal_lm(policy_dir)
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


def test_sampling_with_dropping_is_seeded_and_respects_the_budget(policy_dir: Path) -> None:
    model, tokenizer = load_causal_lm(policy_dir)
    eos = tokenizer.eos_token_id
    first = _run(model, tokenizer, eos, 0.25, temperature=1.0, seed=7)
    again = _run(model, tokenizer, eos, 0.25, temperature=1.0, seed=7)
    other = _run(model, tokenizer, eos, 0.25, temperature=1.0, seed=8)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert first.shape[0] == 3 * 4 and first.shape[1] <= NEW_TOKENS


def test_the_cache_grows_and_shrinks_with_the_batch(policy_dir: Path) -> None:
    model, _ = load_causal_lm(policy_dir)
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
