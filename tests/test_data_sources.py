"""Source loaders on small synthetic fixtures (tests/fixtures/data), and the hub field mapping."""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tagrpo.data.prompts import CHOICE_LETTERS
from tagrpo.data.schema import LoadResult, Question, Rejection
from tagrpo.data.sources import gpqa_diamond, hendrycks_math, olympiadbench
from tagrpo.data.sources.base import (
    REJECTION_REASONS,
    HubSpec,
    Source,
    numeric_answer,
    problem_text,
    required_text,
    strip_math_delimiters,
)
from tagrpo.data.sources.hub import hub_spec, load_hub
from tagrpo.data.sources.local import load_local
from tagrpo.data.sources.registry import SOURCES, answer_kind_for, is_multiple_choice

FIXTURES = Path(__file__).parent / "fixtures" / "data"


def reasons(result: LoadResult) -> dict[int, str]:
    return {rejection.row_index: rejection.reason for rejection in result.rejections}


def by_id(result: LoadResult) -> dict[str, Question]:
    return {question.id: question for question in result.questions}


# Expected (rows_in, kept, {row: reason}) per fixture file.
EXPECTED = {
    "math": (
        10,
        3,
        {
            2: "no_boxed_answer",
            3: "invalid_json",
            4: "missing_field",
            5: "duplicate_id",
            6: "empty_problem",
            7: "empty_answer",
            9: "empty_line",
        },
    ),
    "math500": (4, 2, {2: "missing_field", 3: "empty_answer"}),
    "amc23": (7, 4, {4: "missing_field", 5: "duplicate_id", 6: "not_an_object"}),
    "aime24": (4, 3, {2: "duplicate_id"}),
    "aime25": (3, 2, {2: "empty_problem"}),
    "olympiadbench": (8, 6, {6: "bad_answer", 7: "empty_answer"}),
    "minerva_math": (4, 2, {2: "no_boxed_answer", 3: "missing_field"}),
    "gpqa_diamond": (8, 6, {6: "duplicate_options", 7: "empty_option"}),
    "openr1_math": (
        7,
        2,
        {
            2: "unsupported_question_type",
            3: "unsupported_question_type",
            4: "unverified_answer",
            5: "empty_answer",
            6: "duplicate_id",
        },
    ),
}


