"""The vLLM evaluation backend with a fake ``vllm`` module and a loopback ``vllm serve`` stand-in.

Checked: prompts are the token ids verl's rollout builds for the same chat messages (same
template, same instruction, same chat-template options), n samples per problem with a seed per
problem, completion fields, the evaluate stage's ``vllm`` branch, and the server mode's request.
"""

from __future__ import annotations

import json
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.factory import make_backend
from tagrpo.backends.vllm_backend import (
    VLLMBackend,
    VLLMServerBackend,
    make_vllm_backend,
    problem_seed,
)
from tagrpo.config.params import config_with
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.miniworld.warmstart import TinyModelConfig, build_model
from tagrpo.prompts import chat_messages

# ChatML with a Qwen3-style switch, to check that chat-template options reach the prompt.
TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}{{ '<think>\n\n</think>\n\n' }}"
    "{% endif %}{% endif %}"
)
QUESTIONS = ["What is 3 + 4?", "Compute 5 - 2.", "Add 1 and 6."]


class FakeLLM:
    """Records the engine arguments and requests; sample j of a prompt is ``<j> seed``."""

    def __init__(self, **kwargs) -> None:
        self.init = kwargs
        self.requests: list = []

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.requests.append((prompts, sampling_params))
        return [
            SimpleNamespace(
                outputs=[
                    SimpleNamespace(
                        text=f"{j} {params.seed}",
                        token_ids=list(range(j + 1)),
                        finish_reason="stop" if j % 2 == 0 else "length",
                    )
                    for j in range(params.n)
                ]
            )
            for params in sampling_params
        ]


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kwargs: SimpleNamespace(**kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    """A saved tiny policy (config, weights, tokenizer with the template above)."""
    texts = [chat_messages(q)[0]["content"] for q in QUESTIONS]
    tokenizer = train_tokenizer(texts * 20, vocab_size=300)
    tokenizer.chat_template = TEMPLATE
    torch.manual_seed(0)
    model = build_model(tokenizer, TinyModelConfig(hidden_size=16, intermediate_size=32))
    folder = tmp_path_factory.mktemp("policy")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def params(**overrides):
    """The run's config: the ``vllm`` section with these overrides, seed 5, no thinking."""
    settings = {"mode": "offline", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.7}
    return config_with(
        {
            "evaluate.backend": "vllm",
            "common.seed": 5,
            "common.chat_template_kwargs": {"enable_thinking": False},
            **{f"vllm.{key}": value for key, value in {**settings, **overrides}.items()},
        }
    )


def engine(config, policy_dir):
    return make_vllm_backend(
        config.vllm, policy_dir, config.common.seed, config.common.chat_template_kwargs
    )


def rollout_prompt_ids(tokenizer, messages, **template_kwargs) -> list[int]:
    """What verl's agent loop sends to vLLM during training for these messages."""
    builder = create_continuous_token_builder(
        tokenizer, hf_model_type=None, chat_template_kwargs=template_kwargs, processor=None
    )
    return list(builder.build_initial_tokens(messages))


def test_offline_engine_samples_n_per_problem_from_trainings_prompts(fake_vllm, policy_dir):
    backend = make_backend("vllm", params(), policy_dir)  # the evaluate stage's branch
    assert isinstance(backend, VLLMBackend)
    assert backend.llm.init["model"] == str(policy_dir.resolve())
    assert backend.llm.init["seed"] == 5 and backend.llm.init["tensor_parallel_size"] == 2
    assert backend.llm.init["gpu_memory_utilization"] == 0.7
    conversations = [chat_messages(q) for q in QUESTIONS]
    sampling = SamplingParams(n=4, temperature=0.6, top_p=0.95, max_new_tokens=32, seed=5)
    completions = backend.generate(conversations, sampling)

    prompts, sent = backend.llm.requests[0]
    tokenizer = backend.tokenizer
    for prompt, messages in zip(prompts, conversations, strict=True):
        expected = rollout_prompt_ids(tokenizer, messages, enable_thinking=False)
        assert prompt == {"prompt_token_ids": expected}
        assert expected != rollout_prompt_ids(tokenizer, messages)  # the option is applied
        assert tokenizer.decode(expected).startswith("<|im_start|>user\n" + messages[0]["content"])
    assert [p.seed for p in sent] == [problem_seed(5, i) for i in range(3)]
    assert len({p.seed for p in sent}) == 3
    assert {(p.n, p.temperature, p.top_p, p.max_tokens) for p in sent} == {(4, 0.6, 0.95, 32)}
    assert [[c.text for c in row] for row in completions] == [
        [f"{j} {problem_seed(5, i)}" for j in range(4)] for i in range(3)
    ]
    first = completions[0]
    assert [c.num_tokens for c in first] == [1, 2, 3, 4]
    assert [c.finished for c in first] == [True, False, True, False]
    assert first[2].token_ids == (0, 1, 2)
    assert backend.prompt_text(conversations[0]).endswith("<think>\n\n</think>\n\n")


def test_seeds_do_not_depend_on_other_problems() -> None:
    assert problem_seed(0, 3) == 3 and problem_seed(1, 0) == 1_000_003
    assert problem_seed(10**6, 7) < 2**31 - 1


def test_unknown_settings_and_modes_are_errors(fake_vllm, policy_dir) -> None:
    with pytest.raises(KeyError, match=r"vllm\.gpus"):
        params(gpus=2)
    with pytest.raises(ValueError, match="'offline' or 'server'"):
        params(mode="batch")
    with pytest.raises(ValueError, match="base_url is required"):
        engine(params(mode="server"), policy_dir)


class _Completions(BaseHTTPRequestHandler):
    """``POST /v1/completions`` as vLLM answers it (with its ``token_ids`` extension)."""

    bodies: ClassVar[list] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        choices = [
            {
                "index": j,
                "text": f"\\boxed{{{j}}}",
                "token_ids": [7] * (j + 2),
                "finish_reason": "stop" if j else "length",
                "logprobs": None,
            }
            for j in reversed(range(body["n"]))  # out of order on purpose
        ]
        payload = json.dumps(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 0,
                "model": body["model"],
                "choices": choices,
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_server_mode_sends_token_prompts_with_a_seed_per_problem(policy_dir, monkeypatch):
    monkeypatch.setenv("VLLM_TEST_KEY", "secret-from-env")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Completions.bodies = []
    try:
        settings = params(
            mode="server",
            base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
            served_model="policy",
            api_key_env="VLLM_TEST_KEY",
            concurrency=2,
        )
        backend = engine(settings, policy_dir)
        assert isinstance(backend, VLLMServerBackend)
        conversations = [chat_messages(q) for q in QUESTIONS]
        sampling = SamplingParams(n=3, temperature=1.0, top_p=1.0, max_new_tokens=16, seed=2)
        completions = backend.generate(conversations, sampling)
    finally:
        server.shutdown()
    bodies = sorted(_Completions.bodies, key=lambda body: body["seed"])
    assert [body["seed"] for body in bodies] == [problem_seed(2, i) for i in range(3)]
    for body, messages in zip(bodies, conversations, strict=True):
        assert body["prompt"] == rollout_prompt_ids(
            backend.tokenizer, messages, enable_thinking=False
        )
        assert (body["model"], body["n"], body["max_tokens"]) == ("policy", 3, 16)
        assert body["return_token_ids"] is True
    assert [c.text for c in completions[0]] == ["\\boxed{0}", "\\boxed{1}", "\\boxed{2}"]
    assert [c.num_tokens for c in completions[0]] == [2, 3, 4]
    assert [c.finished for c in completions[0]] == [False, True, True]
