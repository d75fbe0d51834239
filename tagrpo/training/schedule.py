"""The learning-rate schedule of every optimiser in the project: linear warm-up, then cosine.

The authors' scripts use a 10% warm-up then cosine decay (verl's ``lr_scheduler_type=cosine``);
the local trainer and the warm-start SFT both use this one function.
"""

from __future__ import annotations

import math


def warmup_cosine(step: int, total_steps: int, warmup_steps: int, min_ratio: float = 0.0) -> float:
    """Multiplier of the peak rate at optimiser step ``step`` (0-based).

    ``(step + 1) / warmup_steps`` during warm-up, then a cosine from 1 down to ``min_ratio`` at
    ``total_steps`` (held there afterwards).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