def test_registry_covers_every_source() -> None:
    """Every registered source has a fixture here, and is registered under its own name."""
    assert set(SOURCES) == set(EXPECTED)
    assert all(name == source.name for name, source in SOURCES.items())
    assert {n for n, s in SOURCES.items() if s.split == "train"} == {"math", "openr1_math"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_and_reasons(name: str) -> None:
    rows_in, kept, expected_reasons = EXPECTED[name]
    result = load_local(name, FIXTURES)
    assert result.source == name
    assert result.rows_in == rows_in == kept + len(expected_reasons)
    assert len(result.questions) == kept
    assert reasons(result) == expected_reasons
    assert set(expected_reasons.values()) <= set(REJECTION_REASONS)
    assert len({question.id for question in result.questions}) == kept
    for question in result.questions:
        assert question.problem == question.problem.strip() and question.problem
        assert question.answer == question.answer.strip() and question.answer
        assert question.split == ("train" if name in ("math", "openr1_math") else "test")


def test_math_rules() -> None:
    result = load_local("math", FIXTURES)
    questions = by_id(result)
    first = questions["train/algebra/1.json"]
    assert first.answer == "\\frac{1}{2}"  # balanced braces come out whole
    assert (first.level, first.subject) == ("Level 3", "Algebra")
    assert first.problem == "Compute half of one."  # not the duplicate's text
    assert questions["train/geometry/2.json"].answer == "4"  # last box wins
    assert questions["train/geometry/2.json"].level == "Level ?"
    stripped = questions["train/precalculus/8.json"]
    assert stripped.problem == "Evaluate $2+5$."
    assert stripped.answer == "7"  # \fbox counts like \boxed
    rejected = {r.reason: r for r in result.rejections}
    assert rejected["no_boxed_answer"].upstream_id == "train/algebra/3.json"
    assert rejected["missing_field"].detail == "solution"
    assert rejected["duplicate_id"].upstream_id == "train/algebra/1.json"
    assert "row 0" in rejected["duplicate_id"].detail


def test_math_keep_empty_boxed_option() -> None:
    result = load_local("math", FIXTURES, keep_empty_boxed=True)
    assert result.counts() == {"rows_in": 10, "kept": 4, "rejected": 6}
    assert by_id(result)["train/number_theory/7.json"].answer == ""


def test_math500_level_written_like_math_train() -> None:
    questions = by_id(load_local("math500", FIXTURES))
    assert questions["test/algebra/10.json"].level == "Level 2"
    assert questions["test/prealgebra/11.json"].answer == "\\frac13"
    assert questions["test/prealgebra/11.json"].subject == "Prealgebra"


def test_amc_float_answers() -> None:
    questions = by_id(load_local("amc23", FIXTURES))
    assert questions["amc23-0"].answer == "27"
    assert questions["amc23-1"].answer == "3.5"
    assert questions["amc23-2"].answer == "-1"
    assert questions["amc23-3"].answer == "0.25"
    assert questions["amc23-0"].meta == {"url": "https://example.org/amc/1"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("27.0", "27"),
        (27.0, "27"),
        ("3.5", "3.5"),
        (3.5, "3.5"),
        (" 3159.0 ", "3159"),
        (12, "12"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),  # not a number: verbatim
        ("1e3", "1000"),
        ("0.50", "0.50"),  # non-integer decimals keep their written form
    ],
)
def test_numeric_answer(value: object, expected: str) -> None:
    assert numeric_answer(value) == expected


def test_aime_ids_and_answers() -> None:
    aime24 = by_id(load_local("aime24", FIXTURES))
    assert aime24["aime24-60"].answer == "204"
    assert aime24["aime24-61"].answer == "33"  # int answer written as a string
    assert aime24["aime24-62"].answer == "371"  # no answer field: boxed in the solution
    aime25 = load_local("aime25", FIXTURES)
    assert [q.id for q in aime25.questions] == ["aime25-0", "aime25-1"]  # generated from rows
    assert [q.answer for q in aime25.questions] == ["70", "588"]


def test_olympiad_answers() -> None:
    result = load_local("olympiadbench", FIXTURES)
    questions = by_id(result)
    assert questions["olympiadbench-100"].answer == "2"
    assert questions["olympiadbench-101"].answer == "\\frac{1}{2 n+2}"  # list-like string
    assert questions["olympiadbench-102"].answer == "69,84"
    assert questions["olympiadbench-103"].answer == "3, 5"  # several entries joined
    assert questions["olympiadbench-105"].answer == "(-\\infty, 0) \\cup\\{1\\}"
    km = questions["olympiadbench-104"]
    assert km.answer == "\\frac{41}{12}"
    assert km.meta == {
        "unit": "km",
        "answer_type": "Numerical",
        "subfield": "Algebra",
        "is_multiple_answer": False,
    }
    assert questions["olympiadbench-103"].meta["is_multiple_answer"] is True
    assert questions["olympiadbench-100"].solution == "Solution of problem 100."
    assert questions["olympiadbench-100"].problem == "Olympiad problem 100."


