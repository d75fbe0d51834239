"""Which solution path a response took, and how varied a policy's paths are per question.

The mini world has two valid paths per problem (:data:`tagrpo.miniworld.tasks.STRATEGIES`): the
first equation of a response says which one it started (forward begins with the first two
operands in order, backward with the last operation). Strategy entropy per question
(:func:`tagrpo.metrics.testbed.strategy_entropy`, over the responses that took a known path)
measures the diversity that RL can narrow (the paper's diversity collapse, Figure 4) in terms
of content, not wording: 1 bit = both paths equally often, 0 = one path only.
"""

from __future__ import annotations

import re

from tagrpo.metrics.testbed import NO_STRATEGY
from tagrpo.miniworld.tasks import MiniProblem

# The first "x op y = z" of a response (a negative z allowed: a misread difference).
_FIRST_EQUATION = re.compile(r"(-?\d+)\s*([+-])\s*(-?\d+)\s*=\s*(-?\d+)")
# No first equation, or one that starts neither path; or one that starts both (3 + 3 + 3).
UNKNOWN, AMBIGUOUS = NO_STRATEGY


def _starts(problem: MiniProblem) -> dict[str, tuple[int, str, int]]:
    a, b = problem.operands[:2]
    if problem.operation == "add":
        return {"forward": (a, "+", b), "backward": (b, "+", a)}
    if problem.operation == "sub":
        return {"forward": (a, "-", b), "backward": (b, "+", a - b)}
    c = problem.operands[2]
    last = "-" if problem.operation == "addsub" else "+"
    return {"forward": (a, "+", b), "backward": (b, last, c)}


def strategy_of(problem: MiniProblem, response: str) -> str:
    """``forward``, ``backward``, :data:`AMBIGUOUS` or :data:`UNKNOWN` for one response.

    The forward path is told by its first two operands in order, whatever the sign (a misread
    two-operand problem flips it); the backward path of a difference starts "b + r = a", so it is
    told by its left operand and its right-hand side (``a``), whatever ``r`` the response wrote.
    """
    match = _FIRST_EQUATION.search(response)
    if match is None:
        return UNKNOWN
    left, sign, right, result = int(match[1]), match[2], int(match[3]), int(match[4])
    matched = []
    for strategy, (x, op, y) in _starts(problem).items():
        if problem.operation == "sub" and strategy == "backward":
            if (left, sign, result) == (x, op, problem.operands[0]):
                matched.append(strategy)
        elif strategy == "forward" and (left, right) == (x, y):
            matched.append(strategy)  # any sign: a misread flips a difference's only operation
        elif (left, sign, right) == (x, op, y):
            matched.append(strategy)
    if len(matched) == 1:
        return matched[0]
    return AMBIGUOUS if matched else UNKNOWN
