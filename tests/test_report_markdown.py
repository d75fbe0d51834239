"""Report tables: Table 1 layout (groups and their averages) and the pass@k CI table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.markdown import passk_curves, passk_long_table, table1


def _passk() -> pd.DataFrame:
    rows = []
    for policy, shift in (("grpo", 0.0), ("ta_grpo", 0.1)):
        for name, kind, value in (
            ("a", "benchmark", 0.2),
            ("b", "benchmark", 0.4),
            ("g", "group", 0.3),
        ):
            for k in (1, 2):
                low, high = (np.nan, np.nan) if kind == "group" else (value - 0.05, value + 0.05)
                rows.append(
                    {
                        "policy": policy,
                        "name": name,
                        "kind": kind,
                        "k": k,
                        "pass_at_k": value + shift + 0.1 * (k - 1),
                        "ci_low": low + shift,
                        "ci_high": high + shift,
                    }
                )
    return pd.DataFrame(rows)


def test_markdown_table_formats_floats_with_two_decimals() -> None:
    assert markdown_table(["x", "y"], [["a", 1.234], ["b", 2]]) == (
        "| x | y |\n|---|---|\n| a | 1.23 |\n| b | 2 |"
    )


def test_table1_one_row_per_policy_with_group_average_and_missing_cells() -> None:
    text = table1(_passk(), k=2, groups={"g": ["a", "b", "c"]}, options={})
    lines = text.splitlines()
    assert lines[0] == "| policy | a | b | c | g avg |"
    assert lines[2] == "| grpo | 30.00 | 50.00 | n/a | 40.00 |"
    assert lines[3] == "| ta_grpo | 40.00 | 60.00 | n/a | 50.00 |"


def test_long_table_shows_intervals_for_benchmarks_only() -> None:
    lines = passk_long_table(_passk(), options={}, groups={"g": ["a", "b"]}).splitlines()
    assert lines[0] == "| policy | benchmark | pass@1 | pass@2 |"
    # One benchmark's policies together (compared at a glance), then the next benchmark's.
    assert lines[2] == "| grpo | a | 20.0 [15.0, 25.0] | 30.0 [15.0, 25.0] |"
    assert lines[3] == "| ta_grpo | a | 30.0 [25.0, 35.0] | 40.0 [25.0, 35.0] |"
    assert lines[6] == "| grpo | g | 30.0 | 40.0 |"


def test_passk_curves_writes_a_png(tmp_path: Path) -> None:
    path = tmp_path / "figures" / "curves.png"
    passk_curves(_passk(), path, "t", options={}, groups={"g": ["a", "b"]})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_report_names_its_profile() -> None:
    """A profile that keeps the embedded default's title (smoke) is named in the heading, so
    its report never reads as the embedded default's (issue 33.11)."""
    from tagrpo.config.params import config_with
    from tagrpo.report.build import report_title

    default = "TA-GRPO pipeline report (embedded default: mini world v3, confirmatory draw 0)"
    assert report_title(config_with()) == default
    assert report_title(config_with({"common.profile": "smoke"})) == (
        f"{default} [profile 'smoke']"
    )
    local = "TA-GRPO pipeline report (local profile: real data, SmolLM2-135M)"
    assert report_title(config_with({"common.profile": "local", "report.title": local})) == local


def test_the_truncation_rate_stands_beside_the_passk_tables(tmp_path: Path) -> None:
    """Each evaluation computes <benchmark>/truncated_rate; the report shows it (33.14)."""
    import json

    from tagrpo.plumbing.layout import evaluate_outputs
    from tagrpo.report.build import truncation_table

    passk = pd.DataFrame(
        {
            "name": ["mini_chains", "mini_long", "in_distribution", "mini_chains"],
            "kind": ["benchmark", "benchmark", "group", "benchmark"],
            "k": [1, 1, 1, 1],
            "pass_at_k": [0.5, 0.2, 0.5, 0.6],
            "policy": ["base", "base", "base", "grpo-s0"],
        }
    )
    metrics = tmp_path / evaluate_outputs("base").metrics
    metrics.parent.mkdir(parents=True)
    metrics.write_text(json.dumps({"mini_chains/truncated_rate": 0.125, "truncated_rate": 0.1}))
    assert truncation_table(tmp_path, passk).splitlines() == [
        "| policy | mini_chains | mini_long |",
        "|---|---|---|",
        "| base | 12.5 | - |",
        "| grpo-s0 | - | - |",
    ]
