"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol.

Written for the tests and the concurrency benchmark: replies are scripted (a function of the
request body), every request is recorded, and faults can be injected per request:
429 with ``Retry-After``, any other status code, a response slower than the client's timeout,
a body that is not JSON, empty content. Faults match on a substring of the last user message,
so a test can aim one at a given question whatever order concurrent requests arrive in.

    with FakeOpenAIServer(latency_s=0.2) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x")

Run standalone (the benchmark does, so that the server's CPU time is not the client's):

    python tests/openai_fake_server.py --latency-ms 200 --port-file /tmp/port
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

ReplyFn = Callable[[dict[str, Any]], str | list[str]]


@dataclass
class Fault:
    """One injected failure for requests whose last user message contains ``match``.

    ``seed`` narrows it to one request among several with the same prompt (the rephrasing
    slots of a question differ only in their seed).

    kind: ``status`` (HTTP ``status`` with an OpenAI error body; ``retry_after`` seconds in the
    header if set), ``delay`` (answer normally after ``delay_s``), ``malformed_json`` (200 with
    a body that is not JSON), ``empty_content`` (200, content ``""``).
    """

    kind: str
    match: str | None = None  # None: any request
    seed: int | None = None  # if set, only requests sent with this ``seed``
    times: int = 1  # how many matching requests it hits
    status: int = 500
    retry_after: float | None = None
    delay_s: float = 0.0
    message: str = "injected fault"
    hits: int = 0


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    authorization: str | None
    received_at: float
    status: int = 0
    fault: str | None = None
    finished_at: float | None = None


def last_user_message(body: dict[str, Any]) -> str:
    messages = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(messages[-1].get("content", "")) if messages else ""


def question_of(prompt: str) -> str:
    """The question a rephrasing prompt asks about (after its last ``Question:``)."""
    tail = prompt.rsplit("Question: ", 1)[-1]
    return tail.split("\n\n", 1)[0].strip()


def default_reply(body: dict[str, Any]) -> list[str]:
    """Deterministic stand-in for a model: one rephrasing per choice, or a numbered list."""
    prompt = last_user_message(body)
    question = question_of(prompt)
    wanted = re.search(r"Write (\d+) different rephrasings", prompt)
    seed = body.get("seed")
    if wanted:
        count = int(wanted.group(1))
        items = [f"{i}. Put differently (take {i}): {question}" for i in range(1, count + 1)]
        return ["Sure! Here are the rephrasings:\n\n" + "\n".join(items)]
    return [
        f"Rephrasing it: Put differently (seed {seed}, choice {i}): {question}"
        for i in range(int(body.get("n") or 1))
    ]


@dataclass
class FakeOpenAIServer:
    """The server, run in a background thread with its own event loop."""

    reply: ReplyFn = default_reply
    latency_s: float = 0.0
    faults: list[Fault] = field(default_factory=list)
    port: int = 0
    requests: list[RecordedRequest] = field(default_factory=list)
    completed: int = 0

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()

    # -- lifecycle --

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="fake-openai", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("fake OpenAI server did not start")

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(timeout=30)
        self._loop = None

    async def _shutdown(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start_site())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _start_site(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_get("/stats", self._stats)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the ephemeral port picked

    # -- inspection --

    def add_fault(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def requests_matching(self, text: str) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if text in last_user_message(r.body)]

    @property
    def received(self) -> int:
        return len(self.requests)

    # -- protocol --

    def _take_fault(self, prompt: str, seed: object) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.seed is not None and fault.seed != seed:
                    continue
                if fault.hits < fault.times and (fault.match is None or fault.match in prompt):
                    fault.hits += 1
                    return fault
        return None

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response({"received": self.received, "completed": self.completed})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": {"message": "invalid JSON"}}, status=400)
        record = RecordedRequest(body, request.headers.get("Authorization"), time.monotonic())
        self.requests.append(record)
        prompt = last_user_message(body)
        fault = self._take_fault(prompt, body.get("seed"))
        record.fault = fault.kind if fault else None
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if fault is not None and fault.kind == "delay":
            await asyncio.sleep(fault.delay_s)
        response = self._respond(body, fault, request)
        record.status = response.status
        record.finished_at = time.monotonic()
        self.completed += 1
        return response

    def _respond(
        self, body: dict[str, Any], fault: Fault | None, request: web.Request
    ) -> web.Response:
        if fault is not None and fault.kind == "status":
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = f"{fault.retry_after:g}"
            message = fault.message.replace(
                "{authorization}", request.headers.get("Authorization", "")
            )
            error = {"message": message, "type": "injected", "code": fault.status}
            return web.json_response({"error": error}, status=fault.status, headers=headers)
        if fault is not None and fault.kind == "malformed_json":
            return web.Response(
                text='{"id": "chatcmpl-broken", "choices": [', content_type="application/json"
            )
        texts = [""] if fault is not None and fault.kind == "empty_content" else self.reply(body)
        if isinstance(texts, str):
            texts = [texts]
        prompt_tokens = len(last_user_message(body).split())
        completion_tokens = sum(len(text.split()) for text in texts)
        payload = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": index,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
                for index, text in enumerate(texts)
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return web.json_response(payload)


def main() -> None:
    parser = argparse.ArgumentParser(description="fake OpenAI chat-completions server")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", help="write the chosen port here once listening")
    args = parser.parse_args()
    server = FakeOpenAIServer(latency_s=args.latency_ms / 1000.0, port=args.port)
    server.start()
    if args.port_file:
        Path(args.port_file).write_text(str(server.port))
    print(f"listening on {server.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
