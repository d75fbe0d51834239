"""A NOT TESTED skip is a skip locally and a failure with ``CI=true`` (tests/not_tested.py);
an ordinary skip stays a skip either way."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INNER = """
import pytest
from not_tested import not_tested, reason

def test_needs_a_tool():
    not_tested("no such tool here")

@pytest.mark.skipif(True, reason=reason("no engines environment"))
def test_marked():
    pass

def test_ordinary_skip():
    pytest.skip("not relevant on this platform")

def test_runs():
    assert True
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(
        "from not_tested import fail_in_ci\n"
        "import pytest\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    fail_in_ci(outcome.get_result())\n"
    )
    pytester.makepyfile(test_inner=INNER)
    return pytester


# A skipif skips at set-up: failed there, pytest counts it as an error.
@pytest.mark.parametrize(
    ("ci", "failed", "errors", "skipped"),
    [(None, 0, 0, 3), ("false", 0, 0, 3), ("true", 1, 1, 1), ("TRUE", 1, 1, 1)],
)
def test_not_tested_fails_only_in_ci(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci, failed, errors, skipped
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    result = inner.runpytest("-p", "no:cacheprovider", "-p", "no:timeout")
    result.assert_outcomes(passed=1, failed=failed, errors=errors, skipped=skipped)
    if failed:
        result.stdout.fnmatch_lines(
            [
                "*CI=true, and this check did not run: NOT TESTED: no such tool here*",
                "*CI=true, and this check did not run: NOT TESTED: no engines environment*",
            ],
            consecutive=False,
        )
