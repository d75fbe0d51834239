import random

import pytest

from tagrpo.config.base_model import WarmStartCorpus
from tagrpo.config.common import MiniWorldSettings
from tagrpo.config.data import SyntheticSettings
from tagrpo.config.params import embedded
from tagrpo.grading.extract import last_boxed
from tagrpo.miniworld.dataset import build_miniworld, problem_from_meta
from tagrpo.miniworld.tasks import (
    HELD_OUT_FAMILY,
    MISCONCEPTION_TRIGGERS,
    PHRASING_FAMILIES,
    MiniProblem,
    ProblemSpace,
    choice_options,
    flipped_result,
    reference_response,
    render,
    sample_problems,
    slipped_result,
)
from tagrpo.miniworld.warmstart import build_corpus, misread_probability


@pytest.mark.parametrize(
    ("operation", "operands", "answer", "flipped"),
    [
        ("add", (3, 4), 7, -1),
        ("sub", (9, 2), 7, 11),
        ("add3", (1, 2, 3), 6, 0),
        ("addsub", (5, 4, 2), 7, 11),
    ],
)
def test_answers_and_misreadings(operation, operands, answer, flipped):
    problem = MiniProblem(operation, operands)
    assert problem.answer == answer
    assert flipped_result(problem) == flipped


def test_invalid_problems_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        MiniProblem("sub", (2, 9))
    with pytest.raises(ValueError, match="operands"):
        MiniProblem("add", (1, 2, 3))
    with pytest.raises(ValueError, match="unknown operation"):
        MiniProblem("mul", (1, 2))


def test_every_phrasing_mentions_every_operand():
    problem = MiniProblem("addsub", (7, 5, 3), name="Ana", item="coins")
    for family in (*PHRASING_FAMILIES, HELD_OUT_FAMILY):
        text = render(problem, family)
        for operand in problem.operands:
            assert str(operand) in text, (family, text)
    assert render(problem, "expr") == "What is 7 + 5 - 3?"
    with pytest.raises(ValueError, match="unknown phrasing"):
        render(problem, "poem")


def test_reference_response_is_boxed_and_worked():
    problem = MiniProblem("add3", (4, 5, 6))
    assert reference_response(problem) == "4 + 5 = 9. 9 + 6 = 15. The answer is \\boxed{15}."
    misread = reference_response(problem, misread=True)
    assert misread == "4 + 5 = 9. 9 - 6 = 3. The answer is \\boxed{3}."
    assert last_boxed(reference_response(problem, letter="C")) == "C"


def test_choice_options_hold_the_answer_at_the_gold_letter():
    problem = MiniProblem("add", (8, 9))
    options, letter = choice_options(problem, seed=3)
    assert len(set(options)) == 4
    assert options["ABCD".index(letter)] == "17"
    assert choice_options(problem, seed=3) == (options, letter)
    many, many_letter = choice_options(problem, seed=3, count=20)
    values = sorted(int(option) for option in many)
    assert values == list(range(values[0], values[0] + 20))  # consecutive, answer inside
    assert many["ABCDEFGHIJKLMNOPQRST".index(many_letter)] == "17"


def test_choice_options_do_not_give_the_answer_away_by_its_rank():
    # The answer's rank among the options is spread out (not always the middle or an end),
    # except where the window is clamped at 0.
    ranks = []
    for operands in [(a, b) for a in range(5, 10) for b in range(5, 10)]:
        problem = MiniProblem("add", operands)
        options, _ = choice_options(problem, seed=0, count=20)
        values = sorted(int(option) for option in options)
        ranks.append(values.index(problem.answer))
    assert len(set(ranks)) >= 10
    with pytest.raises(ValueError, match=r"count must be 2\.\.26"):
        choice_options(MiniProblem("add", (1, 2)), seed=0, count=27)


