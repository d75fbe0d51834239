"""The mini world (world v2): chains of additions and subtractions, several phrasings each.

It is the embedded default's stand-in for MATH. A problem is a start value and a chain of
signed changes (``12, +7, -4, +8``: answer 23) with an exact integer answer; a *phrasing
family* renders it as text. All families of one problem are equivalent by construction, the
property the paper's rephrasings are meant to have (section 4), so the mini world can show
TA-GRPO's mechanism offline: a policy's success depends on the phrasing (the paper's
Assumption 5.3), and pooling responses over phrasings can turn all-equal reward groups into
mixed ones.

Two solution paths per problem (:data:`STRATEGIES`): **forward** applies the changes left to
right, **backward** right to left (addition is commutative, so both reach the answer; the
first and last changes of a problem differ in size, so the two paths' first equations differ).
Both paths fail the same way: at a *misread* step the solver applies the change with the wrong
sign (``20 - 4 = 24.``), and the rest of the chain goes on from that total. Which steps a path
misreads is a habit of the warm-start corpus that depends on the phrasing family and on the
step's content (its sign and size, :func:`step_class`), symmetrically for the two paths
(:mod:`tagrpo.training.warmstart`). Longer chains hold more steps to misread, so they are
harder without any separate rule: the competition benchmark is the training distribution's
chains made longer.

Reference responses show one equation per change in the path's order and end with
``\\boxed{answer}``, the format the paper's Box 2 instruction asks for.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from tagrpo.data.prompts import CHOICE_LETTERS

# Families used for warm-start and RL; ``unseen`` is held out of both for the OOD benchmark.
PHRASING_FAMILIES = ("expr", "words", "imperative", "story")
HELD_OUT_FAMILY = "unseen"

# The content of one step, as the habits of the warm-start corpus see it: its sign and
# whether its size is at least ``big_from`` (common.miniworld.big_from).
STEP_CLASSES = ("plus_small", "plus_big", "minus_small", "minus_big")

STRATEGIES = ("forward", "backward")
# A worked answer names its path first: the path is then one decision at the first token (what
# RL can shift) and every later token can condition on it (the habits depend on the path).
PATH_NAMES = {"forward": "Left to right", "backward": "Right to left"}

_NAMES = ("Tom", "Ana", "Lee", "Mia", "Sam", "Zoe", "Ben", "Ivy")
_ITEMS = ("apples", "coins", "books", "stamps", "shells", "cards", "pens", "eggs")
# Story verbs cycle with the step's place, so a long story does not repeat one verb.
_GAINS = ("finds", "gets", "buys")
_LOSSES = ("loses", "gives away", "sells")


@dataclass(frozen=True)
class MiniProblem:
    """``start`` followed by the signed ``changes`` (none 0); the answer is their sum."""

    start: int
    changes: tuple[int, ...]
    # Story props (who, what) are part of the problem so every phrasing of it agrees.
    name: str = "Tom"
    item: str = "apples"

    def __post_init__(self) -> None:
        if len(self.changes) < 2:
            raise ValueError(f"a chain has at least 2 changes, got {self.changes}")
        if self.start < 0 or any(change == 0 for change in self.changes):
            raise ValueError(f"start must be >= 0 and no change 0: {self}")
        if self.answer < 0:
            raise ValueError(f"mini-world answers are non-negative: {self}")

    @property
    def answer(self) -> int:
        return self.start + sum(self.changes)

    @property
    def length(self) -> int:
        """The chain's length: its number of changes (= equations of either path)."""
        return len(self.changes)

    def key(self) -> str:
        """A stable id for the arithmetic (start and changes, not the story props).

        Splits, and the warm-start corpus, are disjoint by this key, so no test arithmetic
        leaks into warm-start or RL.
        """
        text = f"{self.start}:{','.join(f'{c:+d}' for c in self.changes)}"
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def step_class(change: int, big_from: int) -> str:
    """One of :data:`STEP_CLASSES` for a signed change."""
    sign = "plus" if change > 0 else "minus"
    return f"{sign}_{'big' if abs(change) >= big_from else 'small'}"


def _signed(change: int) -> str:
    return f"+ {change}" if change > 0 else f"- {-change}"


def _render_expr(p: MiniProblem) -> str:
    return f"What is {p.start} {' '.join(_signed(c) for c in p.changes)}?"


