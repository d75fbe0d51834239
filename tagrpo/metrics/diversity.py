"""Response diversity: the average pairwise embedding distance within a group of responses.

The paper's Figure 4 compares, per training question, the average distance among the G
responses to the original with the average among the N x G responses to its neighbours. We
use the cosine distance ``1 - cos(e_i, e_j)`` over distinct pairs ``i < j`` of
sentence embeddings; a group with fewer than two responses has no pairs and yields NaN
(reported, never silently counted as zero diversity).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

EmbedFn = Callable[[Sequence[str]], np.ndarray]


def mean_pairwise_cosine_distance(embeddings: np.ndarray) -> float:
    """Mean of ``1 - cos`` over the distinct pairs of rows; NaN with fewer than two rows."""
    vectors = np.asarray(embeddings, dtype=np.float64)
    if vectors.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (responses x dims), got shape {vectors.shape}")
    count = len(vectors)
    if count < 2:
        return float("nan")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("an embedding has zero norm: cosine distance is undefined")
    unit = vectors / norms
    similarity = unit @ unit.T
    # Sum over i != j, halved, divided by the number of pairs.
    off_diagonal = similarity.sum() - np.trace(similarity)
    mean_similarity = off_diagonal / (count * (count - 1))
    return float(1.0 - mean_similarity)
