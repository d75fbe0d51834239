"""`tagrpo plan`: which stages a params change would rerun, checked against what `dvc repro`
then really runs, in a scratch DVC project whose stages are shell one-liners (the real
params.yaml and its typed validation, a dvc.yaml shaped like the project's: matrix stages over
`runs`, per-section params, `${train.backend}`, a report over a folder of outputs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from scratch_project import copy_checkout, run_checked

from tagrpo.config.params import ConfigError
from tagrpo.pipeline.plan import _dvc_yaml_view, plan_rerun, render_plan
from tagrpo.pipeline.rerun import RerunRequest, dvc_binary, resolve_params
from tagrpo.plumbing.dvc_stages import expand_stages
from tagrpo.plumbing.paths import project_root

ROOT = project_root()

DVC_YAML = """\
stages:
  data:
    cmd: echo data > data.txt
    params:
      - data
    outs:
      - data.txt
  train:
    matrix:
      method: ${runs.methods}
      seed: ${runs.seeds}
    cmd: cat data.txt params.yaml > models/${item.method}-s${item.seed}.txt
    deps:
      - data.txt
    params:
      - train
      - ${train.backend}
    outs:
      - models/${item.method}-s${item.seed}.txt
  evaluate:
    matrix:
      method: ${runs.methods}
      seed: ${runs.seeds}
    cmd: >-
      cat models/${item.method}-s${item.seed}.txt params.yaml
      > evals/${item.method}-s${item.seed}.txt
    deps:
      - models/${item.method}-s${item.seed}.txt
    params:
      - evaluate
    outs:
      - evals/${item.method}-s${item.seed}.txt
  report:
    cmd: ls evals > report.txt
    deps:
      - evals
    params:
      - report
    outs:
      - report.txt
"""


GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "TAGRPO_"))}
    env["DVC_NO_ANALYTICS"] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _ran(log: str) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", log)


def _write_small_dag(root: Path, dvc_yaml: str = DVC_YAML) -> dict[str, Any]:
    """The project's params (two methods, one seed) as params.yaml and the small DAG as
    dvc.yaml in ``root``; returns the params."""
    params = resolve_params(
        ROOT,
        RerunRequest(
            methods=["grpo", "grpo_flipped"],
            seeds=[0],
            overrides=["diagnostics.policies=[grpo-s0]"],
        ),
    )
    # The small DAG's matrices read runs.methods only: the negative control (a control method
    # of the default, with its own seeds) joins them.
    runs = params["runs"]
    runs["methods"], runs["control_methods"] = [*runs["methods"], *runs["control_methods"]], []
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "dvc.yaml").write_text(dvc_yaml)
    return params


def small_project(root: Path, dvc_yaml: str = DVC_YAML) -> dict[str, str]:
    """The project's params (two methods, one seed) and a small DAG in a new git repo with DVC
    initialised; the environment to run dvc in."""
    _write_small_dag(root, dvc_yaml)
    (root / "models").mkdir()
    (root / "evals").mkdir()
    (root / "profiles").mkdir()
    (root / "profiles" / "more-samples.yaml").write_text("evaluate: {n: 128}\n")
    env = _env()
    run_checked([*GIT, "init", "-q"], root, env)
    run_checked([dvc_binary(), "init", "-q"], root, env)
    run_checked([*GIT, "add", "-A"], root, env)
    run_checked([*GIT, "commit", "-q", "-m", "small project"], root, env)
    return env


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small project, reproduced once."""
    root = tmp_path_factory.mktemp("plan")
    env = small_project(root)
    log = run_checked([dvc_binary(), "repro"], root, env)
    assert len(_ran(log)) == 6
    run_checked([*GIT, "add", "-A"], root, env)
    run_checked([*GIT, "commit", "-q", "-m", "reproduced"], root, env)
    return root


def _names(root: Path, request: RerunRequest) -> list[str]:
    return [stage.name for stage in plan_rerun(root, request).runs]


