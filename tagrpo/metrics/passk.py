"""The unbiased pass@k estimator of Chen et al. (2021), as the paper uses it (Appendix D).

For one problem with ``n`` samples of which ``c`` are correct,

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i).

The product form never builds the huge binomials, so it stays accurate for n of several
thousands, where ``comb(n, k)`` overflows a float.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


def _as_count(value: object, name: str) -> int:
    try:
        count = operator.index(value)  # accepts int and numpy integers, refuses floats
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if count < 0:
        raise ValueError(f"{name} must be >= 0, got {count}")
    return count


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: ``n`` samples, ``c`` correct.

    Returns 1.0 when ``n - c < k`` (every k-subset holds a correct sample).
    Raises ``ValueError`` when ``k > n`` (the estimator is undefined), when ``k < 1`` or
    when ``c`` is outside ``[0, n]``.
    """
    n, c, k = _as_count(n, "n"), _as_count(c, "c"), _as_count(k, "k")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k samples per problem, got n={n}")
    if c > n:
        raise ValueError(f"c={c} correct samples exceeds n={n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_at_k_per_problem(
    n: Sequence[int] | np.ndarray | int, c: Sequence[int] | np.ndarray, k: int
) -> np.ndarray:
    """Vectorised :func:`pass_at_k` over problems; ``n`` may be a scalar shared by all.

    Each distinct ``(n, c)`` pair is computed once (with a fixed n there are at most n + 1),
    so the result equals the scalar function bit for bit.
    """
    correct = np.asarray(c, dtype=np.int64)
    samples = np.broadcast_to(np.asarray(n, dtype=np.int64), correct.shape)
    pairs = np.stack([samples.ravel(), correct.ravel()], axis=1)
    unique_pairs, inverse = np.unique(pairs, axis=0, return_inverse=True)
    values = np.array([pass_at_k(int(ni), int(ci), k) for ni, ci in unique_pairs], dtype=float)
    return values[inverse.ravel()].reshape(correct.shape)


@dataclass(frozen=True)
class PassAtKInterval:
    """Mean pass@k over problems with a percentile-bootstrap confidence interval."""

    k: int
    mean: float
    low: float
    high: float
    n_problems: int


def bootstrap_pass_at_k(
    n: Sequence[int] | np.ndarray | int,
    c: Sequence[int] | np.ndarray,
    k: int,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PassAtKInterval:
    """Mean pass@k with a bootstrap CI obtained by resampling *problems* with replacement.

    Sampling noise within a problem is already averaged out by the unbiased estimator; the
    interval reflects which problems happen to be in the benchmark.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    per_problem = pass_at_k_per_problem(n, c, k)
    if per_problem.size == 0:
        raise ValueError("no problems to average")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, per_problem.size, size=(n_resamples, per_problem.size))
    resampled_means = per_problem[draws].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(resampled_means, [alpha, 1.0 - alpha])
    return PassAtKInterval(
        k=k,
        mean=float(per_problem.mean()),
        low=float(low),
        high=float(high),
        n_problems=int(per_problem.size),
    )


def pass_at_k_table(
    n: Sequence[int] | np.ndarray | int,
    c: Sequence[int] | np.ndarray,
    ks: Iterable[int],
    n_resamples: int = 1000,
    seed: int = 0,
) -> list[PassAtKInterval]:
    """pass@k with CIs for every ``k`` in ``ks`` that the sample count allows (k <= min n)."""
    min_samples = int(np.min(n))
    return [
        bootstrap_pass_at_k(n, c, k, n_resamples=n_resamples, seed=seed)
        for k in sorted(set(ks))
        if k <= min_samples
    ]
