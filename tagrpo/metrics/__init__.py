"""Evaluation and training metrics (pure functions, no model or framework imports)."""

from tagrpo.metrics.passk import (
    PassAtKInterval,
    bootstrap_pass_at_k,
    pass_at_k,
    pass_at_k_per_problem,
    pass_at_k_table,
)

__all__ = [
    "PassAtKInterval",
    "bootstrap_pass_at_k",
    "pass_at_k",
    "pass_at_k_per_problem",
    "pass_at_k_table",
]
