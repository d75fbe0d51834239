"""Pairwise embedding distance: exact values on hand-made vectors, grouping, edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tagrpo.metrics.diversity import mean_pairwise_cosine_distance

pytestmark = pytest.mark.core


def test_identical_vectors_have_zero_distance_and_scale_does_not_matter() -> None:
    assert mean_pairwise_cosine_distance(np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])) == (
        pytest.approx(0.0, abs=1e-12)
    )


def test_orthogonal_and_opposite_pairs() -> None:
    # pairs: (e1,e2) distance 1, (e1,-e1) distance 2, (e2,-e1) distance 1 -> mean 4/3
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    assert mean_pairwise_cosine_distance(vectors) == pytest.approx(4 / 3)


def test_fewer_than_two_responses_is_nan_and_bad_input_raises() -> None:
    assert math.isnan(mean_pairwise_cosine_distance(np.ones((1, 3))))
    with pytest.raises(ValueError, match="2-D"):
        mean_pairwise_cosine_distance(np.ones(3))
    with pytest.raises(ValueError, match="zero norm"):
        mean_pairwise_cosine_distance(np.array([[0.0, 0.0], [1.0, 0.0]]))
