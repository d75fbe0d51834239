"""Samples are saved as each chunk completes and reused by a rerun with the same fingerprint.

A tiny random chat policy (tests/tiny_policy.py) is evaluated with the real transformers
backend on two benchmarks (two chunks); grading is scripted and can be made to fail. Checked:
a grading failure after sampling loses nothing (the rerun calls the engine 0 times), a run
killed (SIGKILL) after its first chunk resumes at the second and gives the same responses,
byte for byte, as an uninterrupted run; a changed fingerprint resamples and says why; a chunk
that cannot be read is resampled, never trusted.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tagrpo.backends.hf import HFBackend
from tagrpo.backends.sample_store import SampleStore
from tagrpo.config.params import config_with, embedded
from tagrpo.data.schema import Question, write_questions
from tagrpo.evaluation import runner  # evaluate_policy calls its grade_fn_for
from tagrpo.evaluation.runner import evaluate_policy

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from tiny_policy import boxed_grade, save_chat_policy, tiny_questions  # noqa: E402

BENCHMARKS = {
    "alpha": ["What is 3 + 4?", "Compute 5 - 2.", "Add 1 and 6."],
    "beta": ["What is 2 + 2?", "Compute 9 - 4."],
}
N = 3


def make_inputs(root: Path) -> tuple[Path, Path]:
    """``(policy folder, benchmarks folder)`` under ``root``."""
    problems = [p for texts in BENCHMARKS.values() for p in texts]
    policy = save_chat_policy(root / "policy", problems, seed=3, weight_scale=3.0)
    benchmarks = root / "benchmarks"
    benchmarks.mkdir()
    for name, texts in BENCHMARKS.items():
        questions = [
            Question(id=f"{name}-{i}", source="test", split="test", problem=text, answer=str(i))
            for i, text in enumerate(texts)
        ]
        write_questions(questions, str(benchmarks / f"{name}.parquet"))
    return policy, benchmarks


def config(**overrides):
    return config_with(
        {
            "evaluate.backend": "hf",
            "evaluate.n": N,
            "evaluate.ks": [1, 2],
            "report.primary_k": None,  # the largest of these ks (the default registers 16)
            "evaluate.max_new_tokens": 6,
            "evaluate.groups": {},
            "report.in_distribution": None,  # no groups: V1 over every benchmark
            "report.primary_group": None,  # no groups: every free-form benchmark
            "report.harder_group": None,  # no groups: no calibration band
            "evaluate.bootstrap_resamples": 10,
            "hf.max_batch_sequences": 4,  # several batches per chunk
            "common.torch_threads": 1,
            **overrides,
        }
    )


class Grades:
    """Stands in for the grading pool; ``fail`` raises as the pool's deadline did."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    @contextlib.contextmanager
    def __call__(self, settings, grader):
        if self.fail:

            def failing(responses, answers, kinds):
                raise RuntimeError("grading workers did not start in time")

            yield failing
        else:
            yield boxed_grade


def run_evaluation(root: Path, store_dir: Path, **overrides):
    policy, benchmarks = root / "policy", root / "benchmarks"
    store = SampleStore(store_dir)
    result = evaluate_policy(config(**overrides), policy, benchmarks, store, scope="evaluate@t")
    return result, store


@pytest.fixture
def inputs(tmp_path):
    make_inputs(tmp_path)
    return tmp_path