def _apply_and_repro(root: Path, request: RerunRequest) -> list[str]:
    """Write the request's params into params.yaml, `dvc repro`, restore: the stages DVC ran."""
    env = _env()
    original = (root / "params.yaml").read_text()
    try:
        (root / "params.yaml").write_text(yaml.safe_dump(resolve_params(root, request)))
        return _ran(run_checked([dvc_binary(), "repro"], root, env))
    finally:
        (root / "params.yaml").write_text(original)
        # Back to the committed state: the lock, and no output of a stage it does not list.
        run_checked(["git", "checkout", "-q", "--", "."], root, env)
        run_checked(["git", "clean", "-q", "-fdx", "-e", "/.dvc"], root, env)
        run_checked([dvc_binary(), "checkout", "-q"], root, env)


def test_a_learning_rate_reruns_training_and_everything_after_it(reproduced: Path) -> None:
    request = RerunRequest(overrides=["train.learning_rate=2e-4"])
    params_before = (reproduced / "params.yaml").read_bytes()
    outputs_before = {p: p.stat().st_mtime_ns for p in reproduced.rglob("*.txt")}
    plan = plan_rerun(reproduced, request)
    assert (reproduced / "params.yaml").read_bytes() == params_before  # nothing touched
    assert {p: p.stat().st_mtime_ns for p in reproduced.rglob("*.txt")} == outputs_before
    expected = [
        "train@grpo-0",
        "train@grpo_flipped-0",
        "evaluate@grpo-0",
        "evaluate@grpo_flipped-0",
    ]
    assert [s.name for s in plan.runs] == [*expected, "report"]
    assert plan.changed_params == {"train.learning_rate": (0.0006, 0.0002)}
    by_name = {stage.name: stage for stage in plan.runs}
    assert by_name["train@grpo-0"].reasons == ("params: train.learning_rate",)
    assert by_name["evaluate@grpo-0"].reasons == ()
    assert by_name["evaluate@grpo-0"].after == ("train@grpo-0",)
    assert by_name["report"].after == ("evaluate@grpo-0", "evaluate@grpo_flipped-0")
    assert plan.unchanged == ["data"]
    assert sorted(_apply_and_repro(reproduced, request)) == sorted([*expected, "report"])  # as DVC


def test_a_new_method_adds_its_matrix_stages(reproduced: Path) -> None:
    request = RerunRequest(overrides=["runs.methods=[grpo,grpo_flipped,grpo_x4]"])
    plan = plan_rerun(reproduced, request)
    assert [s.name for s in plan.runs] == ["train@grpo_x4-0", "evaluate@grpo_x4-0", "report"]
    assert plan.runs[0].reasons == ("not in dvc.lock (never run)",)
    assert "dvc repro would run 3 of 8 stages" in render_plan(plan)
    assert sorted(_apply_and_repro(reproduced, request)) == sorted(s.name for s in plan.runs)


def test_a_profile_and_the_checkout_state_count(reproduced: Path) -> None:
    # Only evaluate declares evaluate.*: the profile's n reruns evaluation and the report.
    names = _names(reproduced, RerunRequest(profile="more-samples"))
    assert names == ["evaluate@grpo-0", "evaluate@grpo_flipped-0", "report"]
    # The backend's section is a param of train through ${train.backend}.
    assert _names(reproduced, RerunRequest(overrides=["local.micro_batch_sequences=8"])) == [
        "train@grpo-0",
        "train@grpo_flipped-0",
        "evaluate@grpo-0",
        "evaluate@grpo_flipped-0",
        "report",
    ]
    # No change, nothing to run; a missing output reruns its stage and what follows.
    plan = plan_rerun(reproduced, RerunRequest())
    assert plan.runs == [] and "would run nothing: all 6 stages" in render_plan(plan)
    (reproduced / "evals" / "grpo_flipped-s0.txt").unlink()
    try:
        plan = plan_rerun(reproduced, RerunRequest())
        assert [s.name for s in plan.runs] == ["evaluate@grpo_flipped-0", "report"]
        assert plan.runs[0].reasons == ("outputs: evals/grpo_flipped-s0.txt (missing)",)
    finally:
        run_checked([dvc_binary(), "checkout", "-q"], reproduced, _env())


