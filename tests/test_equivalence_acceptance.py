"""The layered checker, regeneration rounds, fallbacks, controls, outputs and the summary."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from scripted_solver import ScriptedSolver

from tagrpo.config.equivalence import (
    ConsistencySettings,
    PolicyConfig,
    SimilaritySettings,
    StructuralConfig,
)
from tagrpo.config.params import embedded
from tagrpo.data.schema import QUESTION_SCHEMA, Question
from tagrpo.equivalence.acceptance import (
    VERDICT_SCHEMA,
    CheckSettings,
    EquivalenceChecker,
    run_policy,
    verdicts_table,
)
from tagrpo.equivalence.consistency import fisher_one_sided
from tagrpo.equivalence.controls import make_controls
from tagrpo.equivalence.dataset import REPHRASED_SCHEMA, read_rephrased, write_rephrased
from tagrpo.equivalence.report import report_section, summarize
from tagrpo.grading.grade_fn import make_grade_fn
from tagrpo.miniworld.dataset import problem_meta
from tagrpo.miniworld.tasks import MiniProblem, render
from tagrpo.rephrase.candidates import Candidate
from tagrpo.rephrase.generate import RulesRephraser
from tagrpo.rephrase.rules import rule_candidates

SETTINGS = CheckSettings(
    structural=embedded(StructuralConfig),
    similarity=embedded(SimilaritySettings, enabled=False),
    consistency=embedded(ConsistencySettings, k=8),
)
ENABLED = ["generation", "sibling", "structural", "consistency"]


def _question(problem: MiniProblem, family: str, qid: str) -> Question:
    return Question(
        id=qid,
        source="miniworld",
        split="train",
        problem=render(problem, family),
        answer=str(problem.answer),
        meta=problem_meta(problem, family),
    )


Q1 = _question(MiniProblem(2, (3, 4), "Tom", "apples"), "expr", "q1")  # gold 9
Q2 = _question(MiniProblem(5, (3, -2), "Ana", "pens"), "story", "q2")  # gold 6
POOL1 = [c.text for c in rule_candidates(Q1)]


def answer_for(text: str) -> str:
    """Misreads Tom's story and the "Calculate" wording of q1; right otherwise."""
    if "Tom has" in text:
        return "5"
    if text.startswith("Calculate 2 plus 3 plus 4"):
        return "8"
    return "9" if "2" in text and "4" in text else "6"


@pytest.fixture(scope="module")
def grade():
    with make_grade_fn(workers=1, item_timeout_s=5.0) as grade_fn:
        yield grade_fn


def _checker(grade) -> EquivalenceChecker:
    return EquivalenceChecker(SETTINGS, solver=ScriptedSolver(answer_for), grade=grade)


def _first_round() -> list[Candidate]:
    return RulesRephraser(n=3).rephrase([Q1, Q2])


def test_rejected_slots_are_regenerated_until_accepted(grade) -> None:
    result = run_policy(
        [Q1, Q2],
        _first_round(),
        _checker(grade),
        embedded(PolicyConfig, max_rounds=2),
        3,
        RulesRephraser(3),
    )
    assert [(q.id, texts, padded) for q, texts, padded in result.rows] == [
        ("q1", [POOL1[0], POOL1[1], POOL1[6]], 0),
        ("q2", [c.text for c in rule_candidates(Q2)[:3]], 0),
    ]
    assert POOL1[6] == "Read the problem carefully and answer it.\n\nCalculate 2 plus 3 plus 4."
    q1 = [
        (v.round, v.variant, v.verdict, v.reason) for v in result.verdicts if v.question_id == "q1"
    ]
    assert q1 == [
        (0, 0, "accept", "gold_reached"),
        (0, 1, "accept", "gold_reached"),
        (0, 2, "reject", "answer_inconsistent"),  # the story: solver says 5, gold 9
        (1, 2, "reject", "answer_inconsistent"),  # "Calculate ...": solver says 8
        (2, 2, "accept", "gold_reached"),
    ]
    story = result.verdicts[2]
    assert (story.solver_correct, story.solver_k, story.original_correct, story.original_k) == (
        0,
        8,
        8,
        8,
    )
    assert (
        story.solver_mode == "5" and story.solver_mode_share == 1.0 and story.original_mode == "9"
    )
    assert story.p_value == pytest.approx(fisher_one_sided(8, 8, 0, 8))
    assert dict(result.outcome) == {"complete_first_round": 1, "complete_regenerated": 1}
    assert result.rejections == []

    summary = summarize(result.verdicts, result.outcome, ENABLED, 2, 2, 0)
    assert (summary["candidates"], summary["accepted"]) == (8, 6)
    assert summary["checks"]["consistency"] == {"reached": 8, "passed": 6, "pass_rate": 0.75}
    assert summary["checks"]["structural"] == {"reached": 8, "passed": 8, "pass_rate": 1.0}
    assert summary["reasons"] == {"answer_inconsistent": 2, "gold_reached": 6}
    assert summary["by_round"]["0"] == {"candidates": 6, "accepted": 5, "acceptance_rate": 5 / 6}
    assert summary["solver"] == {"original_success": 1.0, "rephrasing_success": 0.75}
    section = report_section(
        summary,
        result.verdicts,
        {"q1": Q1.problem, "q2": Q2.problem},
        {
            "backend": "rules",
            "n": 3,
            "max_rounds": 2,
            "fallback": "pad_original",
            "consistency": {"k": 8, "min_correct": 1, "alpha": 0.05, "on_unverifiable": "accept"},
        },
    )
    assert "| consistency | 8 | 6 | 75.0% |" in section
    assert "| What is 2 + 3 + 4? | Tom has 2 apples, finds 3 more, then gets 4 more." in section
    assert "| answer_inconsistent | solver 0/8 on the rephrasing (mostly '5'), 8/8" in section
    assert section.endswith(
        "`gold_reached`: the solver reached the gold answer from the rephrasing.\n"
    )
    assert "The rules backend's rephrasings are equivalent by construction" in section


