"""Grader parity from the same saved responses: the verdict columns, the table per benchmark
(pass@1, pass@k, errors, disagreements), its markdown in the report, and ``tagrpo grade
--parity`` over an evaluation's responses and over a sample store (nothing sampled)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pandas as pd
import pytest

from tagrpo.backends.base import Completion, Messages, SamplingParams
from tagrpo.backends.sample_store import SampleStore
from tagrpo.config.params import validate_params
from tagrpo.config.profiles import merged_with_profile
from tagrpo.data.schema import Question, write_questions
from tagrpo.evaluation.parity import (
    GRADERS,
    disagreeing,
    grade_parity,
    parity_section,
    parity_table,
    plain_integer_box,
    verdict_columns,
)
from tagrpo.evaluation.runner import evaluate, grade_responses, sample_benchmarks
from tagrpo.grading.grade_fn import make_grade_fn
from tagrpo.grading.pool import GradingPool
from tagrpo.grading.types import GradeItem
from tagrpo.pipeline.cli import main as cli_main
from tagrpo.plumbing.layout import BASE_POLICY, evaluate_outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.report.build import grader_parity_section

# benchmark, question, gold, kind, the responses (two samples per question); verdicts
# (tagrpo, math_reward, math_verify) in the comments, as tests/test_graders.py pins them.
ROWS = [
    ("math500", "m1", "5", "math", "So $\\boxed{5.}$"),  # right, wrong, wrong
    ("math500", "m1", "5", "math", "So $\\boxed{5}$"),  # right everywhere
    ("math500", "m2", "\\frac{1}{2}", "math", "$\\boxed{\\displaystyle\\frac{1}{2}}$"),  # R W R
    ("math500", "m2", "\\frac{1}{2}", "math", "The answer is 7."),  # wrong everywhere
    ("gpqa_diamond", "g1", "B", "multiple_choice", "The answer is (B)."),
    ("gpqa_diamond", "g1", "B", "multiple_choice", "The answer is (C)."),
    ("mini_chains", "c1", "23", "math", "12 + 7 - 4 + 8 = 23, so $\\boxed{23}$"),
    ("mini_chains", "c1", "23", "math", "12 + 7 - 4 + 8 = 22, so $\\boxed{22}$"),
]


def responses_frame() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "benchmark": benchmark,
                "question_id": qid,
                "sample_index": index % 2,
                "answer": gold,
                "answer_kind": kind,
                "response": text,
            }
            for index, (benchmark, qid, gold, kind, text) in enumerate(ROWS)
        ]
    )


@pytest.fixture(scope="module")
def graded() -> pd.DataFrame:
    with make_grade_fn(workers=1) as grade:
        return grade_parity(responses_frame(), grade)


def test_every_grader_grades_every_response(graded) -> None:
    assert graded["correct_tagrpo"].tolist() == [1, 1, 1, 0, 1, 0, 1, 0]
    assert graded["correct_math_reward"].tolist() == [0, 1, 0, 0, 1, 0, 1, 0]
    assert graded["correct_math_verify"].tolist() == [0, 1, 1, 0, 1, 0, 1, 0]
    assert graded["reason_math_reward"].tolist()[:4] == [
        "mismatch", "math_reward", "mismatch", "no_answer",
    ]  # fmt: skip
    # Multiple choice: the letter rule under every grader.
    assert graded["pred_math_verify"].tolist()[4:6] == ["B", "C"]
    assert graded["reason_math_reward"].tolist()[4:6] == ["exact", "mismatch"]


def test_the_table_per_benchmark(graded) -> None:
    table = parity_table(graded, ks=[1, 2, 4], must_agree={"mini_chains"})
    shown = table.set_index(["benchmark", "grader"])
    assert list(shown.index) == [
        ("math500", "tagrpo"), ("math500", "math_reward"), ("math500", "math_verify"),
        ("gpqa_diamond", "tagrpo"),
        ("mini_chains", "tagrpo"), ("mini_chains", "math_reward"), ("mini_chains", "math_verify"),
    ]  # fmt: skip
    math = shown.loc["math500"]
    # tagrpo: m1 2 of 2, m2 1 of 2; math_reward: 1 of 2, 0 of 2; math_verify: 1 of 2, 1 of 2.
    assert math["pass_at_1"].tolist() == [0.75, 0.25, 0.5]
    assert math["pass_at_k"].tolist() == [1.0, 0.5, 1.0]
    assert set(table["k"]) == {2}  # the largest k every question has samples for
    assert math["disagreements"].tolist() == [2, 2, 2]
    assert math["errors"].tolist() == [0, 0, 0]
    assert math["malformed_disagreements"].tolist() == [0, 0, 0]  # math500 need not agree
    assert shown.loc[("gpqa_diamond", "tagrpo"), "pass_at_1"] == 0.5  # chance floor: 1 of 4
    assert shown.loc["mini_chains"]["disagreements"].tolist() == [0, 0, 0]
    assert shown.loc["mini_chains"]["must_agree"].all()


def test_the_markdown_section(graded) -> None:
    text = parity_section({"base": graded}, [1, 2], must_agree={"mini_chains"})
    assert "### math500" in text and "### gpqa_diamond" in text
    assert "| `base` | math_reward | 4 | 25.0 | 50.0 (k=2) | 0 | 2 |" in text
    gpqa = "| `base` | option letters (every grader) | 2 | 50.0 | 100.0 (k=2) | 0 | 0 |"
    assert gpqa in text  # one row: the letter rule under every grader
    assert "| `base` | `m1` #0 | `5` | `5.` | right (exact) | wrong (mismatch) | " in text
    assert (
        "The mini world's plain boxed integer answers (each `\\boxed{...}` closed, all the same "
        "integer): every grader agrees.\n" in text
    )
    assert "**Bug" not in text
    # A plain integer box the graders read differently is a bug (a verdict planted here).
    planted = graded.copy()
    plain = planted.index[(planted["benchmark"] == "mini_chains") & planted["correct_tagrpo"]][0]
    planted.loc[plain, "correct_math_verify"] = False
    buggy = parity_section({"base": planted}, [1, 2], must_agree={"mini_chains"})
    assert (
        "**Bug: the graders disagree on 1 plain boxed integer answer(s) of the mini world**"
        in buggy
    )
    withheld = parity_section({"base": graded}, [1, 2], withheld={"math500": "not shown"})
    assert "Examples withheld: not shown." in withheld
    assert "`m1` #0" not in withheld


def test_an_unboxed_mini_world_answer_is_no_bug() -> None:
    """A chain cut before its box: math-verify reads the prose's last number, the others find
    no answer. Counted apart from the boxed answers, which must agree."""
    frame = responses_frame().iloc[6:].copy()
    frame.loc[frame.index[1], "response"] = "Left to right: 12 + 7 = 19. 19 - 4 = 15. 15 + 8 = 23."
    with make_grade_fn(workers=1) as grade:
        graded = grade_parity(frame, grade)
    assert graded["correct_math_verify"].tolist() == [True, True]
    assert graded["reason_tagrpo"].tolist() == ["exact", "no_answer"]
    table = parity_table(graded, [1, 2], must_agree={"mini_chains"})
    assert table["disagreements"].tolist() == [1, 1, 1]
    assert table["malformed_disagreements"].tolist() == [1, 1, 1]
    text = parity_section({"base": graded}, [1, 2], must_agree={"mini_chains"})
    assert (
        "every grader agrees. 1 response(s) without such a box (none, `\\boxed` without its "
        "brace, an unclosed brace, boxes of different values, a box that is not an integer) "
        "disagree: each grader reads those its own way." in text
    )


@pytest.mark.parametrize(
    ("response", "plain"),
    [
        ("The answer is \\boxed{9}.", True),
        ("The answer is \\boxed{ -4 }.", True),
        ("\\boxed{9}. Again: \\boxed{9}.", True),  # the same value twice
        ("No box: 15 + 8 = 23.", False),
        ("The answer is \\boxed 20}.", False),  # no brace: verl reads `\\boxed ` first
        ("\\boxed 11 - 4 = 7. The answer is \\boxed{9}.", False),
        ("\\boxed{14}. The answer is \\boxed{0{-2}.", False),  # the last one never closes
        ("\\boxed{3}. The answer is \\boxed{5}.", False),  # two values
        ("The answer is \\boxed{1 11}.", False),  # not an integer
        ("The answer is \\boxed{\\frac{1}{2}}.", False),
        ("The answer is \\boxed{}.", False),
    ],
)
def test_a_plain_integer_box(response: str, plain: bool) -> None:
    assert plain_integer_box(response) is plain


def test_malformed_boxes_of_the_mini_world_are_no_bug() -> None:
    """Responses the default run's policies wrote (evals/*/responses.parquet), on which the
    graders disagree: a brace-less ``\\boxed`` verl's math_reward reads first, a last box that
    never closes, a box that is not an integer. Counted apart; a plain box stays a bug."""
    frame = responses_frame().iloc[6:].copy()
    frame = pd.concat([frame] * 2, ignore_index=True)
    frame["question_id"] = [f"c{i // 2}" for i in range(len(frame))]
    frame["answer"] = ["9", "9", "14", "14"]
    frame["response"] = [
        "Right The answer is \\boxed 11 - 4 = 7. 7 + 2 = 9. The answer is \\boxed{9}.",
        "Right to left: 9 - 7 = 2. The answer is \\boxed{9 0}.",
        "6 - 1 = 5. 5 + 2 = 7. 7 + 7 = 14. The answer is \\boxed{14}. The20 The answer is "
        "\\boxed{0{-2}.",
        "7 + 7 = 14. The answer is \\boxed{14}.",
    ]
    with make_grade_fn(workers=1) as grade:
        graded = grade_parity(frame, grade)
    differ = disagreeing(graded).tolist()
    assert differ[0] and differ[2] and not differ[3]
    table = parity_table(graded, [1, 2], must_agree={"mini_chains"})
    assert table["disagreements"].tolist() == [sum(differ)] * 3
    assert table["malformed_disagreements"].tolist() == [sum(differ)] * 3
    assert "**Bug" not in parity_section({"base": graded}, [1, 2], must_agree={"mini_chains"})


def spinning(response: str, answer: str) -> tuple[bool, str, str]:
    while True:
        pass


def test_a_hanging_grader_is_counted_as_errors() -> None:
    responses = responses_frame()
    mini = responses[responses["benchmark"] == "mini_chains"]
    kinds = {"math@math_verify": spinning}
    with GradingPool(workers=1, item_timeout_s=0.5, extra_kinds=kinds, warm_up=False) as pool:

        def grade(texts: Sequence[str], golds: Sequence[str], kinds: Sequence[str]) -> list:
            items = [GradeItem(*item) for item in zip(texts, golds, kinds, strict=True)]
            return [(r.correct, r.pred, r.reason) for r in pool.grade(items)]

        graded = grade_parity(mini, grade)
    assert graded["reason_math_verify"].tolist() == ["timeout", "timeout"]
    table = parity_table(graded, [1, 2], must_agree={"mini_chains"}).set_index("grader")
    assert table["errors"].tolist() == [0, 0, 2]
    assert table.loc["math_verify", "pass_at_1"] == 0.0
    assert table["disagreements"].tolist() == [1, 1, 1]  # a timeout is no verdict of "right"
    text = parity_section({"base": graded}, [1, 2], must_agree={"mini_chains"})
    assert "| `base` | math_verify | 2 | 0.0 | 0.0 (k=2) | 2 | 1 |" in text
    assert "wrong (timeout)" in text


def test_evaluation_grades_with_every_grader() -> None:
    """The evaluation's own grader decides ``correct`` (and pass@k); the others sit beside."""

    class Backend:
        prompt_format = "chat"

        def prompt_text(self, messages: Messages) -> str:
            return messages[-1]["content"]

        def generate(self, conversations, sampling):
            assert len(conversations) == 2
            return [
                [Completion(text=f"$\\boxed{{{s}}}$", num_tokens=3, finished=True)]
                for s in ("5.", "5")
            ]

    questions = {
        "math500": [
            Question(id=f"q{i}", source="t", split="test", problem=f"P{i}", answer="5")
            for i in range(2)
        ]
    }
    with make_grade_fn(workers=1, grader="math_reward") as grade:
        result = evaluate(
            Backend(), questions, SamplingParams(n=1), grade, ks=[1], grader="math_reward"
        )
    frame = result.responses
    assert frame["correct"].tolist() == [False, True]  # math_reward: "5." is not 5
    assert frame["correct_math_reward"].tolist() == [False, True]
    assert frame["correct_tagrpo"].tolist() == [True, True]
    assert result.summary["math500/pass@1"] == 0.5