def test_params_are_compared_with_the_last_run_not_with_params_yaml(reproduced: Path) -> None:
    """params.yaml edited but not reproduced: setting the value back reruns nothing (DVC
    compares with dvc.lock); YAML 1.2 numbers such as train.epsilon: 1e-6 compare equal."""
    original = (reproduced / "params.yaml").read_text()
    edited = yaml.safe_load(original)
    edited["train"]["learning_rate"] = 0.0005  # the default: 6e-4
    (reproduced / "params.yaml").write_text(yaml.safe_dump(edited, sort_keys=False))
    try:
        assert _names(reproduced, RerunRequest())[:2] == ["train@grpo-0", "train@grpo_flipped-0"]
        assert _names(reproduced, RerunRequest(overrides=["train.learning_rate=6e-4"])) == []
    finally:
        (reproduced / "params.yaml").write_text(original)


def test_the_command_refuses_an_unknown_key_and_prints_the_plan(reproduced: Path) -> None:
    with pytest.raises(ConfigError, match=r"train\.lerning_rate: not a params key"):
        plan_rerun(reproduced, RerunRequest(overrides=["train.lerning_rate=2e-4"]))
    command = [sys.executable, "-m", "tagrpo.pipeline.cli", "plan"]
    env = {**_env(), "PYTHONPATH": str(ROOT)}
    typo = subprocess.run(
        [*command, "-S", "train.lerning_rate=2e-4"],
        cwd=reproduced,
        env=env,
        capture_output=True,
        text=True,
    )
    assert typo.returncode == 2 and typo.stdout == ""
    assert "train.lerning_rate: not a params key" in typo.stderr
    shown = run_checked([*command, "-S", "evaluate.n=128"], reproduced, env)
    assert shown.splitlines() == [
        "request: profile current; evaluate.n=128",
        "params changed from params.yaml (1):",
        "  evaluate.n: 64 -> 128",
        "dvc repro would run 3 of 6 stages, in this order:",
        "  evaluate@grpo-0          params: evaluate.n",
        "  evaluate@grpo_flipped-0  params: evaluate.n",
        "  report                   upstream runs: evaluate@grpo-0, evaluate@grpo_flipped-0",
        "up to date (3): data, train@grpo-0, train@grpo_flipped-0",
    ]


# -- code changes: the project's own code deps, as dvc.yaml declares them ---------------------


def _code_deps(deps: list[str]) -> list[str]:
    return [dep for dep in deps if dep.startswith(("stages/", "tagrpo/"))]


@pytest.fixture(scope="module")
def with_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small DAG with the real train and evaluate stages' code and params deps (dvc.yaml),
    over a copy of the project's code, reproduced once."""
    root = tmp_path_factory.mktemp("plan-code")
    real = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    dag = yaml.safe_load(DVC_YAML)
    for stage in ("train", "evaluate"):
        dag["stages"][stage]["deps"] += _code_deps(real[stage]["deps"])
        dag["stages"][stage]["params"] = real[stage]["params"]
    copy_checkout(root, "tagrpo", "stages", "preregistration")
    env = small_project(root, yaml.safe_dump(dag, sort_keys=False))
    assert len(_ran(run_checked([dvc_binary(), "repro"], root, env))) == 6
    run_checked([*GIT, "add", "-A"], root, env)
    run_checked([*GIT, "commit", "-q", "-m", "reproduced"], root, env)
    return root


def test_an_evaluation_fix_reruns_evaluation_not_training(with_code: Path) -> None:
    """An edit of the evaluation code (the runner, the vLLM backend): `tagrpo plan` lists the
    evaluations and the report, no train stage; and `dvc repro` then runs no train stage."""
    for name in ("tagrpo/evaluation/runner.py", "tagrpo/backends/vllm_backend.py"):
        with open(with_code / name, "a") as handle:
            handle.write("# an evaluation-only fix\n")
    try:
        plan = plan_rerun(with_code, RerunRequest())
        expected = ["evaluate@grpo-0", "evaluate@grpo_flipped-0", "report"]
        assert [stage.name for stage in plan.runs] == expected
        assert plan.runs[0].reasons == (
            "changed deps: tagrpo/backends/vllm_backend.py, tagrpo/evaluation/runner.py",
        )
        # DVC then skips the report: the evaluations' outputs came out byte-identical here.
        ran = _ran(run_checked([dvc_binary(), "repro"], with_code, _env()))
        assert sorted(ran) == expected[:2]
    finally:
        run_checked(["git", "checkout", "-q", "--", "."], with_code, _env())
        run_checked([dvc_binary(), "checkout", "-q"], with_code, _env())


