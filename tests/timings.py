"""Where `make test`'s time went: the last lines CI prints (issue 43).

``python tests/timings.py DIR`` reads the JUnit XML files the test tiers wrote into DIR
(``pytest --junitxml``; each test's time is its setup, call and teardown together) and prints,
per tier, its wall seconds and the seconds of its costliest modules and tests. On the xdist tier
a module's tests run on one worker in their order (tests/harness.py), so the costliest module
bounds the tier from below. Printed last, after the tiers, so that the tail of a CI log shows it
whether or not a test failed.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

MODULES_SHOWN = 8
TESTS_SHOWN = 6


def module_of(case: ET.Element) -> str:
    """The test file of a JUnit testcase (its classname is the dotted module path)."""
    classname = case.get("classname", "")
    parts = [part for part in classname.split(".") if part]
    for index, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: index + 1]) + ".py"
    return classname or "?"


def summarise(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    wall = sum(float(suite.get("time", 0.0)) for suite in suites)
    by_module: dict[str, float] = defaultdict(float)
    tests: list[tuple[float, str]] = []
    for case in root.iter("testcase"):
        seconds = float(case.get("time", 0.0))
        by_module[module_of(case)] += seconds
        tests.append((seconds, f"{module_of(case)}::{case.get('name')}"))
    in_tests = sum(by_module.values())
    lines = [f"{path.stem}: {wall:,.0f} s wall, {len(tests)} tests, {in_tests:,.0f} s in tests"]
    for module, seconds in sorted(by_module.items(), key=lambda item: -item[1])[:MODULES_SHOWN]:
        lines.append(f"  {seconds:8.0f} s  {module}")
    for seconds, name in sorted(tests, reverse=True)[:TESTS_SHOWN]:
        lines.append(f"  {seconds:8.0f} s  {name}")
    return lines


def main(folder: str) -> int:
    files = sorted(Path(folder).glob("*.xml"))
    print("=== make test: seconds per tier, module and test (tests/timings.py) ===")
    if not files:
        print(f"no JUnit XML files in {folder}")
    for path in files:
        try:
            print("\n".join(summarise(path)))
        except ET.ParseError as error:  # a tier killed mid-write
            print(f"{path.name}: unreadable ({error})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".test-times"))
