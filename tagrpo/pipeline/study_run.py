"""The study command's work, one base draw at a time (``preregistration/study-v3.md``,
"Execution"; the Prefect flow ``flows/study.py`` runs the draws side by side).

A draw is a checkout of its own: a clone of the project under ``<study dir>/<phase>-draw<seed>``
(:func:`study_dir`: ``.tagrpo/study`` or ``$TAGRPO_STUDY_DIR``; a self-contained clone, so a
draw's checkout outlives a work tree laid anew) at the commit its phase started from
(recorded and committed in ``reports/study/<phase>/STARTED.json`` before the first draw, so a
resumed or restarted draw runs the same code), the phase's profile applied and the SFT seed
(and, for the main study, the seeds S gives) set, built by ``dvc repro``. All draws share one
DVC cache (a file several draws write alike is stored once); DVC's run cache skips stages with
``persist`` outputs (every stage here), so each draw runs every one of its stages.

**Resuming** is DVC's: a killed draw's checkout keeps its ``dvc.lock``, and ``dvc repro`` there
runs only the stages not yet recorded (a stage killed mid-way left its old outputs or none:
``tagrpo/pipeline/runtime.py`` commits a stage's outputs only when it finished). A draw whose
record is committed is never run again. ``dvc repro`` dies with the flow that starts it
(:func:`flows.interrupts.start_child`), and each stage with ``dvc repro``, so a ``kill -9``
leaves nothing running.

**The record** of a finished draw, committed at once under ``reports/study/<phase>/draw<seed>/``:
its params and ``dvc.lock``; its metrics, plots tables, probes and diagnostics (files up to
:data:`RECORD_LIMIT_BYTES`); every policy's pass@k table and per-response outcomes
(``evals/<policy>/responses.parquet`` with only :data:`OUTCOME_COLUMNS`: what the study's analysis
reads); its per-draw report; and ``DRAW.json`` (the plan, the commit, the device, the seconds).
The record has a checkout's layout, so ``python -m tagrpo.report.draws --run x=<record>`` and
the study's analysis read it as they read a built checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tagrpo.plumbing.device import describe_device
from tagrpo.plumbing.verify import lock_stages

REGISTRATION = Path("preregistration/study-v3.yaml")
STUDY_DIR = Path(".tagrpo/study")
STUDY_DIR_ENV = "TAGRPO_STUDY_DIR"
RECORDS = Path("reports/study")
PHASES = ("pilot", "main")
RECORD_LIMIT_BYTES = 10 * 2**20
# The columns of an evaluation's responses that the study's analysis reads (per-problem pass@k,
# V3's paths): the response texts stay in the draw's checkout (DVC cache).
OUTCOME_COLUMNS = ("benchmark", "question_id", "correct", "strategy")
# What a record copies from a built checkout (folders walked, files up to the size limit).
RECORD_FOLDERS = ("metrics", "plots", "probes", "diagnostics")
RECORD_REPORT = ("reports/report.md", "reports/claims.md", "reports/tables", "reports/sections")
# The 1x training questions (the report's strategy section reads their phrasings).
RECORD_FILES = ("params.yaml", "dvc.lock", "data/processed/train.parquet")
DRAW_FILE = "DRAW.json"
BUILD_START_FILE = ".tagrpo/study-build-start.json"  # in a draw's checkout
# A draw's progress (its finished stages' outputs, models left out), committed while it builds
# so that a lost machine loses only the runs in flight:
# reports/study/<phase>/progress/<device key>/draw<seed>. One folder per device kind: a draw is
# never split across devices, so a machine of another kind builds the draw from its start in
# its own folder and the other kind's progress stays for a later machine of that kind.
PROGRESS = "progress"
PROGRESS_FILE = "PROGRESS.json"
# The one model a progress keeps: every training of the draw reads it. A trained policy's
# model (7 MB each, about 29 per main draw) is not kept: the stages reading it are its
# evaluation and the diagnostics; a policy they still need on a new machine is trained again.
KEPT_MODELS = ("models/base",)
# The diagnostics stage's DVC dependency is the whole `models` folder, but it reads only the
# base and its policies' checkpoints (params `diagnostics.policies`): those it still needs.
FOLDER_READERS = {"diagnostics": "models"}


class StudyError(RuntimeError):
    """A study that cannot go on as registered: the message names what to fix."""


@dataclass(frozen=True)
class DrawPlan:
    """One base draw of one phase: its profile and the params set on top of it."""

    phase: str
    seed: int
    profile: str
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.phase}-draw{self.seed}"

    def checkout(self, root: Path) -> Path:
        return study_dir(root) / self.label

    def record(self, root: Path) -> Path:
        return root / RECORDS / self.phase / f"draw{self.seed}"

    def progress(self, root: Path, device: str) -> Path:
        """This draw's progress made on ``device`` (:func:`device_key`)."""
        return root / RECORDS / self.phase / PROGRESS / device_key(device) / f"draw{self.seed}"

    def progresses(self, root: Path) -> list[Path]:
        """This draw's progress folders on every device kind that has one."""
        return sorted((root / RECORDS / self.phase / PROGRESS).glob(f"*/draw{self.seed}"))


