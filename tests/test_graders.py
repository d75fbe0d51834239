"""The three graders of ``common.grading.grader`` on hidden-case style answers, directly and in
the grading pool's workers (where training and evaluation call them), with a hang and a raise
bounded as the project's own grader is."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tagrpo.grading import graders
from tagrpo.grading.grade_fn import make_grade_fn
from tagrpo.grading.pool import GradingPool
from tagrpo.grading.types import GradeItem
from tagrpo.grading.verify import grade_response
from tagrpo.plumbing.paths import project_root


def boxed(answer: str) -> str:
    return f"Some reasoning first. Therefore the answer is $\\boxed{{{answer}}}$."


# (response, gold, tagrpo, math_reward, math_verify): the verdicts the real functions give
# (verl 0.9.1, math-verify 0.9.0); each difference below is one a reader of Table 1 meets.
CASES = [
    (boxed("\\frac12"), "0.5", True, True, True),  # math_reward maps "0.5" to \frac{1}{2}
    (boxed("0.5"), "\\frac{1}{2}", True, True, True),
    (boxed("\\dfrac{1}{2}"), "\\frac{1}{2}", True, True, True),
    (boxed("\\displaystyle\\frac{1}{2}"), "\\frac{1}{2}", True, False, True),
    (boxed("x=3"), "3", True, True, True),
    (boxed("x = 3"), "y = 3", False, True, False),  # math_reward drops a short left side
    (boxed("5\\text{ cm}"), "5", True, True, True),  # "\text{ " units: removed by all
    (boxed("5 cm"), "5", True, False, True),
    (boxed("5 \\mbox{ inches}"), "5", True, False, True),
    (boxed("50\\%"), "50", True, True, False),  # math-verify keeps the percent (0.5)
    (boxed("007"), "7", True, False, True),
    (boxed("5."), "5", True, False, False),
    (boxed("1,000"), "1000", True, False, True),
    (boxed("2\\sqrt{2}"), "\\sqrt{8}", True, False, True),
    (boxed("x = \\text{Bob}"), "x = \\text{Evelyn}", False, False, True),
    (boxed("52_{10}"), "52_8", False, False, True),
    (boxed("8"), "7", False, False, False),
    ("The answer is 42.", "42", False, False, True),  # math-verify reads unboxed numbers
    ("So \\boxed 5$ it is.", "5", False, True, True),  # verl's "\boxed " form
]
IDS = [f"{gold}:{response[-24:]}" for response, gold, *_ in CASES]


@pytest.mark.parametrize(("response", "gold", "ours", "reward", "verified"), CASES, ids=IDS)
def test_each_grader_gives_its_known_verdict(response, gold, ours, reward, verified) -> None:
    assert grade_response(response, gold).correct is ours
    assert graders.grade_tagrpo(response, gold)[0] is ours
    correct, pred, reason = graders.grade_math_reward(response, gold)
    assert correct is reward
    assert reason == ("math_reward" if reward else "mismatch" if pred else "no_answer")
    correct, _, reason = graders.grade_math_verify(response, gold)
    assert correct is verified
    assert reason == ("math_verify" if verified else "mismatch")


def test_an_exception_math_reward_catches_is_an_error() -> None:
    """verl's remove_boxed asserts a "\\boxed{" prefix: an \\fbox answer raises inside
    compute_score, which prints it and returns 0; the verdict says ``error``."""
    assert graders.grade_math_reward("So \\fbox{5}.", "5") == (False, "", "error")
    assert grade_response("So \\fbox{5}.", "5").correct


def test_the_workers_give_the_same_verdicts_under_each_setting() -> None:
    """The grading function of training and evaluation, one pool per setting: its verdicts are
    the functions' own, and multiple choice takes the letter rule under every grader."""
    responses = [response for response, *_ in CASES] + ["The answer is (B)."]
    golds = [gold for _, gold, *_ in CASES] + ["B"]
    kinds = ["math"] * len(CASES) + ["multiple_choice"]
    for column, grader in enumerate(graders.GRADERS, start=2):
        with make_grade_fn(workers=1, grader=grader) as grade:
            verdicts = grade(responses, golds, kinds)
        assert [v[0] for v in verdicts] == [case[column] for case in CASES] + [True], grader
        assert verdicts[-1] == (True, "B", "exact")