def test_olympiad_string_fields_and_context() -> None:
    record = {
        "id": 1,
        "question": "Find $x$.",
        "context": "Let $x$ be a real number.",
        "final_answer": "['$1$', '$-1$']",
        "is_multiple_answer": "True",
        "solution": "['First.', 'Second.']",
    }
    question = olympiadbench.SOURCE.normalise(record, 0)
    assert isinstance(question, Question)
    assert question.answer == "1, -1"
    assert question.problem == "Let $x$ be a real number.\n\nFind $x$."
    assert question.solution == "First.\n\nSecond."
    assert question.meta["is_multiple_answer"] is True
    # literal_eval only: an expression is a parse failure, never executed
    bad = olympiadbench.SOURCE.normalise({**record, "final_answer": "[__import__('os')]"}, 3)
    assert isinstance(bad, Rejection) and bad.reason == "bad_answer" and bad.upstream_id == "1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("$2$", "2"), ("2", "2"), ("$a$, $b$", "a, b"), ("\\$5", "\\$5"), ("$x$.", "x")],
)
def test_strip_math_delimiters(text: str, expected: str) -> None:
    assert strip_math_delimiters(text) == expected


def test_minerva_gold_from_last_box() -> None:
    questions = by_id(load_local("minerva_math", FIXTURES))
    assert questions["minerva_math-0"].answer == "\\frac{1}{2}"
    assert questions["minerva_math-1"].answer == "4.5e3"
    assert questions["minerva_math-0"].subject == "Physics 101"


# --------------------------------------------------------------------------- GPQA


def test_gpqa_options_and_gold_letter() -> None:
    result = load_local("gpqa_diamond", FIXTURES)
    lines = (FIXTURES / "gpqa_diamond" / "test.jsonl").read_text().splitlines()
    upstream = [json.loads(line) for line in lines]
    for question in result.questions:
        record = next(r for r in upstream if r["Question"] == question.problem)
        assert question.answer_kind == "multiple_choice"
        assert question.choices is not None and len(question.choices) == 4
        gold_text = question.choices[CHOICE_LETTERS.index(question.answer)]
        assert gold_text == record["Correct Answer"].strip()
        assert sorted(question.choices) == sorted(
            record[f].strip() for f in gpqa_diamond.OPTION_FIELDS
        )
        assert "Question_w_answers" not in question.meta
        assert question.problem != record["Question_w_answers"]
    flagged = [q for q in result.questions if q.meta.get("duplicate_distractors")]
    assert [q.id for q in flagged] == ["gpqa_diamond-5"]
    assert by_id(result)["gpqa_diamond-1"].choices.count("oxygen") == 1  # stripped "oxygen\n"


def test_gpqa_strict_option_rejects_duplicate_distractors() -> None:
    result = load_local("gpqa_diamond", FIXTURES, reject_duplicate_distractors=True)
    assert reasons(result) == {5: "duplicate_options", 6: "duplicate_options", 7: "empty_option"}


def test_gpqa_shuffle_deterministic_and_seeded() -> None:
    first = load_local("gpqa_diamond", FIXTURES, seed=3)
    again = load_local("gpqa_diamond", FIXTURES, seed=3)
    assert [q.choices for q in first.questions] == [q.choices for q in again.questions]
    assert [q.answer for q in first.questions] == [q.answer for q in again.questions]
    other = load_local("gpqa_diamond", FIXTURES, seed=4)
    assert [q.choices for q in first.questions] != [q.choices for q in other.questions]
    assert all(q.meta["shuffle_seed"] == 4 for q in other.questions)


def test_gpqa_shuffle_independent_of_row_position() -> None:
    record = {
        "Question": "Which is heaviest?",
        "Correct Answer": "lead",
        "Incorrect Answer 1": "tin",
        "Incorrect Answer 2": "zinc",
        "Incorrect Answer 3": "iron",
    }
    at_zero = gpqa_diamond.SOURCE.normalise(record, 0, seed=1)
    at_fifty = gpqa_diamond.SOURCE.normalise(record, 50, seed=1)
    assert isinstance(at_zero, Question) and isinstance(at_fifty, Question)
    assert (at_zero.choices, at_zero.answer) == (at_fifty.choices, at_fifty.answer)


