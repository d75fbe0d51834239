"""World v3's claims family (tagrpo.report.family) on hand-made draws: the registered rows in
the registered order with Holm's m fixed at 11, contrasts paired by draw (one draw: conditional
on it), the A/A null, the TOST's seeds per arm per draw, the diagnostics' per-question measures
(identical-reward rates, strategy entropy) and the family chosen by the run's
pre-registration."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tagrpo.metrics.compare import SeedRuns, holm_adjust
from tagrpo.report.claims import BESIDE, CONTROL, EQUIVALENCE, NULL_CONTROL
from tagrpo.report.claims import FAMILY_SIZE as V2_FAMILY_SIZE
from tagrpo.report.family import (
    FAMILY_SIZE,
    IDENTICAL_AS_DRAWN,
    IDENTICAL_SIZE_MATCHED,
    QUESTIONS,
    STRATEGY_ENTROPY,
    DrawInputs,
    FamilySettings,
    build_v3_claims,
    registered_family,
)
from tagrpo.report.family_inputs import diagnostic_measures, strategy_entropy_difference

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = pd.MultiIndex.from_arrays([["a", "a"], ["1", "2"]])
KS = (1, 4)
SETTINGS = FamilySettings(
    benchmarks=("a",), primary=("in_distribution", ("a",)), k=4, equivalence_margin=0.02,
    scaled=("grpo", 2.5),
)  # fmt: skip


def _runs(*seeds: tuple[float, float]) -> SeedRuns:
    """Each seed's (pass@1, pass@4), the same on both problems."""
    values = np.array([[[p1, p4], [p1, p4]] for p1, p4 in seeds])
    return SeedRuns(values, PROBLEMS, KS)


def _by_claim(claims):
    return {claim.claim: claim for claim in claims}


def test_every_registered_row_in_order_and_holm_over_eleven_whatever_was_run() -> None:
    claims = build_v3_claims({"d0": DrawInputs(runs={})}, SETTINGS)
    assert FAMILY_SIZE == 11
    assert [c.kind for c in claims[:2]] == [CONTROL, NULL_CONTROL]
    family = [c for c in claims if c.in_family]
    assert len(family) == FAMILY_SIZE
    assert [c.claim for c in family] == [
        "Fewer identical-reward groups than the size-matched q0 group (Fig. 3)",
        "Fewer identical-reward groups than GRPO's G-group (Fig. 3 as drawn)",
        "TA-GRPO beats GRPO at pass@4 (primary endpoint)",
        "The gain over GRPO widens from pass@1 to pass@4",
        "TA-GRPO beats GRPO with dynamic sampling at pass@4",
        "TA-GRPO beats the matched budget (N+1)xGRPO at pass@4 (Fig. 6)",
        "TA-GRPO beats the matched budget with DS, (N+1)xGRPO + DS at pass@4",
        "TA-GRPO beats TA-GRPO* at pass@4 (Fig. 8)",
        "TA-GRPO beats unanchored TA-GRPO at pass@4",
        "Responses to the neighbours are more diverse (Fig. 4)",
        "TA-GRPO on 1x data is equivalent to grpo on 2.5x (section 5.5)",
    ]
    assert family[-1].kind == EQUIVALENCE
    # The two measures reported beside a family row, outside it, right after their row.
    names = [c.claim for c in claims]
    for beside, row in (
        ("on -log(1 - pass@k)", "The gain over GRPO widens from pass@1 to pass@4"),
        ("embedding distance", "Responses to the neighbours are more diverse (Fig. 4)"),
    ):
        index = next(i for i, n in enumerate(names) if n.endswith(beside))
        assert claims[index].kind == BESIDE and names[index - 1] == row
    for claim in family:
        assert claim.family_p == 1.0 and claim.holm_p == 1.0
        assert claim.verdict == "not run (not supported)"