def test_sampling_is_seeded_distinct_and_respects_exclusions():
    space = ProblemSpace()
    first = sample_problems(space, 50, seed=1)
    assert first == sample_problems(space, 50, seed=1)
    assert len({p.key() for p in first}) == 50
    second = sample_problems(space, 50, seed=2, exclude={p.key() for p in first})
    assert not {p.key() for p in first} & {p.key() for p in second}
    tiny = ProblemSpace(operations={"add": 1.0}, max_operand=1)  # only 4 distinct sums
    with pytest.raises(ValueError, match="too small"):
        sample_problems(tiny, 5, seed=0)


def test_splits_are_disjoint_by_arithmetic_and_rebuildable():
    built = build_miniworld(embedded(SyntheticSettings), embedded(MiniWorldSettings))
    keys = {name: {q.meta["key"] for q in result.questions} for name, result in built.items()}
    names = list(keys)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not keys[a] & keys[b], (a, b)
    assert built["train"].counts() == {"rows_in": 640, "kept": 640, "rejected": 0}
    assert built["extra"].counts() == {"rows_in": 960, "kept": 960, "rejected": 0}
    # The pool is drawn after the training split: its size never changes the training set.
    smaller = build_miniworld(
        embedded(SyntheticSettings, extra_size=10), embedded(MiniWorldSettings)
    )
    assert [q.id for q in smaller["train"].questions] == [q.id for q in built["train"].questions]
    assert (
        smaller["extra"].questions == built["extra"].questions[:10]
        or len(smaller["extra"].questions) == 10
    )
    for question in built["train"].questions[:20]:
        problem = problem_from_meta(question.meta)
        assert render(problem, question.meta["family"]) == question.problem
        assert str(problem.answer) == question.answer
    choice = built["mini_choice"].questions[0]
    assert choice.answer_kind == "multiple_choice" and choice.answer in "ABCD"
    assert {q.meta["family"] for q in built["mini_unseen"].questions} == {HELD_OUT_FAMILY}


def test_corpus_misreads_only_when_the_trigger_holds():
    config = embedded(WarmStartCorpus, examples=3000, choice_fraction=0.0)
    corpus = build_corpus(ProblemSpace(), config, exclude_keys=set())
    assert len(corpus) == 3000
    # expr has no misconception: every expr example is correct.
    expr = [e for e in corpus if e.messages[0]["content"].startswith("What is")]
    assert expr and not any(example.misread for example in expr)
    assert any(example.misread for example in corpus)
    story = MiniProblem("add", (2, 3), item="apples")  # apples is in the trigger subset
    assert MISCONCEPTION_TRIGGERS["item_subset"](story)
    story_rate = config.misconceptions["story"].rate
    assert 0.0 < story_rate < 1.0
    assert misread_probability(story, "story", config.misconceptions) == story_rate
    assert misread_probability(story, "expr", config.misconceptions) == 0.0
    calm = MiniProblem("add", (7, 3), item="pens")
    assert misread_probability(calm, "story", config.misconceptions) == 0.0
    assert misread_probability(calm, "words", config.misconceptions) == 0.0  # 7 is odd


def test_misread_rate_in_corpus_matches_configuration():
    config = embedded(
        WarmStartCorpus,
        examples=4000,
        choice_fraction=0.0,
        family_weights={"story": 1.0},
        misconceptions={"story": {"when": "always", "rate": 0.25}},
    )
    corpus = build_corpus(ProblemSpace(), config, exclude_keys=set())
    # The misconception is the forward path's: its rate is among forward worked answers.
    forward = [example for example in corpus if example.strategy == "forward"]
    misread = [example for example in forward if example.misread]
    assert abs(len(misread) / len(forward) - 0.25) < 0.03
    assert not any(example.misread for example in corpus if example.strategy != "forward")
    for example in corpus:
        expected = example.problem.answer
        if example.misread:
            expected = flipped_result(example.problem)
        elif example.slip:
            expected = slipped_result(example.problem)
        assert last_boxed(example.response) == str(expected)


def test_random_is_not_global():
    state = random.getstate()
    build_miniworld(embedded(SyntheticSettings, train_size=10), embedded(MiniWorldSettings))
    assert random.getstate() == state
