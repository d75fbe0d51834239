"""A real Prefect server on loopback for the deployment test, and its REST API.

The server runs as ``prefect server start`` in its own PREFECT_HOME (a fresh SQLite database);
the tests talk to it over HTTP as the UI does, so nothing in the test process depends on which
Prefect settings were loaded at import time.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from processes import stop_process

FINAL_STATES = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def prefect_env(home: Path, api_url: str) -> dict[str, str]:
    return {
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": api_url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "DO_NOT_TRACK": "true",
    }


class PrefectAPI:
    """``retry_seconds``: how long one call goes on retrying the server's 503s, counted from the
    call's start. Prefect's server answers 503 ("Service Unavailable") for errors its clients may
    retry, e.g. SQLite busy while the runner writes beside it on a loaded machine, and Prefect's
    own client retries them; any other error status is raised at once."""

    def __init__(self, url: str, retry_seconds: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.retry_seconds = retry_seconds

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        deadline = time.monotonic() + self.retry_seconds
        pause = 0.5
        while True:
            request = urllib.request.Request(
                f"{self.url}{path}",
                data=data,
                method=method,
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    text = response.read().decode()
                return json.loads(text) if text else None
            except urllib.error.HTTPError as error:
                if error.code != 503 or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 8.0)

    def healthy(self) -> bool:
        try:
            self.call("GET", "/health")
        except (urllib.error.URLError, OSError):
            return False
        return True

    def deployment(self, flow: str, name: str) -> dict[str, Any] | None:
        try:
            return self.call("GET", f"/deployments/name/{flow}/{name}")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def run_deployment(self, deployment_id: str, parameters: dict[str, Any]) -> dict[str, Any]:
        body = {"parameters": parameters}
        return self.call("POST", f"/deployments/{deployment_id}/create_flow_run", body)

    def wait(self, flow_run_id: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.call("GET", f"/flow_runs/{flow_run_id}")
            if run["state_type"] in FINAL_STATES:
                return run
            time.sleep(2)
        raise AssertionError(f"flow run {flow_run_id} not finished after {timeout} s")

    def task_runs(self, flow_run_id: str) -> list[dict[str, Any]]:
        body = {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200}
        return self.call("POST", "/task_runs/filter", body)

    def artifacts(self, flow_run_id: str) -> list[dict[str, Any]]:
        body = {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 50}
        return self.call("POST", "/artifacts/filter", body)

    def logs_containing(
        self, flow_run_id: str, text: str, timeout: float = 60.0
    ) -> list[dict[str, Any]]:
        """The run's logs once one line contains ``text``: the runner sends logs in batches, so
        a run can read FAILED before its last lines reach the server (the wait counts from the
        moment the run was seen final, i.e. this call)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.logs(flow_run_id)
            if any(text in line["message"] for line in lines) or time.monotonic() > deadline:
                return lines
            time.sleep(1)

    def logs(self, flow_run_id: str) -> list[dict[str, Any]]:
        lines: list[dict[str, Any]] = []
        while True:
            body = {
                "logs": {"flow_run_id": {"any_": [flow_run_id]}},
                "limit": 200,
                "offset": len(lines),
                "sort": "TIMESTAMP_ASC",
            }
            page = self.call("POST", "/logs/filter", body)
            lines.extend(page)
            if len(page) < 200:
                return lines


@contextmanager
def prefect_server(home: Path, timeout: float = 300) -> Iterator[tuple[PrefectAPI, dict[str, str]]]:
    """``prefect server start`` on a free loopback port; stopped on exit."""
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, **prefect_env(home, api_url)}
    prefect = Path(sys.executable).with_name("prefect")
    log = open(home / "server.log", "wb")  # noqa: SIM115  (closed below, after the server)
    server = subprocess.Popen(
        [str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = PrefectAPI(api_url)
    try:
        deadline = time.monotonic() + timeout
        while not api.healthy():
            if server.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    "prefect server did not start:\n"
                    + (home / "server.log").read_text(errors="replace")[-3000:]
                )
            time.sleep(1)
        yield api, prefect_env(home, api_url)
    finally:
        stop_process(server)
        log.close()
