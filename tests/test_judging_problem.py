"""A run is judged under the pre-registration it names (report.preregistration): one its report
cannot judge under is refused by the preflight, before any stage works, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tagrpo.config.params import validate_params
from tagrpo.report.inputs import judging_problem

ROOT = Path(__file__).resolve().parents[1]


def _config(preregistration: str | None):
    values = yaml.safe_load((ROOT / "params.yaml").read_text())
    values["report"]["preregistration"] = preregistration
    return validate_params(values, "params.yaml")


@pytest.mark.parametrize(
    "registration", [None, "preregistration/world-v3.yaml", "preregistration/world-v2.yaml"]
)
def test_the_worlds_registrations_judge_a_run(registration: str | None) -> None:
    assert judging_problem(_config(registration), ROOT) is None


def test_the_studys_registration_is_refused_for_one_run() -> None:
    problem = judging_problem(_config("preregistration/study-v3.yaml"), ROOT)
    assert problem is not None
    assert problem.startswith("report.preregistration: preregistration/study-v3.yaml registers")
    assert "study-v3 family" in problem and "tagrpo.report.study --main" in problem


def test_a_missing_or_unknown_registration_is_refused(tmp_path: Path) -> None:
    assert judging_problem(_config("preregistration/nope.yaml"), ROOT) == (
        "report.preregistration: preregistration/nope.yaml does not exist"
    )
    (tmp_path / "odd.yaml").write_text("version: 9\n")
    problem = judging_problem(_config("odd.yaml"), tmp_path)
    assert problem is not None and "version 9 names no claims family" in problem
