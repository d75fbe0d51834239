"""The CPU grouped-query attention (tagrpo/backends/attention.py) changes speed, not values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_policy import save_chat_policy

from tagrpo.backends.attention import ATTENTION, use_gqa_attention
from tagrpo.backends.base import SamplingParams
from tagrpo.backends.hf import HFBackend, left_padded
from tagrpo.backends.models import load_causal_lm
from tagrpo.data.prompts import chat_messages

PROBLEMS = ["What is 1 plus 2?", "Compute 7 - 3.", "Ana has 4 apples and gets 5 more."]


@pytest.fixture(scope="module")
def gqa_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama with 4 query heads sharing 2 key/value heads."""
    directory = tmp_path_factory.mktemp("gqa_policy")
    return save_chat_policy(directory, PROBLEMS, num_heads=4, num_kv_heads=2)


def test_loaded_and_built_models_use_it_and_saved_configs_do_not_name_it(
    gqa_policy: Path, tmp_path: Path
) -> None:
    model, _ = load_causal_lm(gqa_policy)
    assert model.config._attn_implementation == ATTENTION
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert not any("attn" in key for key in saved)  # verl and vLLM read this file
    assert json.loads((gqa_policy / "config.json").read_text()).keys() == saved.keys()


def test_logits_gradients_and_sampled_tokens_equal_transformers_sdpa(gqa_policy: Path) -> None:
    """Bitwise: the values without gradients (the fast path) and the gradients of a training
    pass (which keeps transformers' path, whose head-gradient sums differ by ~1e-7)."""
    model, tokenizer = load_causal_lm(gqa_policy)
    backend = HFBackend(model, tokenizer, max_batch_sequences=64)
    sampling = SamplingParams(n=6, temperature=1.0, max_new_tokens=12, seed=3)
    prompts = [backend.prompt_ids(chat_messages(p)) for p in PROBLEMS]
    input_ids, attention = left_padded(prompts, tokenizer.pad_token_id)
    assert attention.min() == 0  # left padding: transformers' sdpa would repeat the cache

    runs = {}
    for implementation in ("sdpa", ATTENTION):
        model.set_attn_implementation(implementation)
        model.zero_grad()
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention).logits
        trained = model(input_ids=input_ids, attention_mask=attention).logits
        trained.float().square().mean().backward()
        gradients = {name: p.grad.clone() for name, p in model.named_parameters()}
        torch.manual_seed(5)
        with torch.no_grad():
            tokens = [c.token_ids for c in backend._sample(prompts, 6, sampling)]
        runs[implementation] = (logits, gradients, tokens)

    stock, ours = runs["sdpa"], runs[ATTENTION]
    assert torch.equal(stock[0], ours[0])
    assert all(torch.equal(stock[1][name], ours[1][name]) for name in stock[1])
    assert stock[2] == ours[2]


def test_other_implementations_are_left_alone(gqa_policy: Path) -> None:
    model, _ = load_causal_lm(gqa_policy)
    model.set_attn_implementation("eager")
    assert use_gqa_attention(model).config._attn_implementation == "eager"
