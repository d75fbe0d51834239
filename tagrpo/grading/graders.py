"""The graders ``common.grading.grader`` chooses from, and the answer kinds that carry them.

- ``tagrpo``: this project's grader (:mod:`tagrpo.grading.verify`).
- ``math_reward``: verl's ``verl.utils.reward_score.math_reward.compute_score``, the
  Hendrycks-style boxed-string comparison the TA-GRPO authors trained and tested with.
- ``math_verify``: math-verify as verl's ``verl.utils.reward_score.math_verify`` calls it: the
  gold wrapped in ``\\boxed{}`` and parsed as LaTeX, the whole response parsed as expressions and
  LaTeX (``_verify_in_subprocess``, the function verl runs in its own process pool; here the
  grading worker is that process, under the pool's CPU budget instead of verl's 30 s wall clock).

Both verl graders are the installed verl's own files, loaded by path: importing them as
``verl.utils.reward_score.*`` runs ``verl/__init__.py``, which imports torch (seconds and
hundreds of megabytes per grading worker, beyond the workers' address-space limit) and
nothing these two files use. Neither file imports anything from verl.

Multiple choice: option letters under every grader. verl's two functions compare math
answers (a box's string, a parsed expression); a letter committed in prose ("the answer is
(B)") has neither, so they would grade most correct letters wrong and sink a benchmark below
its chance floor, which no grader of the authors' was ever asked to do (their evaluation has
no multiple-choice path). So ``multiple_choice`` items always take the letter rule, and only
math answers differ by grader (:func:`applicable_graders`).

A grader runs in a grading worker as an extra answer kind (``math@math_reward``), so it gets
the project's CPU budget and watchdog: a hang is ``timeout``, an exception ``error``, never a
silent 0 (:mod:`tagrpo.grading.worker`). verl's functions catch their own exceptions and
return 0, as they do in verl; the verdict then says ``error`` where that can be seen
(math_reward prints what it caught); math-verify's own timeouts (5 s alarms inside ``parse`` and
``verify``, which it turns into "no answer") are reported as ``timeout`` here.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import logging
from functools import cache
from pathlib import Path
from types import ModuleType

from tagrpo.grading.extract import last_boxed
from tagrpo.grading.kinds import GRADERS, Grader

_SEPARATOR = "@"
_VERL_FILES = {
    "math_reward": "utils/reward_score/math_reward.py",
    "math_verify": "utils/reward_score/math_verify.py",
}


@cache
def verl_module(grader: str) -> ModuleType:
    """verl's ``utils/reward_score/<grader>.py`` from the installed verl, loaded as a file."""
    spec = importlib.util.find_spec("verl")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"common.grading.grader={grader} needs verl installed (pip install verl==0.9.1)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _VERL_FILES[grader]
    if not path.is_file():
        raise FileNotFoundError(f"common.grading.grader={grader}: verl has no {path}")
    module_spec = importlib.util.spec_from_file_location(f"_tagrpo_verl_{grader}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def verl_version() -> str:
    """The installed verl's version ("" when verl is not installed)."""
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return ""


def applicable_graders(answer_kind: str) -> tuple[Grader, ...]:
    """The graders whose verdicts can differ on this answer kind (the module docstring)."""
    return GRADERS if answer_kind == "math" else ("tagrpo",)


def _checked_grader(grader: str) -> str:
    if grader not in GRADERS:
        raise ValueError(f"common.grading.grader must be one of {list(GRADERS)}, got {grader!r}")
    return grader


def grader_kind(answer_kind: str, grader: str) -> str:
    """The answer kind a grading worker grades ``answer_kind`` under ``grader`` as: the kind
    itself for this project's grader, multiple choice and a kind that already names a grader;
    ``math@<grader>`` for verl's."""
    if _checked_grader(grader) == "tagrpo" or answer_kind != "math":
        return answer_kind
    return f"{answer_kind}{_SEPARATOR}{grader}"


def parity_kind(answer_kind: str, grader: str) -> str:
    """Like :func:`grader_kind`, but naming every grader of a math answer (``math@tagrpo``
    too), so that a grading function set to another grader still grades it by this one."""
    if answer_kind != "math":
        return answer_kind
    return f"{answer_kind}{_SEPARATOR}{_checked_grader(grader)}"


def verl_box(response: str) -> str | None:
    """The last box's content as verl's math_reward extracts it (None: no box)."""
    module = verl_module("math_reward")
    try:
        box = module.last_boxed_only_string(response)
        return None if box is None else str(module.remove_boxed(box))
    except (AssertionError, IndexError):  # remove_boxed asserts its input's shape
        return None


def grade_tagrpo(response: str, gold: str) -> tuple[bool, str, str]:
    """This project's grader on a math answer (the kind ``math@tagrpo``)."""
    from tagrpo.grading import verify  # the config imports this module: no grader until used

    result = verify.grade_response(response, gold, "math")
    return result.correct, result.pred, result.reason


def grade_math_reward(response: str, gold: str) -> tuple[bool, str, str]:
    """verl's math_reward.compute_score: correct, the box it read, and why (``error`` when
    compute_score caught an exception of its own: it prints it and returns 0)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        score = float(verl_module("math_reward").compute_score(response, gold))
    box = verl_box(response)
    if score == 1.0:
        return True, box or "", "math_reward"
    if printed.getvalue():
        return False, box or "", "error"
    return False, box or "", "no_answer" if box is None else "mismatch"


class _TimeoutRecords(logging.Handler):
    """Counts math-verify's "Timeout during ..." warnings (its alarms fired)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Timeout during"):
            self.count += 1


def grade_math_verify(response: str, gold: str) -> tuple[bool, str, str]:
    """math-verify as verl calls it: correct, the last box's content (math-verify reads the
    whole response; the box is shown as its likely answer), and why."""
    module = verl_module("math_verify")
    logger = logging.getLogger("math_verify")
    handler, level = _TimeoutRecords(), logger.level
    # The project's grader quiets math-verify to errors; its timeout warnings are read here.
    logger.setLevel(logging.WARNING)
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        score = float(module._verify_in_subprocess("\\boxed{" + gold + "}", response))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    box = last_boxed(response)
    if handler.count:
        return False, box or "", "timeout"
    return (True, box or "", "math_verify") if score == 1.0 else (False, box or "", "mismatch")


# The extra answer kinds a grading pool gets (module-level functions: they travel by pickle).
GRADER_KINDS = {
    parity_kind("math", "tagrpo"): grade_tagrpo,
    grader_kind("math", "math_reward"): grade_math_reward,
    grader_kind("math", "math_verify"): grade_math_verify,
}


__all__ = [
    "GRADERS",
    "GRADER_KINDS",
    "Grader",
    "applicable_graders",
    "grade_math_reward",
    "grade_math_verify",
    "grade_tagrpo",
    "grader_kind",
    "parity_kind",
    "verl_box",
    "verl_module",
    "verl_version",
]