def test_fallback_pads_with_the_original_or_drops_the_question(grade, tmp_path: Path) -> None:
    padded = run_policy(
        [Q1, Q2], _first_round(), _checker(grade), embedded(PolicyConfig, max_rounds=0), 3
    )
    assert padded.rows[0][1:] == ([POOL1[0], POOL1[1], Q1.problem], 1)
    assert dict(padded.outcome) == {
        "complete_first_round": 1,
        "padded_questions": 1,
        "padded_slots": 1,
        "unfilled_slots": 1,
    }

    dropped = run_policy(
        [Q1, Q2],
        _first_round(),
        _checker(grade),
        embedded(PolicyConfig, max_rounds=0, fallback="drop"),
        3,
    )
    assert [q.id for q, _, _ in dropped.rows] == ["q2"]
    assert [(r.row_index, r.upstream_id, r.reason, r.detail) for r in dropped.rejections] == [
        (0, "q1", "insufficient_rephrasings", "2 of 3 rephrasings passed the checks")
    ]
    assert dropped.outcome["dropped"] == 1

    path = tmp_path / "train.parquet"
    write_rephrased(padded.rows, path)
    assert pq.read_schema(path).names == [
        *QUESTION_SCHEMA.names,
        "rephrasings",
        "rephrasings_fallback",
    ]
    assert pq.read_schema(path).equals(REPHRASED_SCHEMA, check_metadata=False)
    assert read_rephrased(path) == padded.rows
    verdict_path = tmp_path / "verdicts.parquet"
    pq.write_table(verdicts_table(padded.verdicts), verdict_path)
    assert pq.read_schema(verdict_path).equals(VERDICT_SCHEMA, check_metadata=False)
    with pytest.raises(ValueError, match="pad_original"):
        embedded(PolicyConfig, fallback="skip")


def test_generation_failures_and_duplicates_are_rejected_then_regenerated(grade) -> None:
    candidates = _first_round()
    candidates[4] = Candidate("q2", 1, 0, None, "openai:m", "generation_failed", "timeout: ...")
    candidates[5] = Candidate("q2", 2, 0, candidates[3].text, "openai:m")  # same as slot 0
    result = run_policy(
        [Q1, Q2],
        candidates,
        _checker(grade),
        embedded(PolicyConfig, max_rounds=1),
        3,
        RulesRephraser(3),
    )
    q2 = [
        (v.round, v.variant, v.check_reached, v.reason)
        for v in result.verdicts
        if v.question_id == "q2"
    ]
    pool2 = [c.text for c in rule_candidates(Q2)]
    assert q2 == [
        (0, 0, "consistency", "gold_reached"),
        (0, 1, "generation", "generation_failed"),
        (0, 2, "sibling", "duplicate"),
        (1, 1, "consistency", "gold_reached"),
        (1, 2, "consistency", "gold_reached"),
    ]
    assert result.rows[1][1] == [pool2[0], pool2[3], pool2[4]]


def test_candidates_that_do_not_match_the_questions_are_an_error(grade) -> None:
    with pytest.raises(ValueError, match="rerun the rephrase stage"):
        run_policy([Q1, Q2], _first_round()[:-1], _checker(grade), embedded(PolicyConfig), 3)
    with pytest.raises(ValueError, match="no solver"):
        EquivalenceChecker(SETTINGS)
    with pytest.raises(ValueError, match="no scorer"):
        EquivalenceChecker(
            CheckSettings(
                embedded(StructuralConfig),
                embedded(SimilaritySettings),
                embedded(ConsistencySettings, enabled=False),
            )
        )


def test_controls_change_the_answer_and_are_caught_by_the_expected_layer(grade) -> None:
    zero_flip = _question(MiniProblem(2, (3, 5), "Ben", "pens"), "words", "q3")
    negative_flip = _question(MiniProblem(1, (2, 5), "Mia", "cards"), "imperative", "q4")
    controls = make_controls([Q1, zero_flip, negative_flip, Q2])
    assert [(c.question_id, c.kind) for c in controls] == [
        ("q1", "number_changed"),
        ("q1", "operation_flipped"),
        ("q3", "number_changed"),
        ("q3", "operation_flipped"),  # 2 + 3 - 5 = 0: an answer, so a control
        ("q4", "number_changed"),  # 1 + 2 - 5 is negative: no flipped control
        ("q2", "number_changed"),
        ("q2", "operation_flipped"),
    ]
    flipped = controls[1]
    assert flipped.family != "expr"
    assert flipped.text == render(MiniProblem(2, (3, -4), "Tom", "apples"), flipped.family)
    assert controls[0].text == render(MiniProblem(3, (3, 4), "Tom", "apples"), controls[0].family)
    generic = Question(
        id="m", source="math", split="train", problem="Find 12 + x = 20.", answer="8"
    )
    assert [c.text for c in make_controls([generic])] == ["Find 13 + x = 20."]

    checker = _checker(grade)
    by_id = {q.id: q for q in (Q1, Q2, zero_flip, negative_flip)}
    pairs = [
        (by_id[c.question_id], Candidate(c.question_id, -1, 0, c.text, "control")) for c in controls
    ]
    verdicts = checker.check(pairs, kind="control:mixed")
    changed = [v for v, c in zip(verdicts, controls, strict=True) if c.kind == "number_changed"]
    assert {(v.check_reached, v.reason) for v in changed} == {("structural", "numbers_missing")}
