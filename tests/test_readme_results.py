"""README's results section quotes the committed claims and testbed-validity tables verbatim
(nothing added by hand)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BLOCK = re.compile(r"<!-- claims:begin -->\n(.*?)<!-- claims:end -->", re.DOTALL)


def test_readme_quotes_the_committed_claims_table() -> None:
    root = Path(__file__).resolve().parents[1]
    claims = root / "reports" / "claims.md"
    if not claims.exists():
        pytest.skip("no committed run (reports/claims.md is written by `dvc repro`)")
    match = BLOCK.search((root / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no <!-- claims:begin --> ... <!-- claims:end --> block"
    assert match.group(1).strip() == claims.read_text(encoding="utf-8").strip()


def _validity_table(report: Path) -> str:
    """The report's first table under "## Testbed validity"."""
    section = report.read_text(encoding="utf-8").split("## Testbed validity", 1)
    assert len(section) == 2, f"{report} has no testbed validity section"
    rows = [line for line in section[1].split("\n## ", 1)[0].splitlines() if line]
    first = next(i for i, line in enumerate(rows) if line.startswith("|"))
    end = next((i for i in range(first, len(rows)) if not rows[i].startswith("|")), len(rows))
    return "\n".join(rows[first:end])


# (report, README marker): the default's committed run, and committed runs of profiles
# (reports/profiles/<profile>/, copied from that profile's `dvc repro`).
VALIDITY_QUOTES = [
    ("reports/report.md", "validity"),
]


@pytest.mark.parametrize(("report_path", "marker"), VALIDITY_QUOTES)
def test_readme_quotes_the_committed_validity_table(report_path: str, marker: str) -> None:
    root = Path(__file__).resolve().parents[1]
    report = root / report_path
    readme = (root / "README.md").read_text(encoding="utf-8")
    block = re.compile(rf"<!-- {marker}:begin -->\n(.*?)<!-- {marker}:end -->", re.DOTALL)
    match = block.search(readme)
    if not report.exists():
        assert not match, f"README quotes {report_path}, which is not committed"
        pytest.skip(f"no committed run ({report_path})")
    assert match, f"README.md has no <!-- {marker}:begin --> ... <!-- {marker}:end --> block"
    assert match.group(1).strip() == _validity_table(report)
