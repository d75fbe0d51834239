"""The report's statistics end to end on a hand-made project: the controls open the claims
table (an A/A control with >= 4 GRPO seeds), the negative control is detected, the section 5.5
row is an equivalence test that refuses a one-seed arm, Holm adjusts a fixed family, degenerate
inputs are not measurable, the primary endpoint and the widening are on the primary group, and
the validity table says PASS/FAIL from the numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from choice_benchmark import MINI_CHOICE

from tagrpo.config.params import config_with
from tagrpo.metrics.compare import Estimate, SeedRuns, paired_difference, widening
from tagrpo.plumbing.layout import report_outputs
from tagrpo.report.claims import (
    CONTROL,
    FAMILY_SIZE,
    NULL_CONTROL,
    Claim,
    adjust,
    build_claims,
    claims_table,
)
from tagrpo.report.statistics_section import statistics_sections

BENCHMARKS = ("mini_chains", "mini_choice", "mini_long", "mini_unseen")
N = 4  # samples per problem
GRPO_SEEDS = (0, 1, 2, 3)


def _correct(policy: str, j: int) -> int:
    """Correct samples (of 4) of problem j (0-3, in every benchmark). pass@1 = c / 4, pass@2 =
    1 - C(4 - c, 2) / 6: c = 3 gives 0.75 and 1, c = 2 gives 0.5 and 5/6."""
    method, _, seed = policy.rpartition("-s")
    if policy == "base":
        return 1 if j % 2 == 0 else 0
    if method == "grpo_flipped":
        return 1 if j == 0 else 0  # the negative control learned to fail
    s = int(seed)
    # GRPO (and the 2.5x run): each seed misses once on its own problem; TA-GRPO's seed 0 also
    # on problem 1.
    low = {s} | ({1} if method == "ta_grpo" and s == 0 else set())
    return 2 if j in low else 3


POLICIES = [
    "base",
    *(f"grpo-s{s}" for s in GRPO_SEEDS),
    *(f"ta_grpo-s{s}" for s in GRPO_SEEDS),
    "grpo_flipped-s0",
    "grpo_data2.5x-s0",
]


def _write_project(root: Path) -> None:
    for policy in POLICIES:
        rows = [
            {"benchmark": b, "question_id": f"{b}-{j}", "correct": i < _correct(policy, j)}
            for b in BENCHMARKS
            for j in range(4)
            for i in range(N)
        ]
        folder = root / "evals" / policy
        folder.mkdir(parents=True)
        pd.DataFrame(rows).to_parquet(folder / "responses.parquet")
    train = root / "plots" / "train"
    train.mkdir(parents=True)
    for seed in GRPO_SEEDS:
        rise = 0.30 + 0.02 * seed
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
    # Its summary: every G-group of the original phrasing has identical rewards.
    (root / "metrics").mkdir()
    probe_summary = {"probe/original/groups": 6.0, "probe/original/zero_gradient_rate": 1.0}
    (root / "metrics" / "base_model.json").write_text(json.dumps(probe_summary))
    # The training summaries (the report shows each method's optimiser updates).
    (root / "metrics" / "train").mkdir()
    for policy in POLICIES:
        if policy != "base":
            summary = {"optimiser_updates": 40}
            (root / "metrics" / "train" / f"{policy}.json").write_text(json.dumps(summary))


def _sections(root: Path, overrides: dict) -> tuple[str, str, dict]:
    config = config_with(
        {
            "runs.methods": ["grpo", "ta_grpo"],
            "runs.seeds": list(GRPO_SEEDS),
            # The design these numbers were written for (world v2's default): no control or
            # one-seed method unless a test adds it, every policy with n samples, the primary
            # endpoint at the largest k of the in-distribution group.
            "runs.control_methods": [],
            "runs.one_seed_methods": [],
            "evaluate.n_trained": None,
            "report.primary_group": "in_distribution",
            "report.primary_k": None,
            "diagnostics.policies": ["ta_grpo-s0"],
            "evaluate.n": N,
            "evaluate.ks": [1, 2],
            "evaluate.bootstrap_resamples": 50,
            # No pre-registration in this scratch project: world v2's bands (the defaults).
            "report.preregistration": None,
            # The primary (in-distribution) group holds two free-form benchmarks: 8 problems.
            "data.synthetic.benchmarks.mini_choice": MINI_CHOICE,
            "evaluate.groups": {
                "in_distribution": ["mini_chains", "mini_unseen"],
                "competition": ["mini_long"],
                "ood": ["mini_choice"],
            },
            **overrides,
        }
    )
    out = {role: root / path for role, path in report_outputs().outs.items()}
    for path in out.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    groups = list(config.evaluate.groups)  # a group's score: its benchmarks' mean, the same
    base_passk = pd.DataFrame(
        {
            "name": [*BENCHMARKS, *groups] * 2,
            "kind": (["benchmark"] * 4 + ["group"] * len(groups)) * 2,
            "k": [1] * (4 + len(groups)) + [2] * (4 + len(groups)),
            "pass_at_k": [0.125] * (4 + len(groups)) + [0.25] * (4 + len(groups)),
            "policy": "base",
        }
    )
    validity, claims, _, headline = statistics_sections(config, root, out, base_passk)
    return validity, claims, headline


def _rows(claims: str) -> dict[str, list[str]]:
    rows = [line.split(" | ") for line in claims.splitlines()[2:]]
    return {row[0].lstrip("| "): [cell.rstrip(" |") for cell in row] for row in rows}


def test_controls_equivalence_holm_and_validity_from_the_numbers(tmp_path: Path) -> None:
    _write_project(tmp_path)
    validity, claims, headline = _sections(
        tmp_path,
        {
            "runs.one_seed_methods": ["grpo_flipped"],
            "runs.data_scaling": {"methods": ["grpo"], "multiples": [2.5], "seeds": [0]},
        },
    )
    lines = claims.splitlines()[2:]
    assert lines[0].startswith("| Positive control: GRPO beats the base policy")
    assert lines[1].startswith("| Negative control: GRPO beats the known-bad method")
    assert lines[2].startswith("| A/A control: GRPO's seeds against each other")
    by_claim = _rows(claims)
    # GRPO's pass@1 in distribution: (3 x 0.75 + 0.5) / 4 = 0.6875; the base's 0.125.
    positive = by_claim["Positive control: GRPO beats the base policy"]
    assert positive[2].startswith("+56.25 [") and positive[3] == "4 vs the base model (t, 6.0 df)"
    assert positive[5] == "control" and positive[6] == "supported"
    negative = by_claim["Negative control: GRPO beats the known-bad method"]
    assert negative[1] == "pass@1, GRPO minus grpo_flipped (flipped advantages), all benchmarks"
    assert negative[2].startswith("+62.50 [") and negative[6] == "supported"
    assert negative[3] == "4 vs 1 (t, 12.0 df): conditional on the 1-seed run"
    # A/A: seeds {0, 1} vs {2, 3} have the same per-problem means: exactly 0. The
    # method-by-problem variance left is 1/864 - 1/1008 = 1/6048 on 8 problems of 2 benchmarks
    # (the halves' seed scores do not vary): +/- t(6) x sqrt(1/6048) = 3.15 points.
    aa = by_claim["A/A control: GRPO's seeds against each other"]
    assert aa[1] == (
        "pass@2, GRPO's first 2 seeds minus its last 2, in_distribution; its interval should "
        "cover 0"
    )
    assert aa[2] == "+0.00 [-3.15, +3.15]" and aa[3] == "2 vs 2 (t, 6.0 df)" and aa[5] == "control"
    assert aa[6] == "covers 0 (as expected)"
    # The primary endpoint on the primary group: TA-GRPO's extra miss costs 1/96 at pass@2.
    gap = by_claim["TA-GRPO beats GRPO at pass@2"]
    assert gap[1] == "pass@2, TA-GRPO minus GRPO, in_distribution (primary endpoint)"
    # V5 fails in this design (below), so every family row carries the label.
    assert gap[2].startswith("-1.04 [")
    assert gap[6] == "not distinguishable (underpowered: not evidence)"
    # Holm over the fixed family of 10: the row's Holm p is min(1, 10 p) or more.
    assert float(gap[5]) == pytest.approx(min(1.0, FAMILY_SIZE * float(gap[4])), abs=0.002)
    widens = by_claim["The gain over GRPO widens with k"]
    assert widens[1] == "(TA - GRPO at pass@2) minus (TA - GRPO at pass@1), in_distribution"
    assert widens[2].startswith("+0.52 [")  # -1/96 - (-1/64)
    # Section 5.5: the 2.5x GRPO has one seed: the TOST refuses it, never "equivalent".
    equivalence = by_claim["TA-GRPO on 1x data matches GRPO on 2.5x (section 5.5)"]
    assert equivalence[1].startswith("pass@2, TA-GRPO (1x) minus GRPO (2.5x), free-form")
    assert equivalence[2] == "not measurable" and equivalence[5] == ""
    assert equivalence[6] == (
        "not measurable: seeds 4 vs 1: an equivalence test needs >= 2 seeds per arm (the "
        "between-seed variance)"
    )
    # The rows whose methods or diagnostics were not run: in the family, not supported.
    for claim in (
        "Fewer identical-reward groups than GRPO (Fig. 3)",
        "TA-GRPO beats the matched budget (N+1)xGRPO at pass@2 (Fig. 6)",
    ):
        assert by_claim[claim][6] == "not run (not supported)"
    assert (tmp_path / "reports" / "claims.md").read_text().strip() == claims
    # Metric names carry the verdict without its reason (MLflow refuses ":" and parentheses).
    # Metric names are the claims' words, never a row number or a verdict (issue 33.12).
    fig3 = "claims/fewer_identical_reward_groups_than_grpo_fig_3"
    assert f"{fig3}/estimate" not in headline and headline[f"{fig3}/supported"] == 0.0
    assert headline[f"{fig3}/holm_p"] == 1.0  # not run: in the family with p = 1
    assert not any(re.search(r"claims/\d", key) for key in headline), sorted(headline)
    assert all(re.fullmatch(r"[a-z0-9_/]+|v\d\w*/[\w/]+|[\w/]+", key) for key in headline)
    # Validity: V1, V2 and the free-form edges pass; V3 cannot be measured in a one-template
    # world, V4 not with one seed of the negative control; V5's design is too wide. The base's
    # 12.5% on mini_choice is 2.5 points above chance (10 options): under the 5-point margin.
    # The harder group's base pass@2 (25%) is under its band, and every q0 group of the probe
    # has identical rewards (100%: above the regime's band).
    verdicts = {k.removeprefix("validity/"): v for k, v in headline.items() if "validity" in k}
    assert verdicts == {
        "V1_policy": 1.0,
        "V1_reward": 1.0,
        "V2": 1.0,
        "V3": 0.0,
        "V4": 0.0,
        "V5": 0.0,
        **{f"edges/{b}": float(b != "mini_choice") for b in BENCHMARKS},
        "harder/competition": 0.0,
        "regime": 0.0,
    }
    assert "| V4 | GRPO - negative control, pass@1, all benchmarks" in validity
    assert "not measurable: grpo_flipped has 1 seed" in validity
    # V5 is blind: the design's half-width, never TA-GRPO - GRPO's estimate.
    v5 = next(line for line in validity.splitlines() if line.startswith("| V5 |"))
    assert "-1.04" not in v5 and "seeds 4 vs 4, 8 problems" in v5
    # mini_choice's edge at pass@1 against 1/10.
    assert "| edges: mini_choice | base pass@1 <= 90%" in validity
    assert "12.5% (chance 10.0%, 10 options; margin +2.5 points) | FAIL |" in validity
    harder = "| harder: competition | base pass@1 in [5, 30]% and pass@2 in [40, 85]% |"
    assert f"{harder} pass@1 12.5%, pass@2 25.0% | FAIL |" in validity
    assert (
        "| regime | base identical-reward rate of q0 G-groups in [40, 80]% | 100.0% [" in validity
    )
    assert "**6 of 12 criteria pass.**" in validity


def test_without_a_negative_control_v4_fails_and_its_row_is_not_run(tmp_path: Path) -> None:
    _write_project(tmp_path)
    validity, claims, headline = _sections(tmp_path, {"runs.one_seed_methods": []})
    assert headline["validity/V4"] == 0.0
    assert "not run: runs lacks a negative-control method (e.g. grpo_flipped)" in validity
    negative = claims.splitlines()[3]
    assert negative.startswith("| Negative control") and negative.endswith(
        "| not run | 40 / not run |"
    )
    equivalence = claims.splitlines()[-1]
    assert "section 5.5" in equivalence and equivalence.endswith("| not run (not supported) |  |")


def test_holm_over_a_fixed_family_and_verdicts_from_the_adjusted_p() -> None:
    def claim(name: str, value: float, p_value: float, kind: str = "claim") -> Claim:
        estimate = Estimate(1, value, value - 0.01, value + 0.01, p_value=p_value, se=0.005)
        return Claim(name, "m", estimate, kind=kind)

    claims = adjust(
        [
            claim("control", 0.2, 0.001, CONTROL),  # not in the family
            claim("a", 0.03, 0.01),
            claim("b", -0.03, 0.04),
            claim("c", 0.02, 0.03),
            Claim("d", "m", None),  # not run: counts with p = 1
        ]
    )
    # m = 4, not 3: a 0.04, c 3 x 0.03 = 0.09, b max(0.09, 2 x 0.04), d 1.
    assert [c.holm_p for c in claims[1:]] == pytest.approx([0.04, 0.09, 0.09, 1.0])
    assert [c.verdict for c in claims] == [
        "supported",
        "supported",
        "not distinguishable",
        "not distinguishable",
        "not run (not supported)",
    ]
    assert claims[0].row()[5] == "control" and claims[1].row()[4:6] == ["0.010", "0.040"]
    # Without row d, m is 3 (the family shrinks only when the report defines fewer rows).
    assert adjust(claims[:4])[1].holm_p == pytest.approx(0.03)


def _runs(per_seed: list[list[list[float]]], names: list[str]) -> SeedRuns:
    """SeedRuns from values[s][j] = (pass@1, pass@32) of problem j (benchmark names[j])."""
    index = pd.MultiIndex.from_tuples([(b, str(j)) for j, b in enumerate(names)])
    return SeedRuns(np.asarray(per_seed, dtype=float), index, (1, 32))


def test_the_family_is_fixed_whatever_was_run() -> None:
    names = ["a", "a"]
    grpo = _runs([[[0.2, 0.5], [0.4, 0.6]], [[0.3, 0.5], [0.3, 0.7]]], names)
    ta = _runs([[[0.3, 0.6], [0.5, 0.8]], [[0.4, 0.7], [0.4, 0.7]]], names)
    few = build_claims({"grpo": grpo, "ta_grpo": ta}, ["a"], None, None, 32)
    family = [c for c in few if c.kind not in (CONTROL, NULL_CONTROL)]
    assert len(family) == FAMILY_SIZE == 10
    run = [c for c in family if c.estimate is not None]
    assert len(run) == 2  # TA-GRPO - GRPO and its widening; 8 rows not run
    # Holm multiplies the smallest p by m = 10 (the family), not by the 2 rows that ran.
    smallest = min(run, key=lambda c: c.p_value)
    assert smallest.holm_p == pytest.approx(min(1.0, 10 * smallest.p_value))


def test_degenerate_inputs_are_not_measurable() -> None:
    # The smoke profile: every pass@k 0. Nothing varies: no row may read as a finding.
    zeros = _runs([[[0.0, 0.0]] * 4] * 2, ["a", "a", "b", "b"])
    claims = build_claims(
        {"grpo": zeros, "ta_grpo": zeros, "grpo_x4": zeros},
        ["a", "b"],
        None,
        None,
        32,
        base=zeros,
        scaled_grpo=(2.5, zeros),
    )
    by_claim = {c.claim: c for c in claims}
    for name in (
        "Positive control: GRPO beats the base policy",
        "TA-GRPO beats GRPO at pass@32",
        "The gain over GRPO widens with k",
        "TA-GRPO beats the matched budget (N+1)xGRPO at pass@32 (Fig. 6)",
    ):
        assert by_claim[name].verdict.startswith("not measurable: zero variance"), name
    equivalence = by_claim["TA-GRPO on 1x data matches GRPO on 2.5x (section 5.5)"]
    assert equivalence.verdict.startswith("not measurable: zero variance")  # old: equivalent
    assert equivalence.row()[2] == "not measurable" and equivalence.holm_p == 1.0


def test_primary_endpoint_and_widening_on_the_primary_group_and_no_choice_at_pass_k() -> None:
    # Benchmarks: p (primary, unsaturated), s (saturated free-form), c (20-option choice).
    # (pass@1, pass@32) per problem; two seeds each, the second a copy of the first shifted.
    names = ["p", "p", "s", "s", "c", "c"]
    grpo_seed = [[0.2, 0.5], [0.3, 0.6], [0.9, 0.99], [0.8, 0.99], [0.3, 0.9], [0.2, 0.8]]
    ta_seed = [[0.2, 0.7], [0.3, 0.8], [0.95, 0.99], [0.9, 0.99], [0.3, 0.95], [0.2, 0.85]]

    def two(seed: list[list[float]], shift: float) -> SeedRuns:
        return _runs([seed, [[v + shift for v in pair] for pair in seed]], names)

    grpo, ta = two(grpo_seed, -0.01), two(ta_seed, 0.01)
    runs = {"grpo": grpo, "ta_grpo": ta, "grpo_x4": grpo}
    claims = build_claims(
        runs, ["c", "p", "s"], None, None, 32, primary=("hard", ["p"]), options={"c": 20}
    )
    by_claim = {c.claim: c for c in claims}
    primary = by_claim["TA-GRPO beats GRPO at pass@32"]
    assert primary.measure == "pass@32, TA-GRPO minus GRPO, hard (primary endpoint)"
    # On p alone: pass@32 +0.2, +0.01 from the second seeds' shifts = +0.21; pass@1 +0.01:
    # widening +0.20. On every benchmark the saturated s (+0.01 at pass@32, +0.085 at pass@1)
    # would pull it down.
    assert primary.estimate.value == pytest.approx(0.21)
    widens = by_claim["The gain over GRPO widens with k"]
    assert widens.estimate.value == pytest.approx(0.20)
    assert widens.estimate.value == pytest.approx(widening(ta, grpo, ["p"], 1, 32).value)
    assert widens.estimate.value != pytest.approx(widening(ta, grpo, ["c", "p", "s"], 1, 32).value)
    # Other pass@32 rows: every free-form benchmark (p and s), never the choice benchmark c.
    matched = by_claim["TA-GRPO beats the matched budget (N+1)xGRPO at pass@32 (Fig. 6)"]
    assert matched.measure == "pass@32, TA-GRPO minus (N+1)xGRPO, free-form benchmarks"
    expected = next(e for e in paired_difference(ta, grpo, ["p", "s"]) if e.k == 32)
    assert matched.estimate.value == pytest.approx(expected.value)
    assert matched.estimate.value == pytest.approx(0.11)  # (0.21 + 0.01) / 2


def test_figure_3_is_stated_size_matched_first() -> None:
    comparisons = pd.DataFrame(
        [
            {"policy": "ta_grpo-s0", "measure": "identical_rewards", "first": "joint",
             "second": second, "label": "checkpoint-100", "difference": value,
             "ci_low": value - 0.05, "ci_high": value + 0.05}
            for second, value in (("original_N1G", -0.10), ("original", -0.275))
        ]
    )  # fmt: skip
    claims = build_claims({}, [], comparisons, "ta_grpo-s0", 32)
    lines = claims_table(claims).splitlines()[2:]
    first, second = lines[2], lines[3]
    assert first.startswith(
        "| Fewer identical-reward groups than GRPO (Fig. 3) | q0 (N+1)G-group minus TA joint "
        "(N+1)G-group identical-reward rate, same policy (size-matched) | +10.00 [+5.00, +15.00]"
    )
    assert second.startswith(
        "| Fewer identical-reward groups than GRPO's G-group (Fig. 3 as drawn) | q0 G-group "
        "minus TA joint (N+1)G-group rate, same policy: not size-matched (a larger group has "
        "fewer identical rewards by chance alone) | +27.50 [+22.50, +32.50]"
    )


def test_claims_are_logged_under_their_words_not_a_number_and_a_verdict() -> None:
    """`claims/3/not distinguishable = 1.0` read as nothing in MLflow: each claim is named by
    its words, with its estimate, Holm p and whether it is supported (issue 33.12)."""
    from tagrpo.metrics.compare import Estimate
    from tagrpo.report.claims import Claim
    from tagrpo.report.statistics_section import claim_metrics

    estimate = Estimate(1, 0.05, 0.01, 0.09, p_value=0.01, se=0.02, df=10.0, seeds=(3, 3))
    claims = [
        Claim("TA-GRPO beats GRPO at pass@1 (Table 1)", "TA - GRPO", estimate, holm_p=0.02),
        Claim("Fewer identical-reward groups than GRPO (Fig. 3)", "GRPO - TA", None, holm_p=1.0),
    ]
    assert claim_metrics(claims) == {
        "claims/ta_grpo_beats_grpo_at_pass_1_table_1/estimate": 0.05,
        "claims/ta_grpo_beats_grpo_at_pass_1_table_1/holm_p": 0.02,
        "claims/ta_grpo_beats_grpo_at_pass_1_table_1/supported": 1.0,
        "claims/fewer_identical_reward_groups_than_grpo_fig_3/holm_p": 1.0,
        "claims/fewer_identical_reward_groups_than_grpo_fig_3/supported": 0.0,
    }
