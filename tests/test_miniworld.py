import random

import pytest

from tagrpo.config.base_model import WarmStartCorpus
from tagrpo.config.common import MiniWorldSettings
from tagrpo.config.data import SyntheticSettings
from tagrpo.config.params import embedded
from tagrpo.grading.extract import last_boxed
from tagrpo.miniworld.dataset import build_miniworld, problem_from_meta, problem_space
from tagrpo.miniworld.tasks import (
    HELD_OUT_FAMILY,
    PHRASING_FAMILIES,
    STEP_CLASSES,
    MiniProblem,
    ProblemSpace,
    choice_options,
    misread_result,
    misread_steps,
    path_order,
    reference_response,
    render,
    sample_problems,
    step_class,
)
from tagrpo.training.warmstart import build_corpus

PROBLEM = MiniProblem(12, (7, -4, 8), name="Ana", item="coins")


def test_answers_and_misreadings():
    assert PROBLEM.answer == 23 and PROBLEM.length == 3
    assert misread_result(PROBLEM, {1}) == 31  # -4 read as +4
    assert misread_result(PROBLEM, {0, 2}) == -7
    assert path_order(PROBLEM, "forward") == [0, 1, 2]
    assert path_order(PROBLEM, "backward") == [2, 1, 0]


def test_invalid_problems_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        MiniProblem(3, (-2, -5))
    with pytest.raises(ValueError, match="at least 2 changes"):
        MiniProblem(3, (4,))
    with pytest.raises(ValueError, match="no change 0"):
        MiniProblem(3, (4, 0))
    with pytest.raises(ValueError, match="unknown strategy"):
        path_order(PROBLEM, "sideways")


def test_step_classes_split_sign_and_size():
    assert [step_class(c, 4) for c in (3, 4, -3, -9)] == list(STEP_CLASSES)
    assert step_class(4, 5) == "plus_small"


def test_every_phrasing_states_the_start_and_every_change():
    for family in (*PHRASING_FAMILIES, HELD_OUT_FAMILY):
        text = render(PROBLEM, family)
        for number in ("12", "7", "4", "8"):
            assert number in text, (family, text)
    assert render(PROBLEM, "expr") == "What is 12 + 7 - 4 + 8?"
    assert render(PROBLEM, "words") == "Compute 12 plus 7 minus 4 plus 8."
    assert render(PROBLEM, "imperative") == (
        "Start with 12. Add 7. Subtract 4. Add 8. What number do you get?"
    )
    assert render(PROBLEM, "story") == (
        "Ana has 12 coins, finds 7 more, gives away 4, then buys 8 more. "
        "How many coins does Ana have now?"
    )
    unseen = render(PROBLEM, HELD_OUT_FAMILY)
    assert "Ana" not in unseen and "coins" not in unseen  # props neither SFT nor RL shows
    with pytest.raises(ValueError, match="unknown phrasing"):
        render(PROBLEM, "poem")


def test_reference_responses_take_the_changes_in_the_paths_order():
    assert reference_response(PROBLEM) == (
        "Left to right: 12 + 7 = 19. 19 - 4 = 15. 15 + 8 = 23. The answer is \\boxed{23}."
    )
    assert reference_response(PROBLEM, strategy="backward") == (
        "Right to left: 12 + 8 = 20. 20 - 4 = 16. 16 + 7 = 23. The answer is \\boxed{23}."
    )
    misread = reference_response(PROBLEM, strategy="backward", misread={1})
    assert misread == (
        "Right to left: 12 + 8 = 20. 20 - 4 = 24. 24 + 7 = 31. The answer is \\boxed{31}."
    )
    assert last_boxed(reference_response(PROBLEM, letter="C")) == "C"
    with pytest.raises(ValueError, match="not in a chain of 3"):
        reference_response(PROBLEM, misread={3})


def test_habits_misread_the_listed_classes_of_the_family_and_path():
    habits = {"words": {"forward": ["minus_small"], "backward": ["plus_big", "plus_small"]}}
    assert misread_steps(PROBLEM, "words", "forward", habits, big_from=5) == [1]
    assert misread_steps(PROBLEM, "words", "backward", habits, big_from=5) == [0, 2]
    assert misread_steps(PROBLEM, "expr", "forward", habits, big_from=5) == []


def test_choice_options_hold_the_answer_at_the_gold_letter():
    options, letter = choice_options(PROBLEM, seed=3, count=10)
    values = sorted(int(option) for option in options)
    assert values == list(range(values[0], values[0] + 10))  # consecutive, answer inside
    assert options["ABCDEFGHIJ".index(letter)] == "23"
    assert choice_options(PROBLEM, seed=3, count=10) == (options, letter)


