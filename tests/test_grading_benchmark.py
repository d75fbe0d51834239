"""The grading benchmark runs end to end on a tiny subset of the real pairs."""

from pathlib import Path

import pytest

from benchmarks import grading_throughput as benchmark
from tagrpo.plumbing.paths import shared_data_dir

pytestmark = pytest.mark.shared_data


@pytest.fixture(scope="module")
def data_dir() -> Path:
    directory = shared_data_dir()
    if not directory.is_dir():
        pytest.skip(f"shared benchmark data not found at {directory} (set TAGRPO_DATA_DIR)")
    return directory


def test_pairs_are_real_and_labelled(data_dir):
    positives = benchmark.load_positives(data_dir, per_source=3)
    assert [(p.source, p.kind) for p in positives] == [
        (source, "positive") for source in benchmark.SOURCES for _ in range(3)
    ]
    pairs = benchmark.build_pairs(positives, seed=0)
    kinds = [pair.kind for pair in pairs]
    assert kinds.count("cross") == 12
    assert kinds.count("perturbed_affine") == 12
    assert kinds.count("perturbed_digit") >= 9
    olympiad = [p for p in positives if p.source == "olympiadbench"]
    assert all("The final answer is $\\boxed{" in p.response for p in olympiad)
    for pair in pairs:
        if pair.kind == "cross":
            same_source = [p for p in positives if p.source == pair.source]
            own = next(p for p in same_source if p.response == pair.response)
            assert benchmark._label_key(pair.gold) != benchmark._label_key(own.gold)


def test_label_key_treats_presentation_as_equal():
    key = benchmark._label_key
    assert key("18^\\circ") == key("18") == key("18.0")
    assert key("\\dfrac{1}{2}") == key("0.5") == key("\\frac12")
    assert key("5\\text{ digits}") == key("5")
    assert key("\\sqrt5") == key("\\sqrt{5}")
    assert key("x+1") != key("x+2")


def test_benchmark_runs_on_a_tiny_subset(data_dir, capsys):
    status = benchmark.main(["--per-source", "2", "--show", "3", "--data-dir", str(data_dir)])
    out = capsys.readouterr().out
    assert status in (0, 1)  # speed targets mean nothing on 30 pairs
    assert "pairs: " in out and " = 8 positives (math_test 2, math500 2, minerva_math 2, " in out
    for grader in ("tagrpo, 1 process", "tagrpo, 2 processes", "math-verify (plain)",
                   "verl math_verify.compute_score"):  # fmt: skip
        assert grader in out
    assert "PASS: tagrpo accuracy on real positives 100.00% == 100%" in out
    assert "PASS: every hostile response returned within 2 s + 1 s grace + 1 s" in out
    assert "PASS: 0 item(s) over 5 CPU-s + 1 s" in out
    assert "load average at start: " in out and "load average at end: " in out
