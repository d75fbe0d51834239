"""The generation interface every backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings shared by all backends (the paper samples at temperature 1.0)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class Completion:
    """One sampled response."""

    text: str
    num_tokens: int
    finished: bool  # False when generation stopped at max_new_tokens
    # The sampled token ids, EOS included when finished (empty if a backend does not keep
    # them). Training scores exactly these tokens: re-encoding the text can change them.
    token_ids: tuple[int, ...] = ()


class GenerationBackend(Protocol):
    """Samples ``sampling.n`` completions for each chat conversation, in input order."""

    def prompt_text(self, messages: Messages) -> str:
        """The exact text the model is conditioned on (chat template applied)."""
        ...

    def generate(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> list[list[Completion]]: ...
