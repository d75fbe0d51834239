"""The results the documentation states are the committed run's, nothing added by hand:
docs/results.md quotes the claims and testbed-validity tables verbatim, and README's status
line gives the positive control's measured value and verdict as the validity table has them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Where the committed tables are quoted (the README links it and keeps a status line).
RESULTS_DOC = ROOT / "docs" / "results.md"
BLOCK = re.compile(r"<!-- claims:begin -->\n(.*?)<!-- claims:end -->", re.DOTALL)


def test_the_results_page_quotes_the_committed_claims_table() -> None:
    claims = ROOT / "reports" / "claims.md"
    if not claims.exists():
        pytest.skip("no committed run (reports/claims.md is written by `dvc repro`)")
    match = BLOCK.search(RESULTS_DOC.read_text(encoding="utf-8"))
    assert match, f"{RESULTS_DOC.name} has no <!-- claims:begin --> ... <!-- claims:end --> block"
    assert match.group(1).strip() == claims.read_text(encoding="utf-8").strip()


def _validity_table(report: Path) -> str:
    """The report's first table under "## Testbed validity"."""
    section = report.read_text(encoding="utf-8").split("## Testbed validity", 1)
    assert len(section) == 2, f"{report} has no testbed validity section"
    rows = [line for line in section[1].split("\n## ", 1)[0].splitlines() if line]
    first = next(i for i, line in enumerate(rows) if line.startswith("|"))
    end = next((i for i in range(first, len(rows)) if not rows[i].startswith("|")), len(rows))
    return "\n".join(rows[first:end])


# (report, marker): the default's committed run, and committed runs of profiles
# (reports/profiles/<profile>/, copied from that profile's `dvc repro`).
VALIDITY_QUOTES = [
    ("reports/report.md", "validity"),
]


@pytest.mark.parametrize(("report_path", "marker"), VALIDITY_QUOTES)
def test_the_results_page_quotes_the_committed_validity_table(
    report_path: str, marker: str
) -> None:
    report = ROOT / report_path
    text = RESULTS_DOC.read_text(encoding="utf-8")
    block = re.compile(rf"<!-- {marker}:begin -->\n(.*?)<!-- {marker}:end -->", re.DOTALL)
    match = block.search(text)
    if not report.exists():
        assert not match, f"{RESULTS_DOC.name} quotes {report_path}, which is not committed"
        pytest.skip(f"no committed run ({report_path})")
    assert match, f"{RESULTS_DOC.name} has no <!-- {marker}:begin --> ... <!-- {marker}:end -->"
    assert match.group(1).strip() == _validity_table(report)


def test_readmes_status_line_states_the_positive_control_as_measured() -> None:
    """README's status gives V1's estimate and interval and says "failed" exactly when the
    validity table says FAIL (and "passed" when PASS): regenerate the line from the numbers
    when the committed run changes."""
    report = ROOT / "reports" / "report.md"
    if not report.exists():
        pytest.skip("no committed run")
    row = next(
        line for line in _validity_table(report).splitlines() if line.startswith("| V1 (policy)")
    )
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    estimate = re.match(r"[+-]\d+\.\d+ \[[+-]\d+\.\d+, [+-]\d+\.\d+\]", cells[2])
    assert estimate, cells
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    status = readme[readme.index("**Status of the committed results**") :].split("\n\n", 1)[0]
    assert estimate.group(0) in status, (estimate.group(0), status)
    assert ("positive control **failed**" in status) == (cells[3] == "FAIL"), status
    assert ("positive control **passed**" in status) == (cells[3] == "PASS"), status
    assert "docs/results.md" in status and "reports/report.md" in status
    assert len(status.splitlines()) <= 3
