"""The deployment test's REST helper retries the server's 503s (its "retry me") and nothing
else, within a deadline counted from the call's start, slow answers included."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prefect_server import PrefectAPI


@contextmanager
def scripted_server(codes: list[int], delay: float = 0.0) -> Iterator[tuple[str, list[float]]]:
    """Answers each request with the next status of ``codes`` (the last one repeats) after
    ``delay`` seconds; yields the URL and the monotonic time of every request seen."""
    seen: list[float] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(time.monotonic())
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(delay)
            code = codes[min(len(seen) - 1, len(codes) - 1)]
            body = b'{"id": "run-1"}' if code == 200 else b'{"exception_message": "x"}'
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api", seen
    finally:
        server.shutdown()
        server.server_close()


def test_503s_are_retried_until_the_answer() -> None:
    with scripted_server([503, 503, 200]) as (url, seen):
        answer = PrefectAPI(url, retry_seconds=30).call("POST", "/deployments/x/run", {})
    assert answer == {"id": "run-1"}
    assert len(seen) == 3


@pytest.mark.parametrize("code", [409, 422, 500])
def test_other_errors_are_raised_at_once(code: int) -> None:
    api_error = pytest.raises(urllib.error.HTTPError)
    with scripted_server([code, 200]) as (url, seen), api_error as raised:
        PrefectAPI(url, retry_seconds=30).call("POST", "/x", {})
    assert raised.value.code == code
    assert len(seen) == 1


@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_a_server_that_stays_unavailable_is_given_up_on_by_the_deadline(delay: float) -> None:
    """The deadline counts from the call's start: with slow answers (1 s each) fewer retries
    fit, and the call still ends about when the deadline says, never a full round of waits
    later."""
    retry_seconds = 3.0
    with scripted_server([503], delay=delay) as (url, seen):
        start = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as raised:
            PrefectAPI(url, retry_seconds=retry_seconds).call("POST", "/x", {})
        elapsed = time.monotonic() - start
    assert raised.value.code == 503
    assert len(seen) >= 2
    # No request starts after the deadline (the server thread sees it up to a scheduling slice
    # later on a loaded machine), and the last takes at most one answer's delay.
    assert seen[-1] - start <= retry_seconds + 1.0
    assert elapsed <= retry_seconds + delay + 2.0
