"""Evaluation runner and phrasing probe with a scripted backend and a substring grader.

The backend answers question i correctly in a known number of its n samples, so every pass@k
and group average below is an exact hand computation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest

from tagrpo.backends.base import Completion, Messages, SamplingParams
from tagrpo.data.schema import Question
from tagrpo.evaluation.phrasing import PhrasedQuestion, phrasing_summary, sample_phrasings
from tagrpo.evaluation.runner import evaluate, passk_tables


class ScriptedBackend:
    """Answers correctly in ``correct_by_text[problem]`` of the first samples, then wrongly."""

    def __init__(self, correct_by_text: dict[str, int], answers: dict[str, str]) -> None:
        self.correct_by_text = correct_by_text
        self.answers = answers
        self.calls: list[int] = []

    def prompt_text(self, messages: Messages) -> str:
        return messages[-1]["content"]

    def _problem(self, messages: Messages) -> str:
        content = messages[-1]["content"]
        return next(text for text in self.correct_by_text if content.startswith(text))

    def generate(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> list[list[Completion]]:
        self.calls.append(len(conversations))
        out = []
        for messages in conversations:
            problem = self._problem(messages)
            good = self.correct_by_text[problem]
            gold = self.answers[problem]
            out.append(
                [
                    Completion(
                        text=f"\\boxed{{{gold if i < good else 'x'}}}",
                        num_tokens=5,
                        finished=i % 2 == 0,
                    )
                    for i in range(sampling.n)
                ]
            )
        return out


def substring_grade(
    responses: Sequence[str], answers: Sequence[str], kinds: Sequence[str]
) -> list[tuple[bool, str, str]]:
    verdicts = []
    for response, answer in zip(responses, answers, strict=True):
        pred = response[len("\\boxed{") : -1]
        verdicts.append((pred == answer, pred, "equal" if pred == answer else "different"))
    return verdicts


def _question(qid: str, problem: str, answer: str) -> Question:
    return Question(id=qid, source="t", split="test", problem=problem, answer=answer)


@pytest.fixture
def two_benchmarks() -> tuple[ScriptedBackend, dict[str, list[Question]]]:
    # bench_a: 4 correct of 4, 0 of 4; bench_b: 2 of 4.
    correct = {"Alpha problem": 4, "Beta problem": 0, "Gamma problem": 2}
    answers = {"Alpha problem": "1", "Beta problem": "2", "Gamma problem": "3"}
    benchmarks = {
        "bench_a": [_question("a1", "Alpha problem", "1"), _question("a2", "Beta problem", "2")],
        "bench_b": [_question("b1", "Gamma problem", "3")],
    }
    return ScriptedBackend(correct, answers), benchmarks


def test_evaluate_exact_passk_and_group_average(two_benchmarks) -> None:
    backend, benchmarks = two_benchmarks
    result = evaluate(
        backend,
        benchmarks,
        SamplingParams(n=4, seed=1),
        substring_grade,
        ks=(1, 2, 4, 8),  # 8 > n is dropped, not an error
        groups={"both": ["bench_a", "bench_b"]},
        n_resamples=50,
    )
    summary = result.summary
    assert summary["bench_a/pass@1"] == pytest.approx(0.5)  # (4/4 + 0/4) / 2
    assert summary["bench_b/pass@1"] == pytest.approx(0.5)
    # pass@2 with n=4, c=2: 1 - C(2,2)/C(4,2) = 5/6
    assert summary["bench_b/pass@2"] == pytest.approx(1 - 1 / math.comb(4, 2))
    assert summary["bench_b/pass@4"] == pytest.approx(1.0)
    assert summary["both/pass@2"] == pytest.approx((0.5 + 5 / 6) / 2)
    assert "bench_a/pass@8" not in summary
    assert summary["responses"] == 12.0
    assert summary["truncated_rate"] == pytest.approx(0.5)
    assert backend.calls == [2, 1]  # one batched call per benchmark
    assert len(result.responses) == 12
    assert result.responses["correct"].sum() == 6
    assert set(result.passk["kind"]) == {"benchmark", "group"}


def test_evaluate_refuses_when_no_k_fits(two_benchmarks) -> None:
    backend, benchmarks = two_benchmarks
    with pytest.raises(ValueError, match="no k"):
        evaluate(backend, benchmarks, SamplingParams(n=2), substring_grade, ks=(4, 8))


def test_group_average_skips_k_missing_for_a_member() -> None:
    graded = pd.DataFrame(
        {
            "benchmark": ["a"] * 4 + ["b"] * 2,
            "question_id": ["q1"] * 4 + ["q2"] * 2,
            "correct": [True, False, False, False, True, True],
        }
    )
    # b has n=2 samples: pass@4 is undefined for it, so the group has no pass@4 row.
    table, summary = passk_tables(graded, [1, 2], {"g": ["a", "b"]}, n_resamples=10)
    assert summary["g/pass@1"] == pytest.approx((0.25 + 1.0) / 2)
    assert summary["g/pass@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert table[(table["kind"] == "group")]["k"].tolist() == [1, 2]


def test_phrasing_probe_group_rates_and_spread() -> None:
    # q1: original "P1 expr" 8/8 correct, neighbour "P1 words" 0/8 -> original all-correct,
    # neighbours all-wrong, joint mixed. q2: original "P2 expr" 4/8 -> mixed everywhere.
    correct = {"P1 expr": 8, "P1 words": 0, "P2 expr": 4, "P2 words": 8}
    answers = dict.fromkeys(correct, "7")
    backend = ScriptedBackend(correct, answers)
    questions = [
        PhrasedQuestion("q1", "7", "math", {"expr": "P1 expr", "words": "P1 words"}, "expr"),
        PhrasedQuestion("q2", "7", "math", {"expr": "P2 expr", "words": "P2 words"}, "expr"),
    ]
    samples = sample_phrasings(backend, questions, SamplingParams(n=8), substring_grade)
    assert len(samples) == 32
    summary, by_phrasing = phrasing_summary(samples)
    assert summary["questions"] == 2.0
    assert summary["success_original"] == pytest.approx(12 / 16)
    assert summary["success/expr"] == pytest.approx(12 / 16)
    assert summary["success/words"] == pytest.approx(8 / 16)
    assert summary["phrasing_spread"] == pytest.approx(0.25)
    assert summary["original/all_correct_rate"] == pytest.approx(0.5)
    assert summary["original/mixed_rate"] == pytest.approx(0.5)
    assert summary["neighbours/all_wrong_rate"] == pytest.approx(0.5)
    assert summary["neighbours/all_correct_rate"] == pytest.approx(0.5)
    assert summary["joint/mixed_rate"] == pytest.approx(1.0)
    assert summary["joint/zero_gradient_rate"] == pytest.approx(0.0)
    assert set(by_phrasing["phrasing"]) == {"expr", "words"}


@pytest.mark.parametrize(
    ("trained", "n_trained", "expected"),
    [(True, 32, 32), (False, 32, 64), (True, None, 64), (True, 128, 64)],
)
def test_a_trained_policy_takes_n_trained_samples_and_the_base_n(
    monkeypatch, two_benchmarks, trained, n_trained, expected
) -> None:
    """world-v3.md, amendment 2: the trained policies may be evaluated with fewer samples per
    problem; the base keeps evaluate.n (V3 and the edges are judged on it)."""
    import contextlib

    from tagrpo.config.params import load_config
    from tagrpo.evaluation import runner

    backend, benchmarks = two_benchmarks
    config = load_config()
    config = config.model_copy(
        update={
            "evaluate": config.evaluate.model_copy(
                update={"n": 64, "n_trained": n_trained, "groups": {}}
            )
        }
    )
    monkeypatch.setattr(runner, "load_benchmarks", lambda *a, **k: benchmarks)
    monkeypatch.setattr(runner, "make_stored_backend", lambda *a, **k: backend)
    monkeypatch.setattr(
        runner, "grade_fn_for", lambda *a, **k: contextlib.nullcontext(substring_grade)
    )
    result = runner.evaluate_policy(config, Path("m"), Path("b"), trained=trained)
    assert set(result.responses.groupby("question_id").size()) == {expected}
