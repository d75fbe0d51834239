"""The endpoint calls a profile makes before training: the rephrase stage's
(``rephrase.backend: openai``) and the answer-consistency check's
(``check_equivalence.consistency.solver: openai``), in requests, tokens and list-price dollars
(``tagrpo plan --cost`` prints them beside the GPU cost of :mod:`tagrpo.verl_ext.cost`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tagrpo.config.params import Params


# Published list prices per million (input, output) tokens of the endpoints the paper profile
# names, when this was written: check them before a run. Another model: tokens, no price.
LIST_PRICES_USD_PER_MTOK = {"gpt-4-turbo": (10.0, 30.0), "gpt-4o-mini": (0.15, 0.60)}
# Characters per token of English text (OpenAI's rule of thumb; LaTeX takes more tokens).
CHARS_PER_TOKEN = 4.0
# MATH train's mean question (210 characters over its 7,500 questions): the plan's estimate
# when the training set is not built.
MATH_QUESTION_CHARS = 210.0


@dataclass(frozen=True)
class ApiUsage:
    """One endpoint's requests and tokens for the training set; ``output_tokens`` expected,
    ``output_tokens_max`` with every reply at ``max_tokens``."""

    purpose: str
    model: str
    requests: int
    input_tokens: float
    output_tokens: float | None  # None: not estimated (only the bound)
    output_tokens_max: float

    def usd(self, output_tokens: float | None) -> float | None:
        prices = LIST_PRICES_USD_PER_MTOK.get(self.model)
        if prices is None or output_tokens is None:
            return None
        return (self.input_tokens * prices[0] + output_tokens * prices[1]) / 1e6

    def line(self) -> str:
        expected = self.usd(self.output_tokens)
        bound = self.usd(self.output_tokens_max)
        out = (
            f"{self.output_tokens / 1e6:.1f}M output tokens (at most "
            f"{self.output_tokens_max / 1e6:.1f}M)"
            if self.output_tokens is not None
            else f"at most {self.output_tokens_max / 1e6:.1f}M output tokens"
        )
        price = ""
        if bound is not None:
            price = f"; about ${expected:,.0f}" if expected is not None else ""
            price += f", at most ${bound:,.0f} at list prices"
        return (
            f"API {self.purpose} ({self.model}): {self.requests:,} requests, "
            f"{self.input_tokens / 1e6:.1f}M input tokens, {out}{price}"
        )


def api_usage(
    config: Params, questions: int, question_chars: float, template_chars: float
) -> list[ApiUsage]:
    """The endpoint calls of the rephrase stage (``rephrase.backend: openai``) and of the
    answer-consistency check (``check_equivalence.consistency.solver: openai``) for
    ``questions`` training questions, cache empty. Expected output: a rephrasing as long as its
    question; the solver's replies are bounded only (``max_tokens``). Regeneration rounds of
    rejected rephrasings are left out (at most ``max_failed_share``-sized)."""
    usage = []
    question = question_chars / CHARS_PER_TOKEN
    rephrase, n = config.rephrase, config.rephrase.n
    if rephrase.backend == "openai":
        settings = rephrase.openai
        prompt = template_chars / CHARS_PER_TOKEN + question
        per_question = n if rephrase.requests == "per_variant" else 1
        replies = n  # one rephrasing per reply, or N in one (choices, numbered)
        bound = settings.max_tokens * (1 if rephrase.requests == "numbered" else replies)
        usage.append(
            ApiUsage(
                "rephrasings",
                settings.model,
                questions * per_question,
                questions * per_question * prompt,
                questions * n * question,
                questions * bound,
            )
        )
    check = config.check_equivalence
    if check.consistency.enabled and check.consistency.solver == "openai":
        settings = check.consistency.openai
        texts = 1 + n + int(check.controls.enabled)  # q0, its rephrasings, one control
        k = check.consistency.k
        usage.append(
            ApiUsage(
                "answer-consistency solves",
                settings.model,
                questions * texts,
                questions * texts * (question + 40),  # the solver's instruction: ~40 tokens
                None,
                questions * texts * k * settings.max_tokens,
            )
        )
    return usage
