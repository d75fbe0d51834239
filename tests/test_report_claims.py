"""The report's statistics end to end on a hand-made project: the controls open the claims
table, the negative control is detected, the section 5.5 row is an equivalence test, Holm
adjusts the family, and the validity table says PASS/FAIL from the numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tagrpo.config.params import config_with
from tagrpo.pipeline.layout import report_outputs
from tagrpo.report.build import statistics_sections

BENCHMARKS = ("mini_arith", "mini_choice", "mini_multistep", "mini_unseen")
N = 4  # samples per problem
# Correct samples (of 4) on every problem: pass@1 = c / 4, pass@2 = 1 - C(4 - c, 2) / 6.
CORRECT = {
    "base": 1,  # pass@1 0.25, pass@2 0.5
    "grpo-s0": 3, "grpo-s1": 3, "grpo-s2": 3,  # 0.75, 1.0
    "ta_grpo-s0": 3, "ta_grpo-s1": 3, "ta_grpo-s2": 3,
    "grpo_flipped-s0": 0,  # the negative control learned to fail: 0, 0
    "grpo_data2.5x-s0": 3,
}  # fmt: skip


def _write_project(root: Path) -> None:
    for policy, correct in CORRECT.items():
        rows = [
            {"benchmark": b, "question_id": f"{b}-{j}", "correct": i < correct}
            for b in BENCHMARKS
            for j in range(4)
            for i in range(N)
        ]
        folder = root / "evals" / policy
        folder.mkdir(parents=True)
        pd.DataFrame(rows).to_parquet(folder / "responses.parquet")
    train = root / "plots" / "train"
    train.mkdir(parents=True)
    for seed, rise in enumerate((0.30, 0.32, 0.34)):
        rewards = [0.10, 0.10, 0.2, 0.2, 0.2, 0.2, 0.10 + rise, 0.10 + rise]
        frame = pd.DataFrame({"step": range(1, 9), "original/reward_mean": rewards})
        frame.to_csv(train / f"grpo-s{seed}.csv", index=False)
    # The base's probe: every question solved under phrasing a, never under b.
    probe = [
        {"question_id": f"q{q}", "phrasing": p, "reward": float(p == "a")}
        for q in range(6)
        for p in ("a", "b")
        for _ in range(4)
    ]
    (root / "probes").mkdir()
    pd.DataFrame(probe).to_parquet(root / "probes" / "base_model.parquet")
    # The training summaries (the report shows each method's optimiser updates).
    (root / "metrics" / "train").mkdir(parents=True)
    for policy in CORRECT:
        if policy != "base":
            summary = {"optimiser_updates": 40}
            (root / "metrics" / "train" / f"{policy}.json").write_text(json.dumps(summary))


def test_controls_equivalence_holm_and_validity_from_the_numbers(tmp_path: Path) -> None:
    _write_project(tmp_path)
    config = config_with(
        {
            "runs.methods": ["grpo", "ta_grpo"],
            "runs.one_seed_methods": ["grpo_flipped"],
            "runs.data_scaling": {"methods": ["grpo"], "multiples": [2.5], "seeds": [0]},
            "diagnostics.policies": ["ta_grpo-s0"],
            "evaluate.n": N,
            "evaluate.ks": [1, 2],
            "evaluate.bootstrap_resamples": 50,
        }
    )
    out = {role: tmp_path / path for role, path in report_outputs().outs.items()}
    for path in out.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    base_passk = pd.DataFrame(
        {"name": list(BENCHMARKS), "kind": "benchmark", "k": 2, "pass_at_k": 0.5, "policy": "base"}
    )
    validity, claims, _, headline = statistics_sections(config, tmp_path, out, base_passk)
    rows = [line.split(" | ") for line in claims.splitlines()[2:]]
    by_claim = {row[0].lstrip("| "): row for row in rows}
    assert rows[0][0] == "| Positive control: GRPO beats the base policy"
    assert rows[1][0] == "| Negative control: GRPO beats the known-bad method"
    positive, negative = rows[0], rows[1]
    assert positive[2].startswith("+50.00 [+50.00, +50.00]")  # no variance: a point
    assert positive[3] == "3 vs the base model" and positive[5] == "control"
    assert positive[6].rstrip(" |") == "supported"
    assert negative[1] == "pass@1, GRPO minus grpo_flipped (flipped advantages), all benchmarks"
    assert negative[2].startswith("+75.00") and negative[6].rstrip(" |") == "supported"
    assert negative[3] == "3 vs 1: conditional on the 1-seed run"
    # Section 5.5: TA-GRPO on 1x equals GRPO on 2.5x exactly: equivalent within +/-2 points.
    equivalence = by_claim["TA-GRPO on 1x data matches GRPO on 2.5x (section 5.5)"]
    assert "(90%, margin +/-2.00)" in equivalence[2]
    assert equivalence[6].rstrip(" |") == "equivalent"
    # A claim with no difference is not distinguishable; the diagnostics' rows were not run.
    gap = by_claim["TA-GRPO beats GRPO at pass@2"]
    assert gap[2].startswith("+0.00") and gap[4] == "1.000" and gap[5] == "1.000"
    assert by_claim["Fewer identical-reward groups than GRPO (Fig. 3)"][6].rstrip(" |") == "not run"
    assert (tmp_path / "reports" / "claims.md").read_text().strip() == claims
    # Validity: V1-V2, V4, V5 and every edge pass; V3 cannot be measured in a one-template world.
    verdicts = {k.removeprefix("validity/"): v for k, v in headline.items() if "validity" in k}
    assert verdicts == {
        "V1_policy": 1.0,
        "V1_reward": 1.0,
        "V2": 1.0,
        "V3": 0.0,
        "V4": 1.0,
        "V5": 1.0,
        **{f"edges/{b}": 1.0 for b in BENCHMARKS},
    }
    assert "| V4 | GRPO - negative control, pass@1, all benchmarks" in validity
    assert "grpo_flipped: +75.00 [+75.00, +75.00] points (conditional on a 1-seed run)" in validity
    assert "**9 of 10 criteria pass.**" in validity


def test_without_a_negative_control_v4_fails_and_its_row_is_not_run(tmp_path: Path) -> None:
    _write_project(tmp_path)
    config = config_with(
        {
            "runs.methods": ["grpo", "ta_grpo"],
            "runs.one_seed_methods": [],
            "diagnostics.policies": ["ta_grpo-s0"],
            "evaluate.n": N,
            "evaluate.ks": [1, 2],
            "evaluate.bootstrap_resamples": 50,
        }
    )
    out = {role: tmp_path / path for role, path in report_outputs().outs.items()}
    for path in out.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    base_passk = pd.DataFrame(
        {"name": list(BENCHMARKS), "kind": "benchmark", "k": 2, "pass_at_k": 0.5, "policy": "base"}
    )
    validity, claims, _, headline = statistics_sections(config, tmp_path, out, base_passk)
    assert headline["validity/V4"] == 0.0
    assert "not run: runs lacks a negative-control method (e.g. grpo_flipped)" in validity
    negative = claims.splitlines()[3]
    assert negative.startswith("| Negative control") and negative.endswith(
        "| not run | 40 / not run |"
    )
    equivalence = claims.splitlines()[-1]
    assert "section 5.5" in equivalence and equivalence.endswith("| not run |  |")


def test_holm_over_the_claims_only_and_verdicts_from_the_adjusted_p() -> None:
    from tagrpo.metrics.compare import Estimate
    from tagrpo.report.claims import CONTROL, Claim, adjust

    def claim(name: str, value: float, p_value: float, kind: str = "claim") -> Claim:
        estimate = Estimate(1, value, value - 0.01, value + 0.01, p_value=p_value, se=0.005)
        return Claim(name, "m", estimate, kind=kind)

    claims = adjust(
        [
            claim("control", 0.2, 0.001, CONTROL),  # not in the family
            claim("a", 0.03, 0.01),
            claim("b", -0.03, 0.04),  # raw p < 0.05, Holm 0.06: no longer a verdict
            claim("c", 0.02, 0.03),
            Claim("d", "m", None),  # not run: not counted
        ]
    )
    assert [c.holm_p for c in claims[1:4]] == pytest.approx([0.03, 0.06, 0.06])
    assert [c.verdict for c in claims] == [
        "supported",
        "supported",
        "not distinguishable",
        "not distinguishable",
        "not run",
    ]
    assert claims[0].row()[5] == "control" and claims[1].row()[4:6] == ["0.010", "0.030"]
