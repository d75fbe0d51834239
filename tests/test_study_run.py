"""The study command (``flows/study.py``, ``tagrpo/pipeline/study_run.py``) on a tiny project:
two pilot draws side by side, each a clone built by a real ``dvc repro``; a ``kill -9`` of
the command mid-draw leaves nothing running, and the next start resumes without rerunning a
finished stage or a committed draw; every finished draw's record is committed as it finishes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from scratch_project import write_empty_project

from tagrpo.pipeline import study_run
from tagrpo.pipeline.study_run import (
    DrawPlan,
    StudyError,
    main_runs,
    plan_phase,
    read_registration,
)
from tagrpo.plumbing.procfs import pid_alive

ROOT = Path(__file__).resolve().parents[1]

# Each stage appends its name to runs.log (outside DVC's view): a rerun shows there.
STAGE = (
    "python -c \"import sys, time, yaml, pathlib; p = yaml.safe_load(open('params.yaml')); "
    "pathlib.Path('{out}').parent.mkdir(parents=True, exist_ok=True); "
    "open('runs.log', 'a').write('{name}\\n'); time.sleep({sleep}); "
    "pathlib.Path('{out}').write_text(str(p['base_model']['warmstart']['seed']))\""
)


def _tiny_project(folder: Path) -> Path:
    write_empty_project(folder)
    stages = {}
    for name, out, sleep, dep in (
        ("first", "metrics/first.json", 0, None),
        ("slow", "metrics/slow.json", 6, "metrics/first.json"),
        ("last", "plots/last.csv", 0, "metrics/slow.json"),
    ):
        stage = {
            "cmd": STAGE.format(name=name, out=out, sleep=sleep),
            "params": ["base_model.warmstart.seed"],
            "outs": [{out: {"cache": False}}],
        }
        if dep:
            stage["deps"] = [dep]
        stages[name] = stage
    (folder / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    (folder / "profiles").mkdir()
    (folder / "profiles/tiny.yaml").write_text("common:\n  profile: custom\n")
    (folder / "preregistration").mkdir()
    registration = {
        "kind": "study",
        "pilot": {"profile": "profiles/tiny.yaml", "base_draws": [5, 6]},
        "main": {"profile": "profiles/tiny.yaml", "base_draws_in_order": [100, 101]},
        "size": None,
    }
    (folder / "preregistration/study-v3.yaml").write_text(yaml.safe_dump(registration))
    # Committed by another run (as the default's outputs are in git): not the draws' output.
    (folder / "metrics/other_run.json").parent.mkdir()
    (folder / "metrics/other_run.json").write_text("another run's\n")
    (folder / ".gitignore").write_text("/.tagrpo/\nmlflow.db\n")
    (folder / ".dvcignore").write_text("/.tagrpo/\n")
    for command in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "config", "user.email", "t@example.invalid"],
        ["git", "config", "user.name", "t"],
        [str(Path(sys.executable).parent / "dvc"), "init", "-q"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "tiny project"],
    ):
        subprocess.run(command, cwd=folder, check=True, capture_output=True)
    return folder


def _study(folder: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(folder / ".prefect")}
    env.pop("PREFECT_API_URL", None)
    env.pop("TAGRPO_STUDY_DIR", None)  # the default: .tagrpo/study in the project
    return subprocess.Popen(
        [sys.executable, "-m", "flows.study", "--phase", "pilot", "--jobs", "2", "--every", "2",
         *extra],
        cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def _runs(folder: Path, seed: int) -> list[str]:
    log = folder / f".tagrpo/study/pilot-draw{seed}/runs.log"
    return log.read_text().split() if log.exists() else []


def _dvc_processes(folder: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd.startswith(str(folder / ".tagrpo")) and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.mark.timeout(900)
def test_the_study_runs_draws_side_by_side_and_resumes_after_kill_9(tmp_path: Path) -> None:
    folder = _tiny_project(tmp_path / "project")
    first = _study(folder)
    deadline = time.monotonic() + 300
    # Kill while both draws are in their slow stage (first recorded, slow running).
    while time.monotonic() < deadline:
        if all(_runs(folder, s)[-1:] == ["slow"] for s in (5, 6)):
            break
        assert first.poll() is None, first.stdout.read() if first.stdout else ""
        time.sleep(0.2)
    else:
        first.kill()
        pytest.fail("the draws never reached their slow stage")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    time.sleep(3)
    assert _dvc_processes(folder) == [], "dvc or a stage outlived the killed study"
    assert not (folder / "reports/study/pilot/draw5/DRAW.json").exists()
    started = json.loads((folder / "reports/study/pilot/STARTED.json").read_text())
    head = subprocess.run(["git", "log", "--format=%s"], cwd=folder, capture_output=True,
                          text=True).stdout  # fmt: skip
    assert "Study pilot started" in head

    second = _study(folder)
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out
    for seed in (5, 6):
        # first ran once (recorded before the kill); slow twice (killed, then again); last once.
        assert _runs(folder, seed) == ["first", "slow", "slow", "last"], seed
        record = folder / f"reports/study/pilot/draw{seed}"
        draw = json.loads((record / "DRAW.json").read_text())
        assert draw["commit"] == started["commit"]
        assert draw["stages_recorded_at_start"] == ["first"]  # the resumed start ran the rest
        assert (record / "metrics/slow.json").read_text() == str(seed)
        assert (record / "plots/last.csv").read_text() == str(seed)
        assert not (record / "metrics/other_run.json").exists()
        assert (
            yaml.safe_load((record / "params.yaml").read_text())["base_model"]["warmstart"]["seed"]
            == seed
        )
    log = subprocess.run(["git", "log", "--format=%s"], cwd=folder, capture_output=True,
                         text=True).stdout  # fmt: skip
    assert log.count("record of the finished draw") == 2
    status = subprocess.run(["git", "status", "--porcelain"], cwd=folder, capture_output=True,
                            text=True).stdout  # fmt: skip
    assert "reports/study" not in status  # committed, nothing left over
    assert "study: 2 of 2 draws done" in out

    # A third start reruns nothing: both draws are recorded.
    third = _study(folder)
    out, _ = third.communicate(timeout=300)
    assert third.returncode == 0, out
    assert out.count("not run again") == 2
    assert all(len(_runs(folder, s)) == 4 for s in (5, 6))


def test_the_plans_follow_the_registration() -> None:
    registration = read_registration(ROOT)
    pilot = plan_phase(registration, "pilot")
    assert [p.seed for p in pilot] == registration["pilot"]["base_draws"]
    assert all(p.profile == "profiles/study-pilot.yaml" for p in pilot)
    assert pilot[0] == DrawPlan(
        "pilot", 0, "profiles/study-pilot.yaml", {"base_model": {"warmstart": {"seed": 0}}}
    )
    assert pilot[0].label == "pilot-draw0"
    with pytest.raises(StudyError, match="waits for its size"):
        plan_phase({**registration, "size": None}, "main")
    main = plan_phase({**registration, "size": {"draws": 3, "seeds_per_draw": 2}}, "main")
    assert [p.seed for p in main] == [100, 101, 102]
    runs = main[0].overrides["runs"]
    assert runs["seeds"] == [0, 1, 2] and runs["one_seed"] == [0, 1]
    assert runs["data_scaling"] == {"methods": ["grpo"], "multiples": [2.5], "seeds": [0, 1]}
    with pytest.raises(StudyError, match="orders 8 draws"):
        plan_phase({**registration, "size": {"draws": 9, "seeds_per_draw": 2}}, "main")


def test_main_runs_match_the_registered_seed_counts() -> None:
    registered = read_registration(ROOT)["main"]["runs"]
    for seeds in (2, 3, 5):
        runs = main_runs(seeds)["runs"]
        counts = {m: len(runs["seeds"]) for m in runs["methods"]}
        counts |= {m: len(runs["one_seed"]) for m in runs["one_seed_methods"]}
        counts |= {m: len(runs["control_seeds"]) for m in runs["control_methods"]}
        counts["grpo_data2.5x"] = len(runs["data_scaling"]["seeds"])
        expected = {
            m: eval(str(rule), {"max": max, "S": seeds})  # the registration's own formulas
            for m, rule in registered.items()
        }
        assert counts == expected, seeds


def test_a_started_phase_keeps_its_commit_and_refuses_a_changed_design(tmp_path: Path) -> None:
    from tagrpo.pipeline.study_run import phase_commit

    folder = _tiny_project(tmp_path / "project")
    commit = phase_commit(folder, "pilot")
    path = folder / "preregistration/study-v3.yaml"

    def commit_registration(change: dict) -> None:
        document = yaml.safe_load(path.read_text())
        document.update(change)
        path.write_text(yaml.safe_dump(document))
        subprocess.run(["git", "commit", "-qam", "change"], cwd=folder, check=True)

    # What the registration may gain later (the main study's size) leaves the pilot as it was.
    commit_registration({"size": {"draws": 2, "seeds_per_draw": 2}})
    assert phase_commit(folder, "pilot") == commit
    commit_registration({"pilot": {"profile": "profiles/tiny.yaml", "base_draws": [5, 7]}})
    with pytest.raises(StudyError, match="differ from those it started with"):
        phase_commit(folder, "pilot")
    path.write_text(path.read_text() + "# uncommitted\n")
    with pytest.raises(StudyError, match="uncommitted changes"):
        phase_commit(folder, "main")


def _main_draw_config(tmp_path: Path, seed: int, seeds_per_draw: int):
    from tagrpo.config.params import load_config

    params = tmp_path / f"params-{seed}.yaml"
    params.write_text((ROOT / "params.yaml").read_text())
    overrides = tmp_path / f"draw-{seed}.yaml"
    plan = {"base_model": {"warmstart": {"seed": seed}}, **main_runs(seeds_per_draw)}
    overrides.write_text(yaml.safe_dump(plan))
    tagrpo = str(Path(sys.executable).parent / "tagrpo")
    for profile in ("profiles/study-main.yaml", str(overrides)):
        subprocess.run([tagrpo, "params", "apply", profile, "--params", str(params)],
                       cwd=ROOT, check=True, capture_output=True)  # fmt: skip
    return load_config(params)


def test_the_main_records_are_checked_against_the_registered_size(tmp_path: Path) -> None:
    from tagrpo.report.study_checkouts import study_v3_deviations, study_v3_seed_counts

    registration = read_registration(ROOT)
    assert study_v3_seed_counts(registration["main"]["runs"], 2)["grpo"] == 3
    assert study_v3_seed_counts(registration["main"]["runs"], 4)["grpo_data2.5x"] == 4
    sized = {**registration, "size": {"draws": 2, "seeds_per_draw": 2}}
    configs = {f"draw{s}": _main_draw_config(tmp_path, s, 2) for s in (100, 101)}
    assert study_v3_deviations(sized, configs) == []
    assert study_v3_deviations({**registration, "size": None}, configs) == [
        "study-v3.yaml has no size: the main study's D and S are not fixed"
    ]
    wrong = {"draw100": configs["draw100"], "draw5": _main_draw_config(tmp_path, 5, 3)}
    found = study_v3_deviations(sized, wrong)
    assert "base draws [5, 100] recorded, [100, 101] registered" in found
    assert "draw5: ta_grpo has 3 seeds, 2 registered" in found


@pytest.mark.timeout(600)
def test_a_sigterm_stops_the_study_promptly_and_leaves_nothing_running(tmp_path: Path) -> None:
    """The deadline is measured from the signal: the flow must be gone within its exit
    deadline (flows.interrupts.EXIT_DEADLINE_S) plus a margin, however long the stage would
    have run (a slow stage: the draws' own)."""
    from flows.interrupts import EXIT_DEADLINE_S

    folder = _tiny_project(tmp_path / "project")
    stage = yaml.safe_load((folder / "dvc.yaml").read_text())
    stage["stages"]["slow"]["cmd"] = stage["stages"]["slow"]["cmd"].replace(
        "time.sleep(6)", "time.sleep(600)"
    )
    (folder / "dvc.yaml").write_text(yaml.safe_dump(stage, sort_keys=False))
    subprocess.run(["git", "commit", "-qam", "a slow stage"], cwd=folder, check=True)
    study = _study(folder)
    deadline = time.monotonic() + 300
    while not all(_runs(folder, s)[-1:] == ["slow"] for s in (5, 6)):
        assert time.monotonic() < deadline and study.poll() is None
        time.sleep(0.2)
    signalled = time.monotonic()
    study.send_signal(signal.SIGTERM)
    out, _ = study.communicate(timeout=EXIT_DEADLINE_S + 60)
    assert time.monotonic() - signalled <= EXIT_DEADLINE_S + 15, out
    assert study.returncode == 128 + signal.SIGTERM, out
    time.sleep(2)
    assert _dvc_processes(folder) == [], "dvc or a stage outlived the stopped study"
    assert "make study` resumes every draw" in out


def test_a_record_holds_only_what_the_draws_stages_wrote(tmp_path: Path) -> None:
    """A draw's checkout also holds the files its commit has in git (the committed default's
    metrics and evaluations of methods the draw never trains): they stay out of the record,
    so no analysis of the records can read another run's numbers as the draw's."""
    import pandas as pd

    checkout, record = tmp_path / "checkout", tmp_path / "record"
    written = {
        "metrics/train/grpo-s0.json": "{}",
        "plots/train/grpo-s0.csv": "step\n1\n",
        "evals/grpo-s0/passk.csv": "k\n1\n",
        "reports/report.md": "draw",
    }
    committed_elsewhere = {
        "metrics/train/grpo_flipped-s0.json": "{}",
        "plots/train/grpo_flipped-s0.csv": "step\n1\n",
        "evals/grpo_flipped-s0/passk.csv": "k\n1\n",
        "reports/claims.md": "the default's",
    }
    params = "report:\n  preregistration: preregistration/world.yaml\n"
    inputs = {"params.yaml": params, "preregistration/world.yaml": "bands: {}\n"}
    other = {"preregistration/other.yaml": "not this draw's\n"}
    for relative, text in {**written, **committed_elsewhere, **inputs, **other}.items():
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        (checkout / relative).write_text(text)
    responses = pd.DataFrame(
        {
            "benchmark": ["b"],
            "question_id": ["q"],
            "correct": [True],
            "strategy": ["s"],
            "text": ["t"],
        }
    )
    for run in ("grpo-s0", "grpo_flipped-s0"):
        responses.to_parquet(checkout / f"evals/{run}/responses.parquet")
    outs = [*written, "evals/grpo-s0/responses.parquet"]
    stages = {f"s{i}": {"outs": [{"path": out}]} for i, out in enumerate(outs)}
    (checkout / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))

    assert study_run.collect_record(checkout, record) == []
    kept = sorted(p.relative_to(record).as_posix() for p in record.rglob("*") if p.is_file())
    assert kept == sorted([*written, *inputs, "dvc.lock", "evals/grpo-s0/responses.parquet"])
    # The pre-registration its report judged it under, as the checkout's commit had it.
    assert (record / "preregistration/world.yaml").read_text() == "bands: {}\n"
    slim = pd.read_parquet(record / "evals/grpo-s0/responses.parquet")
    assert list(slim.columns) == list(study_run.OUTCOME_COLUMNS)


