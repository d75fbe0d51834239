"""The rules backend: mini-world families and MATH-text transforms, equivalent by construction."""

from __future__ import annotations

import pytest

from tagrpo.config.params import embedded
from tagrpo.data.rephrase_templates import APPENDIX_A_EXAMPLES
from tagrpo.data.schema import Question
from tagrpo.equivalence.structural import StructuralConfig, check_structural, extract_numbers
from tagrpo.miniworld.dataset import problem_meta
from tagrpo.miniworld.tasks import HELD_OUT_FAMILY, MiniProblem, render
from tagrpo.plumbing.paths import shared_data_dir
from tagrpo.rephrase.generate import RulesRephraser
from tagrpo.rephrase.rules import (
    WRAPPERS,
    generic_candidates,
    mask_formulas,
    rule_candidates,
    split_sentences,
    unmask_formulas,
)

STRICT = embedded(StructuralConfig, numbers="strict", reject_new_numbers=True)

# MATH-style problems with the shapes that can trip text transforms: display math, an
# environment, an Asymptote figure, dollar amounts, abbreviations, several sentences.
MATH_FIXTURES = [
    *(question for question, _ in APPENDIX_A_EXAMPLES),
    "Mr. Smith buys 3 pens at $\\$1.25$ each. How much does he pay, in dollars?",
    "Let \\[f(x) = \\begin{cases} x^2 & x<0, \\\\ 2x+1 & x \\ge 0. \\end{cases}\\] "
    "Find $f(-3)+f(2)$.",
    '[asy]\ndraw((0,0)--(4,0)--(4,3)--cycle);\nlabel("$A$",(0,0),W);\n[/asy]\nIn the right '
    "triangle shown, the legs are 3 and 4. What is the length of the hypotenuse?",
    "Evaluate $\\left(\\frac{1}{2}\\right)^{3}$.",
    "Compute $\\dbinom{8}{4}$.",
    "If $a = 2$ and $b = 5$, what is $a^b$? Express your answer as an integer.",
    "Simplify $\\sqrt{50}$.",
]


def _mini_question(problem: MiniProblem, family: str, qid: str = "q1") -> Question:
    return Question(
        id=qid,
        source="miniworld",
        split="train",
        problem=render(problem, family),
        answer=str(problem.answer),
        meta=problem_meta(problem, family),
    )


def test_miniworld_rephrasings_are_the_other_families_in_order() -> None:
    # One number three times: the strict structural check counts them (a multiset).
    question = _mini_question(MiniProblem(9, (9, -9, 1), "Ivy", "eggs"), "words")
    candidates = rule_candidates(question)
    assert [(c.origin, c.text) for c in candidates[:3]] == [
        ("family:expr", "What is 9 + 9 - 9 + 1?"),
        ("family:imperative", "Start with 9. Add 9. Subtract 9. Add 1. What number do you get?"),
        (
            "family:story",
            "Ivy has 9 eggs, finds 9 more, gives away 9, then buys 1 more. "
            "How many eggs does Ivy have now?",
        ),
    ]
    assert candidates[3].origin == "lead_phrase+family:expr"
    assert candidates[3].text == "Determine 9 + 9 - 9 + 1."
    texts = [c.text for c in candidates]
    assert len(texts) == len(set(texts)) and question.problem not in texts
    # The held-out family is the OOD benchmark's: it must never become training text.
    unseen = render(MiniProblem(9, (9, -9, 1), "Ivy", "eggs"), HELD_OUT_FAMILY)
    assert all(unseen not in text for text in texts)
    for candidate in candidates:
        outcome = check_structural(
            question.problem, candidate.text, question.answer, "math", config=STRICT
        )
        assert outcome.passed, (candidate, outcome)


def test_miniworld_meta_that_no_longer_matches_the_text_is_not_trusted() -> None:
    question = _mini_question(MiniProblem(3, (5, -1)), "expr")
    edited = Question(**{**question.__dict__, "problem": "What is 3 + 5 - 2?"})
    candidates = rule_candidates(edited)
    assert all(c.origin.startswith(("lead_phrase", "wrap:")) for c in candidates)
    assert candidates[0].text == "Determine 3 + 5 - 2."


