"""The vLLM evaluation backend with a fake ``vllm`` module and a loopback ``vllm serve`` stand-in.

Checked: prompts are the token ids verl's rollout builds for the same chat messages (same
template, same instruction, same chat-template options), n samples per problem with a seed per
problem, completion fields, the evaluate stage's ``vllm`` branch, and the server mode's request.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.factory import make_backend
from tagrpo.backends.vllm_backend import (
    ServedModelMismatchError,
    VLLMBackend,
    VLLMServerBackend,
    make_vllm_backend,
    problem_seed,
)
from tagrpo.config.params import config_with, embedded
from tagrpo.data.prompts import chat_messages
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.training.warmstart import TinyModelConfig, build_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_stand_in import VLLMStandIn

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


def save_tiny_policy(folder: Path, seed: int = 0, hidden_size: int = 16) -> Path:
    """A saved tiny policy (config, weights, tokenizer with the template above); the same
    tokenizer whatever the seed, so two seeds are two models over one vocabulary."""
    texts = [chat_messages(q)[0]["content"] for q in QUESTIONS]
    tokenizer = train_tokenizer(texts * 20, vocab_size=300)
    tokenizer.chat_template = TEMPLATE
    torch.manual_seed(seed)
    model = build_model(
        tokenizer,
        embedded(TinyModelConfig, hidden_size=hidden_size, intermediate_size=2 * hidden_size),
    )
    # Matrices redrawn with std 1/sqrt(fan_in): the initialiser's tiny weights make every
    # model near-uniform over the vocabulary, hence near-identical to any other.
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for weight in model.parameters():
            if weight.dim() == 2:
                weight.copy_(
                    torch.randn(weight.shape, generator=generator) / weight.shape[1] ** 0.5
                )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    return save_tiny_policy(tmp_path_factory.mktemp("policy"))


@pytest.fixture(scope="module")
def other_policy_dir(tmp_path_factory):
    """Another tiny model with the same tokenizer (the same vocabulary and chat template)."""
    return save_tiny_policy(tmp_path_factory.mktemp("other"), seed=1)


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


@pytest.mark.parametrize(("in_process", "expected"), [(True, "0"), (False, "1"), (None, None)])
def test_engine_in_process_sets_vllms_variable_before_the_engine_starts(
    fake_vllm, policy_dir, monkeypatch, in_process, expected
):
    """``vllm.engine_in_process`` is VLLM_ENABLE_V1_MULTIPROCESSING as the engine starts;
    null leaves vLLM's default (the variable unset)."""
    # set, then removed: monkeypatch then restores the shell's state, also when the code
    # under test sets the variable (a bare delenv of an unset name records nothing)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "unset by the test")
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    seen = []
    monkeypatch.setattr(
        FakeLLM,
        "__init__",
        lambda self, **kw: seen.append(os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")),
    )
    make_backend("vllm", params(engine_in_process=in_process), policy_dir)
    assert seen == [expected]


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


def test_server_mode_sends_token_prompts_with_a_seed_per_problem(policy_dir, monkeypatch):
    monkeypatch.setenv("VLLM_TEST_KEY", "secret-from-env")
    with VLLMStandIn(policy_dir, served_name="policy", dtype=torch.bfloat16) as server:
        settings = params(
            mode="server",
            base_url=server.base_url,
            served_model="policy",
            api_key_env="VLLM_TEST_KEY",
            concurrency=2,
        )
        backend = engine(settings, policy_dir)
        assert isinstance(backend, VLLMServerBackend)
        assert len(server.bodies) == 1 and server.bodies[0]["echo"]  # the served-model probe
        conversations = [chat_messages(q) for q in QUESTIONS]
        sampling = SamplingParams(n=3, temperature=1.0, top_p=1.0, max_new_tokens=16, seed=2)
        completions = backend.generate(conversations, sampling)
    bodies = sorted(server.sampling_requests(), key=lambda body: body["seed"])
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


def server_params(server: VLLMStandIn, **overrides):
    return params(mode="server", base_url=server.base_url, served_model="policy", **overrides)


def test_a_server_serving_another_model_is_refused_before_any_sampling(
    policy_dir, other_policy_dir
):
    # The other model is listed under the name the params give, from a folder this machine
    # does not have: only the log-probabilities can tell.
    with VLLMStandIn(other_policy_dir, served_name="policy", root="/elsewhere/models/p") as server:
        with pytest.raises(ServedModelMismatchError) as refused:
            engine(server_params(server), policy_dir)
        assert server.sampling_requests() == []
    message = str(refused.value)
    assert "serves 'policy' (/elsewhere/models/p)" in message
    assert f"the policy {policy_dir}" in message
    assert "nats per token on average (tolerance 0.1, vllm.verify_tolerance)" in message


def test_a_server_loaded_from_another_local_folder_is_refused(policy_dir, other_policy_dir):
    with VLLMStandIn(policy_dir, served_name="policy", root=str(other_policy_dir)) as server:
        with pytest.raises(ServedModelMismatchError, match="serves 'policy' from ") as refused:
            engine(server_params(server), policy_dir)
        assert server.bodies == []  # refused on /v1/models alone
    assert f"from {other_policy_dir}, not the policy {policy_dir}" in str(refused.value)


def test_a_served_name_the_server_does_not_list_is_refused(policy_dir):
    with VLLMStandIn(policy_dir, served_name="base") as server:
        with pytest.raises(ServedModelMismatchError) as refused:
            engine(server_params(server), policy_dir)
        assert server.bodies == []
    assert str(refused.value).startswith(
        f"{server.base_url} does not serve 'policy' (it serves ['base'])"
    )


def test_probe_differences_server_numerics_against_another_model(policy_dir, other_policy_dir):
    """The default tolerance separates bfloat16 numerics of the same weights from another
    model (measured here: about 0.01 against about 1 nat per token)."""
    from openai import OpenAI
    from transformers import AutoTokenizer

    from tagrpo.backends.vllm_backend import ChatPrompts, verify_served_model

    prompts = ChatPrompts(AutoTokenizer.from_pretrained(policy_dir))
    measured = {}
    for name, served, dtype in [
        ("same, float32", policy_dir, torch.float32),
        ("same, bfloat16", policy_dir, torch.bfloat16),
        ("other, float32", other_policy_dir, torch.float32),
        ("other, bfloat16", other_policy_dir, torch.bfloat16),
    ]:
        with VLLMStandIn(served, served_name="policy", root="/elsewhere", dtype=dtype) as server:
            client = OpenAI(base_url=server.base_url, api_key="x")
            measured[name] = verify_served_model(client, "policy", policy_dir, prompts, 100.0)
    print(measured)
    tolerance = params().vllm.verify_tolerance
    assert measured["same, float32"] < 1e-5
    assert measured["same, bfloat16"] < tolerance / 3
    assert min(measured["other, float32"], measured["other, bfloat16"]) > 3 * tolerance


def test_a_remote_server_loaded_from_a_sibling_policy_folder_is_refused(tmp_path, policy_dir):
    """A server on another machine with the same layout: ``models/base`` served for
    ``models/grpo-s0`` is refused by name, before the probe."""
    import shutil

    models = tmp_path / "models"
    evaluated = models / "grpo-s0"
    shutil.copytree(policy_dir, evaluated)
    (models / "base").mkdir()
    with VLLMStandIn(policy_dir, served_name="policy", root="/remote/repo/models/base") as server:
        with pytest.raises(ServedModelMismatchError) as refused:
            engine(server_params(server), evaluated)
        assert server.bodies == []
    assert f"from /remote/repo/models/base, not the policy {evaluated}" in str(refused.value)
    with VLLMStandIn(
        policy_dir, served_name="policy", root="/remote/repo/models/grpo-s0"
    ) as server:
        engine(server_params(server), evaluated)  # its own name elsewhere: the probe decides
        assert len(server.bodies) == 1


def test_evaluate_refuses_another_served_model_before_sampling_and_saves_nothing(
    tmp_path, policy_dir, other_policy_dir, monkeypatch
):
    """The evaluate stage's path: the engine opens at the first unsaved benchmark, and the
    check refuses there, before any sampling request."""
    from tagrpo.backends.sample_store import SampleStore
    from tagrpo.data.schema import Question, write_questions
    from tagrpo.evaluation import runner  # evaluate_policy calls its grade_fn_for
    from tagrpo.evaluation.runner import evaluate_policy

    benchmarks = tmp_path / "benchmarks"
    benchmarks.mkdir()
    questions = [Question(f"q{i}", "t", "test", q, "1") for i, q in enumerate(QUESTIONS)]
    write_questions(questions, str(benchmarks / "mini.parquet"))
    monkeypatch.setattr(
        runner, "grade_fn_for", lambda settings, grader: contextlib.nullcontext(None)
    )
    with VLLMStandIn(other_policy_dir, served_name="policy", root="/elsewhere/other") as server:
        config = config_with(
            {
                "evaluate.backend": "vllm",
                "evaluate.n": 2,
                "evaluate.ks": [1],
                "report.primary_k": None,  # the largest of these ks (the default registers 16)
                "evaluate.groups": {},
                "report.in_distribution": None,  # no groups: V1 over every benchmark
                "report.primary_group": None,  # no groups: every free-form benchmark
                "report.harder_group": None,  # no groups: no calibration band
                "vllm.mode": "server",
                "vllm.base_url": server.base_url,
                "vllm.served_model": "policy",
            }
        )
        store = SampleStore(tmp_path / "store")
        with pytest.raises(ServedModelMismatchError, match="nats per token"):
            evaluate_policy(config, policy_dir, benchmarks, store, scope="evaluate@p")
        assert server.sampling_requests() == []
    assert not (tmp_path / "store" / "chunks").exists()
    assert store.counts() == {"samples_reused": 0.0, "samples_resampled": 0.0}