def test_the_progress_line_never_counts_back_nor_counts_restored_stages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of dvc.lock while DVC rewrites it can see fewer stages than are recorded: the
    line keeps each draw's highest count. Its time left comes from the pace of the stages
    recorded since the build started: stages restored before it took no time."""
    monkeypatch.delenv(study_run.STUDY_DIR_ENV, raising=False)
    plan = study_run.DrawPlan("pilot", 5, "profiles/tiny.yaml")
    checkout = plan.checkout(tmp_path)
    (checkout / ".tagrpo").mkdir(parents=True)
    stages = {f"s{i}": {"cmd": "true"} for i in range(6)}
    (checkout / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))

    def lock(names: list[str]) -> None:
        recorded = {name: {"cmd": "true"} for name in names}
        (checkout / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": recorded}))

    def build_started(seconds_ago: float, recorded: int) -> None:
        since = {"since": time.time() - seconds_ago, "recorded": recorded}
        (checkout / study_run.BUILD_START_FILE).write_text(json.dumps(since))

    seen: dict[str, int] = {}
    lock(["s0", "s1"])
    assert study_run.progress_line(tmp_path, [plan], seen) == (
        "study: 0 of 1 draws done; none running"  # not building yet
    )
    build_started(600.0, 0)  # 10 minutes ago, nothing recorded then
    line = study_run.progress_line(tmp_path, [plan], seen)
    assert line == "study: 0 of 1 draws done; pilot-draw5 2/6 stages, about 20 min left"
    lock(["s0"])  # a half-written lock
    line = study_run.progress_line(tmp_path, [plan], seen)
    assert "pilot-draw5 2/6 stages" in line
    # A new start that restored 3 stages and has recorded 1 more in 5 minutes: 2 to go.
    lock(["s0", "s1", "s2", "s3"])
    build_started(300.0, 3)
    line = study_run.progress_line(tmp_path, [plan], {})
    assert line == "study: 0 of 1 draws done; pilot-draw5 4/6 stages, about 10 min left"
    build_started(300.0, 4)  # nothing new yet: no pace, no time left claimed
    line = study_run.progress_line(tmp_path, [plan], {})
    assert line == "study: 0 of 1 draws done; pilot-draw5 4/6 stages"


def _models_project(folder: Path) -> Path:
    """The tiny project with a miniature of a draw's model flow: a cached base model every
    training reads, a trained policy's model (cached, not kept by a progress) its evaluation
    reads, and a last stage reading only the evaluation."""
    _tiny_project(folder)
    stages = {}
    for name, write, out, cache, sleep, dep in (
        ("base", "models/base/w.txt", "models/base", True, 0, None),
        ("train", "models/p-s0/w.txt", "models/p-s0", True, 0, "models/base"),
        ("evaluate", "evals/p-s0/passk.csv", "evals/p-s0/passk.csv", False, 0, "models/p-s0"),
        ("last", "plots/last.csv", "plots/last.csv", False, 8, "evals/p-s0/passk.csv"),
    ):
        stages[name] = {
            "cmd": STAGE.format(name=name, out=write, sleep=sleep),
            "params": ["base_model.warmstart.seed"],
            "outs": [{out: {"cache": cache}}],
            **({"deps": [dep]} if dep else {}),
        }
    (folder / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    subprocess.run(["git", "commit", "-qam", "model flow"], cwd=folder, check=True)
    return folder


def _progress(folder: Path, seed: int) -> Path:
    """The draw's progress folder for this machine's device kind."""
    from tagrpo.plumbing.device import describe_device

    kind = study_run.device_key(describe_device())
    return folder / f"reports/study/pilot/progress/{kind}/draw{seed}"


def _kept(folder: Path, seed: int) -> int:
    """The stages the draw's committed progress holds (0 before its first)."""
    progress = _progress(folder, seed) / "PROGRESS.json"
    tracked = subprocess.run(["git", "ls-files", str(progress)], cwd=folder,
                             capture_output=True, text=True).stdout  # fmt: skip
    return len(json.loads(progress.read_text())["stages"]) if tracked.strip() else 0