def _render_words(p: MiniProblem) -> str:
    words = " ".join(f"{'plus' if c > 0 else 'minus'} {abs(c)}" for c in p.changes)
    return f"Compute {p.start} {words}."


def _render_imperative(p: MiniProblem) -> str:
    steps = " ".join(f"{'Add' if c > 0 else 'Subtract'} {abs(c)}." for c in p.changes)
    return f"Start with {p.start}. {steps} What number do you get?"


def _story_steps(changes: Sequence[int]) -> str:
    phrases = []
    for index, change in enumerate(changes):
        if change > 0:
            phrases.append(f"{_GAINS[index % len(_GAINS)]} {change} more")
        else:
            phrases.append(f"{_LOSSES[index % len(_LOSSES)]} {-change}")
    return ", ".join(phrases[:-1]) + f", then {phrases[-1]}"


def _render_story(p: MiniProblem) -> str:
    who, what = p.name, p.item
    return (
        f"{who} has {p.start} {what}, {_story_steps(p.changes)}. "
        f"How many {what} does {who} have now?"
    )


def _render_unseen(p: MiniProblem) -> str:
    # A frame neither warm-start nor RL shows ("Begin with", "then", "the total"), around words
    # the seen families use (plus, minus): held out, yet readable (candidate 1's all-new
    # wording left the base below 7% pass@32, mostly rambling to the token limit).
    steps = ", ".join(f"then {'plus' if c > 0 else 'minus'} {abs(c)}" for c in p.changes)
    return f"Begin with {p.start}, {steps}. What is the total?"


RENDERERS: dict[str, Callable[[MiniProblem], str]] = {
    "expr": _render_expr,
    "words": _render_words,
    "imperative": _render_imperative,
    "story": _render_story,
    HELD_OUT_FAMILY: _render_unseen,
}


def render(problem: MiniProblem, family: str) -> str:
    """The problem's text in one phrasing family."""
    try:
        return RENDERERS[family](problem)
    except KeyError:
        raise ValueError(
            f"unknown phrasing family {family!r}; known: {sorted(RENDERERS)}"
        ) from None


def choice_options(problem: MiniProblem, seed: int, count: int = 4) -> tuple[list[str], str]:
    """``count`` numeric options (a window of consecutive values around the answer), shuffled,
    and the gold letter.

    The answer's place in the window is drawn (windows start at 0 at the lowest), so the
    options' range gives nothing away; a guesser's pass@1 is 1 / count.
    """
    if not 2 <= count <= len(CHOICE_LETTERS):
        raise ValueError(f"count must be 2..{len(CHOICE_LETTERS)}, got {count}")
    rng = random.Random(f"{seed}:{count}:{problem.key()}")
    answer = problem.answer
    start = max(0, answer - rng.randrange(count))
    options = list(range(start, start + count))
    rng.shuffle(options)
    return [str(option) for option in options], CHOICE_LETTERS[options.index(answer)]