def test_gpqa_gold_letters_balanced_on_many_questions() -> None:
    letters = collections.Counter(
        CHOICE_LETTERS[gpqa_diamond.option_permutation(f"synthetic question {i}", 0).index(0)]
        for i in range(800)
    )
    assert set(letters) == set(CHOICE_LETTERS[:4])
    assert all(150 <= count <= 250 for count in letters.values()), letters


def test_normaliser_rejection_keeps_upstream_id() -> None:
    outcome = hendrycks_math.SOURCE.normalise(
        {"unique_id": "train/x/1.json", "problem": "p", "solution": "none"}, 7
    )
    assert isinstance(outcome, Rejection)
    assert (outcome.reason, outcome.row_index, outcome.upstream_id) == (
        "no_boxed_answer",
        7,
        "train/x/1.json",
    )
    wrong_type = hendrycks_math.SOURCE.normalise(
        {"unique_id": "a", "problem": 3, "solution": "\\boxed{1}"}, 0
    )
    assert isinstance(wrong_type, Rejection) and wrong_type.reason == "invalid_field"


# --------------------------------------------------------------------------- errors


def test_missing_file_names_path_and_setting(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as raised:
        load_local("amc23", tmp_path)
    message = str(raised.value)
    assert str(tmp_path / "amc23" / "test.jsonl") in message
    assert "TAGRPO_DATA_DIR" in message and "params.yaml" in message
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_local("math", tmp_path / "nowhere")


def test_unknown_source_and_option() -> None:
    with pytest.raises(KeyError, match="unknown source"):
        load_local("gsm8k", FIXTURES)
    with pytest.raises(TypeError):
        load_local("amc23", FIXTURES, seed=1)  # AMC has no shuffle: options are explicit


def test_load_local_default_dir_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAGRPO_DATA_DIR", str(FIXTURES))
    assert load_local("aime25").counts() == {"rows_in": 3, "kept": 2, "rejected": 1}


# --------------------------------------------------------------------------- hub mapping


class FakeHub:
    """Stands in for ``datasets.load_dataset``: returns rows per (repo, config, split)."""

    def __init__(self, rows: dict[tuple[str, str | None, str], list[dict]]) -> None:
        self.rows = rows
        self.calls: list[tuple[str, str | None, str]] = []

    def __call__(self, repo_id: str, config: str | None = None, *, split: str, **_: object):
        self.calls.append((repo_id, config, split))
        return iter(self.rows.get((repo_id, config, split), []))


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def install(rows: dict[tuple[str, str | None, str], list[dict]]) -> FakeHub:
        fake = FakeHub(rows)
        monkeypatch.setattr(datasets, "load_dataset", fake)
        return fake

    return install


def test_hub_math_uses_subject_configs(fake_hub) -> None:
    row = {"problem": "Add.", "level": "Level 1", "type": "Algebra", "solution": "$\\boxed{2}$"}
    fake = fake_hub(
        {
            ("EleutherAI/hendrycks_math", "algebra", "train"): [row, {**row, "solution": "none"}],
            ("EleutherAI/hendrycks_math", "geometry", "train"): [{**row, "type": "Geometry"}],
        }
    )
    result = load_hub("math")
    assert [call[1] for call in fake.calls] == list(hub_spec("math").configs)
    assert [q.id for q in result.questions] == ["train/algebra/hub-0", "train/geometry/hub-0"]
    assert [(r.row_index, r.reason) for r in result.rejections] == [(1, "no_boxed_answer")]
    assert result.rows_in == 3


def test_hub_math_alternative_repo(fake_hub) -> None:
    row = {"problem": "Add.", "level": "Level 1", "type": "Algebra", "solution": "$\\boxed{2}$"}
    fake_hub({("DigitalLearningGmbH/MATH-lighteval", "default", "train"): [row, row]})
    result = load_hub("math", repo_id="DigitalLearningGmbH/MATH-lighteval")
    assert [q.id for q in result.questions] == ["train/hub-0", "train/hub-1"]


def test_hub_same_rules_as_local(fake_hub) -> None:
    fake_hub(
        {
            ("math-ai/amc23", None, "test"): [
                {"id": 0, "problem": "P0", "answer": 27.0},
                {"id": 1, "problem": "P1", "answer": "3.5"},
            ],
            ("HuggingFaceH4/MATH-500", None, "test"): [
                {"problem": "P", "answer": "5", "level": 4, "subject": "Algebra", "unique_id": "u"},
            ],
            ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"): [
                {"id": 7, "question": "Q", "final_answer": ["$69$,$84$"], "unit": None},
            ],
            ("math-ai/olympiadbench", None, "test"): [{"id": 8, "question": "Q", "answer": "$5$"}],
            ("math-ai/minervamath", None, "test"): [{"question": "Q", "answer": "1.6"}],
            ("math-ai/aime25", None, "test"): [{"id": 3, "problem": "P", "answer": "70"}],
        }
    )
    assert [q.answer for q in load_hub("amc23").questions] == ["27", "3.5"]
    math500 = load_hub("math500").questions[0]
    assert (math500.level, math500.id) == ("Level 4", "u")
    assert load_hub("olympiadbench").questions[0].answer == "69,84"
    alt = load_hub("olympiadbench", repo_id="math-ai/olympiadbench").questions[0]
    assert (alt.id, alt.answer) == ("olympiadbench-8", "5")
    minerva = load_hub("minerva_math")
    assert [(q.id, q.problem, q.answer) for q in minerva.questions] == [
        ("minerva_math-0", "Q", "1.6")
    ]
    assert load_hub("aime25").questions[0].id == "aime25-3"


