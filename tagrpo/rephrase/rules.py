"""Deterministic rephrasings without a model, each equivalent to the original by construction.

Two families of transforms:

* **Mini world**: a question's ``meta`` holds its structured problem, so the other phrasing
  families (``expr``, ``words``, ``imperative``, ``story``) render the *same* problem. The
  held-out family ``unseen`` is never used: it is reserved for the out-of-distribution
  benchmark. If the stored text does not match its own rendering, the meta is not trusted and
  the generic transforms are used instead.
* **Generic** (MATH-style text): formulas (``$...$``, ``\\[...\\]``, environments, ``[asy]``)
  are masked first and copied back verbatim, and only words outside them move or change:

  - ``lead_phrase``: the asking sentence's opening verb is swapped for a synonym
    (``What is X?`` -> ``Determine X.``, ``Find`` -> ``Determine``, ``Compute`` <->
    ``Calculate``, ``Evaluate X`` -> ``Compute the value of X``, ``Simplify X`` -> ``Find the
    simplest form of X``);
  - ``condition_last``: ``If A, what is B?`` -> ``What is B, given that A?`` (the paper's own
    example of an information-order change), when the condition holds no comma;
  - ``question_first``: the asking sentence moves before the context, introduced by
    "Use the following information." (answer-format sentences stay last);
  - ``wrap``: a fixed instruction before or after the unchanged text (no digits, no number
    words, so no number is added).

Every transform keeps every number and every formula of the original (the ``strict`` level of
the structural check holds by construction; the tests check it on real MATH problems). The
candidate list of a question is ordered: rewrites first, then rewrites inside a wrapper, then
wrappers of the original; round ``r`` of the regeneration policy draws from candidates
``r*N .. r*N+N-1`` (see :class:`~tagrpo.rephrase.generate.RulesRephraser`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tagrpo.data.schema import Question
from tagrpo.miniworld.dataset import problem_from_meta
from tagrpo.miniworld.tasks import PHRASING_FAMILIES, render

# Formulas and code blocks that must never be edited: display and inline math, environments,
# Asymptote figures. Masked with private-use characters (no digits, no sentence punctuation).
_PROTECTED = re.compile(
    r"\[asy\].*?\[/asy\]"
    r"|\$\$.+?\$\$"
    r"|\\\[.+?\\\]"
    r"|\\\(.+?\\\)"
    r"|\\begin\{([a-zA-Z*]+)\}.*?\\end\{\1\}"
    r"|\$(?:\\.|[^$\\])+\$",
    re.DOTALL,
)
_MASK_OPEN = "\ue000"
_MASK_BASE = 0xE100
_ABBREVIATIONS = ("Mr.", "Mrs.", "Ms.", "Dr.", "St.", "vs.", "etc.", "e.g.", "i.e.", "No.")
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z\ue000\"(])")
_ANSWER_FORMAT = re.compile(r"^(?:Express|Give|Write|Enter|Round|Your answer)\b")
_ASK = re.compile(
    r"^(?:What|Which|How|Find|Compute|Calculate|Determine|Evaluate|Simplify|Solve|"
    r"For (?:what|which|how))\b"
)
_CONDITION = re.compile(
    r"^(?:If|Given that|Suppose that|Suppose|Assume that)\s+(?P<cond>[^,]+?),\s+"
    r"(?P<ask>(?:what|which|how|find|compute|calculate|determine|evaluate)\b.*)$",
    re.DOTALL,
)

# (sentence-start pattern, replacement, ``?`` becomes ``.``)
LEAD_PHRASES: tuple[tuple[str, str, bool], ...] = (
    ("What is ", "Determine ", True),
    ("What are ", "Determine ", True),
    ("Find ", "Determine ", False),
    ("Compute ", "Calculate ", False),
    ("Calculate ", "Compute ", False),
    ("Evaluate ", "Compute the value of ", False),
    ("Determine ", "Find ", False),
    ("Simplify ", "Find the simplest form of ", False),
)

# (name, prefix, suffix): neutral instructions; no digits and no number words by design.
WRAPPERS: tuple[tuple[str, str, str], ...] = (
    ("solve_following", "Solve the following problem. ", ""),
    ("math_problem", "Here is a math problem: ", ""),
    ("consider", "Consider the following problem.\n\n", ""),
    ("solve_above", "", "\n\nSolve the problem above."),
    ("read_carefully", "Read the problem carefully and answer it.\n\n", ""),
    ("problem_label", "Problem: ", ""),
)

_MINIWORLD_SOURCE = "miniworld"


@dataclass(frozen=True)
class RuleCandidate:
    """One equivalent text and the transform(s) that made it (``origin``)."""

    text: str
    origin: str


# --- masking and sentences -------------------------------------------------------------------


def mask_formulas(text: str) -> tuple[str, list[str]]:
    """Replace each protected span with a placeholder; return the text and the spans."""
    spans: list[str] = []

    def keep(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return _MASK_OPEN + chr(_MASK_BASE + len(spans) - 1)

    if len(_PROTECTED.findall(text)) > 0xF000 - _MASK_BASE:
        raise ValueError("too many formulas to mask")
    return _PROTECTED.sub(keep, text), spans


def unmask_formulas(text: str, spans: Sequence[str]) -> str:
    def restore(match: re.Match[str]) -> str:
        return spans[ord(match.group(1)) - _MASK_BASE]

    return re.sub(_MASK_OPEN + "(.)", restore, text, flags=re.DOTALL)


def split_sentences(masked: str) -> list[str]:
    """Sentences of masked text; no split after common abbreviations or single initials."""
    pieces = _SENTENCE_END.split(masked.strip())
    sentences: list[str] = []
    for piece in pieces:
        if sentences and (
            sentences[-1].endswith(_ABBREVIATIONS) or re.search(r"\b[A-Z]\.$", sentences[-1])
        ):
            sentences[-1] = f"{sentences[-1]} {piece}"
        else:
            sentences.append(piece)
    return sentences


def _join(sentences: Sequence[str]) -> str:
    return " ".join(s.strip() for s in sentences if s.strip())


# --- generic transforms (on masked text; None when not applicable) ----------------------------


def _lead_phrase(masked: str) -> str | None:
    sentences = split_sentences(masked)
    if "\n" in masked:
        return None  # layout (lists, tables) would be reflowed by the sentence join
    for index in range(len(sentences) - 1, -1, -1):
        sentence = sentences[index]
        for start, replacement, question_to_statement in LEAD_PHRASES:
            if not sentence.startswith(start):
                continue
            if question_to_statement and not sentence.endswith("?"):
                continue
            rewritten = replacement + sentence[len(start) :]
            if question_to_statement:
                rewritten = rewritten[:-1] + "."
            return _join([*sentences[:index], rewritten, *sentences[index + 1 :]])
    return None


def _condition_last(masked: str) -> str | None:
    if "\n" in masked:
        return None
    sentences = split_sentences(masked)
    for index in range(len(sentences) - 1, -1, -1):
        match = _CONDITION.match(sentences[index])
        if not match:
            continue
        condition, ask = match.group("cond").strip(), match.group("ask").strip()
        if not ask or ask[-1] not in ".?" or "," in condition:
            continue
        rewritten = f"{ask[0].upper()}{ask[1:-1]}, given that {condition}{ask[-1]}"
        return _join([*sentences[:index], rewritten, *sentences[index + 1 :]])
    return None


def _question_first(masked: str) -> str | None:
    if "\n" in masked:
        return None
    sentences = split_sentences(masked)
    trailing = 0
    while trailing < len(sentences) and _ANSWER_FORMAT.match(sentences[-1 - trailing]):
        trailing += 1
    ask_index = len(sentences) - 1 - trailing
    if ask_index < 1:
        return None  # nothing before the question to move it ahead of
    ask = sentences[ask_index]
    if not (ask.endswith("?") or _ASK.match(ask)):
        return None
    context, tail = sentences[:ask_index], sentences[ask_index + 1 :]
    return _join([ask, "Use the following information.", *context, *tail])


GENERIC_REWRITES: tuple[tuple[str, Callable[[str], str | None]], ...] = (
    ("lead_phrase", _lead_phrase),
    ("condition_last", _condition_last),
    ("question_first", _question_first),
)


def _wrap(text: str, wrapper: tuple[str, str, str]) -> str:
    _, prefix, suffix = wrapper
    return f"{prefix}{text.strip()}{suffix}"


def _rotation(seed: int, question_id: str) -> int:
    """A stable per-question offset, so that not every question gets the same first wrapper."""
    digest = hashlib.sha256(f"{seed}:{question_id}".encode()).hexdigest()
    return int(digest[:8], 16) % len(WRAPPERS)


def generic_candidates(text: str, question_id: str = "", seed: int = 0) -> list[RuleCandidate]:
    """Every generic rewrite of ``text`` that applies, then wrapped forms; distinct, ordered."""
    masked, spans = mask_formulas(text)
    rewrites = []
    for name, rewrite in GENERIC_REWRITES:
        result = rewrite(masked)
        if result is not None and result != masked:
            rewrites.append(RuleCandidate(unmask_formulas(result, spans), name))
    return _with_wrappers([RuleCandidate(text.strip(), "")], rewrites, question_id, seed)


def _with_wrappers(
    bases: list[RuleCandidate], rewrites: list[RuleCandidate], question_id: str, seed: int
) -> list[RuleCandidate]:
    """``rewrites``, then each rewrite in a wrapper, then each base in a wrapper (distinct)."""
    offset = _rotation(seed, question_id)
    wrappers = [WRAPPERS[(offset + i) % len(WRAPPERS)] for i in range(len(WRAPPERS))]
    ordered = list(rewrites)
    for position, candidate in enumerate(rewrites):
        wrapper = wrappers[position % len(wrappers)]
        ordered.append(
            RuleCandidate(_wrap(candidate.text, wrapper), f"wrap:{wrapper[0]}+{candidate.origin}")
        )
    for position, base in enumerate(bases):
        for step in range(len(wrappers)):
            wrapper = wrappers[(position + step) % len(wrappers)]
            origin = f"wrap:{wrapper[0]}" + (f"+{base.origin}" if base.origin else "")
            ordered.append(RuleCandidate(_wrap(base.text, wrapper), origin))
    seen: set[str] = set()
    distinct = []
    for candidate in ordered:
        if candidate.text not in seen:
            seen.add(candidate.text)
            distinct.append(candidate)
    return distinct


# --- the mini world --------------------------------------------------------------------------


def miniworld_candidates(question: Question, seed: int = 0) -> list[RuleCandidate] | None:
    """Other-family renderings of a mini-world question; None if its meta cannot be trusted."""

    meta = question.meta or {}
    if question.source != _MINIWORLD_SOURCE or "family" not in meta or "changes" not in meta:
        return None
    try:
        problem = problem_from_meta(meta)
        own = render(problem, meta["family"])
    except (KeyError, ValueError, TypeError):
        return None
    if own != question.problem:
        return None  # the text was edited after generation: its meta no longer describes it
    renders = [
        RuleCandidate(render(problem, family), f"family:{family}")
        for family in PHRASING_FAMILIES
        if family != meta["family"]
    ]
    rewrites = []
    for candidate in renders:
        masked, spans = mask_formulas(candidate.text)
        for name, rewrite in GENERIC_REWRITES:
            result = rewrite(masked)
            if result is not None and result != masked:
                origin = f"{name}+{candidate.origin}"
                rewrites.append(RuleCandidate(unmask_formulas(result, spans), origin))
    # Renderings first (the most different equivalent texts), then their rewrites and wraps.
    return renders + _with_wrappers(renders, rewrites, question.id, seed)


def rule_candidates(question: Question, seed: int = 0) -> list[RuleCandidate]:
    """All equivalent texts the rules backend can offer for ``question``, in the order used."""
    texts = miniworld_candidates(question, seed)
    if texts is None:
        texts = generic_candidates(question.problem, question.id, seed)
    original = question.problem.strip()
    seen: set[str] = set()
    distinct = []
    for candidate in texts:
        if candidate.text.strip() != original and candidate.text not in seen:
            seen.add(candidate.text)
            distinct.append(candidate)
    return distinct
