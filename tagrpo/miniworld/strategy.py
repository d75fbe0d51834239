"""Which solution path a response took, and how varied a policy's paths are per question.

The mini world has two valid paths per problem (:data:`tagrpo.miniworld.tasks.STRATEGIES`):
forward applies the changes left to right, backward right to left. A problem's first and last
changes differ in size, so the first equation of a response says which path it took: its left
operand is the start and its right operand the size of the first change (forward) or of the
last (backward), whatever sign the response wrote (a misread flips the sign, not the size).
Strategy entropy per question (:func:`tagrpo.metrics.testbed.strategy_entropy`, over the
responses that took a known path) measures the diversity that RL can narrow (the paper's
diversity collapse, Figure 4) in terms of content, not wording: 1 bit = both paths equally
often, 0 = one path only.
"""

from __future__ import annotations

import re

from tagrpo.metrics.testbed import NO_STRATEGY
from tagrpo.miniworld.tasks import MiniProblem

# The first "x op y = z" of a response (z may be negative: a misread step can go below 0).
_FIRST_EQUATION = re.compile(r"(-?\d+)\s*([+-])\s*(\d+)\s*=\s*(-?\d+)")
# No first equation, or one that starts neither path; or one that starts both.
UNKNOWN, AMBIGUOUS = NO_STRATEGY


def strategy_of(problem: MiniProblem, response: str) -> str:
    """``forward``, ``backward``, :data:`AMBIGUOUS` or :data:`UNKNOWN` for one response."""
    match = _FIRST_EQUATION.search(response)
    if match is None or int(match[1]) != problem.start:
        return UNKNOWN
    size = int(match[3])
    matched = [
        strategy
        for strategy, change in (("forward", problem.changes[0]), ("backward", problem.changes[-1]))
        if size == abs(change)
    ]
    if len(matched) == 1:
        return matched[0]
    return AMBIGUOUS if matched else UNKNOWN