def test_hub_gpqa_shuffle_matches_local(fake_hub) -> None:
    record = {
        "Record ID": "rec42",
        "Question": "Which is heaviest?",
        "Correct Answer": "lead",
        "Incorrect Answer 1": "tin",
        "Incorrect Answer 2": "zinc",
        "Incorrect Answer 3": "iron",
        "High-level domain": "Chemistry",
    }
    fake = fake_hub({("Idavidrein/gpqa", "gpqa_diamond", "train"): [record]})
    question = load_hub("gpqa_diamond", seed=5).questions[0]
    local = gpqa_diamond.SOURCE.normalise(
        {k: v for k, v in record.items() if k != "Record ID"}, 0, seed=5
    )
    assert isinstance(local, Question)
    assert (question.choices, question.answer) == (local.choices, local.answer)
    assert (question.id, question.subject) == ("gpqa_diamond-rec42", "Chemistry")
    assert fake.calls == [("Idavidrein/gpqa", "gpqa_diamond", "train")]


def test_hub_unknown_repo_or_source() -> None:
    with pytest.raises(ValueError, match="no field mapping"):
        hub_spec("math", "someone/else")
    with pytest.raises(KeyError):
        hub_spec("gsm8k")


def _math_row(index: int, problem: str = "What is $1+1$?") -> str:
    record = {
        "unique_id": f"train/algebra/{index}.json",
        "problem": problem,
        "level": "Level 1",
        "type": "Algebra",
        "solution": "It is $\\boxed{2}$.",
    }
    return json.dumps(record)