def test_generic_rewrites_of_the_papers_example_questions() -> None:
    first = {question: generic_candidates(question)[0] for question, _ in APPENDIX_A_EXAMPLES}
    by_start = {q[:20]: (c.origin, c.text) for q, c in first.items()}
    assert by_start["What is the area of "] == (
        "lead_phrase",
        "Determine the area of the region defined by the equation $x^{2}+y^{2}-7=4y-14x+3$.",
    )
    assert by_start["If $x^{2}+y^{2}=1$, "] == (
        "condition_last",
        "What is the largest possible value of $|x|+|y|$, given that $x^{2}+y^{2}=1$?",
    )
    assert by_start["Kevin Kangaroo begin"][0] == "question_first"
    assert by_start["Kevin Kangaroo begin"][1].startswith(
        "How far has he hopped after five hops? Use the following information. Kevin Kangaroo"
    )
    assert by_start["Kevin Kangaroo begin"][1].endswith("Express your answer as a common fraction.")
    assert by_start["Find the mean of all"] == (
        "lead_phrase",
        "Determine the mean of all solutions for $x$ when $x^{3}+3x^{2}-10x=0$.",
    )
    # No rewrite applies to "Expand ...": only wrappers, which keep the text verbatim.
    expand = generic_candidates("Expand $(2z^{2}+5z-6)(3z^{3}-2z+1)$.", "q", seed=0)
    assert all(c.origin.startswith("wrap:") for c in expand)
    assert len(expand) == len(WRAPPERS)


@pytest.mark.parametrize("problem", MATH_FIXTURES)
def test_every_generic_candidate_keeps_all_numbers_and_formulas(problem: str) -> None:
    question = Question(id="m1", source="math", split="train", problem=problem, answer="42")
    candidates = rule_candidates(question)
    assert len(candidates) >= 6  # enough for N=3 and a regeneration round
    for candidate in candidates:
        assert extract_numbers(candidate.text) == extract_numbers(problem)
        outcome = check_structural(problem, candidate.text, "42", "math", config=STRICT)
        assert outcome.passed, (candidate, outcome)


def test_masking_round_trips_and_protects_sentence_ends_inside_formulas() -> None:
    text = "Let $x = 1. Y$ be given. [asy]\ndraw(A. B);\n[/asy] Find $x$."
    masked, spans = mask_formulas(text)
    assert spans == ["$x = 1. Y$", "[asy]\ndraw(A. B);\n[/asy]", "$x$"]
    assert unmask_formulas(masked, spans) == text
    assert len(split_sentences(masked)) == 2
    assert split_sentences("Mr. Smith has 3 pens. Dr. Who has 4.") == [
        "Mr. Smith has 3 pens.",
        "Dr. Who has 4.",
    ]


def test_rules_rephraser_rounds_take_later_candidates_and_report_exhaustion() -> None:
    question = _mini_question(MiniProblem(3, (5, -1), "Tom", "pens"), "expr")
    pool = rule_candidates(question)
    rephraser = RulesRephraser(n=3, seed=0)
    first = rephraser.rephrase([question])
    assert [(c.variant, c.round, c.text) for c in first] == [
        (slot, 0, pool[slot].text) for slot in range(3)
    ]
    assert first[0].origin == "rules:family:words"
    # A regenerated slot gets the round's next candidate, whichever slot it is.
    again = rephraser.rephrase([question], round=1, slots={"q1": [2]})
    assert [(c.variant, c.round, c.text) for c in again] == [(2, 1, pool[3].text)]
    both = rephraser.rephrase([question], round=2, slots={"q1": [0, 2]})
    assert [(c.variant, c.text) for c in both] == [(0, pool[6].text), (2, pool[7].text)]
    beyond = len(pool) // 3 + 1
    exhausted = rephraser.rephrase([question], round=beyond, slots={"q1": [0]})
    assert exhausted[0].text is None and exhausted[0].error == "no_transform"
    assert rephraser.metrics()["rules/no_transform"] == 1.0
    with pytest.raises(ValueError, match="outside"):
        rephraser.rephrase([question], slots={"q1": [3]})


@pytest.mark.shared_data
def test_rules_on_real_math_training_problems_keep_numbers_and_formulas() -> None:
    from tagrpo.data.sources.local import load_local

    directory = shared_data_dir()
    if not (directory / "math" / "train.jsonl").exists():
        pytest.skip(f"MATH train not found under {directory}")
    questions = load_local("math", directory).questions[::10]  # every 10th: ~750 problems
    rephraser = RulesRephraser(n=3)
    failures = []
    for question in questions:
        for round_index in range(2):  # the first round and one regeneration round
            for candidate in rephraser.rephrase([question], round=round_index):
                outcome = check_structural(
                    question.problem, candidate.text, question.answer, "math", config=STRICT
                )
                if not outcome.passed:
                    failures.append((question.id, candidate.origin, outcome.reason))
    assert len(questions) >= 700
    assert failures == []