@pytest.fixture
def engine_calls(monkeypatch):
    """Every call of the transformers backend's ``generate``: (prompts, n)."""
    calls: list[tuple[int, int]] = []
    original = HFBackend.generate

    def counted(self, conversations, sampling):
        calls.append((len(conversations), sampling.n))
        return original(self, conversations, sampling)

    monkeypatch.setattr(HFBackend, "generate", counted)
    return calls


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def test_grading_failure_after_sampling_then_rerun_grades_without_sampling(
    inputs, engine_calls, monkeypatch
):
    store_dir = inputs / "store"
    monkeypatch.setattr(runner, "grade_fn_for", Grades(fail=True))
    with pytest.raises(RuntimeError, match="did not start in time"):
        run_evaluation(inputs, store_dir)
    assert engine_calls == [(3, N), (2, N)]  # both benchmarks sampled, then grading failed

    engine_calls.clear()
    monkeypatch.setattr(runner, "grade_fn_for", Grades())
    result, store = run_evaluation(inputs, store_dir)
    assert engine_calls == []  # graded from the saved samples
    assert store.counts() == {"samples_reused": 15.0, "samples_resampled": 0.0}
    assert len(result.responses) == 15

    fresh, fresh_store = run_evaluation(inputs, inputs / "other-store")
    assert fresh_store.counts() == {"samples_reused": 0.0, "samples_resampled": 15.0}
    assert parquet_bytes(result.responses) == parquet_bytes(fresh.responses)


def test_discard_after_success_makes_the_next_run_sample_afresh(inputs, engine_calls, monkeypatch):
    monkeypatch.setattr(runner, "grade_fn_for", Grades())
    _, store = run_evaluation(inputs, inputs / "store")
    store.discard()
    assert not list((inputs / "store" / "chunks").rglob("*.json.gz"))
    engine_calls.clear()
    _, again = run_evaluation(inputs, inputs / "store")
    assert engine_calls == [(3, N), (2, N)]
    assert again.counts() == {"samples_reused": 0.0, "samples_resampled": 15.0}


CHILD = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from tagrpo.backends.hf import HFBackend
from tagrpo.evaluation import runner  # evaluate_policy calls its grade_fn_for
import test_sample_store as t

original = HFBackend.generate
calls = []

def killed_on_second(self, conversations, sampling):
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # as a killed job: no cleanup, no finally
    return original(self, conversations, sampling)