def test_bad_bytes_lone_surrogates_and_long_problems_are_rejected_one_row_each(
    tmp_path: Path,
) -> None:
    """The drills: one non-UTF-8 byte used to abort the whole file with no line named; a 1 MB
    problem used to be kept. Each is now one rejected row with its file and line."""
    (tmp_path / "math").mkdir()
    lines = [
        _math_row(0).encode(),
        _math_row(1).encode()[:-3] + b"\xff\xfe" + b'"}',  # invalid UTF-8 on line 2
        _math_row(2, "What is \ud800 + 1?").encode("utf-8", "surrogatepass"),  # raw surrogate
        json.dumps({**json.loads(_math_row(3)), "problem": "What is \ud800?"}).encode(),
        _math_row(4, "x" * 1_000_000).encode(),
        _math_row(5).encode(),
    ]
    path = tmp_path / "math" / "train.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = load_local("math", tmp_path, max_problem_chars=8000, keep_empty_boxed=True)
    counts = result.counts()
    assert counts == {"rows_in": 6, "kept": 2, "rejected": 4}
    by_row = {r.row_index: r for r in result.rejections}
    assert {i: by_row[i].reason for i in by_row} == {
        1: "invalid_encoding",
        2: "invalid_encoding",
        3: "invalid_encoding",
        4: "too_long",
    }
    assert by_row[1].detail.startswith(f"{path}:2: invalid start byte")
    assert by_row[3].detail == f"{path}:4: a string holds a lone surrogate"
    assert by_row[4].detail == "1000000 characters > 8000"
    assert [q.id for q in result.questions] == ["train/algebra/0.json", "train/algebra/5.json"]


def test_openr1_keeps_verified_word_problems_and_reads_parquet(tmp_path: Path) -> None:
    result = load_local("openr1_math", FIXTURES)
    assert [(q.id, q.answer, q.meta.get("origin")) for q in result.questions] == [
        ("openr1_math-u-1", "7", "olympiads"),
        ("openr1_math-u-2", "5", "cn_contest"),  # verified by the LLM judge only
    ]
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (FIXTURES / "openr1_math" / "train.jsonl").open()]
    (tmp_path / "openr1_math").mkdir()
    pq.write_table(pa.Table.from_pylist(rows[:2]), tmp_path / "openr1_math" / "train.parquet")
    from_parquet = load_local("openr1_math", tmp_path)
    assert [q.id for q in from_parquet.questions] == ["openr1_math-u-1", "openr1_math-u-2"]


# --------------------------------------------------------------------------- the registry


@pytest.mark.parametrize(
    ("benchmark", "answer", "kind"),
    [
        ("gpqa_diamond", "B", "multiple_choice"),
        ("miniworld_choice", "(c)", "multiple_choice"),
        ("mini_choice", "A", "multiple_choice"),
        ("gpqa_diamond", "10^{-4} eV", "math"),  # a gold that is not a letter
        ("math500", "B", "math"),
        (None, "3", "math"),
    ],
)
def test_answer_kind_for(benchmark: str | None, answer: str, kind: str) -> None:
    assert answer_kind_for(benchmark, answer) == kind


def test_multiple_choice_is_declared_on_the_source() -> None:
    """The multiple-choice names come from the sources' answer kinds (plus the mini world's)."""
    names = [*SOURCES, "mini_choice", "miniworld_choice", "mini_chains", "gsm8k", None]
    assert [n for n in names if is_multiple_choice(n)] == [
        "gpqa_diamond",
        "mini_choice",
        "miniworld_choice",
    ]
    assert {n: (s.choices, s.chance_level) for n, s in SOURCES.items() if s.choices} == {
        "gpqa_diamond": (4, 0.25)
    }
    assert SOURCES["amc23"].chance_level is None
    free_form = replace(SOURCES["amc23"], name="new_choice")
    with pytest.raises(ValueError, match="multiple-choice source needs choices"):
        replace(free_form, answer_kind="multiple_choice")
    with pytest.raises(ValueError, match="multiple-choice source needs choices"):
        replace(free_form, choices=5)


def test_loader_options_are_the_row_builders_keywords() -> None:
    assert {n: s.loader_options() for n, s in SOURCES.items() if s.loader_options()} == {
        "math": {"keep_empty_boxed"},
        "gpqa_diamond": {"seed", "reject_duplicate_distractors"},
    }


