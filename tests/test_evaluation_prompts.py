"""Evaluation prompts: ``evaluate.prompt_format`` (chat | raw), truncation beside pass@k, and the
pinned date of Llama-3.2's chat template (issue 22, point 3)."""

from __future__ import annotations

import datetime as real_datetime
import sys
import types
from types import SimpleNamespace

import pytest
import torch
import transformers.utils.chat_template_utils as template_utils

from tagrpo.backends.base import Completion, SamplingParams
from tagrpo.backends.factory import make_backend
from tagrpo.backends.vllm_backend import ChatPrompts
from tagrpo.config.params import config_with, embedded
from tagrpo.config.profiles import merged_with_profile
from tagrpo.data.schema import Question
from tagrpo.evaluation.runner import evaluate, sample_benchmarks
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.plumbing.paths import project_root
from tagrpo.training.warmstart import TinyModelConfig, build_model
from tagrpo.verl_ext.data import chat_template_counter

SOURCE = project_root()

# The authors' evaluation prompt of "What is 3 + 4?", written out: lhkhiem28/TA-GRPO at 67d09b7,
# utils.py lines 16 and 23 (their instruction, "\n", the question), sent as text by test.py:46-48.
AUTHORS_TEXT = (
    "You FIRST think about the reasoning process step by step and then provide the user with the "
    "answer. Please enclose your final answer in the box: \\boxed{}. Please stop generating "
    "immediately after outputting the box.\nWhat is 3 + 4?"
)

# The date logic of Llama-3.2-Instruct's template: `date_string` if given, else today's date.
LLAMA_TEMPLATE = (
    "{%- if not date_string is defined %}"
    "{%- if strftime_now is defined %}{%- set date_string = strftime_now('%d %b %Y') %}"
    "{%- else %}{%- set date_string = '26 Jul 2024' %}{%- endif %}{%- endif %}"
    "<|start_header_id|>system<|end_header_id|>\n\nToday Date: {{ date_string }}<|eot_id|>"
    "{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


class RecordingTokenizer:
    """Records how prompts are tokenized; every character is a token, BOS is 0."""

    def __init__(self) -> None:
        self.calls: list[bool] = []

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, **kwargs) -> str:
        return "<chat>" + messages[0]["content"] + "</chat>"

    def __call__(self, text: str, add_special_tokens: bool = True):
        self.calls.append(add_special_tokens)
        return {"input_ids": ([0] if add_special_tokens else []) + [ord(c) for c in text]}


class StubBackend:
    """Completions with a chosen truncation pattern per benchmark (by problem text)."""

    def __init__(self, prompt_format: str, finished: dict[str, list[bool]]) -> None:
        self.prompt_format = prompt_format
        self.finished = finished
        self.seen: list[list[dict[str, str]]] = []

    def generate(self, conversations, sampling):
        self.seen.extend(conversations)
        out = []
        for messages in conversations:
            key = next(k for k in self.finished if k in messages[0]["content"])
            out.append(
                [
                    Completion(f"\\boxed{{{i}}}", 3, done)
                    for i, done in enumerate(self.finished[key])
                ]
            )
        return out


def exact_grade(responses, answers, kinds):
    return [(r == f"\\boxed{{{a}}}", r, "") for r, a in zip(responses, answers, strict=True)]


def question(qid: str, problem: str, answer: str = "1") -> Question:
    return Question(qid, "math", "test", problem, answer)


def test_raw_prompts_are_the_authors_text_and_tokenized_like_a_vllm_string() -> None:
    tokenizer = RecordingTokenizer()
    raw = ChatPrompts(tokenizer, prompt_format="raw")
    messages = [{"role": "user", "content": AUTHORS_TEXT}]
    assert raw.prompt_text(messages) == AUTHORS_TEXT  # no template
    assert raw.prompt_ids(messages) == [0] + [ord(c) for c in AUTHORS_TEXT]  # with BOS
    chat = ChatPrompts(tokenizer)  # the default: unchanged
    assert chat.prompt_ids(messages)[:6] == [ord(c) for c in "<chat>"]
    assert tokenizer.calls == [True, False]
    with pytest.raises(ValueError, match="one user turn"):
        raw.prompt_text([{"role": "system", "content": "x"}, *messages])
    with pytest.raises(ValueError, match="chat or raw"):
        ChatPrompts(tokenizer, prompt_format="text")


