"""The study as one Prefect flow (``make study``; ``preregistration/study-v3.md``, "Execution"):
the pilot's draws, then the main study's once its size is committed, at most ``--jobs`` draws
side by side (Prefect's thread-pool task runner with that concurrency limit), each a task that
builds one draw's checkout with ``dvc repro`` and commits its record
(:mod:`tagrpo.pipeline.study_run`). A progress line every ``--every`` seconds: draws done of
total, each running draw's stages and the time left at its pace. When the main study's last
draw is recorded, the flow writes the study's report (``python -m tagrpo.report.study --main``)
and commits it.

Run again after a kill, a reboot or a lost session, it resumes: recorded draws are skipped,
a draw with a checkout resumes where its dvc.lock stands (DVC reruns nothing finished), a draw
whose checkout is gone (a lost machine) starts from its committed progress
(:func:`tagrpo.pipeline.study_run.restore_progress`; ``dvc repro --allow-missing`` skips the
finished stages whose trained models were not kept), and ``dvc repro`` and its stages die with
the flow (:func:`flows.interrupts.start_child`).

    python -m flows.study                 # every phase (the main study once `size` is committed)
    python -m flows.study --phase pilot --jobs 2
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

from flows.interrupts import (
    chain_sigterm,
    forget_child,
    install_handlers,
    interrupted,
    owner_tag,
    prefect_api,
    start_child,
)
from tagrpo.pipeline.study_run import (
    PHASES,
    REGISTRATION,
    DrawPlan,
    StudyError,
    build_order,
    commit_paths,
    environment,
    execute_draw,
    git,
    phase_commit,
    plan_phase,
    progress_line,
    read_registration,
    study_dir,
    tool,
)
from tagrpo.plumbing.paths import project_root


def _build(checkout: Path, log: Path, root: Path) -> int:
    """``dvc repro --allow-missing`` in the draw's checkout, one evaluation at a time and then
    the whole pipeline (:func:`tagrpo.pipeline.study_run.build_order`), each a child of the flow
    (its own process group, dying with the flow), its output appended to ``log``; the first
    nonzero exit status ends the build."""
    log.parent.mkdir(parents=True, exist_ok=True)
    for targets in build_order(checkout):
        command = [tool("dvc"), "repro", "--allow-missing", *targets]
        process = start_child(command, checkout, environment(checkout, root))
        try:
            with log.open("ab") as out:
                when = time.strftime("%Y-%m-%d %H:%M:%S")
                out.write(f"\n=== {when} {' '.join(command[1:])}\n".encode())
                assert process.stdout is not None
                for line in process.stdout:
                    out.write(line)
                    out.flush()
            status = process.wait()
        finally:
            forget_child(process)
        if status != 0:
            return status
    return 0


@task(task_run_name="{plan.label}")
def build_draw(
    root: str, plan: DrawPlan, commit: str, cache: str, keep_every: float = 30.0
) -> dict[str, Any]:
    return execute_draw(
        Path(root),
        plan,
        commit,
        Path(cache),
        say=lambda line: print(line, flush=True),
        build=_build,
        progress_every=keep_every,
    )


def _report_progress(
    root: Path,
    plans: list[DrawPlan],
    seen: dict[str, int],
    stop: threading.Event,
    every: float,
) -> None:
    while not stop.wait(every):
        with contextlib.suppress(Exception):  # a progress line must never stop the study
            print(progress_line(root, plans, seen), flush=True)


@flow(name="study", log_prints=True)
def study(phases: list[str], every: float = 60.0, keep_every: float = 30.0) -> dict[str, Any]:
    chain_sigterm()  # a SIGTERM stops the dvc children before Prefect's engine handles it
    root = project_root()
    registration = read_registration(root)
    outcome: dict[str, Any] = {}
    for phase in phases:
        try:
            plans = plan_phase(registration, phase)
        except StudyError as error:
            print(f"study: {phase} not started: {error}")
            outcome[phase] = f"not started: {error}"
            continue
        commit = phase_commit(root, phase)
        cache = study_dir(root) / "cache"
        seen: dict[str, int] = {}
        print(f"study: {phase}: {len(plans)} draws at {commit[:12]}; " + progress_line(root, plans))
        stop = threading.Event()
        reporter = threading.Thread(
            target=_report_progress, args=(root, plans, seen, stop, every), daemon=True
        )
        reporter.start()
        try:
            futures = [
                build_draw.submit(str(root), plan, commit, str(cache), keep_every) for plan in plans
            ]
            results = [future.result() for future in futures]
        finally:
            stop.set()
        outcome[phase] = [r["label"] for r in results]
        print(progress_line(root, plans, seen))
    if isinstance(outcome.get("main"), list):
        outcome["report"] = write_main_report(root)
    return outcome


def write_main_report(root: Path) -> str:
    """Once every main draw is recorded: the study's report (``python -m tagrpo.report.study
    --main``), written and committed, so the study's result does not wait for a session; a
    report the records cannot make is said, not written."""
    from tagrpo.report.study import MAIN_REPORT, ReportRefused, main_report

    with contextlib.chdir(root):
        try:
            report, verdict = main_report()
        except ReportRefused as refusal:
            print(f"study: the main report was not written: {refusal}")
            return f"not written: {refusal}"
    if git(root, "status", "--porcelain", "--", str(MAIN_REPORT)):
        commit_paths(root, [root / MAIN_REPORT], f"Study main: the report ({MAIN_REPORT})")
    print(f"study: {report}: V5 over the draws {verdict}")
    return str(report)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m flows.study", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--phase",
        action="append",
        choices=PHASES,
        default=None,
        help="pilot or main (repeatable; default: both in order)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="draws side by side (default 2)")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between progress lines")
    parser.add_argument(
        "--keep-every",
        type=float,
        default=30.0,
        help="seconds between checks for newly recorded stages to commit as progress (default 30)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    try:
        read_registration(project_root(), REGISTRATION)
    except (OSError, StudyError) as error:
        print(f"python -m flows.study: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    sys.exit(_run(list(args.phase or PHASES), args.jobs, args.every, args.keep_every))


def _run(phases: list[str], jobs: int, every: float, keep_every: float = 30.0) -> int:
    from prefect import tags
    from prefect.exceptions import TerminationSignal

    install_handlers()
    try:
        with prefect_api():
            runner = study.with_options(task_runner=ThreadPoolTaskRunner(max_workers=jobs))
            with tags(owner_tag()):
                print(runner(phases=phases, every=every, keep_every=keep_every))
            return 0
    except StudyError as error:
        print(f"python -m flows.study: {error}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, TerminationSignal):
        signum = interrupted()
        if signum is None:
            raise
        print(
            f"python -m flows.study: stopped by {signal.Signals(signum).name}; `make study` "
            "resumes every draw where it stands",
            file=sys.stderr,
        )
        return 128 + signum


if __name__ == "__main__":
    main()