HFBackend.generate = killed_on_second
runner.grade_fn_for = t.Grades()
t.run_evaluation(Path({root!r}), Path({store!r}))
"""


def test_killed_evaluation_resumes_at_the_first_unsaved_chunk_with_identical_responses(
    inputs, engine_calls, monkeypatch
):
    store_dir = inputs / "store"
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD.format(tests=str(TESTS), root=str(inputs), store=str(store_dir)),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert len(list((store_dir / "chunks").rglob("*.json.gz"))) == 1  # only "alpha" was saved

    monkeypatch.setattr(runner, "grade_fn_for", Grades())
    resumed, store = run_evaluation(inputs, store_dir)
    assert engine_calls == [(2, N)]  # "beta" only
    assert store.counts() == {"samples_reused": 9.0, "samples_resampled": 6.0}

    engine_calls.clear()
    uninterrupted, _ = run_evaluation(inputs, inputs / "uninterrupted")
    assert engine_calls == [(3, N), (2, N)]
    assert parquet_bytes(resumed.responses) == parquet_bytes(uninterrupted.responses)
    assert resumed.summary == uninterrupted.summary


def test_a_changed_fingerprint_resamples_and_says_why(inputs, engine_calls, monkeypatch):
    monkeypatch.setattr(runner, "grade_fn_for", Grades())
    run_evaluation(inputs, inputs / "store")
    engine_calls.clear()
    lines: list[str] = []
    store = SampleStore(inputs / "store", log=lines.append)
    evaluate_policy(
        config(**{"evaluate.temperature": 0.7}),
        inputs / "policy",
        inputs / "benchmarks",
        store,
        scope="evaluate@t",
    )
    assert engine_calls == [(3, N), (2, N)]
    assert store.counts() == {"samples_reused": 0.0, "samples_resampled": 15.0}
    assert (
        lines[0]
        == "[samples] evaluate@t#0: saved samples were drawn with a different sampling: resampling"
    )

    # a changed weight file is another model, whatever its name
    weights = next((inputs / "policy").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    engine_calls.clear()
    lines.clear()
    with contextlib.suppress(Exception):  # the edited file may not load; sampling was asked
        evaluate_policy(
            config(**{"evaluate.temperature": 0.7}),
            inputs / "policy",
            inputs / "benchmarks",
            SampleStore(inputs / "store", log=lines.append),
            scope="evaluate@t",
        )
    assert (
        lines[0]
        == "[samples] evaluate@t#0: saved samples were drawn with a different model: resampling"
    )


def test_an_unreadable_chunk_is_resampled_not_trusted(inputs, engine_calls, monkeypatch):
    monkeypatch.setattr(runner, "grade_fn_for", Grades())
    first, _ = run_evaluation(inputs, inputs / "store")
    chunks = sorted(
        (inputs / "store" / "chunks").rglob("*.json.gz"), key=lambda p: p.stat().st_size
    )
    chunks[0].write_bytes(gzip.compress(b'{"fingerprint": {}, "completions": []}'))  # "beta"
    chunks[1].write_bytes(chunks[1].read_bytes()[:40])  # "alpha", truncated
    engine_calls.clear()
    lines: list[str] = []
    store = SampleStore(inputs / "store", log=lines.append)
    again = evaluate_policy(config(), inputs / "policy", inputs / "benchmarks", store, "evaluate@t")
    assert engine_calls == [(3, N), (2, N)]
    assert [line.split(": ")[0] for line in lines if "unreadable" in line] == [
        "[samples] evaluate@t#0",
        "[samples] evaluate@t#1",
    ]
    assert parquet_bytes(again.responses) == parquet_bytes(first.responses)


def test_diagnostics_sampling_failure_then_rerun_without_sampling(inputs, engine_calls):
    from tagrpo.backends.base import SamplingParams
    from tagrpo.backends.factory import make_stored_backend
    from tagrpo.evaluation.vanishing_diversity import sample_training_questions

    questions = tiny_questions()
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=5, seed=4)

    def failing(responses, answers, kinds):
        raise RuntimeError("grading failed")

    def probe(store: SampleStore, grade):
        backend = make_stored_backend("hf", config(), inputs / "policy", store, "diagnostics/p/c")
        return sample_training_questions(backend, questions, 2, 2, sampling, grade)

    with pytest.raises(RuntimeError, match="grading failed"):
        probe(SampleStore(inputs / "store"), failing)
    assert engine_calls == [(3, 6), (3, 2), (3, 2)]  # q0 (N+1)G times, each neighbour G
    engine_calls.clear()
    store = SampleStore(inputs / "store")
    rerun = probe(store, boxed_grade)
    assert engine_calls == []
    assert store.counts() == {"samples_reused": 30.0, "samples_resampled": 0.0}
    fresh = probe(SampleStore(inputs / "fresh"), boxed_grade)
    assert parquet_bytes(rerun) == parquet_bytes(fresh)


def test_consistency_solver_completions_are_saved_before_grading(inputs, engine_calls):
    from tagrpo.config.equivalence import ConsistencyConfig
    from tagrpo.equivalence.consistency import LocalSolver, solve_and_grade
    from tagrpo.grading.types import SolveItem

    items = [SolveItem(text, str(i)) for i, text in enumerate(BENCHMARKS["alpha"])]
    rule = embedded(ConsistencyConfig, temperature=1.0, top_p=1.0, max_new_tokens=5)

    def solver(store: SampleStore) -> LocalSolver:
        return LocalSolver(inputs / "policy", rule, seed=2, max_batch_sequences=4, store=store)

    def failing(responses, answers, kinds):
        raise RuntimeError("grading failed")

    with pytest.raises(RuntimeError, match="grading failed"):
        solve_and_grade(solver(SampleStore(inputs / "store")), items, 4, failing)
    assert engine_calls == [(3, 4)]
    engine_calls.clear()
    store = SampleStore(inputs / "store")
    reused = solver(store).sample(items, 4)
    assert engine_calls == []
    assert store.counts() == {"samples_reused": 12.0, "samples_resampled": 0.0}
    assert reused == solver(SampleStore(inputs / "fresh")).sample(items, 4)
    assert engine_calls == [(3, 4)]
