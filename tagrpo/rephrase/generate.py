"""Rephrasing backends behind one interface (:class:`~tagrpo.rephrase.candidates.Rephraser`).

The candidates they produce and the requests a model backend plans live in
:mod:`tagrpo.rephrase.candidates`.

A backend turns questions into :class:`Candidate` rows, one per (question, variant slot,
round): the text, or no text and a reason (``generation_failed`` with the request's error,
``parse_missing`` when a reply held fewer items than asked, ``no_transform`` when the rules
backend has run out of equivalent transforms). Nothing is dropped: ``questions x slots`` in,
as many candidates out.

Backends (``rephrase.backend``):
  rules   deterministic transforms, equivalent by construction (:mod:`tagrpo.rephrase.rules`)
  openai  any OpenAI-compatible endpoint (:mod:`tagrpo.rephrase.openai_backend`)
  hf      a local transformers model (:mod:`tagrpo.rephrase.local_backend`)

``requests`` (openai/hf) says how the N rephrasings of a question are asked for:
  per_variant  N requests, one rephrasing each (the paper's prompt as is; the default)
  choices      one request with ``n=N`` choices, one rephrasing each
  numbered     one request asking for a numbered list of N (the reply is parsed)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tagrpo.config.rephrase import RephraseSettings
from tagrpo.data.rephrase_templates import RephraseTemplate, load_template
from tagrpo.data.schema import Question
from tagrpo.rephrase.cache import ReplyCache
from tagrpo.rephrase.candidates import (
    REQUEST_MODES,
    Candidate,
    Rephraser,
    candidates_from_reply,
    plan_requests,
    slots_for,
)
from tagrpo.rephrase.local_backend import HFRephraser
from tagrpo.rephrase.openai_backend import ChatRequest, ChatRunner
from tagrpo.rephrase.rules import rule_candidates

BACKENDS = ("rules", "openai", "hf")


class RulesRephraser:
    """The offline backend: round 0 slot ``s`` is candidate ``s`` of :func:`rule_candidates`;
    in round ``r`` the ``j``-th slot asked for is candidate ``r * N + j``."""

    name = "rules"

    def __init__(self, n: int = 3, seed: int = 0) -> None:
        if n < 1:
            raise ValueError("n must be >= 1")
        self.n = n
        self.seed = seed
        self.counts: Counter[str] = Counter()

    def rephrase(
        self,
        questions: Sequence[Question],
        round: int = 0,
        slots: Mapping[str, Sequence[int]] | None = None,
    ) -> list[Candidate]:
        out = []
        for question in questions:
            pool = rule_candidates(question, self.seed)
            for position, slot in enumerate(slots_for(question, self.n, slots)):
                # Round r offers candidates r*N .. r*N+N-1 to the slots asked for, in order:
                # a slot regenerated in round 1 gets candidate N (whichever slot it is), so a
                # phrasing the checks rejected is followed by a different one, not its wrapper.
                index = slot if round == 0 else round * self.n + position
                if index < len(pool):
                    candidate = pool[index]
                    kind = candidate.origin.split("+")[0].split(":")[0]
                    self.counts[f"transform/{kind}"] += 1
                    out.append(
                        Candidate(
                            question.id, slot, round, candidate.text, f"rules:{candidate.origin}"
                        )
                    )
                else:
                    self.counts["no_transform"] += 1
                    out.append(
                        Candidate(
                            question.id,
                            slot,
                            round,
                            None,
                            "rules",
                            error="no_transform",
                            detail=f"{len(pool)} equivalent transforms, needed index {index}",
                        )
                    )
        return out

    def metrics(self) -> dict[str, float]:
        return {f"rules/{key}": float(value) for key, value in self.counts.items()}


class OpenAIRephraser:
    """Rephrasings from an OpenAI-compatible endpoint (OpenAI, ``vllm serve``, ...)."""

    name = "openai"

    def __init__(
        self,
        endpoint: Any,
        template: RephraseTemplate,
        n: int = 3,
        mode: str = "per_variant",
        seed: int = 0,
        cache: ReplyCache | None = None,
        progress: Any = None,
    ) -> None:

        if mode not in REQUEST_MODES:
            raise ValueError(f"requests must be one of {REQUEST_MODES}, got {mode!r}")
        self.endpoint = endpoint
        self.template = template
        self.n = n
        self.mode = mode
        self.seed = seed
        self.runner = ChatRunner(endpoint, cache=cache, seed=seed, progress=progress)
        self.issues: Counter[str] = Counter()

    def rephrase(
        self,
        questions: Sequence[Question],
        round: int = 0,
        slots: Mapping[str, Sequence[int]] | None = None,
    ) -> list[Candidate]:

        planned = plan_requests(
            questions,
            backend="openai",
            model=self.endpoint.model,
            template=self.template,
            mode=self.mode,
            n=self.n,
            seed=self.seed,
            sampling=self.endpoint.sampling(),
            round=round,
            slots=slots,
            endpoint=self.endpoint.reply_identity(),
        )
        requests = [
            ChatRequest(p.key, p.messages, n=p.n_choices, seed=p.seed, namespace="rephrase")
            for p in planned
        ]
        results = self.runner.run(requests)
        origin = f"openai:{self.endpoint.model}"
        out = []
        for plan, result in zip(planned, results, strict=True):
            out.extend(
                candidates_from_reply(
                    plan,
                    result.texts,
                    origin,
                    round,
                    self.issues,
                    error=result.error,
                    cached=result.cached,
                    attempts=result.attempts,
                    prompt_tokens=result.prompt_tokens,
                    completion_tokens=result.completion_tokens,
                )
            )
        return out

    def metrics(self) -> dict[str, float]:
        metrics = self.runner.stats.as_metrics("requests/")
        metrics.update({f"parse/{k}": float(v) for k, v in self.issues.items()})
        return metrics


def make_rephraser(
    settings: RephraseSettings,
    seed: int,
    cache: ReplyCache | None = None,
    root: Path | None = None,
) -> Rephraser:
    """The backend named by ``settings.backend`` (the ``rephrase`` section of params.yaml)."""
    if settings.backend == "rules":
        return RulesRephraser(n=settings.n, seed=seed)
    template = load_template(settings.template, settings.template_file)
    if settings.backend == "openai":
        return OpenAIRephraser(
            settings.openai, template, n=settings.n, mode=settings.requests, seed=seed, cache=cache
        )
    return HFRephraser.from_settings(
        settings.hf,
        template,
        n=settings.n,
        mode=settings.requests,
        seed=seed,
        cache=cache,
        root=root,
    )