def test_contrasts_are_paired_by_draw_and_holm_counts_eleven() -> None:
    # Draw 0: TA 0.6 / 0.9 (2 seeds alike), GRPO 0.5 / 0.7: +0.2 at pass@4, widening +0.1.
    # Draw 1: TA 0.5 / 0.8 and 0.5 / 0.9, GRPO 0.5 / 0.7 and 0.5 / 0.8: +0.1, widening +0.1.
    draws = {
        "d0": DrawInputs(runs={"ta_grpo": _runs((0.6, 0.9), (0.6, 0.9)),
                               "grpo": _runs((0.5, 0.7), (0.5, 0.7))}),
        "d1": DrawInputs(runs={"ta_grpo": _runs((0.5, 0.8), (0.5, 0.9)),
                               "grpo": _runs((0.5, 0.7), (0.5, 0.8))}),
    }  # fmt: skip
    claims = _by_claim(build_v3_claims(draws, SETTINGS))
    primary = claims["TA-GRPO beats GRPO at pass@4 (primary endpoint)"]
    assert primary.estimate.value == pytest.approx(0.15)
    # Every problem alike: no problem component; the draws' mean square of (0.2, 0.1) / 2.
    assert primary.estimate.se == pytest.approx(np.sqrt(np.var([0.2, 0.1], ddof=1) / 2))
    assert primary.estimate.df == pytest.approx(1.0)
    assert primary.seeds == "2 draws x 2 vs 2 seeds (paired by draw; t, 1.0 effective df)"
    # Holm over 11 with every other row at p = 1: the smallest p times 11 (or 1).
    family = [c for c in claims.values() if c.in_family]
    expected = holm_adjust([c.family_p for c in family])
    assert [c.holm_p for c in family] == pytest.approx(expected)
    assert primary.holm_p == pytest.approx(min(1.0, 11 * primary.p_value))
    widening = claims["The gain over GRPO widens from pass@1 to pass@4"]
    assert widening.estimate.value == pytest.approx(0.1)
    assert widening.refusal.startswith("zero variance")  # both draws grew by exactly 0.1
    assert widening.verdict.startswith("not measurable") and widening.family_p == 1.0
    log_scale = claims["The gain over GRPO widens from pass@1 to pass@4, on -log(1 - pass@k)"]
    # Scores over draws: TA 0.55 / 0.875, GRPO 0.5 / 0.725.
    expected_log = (-np.log(0.125) + np.log(0.275)) - (-np.log(0.45) + np.log(0.5))
    assert log_scale.estimate.value == pytest.approx(expected_log)
    assert log_scale.holm_p != log_scale.holm_p  # nan: outside the family
    assert log_scale.row()[5] == "outside the family"
    # One draw: the within-draw model, conditional on that draw.
    alone = _by_claim(build_v3_claims({"d1": draws["d1"]}, SETTINGS))
    one = alone["TA-GRPO beats GRPO at pass@4 (primary endpoint)"]
    assert one.estimate.value == pytest.approx(0.1) and one.estimate.seeds == (2, 2)
    assert one.seeds.endswith("; conditional on the base draw (d1)")


def test_the_a_a_null_and_the_negative_control_come_first() -> None:
    grpo = [_runs((0.5, 0.7), (0.6, 0.8)), _runs((0.4, 0.7), (0.5, 0.6))]
    flipped = [_runs((0.0, 0.1), (0.1, 0.1)), _runs((0.1, 0.2), (0.0, 0.0))]
    draws = {f"d{i}": DrawInputs(runs={"grpo": g, "grpo_flipped": f})
             for i, (g, f) in enumerate(zip(grpo, flipped, strict=True))}  # fmt: skip
    claims = build_v3_claims(draws, SETTINGS)
    negative, null = claims[0], claims[1]
    # GRPO minus the control at pass@1: draw 0 0.55 - 0.05, draw 1 0.45 - 0.05.
    assert negative.estimate.value == pytest.approx(0.45) and negative.kind == CONTROL
    # A/A: each draw's first seed minus its second at pass@4: -0.1 and +0.1.
    assert null.estimate.value == pytest.approx(0.0, abs=1e-12)
    assert null.estimate.se == pytest.approx(np.sqrt(np.var([-0.1, 0.1], ddof=1) / 2))
    assert null.verdict == "covers 0 (as expected)" and not null.in_family
    # One draw of 2 seeds cannot be split within it: not measurable, never a finding.
    alone = build_v3_claims({"d0": draws["d0"]}, SETTINGS)[1]
    assert alone.verdict.startswith("not measurable: 2 seeds: an A/A split needs")


