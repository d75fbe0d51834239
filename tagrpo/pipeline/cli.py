"""The ``tagrpo`` command line.

    tagrpo grade --input IN.jsonl --output OUT.jsonl [--workers N] [--item-timeout S]
                 [--skip-invalid] [--grader tagrpo|math_reward|math_verify]
    tagrpo grade --parity --input RESPONSES.parquet|SAMPLE_STORE --output OUT.md
                 [--benchmarks DIR] [--ks 1,2,4]   (every grader, nothing sampled)
    tagrpo params apply PROFILE.yaml [--params params.yaml]
    tagrpo params restore   (back to git HEAD's params, dvc.lock and outputs after a profile run)
    tagrpo params check [FILE]
    tagrpo params explain [KEY] [--file params.yaml]
    tagrpo plan [-S key=value ...] [--profile P]   (what dvc repro would rerun, and why)
    tagrpo plots show|diff [DVC PLOTS ARGS]   (offline page: dvc_plots/index.html)
    tagrpo verify [PATH ...]   (outputs rehashed and compared with dvc.lock; dead runs ended)
    tagrpo compare [--method M ...] [--k K ...] [--benchmark B ...] [--profile P]
                   [--checkout all|HOST:PATH] [--experiment NAME] [--tracking-uri URI]
                   [--format text|markdown|csv]

Adding a command: write ``_cmd_<name>(args) -> int`` (the exit status) and one ``add_parser``
block in :func:`build_parser` that ends with ``set_defaults(handler=_cmd_<name>)``. Import heavy
modules (pydantic's typed params, numpy, mlflow, dvc) inside the command function so that
``tagrpo --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tagrpo.grading.kinds import GRADERS
from tagrpo.pipeline.grade_command import cmd_grade
from tagrpo.pipeline.plots import dvc_plots
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.verify import restore_command, stale_lock_entries, verify_outputs

# --- params ----------------------------------------------------------------------------------


def _cmd_params_apply(args: argparse.Namespace) -> int:
    # Here and below: the typed params (pydantic), the method registry (numpy) and mlflow load
    # only in the command that needs them, so that ``tagrpo --help`` stays fast.
    from tagrpo.config.params import ConfigError, default_params_path
    from tagrpo.config.profiles import apply_profile, kept_from_earlier_profile
    from tagrpo.plumbing.verify import prune_lock

    target = Path(args.params) if args.params else default_params_path()
    if _dvc_running("apply", target.resolve().parent):
        return 2
    try:
        stacked = kept_from_earlier_profile(args.profile, args.params)
        merged = apply_profile(args.profile, args.params)
    except (ConfigError, OSError) as error:
        print(f"tagrpo params apply: {error}", file=sys.stderr)
        return 2
    print(f"applied {args.profile}: profile is now {merged.common.profile!r}")
    # The new params may drop matrix items (another profile's methods and seeds): their
    # dvc.lock entries would describe outputs the new stages write too.
    pruned = prune_lock(target.resolve().parent) if target.name == "params.yaml" else []
    if pruned:
        shown = ", ".join(pruned[:4]) + (f" and {len(pruned) - 4} more" if len(pruned) > 4 else "")
        print(
            f"dvc.lock: removed {len(pruned)} entries of stages these params do not have "
            f"({shown}); `tagrpo params restore` restores both"
        )
    if target.name == "params.yaml":
        _say_rewritten(target.resolve().parent)
    if stacked:
        earlier, kept = stacked
        print(
            f"note: stacked on profile {earlier!r}, already applied to the params: "
            f"{len(kept)} of its keys stay as it set them, {args.profile} does not set them:"
        )
        print("\n".join(f"  {line}" for line in kept))
        print(
            f"  to apply {args.profile} on the embedded default alone: git checkout HEAD -- "
            "params.yaml, then apply it again"
        )
    return 0


def _dvc_running(command: str, root: Path) -> bool:
    """Refuse (True, with a line) while a dvc process runs stages in ``root``."""
    from tagrpo.pipeline.runtime import other_dvc_runs

    running = other_dvc_runs(root)
    if running:
        pid, line = running[0]
        print(
            f"tagrpo params {command}: a dvc process runs stages in this checkout (pid {pid}: "
            f"{line}): changing its params mid-run would mix two experiments; wait for it "
            "to end",
            file=sys.stderr,
        )
    return bool(running)


def _say_rewritten(root: Path) -> None:
    """Which of the committed run's outputs (files git tracks) the next dvc repro rewrites."""
    from tagrpo.pipeline.restore import RestoreError, summarise, tracked_outputs_rewritten

    if not (root / "dvc.yaml").is_file():
        return  # params of no pipeline here: nothing reruns
    try:
        files = tracked_outputs_rewritten(root)
    except RestoreError:  # not a git work tree, or no commit yet: no tracked output to rewrite
        return
    except (OSError, KeyError, ValueError) as error:
        print(f"note: not known which committed outputs the next dvc repro rewrites: {error}")
        return
    if files:
        print(
            f"warning: the next `dvc repro` rewrites {len(files)} file(s) git tracks, the "
            f"committed run's outputs: {summarise(files)}"
        )
        print(
            "  after the run, `tagrpo params restore` brings back params.yaml, dvc.lock and "
            "these as git HEAD has them, then the cached outputs (dvc checkout)"
        )


