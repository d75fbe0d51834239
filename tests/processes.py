"""Stopping a server or worker a test started: SIGTERM, a grace period, then SIGKILL, reaped."""

import subprocess


def stop_process(process: subprocess.Popen, grace_s: float = 60.0) -> None:
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
