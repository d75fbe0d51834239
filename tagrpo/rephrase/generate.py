"""Rephrasing backends behind one interface, and the candidates table they produce.

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from tagrpo.config.rephrase import RephraseSettings
from tagrpo.data.schema import Question
from tagrpo.rephrase.cache import ReplyCache, cache_key
from tagrpo.rephrase.parse import parse_reply
from tagrpo.rephrase.rules import rule_candidates
from tagrpo.rephrase.templates import RephraseTemplate, load_template

BACKENDS = ("rules", "openai", "hf")
REQUEST_MODES = ("per_variant", "choices", "numbered")

CANDIDATE_SCHEMA = pa.schema(
    [
        pa.field("question_id", pa.string(), nullable=False),
        pa.field("variant", pa.int32(), nullable=False),  # slot 0..N-1
        pa.field("round", pa.int32(), nullable=False),  # 0 = the rephrase stage
        pa.field("text", pa.string()),  # None when no rephrasing was obtained
        pa.field("origin", pa.string(), nullable=False),  # backend and transform or model
        pa.field("error", pa.string()),  # reason code when text is None
        pa.field("detail", pa.string()),  # error message or parse repairs
        pa.field("cached", pa.bool_(), nullable=False),
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("completion_tokens", pa.int64(), nullable=False),
    ]
)


@dataclass(frozen=True)
class Candidate:
    question_id: str
    variant: int
    round: int
    text: str | None
    origin: str
    error: str | None = None
    detail: str | None = None
    cached: bool = False
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def candidates_table(candidates: Sequence[Candidate]) -> pa.Table:
    return pa.Table.from_pylist([asdict(c) for c in candidates], schema=CANDIDATE_SCHEMA)


def write_candidates(candidates: Sequence[Candidate], path: str | Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(candidates_table(candidates), str(path))


def read_candidates(path: str | Path) -> list[Candidate]:
    import pyarrow.parquet as pq

    table = pq.read_table(str(path))
    missing = set(CANDIDATE_SCHEMA.names) - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: not a candidates table (missing columns {sorted(missing)})")
    return [Candidate(**row) for row in table.select(CANDIDATE_SCHEMA.names).to_pylist()]


class Rephraser(Protocol):
    """Produces candidates for the given slots (default: all N) of each question."""

    name: str
    n: int

    def rephrase(
        self,
        questions: Sequence[Question],
        round: int = 0,
        slots: Mapping[str, Sequence[int]] | None = None,
    ) -> list[Candidate]: ...

    def metrics(self) -> dict[str, float]: ...


def _slots_for(question: Question, n: int, slots: Mapping[str, Sequence[int]] | None) -> list[int]:
    wanted = list(range(n)) if slots is None else list(slots.get(question.id, ()))
    bad = [slot for slot in wanted if not 0 <= slot < n]
    if bad:
        raise ValueError(f"{question.id}: variant slots {bad} outside 0..{n - 1}")
    return wanted


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
            for position, slot in enumerate(_slots_for(question, self.n, slots)):
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


@dataclass(frozen=True)
class _Planned:
    """One request of a model backend and the slots its reply fills."""

    question: Question
    slots: tuple[int, ...]
    key: str
    n_choices: int
    n_items: int
    seed: int
    messages: list[dict[str, str]] = field(hash=False, compare=False)


def plan_requests(
    questions: Sequence[Question],
    *,
    backend: str,
    model: str,
    template: RephraseTemplate,
    mode: str,
    n: int,
    seed: int,
    sampling: Mapping[str, Any],
    round: int,
    slots: Mapping[str, Sequence[int]] | None = None,
    endpoint: Mapping[str, Any] | None = None,
) -> list[_Planned]:
    """The requests for these slots, each with its content-addressed cache key.

    The key covers the prompt as sent (the template's text, not only its name), and for an
    endpoint backend ``endpoint``: its URL, model and settings (a cache filled at one server
    must not answer for another).
    """
    if mode not in REQUEST_MODES:
        raise ValueError(f"requests must be one of {REQUEST_MODES}, got {mode!r}")
    planned = []
    for question in questions:
        wanted = _slots_for(question, n, slots)
        if not wanted:
            continue
        groups = [(slot,) for slot in wanted] if mode == "per_variant" else [tuple(wanted)]
        for group in groups:
            n_items = len(group) if mode == "numbered" else 1
            n_choices = len(group) if mode == "choices" else 1
            messages = template.messages(question.problem, n_items)
            key = cache_key(
                {
                    "backend": backend,
                    "model": model,
                    "endpoint": dict(endpoint or {}),
                    "template": template.cache_version(n_items),
                    "prompt": cache_key({"messages": messages}),
                    "mode": mode,
                    "sampling": dict(sampling),
                    "seed": seed,
                    "question": question.problem,
                    "variants": list(group),
                    "round": round,
                }
            )
            planned.append(
                _Planned(
                    question=question,
                    slots=group,
                    key=key,
                    n_choices=n_choices,
                    n_items=n_items,
                    # Distinct per slot and round, so seeded endpoints do not repeat a sample.
                    seed=seed * 1_000_003 + round * 1009 + group[0],
                    messages=messages,
                )
            )
    return planned


def candidates_from_reply(
    planned: _Planned,
    texts: list[str] | None,
    origin: str,
    round: int,
    issues: Counter[str],
    *,
    error: str | None = None,
    cached: bool = False,
    attempts: int = 0,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
) -> list[Candidate]:
    """Parse a reply into one candidate per slot of ``planned`` (failures included)."""
    question_id = planned.question.id
    extra = {"cached": cached, "attempts": attempts}
    if texts is None:
        return [
            Candidate(question_id, slot, round, None, origin, "generation_failed", error, **extra)
            for slot in planned.slots
        ]
    items: list[str | None] = []
    notes: list[str] = []
    if planned.n_items > 1:
        parsed = parse_reply(texts[0] if texts else None, planned.n_items)
        items, notes = list(parsed.items), list(parsed.issues)
    else:
        for text in texts[: len(planned.slots)]:
            parsed = parse_reply(text, 1)
            items.append(parsed.items[0] if parsed.items else None)
            notes.extend(parsed.issues)
    issues.update(note.split(":")[0] for note in notes)
    detail = ",".join(notes) or None
    out = []
    for position, slot in enumerate(planned.slots):
        text = items[position] if position < len(items) else None
        # Token usage is the request's; it is written on its first slot only so sums are right.
        usage = (
            {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
            if position == 0
            else {}
        )
        if text is None:
            out.append(
                Candidate(
                    question_id,
                    slot,
                    round,
                    None,
                    origin,
                    "parse_missing",
                    detail,
                    **extra,
                    **usage,
                )
            )
        else:
            out.append(
                Candidate(question_id, slot, round, text, origin, None, detail, **extra, **usage)
            )
    return out


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
        from tagrpo.rephrase.openai_backend import ChatRunner

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
        from tagrpo.rephrase.openai_backend import ChatRequest

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
    from tagrpo.rephrase.local_backend import HFRephraser

    return HFRephraser.from_settings(
        settings.hf,
        template,
        n=settings.n,
        mode=settings.requests,
        seed=seed,
        cache=cache,
        root=root,
    )
