"""Chat completions from any OpenAI-compatible endpoint, concurrently, robustly, cached.

Used for rephrasing (:class:`OpenAIRephraser` in :mod:`tagrpo.rephrase.generate`) and for the
answer-consistency solver. One :class:`ChatRunner` call takes a list of requests and returns
one :class:`ChatResult` per request, in order; it never raises for a failed request:

* at most ``concurrency`` requests are in flight (an ``asyncio.Semaphore`` held only while a
  request is on the wire, not while it waits to retry);
* each attempt has a hard wall-clock limit of ``timeout_s``, from the moment it is sent: time
  queued behind the concurrency limit, in backoff, or spent by the cache waiting for SQLite's
  write lock (writes run in a thread, off the event loop) does not count;
* 429, 5xx, timeouts, connection errors and malformed replies (a body that is not JSON, no
  choices, empty content) are retried up to ``max_attempts`` in all, after
  ``backoff_base_s * 2**(attempt-1)`` seconds (capped at ``backoff_max_s``) scaled by a random
  factor in [0.5, 1] (jitter, so that clients throttled together do not return together),
  and never sooner than the server's ``Retry-After``/``retry-after-ms`` (capped at
  ``retry_after_max_s``);
* 401, 403 and 404 (a wrong or unauthorised key, a wrong URL or model) would fail every
  request alike: the first one stops the whole call with :class:`EndpointRefusedError` (no
  retry, in-flight requests cancelled, no further request sent);
* other 4xx (a bad request) fail that request at once; every failure is returned with its kind
  and a message with the API key redacted;
* each successful reply is written to the :class:`~tagrpo.rephrase.cache.ReplyCache` as soon
  as it arrives, and requests whose key is stored are answered from it without a request.

The API key is read from the environment variable named by ``api_key_env`` and from nowhere
else; ``api_key_env: null`` sends a placeholder (a local ``vllm serve`` without ``--api-key``).

Speed (``benchmarks/rephrase_concurrency.py``): requests go through the ``openai`` client's
generic ``post`` with the chat-completions body, and the reply JSON is read directly; the
client's typed ``chat.completions.create`` spends about 2 ms of CPU per request on argument
validation and response models, and the HTTP pool's per-request scan of its connections
grows with the pool, so requests are spread over several clients of 8 connections each.
At 64 concurrent requests and 200 ms latency this is the difference between CPU-bound and
latency-bound on one core.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import random
import re
import ssl
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tagrpo.config.rephrase import EndpointConfig
from tagrpo.plumbing.errors import UserMistake
from tagrpo.rephrase.cache import ReplyCache

__all__ = ["ChatRequest", "ChatResult", "ChatRunner", "EndpointConfig", "EndpointRefusedError"]

RETRYABLE = frozenset(
    {"rate_limited", "server_error", "timeout", "connection", "malformed_response", "empty_reply"}
)
_CONNECTIONS_PER_CLIENT = 8
_KEY_PATTERN = re.compile(r"(sk-[A-Za-z0-9_\-]{4,}|Bearer\s+\S+)")
# Replies that will be the same for every request: a wrong key (401), a key without access
# (403), a wrong base URL or model name (404). One of them stops the whole run at once.
FATAL = frozenset({"http_401", "http_403", "http_404"})


class EndpointRefusedError(UserMistake, RuntimeError):
    """The endpoint refused the run itself (key, permission, URL or model): stop, do not retry
    (the user's to fix: the stage prints it as one line)."""


@dataclass(frozen=True)
class ChatRequest:
    """One chat request: ``n`` choices for ``messages``; ``key`` addresses its reply."""

    key: str
    messages: list[dict[str, str]]
    n: int = 1
    seed: int | None = None
    namespace: str = "chat"


@dataclass
class ChatResult:
    key: str
    texts: list[str] | None  # one per choice; None when the request failed
    error_kind: str | None = None
    error: str | None = None
    attempts: int = 0
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.texts is not None


@dataclass
class RunStats:
    """Counts for one or more runner calls (what the stage logs to MLflow)."""

    requests: int = 0  # distinct requests asked for
    cache_hits: int = 0
    http_requests: int = 0  # attempts sent over the wire, retries included
    retries: int = 0
    succeeded: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempt_errors: Counter[str] = field(default_factory=Counter)  # every failed attempt
    final_errors: Counter[str] = field(default_factory=Counter)  # requests that failed
    seconds: float = 0.0

    def as_metrics(self, prefix: str = "") -> dict[str, float]:
        metrics = {
            f"{prefix}{name}": float(getattr(self, name))
            for name in (
                "requests",
                "cache_hits",
                "http_requests",
                "retries",
                "succeeded",
                "failed",
                "prompt_tokens",
                "completion_tokens",
                "seconds",
            )
        }
        for kind, count in self.attempt_errors.items():
            metrics[f"{prefix}attempt_errors/{kind}"] = float(count)
        for kind, count in self.final_errors.items():
            metrics[f"{prefix}failed/{kind}"] = float(count)
        return metrics


class _Failure(Exception):
    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - time.time())


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` with the given secrets and anything key-shaped replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return _KEY_PATTERN.sub("***", text)


def backoff_delay(
    attempt: int, config: EndpointConfig, retry_after: float | None, rng: random.Random
) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based); see the module docstring."""
    delay = min(config.backoff_max_s, config.backoff_base_s * 2 ** (attempt - 1))
    delay *= rng.uniform(0.5, 1.0)
    if retry_after is not None:
        floor = min(retry_after, config.retry_after_max_s)
        delay = max(delay, floor * rng.uniform(1.0, 1.1))
    return delay


class ChatRunner:
    """Sends :class:`ChatRequest` lists to one endpoint; see the module docstring."""

    def __init__(
        self,
        config: EndpointConfig,
        cache: ReplyCache | None = None,
        seed: int = 0,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.config = config
        self.cache = cache
        self.stats = RunStats()
        self._rng = random.Random(seed)
        self._progress = progress
        self._secrets: list[str] = []

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Blocking wrapper around :meth:`run_async` (one event loop per call)."""
        return asyncio.run(self.run_async(requests))

    async def run_async(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        import certifi
        import openai  # openai: only an endpoint backend needs it

        started = time.perf_counter()
        unique: dict[str, ChatRequest] = {}
        for request in requests:
            unique.setdefault(request.key, request)
        self.stats.requests += len(unique)
        results: dict[str, ChatResult] = {}
        stored = self.cache.get_many(unique) if self.cache is not None else {}
        for key, payload in stored.items():
            # The reply's provenance as first obtained: the file the stage writes must not
            # depend on whether the cache served it (issue 33.8).
            usage = payload.get("usage") or {}
            results[key] = ChatResult(
                key,
                list(payload["texts"]),
                cached=True,
                attempts=int(payload.get("attempts", 1)),
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
            )
        self.stats.cache_hits += len(stored)
        pending = [request for key, request in unique.items() if key not in stored]
        if pending:
            api_key = self.config.api_key()  # fails before any request if the key is missing
            self._secrets = [api_key]
            # Several clients, each with a small connection pool: the HTTP pool scans all of
            # its connections for every request it places, so one pool of 64 connections
            # costs about 0.4 ms of CPU per request; eight pools of eight, a fraction of that.
            shards = max(1, math.ceil(self.config.concurrency / _CONNECTIONS_PER_CLIENT))
            # One TLS context for all of them (certifi's roots, as the client's default):
            # building one per client costs 30 ms each.
            tls = ssl.create_default_context(cafile=certifi.where())
            clients = [
                openai.AsyncOpenAI(
                    api_key=api_key,
                    base_url=self.config.base_url,
                    max_retries=0,  # retries are ours: backoff, jitter, Retry-After, accounting
                    timeout=self.config.timeout_s + 5.0,  # backstop; the hard limit is below
                    http_client=openai.DefaultAsyncHttpxClient(verify=tls),
                )
                for _ in range(shards)
            ]
            semaphore = asyncio.Semaphore(self.config.concurrency)
            # Cache writes run off the event loop: a write waits (up to the cache's lock
            # timeout) while another process holds SQLite's write lock, and a blocked loop
            # would spend the other in-flight requests' time limits on that wait.
            writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reply-cache")
            done = 0
            from tagrpo.plumbing.progress import bar

            shown = bar(len(pending), f"{self.config.model}: requests", unit="req")

            async def one(position: int, request: ChatRequest) -> None:
                nonlocal done
                client = clients[position % shards]
                results[request.key] = await self._with_retries(client, semaphore, request, writer)
                done += 1
                shown.update(1)
                if self._progress:
                    self._progress(done, len(pending))

            try:
                async with asyncio.TaskGroup() as group:  # a fatal reply cancels the rest
                    for i, request in enumerate(pending):
                        group.create_task(one(i, request))
            except ExceptionGroup as failures:
                # Not `except*`: before 3.11.4 an exception raised there is wrapped in a new
                # ExceptionGroup, and the caller would not see the refusal itself.
                refused = failures.subgroup(EndpointRefusedError)
                if refused is None:
                    raise
                while isinstance(refused, BaseExceptionGroup):
                    refused = refused.exceptions[0]
                raise refused from None
            finally:
                shown.close()
                writer.shutdown(wait=True)  # every reply received is stored before returning
                for client in clients:
                    await client.close()
        self.stats.seconds += time.perf_counter() - started
        return [results[request.key] for request in requests]

    async def _with_retries(
        self,
        client: Any,
        semaphore: asyncio.Semaphore,
        request: ChatRequest,
        writer: ThreadPoolExecutor,
    ) -> ChatResult:
        failure: _Failure | None = None
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                async with semaphore:
                    self.stats.http_requests += 1
                    texts, usage = await self._attempt(client, request)
            except _Failure as error:
                failure = error
                self.stats.attempt_errors[error.kind] += 1
                if error.kind in FATAL:
                    self.stats.failed += 1
                    self.stats.final_errors[error.kind] += 1
                    where = self.config.base_url or "api.openai.com"
                    detail = redact(str(error), self._secrets)[:300]
                    raise EndpointRefusedError(
                        f"the endpoint {where} answered {error.kind.replace('_', ' ').upper()} "
                        f"for model {self.config.model!r} ({detail}): every request would fail "
                        f"alike, so the run stops here with no retry and no further request. "
                        f"Check the key in ${self.config.api_key_env}, the base_url and the "
                        "model name."
                    ) from None
                if error.kind not in RETRYABLE or attempt == self.config.max_attempts:
                    break
                self.stats.retries += 1
                await asyncio.sleep(
                    backoff_delay(attempt, self.config, error.retry_after, self._rng)
                )
                continue
            if self.cache is not None:
                payload = {
                    "texts": texts,
                    "model": self.config.model,
                    "usage": usage,
                    "attempts": attempt,
                }
                await asyncio.get_running_loop().run_in_executor(
                    writer, self.cache.put, request.key, request.namespace, payload
                )
            self.stats.succeeded += 1
            self.stats.prompt_tokens += usage["prompt_tokens"]
            self.stats.completion_tokens += usage["completion_tokens"]
            return ChatResult(
                request.key,
                texts,
                attempts=attempt,
                prompt_tokens=usage["prompt_tokens"],
                completion_tokens=usage["completion_tokens"],
            )
        assert failure is not None
        self.stats.failed += 1
        self.stats.final_errors[failure.kind] += 1
        message = redact(f"{failure.kind}: {failure}", self._secrets)[:500]
        return ChatResult(
            request.key, None, error_kind=failure.kind, error=message, attempts=attempt
        )

    def _connection_failure(self, error: Exception) -> str:
        """A connection error naming where: ``cannot connect to HOST:PORT (URL): cause`` (the
        client's own message, ``Connection error.``, names neither host nor cause)."""
        url = self.config.endpoint_url()
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        cause = error.__cause__ or error.__context__  # httpx's: "Connection refused"...
        reason = str(cause) if cause is not None and str(cause) else str(error)
        return f"cannot connect to {parts.hostname}:{port} ({url}): {reason}"

    async def _attempt(self, client: Any, request: ChatRequest) -> tuple[list[str], dict[str, int]]:
        """One HTTP attempt: the choices' texts and the token usage, or a :class:`_Failure`."""
        import openai  # openai: only an endpoint backend needs it

        arguments: dict[str, Any] = {
            "model": self.config.model,
            "messages": request.messages,
            "n": request.n,
            "temperature": self.config.temperature,
            "top_p": self.config.top_p,
            "max_tokens": self.config.max_tokens,
        }
        if self.config.send_seed and request.seed is not None:
            arguments["seed"] = request.seed
        try:
            async with asyncio.timeout(self.config.timeout_s):
                # The client's generic POST (its documented way to send any request): the
                # body is sent as given and the reply read as bytes. ``chat.completions.create``
                # would validate the arguments against its typed schema and build pydantic
                # models of the reply, which measured about 2 ms of CPU per request: more
                # than the whole budget at 64 concurrent requests on one core.
                raw = await client.post("/chat/completions", cast_to=bytes, body=arguments)
                body = json.loads(raw)
        except TimeoutError:
            raise _Failure("timeout", f"no reply within {self.config.timeout_s:g} s") from None
        except openai.APITimeoutError:
            raise _Failure("timeout", f"no reply within {self.config.timeout_s:g} s") from None
        except openai.APIConnectionError as error:
            raise _Failure("connection", self._connection_failure(error)) from None
        except openai.APIStatusError as error:
            status = error.status_code
            retry_after = parse_retry_after(getattr(error.response, "headers", None))
            if status == 429:
                raise _Failure("rate_limited", error.message, retry_after) from None
            if status >= 500:
                raise _Failure("server_error", error.message, retry_after) from None
            raise _Failure(f"http_{status}", error.message) from None
        except (ValueError, openai.APIResponseValidationError) as error:
            # A 200 whose body is not the protocol's JSON (json.JSONDecodeError is a ValueError).
            raise _Failure("malformed_response", f"{type(error).__name__}: {error}") from None
        try:
            texts = [str(choice["message"].get("content") or "") for choice in body["choices"]]
            usage = body.get("usage") or {}
            tokens = {
                "prompt_tokens": int(usage.get("prompt_tokens") or 0),
                "completion_tokens": int(usage.get("completion_tokens") or 0),
            }
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise _Failure("malformed_response", f"not a chat completion: {error!r}") from None
        if not texts or not any(text.strip() for text in texts):
            raise _Failure("empty_reply", "the reply has no content")
        return texts, tokens