def _cmd_params_restore(args: argparse.Namespace) -> int:
    from tagrpo.pipeline.restore import RestoreError, report_lines, restore_committed

    root = project_root()
    if _dvc_running("restore", root):
        return 2
    try:
        restored = restore_committed(root)
    except RestoreError as error:
        print(f"tagrpo params restore: {error}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(restored)))
    return 0 if restored.checkout_ok else 1


def _cmd_params_check(args: argparse.Namespace) -> int:
    from tagrpo.config.params import ConfigError, load_config

    try:
        config = load_config(args.file)
    except (ConfigError, OSError) as error:
        print(f"tagrpo params check: {error}", file=sys.stderr)
        return 2
    print(
        f"{args.file or 'params.yaml'}: valid (profile {config.common.profile!r}, "
        f"{len(config.runs.policies())} trained policies: {', '.join(config.runs.policies())})"
    )
    return 0


def _cmd_params_explain(args: argparse.Namespace) -> int:
    from tagrpo.config.explain import explain
    from tagrpo.plumbing.config_model import redact_secrets

    try:
        print(redact_secrets(explain(args.key, args.file)))
    except (KeyError, ValueError, OSError) as error:
        print(f"tagrpo params explain: {error}", file=sys.stderr)
        return 2
    return 0


# --- plan ----------------------------------------------------------------------------------


def _cmd_plan(args: argparse.Namespace) -> int:
    from tagrpo.config.params import ConfigError
    from tagrpo.pipeline.plan import plan_rerun, render_plan
    from tagrpo.pipeline.rerun import RerunRequest

    request = RerunRequest(profile=args.profile, overrides=list(args.overrides))
    try:
        if args.cost and args.models:
            from tagrpo.pipeline.plan import render_models

            print(
                render_models(project_root(), request, args.models, args.questions, args.problems)
            )
            return 0
        if args.cost:
            from tagrpo.pipeline.plan import render_cost

            print(render_cost(project_root(), request, args.questions, args.problems))
            return 0
        plan = plan_rerun(project_root(), request)
    except (ConfigError, OSError, RuntimeError, KeyError, ValueError) as error:
        print(f"tagrpo plan: {error}", file=sys.stderr)
        return 2
    print(render_plan(plan))
    return 0


# --- compare ---------------------------------------------------------------------------------


def _checkout_config() -> Any:
    """The checkout's params (None outside a checkout or when params.yaml does not load)."""
    from tagrpo.config.params import ConfigError, load_config

    try:
        return load_config()
    except (ConfigError, OSError):
        return None


def _cmd_compare(args: argparse.Namespace) -> int:
    from tagrpo.pipeline.compare import (
        ALL_CHECKOUTS,
        by_checkout,
        compare,
        latest_evaluations,
        render,
    )
    from tagrpo.plumbing.tracking import checkout_id, tracking_uri

    config = _checkout_config()
    settings = config.common.tracking if config is not None else None
    uri = args.tracking_uri or tracking_uri(settings.uri if settings else None)
    experiment = args.experiment or (settings.experiment if settings else "tagrpo")
    # The checkout's profile, not whatever ran last: after a smoke run the table would
    # otherwise silently show the smoke profile's numbers.
    profile = args.profile or (config.common.profile if config is not None else None)
    if profile is None:
        print(
            "tagrpo compare: no valid params.yaml here to take the profile from: pass --profile",
            file=sys.stderr,
        )
        return 2
    checkout = None if args.checkout == ALL_CHECKOUTS else args.checkout or checkout_id()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        runs = latest_evaluations(client, experiment, profile, checkout)
        tables = [
            compare(group, profile, args.method, args.k, args.benchmark)
            for group in by_checkout(runs).values()
        ]
    except LookupError as error:
        print(f"tagrpo compare: {error} ({uri})", file=sys.stderr)
        return 2
    tables = [table for table in tables if table.rows]
    if not tables:
        print(f"tagrpo compare: no pass@k matches the filters ({uri})", file=sys.stderr)
        return 2
    if args.format == "csv":  # one header; each row names its checkout
        rendered = [render(table, "csv") for table in tables]
        print(rendered[0] + "".join(text.split("\n", 1)[1] for text in rendered[1:]), end="")
    else:
        print("\n\n".join(render(table, args.format) for table in tables))
    return 0


# --- plots -----------------------------------------------------------------------------------


def _cmd_plots(args: argparse.Namespace) -> int:
    try:
        return dvc_plots([args.action, *args.dvc_args])
    except (FileNotFoundError, ValueError) as error:
        print(f"tagrpo plots: {error}", file=sys.stderr)
        return 2


# --- verify ----------------------------------------------------------------------------------


def _end_dead_runs() -> None:
    """End the runs of the checkout's MLflow store left RUNNING by a process that is gone
    (``kill -9``): a store that does not exist is not created, one that fails is named and
    verify goes on (its answer is about the outputs)."""
    from tagrpo.pipeline.parent_run import reap_dead_runs
    from tagrpo.plumbing.tracking import open_store, sqlite_path, store_failure, tracking_uri

    config = _checkout_config()
    settings = config.common.tracking if config is not None else None
    if settings is not None and not settings.enabled:
        return
    uri = tracking_uri(settings.uri if settings is not None else None)
    database = sqlite_path(uri)
    if database is not None and not database.is_file():
        return
    try:
        ended = reap_dead_runs(open_store(uri), "tagrpo verify")
    except Exception as error:  # the store's failure must not hide the outputs' check
        print(f"tagrpo verify: MLflow runs not checked ({uri}): {store_failure(error)}")
        return
    for line in ended:
        print(f"MLflow: {line}")


def _cmd_verify(args: argparse.Namespace) -> int:
    from tagrpo.plumbing.dvc_stages import load_stages

    root = project_root()
    _end_dead_runs()
    # The pipeline under the current params: dvc.lock keeps the entries of stages the params
    # dropped (another profile's matrix items), whose outputs are rightly absent.
    stages = set(load_stages(root))
    stale = stale_lock_entries(root, stages)
    try:
        checked, mismatches = verify_outputs(root, args.paths or None, stages)
    except KeyError as error:
        print(f"tagrpo verify: {error.args[0]}", file=sys.stderr)
        return 2
    if stale:
        names = sorted(stale)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        print(
            f"not checked: {sum(map(len, stale.values()))} output(s) of {len(stale)} dvc.lock "
            f"entries of stages the current params do not have ({shown})"
        )
    if not checked:
        print("tagrpo verify: dvc.lock lists no outputs (run dvc repro first)", file=sys.stderr)
        return 2
    for mismatch in mismatches:
        print(f"tagrpo verify: {mismatch.describe()}", file=sys.stderr)
    print(f"{len(checked)} output(s) of dvc.lock checked by content: {len(mismatches)} differ")
    if mismatches:
        paths = " ".join(m.path for m in mismatches)
        print(f"tagrpo verify: to restore them: {restore_command(paths)}", file=sys.stderr)
    return 1 if mismatches else 0


# --- parser ----------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tagrpo",
        description="TA-GRPO pipeline tools. A mistake in the input prints one line; "
        "--traceback (anywhere) or TAGRPO_TRACEBACK=1 prints the full trace.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    grade = commands.add_parser(
        "grade",
        help="grade responses against gold answers (JSONL in, JSONL out)",
        description="Each input line: id, response, answer, optional benchmark and "
        "answer_kind. Each output line: id, correct, pred, reason (input order). With "
        "--parity: saved samples (an evaluation's responses.parquet or a sample store) graded "
        "by every grader, the grader-parity tables written as markdown; nothing is sampled.",
    )
    grade.add_argument(
        "--input",
        required=True,
        help="JSONL: id, response, answer[, benchmark]; with --parity: evals/<policy>/"
        "responses.parquet or a sample-store folder",
    )
    grade.add_argument(
        "--output", required=True, help="JSONL: id, correct, pred, reason; with --parity: .md"
    )
    grade.add_argument(
        "--grader",
        choices=GRADERS,
        default="tagrpo",
        help="who grades math answers (common.grading.grader; default tagrpo)",
    )
    grade.add_argument(
        "--parity", action="store_true", help="grade saved samples by every grader (markdown)"
    )
    grade.add_argument(
        "--benchmarks",
        default="data/processed/benchmarks",
        help="--parity over a sample store: the benchmark parquet files its chunks were drawn "
        "from (default data/processed/benchmarks)",
    )
    grade.add_argument("--ks", default="", help="--parity: the ks of pass@k (default 1,...,32)")
    grade.add_argument(
        "--workers", type=_positive_int, default=2, help="grading processes (default 2)"
    )
    grade.add_argument(
        "--item-timeout",
        type=_positive_float,
        default=5.0,
        help="CPU-time budget per answer in seconds (default 5); the wall clock only backs it "
        "up, at 3x the budget + 10 s",
    )
    grade.add_argument(
        "--skip-invalid",
        action="store_true",
        help="write invalid input lines as rejected rows (reason invalid_input) instead of "
        "stopping with an error",
    )
    grade.set_defaults(handler=cmd_grade)

    params = commands.add_parser("params", help="params.yaml tools")
    params_commands = params.add_subparsers(dest="params_command", required=True)
    apply = params_commands.add_parser("apply", help="merge a profile into params.yaml")
    apply.add_argument("profile", help="profile override file, e.g. profiles/local.yaml")
    apply.add_argument("--params", default=None, help="params file (default: ./params.yaml)")
    apply.set_defaults(handler=_cmd_params_apply)
    restore = params_commands.add_parser(
        "restore",
        help="back to the committed params after a profile run: params.yaml, dvc.lock and the "
        "outputs git tracks as HEAD has them, then dvc checkout",
        description="Restores params.yaml, dvc.lock and every file git tracks among the "
        "outputs of the committed pipeline and of the current params' pipeline (metrics, plots, "
        "the report, DVC's .gitignore files) from git HEAD, in the index and the work tree (a "
        "file the run added and DVC staged is removed), then runs `dvc checkout` for the cached "
        "outputs; dvc checkout also deletes the outputs of the profile's own stages, each "
        "named. Exit 1 when dvc checkout could not restore every cached output (one this clone "
        "never made: `dvc repro` makes it).",
    )
    restore.set_defaults(handler=_cmd_params_restore)
    check = params_commands.add_parser(
        "check", help="validate a params file (types, bounds, unknown keys, combinations)"
    )
    check.add_argument("file", nargs="?", default=None, help="default: ./params.yaml")
    check.set_defaults(handler=_cmd_params_check)
    explain = params_commands.add_parser(
        "explain", help="type, value, bounds and help of a key or section"
    )
    explain.add_argument("key", nargs="?", default="", help="e.g. train.learning_rate, or train")
    explain.add_argument("--file", default=None, help="params file for the current value")
    explain.set_defaults(handler=_cmd_params_explain)

    plan = commands.add_parser(
        "plan",
        help="which DVC stages a params change would rerun, and why (runs nothing)",
        description="Resolves the change as a rerun does (params.yaml, then the profile, then "
        "the -S overrides, validated like `tagrpo params check`) and lists the stages `dvc "
        "repro` would run with it, in order, each with its reason: params it declares that "
        "change, a command that changes, no entry in dvc.lock, a changed dependency or a missing "
        "output in the checkout (`dvc status`), or an upstream stage that runs. The checkout's "
        "params.yaml and outputs are not touched.",
    )
    plan.add_argument(
        "-S",
        "--set",
        action="append",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="a params key to change (value in YAML), e.g. train.learning_rate=2e-4; repeatable",
    )
    plan.add_argument(
        "--profile",
        default="current",
        help="merge profiles/PROFILE.yaml first (default: params.yaml as it is)",
    )
    plan.add_argument(
        "--cost",
        action="store_true",
        help="instead: memory per card, GPU-hours, tokens and disk of every training and "
        "evaluation of the verl DAG (docs/paper-scale.md, Cost)",
    )
    plan.add_argument(
        "--questions",
        type=_positive_int,
        default=None,
        help="--cost: questions in the 1x training set (default: the training set built here, "
        "refused unless this profile's data stage built it)",
    )
    plan.add_argument(
        "--problems",
        type=_positive_int,
        default=None,
        help="--cost: benchmark problems evaluated (default: the benchmarks built here, "
        "refused unless this profile's data stage built them)",
    )
    plan.add_argument(
        "--models",
        nargs="+",
        default=None,
        metavar="HUB_ID",
        help="--cost: instead, what one run needs, a column per base model "
        "(base_model.hub.hub_id), e.g. --models Qwen/Qwen3-1.7B Qwen/Qwen3-4B",
    )
    plan.set_defaults(handler=_cmd_plan)

    compare = commands.add_parser(
        "compare",
        help="pass@k with intervals of each method's latest evaluation, from MLflow",
        description="Queries the tracking store for each policy's latest finished evaluate run "
        "(one profile: by default that of the checkout's params.yaml; by default only this "
        "checkout's runs, --checkout all for one table per checkout) and prints pass@k per "
        "benchmark and group with 95% intervals, one column per method. A one-seed interval "
        "(marked *) is over problems, conditional on that seed; a table of runs from several "
        "commits says so.",
    )
    compare.add_argument("--method", action="append", help="only these methods (repeatable)")
    compare.add_argument("--k", type=_positive_int, action="append", help="only these k")
    compare.add_argument("--benchmark", action="append", help="only these benchmarks/groups")
    compare.add_argument("--profile", help="default: common.profile of the checkout's params")
    compare.add_argument(
        "--checkout",
        help="'all' (a table per checkout) or a tagrpo.checkout tag value HOST:PATH; "
        "default: this checkout",
    )
    compare.add_argument("--experiment", help="default: common.tracking.experiment")
    compare.add_argument(
        "--tracking-uri", help="default: MLFLOW_TRACKING_URI, else the checkout's mlflow.db"
    )
    compare.add_argument("--format", choices=("text", "markdown", "csv"), default="text")
    compare.set_defaults(handler=_cmd_compare)

    plots = commands.add_parser(
        "plots",
        help="dvc plots show/diff with the offline page template (no CDN)",
        description="Runs `dvc plots show|diff ARGS --html-template .dvc/plots/offline.html`, "
        "building that template from the npm packages first if it is missing.",
    )
    plots.add_argument("action", choices=("show", "diff"))
    plots.add_argument("dvc_args", nargs=argparse.REMAINDER, help="passed to dvc plots")
    plots.set_defaults(handler=_cmd_plots)

    verify = commands.add_parser(
        "verify",
        help="rehash outputs and compare with dvc.lock (finds changes DVC's mtime cache misses)",
        description="Hashes each output dvc.lock lists (or those at or under PATH) as DVC does "
        "and compares: exit 1 naming every output (and, from DVC's cache, every file) that "
        "differs or is missing. First ends the MLflow runs of the checkout's store left RUNNING "
        "by a process of this host that is gone (KILLED, the reason in tagrpo.killed_reason).",
    )
    verify.add_argument("paths", nargs="*", help="outputs or folders, e.g. models/grpo-s0")
    verify.set_defaults(handler=_cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    traceback_flag = "--traceback"  # anywhere on the line, as for the stages
    show_traceback = traceback_flag in argv or os.environ.get("TAGRPO_TRACEBACK", "") not in (
        "",
        "0",
    )
    args = build_parser().parse_args([arg for arg in argv if arg != traceback_flag])
    try:
        return int(args.handler(args))
    except Exception as error:
        from tagrpo.pipeline.runtime import as_user_error, user_message

        mistake = as_user_error(error)
        if show_traceback or mistake is None:
            raise
        print(
            f"tagrpo {args.command}: {user_message(mistake)} (--traceback or TAGRPO_TRACEBACK=1 "
            "for the traceback)",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
