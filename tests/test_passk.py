from fractions import Fraction
from math import comb

import numpy as np
import pytest

from tagrpo.metrics import (
    bootstrap_pass_at_k,
    pass_at_k,
    pass_at_k_per_problem,
    pass_at_k_table,
)

pytestmark = pytest.mark.core


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(comb(n - c, k), comb(n, k))


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (1, 0, 1, 0.0),
        (1, 1, 1, 1.0),
        (4, 1, 1, 0.25),  # pass@1 = c / n
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 0, 5, 0.0),
    ],
)
def test_small_cases_match_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-15)


def test_one_when_fewer_wrong_than_k():
    assert pass_at_k(8, 5, 4) == 1.0  # only 3 wrong samples: every 4-subset has a correct one
    assert pass_at_k(32, 32, 32) == 1.0


def test_k_larger_than_n_raises():
    with pytest.raises(ValueError, match="at least k samples"):
        pass_at_k(4, 1, 8)


@pytest.mark.parametrize("bad", [(4, 5, 1), (4, 1, 0), (-1, 0, 1)])
def test_invalid_counts_raise(bad):
    with pytest.raises(ValueError):
        pass_at_k(*bad)


def test_float_counts_refused():
    with pytest.raises(TypeError):
        pass_at_k(4.0, 1, 1)


@pytest.mark.parametrize("n", [32, 128, 1024, 4096])
def test_product_form_is_exact_for_large_n(n):
    # comb(4096, 2048) has more than 1,200 digits: the naive ratio overflows a float.
    for c in (0, 1, n // 7, n // 2, max(0, n - 33)):
        for k in (1, 2, 8, 32):
            exact = float(exact_pass_at_k(n, c, k))
            assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12, abs=1e-15)


def test_vectorised_equals_scalar_and_broadcasts_n():
    correct = np.array([0, 1, 5, 31, 32, 1, 0])
    values = pass_at_k_per_problem(32, correct, 8)
    assert values.tolist() == [pass_at_k(32, int(c), 8) for c in correct]
    mixed_n = pass_at_k_per_problem([4, 8, 16], [1, 1, 1], 2)
    assert mixed_n.tolist() == [pass_at_k(4, 1, 2), pass_at_k(8, 1, 2), pass_at_k(16, 1, 2)]


def test_bootstrap_interval_brackets_mean_and_is_seeded():
    rng = np.random.default_rng(3)
    correct = rng.integers(0, 33, size=200)
    first = bootstrap_pass_at_k(32, correct, 4, n_resamples=500, seed=7)
    again = bootstrap_pass_at_k(32, correct, 4, n_resamples=500, seed=7)
    assert first == again
    assert first.low <= first.mean <= first.high
    assert first.mean == pytest.approx(pass_at_k_per_problem(32, correct, 4).mean())
    assert first.n_problems == 200
    assert 0.0 < first.high - first.low < 0.2


def test_bootstrap_of_identical_problems_has_zero_width():
    interval = bootstrap_pass_at_k(8, [2] * 50, 2, n_resamples=200)
    assert interval.low == interval.mean == interval.high == pytest.approx(pass_at_k(8, 2, 2))


def test_table_keeps_only_feasible_k():
    table = pass_at_k_table(16, [1, 3, 0], ks=[1, 2, 4, 8, 16, 32], n_resamples=50)
    assert [row.k for row in table] == [1, 2, 4, 8, 16]
    assert [row.mean for row in table] == sorted(row.mean for row in table)  # monotone in k
