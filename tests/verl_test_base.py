"""The verl CPU tests' warm-started policy: its recipe, the committed result and its check.

The tests need a policy with mixed rewards on the mini world (the grouping checks tell joint and
per-rephrasing groups apart only then): the project's own ``base_model`` stage, 1,500 steps on
chains of 2. Trained inside every CI run it took 775 s of a 5,400 s budget; it is committed
instead (``tests/fixtures/verl-cpu-base``, 1.5 MB) with the digest of its recipe:

- what the ``base_model`` stage reads, as DVC sees it: the params dvc.yaml lists for the stage
  (resolved in the test's scratch project), the content of its code dependencies, and the
  content of the data stage's tables it trains on;

so the verl tests (which build the scratch project and run the data stage anyway) refuse a
committed policy whose recipe changed, naming what changed and the command that regenerates it:

    .venv/bin/python tests/verl_test_base.py

``test_verl_test_base.py`` (``make test-recipes``, not CI: it is the 775 s) trains the recipe
again and compares the weights with the committed ones, exactly.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml
from scratch_project import ROOT, run_checked, scratch_project

FIXTURE = ROOT / "tests" / "fixtures" / "verl-cpu-base"
RECIPE_FILE = "RECIPE.json"

# The embedded default's tiny Llama, trained on chains of 2: a policy with mixed rewards, which
# the grouping checks need (a 500-step base on a smaller corpus answered every response wrong on
# world v2, so joint and per-variant groups could not be told apart).
BASE_PROFILE = {
    # One thread per process: on a shared 2-core machine, OpenMP threads spinning for a core
    # they do not get made the warm start 10x slower (measured: 416 s with 2 threads vs 38 s).
    "common": {
        "profile": "custom",
        "torch_threads": 1,
        "miniworld": {"train_lengths": {2: 1.0}},
    },
    "data": {
        "synthetic": {
            # World v2's confirmatory seed, which the committed base was trained on (the
            # default's world seed changed with world v3; this policy's recipe did not).
            "seed": 2026,
            "train_size": 24,
            "benchmarks": {
                "mini_chains": {"size": 8},
                "mini_long": {"size": 2},
                "mini_unseen": {"size": 2},
            },
        }
    },
    "base_model": {
        "warmstart": {
            # The default's warm-start: world v2's equation responses are not learned in 500 steps
            # (that base wrote three or four equations for a chain of 2 and never scored).
            "training": {"steps": 1500},
        },
        "probe": {"enabled": False},
    },
}


def build_data(root: Path, profile: dict) -> dict[str, str]:
    """A scratch project of this tree (``profiles/verl-cpu.yaml``, then ``profile``) with its
    data stage run; the environment to run stages in it."""
    env = scratch_project(root, "profiles/verl-cpu.yaml")
    (root / "verl-cpu-test.yaml").write_text(yaml.safe_dump(profile))
    python = sys.executable
    run_checked(
        [python, "-m", "tagrpo.pipeline.cli", "params", "apply", "verl-cpu-test.yaml"], root, env
    )
    run_checked([python, "-m", "stages.data"], root, env)
    return env


def _dotted(params: dict, key: str):
    value = params
    for part in key.split("."):
        value = value[part]
    return value


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _table_digest(path: Path) -> str:
    """A parquet table's rows, not its bytes (the writer's version is in the file)."""
    rows = pq.read_table(path).to_pylist()
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


def base_model_stage() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["base_model"]


def code_digests(stage: dict | None = None) -> dict[str, str]:
    """The content of the ``base_model`` stage's code dependencies (dvc.yaml's deps)."""
    stage = stage or base_model_stage()
    code = {}
    for dep in stage["deps"]:
        path = ROOT / dep
        if not dep.startswith(("tagrpo/", "stages/")):
            continue  # data: hashed as the tables the scratch project's data stage wrote
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            code[str(file.relative_to(ROOT))] = _file_digest(file)
    return code


def recipe(root: Path) -> dict[str, dict[str, object]]:
    """What the ``base_model`` stage of the scratch project ``root`` would train from."""
    stage = base_model_stage()
    params = yaml.safe_load((root / "params.yaml").read_text())
    processed = root / "data" / "processed"
    data = {
        str(path.relative_to(processed)): _table_digest(path)
        for path in sorted(processed.rglob("*.parquet"))
    }
    values = {
        "params": {key: _dotted(params, key) for key in stage["params"]},
        "code": code_digests(stage),
        "data": data,
    }
    return json.loads(json.dumps(values, sort_keys=True))  # as RECIPE.json holds it (str keys)


def recipe_changes(committed: dict, current: dict) -> list[str]:
    """The entries of the two recipes that differ, named (empty: the same recipe)."""
    changes = []
    for part in ("params", "code", "data"):
        old, new = committed.get(part, {}), current[part]
        for name in sorted(set(old) | set(new)):
            if old.get(name) != new.get(name):
                changes.append(f"{part}: {name}")
    return changes


def committed_recipe() -> dict:
    return json.loads((FIXTURE / RECIPE_FILE).read_text())


def refuse_changes(changes: list[str]) -> None:
    """An AssertionError naming the changed recipe entries and the command that regenerates."""
    if changes:
        raise AssertionError(
            "the committed verl test base (tests/fixtures/verl-cpu-base) was trained with "
            f"another recipe ({len(changes)} changed: {', '.join(changes[:8])}); regenerate it "
            "with `.venv/bin/python tests/verl_test_base.py` and commit the folder"
        )


def install_committed_base(root: Path) -> None:
    """Copy the committed policy to ``root/models/base``, refusing it if ``root``'s recipe is
    not the one it was trained with."""
    refuse_changes(recipe_changes(committed_recipe(), recipe(root)))
    target = root / "models" / "base"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(FIXTURE, target, ignore=shutil.ignore_patterns(RECIPE_FILE))


def train_base(root: Path, env: dict[str, str]) -> Path:
    """Run the scratch project's ``base_model`` stage; the folder it wrote."""
    run_checked([sys.executable, "-m", "stages.base_model"], root, env)
    return root / "models" / "base"


def regenerate(work: Path) -> None:
    """Train the recipe in ``work`` and replace the committed fixture with the result."""
    env = build_data(work, BASE_PROFILE)
    trained = train_base(work, env)
    shutil.rmtree(FIXTURE, ignore_errors=True)
    shutil.copytree(trained, FIXTURE)
    (FIXTURE / RECIPE_FILE).write_text(json.dumps(recipe(work), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="verl-test-base-") as scratch:
        regenerate(Path(scratch) / "project")
    print(f"wrote {FIXTURE.relative_to(ROOT)}")
