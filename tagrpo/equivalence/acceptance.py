"""The layered checks, the regeneration policy and the verdict table.

:class:`EquivalenceChecker` gives every candidate a verdict and a reason code, cheapest check
first: a candidate that has no text is rejected with its generation error; then duplicates of
a sibling already kept; then :mod:`structural <tagrpo.equivalence.structural>`, then
:mod:`similarity <tagrpo.equivalence.similarity>`, then the :mod:`answer-consistency solve
<tagrpo.equivalence.consistency>`. A later layer only sees what the earlier ones passed.

:func:`run_policy` fills N slots per question. Slots whose candidate is rejected are asked
for again from the rephrasing backend, up to ``max_rounds`` more rounds (round ``r`` is part
of every cache key and selects the rules backend's next transforms). Slots still empty then
get the fallback:

``pad_original`` (default)  the slot holds the original text, and ``rephrasings_fallback``
                            counts such slots. TA-GRPO then samples more responses to q0 for
                            that question, which is plain GRPO on those slots, never a wrong
                            problem.
``drop``                    the question leaves the training set and is written to the
                            rejections table (reason ``insufficient_rephrasings``), so that
                            rows in = kept + rejected.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from tagrpo.config.equivalence import (
    CheckEquivalenceSettings,
    ConsistencySettings,
    PolicyConfig,
    SimilaritySettings,
    StructuralConfig,
)
from tagrpo.data.schema import Question, Rejection
from tagrpo.equivalence.consistency import (
    Solver,
    SolveStats,
    consistency_verdict,
    solve_and_grade,
    solve_item,
)
from tagrpo.equivalence.structural import check_structural
from tagrpo.grading.types import GradeFn, SolveItem
from tagrpo.rephrase.candidates import Candidate, Rephraser

FALLBACKS = ("pad_original", "drop")
CHECKS = ("generation", "sibling", "structural", "similarity", "consistency")

VERDICT_SCHEMA = pa.schema(
    [
        pa.field("question_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # "candidate" | "control:<kind>"
        pa.field("variant", pa.int32(), nullable=False),  # slot; -1 for controls
        pa.field("round", pa.int32(), nullable=False),
        pa.field("origin", pa.string(), nullable=False),
        pa.field("text", pa.string()),
        pa.field("check_reached", pa.string(), nullable=False),  # last check applied
        pa.field("verdict", pa.string(), nullable=False),  # "accept" | "reject"
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string()),
        pa.field("similarity", pa.float64()),
        pa.field("solver_k", pa.int32()),
        pa.field("solver_correct", pa.int32()),
        pa.field("original_k", pa.int32()),
        pa.field("original_correct", pa.int32()),
        pa.field("p_value", pa.float64()),
        pa.field("solver_mode", pa.string()),
        pa.field("solver_mode_share", pa.float64()),
        pa.field("original_mode", pa.string()),
    ]
)


@dataclass
class Verdict:
    question_id: str
    source: str
    kind: str
    variant: int
    round: int
    origin: str
    text: str | None
    check_reached: str
    verdict: str
    reason: str
    detail: str | None = None
    similarity: float | None = None
    solver_k: int | None = None
    solver_correct: int | None = None
    original_k: int | None = None
    original_correct: int | None = None
    p_value: float | None = None
    solver_mode: str | None = None
    solver_mode_share: float | None = None
    original_mode: str | None = None

    @property
    def accepted(self) -> bool:
        return self.verdict == "accept"


def verdicts_table(verdicts: Sequence[Verdict]) -> pa.Table:
    return pa.Table.from_pylist([asdict(v) for v in verdicts], schema=VERDICT_SCHEMA)


@dataclass(frozen=True)
class CheckSettings:
    """The three check layers' settings (``check_equivalence`` sections of params.yaml)."""

    structural: StructuralConfig
    similarity: SimilaritySettings
    consistency: ConsistencySettings

    @classmethod
    def from_section(cls, section: CheckEquivalenceSettings) -> CheckSettings:
        return cls(section.structural, section.similarity, section.consistency)

    @property
    def similarity_enabled(self) -> bool:
        return self.similarity.enabled

    @property
    def similarity_threshold(self) -> float:
        return self.similarity.threshold

    @property
    def consistency_enabled(self) -> bool:
        return self.consistency.enabled


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


