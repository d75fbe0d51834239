"""The A/A coverage study-v3 registers (preregistration/study-v3.md, "Analysis";
tagrpo/report/study_aa.py): on the registered design, 95% intervals of a contrast between two
arms with the same distribution cover 0 in [93, 98]% of simulated studies, both sides checked
(too narrow and too wide both fail): the main study's D draws x S seeds at pass@16 over the
draws, and a seed-dominated case within one draw."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from tagrpo.plumbing.paths import project_root
from tagrpo.report import study_aa

REGISTRATION = yaml.safe_load((project_root() / "preregistration/study-v3.yaml").read_text())
BAND = tuple(REGISTRATION["study"]["analysis"]["aa_coverage_band"])


@pytest.mark.parametrize("case", study_aa.CASES, ids=[case[0] for case in study_aa.CASES])
def test_a_a_on_the_registered_design_covers_zero_within_the_band(case: tuple) -> None:
    _, over, setting, seed = case
    draws, seeds = study_aa.registered_design(REGISTRATION)
    draws = draws if over == "design" else 1
    covered = study_aa.coverage(REGISTRATION, draws, seeds, setting, seed)
    assert BAND[0] <= covered <= BAND[1], (setting, draws, seeds, covered)


def test_the_registered_design_is_the_committed_size() -> None:
    size = REGISTRATION["size"]
    assert study_aa.registered_design(REGISTRATION) == (size["draws"], size["seeds_per_draw"])
    assert BAND == (0.93, 0.98)


def test_a_too_narrow_interval_would_fail_the_band(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sides are checked: an analysis whose intervals are a third as wide covers 0 far
    less than 93% of the time and the case reads FAIL."""
    real = study_aa.draw_paired_difference

    def narrow(first: list, second: list, members: list) -> list:
        out = []
        for e in real(first, second, members):
            half = (e.high - e.low) / 6
            out.append(replace(e, low=e.value - half, high=e.value + half))
        return out

    monkeypatch.setattr(study_aa, "SIMULATIONS", 200)
    monkeypatch.setattr(study_aa, "draw_paired_difference", narrow)
    monkeypatch.setattr(study_aa, "CASES", study_aa.CASES[:1])
    (row,) = study_aa.coverage_rows(REGISTRATION)
    assert row["coverage"] < BAND[0] and row["verdict"] == "FAIL"