class StoreBackend:
    """Answers each problem with the response ``ANSWERS`` names, for every sample."""

    prompt_format = "chat"
    ANSWERS: ClassVar[dict[str, list[str]]] = {
        "Five?": ["$\\boxed{5.}$", "$\\boxed{5}$"],
        "Pick": ["(B)", "(C)"],
    }

    def prompt_text(self, messages: Messages) -> str:
        return messages[-1]["content"]

    def generate(self, conversations, sampling: SamplingParams) -> list[list[Completion]]:
        out = []
        for messages in conversations:
            content = messages[-1]["content"]
            texts = next(v for k, v in self.ANSWERS.items() if content.startswith(k))
            out.append(
                [Completion(text=t, num_tokens=2, finished=True, token_ids=(1,)) for t in texts]
            )
        return out


def test_grade_parity_over_a_sample_store_and_a_responses_table(tmp_path, capsys) -> None:
    benchmarks_dir = tmp_path / "benchmarks"
    benchmarks_dir.mkdir()
    benchmarks = {
        "math500": [Question(id="m1", source="t", split="test", problem="Five?", answer="5")],
        "gpqa_diamond": [
            Question(
                id="g1",
                source="t",
                split="test",
                problem="Pick",
                answer="B",
                answer_kind="multiple_choice",
                choices=["a", "b", "c", "d"],
            )
        ],
    }
    for name, questions in benchmarks.items():
        write_questions(questions, str(benchmarks_dir / f"{name}.parquet"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    store = SampleStore(tmp_path / "store", log=lambda line: None)
    sampler = store.sampler(StoreBackend, model_dir=model, engine={"e": 1}, scope="evaluate@base")
    sampled = sample_benchmarks(sampler, benchmarks, SamplingParams(n=2))
    sampler.generate(
        [[{"role": "user", "content": "Five? (a diagnostics chunk)"}]], SamplingParams(n=2)
    )

    out = tmp_path / "parity.md"
    argv = ["grade", "--parity", "--input", str(tmp_path / "store"), "--output", str(out),
            "--benchmarks", str(benchmarks_dir), "--ks", "1,2", "--workers", "1"]  # fmt: skip
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert "graded 4 responses, nothing sampled; 1 chunk(s) matched no benchmark" in printed
    assert "math500: pass@1 tagrpo 100.0% (0 errors), math_reward 50.0% (0 errors), " in printed
    text = out.read_text()
    assert "| math_verify | 2 | 50.0 | 100.0 (k=2) | 0 | 1 |" in text
    assert "| `m1` #0 | `5` | `5.` | right (exact) | wrong (mismatch) | wrong (mismatch) |" in text

    # The same samples as the evaluation's responses table: the same tables.
    with make_grade_fn(workers=1) as grade:
        table = grade_responses(sampled, grade)
    table.to_parquet(tmp_path / "responses.parquet", index=False)
    argv[3], argv[5] = str(tmp_path / "responses.parquet"), str(tmp_path / "again.md")
    assert cli_main([*argv[:6], "--ks", "1,2", "--workers", "1"]) == 0
    again = (tmp_path / "again.md").read_text()
    assert again.replace("responses.parquet", "store") == text


class RowsBackend:
    """Answers each problem of ``ROWS`` (its question id as the problem) with its responses."""

    prompt_format = "chat"

    def prompt_text(self, messages: Messages) -> str:
        return messages[-1]["content"]

    def generate(self, conversations, sampling: SamplingParams) -> list[list[Completion]]:
        out = []
        for messages in conversations:
            qid = messages[-1]["content"].split()[0]
            texts = [row[4] for row in ROWS if row[1] == qid]
            assert len(texts) == sampling.n
            out.append([Completion(text=t, num_tokens=9, finished=True) for t in texts])
        return out


def test_the_real_tiny_report_renders_the_table(tmp_path) -> None:
    """The report's section from evaluation outputs as the real-tiny profile's evaluate stage
    writes them (its n, ks and benchmarks; :func:`evaluate` makes the tables): every policy's
    rows per benchmark; an output from before grader parity is named, not dropped."""
    source = project_root()
    merged = merged_with_profile(source / "profiles" / "real-tiny.yaml", source / "params.yaml")
    config = validate_params(merged, "real-tiny")
    settings = config.evaluate
    benchmarks: dict[str, list[Question]] = {}
    for benchmark, qid, gold, kind, _ in ROWS[:6]:
        questions = benchmarks.setdefault(benchmark, [])
        if all(q.id != qid for q in questions):
            choices = ["a", "b", "c", "d"] if kind == "multiple_choice" else None
            questions.append(
                Question(
                    id=qid,
                    source=benchmark,
                    split="test",
                    problem=f"{qid} asks",
                    answer=gold,
                    answer_kind=kind,
                    choices=choices,
                )
            )
    assert set(benchmarks) <= config.benchmark_names()
    policies = [BASE_POLICY, *config.runs.policies()]
    sampling = SamplingParams(n=settings.n, temperature=settings.temperature)
    with make_grade_fn(workers=1, grader=config.common.grading.grader) as grade:
        result = evaluate(RowsBackend(), benchmarks, sampling, grade, ks=settings.ks,
                          grader=config.common.grading.grader)  # fmt: skip
    parity_columns = [column for g in GRADERS for column in verdict_columns(g)]
    older = result.responses.drop(columns=parity_columns)
    for policy in policies:
        path = tmp_path / evaluate_outputs(policy)["responses"]
        path.parent.mkdir(parents=True, exist_ok=True)
        (older if policy == policies[-1] else result.responses).to_parquet(path, index=False)
    text = grader_parity_section(config, tmp_path, policies)
    assert text.startswith("## Grader parity (pass@k above: `common.grading.grader: tagrpo`)")
    assert f"Not graded by every grader (evaluated before grader parity): `{policies[-1]}`" in text
    for policy in policies[:-1]:
        assert f"| `{policy}` | math_reward | 4 | 25.0 | 50.0 (k=2) | 0 | 2 |" in text
        assert f"| `{policy}` | option letters (every grader) | 2 | 50.0 | 100.0 (k=2) |" in text
    assert f"`{policies[-1]}` | tagrpo" not in text
    assert "Examples withheld: its authors ask" in text.split("### gpqa_diamond")[1]
    assert "mini world" not in text.split("### math500")[1]  # real MATH: no must-agree line


def test_grade_command_takes_the_grader_and_parity_refuses_other_inputs(tmp_path, capsys) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text(
        '{"id": 1, "response": "So \\\\boxed{5.}", "answer": "5"}\n'
        '{"id": 2, "response": "The answer is (B).", "answer": "B", '
        '"answer_kind": "multiple_choice"}\n'
    )
    verdicts = {}
    for grader in ("tagrpo", "math_reward"):
        out = tmp_path / f"{grader}.jsonl"
        argv = ["grade", "--input", str(lines), "--output", str(out), "--grader", grader]
        assert cli_main([*argv, "--workers", "1"]) == 0
        verdicts[grader] = out.read_text().splitlines()
    assert verdicts["tagrpo"][0] == '{"id": 1, "correct": true, "pred": "5.", "reason": "exact"}'
    assert verdicts["math_reward"][0] == (
        '{"id": 1, "correct": false, "pred": "5.", "reason": "mismatch"}'
    )
    assert verdicts["tagrpo"][1] == verdicts["math_reward"][1]  # letters under every grader
    capsys.readouterr()
    argv = ["grade", "--parity", "--input", str(lines), "--output", str(tmp_path / "p.md")]
    assert cli_main(argv) == 2
    assert capsys.readouterr().err == (
        f"tagrpo grade --parity: {lines}: give a responses .parquet or a sample-store folder\n"
    )
    assert not (tmp_path / "p.md").exists()
