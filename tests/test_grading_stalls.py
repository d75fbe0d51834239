"""Bounded work: hostile responses that stalled the grader return fast, extraction is linear,
and the parent process never does grading work (it only schedules and kills).

Bounds are CPU seconds of this process where possible (a busy machine does not inflate them)
and generous: the stalls they guard against took minutes.
"""

import time

import pytest
from grading_hooks import TEST_HANG_KIND, TEST_KINDS

from tagrpo.grading import extract, normalize, verify
from tagrpo.grading.extract import (
    MAX_SCANNED_CHARS,
    brace_pairs,
    extract_choice,
    last_boxed,
    scanned_window,
)
from tagrpo.grading.normalize import normalize_answer
from tagrpo.grading.pool import GradingPool
from tagrpo.grading.types import GradeItem
from tagrpo.grading.verify import MAX_ANSWER_CHARS, GradeResult, grade_response

KB = 1000
HOSTILE = {
    # name: (response, gold, answer_kind, expected result)
    "40 KB of unclosed boxes": ("\\boxed{" * (40 * KB // 7), "3", "math",
                                GradeResult(False, "", "no_answer")),
    "100 KB of unclosed boxes": ("x \\boxed{" * (100 * KB // 9), "3", "math",
                                 GradeResult(False, "", "no_answer")),
    "answer + 2,000 newlines": ("The answer" + "\n" * 2000, "B", "multiple_choice",
                                GradeResult(False, "", "no_answer")),
    "answer + 100 KB of spaces": ("The answer" + " " * 100 * KB, "B", "multiple_choice",
                                  GradeResult(False, "", "no_answer")),
    "100 KB of stars": ("**Answer" + "*" * 100 * KB + ":", "B", "multiple_choice",
                        GradeResult(False, "", "no_answer")),
    "stars and spaces": ("Answer" + "* " * 50 * KB + "(B)", "B", "multiple_choice",
                         GradeResult(False, "", "no_answer")),
    "100 KB box of braces": ("\\boxed{" + "{" * 50 * KB + "}" * 50 * KB + "}", "3", "math",
                             GradeResult(False, "{" * 50 * KB + "}" * 50 * KB, "no_answer")),
    "nested boxes": ("\\boxed{" * 10 * KB + "1" + "}" * 10 * KB, "1", "math",
                     GradeResult(True, "\\boxed{" * (10 * KB - 1) + "1" + "}" * (10 * KB - 1),
                                 "exact")),
    "box of dots": ("\\boxed{3" + "." * 100 * KB + "}", "3", "math",
                    GradeResult(True, "3" + "." * 100 * KB, "exact")),
    "many letter boxes": ("\\boxed{A} " * 10 * KB, "A", "multiple_choice",
                          GradeResult(True, "A", "exact")),
    "text of spaces": ("\\boxed{3 \\text{" + " " * 100 * KB + "}}", "3", "math",
                       GradeResult(True, "3 \\text{" + " " * 100 * KB + "}", "exact")),
}  # fmt: skip


def cpu_seconds(function, *args):
    began = time.process_time()
    result = function(*args)
    return result, time.process_time() - began


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_response_is_graded_quickly_in_process(name):
    response, gold, kind, expected = HOSTILE[name]
    result, spent = cpu_seconds(grade_response, response, gold, kind)
    assert result == expected
    assert spent < 2.0  # these took from 4 s to "never" (over 400 s) before


def test_box_scanning_is_linear():
    # Quadratic scanning took 227 s on 40 KB of unclosed boxes; 10x the input is 100x the
    # work for a quadratic scan and 10x for a linear one.
    small, small_cpu = cpu_seconds(last_boxed, "\\boxed{" * 2_000)
    large, large_cpu = cpu_seconds(last_boxed, "\\boxed{" * 20_000)
    assert small is None and large is None
    assert large_cpu < 1.0
    assert large_cpu < 30 * max(small_cpu, 0.002)


def test_brace_pairs_skip_escapes_and_unbalanced_braces():
    text = "{a\\{b}c} } {x"
    assert brace_pairs(text) == {0: 5}  # "\\{" is escaped; the later "}" have no partner
    assert brace_pairs("\\boxed{\\frac{1}{2}}") == {6: 18, 12: 14, 15: 17}


def test_last_box_is_found_past_unclosed_ones():
    assert last_boxed("\\boxed{" * 1000 + " final \\boxed{42}") == "42"
    assert last_boxed("\\boxed{1} \\boxed{" * 1000) == "1"


def test_only_the_last_window_of_a_response_is_scanned():
    early = "\\boxed{7} " + "x" * MAX_SCANNED_CHARS
    assert last_boxed(early) is None
    assert extract_choice("Answer: B " + "x" * MAX_SCANNED_CHARS) is None
    late = "x" * MAX_SCANNED_CHARS + " \\boxed{7}"
    assert last_boxed(late) == "7"
    assert scanned_window("abc") == "abc"
    assert len(scanned_window(late)) == MAX_SCANNED_CHARS


def test_choice_patterns_match_as_before_on_ordinary_text():
    assert extract_choice("**Answer:**   (C)\n\n") == "C"
    assert extract_choice("The answer is \n\n (b).") == "B"
    assert extract_choice("The correct answer is option A because ...") == "A"
    assert extract_choice("answer" + " " * 5000 + "D") == "D"


def test_normalisation_is_linear_on_long_answers():
    nested = "{" * 50 * KB + "3" + "}" * 50 * KB
    result, spent = cpu_seconds(normalize_answer, nested)
    assert result == "3"
    assert spent < 2.0
    dots, spent = cpu_seconds(normalize_answer, "3" + ". " * 50 * KB)
    assert dots == "3"
    assert spent < 2.0


def test_long_answers_are_compared_as_strings_only(monkeypatch):
    def parser_must_not_run(*args, **kwargs):
        raise AssertionError("the LaTeX parser ran on an over-long answer")

    monkeypatch.setattr(verify, "_math_verify", parser_must_not_run)
    long_sum = " + ".join(["x"] * MAX_ANSWER_CHARS)
    assert grade_response(f"\\boxed{{{long_sum}}}", "x") == GradeResult(False, long_sum, "mismatch")
    assert grade_response(f"\\boxed{{{long_sum}}}", long_sum).correct is True


@pytest.fixture
def parent_cannot_grade(monkeypatch):
    """Every extraction and grading entry point raises when called in this (the parent)
    process; the workers are forked from the forkserver, which never sees the patches."""

    def forbidden(*args, **kwargs):
        raise AssertionError("grading work in the parent process")

    for module, names in (
        (verify, ("extract_answer", "extract_pred", "grade_answer", "grade_response",
                  "equivalent", "last_boxed", "extract_choice")),
        (extract, ("last_boxed", "extract_choice", "iter_boxed", "brace_pairs")),
        (normalize, ("normalize_full", "normalize_answer")),
    ):  # fmt: skip
        for name in names:
            monkeypatch.setattr(module, name, forbidden)


def test_pool_grades_hostile_responses_within_the_limit_without_parent_work(parent_cannot_grade):
    items = [GradeItem(response, gold, kind) for response, gold, kind, _ in HOSTILE.values()]
    limit, grace = 2.0, 1.0
    with GradingPool(workers=1, item_timeout_s=limit, kill_grace_s=grace) as pool:
        for item, (_, _, _, expected) in zip(items, HOSTILE.values(), strict=True):
            began = time.monotonic()
            assert pool.grade([item]) == [expected]
            assert time.monotonic() - began < 3 * (limit + grace)  # generous: shared machine
        assert pool.restarts == 0
        assert all(cpu < limit for _, cpu in pool.last_timings)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killed_item_reports_an_empty_pred_without_parent_work(parent_cannot_grade):
    items = [
        GradeItem("\\boxed{1}", "1"),
        GradeItem("a hang in C code after \\boxed{5}", "", TEST_HANG_KIND),
        GradeItem("\\boxed{2}", "2"),
    ]
    with GradingPool(
        workers=1, item_timeout_s=0.5, kill_grace_s=0.5, chunk_size=3, extra_kinds=TEST_KINDS
    ) as pool:
        results = pool.grade(items)
        assert pool.restarts == 1
    assert results == [
        GradeResult(True, "1", "exact"),
        GradeResult(False, "", "timeout"),
        GradeResult(True, "2", "exact"),
    ]
