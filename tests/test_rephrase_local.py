"""The local transformers backend: slots filled, replies cached, model identity in the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tagrpo.config.params import embedded
from tagrpo.data.rephrase_templates import APPENDIX_A, load_template
from tagrpo.data.schema import Question
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.rephrase.cache import ReplyCache
from tagrpo.rephrase.local_backend import HFRephraser, model_fingerprint
from tagrpo.training.warmstart import TinyModelConfig, build_model, save_policy


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    tokenizer = train_tokenizer(["What is 3 + 4? Rephrasing it: Add 3 and 4."] * 20, 300)
    model = build_model(
        tokenizer,
        embedded(
            TinyModelConfig,
            hidden_size=32,
            intermediate_size=64,
            max_positions=4096,
            vocab_size=300,
        ),
    )
    directory = tmp_path_factory.mktemp("rephraser")
    save_policy(model, tokenizer, directory)
    return directory


def _questions() -> list[Question]:
    return [
        Question(id=f"h{i}", source="math", split="train", problem=f"What is {i} + 4?", answer="0")
        for i in range(2)
    ]


def test_local_backend_fills_slots_and_reruns_from_the_cache(
    tiny_model: Path, tmp_path: Path
) -> None:
    short = load_template(path=_template_file(tmp_path))  # keeps the random model's prompt short
    with ReplyCache(tmp_path / "c.sqlite") as cache:
        first = HFRephraser(tiny_model, short, n=3, cache=cache, max_new_tokens=12)
        out = first.rephrase(_questions())
        assert [(c.question_id, c.variant, c.round) for c in out] == [
            (f"h{i}", slot, 0) for i in range(2) for slot in range(3)
        ]
        assert all(c.origin == f"hf:{first.fingerprint}" for c in out)
        # A random model writes anything: each slot has its text or a recorded parse failure.
        assert all((c.text is None) == (c.error == "parse_missing") for c in out)
        assert first.metrics()["requests/generated"] == 2.0  # one call of 3 samples per question
        assert cache.count("rephrase") == 2

        again = HFRephraser(tiny_model, short, n=3, cache=cache, max_new_tokens=12)
        rerun = again.rephrase(_questions())
        assert [c.text for c in rerun] == [c.text for c in out]
        assert again.metrics()["requests/cache_hits"] == 2.0 and again._backend is None
        # Regenerating one slot is a new request for that slot only.
        more = again.rephrase(_questions()[:1], round=1, slots={"h0": [2]})
        assert [(c.variant, c.round) for c in more] == [(2, 1)]
        assert again.metrics()["requests/generated"] == 1.0


def test_model_fingerprint_follows_the_weights(tiny_model: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_model, copy)
    assert model_fingerprint(copy) == model_fingerprint(tiny_model)
    (copy / "generation_config.json").write_text("{}")
    assert model_fingerprint(copy) != model_fingerprint(tiny_model)
    assert APPENDIX_A.version == "appendix_a/v1"


def _template_file(tmp_path: Path) -> Path:
    path = tmp_path / "short.txt"
    path.write_text("Rephrase the question.")
    return path
