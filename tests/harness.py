"""The hooks and the fixture of the test harness, registered by tests/conftest.py:

- a NOT TESTED skip fails when ``CI=true`` (:func:`not_tested.fail_in_ci`);
- a test marked both ``core`` and ``slow`` is refused (core is the fast tier, ``make test-core``);
- ``wall_seconds``: ``log(label, seconds)`` records how long a part of a test took; printed in
  the summary ("wall seconds"), never asserted (speed belongs to benchmarks/).
"""

from __future__ import annotations

import pytest
from not_tested import fail_in_ci

WALL_SECONDS = pytest.StashKey[dict[str, float]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    fail_in_ci(outcome.get_result())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    both = [
        item.nodeid
        for item in items
        if item.get_closest_marker("core") and item.get_closest_marker("slow")
    ]
    if both:
        raise pytest.UsageError(f"marked both core and slow (core is the fast tier): {both}")


@pytest.fixture(scope="session")
def wall_seconds(request: pytest.FixtureRequest):
    """``log(label, seconds)``: shown in the run's summary under "wall seconds"."""
    logged = request.config.stash.setdefault(WALL_SECONDS, {})

    def log(label: str, seconds: float) -> None:
        logged[label] = seconds

    return log


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    logged = config.stash.get(WALL_SECONDS, {})
    if logged:
        terminalreporter.section("wall seconds (logged, not asserted)")
        for label, seconds in logged.items():
            terminalreporter.write_line(f"{seconds:8.1f}  {label}")