def path_order(problem: MiniProblem, strategy: str) -> list[int]:
    """The indices of the changes in the order a path applies them."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; known: {list(STRATEGIES)}")
    order = list(range(problem.length))
    return order if strategy == "forward" else order[::-1]


def misread_result(problem: MiniProblem, misread: Collection[int]) -> int:
    """The result of a solver who flips the sign of the changes at indices ``misread``."""
    return problem.start + sum(
        -change if index in misread else change for index, change in enumerate(problem.changes)
    )


def reference_response(
    problem: MiniProblem,
    letter: str | None = None,
    strategy: str = "forward",
    misread: Collection[int] = (),
) -> str:
    """A worked answer along ``strategy``: one equation per change, then the boxed result (or
    the option letter).

    ``Right to left: 12 + 8 = 20. 20 - 4 = 16. 16 + 7 = 23. The answer is \\boxed{23}.`` is
    the backward path of ``12, +7, -4, +8``. Each equation holds its own arithmetic (the
    previous total, the next term, the new total): a tiny model learns that in 1,000 SFT steps,
    where a restated chain followed by the totals alone was not learned in 2,000
    (preregistration/world-v2-candidates.md). The path's name comes first, so the path is one
    decision at the first token and the habits can condition on it.
    ``misread`` (indices into ``problem.changes``) are the steps whose sign the solver gets
    backwards when it computes: ``20 - 4 = 24.`` The term is copied right and the slip is in
    the result, so the habit is decided where its trigger (the term just written) is in view;
    the chain goes on from the wrong total, and the answer is :func:`misread_result`.
    """
    unknown = sorted(set(misread) - set(range(problem.length)))
    if unknown:
        raise ValueError(f"misread steps {unknown} are not in a chain of {problem.length}")
    total, equations = problem.start, []
    for index in path_order(problem, strategy):
        change = problem.changes[index]
        result = total - change if index in misread else total + change
        equations.append(f"{total} {_signed(change)} = {result}.")
        total = result
    boxed = letter if letter is not None else str(total)
    return f"{PATH_NAMES[strategy]}: {' '.join(equations)} The answer is \\boxed{{{boxed}}}."


def misread_steps(
    problem: MiniProblem,
    family: str,
    strategy: str,
    habits: Mapping[str, Mapping[str, Collection[str]]],
    big_from: int,
) -> list[int]:
    """The steps whose class the (family, strategy) habit misreads (before its rate)."""
    classes = habits.get(family, {}).get(strategy, ())
    return [
        index
        for index, change in enumerate(problem.changes)
        if step_class(change, big_from) in classes
    ]


# Draws per problem before a space is declared empty (admissible chains are far more common in
# any usable space: about 1 in 3 of length 5 in the default's).
_MAX_REJECTIONS = 10_000


@dataclass(frozen=True)
class ProblemSpace:
    """Which problems a split draws: chain lengths (weights), start values, change sizes, and
    the range every running total of either path stays in."""

    lengths: Mapping[int, float]
    start_min: int = 5
    start_max: int = 25
    max_change: int = 9
    max_total: int = 40

    def __post_init__(self) -> None:
        if not self.lengths or any(length < 2 for length in self.lengths):
            raise ValueError(f"chain lengths must be >= 2, got {dict(self.lengths)}")
        if any(w < 0 for w in self.lengths.values()) or not any(self.lengths.values()):
            raise ValueError("chain-length weights must be >= 0 and not all 0")
        if not 0 <= self.start_min <= self.start_max <= self.max_total or self.max_change < 2:
            raise ValueError(f"inconsistent problem space: {self}")

    def admits(self, start: int, changes: Sequence[int]) -> bool:
        """Both paths keep every running total in [0, max_total], and the first and last
        changes differ in size (so the two paths start differently)."""
        if abs(changes[0]) == abs(changes[-1]):
            return False
        for order in (changes, changes[::-1]):
            total = start
            for change in order:
                total += change
                if not 0 <= total <= self.max_total:
                    return False
        return True

    def sample(self, rng: random.Random) -> MiniProblem:
        lengths = sorted(self.lengths)
        length = rng.choices(lengths, weights=[self.lengths[n] for n in lengths])[0]
        for _ in range(_MAX_REJECTIONS):
            start = rng.randint(self.start_min, self.start_max)
            changes = [rng.choice((1, -1)) * rng.randint(1, self.max_change) for _ in range(length)]
            if self.admits(start, changes):
                break
        else:
            raise ValueError(
                f"no chain of length {length} fits {self}: every running total must stay in "
                f"0..{self.max_total} (widen max_total or shorten the chains)"
            )
        return MiniProblem(
            start=start, changes=tuple(changes), name=rng.choice(_NAMES), item=rng.choice(_ITEMS)
        )


def sample_problems(
    space: ProblemSpace, count: int, seed: int, exclude: set[str] | None = None
) -> list[MiniProblem]:
    """``count`` distinct problems (by content key), none of them in ``exclude``."""
    rng = random.Random(seed)
    seen = set(exclude or ())
    problems: list[MiniProblem] = []
    attempts = 0
    while len(problems) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ValueError(
                f"could not draw {count} distinct problems from {space}: the space is too small"
            )
        problem = space.sample(rng)
        if problem.key() in seen:
            continue
        seen.add(problem.key())
        problems.append(problem)
    return problems


def assign_families(
    problems: Sequence[MiniProblem], families: Sequence[str], seed: int
) -> list[str]:
    """A seeded original phrasing family per problem (real datasets mix phrasings too)."""
    rng = random.Random(seed)
    return [rng.choice(list(families)) for _ in problems]
