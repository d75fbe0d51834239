"""Generation backends: one interface, a transformers backend for CPU and small GPUs now,
and a vLLM backend for paper scale (same prompts, same sampling parameters)."""

from tagrpo.backends.base import Completion, GenerationBackend, SamplingParams

__all__ = ["Completion", "GenerationBackend", "SamplingParams"]