class EquivalenceChecker:
    """Applies the layers to batches of (question, candidate) pairs; see the module docstring.

    ``scorer`` (a :class:`~tagrpo.equivalence.similarity.SimilarityScorer`) and ``solver``/
    ``grade`` are only needed when their layer is enabled. The solver's statistics on each
    original are computed once and reused for every rephrasing and round.
    """

    def __init__(
        self,
        settings: CheckSettings,
        scorer: Any = None,
        solver: Solver | None = None,
        grade: GradeFn | None = None,
    ) -> None:
        if settings.similarity_enabled and scorer is None:
            raise ValueError("the similarity check is enabled but no scorer was given")
        if settings.consistency_enabled and (solver is None or grade is None):
            raise ValueError("the consistency check is enabled but no solver/grader was given")
        self.settings = settings
        self.scorer = scorer
        self.solver = solver
        self.grade = grade
        self.original_stats: dict[str, SolveStats | None] = {}
        self.solver_samples = 0

    def _solve(self, items: Sequence[SolveItem]) -> list[SolveStats | None]:
        assert self.solver is not None and self.grade is not None
        self.solver_samples += len(items) * self.settings.consistency.k
        return solve_and_grade(self.solver, items, self.settings.consistency.k, self.grade)

    def _ensure_originals(self, questions: Sequence[Question]) -> None:
        todo = list({q.id: q for q in questions if q.id not in self.original_stats}.values())
        if not todo:
            return
        stats = self._solve([solve_item(q, q.problem) for q in todo])
        self.original_stats.update(zip((q.id for q in todo), stats, strict=True))

    def check(
        self,
        pairs: Sequence[tuple[Question, Candidate]],
        kind: str = "candidate",
        kept: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Verdict]:
        """One verdict per pair, in order. ``kept``: texts already accepted per question."""
        verdicts = [
            Verdict(
                question_id=question.id,
                source=question.source,
                kind=kind,
                variant=candidate.variant,
                round=candidate.round,
                origin=candidate.origin,
                text=candidate.text,
                check_reached="generation",
                verdict="accept",
                reason="passed",
            )
            for question, candidate in pairs
        ]
        alive: list[int] = []
        seen: dict[str, set[str]] = {
            qid: {_plain(t) for t in texts} for qid, texts in (kept or {}).items()
        }
        for index, (question, candidate) in enumerate(pairs):
            verdict = verdicts[index]
            if candidate.text is None:
                self._reject(verdict, "generation", candidate.error or "no_text", candidate.detail)
                continue
            if kind == "candidate":
                plain = _plain(candidate.text)
                siblings = seen.setdefault(question.id, set())
                if plain in siblings:
                    self._reject(verdict, "sibling", "duplicate", "same text as another slot")
                    continue
                siblings.add(plain)
            outcome = check_structural(
                question.problem,
                candidate.text,
                question.answer,
                question.answer_kind,
                config=self.settings.structural,
            )
            verdict.check_reached = "structural"
            if not outcome.passed:
                self._reject(verdict, "structural", outcome.reason or "structural", outcome.detail)
                continue
            alive.append(index)

        if self.settings.similarity_enabled and alive:
            scores = self.scorer.scores([(pairs[i][0].problem, pairs[i][1].text) for i in alive])
            survivors = []
            for index, score in zip(alive, scores, strict=True):
                verdicts[index].similarity = score
                verdicts[index].check_reached = "similarity"
                if score < self.settings.similarity_threshold:
                    self._reject(
                        verdicts[index],
                        "similarity",
                        "low_similarity",
                        f"cosine {score:.3f} < {self.settings.similarity_threshold:g}",
                    )
                else:
                    survivors.append(index)
            alive = survivors

        if self.settings.consistency_enabled and alive:
            self._ensure_originals([pairs[i][0] for i in alive])
            stats = self._solve([solve_item(pairs[i][0], pairs[i][1].text) for i in alive])
            for index, rephrased in zip(alive, stats, strict=True):
                question = pairs[index][0]
                original = self.original_stats.get(question.id)
                result = consistency_verdict(original, rephrased, self.settings.consistency)
                verdict = verdicts[index]
                verdict.check_reached = "consistency"
                verdict.reason = result.reason
                verdict.p_value = result.p_value
                verdict.verdict = "accept" if result.accepted else "reject"
                if rephrased is not None:
                    verdict.solver_k, verdict.solver_correct = rephrased.k, rephrased.correct
                    verdict.solver_mode, verdict.solver_mode_share = rephrased.mode()
                if original is not None:
                    verdict.original_k, verdict.original_correct = original.k, original.correct
                    verdict.original_mode = original.mode()[0]
        return verdicts

    @staticmethod
    def _reject(verdict: Verdict, check: str, reason: str, detail: str | None = None) -> None:
        verdict.check_reached = check
        verdict.verdict = "reject"
        verdict.reason = reason
        verdict.detail = detail


