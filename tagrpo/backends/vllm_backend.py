"""Sampling with vLLM at paper scale: ``vllm.LLM`` in process, or a ``vllm serve`` endpoint.

Same interface as :class:`tagrpo.backends.hf.HFBackend` (``prompt_text``, ``generate``) and the
same prompts as training: the policy's chat template with a generation prompt applied to the
question's chat messages (the paper's Box 2 instruction is in the user turn, built by
:func:`tagrpo.prompts.chat_messages`), with the ``common.chat_template_kwargs`` that training
also passes to verl (``data.apply_chat_template_kwargs``), so evaluation conditions on exactly
what training did. The authors' public evaluation drops the chat template:
``evaluate.prompt_format: raw`` reproduces it (:class:`ChatPrompts`).

Prompts go to vLLM as token ids (no second tokenisation on the server side). Each problem gets
its own sampling seed, ``seed * 1_000_003 + position``: the samples of a problem do not depend
on batch composition or on how many requests ran before it.

``vllm`` and ``openai`` are imported lazily: the CPU environment has neither requirement, and
tests pass fakes.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tagrpo.backends.base import Completion, Messages, SamplingParams
from tagrpo.config.engines import VLLMEngineSettings


def problem_seed(seed: int, position: int) -> int:
    """The sampling seed of the problem at ``position`` (fits vLLM's 32-bit seeds)."""
    return (seed * 1_000_003 + position) % (2**31 - 1)


class ChatPrompts:
    """The chat-templated prompt of a conversation, as text and as token ids.

    ``prompt_format="raw"`` (``evaluate.prompt_format``) sends the single user turn's text as
    it is, tokenized as ``vllm.LLM.generate`` tokenizes a string (with the tokenizer's special
    tokens, e.g. Llama's BOS): the authors' test.py.
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        prompt_format: str = "chat",
    ):
        if prompt_format not in ("chat", "raw"):
            raise ValueError(f"prompt_format must be chat or raw, got {prompt_format!r}")
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.prompt_format = prompt_format

    def prompt_text(self, messages: Messages) -> str:
        if self.prompt_format == "raw":
            if len(messages) != 1 or messages[0].get("role") != "user":
                raise ValueError(f"a raw prompt is one user turn, got {messages!r}")
            return messages[0]["content"]
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **self.chat_template_kwargs
        )

    def prompt_ids(self, messages: Messages) -> list[int]:
        raw = self.prompt_format == "raw"
        return list(self.tokenizer(self.prompt_text(messages), add_special_tokens=raw)["input_ids"])


class VLLMBackend(ChatPrompts):
    """:class:`~tagrpo.backends.base.GenerationBackend` over an in-process ``vllm.LLM``."""

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        prompt_format: str = "chat",
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs, prompt_format)
        self.llm = llm
        self._vllm = importlib.import_module("vllm")

    def generate(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> list[list[Completion]]:
        prompts = [{"prompt_token_ids": self.prompt_ids(m)} for m in conversations]
        params = [
            self._vllm.SamplingParams(
                n=sampling.n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=problem_seed(sampling.seed, position),
            )
            for position in range(len(prompts))
        ]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} results for {len(prompts)} prompts")
        return [
            [
                Completion(
                    text=choice.text,
                    num_tokens=len(choice.token_ids),
                    finished=choice.finish_reason == "stop",
                    token_ids=tuple(int(t) for t in choice.token_ids),
                )
                for choice in output.outputs
            ]
            for output in outputs
        ]


class VLLMServerBackend(ChatPrompts):
    """The same over an OpenAI-compatible ``vllm serve`` endpoint (completions API)."""

    def __init__(
        self,
        client: Any,
        served_model: str,
        tokenizer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        concurrency: int = 32,
        prompt_format: str = "chat",
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs, prompt_format)
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.client = client
        self.served_model = served_model
        self.concurrency = concurrency

    def _request(self, prompt_ids: list[int], sampling: SamplingParams, seed: int):
        return self.client.completions.create(
            model=self.served_model,
            prompt=prompt_ids,
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=seed,
            extra_body={"return_token_ids": True},  # vLLM's extension; ignored elsewhere
        )

    def _completion(self, choice: Any) -> Completion:
        token_ids = getattr(choice, "token_ids", None)
        if token_ids is None and getattr(choice, "model_extra", None):
            token_ids = choice.model_extra.get("token_ids")
        text = choice.text or ""
        if token_ids is None:  # a server without the extension: count by re-encoding
            count = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            ids: tuple[int, ...] = ()
        else:
            ids = tuple(int(t) for t in token_ids)
            count = len(ids)
        return Completion(text, count, choice.finish_reason == "stop", ids)

    def generate(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> list[list[Completion]]:
        prompts = [self.prompt_ids(m) for m in conversations]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            replies = list(
                pool.map(
                    lambda item: self._request(
                        item[1], sampling, problem_seed(sampling.seed, item[0])
                    ),
                    enumerate(prompts),
                )
            )
        results = []
        for reply in replies:
            choices = sorted(reply.choices, key=lambda choice: choice.index)
            if len(choices) != sampling.n:
                raise RuntimeError(f"the server returned {len(choices)} of {sampling.n} samples")
            results.append([self._completion(choice) for choice in choices])
        return results


def model_location(model_dir: str | Path) -> str:
    """A policy folder with weights, or the hub id its ``pointer.json`` names."""
    from tagrpo.models import resolve

    source = resolve(model_dir)
    if source.kind == "hub":
        return str(source.hub_id)
    if source.kind == "local":
        return str(Path(source.path).resolve())
    raise ValueError(f"vLLM cannot load a {source.kind} model: convert it to a HF folder first")


def server_client(settings: VLLMEngineSettings) -> Any:
    """The OpenAI client for ``vllm serve``. ``timeout_s`` limits each HTTP attempt from its
    send (a problem queued behind ``concurrency`` others has not started its clock)."""
    from openai import OpenAI

    api_key = os.environ.get(settings.api_key_env, "EMPTY") if settings.api_key_env else "EMPTY"
    return OpenAI(base_url=settings.base_url, api_key=api_key, timeout=settings.timeout_s)


def make_vllm_backend(
    settings: VLLMEngineSettings,
    model_dir: str | Path,
    seed: int = 0,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    prompt_format: str = "chat",
):
    """The ``vllm`` generation backend (params section ``vllm``) for the policy in ``model_dir``;
    ``prompt_format``: ``chat`` (template) or ``raw`` (the user turn's text as it is)."""
    from transformers import AutoTokenizer

    template_kwargs = dict(chat_template_kwargs or {})
    model = model_location(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model)
    if settings.mode == "server":
        if not settings.base_url:
            raise ValueError("vllm.base_url is required in server mode")
        return VLLMServerBackend(
            server_client(settings),
            settings.served_model or model,
            tokenizer,
            template_kwargs,
            settings.concurrency,
            prompt_format,
        )
    vllm = importlib.import_module("vllm")
    llm = vllm.LLM(
        model=model,
        seed=seed,
        tensor_parallel_size=settings.tensor_parallel_size,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        max_model_len=settings.max_model_len,
        dtype=settings.dtype,
        enforce_eager=settings.enforce_eager,
    )
    return VLLMBackend(llm, tokenizer, template_kwargs, prompt_format)
