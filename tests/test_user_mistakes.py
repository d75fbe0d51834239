"""Each user mistake of issue 53 prints one line naming what to fix, from the stages' one error
boundary (:func:`tagrpo.pipeline.runtime.run_main`); ``--traceback`` or ``TAGRPO_TRACEBACK=1``
prints the trace instead: a missing API key, a dead endpoint (host and port named), a full
disk (the path named), a stage ended by a signal (the stage and the signal named)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from tagrpo.data.schema import Question, write_questions
from tagrpo.plumbing.paths import project_root

SOURCE = project_root()
HINT = "(TAGRPO_TRACEBACK=1 or --traceback for the traceback)"
UNSET_KEY = "TAGRPO_TEST_KEY_NOBODY_SETS"


def _env(project: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(SOURCE), **extra}
    env.pop("TAGRPO_TRACEBACK", None)
    env.pop(UNSET_KEY, None)
    env.update(extra)
    return env


def _params(project: Path, overrides: dict[str, object]) -> None:
    """params.yaml of the project with dotted overrides; MLflow off (nothing to record)."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    for key, value in {"common.tracking.enabled": False, **overrides}.items():
        *path, last = key.split(".")
        node = params
        for part in path:
            node = node[part]
        node[last] = value
    (project / "params.yaml").write_text(yaml.safe_dump(params))


def _training_set(project: Path, count: int = 3) -> None:
    questions = [
        Question(id=f"q{i}", source="math", split="train", problem=f"What is {i}+1?", answer=str(i))
        for i in range(count)
    ]
    path = project / "data/processed/train.parquet"
    path.parent.mkdir(parents=True)
    write_questions(questions, str(path))