@pytest.mark.timeout(900)
def test_a_lost_machine_loses_only_the_stages_in_flight(tmp_path: Path) -> None:
    folder = _models_project(tmp_path / "project")
    first = _study(folder, "--keep-every", "0.5")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # both draws in their last stage, its progress committed
        if all(_runs(folder, s)[-1:] == ["last"] and _kept(folder, s) == 3 for s in (5, 6)):
            break
        assert first.poll() is None, first.stdout.read() if first.stdout else ""
        time.sleep(0.2)
    else:
        first.kill()
        pytest.fail("the draws never reached their last stage with their progress committed")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    for seed in (5, 6):
        progress = _progress(folder, seed)
        kept = json.loads((progress / "PROGRESS.json").read_text())
        assert kept["stages"] == ["base", "evaluate", "train"]
        assert kept["not_kept"] == ["models/p-s0"]  # the trained model stays out of git
        assert (progress / "models/base/w.txt").read_text() == str(seed)
        assert not (progress / "models/p-s0").exists()
    # The machine is lost: the draws' checkouts and the shared DVC cache are gone.
    subprocess.run(["rm", "-rf", str(folder / ".tagrpo/study")], check=True)
    # Another device kind's progress of draw 5: named, not restored, removed with the record.
    other = folder / "reports/study/pilot/progress/other-cpu-00000000/draw5"
    other.mkdir(parents=True)
    (other / "PROGRESS.json").write_text(json.dumps({"device": "Other CPU", "stages": ["base"]}))
    subprocess.run(["git", "add", str(other)], cwd=folder, check=True)
    subprocess.run(["git", "commit", "-qm", "other kind"], cwd=folder, check=True)

    second = _study(folder)
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out
    assert out.count("restored 3 stages") == 2, out
    assert out.count("holds 1 stages made on 'Other CPU': kept for a machine of that kind") == 1
    for seed in (5, 6):
        # Only the stage in flight ran again: the finished evaluation needs no model.
        assert _runs(folder, seed) == ["last"], seed
        record = folder / f"reports/study/pilot/draw{seed}"
        assert (record / "evals/p-s0/passk.csv").read_text() == str(seed)
        assert (record / "plots/last.csv").read_text() == str(seed)
        assert not _progress(folder, seed).exists()
    assert not other.exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=folder, capture_output=True,
                            text=True).stdout  # fmt: skip
    assert "reports/study" not in status  # the records committed, the progress removed