def test_the_section_5_5_equivalence_needs_two_seeds_per_arm_per_draw() -> None:
    def draws(scaled_seeds: int) -> dict[str, DrawInputs]:
        scaled = _runs(*[(0.5, 0.8 + 0.004 * s) for s in range(scaled_seeds)])
        return {
            f"d{d}": DrawInputs(
                runs={"ta_grpo": _runs((0.5, 0.80 + 0.002 * d), (0.5, 0.81))},
                scaled={("grpo", 2.5): scaled},
            )
            for d in range(2)
        }

    row = build_v3_claims(draws(1), SETTINGS)[-1]
    assert row.kind == EQUIVALENCE and row.family_p == 1.0
    assert row.verdict == (
        "not measurable: an arm has 1 seed(s) in a draw: the equivalence test needs >= 2 "
        "seeds per arm per draw (pre-registered)"
    )
    row = build_v3_claims(draws(2), SETTINGS)[-1]
    assert row.equivalence is not None and row.refusal == ""
    # TA 0.805 and 0.806 against 0.802 on either draw.
    assert row.estimate.value == pytest.approx(0.0035)
    assert row.family_p == row.equivalence.p_value
    assert "(90%, margin +/-2.00)" in row.row()[2]


def _sample_rows(question: str, text: str, plan: dict[int, list[tuple[str, float]]]) -> list:
    """Diagnostics samples: per variant, (response, reward) in sample order."""
    return [
        {"question_id": question, "variant": variant, "sample_index": index,
         "prompt": text, "response": response, "reward": reward,
         "policy": "ta_grpo-s0", "checkpoint": "100%"}
        for variant, responses in plan.items()
        for index, (response, reward) in enumerate(responses)
    ]  # fmt: skip


FORWARD, BACKWARD, NONE = "12 + 7 = 19. 19 - 4 = 15.", "12 - 4 = 8. 8 + 7 = 15.", "15"


def test_strategy_entropy_and_identical_rates_per_question_from_the_diagnostics() -> None:
    # G = 2, N = 2: q0 has (N+1)G = 6 responses, each neighbour G = 2.
    samples = pd.DataFrame(
        _sample_rows(
            "q1",
            "What is 12 + 7 - 4?",
            {
                0: [(FORWARD, 1.0), (FORWARD, 1.0), (FORWARD, 1.0), (BACKWARD, 1.0),
                    (FORWARD, 1.0), (FORWARD, 1.0)],
                1: [(FORWARD, 1.0), (BACKWARD, 0.0)],  # 1 bit
                2: [(BACKWARD, 1.0), (BACKWARD, 1.0)],  # 0 bits
            },
        )
        + _sample_rows(
            "q2",
            "Compute 12 plus 7 minus 4.",
            {0: [(NONE, 0.0)] * 6, 1: [(FORWARD, 0.0), (FORWARD, 0.0)],
             2: [(NONE, 0.0), (NONE, 0.0)]},
        )
    )  # fmt: skip
    entropy = strategy_entropy_difference(samples, 2)
    # q1: the neighbours' mean (1 + 0) / 2 minus q0's first G (both forward, 0 bits).
    assert entropy["q1"] == pytest.approx(0.5)
    assert np.isnan(entropy["q2"])  # q0's responses took no known path
    measures = diagnostic_measures(samples, None, ["ta_grpo-s0"], "100%", 2, 2)
    # q1: q0's groups all correct (identical); the joint group (q0's first 2 + 4) is mixed.
    # q2: every group all wrong (identical).
    size_matched = measures[IDENTICAL_SIZE_MATCHED]
    assert size_matched.problems.get_level_values(0).unique().tolist() == [QUESTIONS]
    assert size_matched.values[0, :, 0].tolist() == [1.0, 0.0]
    assert measures[IDENTICAL_AS_DRAWN].values[0, :, 0].tolist() == [1.0, 0.0]
    assert measures[STRATEGY_ENTROPY].values[0, 0, 0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="no ta_grpo-s1 at 100%"):
        diagnostic_measures(samples, None, ["ta_grpo-s1"], "100%", 2, 2)
    # Over two draws the family's rows 1, 2 and 10 read these, on the questions measured
    # everywhere (q2 has no entropy: left out of row 10 only).
    draws = {f"d{d}": DrawInputs(runs={}, diagnostics=measures) for d in range(2)}
    claims = _by_claim(build_v3_claims(draws, SETTINGS))
    fig3 = claims["Fewer identical-reward groups than the size-matched q0 group (Fig. 3)"]
    assert fig3.estimate.value == pytest.approx(0.5)
    assert "2 questions" in fig3.seeds
    diverse = claims["Responses to the neighbours are more diverse (Fig. 4)"]
    assert diverse.estimate.value == pytest.approx(0.5) and "1 questions" in diverse.seeds
    assert diverse.unit == "plain"