def test_file_and_group_of_each_benchmark() -> None:
    """The paper's Table 1 groups, as the paper and local profiles average them, and the
    in-distribution group: the MATH test split where a profile evaluates it (an empty group is
    dropped)."""
    from tagrpo.config.params import validate_params
    from tagrpo.config.profiles import merged_with_profile
    from tagrpo.plumbing.paths import project_root

    assert {n: s.file for n, s in SOURCES.items()} == {
        name: f"{name}/{SOURCES[name].split}.jsonl" for name in SOURCES
    }
    declared: dict[str, list[str]] = {}
    for name, source in SOURCES.items():
        if source.group is not None:
            declared.setdefault(source.group, []).append(name)
    for profile, in_distribution in (("paper.yaml", None), ("local.yaml", ["math500"])):
        root = project_root()
        config = validate_params(
            merged_with_profile(root / "profiles" / profile, root / "params.yaml")
        )
        groups = dict(config.evaluate.groups)
        assert groups.pop("in_distribution", None) == in_distribution, profile
        assert {g: sorted(m) for g, m in groups.items()} == {
            g: sorted(m) for g, m in declared.items()
        }, profile


def _toy_build(record: Mapping[str, Any], row_index: int, *, flip: bool = False) -> Question:
    answer = required_text(record, "answer")
    return Question(
        id=TOY.question_id(record, row_index),
        source="toy_choice",
        split="test",
        problem=problem_text(record),
        answer=("B" if answer == "A" else "A") if flip else answer,
        answer_kind="multiple_choice",
        choices=["yes", "no", "maybe"],
    )


TOY = Source(
    name="toy_choice",
    title="Toy",
    split="test",
    file="toy_choice/test.jsonl",
    id_field="id",
    build=_toy_build,
    hub=(HubSpec("someone/toy", "test"),),
    answer_kind="multiple_choice",
    choices=3,
)


def test_a_new_source_needs_its_module_and_a_registry_entry_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation, loading, the input manifest, grading's answer kind and the report's chance
    floor all read the registered Source: registering it is all a new benchmark takes."""
    from tagrpo.config.params import config_with
    from tagrpo.report.chance import multiple_choice_options
    from tagrpo.splits.build import load_sources
    from tagrpo.splits.inputs import local_source_files

    (tmp_path / "toy_choice").mkdir()
    rows = [{"id": 7, "problem": "Is it?", "answer": "A"}, {"id": 7, "problem": "Again?"}]
    (tmp_path / "toy_choice" / "test.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    monkeypatch.setenv("TAGRPO_DATA_DIR", str(tmp_path))
    overrides = {
        "data.source": "local",
        "data.local.train": ["toy_choice"],
        "data.local.benchmarks": ["toy_choice"],
        "data.local.options": {"toy_choice": {"flip": True}},
        "evaluate.groups": {},
        "report.in_distribution": None,  # no groups: V1 over every benchmark
        "report.primary_group": None,  # no groups: every free-form benchmark
        "report.harder_group": None,  # no groups: no calibration band
    }
    with pytest.raises(ValueError, match="unknown sources \\['toy_choice'\\]"):
        config_with(overrides)
    monkeypatch.setitem(SOURCES, "toy_choice", TOY)
    config = config_with(overrides)
    with pytest.raises(ValueError, match="unknown loader options \\['seed'\\]"):
        config_with({**overrides, "data.local.options": {"toy_choice": {"seed": 1}}})

    loaded = load_sources(config).benchmarks["toy_choice"]
    assert (loaded.source, loaded.split, loaded.counts()) == (
        "toy_choice",
        "test",
        {"rows_in": 2, "kept": 1, "rejected": 1},
    )
    assert [(q.id, q.answer) for q in loaded.questions] == [("toy_choice-7", "B")]
    assert [(r.row_index, r.reason, r.upstream_id) for r in loaded.rejections] == [
        (1, "missing_field", "7")
    ]
    assert local_source_files(config) == ["toy_choice/test.jsonl"]
    assert multiple_choice_options(config) == {"toy_choice": 3}
    assert answer_kind_for("toy_choice", "C") == "multiple_choice"
    assert hub_spec("toy_choice").repo_id == "someone/toy"
