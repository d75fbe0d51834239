"""The rephrasing prompt: the paper's Appendix A instruction and few-shot examples, versioned.

The paper (Appendix A, Box 1) gives GPT-4-Turbo an instruction and eight question/rephrasing
pairs. The PDF-to-text copy renders each formula twice (plain and LaTeX); the LaTeX form is
kept here. The first example's rephrasing starts with "the above question:" in the paper; it
is kept verbatim (fidelity), and :mod:`tagrpo.rephrase.parse` strips such an echo from replies.

A template's *version* is part of every cache key: changing the wording, the examples or the
layout must change the version, so old replies are never served for a new prompt. A user
template file is versioned by its content hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

APPENDIX_A_INSTRUCTION = (
    "You are a helpful AI assistant. Given the question, your task is rephrasing it from "
    "multiple perspectives while preserving the underlying problem. You should apply linguistic "
    "perturbations (changes in wording, format, or information order) rather than plain changes "
    "like variable renaming. Follow the given examples:"
)

# (question, rephrasing) pairs of Box 1, in the paper's order.
APPENDIX_A_EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "Kevin Kangaroo begins hopping on a number line at 0. He wants to get to 1, but he can "
        "hop only $\\frac{1}{3}$ of the distance. Each hop tires him out so that he continues to "
        "hop $\\frac{1}{3}$ of the remaining distance. How far has he hopped after five hops? "
        "Express your answer as a common fraction.",
        "the above question: Starting at 0 on a number line, Kevin Kangaroo aims to reach 1 by "
        "hopping only 1/3 of the distance each time. As he gets tired, he continues to hop 1/3 "
        "of the remaining distance. After completing five hops, what is the total distance he "
        "has covered, expressed as a common fraction?",
    ),
    (
        "What is the area of the region defined by the equation $x^{2}+y^{2}-7=4y-14x+3$?",
        "Determine the area of the region described by the equation $x^{2}+y^{2}-7=4y-14x+3$?",
    ),
    (
        "If $x^{2}+y^{2}=1$, what is the largest possible value of $|x|+|y|$?",
        "What is the maximum value possible for $|x|+|y|$ if $x^{2}+y^{2}=1$?",
    ),
    (
        "If $f(x)=\\frac{ax+b}{cx+d},abcd\\not=0$ and $f(f(x))=x$ for all $x$ in the domain of "
        "$f$, what is the value of $a+d$?",
        "Given that $f(x)=\\frac{ax+b}{cx+d}$, with all variables not equal to 0, and "
        "$f(f(x))=x$ for all x within the domain of f, what is the value of $a+d$?",
    ),
    (
        "A math teacher requires Noelle to do one homework assignment for each of the first five "
        "homework points she wants to earn; for each of the next five homework points, she needs "
        "to do two homework assignments; and so on, so that to earn the $n^{\\text{th}}$ homework "
        "point, she has to do $n\\div 5$ (rounded up) homework assignments. For example, when "
        "she has 11 points, it will take $12\\div 5=2.4\\rightarrow 3$ homework assignments to "
        "earn her $12^{\\text{th}}$ point. What is the smallest number of homework assignments "
        "necessary to earn a total of 25 homework points?",
        "Noelle's math teacher has a system where she needs to complete one homework assignment "
        "for each of the first five points, two assignments for each of the next five points, "
        "and so on, with the number of assignments required for the nth point being n divided "
        "by 5 (rounded up). For instance, to get her 12th point, she needs to complete 3 "
        "assignments (12/5 = 2.4, rounded up to 3). What is the minimum number of homework "
        "assignments Noelle must complete to earn a total of 25 points?",
    ),
    (
        "The quadratic equation $x^{2}+mx+n=0$ has roots that are twice those of "
        "$x^{2}+px+m=0$, and none of $m$, $n$, and $p$ is zero. What is the value of $n/p$?",
        "For the quadratic equation $x^{2}+mx+n=0$, the roots are twice the roots of "
        "$x^{2}+px+m=0$. None of the variables $m$, $n$, and $p$ are zero. What is the value of "
        "$n/p$?",
    ),
    (
        "Expand $(2z^{2}+5z-6)(3z^{3}-2z+1)$.",
        "What is the expanded form of $(2z^{2}+5z-6)(3z^{3}-2z+1)$?",
    ),
    (
        "Find the mean of all solutions for $x$ when $x^{3}+3x^{2}-10x=0$.",
        "What is the average of all the solutions for $x$ in the equation $x^{3}+3x^{2}-10x=0$?",
    ),
)

# Asking for several rephrasings in one request (``requests: numbered``) needs a format the
# reply parser can split; the paper sends one question per request and samples N times.
NUMBERED_SUFFIX = (
    "Write {n} different rephrasings of the last question. Number them 1 to {n}, one per "
    "paragraph, and write nothing else."
)


@dataclass(frozen=True)
class RephraseTemplate:
    """A prompt layout: ``{question}`` is the question to rephrase, ``{n}`` the item count."""

    name: str
    version: str
    body: str  # instruction and examples, ending just before the new question

    def messages(self, question: str, n_items: int = 1) -> list[dict[str, str]]:
        """One user turn: the instruction, the examples, the question, the reply cue."""
        if n_items < 1:
            raise ValueError(f"n_items must be >= 1, got {n_items}")
        parts = [self.body, f"Question: {question.strip()}"]
        if n_items > 1:
            parts.append(NUMBERED_SUFFIX.format(n=n_items))
        parts.append("Rephrasing it:")
        return [{"role": "user", "content": "\n\n".join(parts)}]

    def cache_version(self, n_items: int) -> str:
        """The version that enters cache keys (the numbered layout is a different prompt)."""
        return self.version if n_items == 1 else f"{self.version}+numbered"


def _appendix_a_body() -> str:
    blocks = [APPENDIX_A_INSTRUCTION]
    for question, rephrasing in APPENDIX_A_EXAMPLES:
        blocks.append(f"Question: {question}\nRephrasing it: {rephrasing}")
    return "\n\n".join(blocks)


APPENDIX_A = RephraseTemplate(name="appendix_a", version="appendix_a/v1", body=_appendix_a_body())
TEMPLATES: dict[str, RephraseTemplate] = {APPENDIX_A.name: APPENDIX_A}


def load_template(name: str = "appendix_a", path: str | Path | None = None) -> RephraseTemplate:
    """A built-in template by name, or a text file (instruction and examples) by path.

    A file template is versioned by the sha256 of its text, so editing it invalidates the cache.
    """
    if path:
        text = Path(path).read_text(encoding="utf-8").strip()
        if not text:
            raise ValueError(f"template file {path} is empty")
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return RephraseTemplate(name=f"file:{Path(path).name}", version=f"file/{digest}", body=text)
    try:
        return TEMPLATES[name]
    except KeyError:
        raise ValueError(
            f"unknown rephrase template {name!r}; known: {sorted(TEMPLATES)}"
        ) from None
