"""The OpenAI-compatible backend against a real HTTP server on loopback (tests/openai_fake_server).

Retries with backoff and Retry-After, per-request timeouts, recorded failures, the concurrency
limit, the three request modes, cache hits that send nothing, the API key's handling, and a
run killed with SIGKILL that resumes without losing or repeating more than was in flight.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from openai_fake_server import FakeOpenAIServer, Fault

from tagrpo.config.params import embedded
from tagrpo.data.rephrase_templates import APPENDIX_A
from tagrpo.data.schema import Question
from tagrpo.plumbing.paths import project_root
from tagrpo.rephrase.cache import ReplyCache
from tagrpo.rephrase.generate import OpenAIRephraser
from tagrpo.rephrase.openai_backend import (
    EndpointConfig,
    EndpointRefusedError,
    backoff_delay,
    parse_retry_after,
    redact,
)

KEY_ENV = "TAGRPO_TEST_OPENAI_KEY"
SECRET = "sk-test-Zq81secretvalue42"


def _questions(count: int, prefix: str = "Q") -> list[Question]:
    return [
        Question(
            id=f"{prefix}{i}",
            source="math",
            split="train",
            problem=f"{prefix}-{i}: what is the value of x?",
            answer="1",
        )
        for i in range(count)
    ]


def _endpoint(server: FakeOpenAIServer, **overrides: object) -> EndpointConfig:
    settings = {
        "model": "fake-model",
        "base_url": server.base_url,
        "api_key_env": None,
        "concurrency": 8,
        "timeout_s": 5.0,
        "max_attempts": 4,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
        **overrides,
    }
    return embedded(EndpointConfig, **settings)


@pytest.fixture
def server() -> FakeOpenAIServer:
    with FakeOpenAIServer() as running:
        yield running


def test_per_variant_requests_fill_every_slot_and_a_rerun_sends_nothing(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    questions = _questions(4)
    with ReplyCache(tmp_path / "cache.sqlite") as cache:
        first = OpenAIRephraser(_endpoint(server), APPENDIX_A, n=3, seed=5, cache=cache)
        candidates = first.rephrase(questions)
        assert server.received == 12
        assert [(c.question_id, c.variant) for c in candidates] == [
            (q.id, slot) for q in questions for slot in range(3)
        ]
        # The fake echoes the seed it was sent: each slot got its own seed, via the request.
        assert (
            candidates[4].text
            == "Put differently (seed 5000016, choice 0): Q-1: what is the value of x?"
        )
        assert {c.origin for c in candidates} == {"openai:fake-model"}
        assert all(c.error is None and not c.cached and c.attempts == 1 for c in candidates)
        body = server.requests[0].body
        assert body["model"] == "fake-model" and body["n"] == 1 and body["max_tokens"] == 512
        assert body["messages"][0]["content"].startswith("You are a helpful AI assistant.")
        metrics = first.metrics()
        assert metrics["requests/http_requests"] == 12 and metrics["requests/cache_hits"] == 0
        assert metrics["requests/prompt_tokens"] > 0

        again = OpenAIRephraser(_endpoint(server), APPENDIX_A, n=3, seed=5, cache=cache)
        rerun = again.rephrase(questions)
        assert server.received == 12  # zero new requests
        assert [c.text for c in rerun] == [c.text for c in candidates]
        assert all(c.cached for c in rerun)
        assert again.metrics()["requests/cache_hits"] == 12
        # A new round is a different key: it is asked for, not served from the cache.
        OpenAIRephraser(_endpoint(server), APPENDIX_A, n=3, seed=5, cache=cache).rephrase(
            questions[:1], round=1, slots={"Q0": [1]}
        )
        assert server.received == 13


def test_choices_and_numbered_modes(server: FakeOpenAIServer) -> None:
    questions = _questions(2)
    choices = OpenAIRephraser(_endpoint(server), APPENDIX_A, n=3, mode="choices")
    out = choices.rephrase(questions)
    assert server.received == 2 and server.requests[0].body["n"] == 3
    assert [c.text for c in out[:3]] == [
        f"Put differently (seed 0, choice {i}): Q-0: what is the value of x?" for i in range(3)
    ]
    assert [c.prompt_tokens > 0 for c in out[:3]] == [True, False, False]  # usage counted once

    numbered = OpenAIRephraser(_endpoint(server), APPENDIX_A, n=3, mode="numbered")
    out = numbered.rephrase(questions)
    assert server.received == 4 and server.requests[-1].body["n"] == 1
    assert "Write 3 different rephrasings" in server.requests[-1].body["messages"][0]["content"]
    assert [c.text for c in out[3:]] == [
        f"Put differently (take {i}): Q-1: what is the value of x?" for i in range(1, 4)
    ]
    assert out[0].detail == "preamble,numbered"
    assert numbered.metrics()["parse/numbered"] == 2


def test_short_numbered_reply_leaves_missing_slots_recorded() -> None:
    def two_items(body: dict) -> str:
        return "1. First version?\n2. Second version?"

    with FakeOpenAIServer(reply=two_items) as server:
        out = OpenAIRephraser(_endpoint(server), APPENDIX_A, n=3, mode="numbered").rephrase(
            _questions(1)
        )
    assert [(c.text, c.error) for c in out] == [
        ("First version?", None),
        ("Second version?", None),
        (None, "parse_missing"),
    ]
    assert out[2].detail == "numbered,short:1"


def test_429_with_retry_after_is_honoured_then_succeeds(server: FakeOpenAIServer) -> None:
    server.add_fault(Fault("status", match="Q-1:", status=429, retry_after=0.3, times=2))
    rephraser = OpenAIRephraser(_endpoint(server), APPENDIX_A, n=1)
    out = rephraser.rephrase(_questions(3))
    assert all(c.text for c in out)
    assert [c.attempts for c in out] == [1, 3, 1]
    attempts = server.requests_matching("Q-1:")
    assert [r.status for r in attempts] == [429, 429, 200]
    for earlier, later in itertools.pairwise(attempts):
        assert later.received_at - earlier.finished_at >= 0.3  # never sooner than Retry-After
    stats = rephraser.runner.stats
    assert stats.retries == 2 and stats.http_requests == 5
    assert dict(stats.attempt_errors) == {"rate_limited": 2}


def test_server_errors_timeouts_and_malformed_replies_are_retried(
    server: FakeOpenAIServer,
) -> None:
    server.add_fault(Fault("status", match="Q-0:", status=503))
    server.add_fault(Fault("delay", match="Q-1:", delay_s=1.5))  # past the 0.4 s timeout
    server.add_fault(Fault("malformed_json", match="Q-2:"))
    server.add_fault(Fault("empty_content", match="Q-3:"))
    rephraser = OpenAIRephraser(_endpoint(server, timeout_s=0.4), APPENDIX_A, n=1)
    started = time.perf_counter()
    out = rephraser.rephrase(_questions(5))
    assert time.perf_counter() - started < 1.5  # the slow reply was not waited for
    assert [c.attempts for c in out] == [2, 2, 2, 2, 1]
    assert all(c.text and c.error is None for c in out)
    stats = rephraser.runner.stats
    assert dict(stats.attempt_errors) == {
        "server_error": 1,
        "timeout": 1,
        "malformed_response": 1,
        "empty_reply": 1,
    }
    assert stats.failed == 0 and stats.retries == 4


def test_requests_that_keep_failing_are_recorded_and_the_run_goes_on(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.add_fault(Fault("status", match="Q-0:", status=429, times=100))
    server.add_fault(Fault("status", match="Q-1:", status=400, message="bad request"))
    with ReplyCache(tmp_path / "c.sqlite") as cache:
        rephraser = OpenAIRephraser(_endpoint(server, max_attempts=3), APPENDIX_A, n=1, cache=cache)
        out = rephraser.rephrase(_questions(3))
        assert [c.error for c in out] == ["generation_failed", "generation_failed", None]
        assert (
            out[0].detail == "rate_limited: Error code: 429 - injected fault"
            and out[0].attempts == 3
        )
        assert out[1].detail == "http_400: Error code: 400 - bad request" and out[1].attempts == 1
        assert len(server.requests_matching("Q-0:")) == 3
        assert len(server.requests_matching("Q-1:")) == 1  # a 400 is not retried
        metrics = rephraser.metrics()
        assert metrics["requests/failed/rate_limited"] == 1.0
        assert metrics["requests/failed/http_400"] == 1.0
        assert cache.count() == 1  # failures are not cached: the next run retries them


def _dead_port_url() -> str:
    """A loopback URL where nothing listens (a port bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_the_reply_cache_is_keyed_by_endpoint_template_and_sampling(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    questions = _questions(2)
    with ReplyCache(tmp_path / "cache.sqlite") as cache:
        OpenAIRephraser(_endpoint(server), APPENDIX_A, n=2, seed=1, cache=cache).rephrase(questions)
        assert server.received == 4 and cache.count() == 4

        # The same model name at another server (nothing listens there): no cache hit, every
        # request is sent and fails (the drill: 24 cache hits and 0 requests at a dead port).
        dead = OpenAIRephraser(
            _endpoint(server, base_url=_dead_port_url(), max_attempts=1, timeout_s=2.0),
            APPENDIX_A,
            n=2,
            seed=1,
            cache=cache,
        )
        out = dead.rephrase(questions)
        assert [(c.error, c.cached) for c in out] == [("generation_failed", False)] * 4
        assert all(c.detail.startswith("connection") for c in out), [c.detail for c in out]
        assert dead.metrics()["requests/cache_hits"] == 0
        assert dead.metrics()["requests/http_requests"] == 4

        # The same server spelt with a trailing slash and upper-case host: still one endpoint.
        spelt = server.base_url.replace("127.0.0.1", "127.0.0.1".upper()) + "/"
        same = OpenAIRephraser(_endpoint(server, base_url=spelt), APPENDIX_A, n=2, seed=1,
                               cache=cache)  # fmt: skip
        assert all(c.cached for c in same.rephrase(questions))
        assert server.received == 4

        # Edited prompt text under the same template name, other sampling, no seed sent: misses.
        edited = dataclasses.replace(APPENDIX_A, body=APPENDIX_A.body + " Be brief.")
        for template, endpoint in (
            (edited, _endpoint(server)),
            (APPENDIX_A, _endpoint(server, temperature=0.5)),
            (APPENDIX_A, _endpoint(server, top_p=0.9)),
            (APPENDIX_A, _endpoint(server, max_tokens=64)),
            (APPENDIX_A, _endpoint(server, send_seed=False)),
        ):
            sent = server.received
            rephraser = OpenAIRephraser(endpoint, template, n=2, seed=1, cache=cache)
            assert not any(c.cached for c in rephraser.rephrase(questions))
            assert server.received == sent + 4


def test_api_key_comes_from_the_environment_and_never_leaks(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    endpoint = _endpoint(server, api_key_env=KEY_ENV)
    with pytest.raises(RuntimeError, match=f"{KEY_ENV} .*is not set"):
        OpenAIRephraser(endpoint, APPENDIX_A, n=1).rephrase(_questions(1))
    assert server.received == 0  # nothing was sent without a key

    monkeypatch.setenv(KEY_ENV, SECRET)
    server.add_fault(Fault("status", match="Q-0:", status=401, message="bad key {authorization}"))
    with pytest.raises(EndpointRefusedError, match="HTTP 401") as refused:
        OpenAIRephraser(
            _endpoint(server, api_key_env=KEY_ENV, concurrency=1), APPENDIX_A, n=1
        ).rephrase(_questions(2))
    assert server.requests[0].authorization == f"Bearer {SECRET}"
    assert SECRET not in str(refused.value) and "***" in str(refused.value)
    assert server.received == 1  # concurrency 1: the 401 stopped the run before Q-1
    with pytest.raises(ValueError, match="api_key"):
        embedded(EndpointConfig, model="m", api_key=SECRET)
    with pytest.raises(ValueError, match="temprature"):
        embedded(EndpointConfig, model="m", temprature=1.0)
    with pytest.raises(ValueError, match="looks like an API key"):
        embedded(EndpointConfig, model="m", api_key_env=SECRET)
    assert redact(f"key {SECRET} and sk-other-123456 and Bearer abc", [SECRET]) == (
        "key *** and *** and ***"
    )


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_refused_endpoint_stops_the_run_at_once(
    server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    """The drill of a wrong key: every request answers 401. No retry, no further request."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    server.add_fault(Fault("status", status=status, times=10_000, message="refused"))
    endpoint = _endpoint(server, api_key_env=KEY_ENV, concurrency=4, max_attempts=6)
    rephraser = OpenAIRephraser(endpoint, APPENDIX_A, n=3)
    with pytest.raises(EndpointRefusedError, match=f"HTTP {status}"):
        rephraser.rephrase(_questions(16))  # 48 requests
    # At most the requests already in flight when the first refusal came back: none retried.
    assert server.received <= 4
    assert rephraser.runner.stats.retries == 0


def test_concurrency_limit_holds() -> None:
    with FakeOpenAIServer(latency_s=0.15) as server:
        OpenAIRephraser(_endpoint(server, concurrency=3), APPENDIX_A, n=1).rephrase(_questions(12))
        events = sorted(
            [(r.received_at, 1) for r in server.requests]
            + [(r.finished_at, -1) for r in server.requests]
        )
    level = peak = 0
    for _, change in events:
        level += change
        peak = max(peak, level)
    assert peak == 3


def test_backoff_and_retry_after_parsing() -> None:
    config = embedded(
        EndpointConfig, model="m", backoff_base_s=1.0, backoff_max_s=8.0, retry_after_max_s=5
    )
    rng = random.Random(0)
    delays = [backoff_delay(attempt, config, None, rng) for attempt in range(1, 6)]
    caps = [1, 2, 4, 8, 8]
    assert all(cap / 2 <= d <= cap for d, cap in zip(delays, caps, strict=True))
    assert 3.0 <= backoff_delay(1, config, 3.0, rng) <= 3.3  # Retry-After is a floor
    assert 5.0 <= backoff_delay(1, config, 60.0, rng) <= 5.5  # ... capped at retry_after_max_s
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({}) is None


_RESUMABLE = textwrap.dedent(
    """
    import sys
    from tagrpo.config.params import embedded
    from tagrpo.data.schema import Question
    from tagrpo.rephrase.cache import ReplyCache
    from tagrpo.rephrase.generate import OpenAIRephraser
    from tagrpo.rephrase.openai_backend import EndpointConfig
    from tagrpo.data.rephrase_templates import APPENDIX_A

    base_url, cache_path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    questions = [
        Question(id=f"K{i}", source="math", split="train", problem=f"K-{i}: find x.", answer="1")
        for i in range(count)
    ]
    endpoint = embedded(EndpointConfig,
        model="fake", base_url=base_url, api_key_env=None, concurrency=4, timeout_s=10
    )
    with ReplyCache(cache_path) as cache:
        out = OpenAIRephraser(endpoint, APPENDIX_A, n=1, cache=cache).rephrase(questions)
    print(sum(c.text is not None for c in out))
    """
)


def _cached_rows(path: Path) -> int:
    if not path.exists():
        return 0
    connection = sqlite3.connect(path)
    try:
        return connection.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
    except sqlite3.OperationalError:  # the table is not created yet
        return 0
    finally:
        connection.close()


def test_a_run_killed_with_sigkill_resumes_losing_only_requests_in_flight(
    tmp_path: Path,
) -> None:
    script = tmp_path / "resumable.py"
    script.write_text(_RESUMABLE)
    cache_path = tmp_path / "cache.sqlite"
    total, concurrency = 40, 4
    env = {**os.environ, "PYTHONPATH": str(project_root())}
    with FakeOpenAIServer(latency_s=0.1) as server:
        command = [sys.executable, str(script), server.base_url, str(cache_path), str(total)]
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while _cached_rows(cache_path) < 12:
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait()
        time.sleep(0.3)  # let the server finish the handlers of the killed client
        cached, sent_before = _cached_rows(cache_path), server.received
        assert 12 <= cached < total
        assert sent_before - cached <= concurrency  # lost: at most the requests in flight

        resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == str(total)
        assert server.received - sent_before == total - cached  # only what was not stored
        assert _cached_rows(cache_path) == total

        final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert final.stdout.strip() == str(total)
        assert server.received - sent_before == total - cached  # a complete cache: no request


def test_a_rerun_served_from_the_cache_writes_a_byte_identical_candidates_file(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """The candidates' attempts and token counts are the reply's as first obtained (a retry
    included), not this run's: an all-cached rerun writes the same bytes, so DVC does not
    rerun check_equivalence for identical texts (issue 33.8)."""
    from tagrpo.rephrase.candidates import read_candidates, write_candidates

    server.add_fault(Fault("status", match="Q-1:", status=503))  # Q1's first slot: 2 attempts
    questions = _questions(3)
    with ReplyCache(tmp_path / "cache.sqlite") as cache:
        first = OpenAIRephraser(_endpoint(server), APPENDIX_A, n=2, seed=5, cache=cache)
        write_candidates(first.rephrase(questions), tmp_path / "first.parquet")
        assert server.received == 7
        again = OpenAIRephraser(_endpoint(server), APPENDIX_A, n=2, seed=5, cache=cache)
        rerun = again.rephrase(questions)
        assert server.received == 7 and all(c.cached for c in rerun)
        write_candidates(rerun, tmp_path / "rerun.parquet")
    first_bytes = (tmp_path / "first.parquet").read_bytes()
    assert (tmp_path / "rerun.parquet").read_bytes() == first_bytes
    written = read_candidates(tmp_path / "rerun.parquet")
    assert sorted((c.question_id, c.attempts) for c in written) == [
        ("Q0", 1),
        ("Q0", 1),
        ("Q1", 1),
        ("Q1", 2),  # whichever of Q1's two requests the fault hit
        ("Q2", 1),
        ("Q2", 1),
    ]
    assert all(c.prompt_tokens > 0 and c.completion_tokens > 0 for c in written)
    assert not any(c.cached for c in written)  # not in the file: this run's, not the reply's