def test_each_device_kind_keeps_its_own_progress_folder(tmp_path: Path) -> None:
    amd, intel = "AMD EPYC (2 cores; avx2)", "Intel(R) Xeon(R) (2 cores; amx_bf16, avx2)"
    assert study_run.device_key(amd).startswith("amd-epyc-2-cores-avx2-")
    assert study_run.device_key(amd) != study_run.device_key(amd.replace(";", ","))
    plan = study_run.DrawPlan(phase="main", seed=100, profile="study")
    assert plan.progress(tmp_path, amd) != plan.progress(tmp_path, intel)
    for device in (amd, intel):
        plan.progress(tmp_path, device).mkdir(parents=True)
    assert plan.progresses(tmp_path) == sorted(plan.progress(tmp_path, d) for d in (amd, intel))
    other_draw = study_run.DrawPlan(phase="main", seed=101, profile="study")
    assert other_draw.progresses(tmp_path) == []


def test_a_restore_runs_again_the_stages_whose_models_a_pending_stage_reads(
    tmp_path: Path,
) -> None:
    folder = _models_project(tmp_path / "project")
    lock = {"schema": "2.0", "stages": {}}
    for name, out in (("base", "models/base"), ("train", "models/p-s0")):
        lock["stages"][name] = {"cmd": "x", "outs": [{"path": out, "md5": "0" * 32 + ".dir"}]}
    progress = tmp_path / "progress"
    (progress / "models/base").mkdir(parents=True)
    (progress / "models/base/w.txt").write_text("5")
    (progress / "dvc.lock").write_text(yaml.safe_dump(lock))
    made_on = {"device": "a GPU machine; GPUs: 8 x NVIDIA H200"}
    (progress / "PROGRESS.json").write_text(json.dumps(made_on))
    with pytest.raises(StudyError, match="never split across devices"):
        study_run.restore_progress(progress, folder)
    assert not (folder / "dvc.lock").exists()  # nothing restored
    from tagrpo.plumbing.device import describe_device

    (progress / "PROGRESS.json").write_text(json.dumps({"device": describe_device()}))
    restored = study_run.restore_progress(progress, folder)
    # evaluate is still to run and reads models/p-s0, which no progress keeps: train again.
    assert restored == {"restored": ["base"], "again": ["train"]}
    assert set(study_run.lock_stages(folder)) == {"base"}
    assert (folder / "models/base/w.txt").read_text() == "5"
    with pytest.raises(StudyError, match=r"has a dvc\.lock"):
        study_run.restore_progress(progress, folder)


