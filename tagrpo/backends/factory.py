"""The generation backend a stage asks for: ``hf`` (transformers) or ``vllm``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from tagrpo.backends.base import GenerationBackend
from tagrpo.config.params import Params


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
        from tagrpo.models import load_causal_lm

        torch.set_num_threads(config.common.torch_threads)
        model, tokenizer = load_causal_lm(model_dir)
        return HFBackend(model, tokenizer, config.hf.max_batch_sequences)
    from tagrpo.backends.vllm_backend import make_vllm_backend

    return make_vllm_backend(
        config.vllm,
        model_dir,
        config.common.seed,
        config.common.chat_template_kwargs,
        prompt_format,
    )
