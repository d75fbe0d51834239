"""verl's process sandbox: its own session and temp dir; nothing survives the run.

A fake "verl" starts a daemon in a session of its own (as Ray's GCS and raylet can end up),
which inherits the run's marker (``TAGRPO_VERL_RUN``, and ``TMPDIR`` on a private cluster).
Whether the run ends normally, fails, or the launcher is interrupted (SIGINT, SIGTERM), the
daemon is gone afterwards and the temp dir can be removed; a cluster's daemon started before
the run (``ray start``, no marker) is left running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tagrpo.plumbing.procfs import proc_stat
from tagrpo.verl_ext.process import (
    RUN_MARKER,
    TEMP_PREFIX,
    private_temp_dir,
    processes_marked,
    remove_temp_dir,
    run_isolated,
)

# Starts a detached daemon (new session, like a re-parented Ray daemon), records its pid, then
# exits with the given code after the given delay.
FAKE_VERL = textwrap.dedent(
    """
    import os, subprocess, sys, time
    daemon = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    open(os.path.join(os.environ["TAGRPO_VERL_RUN"], "daemon.pid"), "w").write(str(daemon.pid))
    time.sleep(float(sys.argv[2]))
    sys.exit(int(sys.argv[1]))
    """
)


def alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and not stat.zombie


def daemon_pid(temp: Path) -> int:
    for _ in range(100):
        path = temp / "daemon.pid"
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.1)
    raise AssertionError("the fake verl did not start its daemon")


@pytest.mark.parametrize("code", [0, 3])
def test_daemons_of_a_finished_or_failed_run_are_stopped(code: int) -> None:
    temp = private_temp_dir()
    try:
        assert temp.name.startswith(TEMP_PREFIX) and len(str(temp)) <= 40
        env = {**os.environ, "TMPDIR": str(temp), RUN_MARKER: str(temp)}
        argv = [sys.executable, "-c", FAKE_VERL, str(code), "0.5"]
        if code:
            with pytest.raises(subprocess.CalledProcessError):
                run_isolated(argv, env=env, cwd=temp)
        else:
            assert run_isolated(argv, env=env, cwd=temp).returncode == 0
        daemon = daemon_pid(temp)
        assert not alive(daemon)
        assert processes_marked(str(temp)) == []
    finally:
        remove_temp_dir(temp)
    assert not temp.exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_launcher_stops_the_run(sig: int, tmp_path) -> None:
    """Ctrl-C (or a stopped DVC stage) while verl runs: the launcher stops the whole run."""
    launcher = textwrap.dedent(
        f"""
        import os, signal, sys
        from tagrpo.verl_ext.process import private_temp_dir, remove_temp_dir, run_isolated
        # Ctrl-C as under a terminal: a background job of a non-interactive shell (`cmd &`,
        # e.g. a CI runner's) starts with SIGINT ignored, and Python then installs no handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        temp = private_temp_dir()
        print(temp, flush=True)
        try:
            run_isolated([sys.executable, "-c", {FAKE_VERL!r}, "0", "600"],
                         env={{**os.environ, "TMPDIR": str(temp), "TAGRPO_VERL_RUN": str(temp)}},
                         cwd=str(temp))
        finally:
            remove_temp_dir(temp)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    temp = Path(process.stdout.readline().strip())
    try:
        daemon = daemon_pid(temp)
        verl = [pid for pid in processes_marked(str(temp)) if pid != daemon]
        assert verl and alive(daemon)
        process.send_signal(sig)
        process.wait(timeout=60)
        assert process.returncode != 0
        assert not alive(daemon) and not any(alive(pid) for pid in verl)
        assert not temp.exists()
    finally:
        if process.poll() is None:
            process.kill()


def test_run_isolated_needs_the_runs_temp_dir(tmp_path) -> None:
    with pytest.raises(ValueError, match="TAGRPO_VERL_RUN set to the run's private temp dir"):
        run_isolated(["true"], env={"TMPDIR": str(tmp_path)}, cwd=tmp_path)


def test_a_run_on_a_ray_start_cluster_leaves_the_clusters_daemons_running() -> None:
    """Multi-node: the cluster's daemons (`ray start`, before the run) lack the run's marker and
    survive it; the run's own processes (the marker is in their environment, no TMPDIR) do not."""
    cluster = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    temp = private_temp_dir()
    try:
        env = {k: v for k, v in os.environ.items() if k != "TMPDIR"} | {RUN_MARKER: str(temp)}
        run_isolated([sys.executable, "-c", FAKE_VERL, "0", "0.3"], env=env, cwd=temp)
        assert not alive(daemon_pid(temp))
        assert alive(cluster.pid)
    finally:
        cluster.kill()
        cluster.wait()
        remove_temp_dir(temp)