def test_tracking_code_and_settings_that_cannot_change_results_rerun_nothing(
    with_code: Path,
) -> None:
    """MLflow tracking and progress bars are no stage's code; resuming, checkpoint frequency
    and worker counts are no stage's params."""
    for name in ("tagrpo/plumbing/tracking.py", "tagrpo/plumbing/progress.py"):
        with open(with_code / name, "a") as handle:
            handle.write("# a logging change\n")
    try:
        request = RerunRequest(
            overrides=[
                "runtime.verl.resume=false",
                "runtime.verl.checkpoint_every=1",
                "runtime.verl.grading_workers=16",
                "common.grading.workers=16",
            ]
        )
        plan = plan_rerun(with_code, request)
        assert len(plan.changed_params) == 4 and plan.runs == []
    finally:
        run_checked(["git", "checkout", "-q", "--", "."], with_code, _env())


# -- every reason, from a synthetic dvc.lock and `dvc status` (no DVC run: fast) -----------------


@pytest.fixture
def locked(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The small DAG's params.yaml and dvc.yaml, and a dvc.lock recording every stage as it is
    now (commands and params); returns the root and that lock, to be edited and written."""
    params = _write_small_dag(tmp_path)
    view = _dvc_yaml_view(params)
    stages = {}
    for name, stage in expand_stages(yaml.safe_load(DVC_YAML), params).items():
        recorded = {key: view[key.split(".")[0]] for key in stage.params}
        stages[name] = {"cmd": stage.cmd, "params": {"params.yaml": recorded}}
    return tmp_path, {"schema": "2.0", "stages": stages}


def _plan(root: Path, lock: dict[str, Any], status: dict[str, list[Any]] | None = None):
    (root / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    plan = plan_rerun(root, RerunRequest(), status=status or {})
    return {stage.name: stage for stage in plan.runs}, plan


ALL = ["data", "train@grpo-0", "train@grpo_flipped-0", "evaluate@grpo-0"]
ALL += ["evaluate@grpo_flipped-0", "report"]


def test_the_recorded_state_plans_nothing(locked) -> None:
    """The oracle of the tests below: the lock as written is up to date."""
    runs, plan = _plan(*locked)
    assert runs == {} and plan.order == ALL


def test_a_changed_command_reruns_the_stage_and_what_follows(locked) -> None:
    root, lock = locked
    lock["stages"]["train@grpo-0"]["cmd"] = "cat data.txt > models/grpo-s0.txt"
    runs, _ = _plan(root, lock)
    command = "cat data.txt params.yaml > models/grpo-s0.txt"
    assert runs["train@grpo-0"].reasons == (f"command changed: {command}",)
    assert list(runs) == ["train@grpo-0", "evaluate@grpo-0", "report"]
    assert runs["evaluate@grpo-0"].reasons == () and runs["evaluate@grpo-0"].after == (
        "train@grpo-0",
    )


def test_code_and_output_changes_from_dvc_status(locked) -> None:
    """`dvc status`'s changed code deps (the most common real case: an edited module), a
    deleted dep, outputs missing or not in the cache; params.yaml's entry is left to the
    params comparison, "always changed" is kept."""
    root, lock = locked
    status = {
        "train@grpo_flipped-0": [
            {
                "changed deps": {
                    "tagrpo/training/trainer.py": "modified",
                    "stages/train.py": "deleted",
                    "params.yaml": "modified",
                }
            },
            {"changed outs": {"models/grpo_flipped-s0.txt": "not in cache"}},
        ],
        "report": [{"changed outs": {"report.txt": "deleted"}}, "always changed"],
    }
    runs, _ = _plan(root, lock, status)
    assert runs["train@grpo_flipped-0"].reasons == (
        "changed deps: tagrpo/training/trainer.py, stages/train.py (missing)",
        "outputs: models/grpo_flipped-s0.txt (missing, not in the cache)",
    )
    assert runs["report"].reasons == ("always changed", "outputs: report.txt (missing)")
    assert list(runs) == ["train@grpo_flipped-0", "evaluate@grpo_flipped-0", "report"]


def test_params_dependencies_added_dropped_and_removed(locked) -> None:
    """A stage that declares a params section its last run did not record ("new params
    dependency", also when the run recorded no params at all), one it no longer declares,
    and a changed value."""
    root, lock = locked
    stages = lock["stages"]
    del stages["evaluate@grpo-0"]["params"]["params.yaml"]["evaluate"]
    stages["evaluate@grpo-0"]["params"]["params.yaml"]["rephrase"] = {"n": 1}
    del stages["data"]["params"]
    stages["report"]["params"]["params.yaml"]["report"] = {"changed": True}
    runs, _ = _plan(root, lock)
    assert runs["evaluate@grpo-0"].reasons == (
        "new params dependency evaluate",
        "no longer depends on params rephrase",
    )
    assert runs["data"].reasons == ("new params dependency data",)
    assert runs["report"].reasons[0].startswith("params: report.")
    assert list(runs) == ALL


# -- the always-changed preflight stage: runs every time, reruns nothing after it by itself ----

PREFLIGHT = """\
  preflight:
    cmd: python -m stages.preflight
    always_changed: true
    outs:
      - data/preflight/params.ok:
          cache: false
      - data/preflight/inputs.json:
          cache: false
    metrics:
      - metrics/preflight.json:
          cache: false
"""


@pytest.fixture(scope="module")
def with_preflight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small DAG behind the project's preflight stage (its real command over a copy of the
    code; every stage depends on its outputs through data), reproduced once."""
    root = tmp_path_factory.mktemp("plan-preflight")
    dag = DVC_YAML.replace("stages:\n", "stages:\n" + PREFLIGHT, 1).replace(
        "    cmd: echo data > data.txt\n",
        "    cmd: echo data > data.txt\n"
        "    deps:\n      - data/preflight/params.ok\n      - data/preflight/inputs.json\n",
    )
    copy_checkout(root, "tagrpo", "stages", "preregistration")
    env = small_project(root, dag)
    assert len(_ran(run_checked([dvc_binary(), "repro"], root, env))) == 7
    run_checked([*GIT, "add", "-A"], root, env)
    run_checked([*GIT, "commit", "-q", "-m", "reproduced"], root, env)
    return root


def test_the_always_changed_preflight_reruns_only_itself(with_preflight: Path) -> None:
    """A built checkout: `dvc status` lists only preflight (always changed); the plan runs
    preflight alone, and a learning rate reruns training and after, not data (issue 33.1)."""
    plan = plan_rerun(with_preflight, RerunRequest())
    assert [(s.name, s.reasons, s.after) for s in plan.runs] == [
        ("preflight", ("always changed",), ())
    ]
    assert "dvc repro would run 1 of 7 stages" in render_plan(plan)
    assert _apply_and_repro(with_preflight, RerunRequest()) == ["preflight"]  # as DVC
    request = RerunRequest(overrides=["train.learning_rate=2e-4"])
    expected = [
        "preflight",
        "train@grpo-0",
        "train@grpo_flipped-0",
        "evaluate@grpo-0",
        "evaluate@grpo_flipped-0",
        "report",
    ]
    plan = plan_rerun(with_preflight, request)
    assert [s.name for s in plan.runs] == expected
    assert plan.runs[1].after == () and plan.unchanged == ["data"]
    assert sorted(_apply_and_repro(with_preflight, request)) == sorted(expected)


def test_benchmark_files_changed_under_the_data_dir_rerun_data(
    with_preflight: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest preflight would write differs from the one data last ran on (an edited
    benchmark file under TAGRPO_DATA_DIR): data and everything after it rerun, and say why."""
    import tagrpo.splits.inputs

    edited = {"source": "synthetic", "files": {"aime24/test.jsonl": {"bytes": 5, "md5": "0"}}}
    monkeypatch.setattr(tagrpo.splits.inputs, "input_manifest", lambda config: edited)
    plan = plan_rerun(with_preflight, RerunRequest())
    assert [s.name for s in plan.runs] == ["preflight", *ALL]
    assert plan.runs[1].reasons == (
        "changed deps: data/preflight/inputs.json (rewritten by preflight)",
    )