def test_choice_options_do_not_give_the_answer_away_by_its_rank():
    # The answer's rank among the options is spread out (not always the middle or an end),
    # except where the window is clamped at 0.
    ranks = []
    for start in range(10, 30):
        problem = MiniProblem(start, (3, -2))
        options, _ = choice_options(problem, seed=0, count=10)
        values = sorted(int(option) for option in options)
        ranks.append(values.index(problem.answer))
    assert len(set(ranks)) >= 8
    with pytest.raises(ValueError, match=r"count must be 2\.\.26"):
        choice_options(PROBLEM, seed=0, count=27)


def test_the_space_keeps_both_paths_in_range_and_their_first_terms_apart():
    space = ProblemSpace({3: 1.0}, start_min=5, start_max=25, max_change=9, max_total=40)
    assert not space.admits(5, [-6, 2, 3])  # forward goes below 0
    assert not space.admits(5, [3, 2, -6])  # backward goes below 0
    assert not space.admits(10, [3, 2, -3])  # first and last change of one size
    assert space.admits(10, [3, 2, -4])
    rng = random.Random(0)
    for _ in range(300):
        problem = space.sample(rng)
        assert space.admits(problem.start, list(problem.changes)) and problem.length == 3
        assert 5 <= problem.start <= 25 and all(1 <= abs(c) <= 9 for c in problem.changes)
    with pytest.raises(ValueError, match="chain lengths must be >= 2"):
        ProblemSpace({1: 1.0})


def test_sampling_is_seeded_distinct_and_respects_exclusions():
    space = ProblemSpace({3: 1.0})
    first = sample_problems(space, 50, seed=1)
    assert first == sample_problems(space, 50, seed=1)
    assert len({p.key() for p in first}) == 50
    second = sample_problems(space, 50, seed=2, exclude={p.key() for p in first})
    assert not {p.key() for p in first} & {p.key() for p in second}
    # start 2, changes +/-1..2 within 0..3: only 2 - 2 + 1 and 2 + 1 - 2 fit both paths
    tiny = ProblemSpace({2: 1.0}, start_min=2, start_max=2, max_change=2, max_total=3)
    assert {p.changes for p in sample_problems(tiny, 2, seed=0)} == {(-2, 1), (1, -2)}
    with pytest.raises(ValueError, match="too small"):
        sample_problems(tiny, 3, seed=0)
    empty = ProblemSpace({2: 1.0}, start_min=1, start_max=1, max_change=2, max_total=2)
    with pytest.raises(ValueError, match="no chain of length 2 fits"):
        sample_problems(empty, 1, seed=0)


def test_splits_are_disjoint_by_arithmetic_and_rebuildable():
    world = embedded(MiniWorldSettings)
    default = embedded(SyntheticSettings)
    assert "mini_choice" not in default.benchmarks  # world v2, candidate 3: no multiple choice
    # A multiple-choice benchmark added (as profiles/smoke.yaml does) is drawn disjoint too.
    choice_spec = {"size": 48, "lengths": {2: 1.0}, "multiple_choice": True, "options": 10}
    settings = embedded(
        SyntheticSettings,
        benchmarks={**default.model_dump()["benchmarks"], "mini_choice": choice_spec},
    )
    built = build_miniworld(settings, world)
    keys = {name: {q.meta["key"] for q in result.questions} for name, result in built.items()}
    names = list(keys)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not keys[a] & keys[b], (a, b)
    assert built["train"].counts() == {"rows_in": 640, "kept": 640, "rejected": 0}
    assert built["extra"].counts() == {"rows_in": 960, "kept": 960, "rejected": 0}
    # The pool is drawn after the training split: its size never changes the training set.
    smaller = build_miniworld(settings.model_copy(update={"extra_size": 10}), world)
    assert [q.id for q in smaller["train"].questions] == [q.id for q in built["train"].questions]
    for question in built["train"].questions[:20]:
        problem = problem_from_meta(question.meta)
        assert render(problem, question.meta["family"]) == question.problem
        assert str(problem.answer) == question.answer
        assert question.subject == "chain3"
    assert {q.subject for q in built["mini_long"].questions} == {"chain4"}
    choice = built["mini_choice"].questions[0]
    assert choice.answer_kind == "multiple_choice" and choice.answer in "ABCDEFGHIJ"
    assert len(choice.choices) == 10
    assert {q.meta["family"] for q in built["mini_unseen"].questions} == {HELD_OUT_FAMILY}


