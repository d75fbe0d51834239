"""What saved samples spare: an evaluation interrupted after sampling, or mid-sampling, resumed.

    .venv/bin/python benchmarks/sample_resume.py [--model models/base] [--benchmarks 4]
        [--questions 25] [--n 16] [--max-new-tokens 48] [--kill-after 2]

The evaluate stage's work (:func:`tagrpo.evaluation.runner.evaluate_policy`, transformers
backend) on ``--benchmarks`` benchmarks of mini-world questions, four ways (grading in process
by the tests' scripted grader: what is measured is sampling, not grading):

1. uninterrupted (a fresh store);
2. grading fails after sampling, then the rerun: every sample reused;
3. the engine dies while sampling chunk ``--kill-after`` + 1, then the rerun: the saved chunks
   reused, the rest sampled;
4. (check) the responses of 2 and 3 are byte for byte those of 1.

Prints samples reused / resampled and seconds of each rerun. Without ``--model`` a random
chat policy of the mini world's shape is used (tests/tiny_policy.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_policy import boxed_grade

from tagrpo.backends.hf import HFBackend
from tagrpo.backends.sample_store import SampleStore
from tagrpo.config.params import config_with
from tagrpo.data.schema import Question, write_questions
from tagrpo.evaluation import runner  # evaluate_policy calls its grade_fn_for
from tagrpo.evaluation.runner import evaluate_policy
from tagrpo.miniworld.tasks import MiniProblem, render

FAMILIES = ("expr", "words", "imperative", "story")


def write_benchmarks(folder: Path, count: int, questions: int) -> list[str]:
    """``count`` parquet benchmarks of addition problems; their texts."""
    rng = random.Random(0)
    folder.mkdir(parents=True)
    texts = []
    for b in range(count):
        rows = []
        for q in range(questions):
            problem = MiniProblem("add", (rng.randint(1, 40), rng.randint(1, 40)))
            text = render(problem, FAMILIES[(b + q) % len(FAMILIES)])
            texts.append(text)
            rows.append(Question(f"b{b}-{q}", "bench", "test", text, str(problem.answer)))
        write_questions(rows, str(folder / f"bench{b}.parquet"))
    return texts


class Interrupt(RuntimeError):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--benchmarks", type=int, default=4)
    parser.add_argument("--questions", type=int, default=25)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--kill-after", type=int, default=2)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sample-resume-"))
    texts = write_benchmarks(work / "benchmarks", args.benchmarks, args.questions)
    if args.model:
        policy = Path(args.model)
    else:
        from tiny_policy import save_chat_policy

        policy = save_chat_policy(work / "policy", texts, weight_scale=1.0, hidden_size=128)
    config = config_with(
        {
            "evaluate.backend": "hf",
            "evaluate.n": args.n,
            "evaluate.ks": [1],
            "evaluate.max_new_tokens": args.max_new_tokens,
            "evaluate.groups": {},
        }
    )

    @contextlib.contextmanager
    def scripted_grading(settings, grader):
        yield boxed_grade

    original_grading, original_generate = scripted_grading, HFBackend.generate
    runner.grade_fn_for = scripted_grading

    def run(store_name: str) -> tuple[bytes, SampleStore, float]:
        store = SampleStore(work / store_name, log=lambda line: None)
        started = time.perf_counter()
        result = evaluate_policy(config, policy, work / "benchmarks", store, scope="evaluate@b")
        buffer = io.BytesIO()
        result.responses.to_parquet(buffer, index=False)
        return buffer.getvalue(), store, time.perf_counter() - started

    def report(name: str, store: SampleStore, seconds: float) -> None:
        counts = store.counts()
        print(
            f"{name:<36} reused {counts['samples_reused']:>6.0f}  resampled "
            f"{counts['samples_resampled']:>6.0f}  {seconds:7.1f} s"
        )

    reference, store, seconds = run("uninterrupted")
    report("uninterrupted", store, seconds)

    @contextlib.contextmanager
    def failing_grading(settings, grader):
        def fail(responses, answers, kinds):
            raise Interrupt("grading failed")

        yield fail

    runner.grade_fn_for = failing_grading
    with contextlib.suppress(Interrupt):
        run("grading-failed")
    runner.grade_fn_for = original_grading
    after_grading, store, seconds = run("grading-failed")
    report("rerun after a grading failure", store, seconds)

    calls = []

    def dies_mid_sampling(self, conversations, sampling):
        calls.append(1)
        if len(calls) > args.kill_after:
            raise Interrupt("engine died")
        return original_generate(self, conversations, sampling)

    HFBackend.generate = dies_mid_sampling
    with contextlib.suppress(Interrupt):
        run("killed")
    HFBackend.generate = original_generate
    after_kill, store, seconds = run("killed")
    report(f"rerun after dying in chunk {args.kill_after + 1}", store, seconds)
    identical = after_grading == reference and after_kill == reference
    print(f"responses byte-identical to the uninterrupted run: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
