"""The one way a test says it could not run here: a skip whose reason starts with NOT TESTED.

A check that needs something this machine may lack (the engines environment of
``make engines``, Chromium, the npm packages of the plots page) skips with
:func:`not_tested` (or a ``skipif`` whose reason is :func:`reason`). Locally that is a loud
skip; in CI (the environment variable ``CI`` is ``true``, as CI services set it) the skip is
turned into a failure by :func:`fail_in_ci` (a ``pytest_runtest_makereport`` hook, in
tests/conftest.py): CI must run every check, not report it skipped.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

PREFIX = "NOT TESTED: "


def reason(why: str) -> str:
    """The skip reason for ``why``, marked NOT TESTED."""
    return why if why.startswith(PREFIX) else PREFIX + why


def not_tested(why: str) -> NoReturn:
    """Skip the running test, saying NOT TESTED and ``why``."""
    pytest.skip(reason(why))


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def skip_reason(report: pytest.TestReport) -> str | None:
    """The reason of a skipped report (None if it did not skip)."""
    if not report.skipped:
        return None
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def fail_in_ci(report: pytest.TestReport) -> None:
    """With ``CI=true``, turn a NOT TESTED skip into a failure (in place)."""
    why = skip_reason(report)
    if why is None or PREFIX.strip() not in why or not in_ci():
        return
    report.outcome = "failed"
    report.longrepr = f"CI=true, and this check did not run: {why}"