def test_a_main_draw_evaluates_each_policy_after_its_training_diagnosed_ones_last(
    tmp_path: Path,
) -> None:
    """DVC alone would train all 26 policies before evaluating one (a lost machine would then
    lose every model whose evaluation had not run): the build runs one evaluation at a time."""
    _main_draw_config(tmp_path, 100, 3)
    (tmp_path / "params.yaml").write_text((tmp_path / "params-100.yaml").read_text())
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    order = study_run.build_order(tmp_path)
    from tagrpo.plumbing.dvc_stages import load_stages

    stages = load_stages(tmp_path)
    evaluations = [n for n, s in stages.items() if s.stage.startswith("evaluate")]
    assert order[-1] == [] and sorted(t for [t] in order[:-1]) == sorted(evaluations)
    assert len(evaluations) == 27  # the base and 26 trained policies
    diagnosed = {"ta_grpo-s0", "ta_grpo-s1", "ta_grpo-s2", "grpo-s0"}
    last = [t for [t] in order[-5:-1]]
    assert {
        next(d for d in stages[t].deps if d.startswith("models/"))[7:] for t in last
    } == diagnosed
    # Recorded evaluations are not run again.
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"stages": {order[0][0]: {"cmd": "x"}}}))
    assert study_run.build_order(tmp_path) == order[1:]