def test_the_family_is_the_one_the_run_s_pre_registration_names(tmp_path: Path) -> None:
    assert registered_family(None) == "v2"
    assert registered_family(ROOT / "preregistration/world-v2.yaml") == "v2"
    assert registered_family(ROOT / "preregistration/world-v3.yaml") == "v3"
    for version, name in ((1, "world-v2"), (3, "world-v3")):
        document = yaml.safe_load((ROOT / f"preregistration/{name}.yaml").read_text())
        registered = document["study"]["holm_family"]
        assert len(registered) == (V2_FAMILY_SIZE if version == 1 else FAMILY_SIZE)
    broken = tmp_path / "v3.yaml"
    broken.write_text(yaml.safe_dump({"version": 3, "study": {"holm_family": ["a"] * 10}}))
    with pytest.raises(ValueError, match="10 rows, the v3 code 11"):
        registered_family(broken)
    broken.write_text(yaml.safe_dump({"version": 2, "study": {}}))
    with pytest.raises(ValueError, match="version 2 names no claims family"):
        registered_family(broken)


STUDY = replace(SETTINGS, family="study-v3", no_effect_margin=0.035)


def test_study_v3_adds_the_unanchored_row_last_and_holm_counts_twelve() -> None:
    from tagrpo.report.family import STUDY_FAMILY_SIZE

    claims = build_v3_claims({"d0": DrawInputs(runs={})}, STUDY)
    family = [c for c in claims if c.in_family]
    assert STUDY_FAMILY_SIZE == len(family) == 12
    assert family[-1].claim == "Unanchored TA-GRPO (the authors' code) beats GRPO at pass@4"
    assert family[-2].kind == EQUIVALENCE
    assert all(c.verdict == "not run (not supported)" for c in family)
    assert registered_family(ROOT / "preregistration/study-v3.yaml") == "study-v3"


def test_study_v3_verdicts_no_effect_of_the_papers_size_or_undecided() -> None:
    # Many problems, so the intervals are narrow: TA-GRPO and GRPO alike within 1 point in
    # every draw (no effect of the paper's size), unanchored 10 points over GRPO in one draw, 10
    # under in another (undecided: its interval is wide).
    problems = pd.MultiIndex.from_arrays([["a"] * 200, [str(j) for j in range(200)]])
    rng = np.random.default_rng(3)

    def runs(level: float) -> SeedRuns:
        base = np.clip(level + rng.normal(0, 0.002, (2, 200)), 0, 1)
        return SeedRuns(np.stack([base, base], axis=-1), problems, KS)

    draws = {
        f"d{i}": DrawInputs(runs={"ta_grpo": runs(0.5 + ta), "grpo": runs(0.5),
                                  "ta_grpo_unanchored": runs(0.5 + unanchored)})
        for i, (ta, unanchored) in enumerate(((0.002, 0.1), (-0.002, -0.1), (0.0, 0.0)))
    }  # fmt: skip
    claims = _by_claim(build_v3_claims(draws, STUDY))
    primary = claims["TA-GRPO beats GRPO at pass@4 (primary endpoint)"]
    assert -0.035 <= primary.estimate.low <= primary.estimate.high <= 0.035
    assert primary.holm_p >= 0.05 and primary.verdict == "no effect of the paper's size"
    unanchored = claims["Unanchored TA-GRPO (the authors' code) beats GRPO at pass@4"]
    assert unanchored.estimate.high > 0.035 and unanchored.verdict == "undecided"
    # World v3's family keeps its words.
    v3 = _by_claim(build_v3_claims(draws, SETTINGS))
    assert v3["TA-GRPO beats GRPO at pass@4 (primary endpoint)"].verdict == "not distinguishable"
