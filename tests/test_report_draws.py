"""World v3's calibration rules over base draws (tagrpo.report.draws): the competition length
and the primary endpoint, on hand-made pass@k tables."""

from __future__ import annotations

import pandas as pd
import pytest

from tagrpo.report.draws import competition_rule, confirmatory_seed, primary_endpoint_rule
from tagrpo.report.validity import Bands

pytestmark = pytest.mark.core

V3 = Bands(harder_pass_at_1=(0.02, 1.0), harder_pass_at_k=(0.25, 0.85))


def _passk(policy: str, values: dict[tuple[str, int], float]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"policy": policy, "kind": "group", "name": g, "k": k, "pass_at_k": v}
            for (g, k), v in values.items()
        ]
    )


def _base(long4: tuple[float, float], long5: tuple[float, float]) -> pd.DataFrame:
    return _passk(
        "base",
        {
            ("competition", 1): long4[0],
            ("competition", 32): long4[1],
            ("competition5", 1): long5[0],
            ("competition5", 32): long5[1],
        },
    )


LENGTHS = {4: "competition", 5: "competition5"}


def test_competition_rule_needs_every_draw_and_prefers_the_mean_nearer_55() -> None:
    both = {
        "d0": _base((0.10, 0.60), (0.03, 0.40)),
        "d1": _base((0.12, 0.70), (0.05, 0.45)),
    }
    chosen, rows = competition_rule(both, LENGTHS, V3, 32)
    # Both pass; chains of 4 average 65% (10 from 55), chains of 5 42.5% (12.5 from 55).
    assert chosen == "competition" and [r[-1] for r in rows] == ["PASS", "PASS"]
    assert rows[0][2:] == ["10.0 / 60.0", "12.0 / 70.0", "65.0", "PASS"]
    one_draw_fails = {
        "d0": _base((0.10, 0.60), (0.03, 0.40)),
        "d1": _base((0.12, 0.90), (0.019, 0.45)),  # 4: pass@32 over 85%; 5: pass@1 under 2%
    }
    chosen, rows = competition_rule(one_draw_fails, LENGTHS, V3, 32)
    assert chosen is None and [r[-1] for r in rows] == ["FAIL", "FAIL"]
    with pytest.raises(KeyError, match="no base pass@1 and pass@32"):
        competition_rule({"d0": _base((0.1, 0.6), (0.1, 0.6))}, {6: "competition6"}, V3, 32)


def _grpo(draw: dict[tuple[str, int], list[float]]) -> pd.DataFrame:
    """Per (group, k) the values of the draw's seeds."""
    frames = []
    for seed in range(len(next(iter(draw.values())))):
        frames.append(_passk(f"grpo-s{seed}", {key: v[seed] for key, v in draw.items()}))
    return pd.concat(frames, ignore_index=True)


ORDER = [("in_distribution", 32), ("competition", 32), ("in_distribution", 16)]


def test_primary_endpoint_is_the_first_pair_inside_the_band_on_every_draw() -> None:
    draws = {
        "d0": _grpo(
            {
                ("in_distribution", 32): [0.95, 0.90, 0.80],  # mean 88.3: a ceiling
                ("competition", 32): [0.80, 0.86, 0.70],  # mean 78.7
                ("in_distribution", 16): [0.7, 0.7, 0.7],
            }
        ),
        "d1": _grpo(
            {
                ("in_distribution", 32): [0.80, 0.80, 0.80],
                ("competition", 32): [0.60, 0.60, 0.63],
                ("in_distribution", 16): [0.7, 0.7, 0.7],
            }
        ),
    }
    chosen, rows = primary_endpoint_rule(draws, ORDER, (0.30, 0.85), "competition")
    assert chosen == ("competition", 32)
    assert [r[-1] for r in rows] == ["FAIL", "PASS"]  # the order stops at the first pass
    assert rows[0][2] == "d0 88.3, d1 80.0"
    # Without an L_c the competition group cannot be the endpoint: the order goes on.
    chosen, rows = primary_endpoint_rule(draws, ORDER, (0.30, 0.85), None)
    assert chosen == ("in_distribution", 16) and rows[1][2] == "no L_c"
    chosen, _ = primary_endpoint_rule(draws, ORDER[:1], (0.30, 0.85), "competition")
    assert chosen is None


def test_the_confirmatory_seed_comes_from_the_freeze_commit() -> None:
    commit = "0000c350" + "ab" * 16  # 0x0000c350 = 50000
    assert confirmatory_seed(commit, [0, 11]) == 50000
    assert confirmatory_seed(commit, [50000, 50001, 3]) == 50002  # used seeds are skipped
    assert confirmatory_seed("fffffffff", []) == 0xFFFFFFFF % 1_000_000
    with pytest.raises(ValueError, match="not a commit"):
        confirmatory_seed("main", [])