def test_the_flow_writes_and_commits_the_main_report_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the main phase the flow writes the study's report and commits it; a refused
    report is said and nothing is written; a rerun that changes nothing commits nothing."""
    from flows import study as study_flow
    from tagrpo.report import study as study_report

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for key, value in (("user.email", "t@t"), ("user.name", "t")):
        subprocess.run(["git", "config", key, value], cwd=tmp_path, check=True)
    subprocess.run(
        ["git", "commit", "-q", "--allow-empty", "-m", "start"], cwd=tmp_path, check=True
    )

    def refused(out: Path = study_report.MAIN_REPORT, exploratory: bool = False) -> tuple:
        raise study_report.ReportRefused("the main study is not finished: no record in d1")

    def written(out: Path = study_report.MAIN_REPORT, exploratory: bool = False) -> tuple:
        assert Path.cwd() == tmp_path  # the report's paths are the project's
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text("# the study\n")
        return out / "report.md", "FAIL"

    def commits() -> list[str]:
        log = subprocess.run(["git", "log", "--format=%s"], cwd=tmp_path, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        return log.splitlines()

    monkeypatch.setattr(study_report, "main_report", refused)
    assert study_flow.write_main_report(tmp_path).startswith("not written: the main study")
    assert not (tmp_path / study_report.MAIN_REPORT).exists() and len(commits()) == 1
    monkeypatch.setattr(study_report, "main_report", written)
    assert study_flow.write_main_report(tmp_path) == str(study_report.MAIN_REPORT / "report.md")
    assert commits()[0] == f"Study main: the report ({study_report.MAIN_REPORT})"
    study_flow.write_main_report(tmp_path)  # the same report again: nothing to commit
    assert len(commits()) == 2
