"""One MLflow parent run per pipeline invocation, also when a user types ``dvc repro``.

The Prefect flow opens its own parent run and hands its id to the stages in
``TAGRPO_PARENT_RUN_ID``. A bare ``dvc repro`` (or ``dvc exp run``) has no such orchestrator, so
the first stage it starts opens the parent run instead, keyed by that dvc process (host, pid and
the kernel's start time, so a reused pid is never mistaken for it); later stages of the same
invocation find the run by that key and nest under it. A detached watcher process, started with
the parent run, waits for the dvc process to exit and then ends the parent run: FAILED if a stage
run failed, KILLED if one was killed, FINISHED otherwise. The watcher sees dvc's process vanish
but not its exit status (it is not dvc's parent), so it checks each finished stage run against
dvc.lock: a stage whose command succeeded but whose result dvc.lock does not record (dvc failed
after it: an output missing, dvc.lock not writable) is tagged ``tagrpo.locked=false`` and ended
FAILED, and so is the parent; ``tagrpo.dvc_exit`` on the parent says what can be told of dvc's
exit (nonzero when a stage failed or went unrecorded, else unknown). If the watcher itself is
gone (machine rebooted, killed), the next stage of any invocation finishes such orphaned parent
runs (at once: the grace for stages still ending their runs is the watcher's, from dvc's exit).

Linux only (``/proc``); elsewhere stages simply run without a parent run.

    python -m tagrpo.pipeline.parent_run watch RUN_ID PID START_TICKS   # what the stage spawns
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagrpo.plumbing.config_model import mask_key_shapes
from tagrpo.plumbing.paths import home_root
from tagrpo.plumbing.procfs import proc_stat, process_alive
from tagrpo.plumbing.tracking import (
    CHECKOUT_TAG,
    DVC_PIPELINE_KEY_TAG,
    KILLED_REASON_TAG,
    PARENT_RUN_ENV,
    checkout_id,
    dead_owner_runs,
    git_state,
    log_params_artifact,
    mark_dead_runs_killed,
    mark_run_killed,
    model_label,
    owner_tags,
    safe_tags,
)
from tagrpo.plumbing.verify import lock_entry_matches

# mlflow is imported inside the functions that use it (heavy; a stage imports this module).

PIPELINE_KEY_TAG = DVC_PIPELINE_KEY_TAG  # "<host>:<dvc pid>:<dvc start ticks>"
WATCHER_TAG = "tagrpo.watcher"  # "<pid>:<start ticks>" of the run's watcher process
ORIGIN_TAG = "tagrpo.origin"
ROOT_TAG = "tagrpo.root"
# On each FINISHED stage run once dvc exited: whether dvc.lock records what it made.
LOCKED_TAG = "tagrpo.locked"
# On the parent run: dvc's exit status as far as the stage runs and dvc.lock tell it, and the
# first stage that did not finish with its exit status (EXIT_CODE_TAG, as on its stage run).
DVC_EXIT_TAG = "tagrpo.dvc_exit"
FAILED_STAGE_TAG = "tagrpo.failed_stage"
EXIT_CODE_TAG = "tagrpo.exit_code"
ERROR_TAG = "tagrpo.error"
_POLL_SECONDS = 1.0
_CHILD_GRACE_SECONDS = 120.0
# dvc's entry point appears within the first arguments (``dvc repro``, ``python .../dvc repro``,
# ``python -m dvc repro``); deeper positions are arguments of something else.
_MAX_DVC_ARGV_INDEX = 3


@dataclass(frozen=True)
class DvcProcess:
    """The dvc invocation a stage runs under."""

    pid: int
    start_ticks: int
    args: tuple[str, ...]  # dvc's arguments: ("repro",), ("exp", "run", "-S", ...)
    cwd: str

    @property
    def key(self) -> str:
        return f"{socket.gethostname()}:{self.pid}:{self.start_ticks}"

    @property
    def command(self) -> str:
        return " ".join(("dvc", *self.args))


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def dvc_arguments(argv: list[str]) -> tuple[str, ...] | None:
    """dvc's own arguments if ``argv`` runs dvc, else None."""
    for index, arg in enumerate(argv[: _MAX_DVC_ARGV_INDEX + 1]):
        if Path(arg).name == "dvc":
            return tuple(argv[index + 1 :])
        if arg == "-m" and index + 1 < len(argv) and argv[index + 1] == "dvc":
            return tuple(argv[index + 2 :])
    return None


def dvc_ancestor(start: int | None = None) -> DvcProcess | None:
    """The nearest ancestor process that is dvc (the stage runs under dvc's shell)."""
    if not sys.platform.startswith("linux"):
        return None
    pid = os.getppid() if start is None else start
    for _ in range(64):
        if pid <= 1:
            return None
        stat = proc_stat(pid)
        if stat is None:
            return None
        args = dvc_arguments(_cmdline(pid))
        if args is not None:
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                cwd = ""
            return DvcProcess(pid, stat.start_ticks, args, cwd)
        pid = stat.parent
    return None