def test_corpus_misreads_exactly_the_habit_steps_at_the_configured_rate():
    world = embedded(MiniWorldSettings)
    config = embedded(WarmStartCorpus, examples=4000, choice_fraction=0.0, misread_rate=0.25)
    space = problem_space(world, config.lengths)
    corpus = build_corpus(space, config, exclude_keys=set(), big_from=world.big_from, seed=3)
    assert len(corpus) == 4000
    habits = config.habits
    eligible = misread = 0
    for example in corpus:
        family = next(
            f
            for f in PHRASING_FAMILIES
            if render(example.problem, f) in example.messages[0]["content"]
        )
        steps = misread_steps(example.problem, family, example.strategy, habits, world.big_from)
        assert set(example.misread) <= set(steps)  # never a step outside the habit
        eligible += len(steps)
        misread += len(example.misread)
        expected = misread_result(example.problem, example.misread)
        assert last_boxed(example.response) == str(expected)
    assert abs(misread / eligible - 0.25) < 0.02
    assert {e.strategy for e in corpus} == {"forward", "backward"}
    assert {e.problem.length for e in corpus} == set(config.lengths)


def test_every_family_and_path_has_a_habit_and_no_path_is_safe():
    # The world's symmetry (preregistration/world-v2.md): in every family both paths misread
    # something, disjoint classes, one path one class and the other two; each path has one
    # class in two families and two in the other two; each class is misread in three
    # (family, path) pairs.
    habits = embedded(WarmStartCorpus).habits
    assert set(habits) == set(PHRASING_FAMILIES)
    for family in PHRASING_FAMILIES:
        forward, backward = habits[family]["forward"], habits[family]["backward"]
        assert not set(forward) & set(backward), family
        assert sorted([len(forward), len(backward)]) == [1, 2], family
    for path in ("forward", "backward"):
        sizes = sorted(len(habits[f][path]) for f in PHRASING_FAMILIES)
        assert sizes == [1, 1, 2, 2], path
    slots = [c for f in PHRASING_FAMILIES for p in ("forward", "backward") for c in habits[f][p]]
    assert {c: slots.count(c) for c in STEP_CLASSES} == dict.fromkeys(STEP_CLASSES, 3)


def test_random_is_not_global():
    state = random.getstate()
    build_miniworld(embedded(SyntheticSettings, train_size=10), embedded(MiniWorldSettings))
    assert random.getstate() == state


def test_the_warm_start_corpus_never_holds_a_training_pool_or_benchmark_problem(tmp_path):
    # Through the data stage's own writer and the base_model stage's own reader: every key the
    # corpus draws is outside every split; and with nothing excluded the same draw does hit
    # them (the exclusion is doing the work, not luck).
    from tagrpo.config.params import load_config
    from tagrpo.splits.build import load_sources, write_processed
    from tagrpo.training.base_policy import reserved_keys

    config = load_config()
    write_processed(tmp_path, load_sources(config), config.data.extra_seed)
    reserved = reserved_keys(tmp_path)
    expected = sum(spec.size for spec in config.data.synthetic.benchmarks.values())
    expected += config.data.synthetic.train_size + config.data.synthetic.extra_size
    assert len(reserved) == expected
    world, corpus_config = config.common.miniworld, config.base_model.warmstart.corpus
    space = problem_space(world, corpus_config.lengths)
    corpus = build_corpus(space, corpus_config, reserved, world.big_from, seed=0)
    assert not {example.problem.key() for example in corpus} & reserved
    unguarded = build_corpus(space, corpus_config, set(), world.big_from, seed=0)
    assert {example.problem.key() for example in unguarded} & reserved
    (tmp_path / "train.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="must exclude them"):
        reserved_keys(tmp_path)


def test_batched_encoding_gives_each_example_the_ids_of_its_own_encoding():
    # The SFT encodes its corpus in two batched calls (encode_examples); the ids and labels
    # must be those of one call per example, multiple-choice examples and an empty corpus too.
    from tagrpo.miniworld.tokenizer import train_tokenizer
    from tagrpo.training.warmstart import chat_text, encode_example, encode_examples

    world = embedded(MiniWorldSettings)
    config = embedded(WarmStartCorpus, examples=300, choice_fraction=0.3)
    space = problem_space(world, config.lengths)
    corpus = build_corpus(space, config, exclude_keys=set(), big_from=world.big_from, seed=5)
    tokenizer = train_tokenizer((chat_text(e) for e in corpus), vocab_size=384)
    assert any(e.choices for e in corpus) and any(not e.choices for e in corpus)
    assert encode_examples(tokenizer, corpus) == [encode_example(tokenizer, e) for e in corpus]
    assert encode_examples(tokenizer, []) == []
