"""Where `make test`'s time went: the last lines CI prints (issue 43).

``python tests/timings.py DIR`` reads the JUnit XML files the test tiers wrote into DIR
(``pytest --junitxml``; each test's time is its setup, call and teardown together) and prints,
per tier, its wall seconds and the seconds of its costliest modules and tests;
``--slowest N`` prints instead the N costliest tests over all tiers, one table (the command in
docs/performance.md). On the xdist tier
a module's tests run on one worker in their order (tests/harness.py), so the costliest module
bounds the tier from below. Printed last, after the tiers, so that the tail of a CI log shows it
whether or not a test failed.
"""

from __future__ import annotations

import argparse
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


def case_seconds(root: ET.Element) -> list[tuple[float, str]]:
    """(seconds, ``module::test``) of every testcase under ``root``."""
    return [
        (float(case.get("time", 0.0)), f"{module_of(case)}::{case.get('name')}")
        for case in root.iter("testcase")
    ]


def summarise(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    wall = sum(float(suite.get("time", 0.0)) for suite in suites)
    by_module: dict[str, float] = defaultdict(float)
    tests = case_seconds(root)
    for seconds, name in tests:
        by_module[name.partition("::")[0]] += seconds
    in_tests = sum(by_module.values())
    lines = [f"{path.stem}: {wall:,.0f} s wall, {len(tests)} tests, {in_tests:,.0f} s in tests"]
    for module, seconds in sorted(by_module.items(), key=lambda item: -item[1])[:MODULES_SHOWN]:
        lines.append(f"  {seconds:8.0f} s  {module}")
    for seconds, name in sorted(tests, reverse=True)[:TESTS_SHOWN]:
        lines.append(f"  {seconds:8.0f} s  {name}")
    return lines


def slowest(files: list[Path], count: int) -> list[str]:
    """A Markdown table of the ``count`` costliest tests of all ``files`` (tier = file stem)."""
    rows = [
        (seconds, name, path.stem)
        for path in files
        for seconds, name in case_seconds(ET.parse(path).getroot())
    ]
    lines = ["| # | seconds | test | tier |", "|---|---|---|---|"]
    for rank, (seconds, name, tier) in enumerate(sorted(rows, reverse=True)[:count], start=1):
        lines.append(f"| {rank} | {seconds:,.0f} | `{name}` | {tier} |")
    return lines


def main(folder: str, count: int | None = None) -> int:
    files = sorted(Path(folder).glob("*.xml"))
    if count is not None:
        print("\n".join(slowest(files, count)))
        return 0
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=".test-times", help="the tiers' JUnit XML")
    parser.add_argument("--slowest", type=int, default=None, help="the N costliest tests only")
    arguments = parser.parse_args()
    sys.exit(main(arguments.folder, arguments.slowest))
