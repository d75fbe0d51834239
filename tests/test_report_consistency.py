"""The report shows what its folder holds, and says why two entropies of one policy differ.

Issue 33.14: a figure the report does not link (Figure 7 of a profile with no data-scaling
runs) must not stay in ``reports/figures``; the base's strategy entropy read 0.94 in the
validity section and 0.886 in the over-training table with nothing saying why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from tagrpo.report.build import prune_unlinked_figures
from tagrpo.report.validity_section import policy_entropy_table, strategy_over_training_table

ROOT = Path(__file__).resolve().parents[1]


def test_a_figure_the_report_does_not_link_is_removed(tmp_path: Path) -> None:
    figures = tmp_path / "figures"
    figures.mkdir()
    for name in ("figure5_passk.png", "figure7_data_scaling.png", "passk_curves.png"):
        (figures / name).write_bytes(b"png")
    report = "![Figure 5](figures/figure5_passk.png)\n\n![pass@k curves](figures/passk_curves.png)"
    assert prune_unlinked_figures(report, figures, "figures") == ["figure7_data_scaling.png"]
    assert sorted(p.name for p in figures.iterdir()) == ["figure5_passk.png", "passk_curves.png"]


def test_every_committed_figure_is_linked_from_the_committed_report() -> None:
    # main committed figure7_data_scaling.png (a "not run in this profile" placeholder) that
    # reports/report.md never links: the run has no data-scaling policies.
    report = (ROOT / "reports" / "report.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(figures/([^)]+)\)", report))
    on_disk = {p.name for p in (ROOT / "reports" / "figures").iterdir() if p.is_file()}
    assert on_disk - linked == set()


def _frame() -> pd.DataFrame:
    rows = [("base", "base", 0.0, 0.886), ("grpo", "grpo-s0", 0.5, 0.79)]
    return pd.DataFrame(
        [
            {"method": m, "policy": p, "fraction": f, "questions": 40, "entropy_bits": e}
            for m, p, f, e in rows
        ]
    )


def test_the_over_training_table_says_why_its_base_differs_from_the_validity_section() -> None:
    text = strategy_over_training_table(_frame(), group_size=8, samples=64)
    assert "| base | 0.00 | 0.886 | 1 |" in text
    note = text.split("\n\n")[-1]
    assert "(0.886) is not the testbed-validity section's base entropy" in note
    assert "G = 8" in note and "64 evaluation responses" in note


def test_the_per_policy_entropy_names_its_source() -> None:
    summary = pd.DataFrame(
        [{"policy": "base", "entropy_bits": 0.94, "questions_with_two_or_more": 1.0,
          "strategies": 2}]
    )  # fmt: skip
    text = policy_entropy_table(summary, samples=64, trained_samples=64)
    assert "the policy's 64 evaluation responses to it):" in text.splitlines()[0]
    assert "| base | 0.94 | 100% | 2 |" in text
    # Trained policies evaluated with fewer samples (evaluate.n_trained): the label says so.
    first = policy_entropy_table(summary, samples=64, trained_samples=32).splitlines()[0]
    assert "64 evaluation responses to it, a trained policy's 32: a plug-in" in first