def device_key(device: str) -> str:
    """A folder name for a device description: its words, then a digest of the whole text (two
    descriptions that differ only in punctuation get two folders)."""
    words = "-".join("".join(c if c.isalnum() else " " for c in device.lower()).split())
    return f"{words[:60].rstrip('-')}-{hashlib.sha256(device.encode()).hexdigest()[:8]}"


def study_dir(root: Path) -> Path:
    """Where the draws' checkouts, their DVC cache and their logs live: ``$TAGRPO_STUDY_DIR``
    (absolute, or relative to the project) or ``.tagrpo/study`` in the project."""
    return root / os.environ.get(STUDY_DIR_ENV, str(STUDY_DIR))


def read_registration(root: Path, path: Path = REGISTRATION) -> dict[str, Any]:
    document = yaml.safe_load((root / path).read_text(encoding="utf-8"))
    if not isinstance(document, dict) or document.get("kind") != "study":
        raise StudyError(f"{path}: not a study pre-registration (kind: study)")
    return document


def main_runs(seeds_per_draw: int) -> dict[str, Any]:
    """The main study's runs for S seeds per draw (study-v3.yaml ``main.runs``): GRPO with
    max(S, 3), the family's other methods with S, the negative control with 2, GRPO on 2.5x
    data with max(S, 2); the diagnostics on every TA-GRPO seed and GRPO's first."""
    if seeds_per_draw < 1:
        raise StudyError(f"seeds per draw must be >= 1, not {seeds_per_draw}")
    family = ["ta_grpo", "ta_grpo_unanchored", "ta_grpo_star", "grpo_ds", "grpo_x4", "grpo_x4_ds"]
    grpo_seeds = list(range(max(seeds_per_draw, 3)))
    return {
        "runs": {
            "methods": ["grpo"],
            "seeds": grpo_seeds,
            "control_methods": ["grpo_flipped"],
            "control_seeds": [0, 1],
            "one_seed_methods": family,
            "one_seed": list(range(seeds_per_draw)),
            "data_scaling": {
                "methods": ["grpo"],
                "multiples": [2.5],
                "seeds": list(range(max(seeds_per_draw, 2))),
            },
        },
        "diagnostics": {
            "policies": [f"ta_grpo-s{s}" for s in range(seeds_per_draw)] + ["grpo-s0"],
        },
    }


def _seed_override(seed: int) -> dict[str, Any]:
    return {"base_model": {"warmstart": {"seed": int(seed)}}}


def plan_phase(registration: Mapping[str, Any], phase: str) -> list[DrawPlan]:
    """The draws of ``phase`` in the registered order; the main study only once its size is
    committed (study-v3.yaml ``size``)."""
    if phase == "pilot":
        pilot = registration["pilot"]
        return [
            DrawPlan("pilot", int(seed), str(pilot["profile"]), _seed_override(seed))
            for seed in pilot["base_draws"]
        ]
    if phase == "main":
        size = registration.get("size")
        if not size:
            raise StudyError(
                "the main study waits for its size: preregistration/study-v3.yaml has no `size` "
                "yet (the pilot's outcome, `python -m tagrpo.report.study --size`, committed "
                "before any main draw)"
            )
        draws, seeds = int(size["draws"]), int(size["seeds_per_draw"])
        order = list(registration["main"]["base_draws_in_order"])
        if not 1 <= draws <= len(order):
            raise StudyError(f"size.draws = {draws}: the registration orders {len(order)} draws")
        runs = main_runs(seeds)
        return [
            DrawPlan(
                "main",
                int(seed),
                str(registration["main"]["profile"]),
                {**_seed_override(seed), **runs},
            )
            for seed in order[:draws]
        ]
    raise StudyError(f"unknown phase {phase!r}: one of {', '.join(PHASES)}")