def _rephrase(project: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stages.rephrase", *extra],
        cwd=project,
        env=_env(project, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


def _openai_params(base_url: str, api_key_env: str | None) -> dict[str, object]:
    return {
        "rephrase.backend": "openai",
        "rephrase.n": 3,
        "rephrase.openai.base_url": base_url,
        "rephrase.openai.api_key_env": api_key_env,
        "rephrase.openai.max_attempts": 2,
        "rephrase.openai.backoff_base_s": 0.01,
        "rephrase.openai.backoff_max_s": 0.02,
        "rephrase.openai.timeout_s": 5.0,
    }


def test_a_missing_api_key_is_one_line_naming_the_variable(empty_project: Path) -> None:
    _training_set(empty_project)
    _params(empty_project, _openai_params("http://127.0.0.1:9/v1", UNSET_KEY))
    done = _rephrase(empty_project)
    assert done.returncode == 1
    assert _last_line(done) == (
        f"stage rephrase failed: MissingSecretError: the environment variable {UNSET_KEY} "
        "(api_key_env) is not set; export the API key there (set api_key_env: null for "
        f"servers without auth) {HINT}"
    )
    traced = _rephrase(empty_project, "--traceback")
    assert traced.returncode == 1
    assert "Traceback (most recent call last)" in traced.stderr
    assert (
        traced.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"tagrpo.plumbing.errors.MissingSecretError: the environment variable {UNSET_KEY}"
        )
    )


def _dead_port() -> int:
    """A loopback port where nothing listens (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_dead_endpoint_is_one_line_naming_host_and_port(empty_project: Path) -> None:
    _training_set(empty_project, count=2)
    port = _dead_port()
    url = f"http://127.0.0.1:{port}/v1"
    _params(empty_project, _openai_params(url, None))
    done = _rephrase(empty_project)
    assert done.returncode == 1
    reason = (
        f"connection: cannot connect to 127.0.0.1:{port} ({url}): All connection attempts failed"
    )
    # Each slot's line names the endpoint too (the client's own says only "Connection error.").
    slots = [line for line in done.stdout.splitlines() if line.startswith("[rephrase] missing q")]
    assert slots == [
        f"[rephrase] missing q{q}#{slot}: generation_failed {reason}"
        for q in range(2)
        for slot in range(3)
    ]
    assert _last_line(done) == (
        "stage rephrase failed: TooManyFailuresError: 6 of 6 rephrasing slots got no "
        "rephrasing (100.0%) exceeds the allowed share 5.0%: by reason "
        f"{{'generation_failed': 6}}, most often '{reason}' (6); fix the endpoint or raise "
        f"rephrase.max_failed_share {HINT}"
    )
    traced = _rephrase(empty_project, TAGRPO_TRACEBACK="1")
    assert traced.returncode == 1 and "Traceback (most recent call last)" in traced.stderr
    assert "TooManyFailuresError" in traced.stderr


def test_a_refused_key_is_one_line_naming_the_endpoint(empty_project: Path) -> None:
    """A wrong key (every request answers 401): the stage stops at the first reply, one line."""
    from openai_fake_server import FakeOpenAIServer, Fault

    _training_set(empty_project, count=2)
    with FakeOpenAIServer() as server:
        server.add_fault(Fault("status", status=401, times=10_000, message="invalid key"))
        _params(empty_project, _openai_params(server.base_url, "TAGRPO_TEST_WRONG_KEY"))
        done = _rephrase(empty_project, TAGRPO_TEST_WRONG_KEY="wrong-key")
    assert done.returncode == 1
    line = _last_line(done)
    assert line.startswith(
        f"stage rephrase failed: EndpointRefusedError: the endpoint {server.base_url} answered "
        "HTTP 401 for model "
    ), line
    assert line.endswith(
        "every request would fail alike, so the run stops here with no retry and no further "
        "request. Check the key in $TAGRPO_TEST_WRONG_KEY, the base_url and the model name. "
        f"{HINT}"
    ), line


STAGE = """
import sys, time
from pathlib import Path
from tagrpo.config.params import load_config
from tagrpo.pipeline.runtime import run_main, running_stage
from tagrpo.plumbing.layout import Outputs

def main(argv):
    outputs = Outputs({"table": Path("out/table.bin")}, Path("metrics/toy.json"))
    with running_stage("toy", outputs, load_config()) as ctx:
        with open(ctx.path("table"), "wb") as handle:
            handle.write(b"started")
            handle.flush()
            if argv and argv[0] == "--fill":
                handle.write(b"x" * (4 << 20))  # more than the 1 MiB tmpfs holds
                handle.flush()
            time.sleep(120)  # until a signal ends it
        ctx.set_metrics({"n": 1})

run_main(main, "toy")
"""


def _toy(project: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    (project / "toy.py").write_text(textwrap.dedent(STAGE))
    return subprocess.Popen(
        [sys.executable, "toy.py", *args],
        cwd=project,
        env=_env(project, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_staged(project: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    staging = project / ".tagrpo/staging"
    while not any(staging.glob("toy-*/out/table.bin")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the stage did not start"
        time.sleep(0.1)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stage_ended_by_a_signal_is_one_line_naming_stage_and_signal(
    empty_project: Path, signum: signal.Signals
) -> None:
    _params(empty_project, {})
    (empty_project / "out").mkdir()
    (empty_project / "out/table.bin").write_bytes(b"old")
    for asked in ({}, {"TAGRPO_TRACEBACK": "1"}):
        stage = _toy(empty_project, **asked)
        _wait_staged(empty_project, stage)
        stage.send_signal(signum)
        stdout, stderr = stage.communicate(timeout=60)
        assert stage.returncode == 128 + signum, (stdout, stderr)
        if asked:
            assert "Traceback (most recent call last)" in stderr
        else:
            assert "Traceback" not in stderr, stderr
            assert stderr.strip().splitlines()[-1] == (
                f"stage toy stopped by {signum.name} (signal {int(signum)}) before it "
                f"finished {HINT}"
            )
        assert (empty_project / "out/table.bin").read_bytes() == b"old"


def test_a_full_disk_is_one_line_naming_the_path(empty_project: Path) -> None:
    """A write's ENOSPC names no file (``OSError: [Errno 28] No space left on device``): the
    line names the stage's staging folder, on the filesystem that is full."""
    staging = empty_project / ".tagrpo/staging"
    staging.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(staging)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting is not allowed here: {mounted.stderr.strip()}")
    try:
        _params(empty_project, {})
        for asked in ({}, {"TAGRPO_TRACEBACK": "1"}):
            stage = _toy(empty_project, "--fill", **asked)
            _, stderr = stage.communicate(timeout=120)
            assert stage.returncode == 1
            if asked:
                assert "Traceback (most recent call last)" in stderr
                assert "OSError: [Errno 28] No space left on device" in stderr
                continue
            assert "Traceback" not in stderr, stderr
            folder = staging / f"toy-{stage.pid}"
            assert stderr.strip().splitlines()[-1] == (
                "stage toy failed: DiskFullError: [Errno 28] no space left on the device "
                f"writing {folder} (0.0 MiB free there): free space on that filesystem (or "
                f"point the output elsewhere), then rerun {HINT}"
            )
    finally:
        subprocess.run(["umount", "-l", str(staging)], check=False)


def test_the_tagrpo_command_names_the_path_of_a_full_disk(
    empty_project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tagrpo.pipeline.cli as cli

    def full(args: object) -> int:
        raise OSError(28, "No space left on device")  # as a write raises it: no path

    monkeypatch.setattr(cli, "_cmd_verify", full)
    monkeypatch.delenv("TAGRPO_TRACEBACK", raising=False)
    assert cli.main(["verify"]) == 2
    # The checkout's filesystem is shared: what is free there moves, so the number is matched.
    assert re.fullmatch(
        re.escape(
            "tagrpo verify: DiskFullError: [Errno 28] no space left on the device writing "
            f"{empty_project} ("
        )
        + r"\d+\.\d MiB"
        + re.escape(
            " free there): free space on that filesystem (or point the output elsewhere), "
            "then rerun (--traceback or TAGRPO_TRACEBACK=1 for the traceback)\n"
        ),
        capsys.readouterr().err,
    )
    with pytest.raises(OSError, match="No space left on device"):
        cli.main(["verify", "--traceback"])
