"""MLflow tracking: one run per stage execution, tagged with the git commit and the params.

The store is a SQLite file at an absolute path in the user's checkout (``dvc exp`` runs
stages in temporary copies, so a relative URI would scatter runs). When a Prefect flow
orchestrates ``dvc repro`` it opens a parent run and passes its id in
``TAGRPO_PARENT_RUN_ID``; stage runs then nest under it across processes.

Each run carries what ties it to its DVC outputs (``tagrpo.dvc_stage``, the DVC name such as
``train@grpo-0``, and ``tagrpo.deps_hash``, a hash of the stage's dependencies and params) and
which process ran it (``tagrpo.host``, ``tagrpo.pid``): a run left RUNNING by a killed process is
marked KILLED the next time that stage starts. Key-shaped values are never logged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tagrpo.config.model import looks_like_secret
from tagrpo.paths import home_root, project_root, resolve_path

PARENT_RUN_ENV = "TAGRPO_PARENT_RUN_ID"
DEFAULT_EXPERIMENT = "tagrpo"
REDACTED = "***"
# Keys whose values are secrets whatever they look like.
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
    from tagrpo.dvc_stages import pipeline_outputs

    where = cwd or home_root()
    try:
        written = sorted({"dvc.lock", *pipeline_outputs(where)})
    except KeyError:
        written = ["dvc.lock"]
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


def redact(value: Any) -> Any:
    """A value as it may be logged: key-shaped strings replaced."""
    return REDACTED if looks_like_secret(value) else value


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested params as ``a.b.c`` keys; secrets masked; long values truncated for MLflow."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, prefix=f"{name}."))
            continue
        if _SECRET_KEY.search(str(key)):
            flat[name] = REDACTED
            continue
        if isinstance(value, list | tuple):
            value = [redact(item) for item in value]
            text = json.dumps(value)
        else:
            text = str(redact(value))
        flat[name] = text if len(text) <= 5000 else text[:4997] + "..."
    return flat


def flatten_numbers(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a nested mapping as ``a/b/c`` keys (for metrics)."""
    flat: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_numbers(value, prefix=f"{name}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            flat[name] = float(value)
    return flat


def deps_hash(dvc_name: str, root: Path | None = None) -> str:
    """sha256 over a dvc.yaml stage's dependency files and params values ("" if not in dvc.yaml).

    The same inputs give the same hash, so a run can be matched to the dvc.lock entry that
    recorded those inputs (and an orphaned run to none).
    """
    import yaml

    from tagrpo.dvc_stages import load_stages

    root = root or project_root()
    try:
        stages = load_stages(root)
    except KeyError:
        return ""
    stage = stages.get(dvc_name)
    if stage is None:
        return ""
    digest = hashlib.sha256()
    for dep in sorted(stage.deps):
        path = root / dep
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts:
                continue
            digest.update(str(file.relative_to(root)).encode())
            digest.update(file.read_bytes() if file.exists() else b"<missing>")
    params = yaml.safe_load((root / "params.yaml").read_text()) or {}
    for key in sorted(stage.params):
        node: Any = params
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        digest.update(f"{key}={json.dumps(node, sort_keys=True, default=str)}".encode())
    return digest.hexdigest()[:16]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mark_stale_runs_killed(client: Any, experiment_id: str, dvc_name: str) -> int:
    """Runs of this stage left RUNNING by a process that is gone, set to KILLED."""
    host = socket.gethostname()
    stale = 0
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`tagrpo.dvc_stage` = '{dvc_name}' and attributes.status = 'RUNNING'",
    )
    for run in runs:
        tags = run.data.tags
        if tags.get("tagrpo.host") != host:
            continue  # another machine's run: its process cannot be checked from here
        pid = int(tags.get("tagrpo.pid", "0") or 0)
        if pid and pid != os.getpid() and _pid_alive(pid):
            continue
        client.set_terminated(run.info.run_id, status="KILLED")
        stale += 1
    return stale


@contextlib.contextmanager
def stage_run(
    stage: str,
    config: Any,
    *,
    key: str | None = None,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    log_sections: tuple[str, ...] = (),
    run_params: Mapping[str, Any] | None = None,
    dvc_name: str | None = None,
) -> Iterator[Any]:
    """An MLflow run for one stage execution (nested under the orchestrator's run, if any).

    ``dvc_name`` is DVC's name of the stage (``train@grpo-0``; default ``stage@key``).

    ``config`` is the validated :class:`tagrpo.config.params.Params`; ``log_sections`` names
    the sections logged as params (``common`` always), ``run_params`` adds run-specific ones.
    With ``common.tracking.enabled: false`` the run is skipped with a message; errors opening
    the store propagate. An interrupted stage (Ctrl-C, SIGTERM) ends its run KILLED.
    """
    import mlflow
    from mlflow.tracking import MlflowClient

    settings = config.common.tracking
    if not settings.enabled:
        print(f"[tracking] disabled in params: no MLflow run for stage {stage}")
        yield None
        return
    mlflow.set_tracking_uri(tracking_uri(settings.uri))
    experiment = mlflow.set_experiment(settings.experiment)
    dvc_key = dvc_name or (f"{stage}@{key}" if key else stage)
    client = MlflowClient()
    stale = mark_stale_runs_killed(client, experiment.experiment_id, dvc_key)
    if stale:
        print(
            f"[tracking] marked {stale} run(s) of {dvc_key} left RUNNING by a dead process KILLED"
        )
    run_tags = {
        "stage": stage,
        "profile": config.common.profile,
        "tagrpo.dvc_stage": dvc_key,
        "tagrpo.deps_hash": deps_hash(dvc_key),
        "tagrpo.host": socket.gethostname(),
        "tagrpo.pid": str(os.getpid()),
        **git_state(),
        **(tags or {}),
    }
    parent = os.environ.get(PARENT_RUN_ENV)
    run = mlflow.start_run(run_name=run_name or dvc_key, parent_run_id=parent, tags=run_tags)
    try:
        logged = {"common": config.common.model_dump(mode="json")}
        for section in log_sections:
            logged[section] = config.section(section).model_dump(mode="json")
        logged.update(run_params or {})
        mlflow.log_params(flatten_params(logged))
        yield run
    except (KeyboardInterrupt, SystemExit):
        mlflow.end_run(status="KILLED")
        raise
    except BaseException:
        mlflow.end_run(status="FAILED")
        raise
    else:
        mlflow.end_run(status="FINISHED")


def log_metrics(metrics: Mapping[str, Any], step: int | None = None) -> None:
    """Log the numeric metrics (nested mappings flattened) to the active run.

    MLflow keys may not contain '@'; NaN is dropped.
    """
    import mlflow

    if mlflow.active_run() is None:
        return
    clean = {
        key.replace("@", "_at_"): value
        for key, value in flatten_numbers(metrics).items()
        if value == value
    }
    if clean:
        mlflow.log_metrics(clean, step=step)