# --------------------------------------------------------------------------- git and processes


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def git(root: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise StudyError(f"git {' '.join(args)} (in {root}): {done.stderr.strip()}")
    return done.stdout.strip()


def commit_paths(root: Path, paths: list[Path], message: str, attempts: int = 300) -> None:
    """Commit exactly ``paths`` as they are (a removed one as removed: ``git add -A``; ``git
    commit -- paths``: whatever else is staged stays staged),
    retrying (2 s apart) while another git command holds the index lock or a merge is under
    way in the checkout."""
    relative = [str(p.relative_to(root)) for p in paths]
    for attempt in range(attempts):
        added = subprocess.run(
            ["git", "add", "-A", "-f", "--", *relative], cwd=root, capture_output=True, text=True
        )
        done = added
        if added.returncode == 0:
            done = subprocess.run(
                ["git", "commit", "-q", "-m", message, "--", *relative],
                cwd=root,
                capture_output=True,
                text=True,
            )
            if done.returncode == 0:
                return
        busy = "index.lock" in done.stderr or "merge" in done.stderr.lower()
        if not busy or attempt == attempts - 1:
            raise StudyError(f"committing {relative}: {done.stderr.strip() or done.stdout.strip()}")
        time.sleep(2)


def tool(name: str) -> str:
    """A console script of this environment (dvc, tagrpo), beside the running Python."""
    found = Path(sys.executable).parent / name
    return str(found) if found.exists() else name


def environment(checkout: Path, root: Path) -> dict[str, str]:
    """The draw's stage environment: its own code first on the path (never the editable
    install's working tree), this environment's tools, and the benchmark folder of the project
    the checkout lives in (``common.data_dir`` is relative to a checkout, and a draw's checkout
    is elsewhere)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(checkout)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if "TAGRPO_DATA_DIR" not in env and (root / "params.yaml").exists():
        data_dir = yaml.safe_load((root / "params.yaml").read_text())["common"]["data_dir"]
        env["TAGRPO_DATA_DIR"] = str((root / data_dir).resolve())
    return env


# --------------------------------------------------------------------------- phases and draws


def phase_commit(root: Path, phase: str, registration_path: Path = REGISTRATION) -> str:
    """The commit every draw of ``phase`` runs: recorded (and committed) when the phase first
    starts, read back on every later start. The registration must be committed; it may gain
    what it allows later (the main study's size, amendments) but the phase's draws, as planned
    from it, must be what they were when the phase started."""
    started = root / RECORDS / phase / "STARTED.json"
    if started.exists():
        record = json.loads(started.read_text())
        commit = str(record["commit"])
        then = yaml.safe_load(git(root, "show", f"{commit}:{registration_path}"))
        if plan_phase(then, phase) != plan_phase(read_registration(root, registration_path), phase):
            raise StudyError(
                f"{registration_path}: the {phase}'s draws differ from those it started with at "
                f"{commit[:12]}: a changed design is a new study"
            )
        return commit
    if git(root, "status", "--porcelain", "--", str(registration_path)):
        raise StudyError(
            f"{registration_path} has uncommitted changes: commit it before a study run"
        )
    commit = git(root, "rev-parse", "HEAD")
    digest = hashlib.sha256((root / registration_path).read_bytes()).hexdigest()
    started.parent.mkdir(parents=True, exist_ok=True)
    started.write_text(
        json.dumps(
            {
                "phase": phase,
                "commit": commit,
                "registration": str(registration_path),
                "registration_sha256": digest,
                "started": _now(),
            },
            indent=2,
        )
        + "\n"
    )
    commit_paths(root, [started], f"Study {phase} started at {commit[:12]} (reports/study/{phase})")
    return commit


def prepare_checkout(root: Path, plan: DrawPlan, commit: str, cache: Path) -> Path:
    """The draw's checkout, made once (a clone at ``commit``, the shared cache, the profile and
    the draw's params applied, the default's dvc.lock removed: none of its entries is this
    draw's) and afterwards checked against the plan."""
    checkout = plan.checkout(root)
    marker = checkout / ".tagrpo" / "study-draw.json"
    wanted = {"plan": asdict(plan), "commit": commit}
    if marker.exists():
        found = json.loads(marker.read_text())
        if found != wanted:
            raise StudyError(
                f"{checkout} was made for another plan or commit ({found['commit'][:12]}): "
                f"remove it (rm -r {checkout}) to start the draw again"
            )
        return checkout
    if checkout.exists():  # a checkout whose set-up was interrupted: made again
        shutil.rmtree(checkout)
    checkout.parent.mkdir(parents=True, exist_ok=True)
    git(root, "clone", "--quiet", "--no-checkout", str(root), str(checkout))
    git(checkout, "checkout", "--quiet", "--detach", commit)
    env = environment(checkout, root)
    cache.mkdir(parents=True, exist_ok=True)
    for command in (
        [tool("dvc"), "cache", "dir", "--local", str(cache)],
        [tool("tagrpo"), "params", "apply", plan.profile],
    ):
        _run_checked(command, checkout, env)
    (checkout / "dvc.lock").unlink(missing_ok=True)
    overrides = checkout / ".tagrpo" / "draw-overrides.yaml"
    overrides.parent.mkdir(parents=True, exist_ok=True)
    overrides.write_text(yaml.safe_dump(plan.overrides, sort_keys=False))
    _run_checked([tool("tagrpo"), "params", "apply", str(overrides)], checkout, env)
    marker.write_text(json.dumps(wanted, indent=2) + "\n")
    return checkout


def _run_checked(command: list[str], cwd: Path, env: Mapping[str, str]) -> None:
    done = subprocess.run(command, cwd=cwd, env=dict(env), capture_output=True, text=True)
    if done.returncode != 0:
        raise StudyError(f"{' '.join(command)} (in {cwd}): {(done.stderr or done.stdout).strip()}")


def stage_progress(checkout: Path) -> tuple[int, int]:
    """(stages recorded in the draw's dvc.lock, stages of its dvc.yaml)."""
    from tagrpo.plumbing.dvc_stages import load_stages

    total = len(load_stages(checkout))
    return min(len(lock_stage_names(checkout)), total), total


def _slim_responses(source: Path, target: Path) -> None:
    import pyarrow.parquet as pq

    columns = [c for c in OUTCOME_COLUMNS if c in pq.read_schema(source).names]
    pq.write_table(pq.read_table(source, columns=columns), target, compression="zstd")


def lock_stage_names(checkout: Path) -> list[str]:
    """The stages the checkout's dvc.lock records (none without one)."""
    return sorted(lock_stages(checkout))


def lock_outputs(checkout: Path) -> list[str]:
    """The outputs the draw's own stages wrote: every ``outs`` path of its dvc.lock."""
    lock = yaml.safe_load((checkout / "dvc.lock").read_text()) or {}  # a built draw has one
    return sorted(
        str(out["path"])
        for stage in lock.get("stages", {}).values()
        for out in stage.get("outs", [])
    )


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def collect_record(checkout: Path, record: Path) -> list[str]:
    """Copy the draw's small outputs into ``record`` (made anew); the files left out (over the
    size limit), as 'path (bytes)'. Only the outputs of the draw's own stages (its dvc.lock)
    are outputs of the draw: the checkout also holds the files its commit has in git (e.g. the
    committed default run's metrics of methods the draw never trains), which are not."""
    shutil.rmtree(record, ignore_errors=True)
    record.mkdir(parents=True)
    left_out: list[str] = []
    outputs = lock_outputs(checkout)
    # Besides its params and dvc.lock, the one input the report tools read from a checkout:
    # the pre-registration its report judged it under (its bands), as the phase's commit had it.
    params = yaml.safe_load((checkout / "params.yaml").read_text()) or {}
    judged_under = (params.get("report") or {}).get("preregistration")
    inputs = {"params.yaml", "dvc.lock", *([str(judged_under)] if judged_under else [])}

    def written_by_the_draw(relative: Path) -> bool:
        return any(_under(relative.as_posix(), out) for out in outputs)

    def copy(source: Path) -> None:
        relative = source.relative_to(checkout)
        if relative.as_posix() not in inputs and not written_by_the_draw(relative):
            return
        size = source.stat().st_size
        if size > RECORD_LIMIT_BYTES:
            left_out.append(f"{relative} ({size} bytes)")
            return
        (record / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, record / relative)

    for name in [*RECORD_FILES, *sorted(inputs)]:
        if (checkout / name).exists():
            copy(checkout / name)
    for folder in RECORD_FOLDERS:
        for source in sorted((checkout / folder).rglob("*")):
            if source.is_file() and source.name != ".gitignore":
                copy(source)
    for evaluation in sorted((checkout / "evals").glob("*/")):
        if (evaluation / "passk.csv").exists():
            copy(evaluation / "passk.csv")
        responses = (evaluation / "responses.parquet").relative_to(checkout)
        if (checkout / responses).exists() and written_by_the_draw(responses):
            target = record / "evals" / evaluation.name / "responses.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            _slim_responses(evaluation / "responses.parquet", target)
    for name in RECORD_REPORT:
        source = checkout / name
        for path in sorted(source.rglob("*")) if source.is_dir() else [source]:
            if path.is_file():
                copy(path)
    return left_out


# --------------------------------------------------------------------------- progress


def _kept(path: str) -> bool:
    """Whether a progress keeps this output: all but the trained policies' models."""
    return not _under(path, "models") or any(_under(path, kept) for kept in KEPT_MODELS)


def _files(root: Path, relative: str) -> list[Path]:
    source = root / relative
    if source.is_dir():
        return sorted(p for p in source.rglob("*") if p.is_file())
    return [source] if source.is_file() else []


def save_progress(checkout: Path, progress: Path) -> list[str]:
    """Copy the outputs of every stage the draw's dvc.lock records (but the trained models:
    :func:`_kept`) and the dvc.lock itself into ``progress`` (made anew); the stages saved."""
    lock_text = (checkout / "dvc.lock").read_text(encoding="utf-8")
    entries = (yaml.safe_load(lock_text) or {}).get("stages") or {}
    staging = progress.with_name(progress.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    left_out: list[str] = []
    for entry in entries.values():
        for out in entry.get("outs") or []:
            path = str(out["path"])
            if not _kept(path):
                left_out.append(path)
                continue
            for source in _files(checkout, path):
                relative = source.relative_to(checkout)
                if source.stat().st_size > RECORD_LIMIT_BYTES:
                    left_out.append(relative.as_posix())
                    continue
                (staging / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, staging / relative)
    (staging / "dvc.lock").write_text(lock_text, encoding="utf-8")
    summary = {
        "stages": sorted(entries),
        "not_kept": sorted(left_out),
        "device": describe_device(),
        "saved": _now(),
    }
    (staging / PROGRESS_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    shutil.rmtree(progress, ignore_errors=True)
    staging.rename(progress)
    return sorted(entries)


def _folder_reads(params: Mapping[str, Any], reader: str) -> list[str]:
    """What a stage of :data:`FOLDER_READERS` reads from its folder: its params' policies and
    base model."""
    read = params.get(reader) or {}
    policies = [f"{FOLDER_READERS[reader]}/{policy}" for policy in read.get("policies") or []]
    return policies + ([str(read["base_model"])] if read.get("base_model") else [])


def _needed_paths(checkout: Path, pending: list[str]) -> list[str]:
    """What the stages not yet recorded read: their deps, and for a stage of
    :data:`FOLDER_READERS` the base and policies it names in params instead of the folder."""
    from tagrpo.plumbing.dvc_stages import load_stages

    stages = load_stages(checkout)
    params = yaml.safe_load((checkout / "params.yaml").read_text()) or {}
    needed: list[str] = []
    for name in pending:
        stage = stages[name]
        for dep in stage.deps:
            if FOLDER_READERS.get(stage.stage) == dep:
                needed += _folder_reads(params, stage.stage)
            else:
                needed.append(dep)
    return needed


def restore_progress(progress: Path, checkout: Path) -> dict[str, list[str]]:
    """Bring a draw's committed progress into its new checkout (one without a dvc.lock: a lost
    machine's; refused when the progress was made on another device kind): the saved outputs
    copied back, and the dvc.lock with every entry but those
    whose missing output a stage still to run reads (those stages run again). The restored
    stages whose models are not kept stay recorded: ``dvc repro --allow-missing`` skips them."""
    if (checkout / "dvc.lock").exists():
        raise StudyError(f"{checkout} has a dvc.lock: its own progress, not restored over")
    made_on = json.loads((progress / PROGRESS_FILE).read_text())["device"]
    if made_on != describe_device():
        raise StudyError(
            f"{progress} was made on {made_on!r}, this machine is {describe_device()!r}: a draw "
            f"is never split across devices (each kind builds in its own folder: DrawPlan.progress)"
        )
    lock = yaml.safe_load((progress / "dvc.lock").read_text(encoding="utf-8")) or {}
    entries = lock.get("stages") or {}
    for source in sorted(progress.rglob("*")):
        relative = source.relative_to(progress)
        if source.is_file() and relative.as_posix() not in ("dvc.lock", PROGRESS_FILE):
            (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, checkout / relative)
    from tagrpo.plumbing.dvc_stages import load_stages

    pending = [name for name in load_stages(checkout) if name not in entries]
    needed = _needed_paths(checkout, pending)
    again: list[str] = []
    for name, entry in list(entries.items()):
        missing = [
            str(out["path"])
            for out in entry.get("outs") or []
            if not (checkout / str(out["path"])).exists()
        ]
        read_later = any(_under(m, n) or _under(n, m) for m in missing for n in needed)
        too_large = any(_kept(m) for m in missing)  # a kept output left out for its size
        if read_later or too_large:
            again.append(name)
            del entries[name]
    (checkout / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False), encoding="utf-8")
    return {"restored": sorted(entries), "again": sorted(again)}


def build_order(checkout: Path) -> list[list[str]]:
    """The ``dvc repro`` targets a draw's build runs in turn: each evaluation still to run
    (its training first, as DVC plans a target), then the whole pipeline. A plain ``dvc repro``
    would train every policy before evaluating any, so a lost machine would lose every trained
    model (no progress keeps them) whose evaluation had not run. The policies the diagnostics
    read go last, so their models are likeliest to be on the machine that runs the diagnostics.
    The stages and their inputs are the same either way: only the order changes."""
    from tagrpo.plumbing.dvc_stages import load_stages

    stages = load_stages(checkout)
    recorded = set(lock_stages(checkout))
    params = yaml.safe_load((checkout / "params.yaml").read_text()) or {}
    read_last = {path for reader in FOLDER_READERS for path in _folder_reads(params, reader)}
    evaluations = [
        stage
        for name, stage in stages.items()
        if stage.stage.startswith("evaluate") and name not in recorded
    ]
    evaluations.sort(key=lambda stage: any(dep in read_last for dep in stage.deps))
    return [[stage.name] for stage in evaluations] + [[]]


class ProgressKeeper:
    """While a draw builds, commit its progress (into ``progress``, this device kind's folder)
    each time its dvc.lock records more stages (checked every ``every`` seconds, and once more
    when the build ends)."""

    def __init__(
        self, root: Path, plan: DrawPlan, checkout: Path, progress: Path, every: float = 30.0
    ) -> None:
        import threading

        self.root, self.plan, self.checkout, self.every = root, plan, checkout, every
        self.progress = progress
        self.saved: set[str] = set(lock_stage_names(checkout))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ProgressKeeper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.keep()

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            try:
                self.keep()
            except Exception as error:  # a failed save is tried again next round
                print(f"{self.plan.label}: progress not saved this round: {error}", flush=True)

    def keep(self) -> None:
        try:
            recorded = set(lock_stages(self.checkout))
        except yaml.YAMLError:  # read in the middle of DVC's write: next round
            return
        if not recorded or recorded <= self.saved:
            return
        saved = save_progress(self.checkout, self.progress)
        commit_paths(
            self.root,
            [self.progress],
            f"Study {self.plan.label}: progress, {len(saved)} stages recorded "
            f"({self.progress.relative_to(self.root)})",
        )
        self.saved = set(saved)


def execute_draw(
    root: Path,
    plan: DrawPlan,
    commit: str,
    cache: Path,
    build: Callable[[Path, Path, Path], int],
    say: Callable[[str], None] = print,
    progress_every: float = 30.0,
) -> dict[str, Any]:
    """Build one draw to its end (``build(checkout, log, root)`` runs ``dvc repro`` there and
    returns its exit status: the flow's launcher, whose children die with it) and commit its
    record; a draw already recorded is skipped."""
    record = plan.record(root)
    if (record / DRAW_FILE).exists():
        say(f"{plan.label}: recorded in {record.relative_to(root)} (committed): not run again")
        return json.loads((record / DRAW_FILE).read_text())
    checkout = prepare_checkout(root, plan, commit, cache)
    device = describe_device()
    progress = plan.progress(root, device)  # restored from and kept into: this kind's only
    for other in plan.progresses(root):
        if other != progress:
            made_on = json.loads((other / PROGRESS_FILE).read_text())
            say(
                f"{plan.label}: {other.relative_to(root)} holds {len(made_on['stages'])} stages "
                f"made on {made_on['device']!r}: kept for a machine of that kind (a draw is "
                f"never split across devices); this machine builds the draw in its own folder"
            )
    if not (checkout / "dvc.lock").exists() and (progress / "dvc.lock").exists():
        restored = restore_progress(progress, checkout)
        say(
            f"{plan.label}: restored {len(restored['restored'])} stages from "
            f"{progress.relative_to(root)} (committed); to run again: "
            f"{', '.join(restored['again']) or 'none'}"
        )
    done, total = stage_progress(checkout)
    # What this start finds recorded: the stages it then runs are those the per-stage overhead
    # of the study's cost rule is measured on (their own seconds against this start's wall).
    recorded_at_start = lock_stage_names(checkout)
    say(f"{plan.label}: building in {checkout} ({done} of {total} stages recorded)")
    log = study_dir(root) / "logs" / f"{plan.label}.log"
    # The progress line's pace counts from here: stages restored above took no time this start.
    (checkout / BUILD_START_FILE).write_text(json.dumps({"since": time.time(), "recorded": done}))
    started = time.monotonic()
    with ProgressKeeper(root, plan, checkout, progress, every=progress_every):
        status = build(checkout, log, root)
    seconds = time.monotonic() - started
    if status != 0:
        raise StudyError(
            f"{plan.label}: dvc repro exited with {status} after {seconds:.0f} s (log: "
            f"{log}); `make study` resumes it"
        )
    left_out = collect_record(checkout, record)
    summary = {
        "label": plan.label,
        "plan": asdict(plan),
        "commit": commit,
        "device": device,
        "seconds_this_start": round(seconds, 1),
        "stages_recorded_at_start": recorded_at_start,
        "stages": stage_progress(checkout)[1],
        "left_out": left_out,
        "finished": _now(),
    }
    (record / DRAW_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    # The record replaces the draw's progress on every device kind (git keeps their history).
    progresses = plan.progresses(root)
    for folder in progresses:
        shutil.rmtree(folder, ignore_errors=True)
    commit_paths(
        root,
        [record, *(p for p in progresses if git(root, "ls-files", "--", str(p)))],
        f"Study {plan.label}: record of the finished draw ({record.relative_to(root)})",
    )
    say(f"{plan.label}: finished in {seconds:.0f} s; record committed ({record.relative_to(root)})")
    return summary


def progress_line(root: Path, plans: list[DrawPlan], seen: dict[str, int] | None = None) -> str:
    """Draws done of total, and each building draw's stages and a time left from its pace since
    its build started (``BUILD_START_FILE``, written after any restore, so restored stages
    do not count as fast ones). ``seen`` keeps each draw's highest count so far: DVC rewrites
    dvc.lock in place, and a read in the middle of a write can see fewer stages than are
    recorded."""
    parts, done_draws = [], 0
    for plan in plans:
        if (plan.record(root) / DRAW_FILE).exists():
            done_draws += 1
            continue
        start_file = plan.checkout(root) / BUILD_START_FILE
        if not start_file.exists():
            continue
        start = json.loads(start_file.read_text())
        done, total = stage_progress(plan.checkout(root))
        if seen is not None:
            done = seen[plan.label] = max(done, seen.get(plan.label, 0))
        new = done - start["recorded"]
        pace = (time.time() - start["since"]) / new if new > 0 else None
        left = f", about {pace * (total - done) / 60:.0f} min left" if pace else ""
        parts.append(f"{plan.label} {done}/{total} stages{left}")
    running = "; ".join(parts) if parts else "none running"
    return f"study: {done_draws} of {len(plans)} draws done; {running}"
