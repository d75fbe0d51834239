"""The whole pipeline as a Prefect flow: ``dvc repro`` as a task with retries, under an MLflow
parent run that every stage's run nests under.

DVC decides what is stale and caches outputs; Prefect decides when to run and retries (a retry
re-enters ``dvc repro``, which resumes at the failed stage). ``set_params`` runs a DVC
experiment (``dvc exp run -S key=value``) instead of a plain repro.

    python -m flows.pipeline                      # run once (ephemeral Prefect server)
    python -m flows.pipeline serve "0 3 * * *"    # schedule; needs `make prefect-server` and
                                                  # PREFECT_API_URL=http://127.0.0.1:4200/api
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from tagrpo.paths import project_root
from tagrpo.tracking import PARENT_RUN_ENV, git_state, tracking_uri


def _dvc_binary() -> str:
    local = Path(sys.executable).with_name("dvc")
    return str(local) if local.exists() else "dvc"


@task(retries=2, retry_delay_seconds=10)
def dvc(args: list[str], parent_run_id: str | None = None) -> str:
    """Run one dvc command in the project root; stdout is returned and logged."""
    env = {**os.environ}
    if parent_run_id:
        env[PARENT_RUN_ENV] = parent_run_id
    proc = subprocess.run(
        [_dvc_binary(), *args],
        cwd=project_root(),
        capture_output=True,
        text=True,
        env=env,
    )
    logger = get_run_logger()
    logger.info("dvc %s\n%s", " ".join(args), proc.stdout[-8000:])
    if proc.returncode != 0:
        raise RuntimeError(
            f"dvc {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-8000:]}"
        )
    return proc.stdout


@flow(name="tagrpo-pipeline", log_prints=True)
def pipeline(set_params: list[str] | None = None, force: bool = False) -> dict:
    """Reproduce the DAG (or a DVC experiment) and return the metrics DVC reports."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    mlflow.set_experiment("tagrpo")
    with mlflow.start_run(run_name="pipeline", tags={"stage": "pipeline", **git_state()}) as run:
        mlflow.log_param("set_params", json.dumps(set_params or []))
        if set_params:
            args = ["exp", "run", *[a for item in set_params for a in ("-S", item)]]
        else:
            args = ["repro", *(["--force"] if force else [])]
        dvc(args, parent_run_id=run.info.run_id)
        shown = json.loads(dvc(["metrics", "show", "--json"]))
        flat: dict[str, float] = {}
        for source in shown.values():
            for path, payload in source.get("data", {}).items():
                name = Path(path).with_suffix("").as_posix().removeprefix("metrics/")
                _flatten(name, payload.get("data", {}), flat)
        mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in flat.items()})
        lock = project_root() / "dvc.lock"
        if lock.exists():
            mlflow.log_artifact(str(lock))
        report = project_root() / "reports" / "report.md"
        if report.exists():
            create_markdown_artifact(report.read_text(), key="tagrpo-report")
        return flat


def _flatten(prefix: str, value: object, into: dict[str, float]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}", inner, into)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        into[prefix] = float(value)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        cron = sys.argv[2] if len(sys.argv) > 2 else "0 3 * * *"
        pipeline.serve(name="scheduled-repro", cron=cron)
    else:
        print(json.dumps(pipeline(), indent=1, sort_keys=True))
