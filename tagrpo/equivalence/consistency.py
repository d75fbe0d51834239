"""Layer 3 of the equivalence checks: does a solver still reach the gold answer?

A solver answers the original ``k`` times and the rephrasing ``k`` times (same prompt format
as training: the Box 2 instruction), and the answers are graded against the gold answer by
the project's grader. With ``c_o`` and ``c_r`` correct answers out of ``k_o`` and ``k_r``:

1. ``gold_reached`` (accept): ``c_r >= min_correct`` (default 1). A rephrasing that changed
   the problem rarely leads to the old answer, so reaching it supports equivalence. A
   rephrasing that is merely *harder* for this solver is still accepted: shifting the
   solver's perceived difficulty is what TA-GRPO wants from rephrasings.
2. ``solver_unsolved`` (unverifiable): ``c_r < min_correct`` and ``c_o = 0``. The solver
   cannot solve the original either, so its failure on the rephrasing says nothing.
3. ``answer_inconsistent`` (reject): ``c_r < min_correct``, and a one-sided Fisher exact test
   says the rephrasing's success rate is lower than the original's (``p < alpha``, default
   0.05). With k = 8 this needs ``c_r = 0`` and ``c_o >= 4``: a solver right on half or more
   of the original samples never reaches the gold answer from the rephrasing.
4. ``low_power`` (unverifiable): otherwise, e.g. ``c_o = 2, c_r = 0``: too few successes on
   the original for the difference to mean anything.

Unverifiable rephrasings are accepted or rejected by ``on_unverifiable`` (default
``accept``: they already passed the structural and similarity checks, and rejecting
everything a weak solver cannot solve would throw away exactly the hard questions).
``solver_failed`` (an endpoint that never answered) is unverifiable too.

An imperfect solver confounds "harder phrasing" with "different problem"; the rule only
rejects on evidence that is unlikely under equivalence. How much it catches with a given
solver is measured with negative controls (:mod:`tagrpo.equivalence.controls`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.models import load_causal_lm
from tagrpo.config.equivalence import ConsistencyConfig, ConsistencySettings
from tagrpo.data.prompts import chat_messages
from tagrpo.data.schema import Question
from tagrpo.grading.types import GradeFn, SolveItem
from tagrpo.miniworld.solver import MiniWorldSolver
from tagrpo.rephrase.cache import cache_key
from tagrpo.rephrase.openai_backend import ChatRequest, ChatRunner

if TYPE_CHECKING:
    from tagrpo.backends.base import GenerationBackend
    from tagrpo.backends.sample_store import SampleStore

UNVERIFIABLE_POLICIES = ("accept", "reject")

CONSISTENCY_REASONS: dict[str, str] = {
    "gold_reached": "the solver reached the gold answer from the rephrasing",
    "answer_inconsistent": "the solver never reached the gold answer from the rephrasing, "
    "though it did from the original significantly more often",
    "solver_unsolved": "the solver solves neither form (unverifiable)",
    "low_power": "too few successes on the original to tell (unverifiable)",
    "solver_failed": "the solver returned no answers (unverifiable)",
}
UNVERIFIABLE_REASONS = ("solver_unsolved", "low_power", "solver_failed")


@dataclass(frozen=True)
class SolveStats:
    """A solver's graded answers to one text."""

    correct: int
    answers: tuple[str, ...]  # extracted final answers, one per sample ("" if none)

    @property
    def k(self) -> int:
        return len(self.answers)

    def mode(self) -> tuple[str, float]:
        """The most frequent extracted answer and its share of the samples."""
        if not self.answers:
            return "", 0.0
        answer, count = Counter(self.answers).most_common(1)[0]
        return answer, count / len(self.answers)


@dataclass(frozen=True)
class ConsistencyVerdict:
    accepted: bool
    reason: str  # a key of CONSISTENCY_REASONS
    p_value: float | None = None


def fisher_one_sided(correct_a: int, total_a: int, correct_b: int, total_b: int) -> float:
    """Exact one-sided p-value for "b's success rate is lower than a's".

    Fisher's test: with the margins fixed, the probability that group a holds at least
    ``correct_a`` of the ``correct_a + correct_b`` successes (hypergeometric upper tail).
    """
    for value, name in ((correct_a, "correct_a"), (correct_b, "correct_b")):
        if value < 0:
            raise ValueError(f"{name} must be >= 0")
    if correct_a > total_a or correct_b > total_b:
        raise ValueError("correct counts cannot exceed totals")
    successes = correct_a + correct_b
    population = total_a + total_b
    denominator = math.comb(population, successes)
    upper = min(total_a, successes)
    tail = sum(
        math.comb(total_a, x) * math.comb(total_b, successes - x)
        for x in range(correct_a, upper + 1)
    )
    return tail / denominator


def consistency_verdict(
    original: SolveStats | None, rephrasing: SolveStats | None, config: ConsistencyConfig
) -> ConsistencyVerdict:
    """Apply the rule of the module docstring to one (original, rephrasing) pair."""
    unverifiable_ok = config.on_unverifiable == "accept"
    if original is None or rephrasing is None or original.k == 0 or rephrasing.k == 0:
        return ConsistencyVerdict(unverifiable_ok, "solver_failed")
    if rephrasing.correct >= config.min_correct:
        return ConsistencyVerdict(True, "gold_reached")
    if original.correct == 0:
        return ConsistencyVerdict(unverifiable_ok, "solver_unsolved")
    p_value = fisher_one_sided(original.correct, original.k, rephrasing.correct, rephrasing.k)
    if p_value < config.alpha:
        return ConsistencyVerdict(False, "answer_inconsistent", p_value)
    return ConsistencyVerdict(unverifiable_ok, "low_power", p_value)


