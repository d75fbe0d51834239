"""The generation backend a stage's params ask for: ``hf`` (transformers) or ``vllm``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tagrpo.backends.base import GenerationBackend

BACKENDS = ("hf", "vllm")


def make_backend(params: Mapping[str, Any], model_dir: str | Path) -> GenerationBackend:
    """A backend serving the policy in ``model_dir``.

    ``params``: a stage's section with ``backend``, ``max_batch_sequences`` (hf), ``vllm``
    (see :mod:`tagrpo.backends.vllm_backend`) and ``common`` (torch threads, seed, chat-template
    options).
    """
    backend = params.get("backend", "hf")
    if backend == "hf":
        import torch

        from tagrpo.backends.hf import HFBackend
        from tagrpo.models import load_causal_lm

        torch.set_num_threads(int(params.get("common", {}).get("torch_threads", 2)))
        model, tokenizer = load_causal_lm(model_dir)
        return HFBackend(model, tokenizer, int(params.get("max_batch_sequences", 256)))
    if backend == "vllm":
        from tagrpo.backends.vllm_backend import make_vllm_backend

        return make_vllm_backend(params, model_dir)
    raise ValueError(f"backend {backend!r} is not available (known: {', '.join(BACKENDS)})")
