"""README's results section quotes the committed claims and testbed-validity tables verbatim
(nothing added by hand)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BLOCK = re.compile(r"<!-- claims:begin -->\n(.*?)<!-- claims:end -->", re.DOTALL)
VALIDITY = re.compile(r"<!-- validity:begin -->\n(.*?)<!-- validity:end -->", re.DOTALL)


def test_readme_quotes_the_committed_claims_table() -> None:
    root = Path(__file__).resolve().parents[1]
    claims = root / "reports" / "claims.md"
    if not claims.exists():
        pytest.skip("no committed run (reports/claims.md is written by `dvc repro`)")
    match = BLOCK.search((root / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no <!-- claims:begin --> ... <!-- claims:end --> block"
    assert match.group(1).strip() == claims.read_text(encoding="utf-8").strip()


def test_readme_quotes_the_committed_validity_table() -> None:
    root = Path(__file__).resolve().parents[1]
    report = root / "reports" / "report.md"
    if not report.exists():
        pytest.skip("no committed run (reports/report.md is written by `dvc repro`)")
    # The report's first table under "## Testbed validity".
    section = report.read_text(encoding="utf-8").split("## Testbed validity", 1)
    assert len(section) == 2, "reports/report.md has no testbed validity section"
    rows = [line for line in section[1].split("\n## ", 1)[0].splitlines() if line]
    first = next(i for i, line in enumerate(rows) if line.startswith("|"))
    end = next((i for i in range(first, len(rows)) if not rows[i].startswith("|")), len(rows))
    table = "\n".join(rows[first:end])
    match = VALIDITY.search((root / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no <!-- validity:begin --> ... <!-- validity:end --> block"
    assert match.group(1).strip() == table
