"""Headless Chromium for the tests that check pages render (Debian's ``chromium`` package, which
``make test`` installs; see the Makefile's ``browser`` target).

Every run gets a fresh profile and no network: host names resolve nowhere, so a page that still
loads a script from a CDN renders blank here instead of passing by accident.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from not_tested import not_tested

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


def chromium() -> str:
    """The Chromium binary, or a skip that says how to install it."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    not_tested(
        "no Chromium to render the page. `make test` installs Debian's chromium "
        "package (make browser; needs root and apt); install it to run this check"
    )


def _run(url: str, extra: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="tagrpo-chromium-") as profile:
        command = [chromium(), *FLAGS, f"--user-data-dir={profile}", *extra, url]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def dump_dom(url: str, budget_ms: int = 20000, timeout: float = 300) -> str:
    """The page's DOM after its scripts ran (virtual time: timers fast-forwarded)."""
    result = _run(url, [f"--virtual-time-budget={budget_ms}", "--dump-dom"], timeout)
    if result.returncode != 0 or "<html" not in result.stdout:
        raise AssertionError(f"chromium failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def screenshot(url: str, path: Path, size: str = "1400,2400", budget_ms: int = 20000) -> Path:
    """A PNG of the page (for looking at it; tests check the DOM)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = [f"--virtual-time-budget={budget_ms}", f"--window-size={size}", "--hide-scrollbars"]
    extra.append(f"--screenshot={path}")
    result = _run(url, extra, 300)
    if result.returncode != 0 or not path.is_file():
        raise AssertionError(f"chromium screenshot failed:\n{result.stderr[-3000:]}")
    return path
