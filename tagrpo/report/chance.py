"""Chance floors of multiple-choice benchmarks: which of a profile's benchmarks are multiple
choice (and with how many options: declared on each source, :mod:`tagrpo.data.sources`, or in
the mini world's params), the chance pass@k of a benchmark or of a group average holding one,
and the one definition of the k from which a multiple-choice benchmark stops being informative.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tagrpo.metrics.compare import chance_pass_at_k

if TYPE_CHECKING:
    from tagrpo.config.params import Params

# When a multiple-choice benchmark stops being informative: at the smallest k where guessing
# alone reaches CHANCE_CEILING pass@k (little headroom is left for any method), or where the base
# policy is less than MIN_MARGIN above guessing (the score then measures the guess, not the model).
CHANCE_CEILING = 0.9
MIN_MARGIN = 0.05


def multiple_choice_options(config: Params) -> dict[str, int]:
    """The profile's multiple-choice benchmarks -> options per question
    (:meth:`tagrpo.config.params.Params.multiple_choice_options`)."""
    return config.multiple_choice_options()


def chance_floor(
    name: str, k: int, options: Mapping[str, int], groups: Mapping[str, Sequence[str]]
) -> float | None:
    """Chance pass@k of a benchmark (``options[name]`` answers) or of a group average (the
    mean of its members' floors, a free-form answer counting 0); None when nothing in it is
    multiple choice."""
    if name in options:
        return chance_pass_at_k(options[name], k)
    members = groups.get(name)
    if not members or not any(m in options for m in members):
        return None
    floors = [chance_pass_at_k(options[m], k) if m in options else 0.0 for m in members]
    return float(np.mean(floors))


def uninformative_from(
    options: int, ks: Sequence[int], base: Mapping[int, float]
) -> tuple[int | None, str]:
    """The smallest of ``ks`` at which a benchmark of ``options`` answers stops being
    informative (None: informative at every k), and why; ``base`` is the base policy's pass@k
    by k (an error when a k is missing)."""
    for k in sorted(ks):
        if k not in base:
            raise KeyError(f"the base policy has no pass@{k}")
        chance = chance_pass_at_k(options, k)
        if chance >= CHANCE_CEILING:
            return k, f"guessing reaches {100 * chance:.1f}% (>= {100 * CHANCE_CEILING:.0f}%)"
        margin = base[k] - chance
        if margin < MIN_MARGIN:
            side = "above" if margin >= 0 else "below"
            return k, (
                f"the base policy is {100 * abs(margin):.2f} points {side} guessing "
                f"(informative needs at least {100 * MIN_MARGIN:.0f} above)"
            )
    return None, "informative at every k"