@contextlib.contextmanager
def _pipeline_lock(root: Path) -> Iterator[None]:
    """Serialise find-or-create of the parent run (``dvc exp run --queue -j 2`` runs stages
    of two invocations at once)."""
    path = root / ".tagrpo" / "locks" / "pipeline-parent-run.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def parent_run_for_stage(client: Any, experiment_id: str, config: Any) -> str | None:
    """The run id a stage run nests under: the orchestrator's, dvc's (created on first use),
    or None when the stage was started by hand."""
    given = os.environ.get(PARENT_RUN_ENV)
    if given:
        return given
    dvc = dvc_ancestor()
    if dvc is None:
        return None
    root = home_root()
    with _pipeline_lock(root):
        finish_orphaned_runs(client, experiment_id)
        found = client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{PIPELINE_KEY_TAG}` = '{dvc.key}'",
            max_results=1,
        )
        if found:
            return found[0].info.run_id
        run_id = _create_parent_run(client, experiment_id, config, dvc)
        _spawn_watcher(client, run_id, dvc, root)
        return run_id


def pipeline_tags(config: Any, origin: str) -> dict[str, str]:
    """Tags every pipeline parent run carries (dvc's or the Prefect flow's); ``config`` None
    (params that do not validate: the run records that refusal) gives ``unknown`` for what
    the params would say."""
    return {
        "stage": "pipeline",
        ORIGIN_TAG: origin,
        "profile": config.common.profile if config is not None else "unknown",
        "model": model_label(config) if config is not None else "unknown",
        "backend": config.train.backend if config is not None else "unknown",
        "tagrpo.host": socket.gethostname(),
        CHECKOUT_TAG: checkout_id(),
        **git_state(),
    }


def _create_parent_run(client: Any, experiment_id: str, config: Any, dvc: DvcProcess) -> str:
    # The command line as typed may carry a value such as `-S rephrase.openai.model=sk-...`:
    # key-shaped parts are masked before anything reaches the store.
    command = mask_key_shapes(dvc.command)
    tags = {
        **pipeline_tags(config, "dvc"),
        PIPELINE_KEY_TAG: dvc.key,
        **owner_tags(dvc.pid),  # the run's owner is dvc (its watcher ends the run)
        "tagrpo.command": command[:4000],
        ROOT_TAG: dvc.cwd,
        "mlflow.note.content": (
            f"`{command}`: one pipeline invocation; the runs of the stages it ran are "
            "nested under this run. Ended when the dvc process exits."
        ),
    }
    run = client.create_run(experiment_id, run_name=command[:200], tags=safe_tags(tags))
    run_id = run.info.run_id
    client.log_param(run_id, "command", command[:6000])
    if config is not None:
        log_params_artifact(client, run_id, config.model_dump(mode="json"), "params.json")
    return run_id


def _spawn_watcher(client: Any, run_id: str, dvc: DvcProcess, root: Path) -> None:
    """A detached process that ends the parent run when dvc exits (it outlives this stage)."""
    import mlflow

    log_dir = root / ".tagrpo" / "pipeline-runs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow.get_tracking_uri()}
    with open(log_dir / f"{run_id}.log", "ab") as log:
        # Own session, no inherited pipes: dvc and whoever reads dvc's output never wait on it.
        watcher = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tagrpo.pipeline.parent_run",
                "watch",
                run_id,
                str(dvc.pid),
                str(dvc.start_ticks),
            ],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    # The orphan sweep leaves a run to its watcher while the watcher lives.
    stat = proc_stat(watcher.pid)
    if stat is not None:
        client.set_tag(run_id, WATCHER_TAG, f"{watcher.pid}:{stat.start_ticks}")


def finish_run(
    client: Any, run_id: str, wait_until: float | None = None, dvc_exited_at: float | None = None
) -> str:
    """End a pipeline parent run from its children's states; returns the status set.

    Children still RUNNING are waited for until ``wait_until`` (a ``time.monotonic()`` value;
    None: not at all). The watcher passes dvc's exit + ``_CHILD_GRACE_SECONDS``: a stage that
    dvc's death just signalled may still be ending its run. The grace is measured from that
    exit, not from whenever this is called. ``dvc_exited_at`` (wall clock, when the watcher saw
    dvc gone): a file changed after it is a later command's doing, not dvc's (the check against
    dvc.lock then says "unknown" for that stage instead of failing it).
    """
    experiment_id = client.get_run(run_id).info.experiment_id
    query = f"tags.mlflow.parentRunId = '{run_id}'"
    deadline = time.monotonic() if wait_until is None else wait_until
    while True:
        children = client.search_runs([experiment_id], filter_string=query)
        running = [c for c in children if c.info.status == "RUNNING"]
        mark_dead_runs_killed(client, running, found_by="the pipeline's watcher")
        statuses = [client.get_run(c.info.run_id).info.status for c in children]
        if "RUNNING" not in statuses or time.monotonic() > deadline:
            break
        time.sleep(_POLL_SECONDS)
    # Fresh copies, in the order the stages started: a failing stage's entry point tags its
    # run with the exit status after the run ended.
    children = sorted(
        (client.get_run(c.info.run_id) for c in children), key=lambda c: c.info.start_time or 0
    )
    statuses = [c.info.status for c in children]
    root = client.get_run(run_id).data.tags.get(ROOT_TAG, "")
    unlocked, unknown = _mark_unrecorded(
        client, children, statuses, Path(root) if root else None, dvc_exited_at
    )
    statuses = [
        "FAILED" if c.info.run_id in unlocked else s
        for c, s in zip(children, statuses, strict=True)
    ]
    if "FAILED" in statuses:
        status = "FAILED"
    elif "KILLED" in statuses or "RUNNING" in statuses:  # a stage outlived dvc: not a success
        status = "KILLED"
    else:
        status = "FINISHED"
    client.set_tag(
        run_id, DVC_EXIT_TAG, mask_key_shapes(_dvc_exit(children, statuses, unlocked, unknown))
    )
    failed = _first_failure(children, statuses, unlocked)
    for key, value in safe_tags(failed or {}).items():
        client.set_tag(run_id, key, value)
    client.log_metric(run_id, "stages_run", float(len(statuses)))
    client.log_metric(run_id, "stages_failed", float(sum(s != "FINISHED" for s in statuses)))
    client.log_metric(run_id, "stages_not_in_lock", float(len(unlocked)))
    lock = Path(root) / "dvc.lock" if root else None
    if lock is not None and lock.is_file():  # a dvc exp temporary copy may be gone already
        client.log_artifact(run_id, str(lock))
    client.set_terminated(run_id, status=status)
    return status


def _mark_unrecorded(
    client: Any,
    children: list[Any],
    statuses: list[str],
    root: Path | None,
    dvc_exited_at: float | None = None,
) -> tuple[set[str], bool]:
    """Tag each FINISHED stage run ``tagrpo.locked`` (whether dvc.lock records what it made)
    and end those DVC did not record FAILED, with a note. Returns their run ids, and whether
    any could not be checked (no dvc.lock at ``root``: a ``dvc exp`` copy already removed).

    The watcher is not dvc's parent, so it cannot read dvc's exit status; a stage command that
    succeeded while dvc then failed to record it (an output missing, dvc.lock not writable,
    dvc killed) shows here as a lock entry that does not match the stage's files.
    """
    unlocked: set[str] = set()
    unknown = False
    for child, state in zip(children, statuses, strict=True):
        name = child.data.tags.get("tagrpo.dvc_stage")
        if state != "FINISHED" or not name:
            continue
        matches = lock_entry_matches(root, name, dvc_exited_at) if root is not None else None
        if matches is None:
            unknown = True
            client.set_tag(child.info.run_id, LOCKED_TAG, "unknown")
            continue
        client.set_tag(child.info.run_id, LOCKED_TAG, str(matches).lower())
        if not matches:
            unlocked.add(child.info.run_id)
            note = child.data.tags.get("mlflow.note.content", "")
            client.set_tag(
                child.info.run_id,
                "mlflow.note.content",
                f"{note}\n\n" * bool(note) + f"The stage command succeeded, but dvc.lock does "
                f"not record its result ({name}'s entry does not match its files): dvc failed "
                "after it, so DVC did not keep this work. Ended FAILED by the pipeline's watcher.",
            )
            client.set_terminated(child.info.run_id, status="FAILED")
    return unlocked, unknown


def _failure_text(child: Any, status: str, unlocked: set[str]) -> str:
    """One stage's failure: its DVC name, how it ended, its exit status and error."""
    tags = child.data.tags
    name = tags.get("tagrpo.dvc_stage", child.info.run_id)
    if child.info.run_id in unlocked:
        return f"{name} (its command succeeded; dvc did not record it in dvc.lock)"
    code = tags.get(EXIT_CODE_TAG)
    how = f"exit status {code}" if code else status
    error = tags.get(ERROR_TAG)
    return f"{name} ({how}{': ' + error if error else ''})"


def _first_failure(
    children: list[Any], statuses: list[str], unlocked: set[str]
) -> dict[str, str] | None:
    """The parent's tags naming the first stage that did not finish, and its exit status."""
    for child, status in zip(children, statuses, strict=True):
        if status != "FINISHED":
            return {
                FAILED_STAGE_TAG: child.data.tags.get("tagrpo.dvc_stage", child.info.run_id),
                EXIT_CODE_TAG: child.data.tags.get(EXIT_CODE_TAG)
                or (
                    "unknown (dvc failed after the stage)"
                    if child.info.run_id in unlocked
                    else f"unknown ({status})"
                ),
            }
    return None


def _dvc_exit(children: list[Any], statuses: list[str], unlocked: set[str], unknown: bool) -> str:
    """What ``tagrpo.dvc_exit`` says: dvc's exit status as far as its stage runs tell it (its
    watcher is not dvc's parent and cannot read the status itself)."""
    failed = [
        _failure_text(c, s, unlocked)
        for c, s in zip(children, statuses, strict=True)
        if s != "FINISHED"
    ]
    if failed:
        return ("nonzero: stage(s) did not finish: " + "; ".join(failed))[:5000]
    if unknown:
        return (
            "unknown: some stage runs could not be checked against dvc.lock (no dvc.lock, or "
            "their files changed after dvc exited)"
        )
    return (
        "unknown: every stage run it started is recorded in dvc.lock "
        "(0 unless dvc failed at a step no stage run shows)"
    )


def finish_orphaned_runs(client: Any, experiment_id: str, found_by: str = "a later stage") -> int:
    """Parent runs of dvc processes on this host that are gone, but still RUNNING, and whose
    watcher is gone too: ended at once, without waiting for their children (their dvc exited
    at some unknown earlier time, so any grace for its stages is the watcher's, and the stage
    running this sweep must not wait, holding the pipeline lock, for another invocation's)."""
    host = socket.gethostname()
    runs = client.search_runs(
        [experiment_id],
        filter_string=(
            f"tags.`{ORIGIN_TAG}` = 'dvc' and tags.`tagrpo.host` = '{host}' "
            "and attributes.status = 'RUNNING'"
        ),
    )
    finished = 0
    for run in runs:
        _, pid, ticks = run.data.tags.get(PIPELINE_KEY_TAG, "::").rsplit(":", 2)
        if pid.isdigit() and ticks.isdigit() and process_alive(int(pid), int(ticks)):
            continue
        if _watcher_alive(run.data.tags.get(WATCHER_TAG, "")):
            continue  # dvc just exited: its watcher is giving the stages their grace
        if finish_run(client, run.info.run_id, wait_until=None) == "KILLED":
            client.set_tag(
                run.info.run_id,
                KILLED_REASON_TAG,
                f"the dvc process {pid} on {host} that ran it is gone, and so is its watcher; "
                f"a stage it ran did not finish (found by {found_by})",
            )
        finished += 1
    return finished


def reap_dead_runs(client: Any, found_by: str) -> list[str]:
    """End every run of the store left RUNNING on this host by a process that is gone: dvc's
    parent runs from their stages' states (:func:`finish_orphaned_runs`, under the pipeline
    lock), every other run (a stage's, the Prefect flow's parent) KILLED with the reason in
    ``tagrpo.killed_reason``. Returns one line per run ended. Not from inside
    :func:`_pipeline_lock` (this takes it)."""
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    ended: list[str] = []
    with _pipeline_lock(home_root()):
        for experiment_id in experiment_ids:
            finished = finish_orphaned_runs(client, experiment_id, found_by)
            if finished:
                ended.append(f"{finished} dvc pipeline run(s) whose dvc process is gone ended")
    for run, reason in dead_owner_runs(client, experiment_ids):
        mark_run_killed(client, run.info.run_id, f"{reason} (found by {found_by})")
        ended.append(f"run {run.info.run_name!r} ({run.info.run_id}) KILLED: {reason}")
    return ended


def _watcher_alive(key: str) -> bool:
    pid, _, ticks = key.partition(":")
    return pid.isdigit() and ticks.isdigit() and process_alive(int(pid), int(ticks))


def watch(run_id: str, pid: int, start_ticks: int, client: Any = None) -> str:
    """Wait for the dvc process to exit, then end its parent run."""
    if client is None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient()
    while process_alive(pid, start_ticks):
        time.sleep(_POLL_SECONDS)
    exited_at = time.time()  # files changed later are the next command's (the user's)
    grace_ends = time.monotonic() + _CHILD_GRACE_SECONDS  # from dvc's exit
    if client.get_run(run_id).info.status != "RUNNING":
        return client.get_run(run_id).info.status  # finished meanwhile by an orphan sweep
    status = finish_run(client, run_id, wait_until=grace_ends, dvc_exited_at=exited_at)
    print(f"[pipeline-run] dvc process {pid} exited: run {run_id} {status}", flush=True)
    return status


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "watch":
        raise SystemExit("usage: python -m tagrpo.pipeline.parent_run watch RUN_ID PID START_TICKS")

    watch(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
