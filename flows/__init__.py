"""Prefect flows: orchestration only; the work happens in ``stages`` and ``tagrpo``.

Importing ``tagrpo`` first applies the offline defaults before Prefect reads its settings, and
the Prefect home is set here, before any Prefect import: the checkout's ``.prefect`` (what
``make prefect-server`` serves), unless ``PREFECT_HOME`` is already set. So
``python -m flows.pipeline run`` outside ``make`` records its runs where the UI looks, not in
``~/.prefect``. A scratch copy (``.tagrpo/runs/<name>``) uses the checkout's home.
"""

import os
from pathlib import Path

import tagrpo  # noqa: F401
from tagrpo.plumbing.paths import checkout_root

PREFECT_HOME_DIR = ".prefect"

os.environ.setdefault(
    "PREFECT_HOME", str(checkout_root(Path(__file__).resolve().parent) / PREFECT_HOME_DIR)
)
