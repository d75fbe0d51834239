"""The way back after a profile run (issue 53, item 4): the path docs/user-guide.md gives, run
as written, in a small git + DVC project shaped like this one: `core.autostage` on as in
.dvc/config, cached outputs (models, evaluations) and `cache: false` metrics and a report that
git tracks, matrix stages over `runs`. The profile changes training and evaluation params and
adds a seed, so it rewrites cached and tracked outputs and adds outputs of its own.

The path: `tagrpo params apply` (which names the tracked outputs the run rewrites, before it
runs), `dvc repro`, `tagrpo params restore`; afterwards params.yaml, dvc.lock and every tracked
output are HEAD's in the index and the work tree, the cached outputs are the committed run's
and DVC finds nothing to rerun. README's former `git checkout params.yaml dvc.lock` is shown
to leave the profile's dvc.lock (the staged copy).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scratch_project import run_checked
from test_plan import GIT, small_project

from tagrpo.pipeline.rerun import dvc_binary
from tagrpo.pipeline.restore import files_under, summarise
from tagrpo.plumbing.paths import project_root

ROOT = project_root()
PROFILE = "profiles/retrain.yaml"
# The profile's own outputs (its seed 1): path patterns of the method.
OWN_OUTPUTS = ("evals/{}-s1/answers.txt", "metrics/{}-s1.json", "models/{}-s1.txt")
DVC_YAML = """\
stages:
  train:
    matrix:
      method: ${runs.methods}
      seed: ${runs.seeds}
    cmd: echo ${item.method} ${train.learning_rate} > models/${item.method}-s${item.seed}.txt
    params:
      - train
    outs:
      - models/${item.method}-s${item.seed}.txt
  evaluate:
    matrix:
      method: ${runs.methods}
      seed: ${runs.seeds}
    cmd: >-
      mkdir -p metrics evals/${item.method}-s${item.seed}
      && cat models/${item.method}-s${item.seed}.txt
      > evals/${item.method}-s${item.seed}/answers.txt
      && echo '{"n": ${evaluate.n}}' > metrics/${item.method}-s${item.seed}.json
    deps:
      - models/${item.method}-s${item.seed}.txt
    params:
      - evaluate
    outs:
      - evals/${item.method}-s${item.seed}/answers.txt
    metrics:
      - metrics/${item.method}-s${item.seed}.json:
          cache: false
  report:
    cmd: >-
      mkdir -p reports && cat evals/*/answers.txt > reports/report.md
      && ls evals/* | wc -l | sed 's/.*/{"files": &}/' > metrics/report.json
    deps:
      - evals
    outs:
      - reports/report.md:
          cache: false
    metrics:
      - metrics/report.json:
          cache: false
"""


def documented_way_back() -> list[str]:
    """The commands of docs/user-guide.md's block that holds `tagrpo params restore`."""
    guide = (ROOT / "docs" / "user-guide.md").read_text(encoding="utf-8")
    blocks = [
        b for b in re.findall(r"```bash\n(.*?)```", guide, re.DOTALL) if "params restore" in b
    ]
    assert len(blocks) == 1, "docs/user-guide.md: one block gives the way back"
    return [line.split("#")[0].strip() for line in blocks[0].splitlines() if line.strip()]


def _run(command: str, root: Path, env: dict[str, str]) -> str:
    """One documented line: `tagrpo ...` as this checkout's CLI, `dvc ...` as DVC."""
    words = shlex.split(command)
    if words[0] == "tagrpo":
        words = [sys.executable, "-m", "tagrpo.pipeline.cli", *words[1:]]
    elif words[0] == "dvc":
        words = [dvc_binary(), *words[1:]]
    return run_checked(words, root, env)


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=root, capture_output=True, text=True, check=True
    ).stdout


