"""Layer 3: the answer-consistency rule, its exact test, and the solvers (scripted, endpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai_fake_server import FakeOpenAIServer, last_user_message
from scripted_solver import ScriptedSolver

from tagrpo.config.params import embedded
from tagrpo.equivalence.consistency import (
    ConsistencyConfig,
    EndpointSolver,
    SolveStats,
    consistency_verdict,
    fisher_one_sided,
    solve_and_grade,
)
from tagrpo.grading.grade_fn import make_grade_fn
from tagrpo.grading.types import SolveItem
from tagrpo.rephrase.cache import ReplyCache
from tagrpo.rephrase.openai_backend import EndpointConfig


@pytest.fixture(scope="module")
def grade():
    with make_grade_fn(workers=1, item_timeout_s=5.0) as grade_fn:
        yield grade_fn


def test_fisher_one_sided_exact_values() -> None:
    assert fisher_one_sided(4, 8, 0, 8) == pytest.approx(70 / 1820)  # C(8,4) / C(16,4)
    assert fisher_one_sided(3, 8, 0, 8) == pytest.approx(56 / 560)
    assert fisher_one_sided(8, 8, 1, 8) == pytest.approx(8 / 11440)
    assert fisher_one_sided(0, 8, 0, 8) == 1.0
    assert fisher_one_sided(2, 8, 5, 8) > 0.9  # the rephrasing is easier: no evidence
    assert fisher_one_sided(5, 10, 0, 4) == pytest.approx(1 * 252 / 2002)  # unequal totals
    with pytest.raises(ValueError, match="exceed"):
        fisher_one_sided(9, 8, 0, 8)


def _stats(correct: int, k: int = 8) -> SolveStats:
    return SolveStats(correct, ("7",) * correct + ("5",) * (k - correct))


@pytest.mark.parametrize(
    ("original", "rephrasing", "accepted", "reason"),
    [
        (8, 1, True, "gold_reached"),
        (0, 3, True, "gold_reached"),  # easier than the original: fine
        (0, 0, True, "solver_unsolved"),
        (4, 0, False, "answer_inconsistent"),  # p = 0.038
        (3, 0, True, "low_power"),  # p = 0.1
        (8, 0, False, "answer_inconsistent"),
    ],
)
def test_consistency_rule(original: int, rephrasing: int, accepted: bool, reason: str) -> None:
    verdict = consistency_verdict(_stats(original), _stats(rephrasing), embedded(ConsistencyConfig))
    assert (verdict.accepted, verdict.reason) == (accepted, reason)


def test_rule_settings_change_the_verdicts() -> None:
    strict = embedded(ConsistencyConfig, min_correct=2, on_unverifiable="reject")
    assert consistency_verdict(_stats(8), _stats(1), strict).reason == "answer_inconsistent"
    assert consistency_verdict(_stats(0), _stats(1), strict).accepted is False  # unsolved
    assert consistency_verdict(None, _stats(3), strict).reason == "solver_failed"
    lenient = embedded(ConsistencyConfig, alpha=0.01)
    assert consistency_verdict(_stats(4), _stats(0), lenient).reason == "low_power"
    assert _stats(3).mode() == ("5", 5 / 8)
    for bad in ({"k": 0}, {"min_correct": 9}, {"alpha": 1.0}, {"on_unverifiable": "maybe"}):
        with pytest.raises(ValueError):
            embedded(ConsistencyConfig, **bad)


def test_solve_and_grade_counts_graded_answers(grade) -> None:
    answers = {"What is 3 + 4?": "7", "Add 4 to 3.": "8", "Pick: (A) 6 (B) 7": "B"}
    solver = ScriptedSolver(answers.get)
    items = [
        SolveItem("What is 3 + 4?", "7"),
        SolveItem("Add 4 to 3.", "7"),
        SolveItem("Unknown to the solver", "7"),
        SolveItem("Pick: (A) 6 (B) 7", "B", "multiple_choice", ("6", "7")),
    ]
    stats = solve_and_grade(solver, items, 4, grade)
    assert stats == [
        SolveStats(4, ("7",) * 4),
        SolveStats(0, ("8",) * 4),
        None,
        SolveStats(4, ("B",) * 4),
    ]


def test_endpoint_solver_samples_k_choices_and_caches(grade, tmp_path: Path) -> None:
    def reply(body: dict) -> list[str]:
        text = last_user_message(body)
        answer = "7" if "3 + 4" in text else "9"
        return [f"Thinking... \\boxed{{{answer}}}"] * int(body.get("n", 1))

    config = embedded(ConsistencyConfig, k=5)
    with FakeOpenAIServer(reply=reply) as server, ReplyCache(tmp_path / "c.sqlite") as cache:
        endpoint = embedded(
            EndpointConfig, model="solver", base_url=server.base_url, api_key_env=None
        )
        solver = EndpointSolver(endpoint, config, cache=cache)
        items = [SolveItem("What is 3 + 4?", "7"), SolveItem("Add 4 to 3.", "7")]
        stats = solve_and_grade(solver, items, config.k, grade)
        assert stats == [SolveStats(5, ("7",) * 5), SolveStats(0, ("9",) * 5)]
        assert server.received == 2 and server.requests[0].body["n"] == 5
        # The solver sees the training prompt: the question and the Box 2 instruction.
        assert last_user_message(server.requests[0].body).endswith("in the box: \\boxed{}.")
        again = EndpointSolver(endpoint, config, cache=cache)
        assert solve_and_grade(again, items, config.k, grade) == stats
        assert server.received == 2  # answered from the cache