def test_grader_kinds() -> None:
    assert graders.grader_kind("math", "tagrpo") == "math"
    assert graders.grader_kind("math", "math_reward") == "math@math_reward"
    assert graders.grader_kind("multiple_choice", "math_verify") == "multiple_choice"
    assert graders.grader_kind("math@math_verify", "math_reward") == "math@math_verify"
    assert graders.parity_kind("math", "tagrpo") == "math@tagrpo"
    assert graders.parity_kind("multiple_choice", "math_reward") == "multiple_choice"
    assert graders.applicable_graders("multiple_choice") == ("tagrpo",)
    assert graders.applicable_graders("math") == ("tagrpo", "math_reward", "math_verify")
    with pytest.raises(ValueError, match=r"common.grading.grader must be one of"):
        graders.grader_kind("math", "hendrycks")


def test_verl_files_load_without_verl_or_torch() -> None:
    """verl's own files, from the installed verl, without its package (torch) in the worker."""
    code = (
        "import sys; from tagrpo.grading import graders; "
        "paths = [graders.verl_module(g).__file__ for g in ('math_reward', 'math_verify')]; "
        "print(paths[0]); print(paths[1]); print('torch' in sys.modules, 'verl' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=project_root(), timeout=120,
    ).stdout.splitlines()  # fmt: skip
    import verl

    installed = Path(verl.__file__).parent / "utils" / "reward_score"
    assert out == [
        str(installed / "math_reward.py"),
        str(installed / "math_verify.py"),
        "False False",
    ]
    assert graders.verl_version() == "0.9.1"


def raising(response: str, answer: str) -> tuple[bool, str, str]:
    raise RuntimeError("a grader bug")


def spinning(response: str, answer: str) -> tuple[bool, str, str]:
    while True:
        pass


def test_a_grader_that_raises_or_hangs_is_an_error_or_a_timeout() -> None:
    """A grader kind's failure is bounded by the pool: ``error`` or ``timeout``, never a plain
    0 (the parity table counts both as errors)."""
    kinds = {"math@math_reward": raising, "math@math_verify": spinning}
    with GradingPool(workers=1, item_timeout_s=0.5, extra_kinds=kinds, warm_up=False) as pool:
        results = pool.grade(
            [
                GradeItem(boxed("3"), "3", "math@math_reward"),
                GradeItem(boxed("3"), "3", "math@math_verify"),
                GradeItem(boxed("3"), "3", "math@tagrpo"),
            ]
        )
    assert [(r.correct, r.reason) for r in results] == [
        (False, "error"),
        (False, "timeout"),
        (True, "exact"),
    ]


def test_a_math_verify_timeout_is_a_timeout(monkeypatch) -> None:
    """math-verify turns its own 5 s alarms into "no answer" and logs a warning (as it does
    in verl); the verdict says ``timeout``, and the logger is left as it was."""
    module = graders.verl_module("math_verify")

    def timed_out(gold: str, response: str) -> float:
        logging.getLogger("math_verify.parser").warning("Timeout during parsing: %s", response)
        return 0.0

    monkeypatch.setattr(module, "_verify_in_subprocess", timed_out)
    logger = logging.getLogger("math_verify")
    level, handlers = logger.level, list(logger.handlers)
    assert graders.grade_math_verify(boxed("3"), "3") == (False, "3", "timeout")
    assert (logger.level, logger.handlers) == (level, handlers)
    monkeypatch.setattr(module, "_verify_in_subprocess", lambda gold, response: 0.0)
    assert graders.grade_math_verify(boxed("3"), "3") == (False, "3", "mismatch")