def _committed(root: Path, path: str) -> str:
    return _git(root, "show", f"HEAD:{path}")


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The small project reproduced with its params (the embedded default's) and committed,
    outputs included, as this repository commits its run."""
    root = tmp_path / "project"
    root.mkdir()
    env = {**small_project(root, DVC_YAML), "PYTHONPATH": str(ROOT)}
    (root / PROFILE).write_text(
        "train: {learning_rate: 2.0e-4}\nevaluate: {n: 128}\nruns: {seeds: [0, 1]}\n"
    )
    run_checked([dvc_binary(), "config", "core.autostage", "true"], root, env)
    run_checked([dvc_binary(), "repro"], root, env)
    run_checked([*GIT, "add", "-A"], root, env)
    run_checked([*GIT, "commit", "-q", "-m", "the default's run"], root, env)
    return root, env


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_documented_way_back_restores_params_lock_and_outputs(
    project: tuple[Path, dict[str, str]],
) -> None:
    root, env = project
    apply, repro, restore = documented_way_back()
    assert apply.startswith("tagrpo params apply profiles/") and repro == "dvc repro"
    assert restore == "tagrpo params restore"
    tracked = ["metrics/grpo-s0.json", "metrics/grpo_flipped-s0.json", "metrics/report.json"]
    tracked.append("reports/report.md")
    assert files_under(_git(root, "ls-files").split(), {*tracked}) == set(tracked)
    committed_model = (root / "models" / "grpo-s0.txt").read_text()

    applied = _run(re.sub(r"profiles/\S+", PROFILE, apply), root, env)
    # Said before the run: the tracked outputs of the stages these params rerun.
    assert (
        "warning: the next `dvc repro` rewrites 4 file(s) git tracks, the committed run's "
        f"outputs: {summarise(tracked)}"
    ) in applied, applied
    assert summarise(tracked) == ", ".join(tracked)  # a few files: each named
    grouped = summarise(["dvc.lock", "plots/a.csv", "plots/b/c.csv", "reports/r.md"], limit=3)
    assert grouped == "dvc.lock, plots/ (2), reports/r.md"  # more: by top-level folder

    _run(repro, root, env)
    staged = _git(root, "diff", "--cached", "--name-only").split()
    assert "dvc.lock" in staged  # core.autostage: DVC staged the profile's dvc.lock
    assert (root / "metrics" / "grpo-s0.json").read_text() == '{"n": 128}\n'
    assert (root / "models" / "grpo-s0.txt").read_text() != committed_model
    # README's former way back restores dvc.lock from the index: the profile's stays.
    run_checked([*GIT, "checkout", "params.yaml", "dvc.lock"], root, env)
    assert (root / "dvc.lock").read_text() != _committed(root, "dvc.lock")

    restored = _run(restore, root, env)
    for path in ("params.yaml", "dvc.lock", *tracked):
        assert (root / path).read_text() == _committed(root, path), path
    # Index and work tree both HEAD's for every tracked file; the cached outputs DVC's.
    assert _git(root, "status", "--porcelain", "--untracked-files=no") == ""
    assert (root / "models" / "grpo-s0.txt").read_text() == committed_model
    assert run_checked([dvc_binary(), "status", "--json"], root, env).strip() == "{}"
    planned = run_checked([sys.executable, "-m", "tagrpo.pipeline.cli", "plan"], root, env)
    assert "dvc repro would run nothing" in planned, planned
    # DVC staged a .gitignore in each new evals/ folder: removed, as HEAD has none.
    added = ["evals/grpo-s1/.gitignore", "evals/grpo_flipped-s1/.gitignore"]
    assert restored.splitlines()[:2] == [
        "restored from git HEAD, in the index and the work tree: 8 file(s) that differed: "
        f"dvc.lock, {', '.join(added)}, {', '.join(tracked[:3])}, models/.gitignore, "
        "reports/report.md",
        f"removed 2 file(s) the run added that HEAD does not have: {', '.join(added)}",
    ]
    assert "dvc checkout: 4 cached output(s) back as HEAD's dvc.lock records them: " in restored
    # dvc checkout deletes the profile's own outputs (its seed 1), cache: false ones too: named.
    own = [path.format(m) for path in OWN_OUTPUTS for m in ("grpo", "grpo_flipped")]
    assert (
        f"dvc checkout removed 6 output(s) HEAD's dvc.lock does not have (the profile's own "
        f"stages): {summarise(own)}; "
    ) in restored, restored
    assert not any((root / path).exists() for path in own)
    assert _git(root, "status", "--porcelain") == ""  # nothing left over, tracked or not


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_restore_in_a_clone_without_the_committed_runs_cache_says_what_is_missing(
    project: tuple[Path, dict[str, str]],
) -> None:
    """A fresh clone holds the committed run's tracked outputs, not its cached ones (no DVC
    remote): the tracked files come back, dvc checkout cannot, and the exit status says so."""
    root, env = project
    shutil.rmtree(root / ".dvc" / "cache")
    _run(f"tagrpo params apply {PROFILE}", root, env)
    _run("dvc repro", root, env)
    result = subprocess.run(
        [sys.executable, "-m", "tagrpo.pipeline.cli", "params", "restore"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stderr
    for path in ("params.yaml", "dvc.lock", "metrics/report.json", "reports/report.md"):
        assert (root / path).read_text() == _committed(root, path), path
    assert _git(root, "status", "--porcelain", "--untracked-files=no") == ""
    missing = ["evals/grpo-s0/answers.txt", "evals/grpo_flipped-s0/answers.txt"]
    missing += ["models/grpo-s0.txt", "models/grpo_flipped-s0.txt"]
    assert (
        "dvc checkout could not restore 4 cached output(s), in no DVC cache here (this clone "
        f"never made them): {', '.join(missing)}; each holds what the profile's run left there, "
        "or nothing: `dvc repro` makes them"
    ) in result.stdout.splitlines(), result.stdout


def test_restore_without_git_head_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    env = small_project(root, DVC_YAML)
    run_checked([*GIT, "update-ref", "-d", "HEAD"], root, env)  # a repository with no commit
    result = subprocess.run(
        [sys.executable, "-m", "tagrpo.pipeline.cli", "params", "restore"],
        cwd=root,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"tagrpo params restore: git show failed in {root}: "), line