def test_raw_format_sends_the_authors_string_and_chat_keeps_box_2() -> None:
    benchmarks = {"b": [question("q", "What is 3 + 4?")]}
    sampling = SamplingParams(n=2, max_new_tokens=8)
    raw = StubBackend("raw", {"3 + 4": [True, True]})
    sample_benchmarks(raw, benchmarks, sampling, "raw")
    assert raw.seen == [[{"role": "user", "content": AUTHORS_TEXT}]]
    chat = StubBackend("chat", {"3 + 4": [True, True]})
    sample_benchmarks(chat, benchmarks, sampling)
    assert chat.seen == [
        [
            {
                "role": "user",
                "content": "What is 3 + 4?\n\nPlease provide step-by-step reasoning, and enclose "
                "your final answer in the box: \\boxed{}.",
            }
        ]
    ]
    # The authors' text inside a chat template (or Box 2 as raw text) is neither setting.
    with pytest.raises(ValueError, match="prompt_format 'raw' but the backend serves 'chat'"):
        sample_benchmarks(chat, benchmarks, sampling, "raw")


def test_truncated_rate_is_reported_per_benchmark() -> None:
    benchmarks = {
        "short": [question("s", "short one")],
        "long": [question("l", "long one")],
    }
    backend = StubBackend(
        "chat", {"short": [True, True, True, False], "long": [False, False, True, False]}
    )
    result = evaluate(backend, benchmarks, SamplingParams(n=4), exact_grade, ks=[1, 2])
    assert result.summary["short/truncated_rate"] == 0.25
    assert result.summary["long/truncated_rate"] == 0.75
    assert result.summary["truncated_rate"] == 0.5
    assert result.summary["short/pass@1"] == 0.25  # "\boxed{1}" is sample 1 of 4


def test_raw_needs_vllm_and_reaches_the_vllm_engine(monkeypatch, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"prompt_format: raw .* backend vllm"):
        config_with({"evaluate.prompt_format": "raw"})  # the default backend is hf
    config = config_with({"evaluate.backend": "vllm", "evaluate.prompt_format": "raw"})
    with pytest.raises(ValueError, match="raw prompts need vllm"):
        make_backend("hf", config, tmp_path, "raw")
    module = types.ModuleType("vllm")
    module.LLM = lambda **kwargs: SimpleNamespace(init=kwargs)
    module.SamplingParams = dict  # the backend takes vllm.SamplingParams when it is built
    monkeypatch.setitem(sys.modules, "vllm", module)
    tokenizer = train_tokenizer([AUTHORS_TEXT] * 20, vocab_size=300)
    torch.manual_seed(0)
    build_model(
        tokenizer, embedded(TinyModelConfig, hidden_size=16, intermediate_size=32)
    ).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    backend = make_backend("vllm", config, tmp_path, config.evaluate.prompt_format)
    assert backend.prompt_format == "raw"
    assert backend.prompt_text([{"role": "user", "content": AUTHORS_TEXT}]) == AUTHORS_TEXT


def _on_day(monkeypatch, day: real_datetime.datetime) -> None:
    fake = types.SimpleNamespace(now=lambda *args, **kwargs: day)
    monkeypatch.setattr(template_utils, "datetime", fake)


def test_the_paper_profile_pins_llamas_template_date_for_training_and_evaluation(
    monkeypatch,
) -> None:
    tokenizer = train_tokenizer(["What is 3 + 4?"] * 20, vocab_size=280)
    tokenizer.chat_template = LLAMA_TEMPLATE
    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    paper = merged_with_profile(SOURCE / "profiles" / "paper.yaml", SOURCE / "params.yaml")
    kwargs = paper["common"]["chat_template_kwargs"]
    prompts, unpinned, counts = [], [], []
    for day in (real_datetime.datetime(2026, 3, 1), real_datetime.datetime(2026, 11, 25)):
        _on_day(monkeypatch, day)
        prompts.append(ChatPrompts(tokenizer, kwargs).prompt_text(messages))  # evaluation
        counts.append(chat_template_counter(tokenizer, kwargs)(messages))  # verl data prep
        unpinned.append(ChatPrompts(tokenizer, {}).prompt_text(messages))
    assert unpinned[0] != unpinned[1]  # the template reads the day of the run
    assert "Today Date: 01 Mar 2026" in unpinned[0]
    assert prompts[0] == prompts[1] and "Today Date: 26 Jul 2024" in prompts[0]
    assert counts[0] == counts[1]