@dataclass
class PolicyResult:
    rows: list[tuple[Question, list[str], int]]  # (question, N rephrasings, padded slots)
    rejections: list[Rejection]
    verdicts: list[Verdict]
    outcome: Counter[str]


def run_policy(
    questions: Sequence[Question],
    candidates: Sequence[Candidate],
    checker: EquivalenceChecker,
    config: PolicyConfig,
    n: int,
    rephraser: Rephraser | None = None,
) -> PolicyResult:
    """Check round 0, regenerate rejected slots up to ``max_rounds``, then apply the fallback.

    ``candidates`` must hold exactly slots ``0..N-1`` of every question (the rephrase stage's
    output); anything else means the inputs are stale or mixed up, and is an error.
    """
    by_id = {q.id: q for q in questions}
    if len(by_id) != len(questions):
        raise ValueError("question ids are not unique")
    expected = {(q.id, slot) for q in questions for slot in range(n)}
    given = [(c.question_id, c.variant) for c in candidates]
    if len(set(given)) != len(given) or set(given) != expected:
        unknown = sorted({qid for qid, _ in given} - set(by_id))[:5]
        raise ValueError(
            f"candidates do not match the questions x {n} slots "
            f"({len(given)} candidates for {len(questions)} questions; unknown ids {unknown}); "
            "rerun the rephrase stage"
        )
    slots: dict[str, list[str | None]] = {q.id: [None] * n for q in questions}
    verdicts: list[Verdict] = []
    pending = sorted(candidates, key=lambda c: (c.question_id, c.variant))
    outcome: Counter[str] = Counter()
    complete_in: dict[str, int] = {}
    for round_index in range(config.max_rounds + 1):
        kept = {qid: [t for t in texts if t] for qid, texts in slots.items()}
        batch = checker.check([(by_id[c.question_id], c) for c in pending], kept=kept)
        verdicts.extend(batch)
        for verdict, candidate in zip(batch, pending, strict=True):
            if verdict.accepted:
                slots[candidate.question_id][candidate.variant] = candidate.text
        missing = {
            qid: [i for i, t in enumerate(texts) if t is None] for qid, texts in slots.items()
        }
        for qid, holes in missing.items():
            if not holes and qid not in complete_in:
                complete_in[qid] = round_index
        missing = {qid: holes for qid, holes in missing.items() if holes}
        if not missing or rephraser is None or round_index == config.max_rounds:
            break
        retry = [q for q in questions if q.id in missing]
        pending = rephraser.rephrase(retry, round=round_index + 1, slots=missing)

    rows: list[tuple[Question, list[str], int]] = []
    rejections: list[Rejection] = []
    for position, question in enumerate(questions):
        texts = slots[question.id]
        holes = sum(1 for t in texts if t is None)
        if holes:  # padded or dropped: no checked rephrasing
            outcome["unfilled_slots"] += holes
        if question.id in complete_in:
            key = (
                "complete_first_round" if complete_in[question.id] == 0 else "complete_regenerated"
            )
            outcome[key] += 1
        if holes and config.fallback == "drop":
            outcome["dropped"] += 1
            rejections.append(
                Rejection(
                    source=question.source,
                    split=question.split,
                    row_index=position,
                    reason="insufficient_rephrasings",
                    upstream_id=question.id,
                    detail=f"{n - holes} of {n} rephrasings passed the checks",
                )
            )
            continue
        if holes:
            outcome["padded_questions"] += 1
            outcome["padded_slots"] += holes
        rows.append((question, [t if t is not None else question.problem for t in texts], holes))
    return PolicyResult(rows, rejections, verdicts, outcome)
