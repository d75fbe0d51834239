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
import pandas as pd

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


def group_distances(
    samples: pd.DataFrame,
    embed: EmbedFn,
    group_columns: Sequence[str],
    text_column: str = "response",
) -> pd.DataFrame:
    """One row per group: its size and mean pairwise cosine distance of ``text_column``.

    All texts are embedded in one call (batched), then split by group.
    """
    missing = [c for c in (*group_columns, text_column) if c not in samples.columns]
    if missing:
        raise KeyError(f"samples lack columns {missing}")
    if samples.empty:
        return pd.DataFrame(columns=[*group_columns, "responses", "mean_distance"])
    embeddings = np.asarray(embed(samples[text_column].tolist()))
    if len(embeddings) != len(samples):
        raise ValueError(f"embed returned {len(embeddings)} vectors for {len(samples)} texts")
    rows = []
    positions = np.arange(len(samples))
    for key, group in samples.assign(_position=positions).groupby(list(group_columns), sort=True):
        keys = key if isinstance(key, tuple) else (key,)
        rows.append(
            {
                **dict(zip(group_columns, keys, strict=True)),
                "responses": len(group),
                "mean_distance": mean_pairwise_cosine_distance(
                    embeddings[group["_position"].to_numpy()]
                ),
            }
        )
    return pd.DataFrame(rows)