# --- solvers ---------------------------------------------------------------------------------


def solve_item(question: Question, text: str | None) -> SolveItem:
    """What a solver answers for ``question`` phrased as ``text`` (its gold, kind, choices)."""
    return SolveItem(
        text=text or "",
        answer=question.answer,
        answer_kind=question.answer_kind,
        choices=tuple(question.choices) if question.choices else None,
    )


class Solver(Protocol):
    """Samples ``k`` responses per text (None for a text the solver could not answer)."""

    name: str

    def sample(self, items: Sequence[SolveItem], k: int) -> list[list[str] | None]: ...


class LocalSolver:
    """A transformers causal LM (default: the warm-started base policy ``models/base``)."""

    def __init__(
        self,
        model: str | Path,
        config: ConsistencyConfig,
        seed: int = 0,
        max_batch_sequences: int = 512,
        torch_threads: int | None = None,
        store: SampleStore | None = None,
    ) -> None:
        import torch  # torch and transformers: only a local solver needs them

        from tagrpo.backends.hf import HFBackend

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self.name = f"local:{model}"
        self.config = config
        self.seed = seed

        def open_backend() -> HFBackend:
            loaded, tokenizer = load_causal_lm(model)
            return HFBackend(loaded, tokenizer, max_batch_sequences)

        if store is None or not Path(model).is_dir():
            self._backend: GenerationBackend = open_backend()
            return
        # Each sample() call is a chunk saved before grading; the model loads only if one is
        # missing (see tagrpo.backends.sample_store).
        self._backend = store.sampler(
            open_backend,
            model_dir=model,
            engine={
                "engine": "hf",
                "solver": "local",
                "max_batch_sequences": max_batch_sequences,
                "torch_threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "cuda": torch.cuda.is_available(),
            },
            scope=f"solver:{Path(model).name}:seed{seed}",
        )

    def sample(self, items: Sequence[SolveItem], k: int) -> list[list[str] | None]:

        if not items:
            return []
        sampling = SamplingParams(
            n=k,
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            max_new_tokens=self.config.max_new_tokens,
            seed=self.seed,
        )
        conversations = [
            chat_messages(item.text, list(item.choices) if item.choices else None) for item in items
        ]
        return [
            [c.text for c in samples] for samples in self._backend.generate(conversations, sampling)
        ]


class EndpointSolver:
    """An OpenAI-compatible endpoint, ``n=k`` choices per request, replies cached."""

    def __init__(
        self, endpoint: Any, config: ConsistencyConfig, seed: int = 0, cache: Any = None
    ) -> None:

        self.name = f"openai:{endpoint.model}"
        self.endpoint = endpoint
        self.config = config
        self.seed = seed
        self.runner = ChatRunner(endpoint, cache=cache, seed=seed)

    def sample(self, items: Sequence[SolveItem], k: int) -> list[list[str] | None]:

        requests = []
        for item in items:
            messages = chat_messages(item.text, list(item.choices) if item.choices else None)
            key = cache_key(
                {
                    "backend": "openai-solver",
                    "model": self.endpoint.model,
                    "endpoint": self.endpoint.reply_identity(),
                    "sampling": self.endpoint.sampling(),
                    "seed": self.seed,
                    "k": k,
                    "messages": messages,
                }
            )
            requests.append(ChatRequest(key, messages, n=k, seed=self.seed, namespace="solver"))
        return [result.texts for result in self.runner.run(requests)]


def solve_and_grade(
    solver: Solver, items: Sequence[SolveItem], k: int, grade: GradeFn
) -> list[SolveStats | None]:
    """Sample ``k`` answers per item and grade them against the item's gold answer."""
    samples = solver.sample(items, k)
    responses, answers, kinds, owners = [], [], [], []
    for index, (item, texts) in enumerate(zip(items, samples, strict=True)):
        for text in texts or []:
            responses.append(text)
            answers.append(item.answer)
            kinds.append(item.answer_kind)
            owners.append(index)
    graded = grade(responses, answers, kinds) if responses else []
    correct: list[int] = [0] * len(items)
    preds: list[list[str]] = [[] for _ in items]
    for owner, (is_correct, pred, _) in zip(owners, graded, strict=True):
        correct[owner] += int(bool(is_correct))
        preds[owner].append(pred or "")
    return [
        SolveStats(correct[i], tuple(preds[i])) if samples[i] else None for i in range(len(items))
    ]


def make_solver(
    settings: ConsistencySettings,
    seed: int,
    root: Path,
    cache: Any = None,
    torch_threads: int | None = None,
    store: SampleStore | None = None,
) -> Solver:
    """The solver named by ``settings.solver`` (``miniworld``, ``local`` or ``openai``)."""
    if settings.solver == "miniworld":
        return MiniWorldSolver()
    if settings.solver == "local":
        model = Path(settings.local.model)
        return LocalSolver(
            model if model.is_absolute() else root / model,
            settings.rule(),
            seed=seed,
            max_batch_sequences=settings.local.max_batch_sequences,
            torch_threads=torch_threads,
            store=store,
        )
    return EndpointSolver(settings.openai, settings.rule(), seed=seed, cache=cache)
