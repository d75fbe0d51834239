"""Policy folders (weights or pointer) and the batched transformers backend on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_policy import save_chat_policy

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.hf import HFBackend, PromptTooLongError, left_padded
from tagrpo.backends.models import POINTER_FILE, ModelSource, load_causal_lm, materialise, resolve
from tagrpo.data.prompts import chat_messages

PROBLEMS = ["What is 1 plus 2?", "Compute 7 - 3.", "Ana has 4 apples and gets 5 more."]


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised tiny Llama + trained BPE, saved as an ordinary HF folder."""
    return save_chat_policy(tmp_path_factory.mktemp("policy"), PROBLEMS)


def test_source_validation_and_pointer_round_trip(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        ModelSource.from_dict({"kind": "ftp"})
    with pytest.raises(ValueError, match="needs the field 'hub_id'"):
        ModelSource.from_dict({"kind": "hub"})
    with pytest.raises(ValueError, match="needs the field 'package'"):
        ModelSource.from_dict({"kind": "gguf_package", "gguf_file": "m.gguf"})
    with pytest.raises(FileNotFoundError, match="neither HF weights"):
        resolve(tmp_path)

    source = ModelSource.from_dict({"kind": "hub", "hub_id": "Qwen/Qwen3-1.7B"})
    materialise(source, tmp_path / "policy")  # hub models become a pointer, not a download
    assert json.loads((tmp_path / "policy" / POINTER_FILE).read_text()) == {
        "kind": "hub",
        "hub_id": "Qwen/Qwen3-1.7B",
    }
    assert resolve(tmp_path / "policy") == source


def test_saved_policy_loads_for_generation(tiny_policy: Path) -> None:
    assert resolve(tiny_policy) == ModelSource(kind="local", path=str(tiny_policy))
    model, tokenizer = load_causal_lm(tiny_policy)
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token_id is not None
    assert not model.training


def test_greedy_batched_generation_equals_one_prompt_at_a_time(tiny_policy: Path) -> None:
    """Left padding and attention masks must not change what a prompt's continuation is."""
    model, tokenizer = load_causal_lm(tiny_policy)
    conversations = [chat_messages(p) for p in PROBLEMS]
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=8)
    batched = HFBackend(model, tokenizer, max_batch_sequences=64).generate(conversations, greedy)
    single = HFBackend(model, tokenizer, max_batch_sequences=1)
    for conversation, completions in zip(conversations, batched, strict=True):
        alone = single.generate([conversation], greedy)[0]
        assert [c.text for c in completions] == [c.text for c in alone]


def test_sampling_is_seeded_counted_and_split_across_batches(tiny_policy: Path) -> None:
    model, tokenizer = load_causal_lm(tiny_policy)
    backend = HFBackend(model, tokenizer, max_batch_sequences=4)  # n=6 needs two calls each
    conversations = [chat_messages(p) for p in PROBLEMS]
    sampling = SamplingParams(n=6, temperature=1.0, max_new_tokens=6, seed=3)
    first = backend.generate(conversations, sampling)
    again = backend.generate(conversations, sampling)
    other_seed = backend.generate(conversations, SamplingParams(n=6, max_new_tokens=6, seed=4))
    assert [len(samples) for samples in first] == [6, 6, 6]
    assert [[c.text for c in s] for s in first] == [[c.text for c in s] for s in again]
    assert [[c.text for c in s] for s in first] != [[c.text for c in s] for s in other_seed]
    for samples in first:
        for completion in samples:
            assert 1 <= completion.num_tokens <= 6
            assert completion.finished or completion.num_tokens == 6


def test_prompts_read_once_draw_the_same_tokens_as_generate_with_repeated_prompts(
    tiny_policy: Path,
) -> None:
    """The backend prefills each prompt once and copies its cache to the samples; the tokens
    drawn for a seed are those of ``generate(num_return_sequences=n)`` (left padding too)."""
    model, tokenizer = load_causal_lm(tiny_policy)
    backend = HFBackend(model, tokenizer, max_batch_sequences=64, compact_finished=False)
    prompts = [backend.prompt_ids(chat_messages(p)) for p in PROBLEMS]
    assert len({len(ids) for ids in prompts}) > 1  # some rows are left-padded
    sampling = SamplingParams(n=5, temperature=1.0, max_new_tokens=10, seed=0)
    torch.manual_seed(11)
    ours = backend._sample(prompts, 5, sampling)

    input_ids, attention = left_padded(prompts, tokenizer.pad_token_id)
    width = input_ids.shape[1]
    torch.manual_seed(11)
    with torch.no_grad():
        reference = model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            do_sample=True,
            temperature=1.0,
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
    got = [[t for t in c.token_ids if t != tokenizer.pad_token_id] for c in ours]
    assert got == expected


def test_backend_rejects_an_empty_batch_budget(tiny_policy: Path) -> None:
    model, tokenizer = load_causal_lm(tiny_policy)
    with pytest.raises(ValueError, match="max_batch_sequences"):
        HFBackend(model, tokenizer, max_batch_sequences=0)


def test_prompts_that_cannot_fit_the_context_are_refused_before_generation(tiny_policy) -> None:
    """The drill: a 1 MB problem reached the tokenizer and the model (256 positions)."""
    model, tokenizer = load_causal_lm(tiny_policy)
    backend = HFBackend(model, tokenizer, max_batch_sequences=8)
    sampling = SamplingParams(n=2, max_new_tokens=16, seed=0)
    short = chat_messages(PROBLEMS[0])
    huge = chat_messages("What is 1 plus 2? " * 2000)
    context = model.config.max_position_embeddings
    with pytest.raises(PromptTooLongError, match=rf"1 of 2 prompts do not fit .* {context} tokens"):
        backend.generate([short, huge], sampling)
    assert len(backend.generate([short], sampling)[0]) == 2  # short prompts still sample


def test_the_hf_engines_device_is_a_setting_refused_without_cuda(tmp_path) -> None:
    """``hf.device`` (evaluate and diagnostics with the hf backend): auto is the CPU here, and
    cuda where torch sees no CUDA device is refused naming the key, before any model loads."""
    import torch

    from tagrpo.backends.factory import make_backend
    from tagrpo.backends.models import resolve_device
    from tagrpo.config.params import config_with

    assert resolve_device("cpu", "hf.device") == torch.device("cpu")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert resolve_device("auto", "hf.device") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"hf\.device = cuda, but torch .* sees no CUDA device"):
        make_backend("hf", config_with({"hf.device": "cuda"}), tmp_path / "no model here")
