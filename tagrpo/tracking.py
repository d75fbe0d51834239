"""MLflow tracking: one run per stage execution, tagged with the git commit and the params.

The store is a SQLite file at an absolute path in the user's checkout (``dvc exp`` runs
stages in temporary copies, so a relative URI would scatter runs). When a Prefect flow
orchestrates ``dvc repro`` it opens a parent run and passes its id in
``TAGRPO_PARENT_RUN_ID``; stage runs then nest under it across processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tagrpo.dvc_outputs import pipeline_outputs
from tagrpo.paths import home_root, resolve_path

PARENT_RUN_ENV = "TAGRPO_PARENT_RUN_ID"
DEFAULT_EXPERIMENT = "tagrpo"
_SECRET_KEY = re.compile(r"(api[_-]?key|secret|password|token)$", re.IGNORECASE)


def tracking_uri(configured: str | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else a SQLite store at an absolute path in the checkout."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if configured and "://" in configured:
        return configured
    database = resolve_path(configured or "mlflow.db", base=home_root())
    return f"sqlite:///{database}"


def git_state(cwd: Path | None = None) -> dict[str, str]:
    """Commit sha and whether the work tree differs from it ("unknown" outside git).

    Dirty means tracked code, params or data differ from the commit. What the pipeline itself
    writes (``dvc.lock`` and the outputs dvc.yaml declares, e.g. committed metrics) does not
    count: a stage runs while earlier stages of the same ``dvc repro`` are rewriting them.
    """
    where = cwd or home_root()
    written = sorted({"dvc.lock", *pipeline_outputs(where)})
    pathspec = [":/", *(f":(exclude){path}" for path in written)]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *pathspec],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"git_commit": "unknown", "git_dirty": "unknown"}
    return {"git_commit": sha, "git_dirty": str(bool(dirty)).lower()}


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested params as ``a.b.c`` keys; secrets masked; long values truncated for MLflow."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, prefix=f"{name}."))
            continue
        if _SECRET_KEY.search(str(key)):
            flat[name] = "***"
            continue
        text = json.dumps(value) if isinstance(value, list | tuple) else str(value)
        flat[name] = text if len(text) <= 5000 else text[:4997] + "..."
    return flat


@contextlib.contextmanager
def stage_run(
    stage: str,
    params: Mapping[str, Any],
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> Iterator[Any]:
    """An MLflow run for one stage execution (nested under the orchestrator's run, if any).

    Tracking is best-effort for the science but not silent: if ``tracking.enabled`` is false in
    ``common`` the run is skipped with a message; errors opening the store propagate.
    """
    import mlflow

    common = params.get("common", {}) if isinstance(params.get("common"), Mapping) else {}
    settings = common.get("tracking", {}) if isinstance(common, Mapping) else {}
    if settings.get("enabled", True) is False:
        print(f"[tracking] disabled in params: no MLflow run for stage {stage}")
        yield None
        return
    mlflow.set_tracking_uri(tracking_uri(settings.get("uri")))
    mlflow.set_experiment(settings.get("experiment", DEFAULT_EXPERIMENT))
    run_tags = {"stage": stage, **git_state(), **(tags or {})}
    if common.get("profile"):
        run_tags["profile"] = str(common["profile"])
    parent = os.environ.get(PARENT_RUN_ENV)
    with mlflow.start_run(run_name=run_name or stage, parent_run_id=parent, tags=run_tags) as run:
        mlflow.log_params(flatten_params(params))
        yield run


def log_metrics(metrics: Mapping[str, float], step: int | None = None) -> None:
    """Log numeric metrics to the active run (MLflow keys may not contain '@')."""
    import mlflow

    if mlflow.active_run() is None:
        return
    clean = {
        key.replace("@", "_at_"): float(value)
        for key, value in metrics.items()
        if isinstance(value, int | float) and value == value  # drop NaN
    }
    mlflow.log_metrics(clean, step=step)
