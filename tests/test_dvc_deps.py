"""Stage deps that cannot go stale: each DVC stage's deps cover every project file its command
loads (tagrpo/pipeline/stage_deps.py reads the import graph), and folder deps ignore bytecode."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tagrpo.pipeline.stage_deps import (
    RESULT_NEUTRAL,
    ImportGraph,
    check_stages,
    command_modules,
    compact,
    covers,
    dvc_stages,
    main,
    neutral_for,
)
from tagrpo.plumbing.paths import project_root


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def dvc_project(root: Path) -> None:
    """A DVC project without git (what ``dvc init --no-scm`` writes; no DVC logging set up)."""
    write(root, {".dvc/config": "[core]\n    no_scm = True\n"})


# Every way a module of this repository gets loaded, and one module nothing loads.
PROJECT = {
    "stages/__init__.py": "import pkg  # noqa\n",
    "stages/s.py": "import json\nimport pkg.a\n",
    "pkg/__init__.py": '"""A package."""\n',
    "pkg/a.py": (
        "import os\n"
        "from . import b\n"  # relative, a submodule by name
        "from .sub import thing\n"  # a lazy export of a package
        "from pkg.deep.leaf import VALUE\n"  # module level, two packages deep
        "def run():\n"
        "    from pkg import c  # inside a function\n"
        "    return c, 'pkg.d:main', 'pkg://pkg.e', 'pkg.f.Klass', 'pkg.no_such_module'\n"
    ),
    "pkg/b.py": "from ..pkg import g\n",  # two levels up and back down
    "pkg/c.py": "",
    "pkg/d.py": "",
    "pkg/e.py": "",
    "pkg/f.py": "class Klass: ...\n",
    "pkg/g.py": "NAME = 'table.yaml'\n",  # a data file beside the code
    "pkg/tables/table.yaml": "a: 1\n",
    "pkg/deep/__init__.py": "",
    "pkg/deep/leaf.py": "VALUE = 1\n",
    "pkg/sub/__init__.py": (
        "import importlib\n"
        "_EXPORTS = {'thing': 'lazy'}\n"
        "def __getattr__(name):\n"
        "    return getattr(importlib.import_module(f'{__name__}.{_EXPORTS[name]}'), name)\n"
    ),
    "pkg/sub/lazy.py": "thing = 1\n",
    "pkg/sub/other.py": "",
    "pkg/unused.py": "import pkg.sub.other\n",
    "pkg/README.md": "not data: no module names it\n",
}
LOADED = {
    "stages/__init__.py",
    "stages/s.py",
    "pkg/__init__.py",
    "pkg/a.py",
    "pkg/b.py",
    "pkg/c.py",
    "pkg/d.py",
    "pkg/e.py",
    "pkg/f.py",
    "pkg/g.py",
    "pkg/tables/table.yaml",
    "pkg/deep/__init__.py",
    "pkg/deep/leaf.py",
    "pkg/sub/__init__.py",
    "pkg/sub/lazy.py",
}


def test_closure_follows_every_import_and_only_files_of_the_repository(tmp_path: Path) -> None:
    write(tmp_path, PROJECT)
    graph = ImportGraph(tmp_path)
    assert graph.closure("stages.s") == LOADED
    assert graph.closure("pkg.unused") == {"pkg/__init__.py", "pkg/unused.py"} | {
        "pkg/sub/__init__.py",
        "pkg/sub/lazy.py",  # the lazy package names it: every export counts as loaded
        "pkg/sub/other.py",
    }
    with pytest.raises(ValueError, match=r"'pkg\.nothing' is not a module"):
        graph.closure("pkg.nothing")


def test_check_names_each_stage_and_the_files_its_deps_miss(tmp_path: Path) -> None:
    write(tmp_path, PROJECT)
    deps = ["stages/__init__.py", "stages/s.py", "pkg", "data/x.csv"]
    stages = {
        "covered": ("python -m stages.s --flag", deps),
        "short": (
            "python -m stages.s",
            ["stages", "pkg/a.py", "pkg/sub", "pkg/deep/leaf.py", "pkg/unused.py"],
        ),
    }
    covered, short = check_stages(tmp_path, stages)
    assert (covered.stage, covered.missing, covered.unneeded) == ("covered", (), ())
    assert covered.needed == tuple(sorted(LOADED))
    assert short.stage == "short"
    assert short.missing == (
        "pkg/__init__.py",
        "pkg/b.py",
        "pkg/c.py",
        "pkg/d.py",
        "pkg/deep/__init__.py",
        "pkg/e.py",
        "pkg/f.py",
        "pkg/g.py",
        "pkg/tables/table.yaml",
    )
    assert short.unneeded == ("pkg/unused.py",)
    with pytest.raises(ValueError, match=r"stage odd: no `python -m <module>`"):
        check_stages(tmp_path, {"odd": ("bash run.sh", deps)})
    with pytest.raises(ValueError, match=r"stage gone: 'stages.gone' is not a module"):
        check_stages(tmp_path, {"gone": ("python -m stages.gone", deps)})


def test_command_modules_and_dep_coverage() -> None:
    assert command_modules("python -m stages.train --method grpo --seed 0") == ["stages.train"]
    assert command_modules("python3 stages/report.py && .venv/bin/python -m a.b") == [
        "stages.report",
        "a.b",
    ]
    assert command_modules("dvc repro") == []
    assert covers("tagrpo/grading", "tagrpo/grading/pool.py")
    assert covers("tagrpo/grading/", "tagrpo/grading/pool.py")
    assert covers("tagrpo/grading/pool.py", "tagrpo/grading/pool.py")
    assert not covers("tagrpo/grad", "tagrpo/grading/pool.py")


def test_compact_writes_a_folder_only_when_all_its_modules_are_needed(tmp_path: Path) -> None:
    write(tmp_path, PROJECT)
    assert compact(tmp_path, LOADED) == [
        "pkg/__init__.py",
        "pkg/a.py",
        "pkg/b.py",
        "pkg/c.py",
        "pkg/d.py",
        "pkg/deep",
        "pkg/e.py",
        "pkg/f.py",
        "pkg/g.py",
        "pkg/sub/__init__.py",
        "pkg/sub/lazy.py",
        "pkg/tables/table.yaml",
        "stages",
    ]


def test_result_neutral_modules_and_what_only_they_load_are_no_deps(tmp_path: Path) -> None:
    """A RESULT_NEUTRAL module (tracking, progress bars) is not entered: neither it nor what
    only it loads is a dep (pkg/g.py is loaded by pkg/b.py alone)."""
    write(tmp_path, PROJECT)
    graph = ImportGraph(tmp_path)
    assert graph.closure("stages.s", neutral={"pkg/b.py"}) == LOADED - {
        "pkg/b.py",
        "pkg/g.py",
        "pkg/tables/table.yaml",
    }
    assert graph.closure("stages.s", neutral={"pkg/c.py"}) == LOADED - {"pkg/c.py"}
    # A stage that writes what a module otherwise only logs depends on it (the report's commit).
    assert "tagrpo/plumbing/tracking.py" in neutral_for(["stages.train"])
    assert "tagrpo/plumbing/tracking.py" not in neutral_for(["stages.report"])


def test_dvc_command_checks_stages_as_dvc_expands_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command reads dvc.yaml through DVC itself (matrix items, anchors, params deps)."""
    write(tmp_path, PROJECT)
    dvc_project(tmp_path)
    write(
        tmp_path,
        {
            "params.yaml": "seeds: [0, 1]\n",
            "dvc.yaml": (
                "stages:\n"
                "  wide:\n"
                "    cmd: python -m stages.s\n"
                "    deps: &code [stages, pkg]\n"
                "    params: [seeds]\n"
                "  short:\n"
                "    matrix: {seed: '${seeds}'}\n"
                "    cmd: python -m stages.s --seed ${item.seed}\n"
                "    deps: [stages, pkg/a.py, pkg/b.py, pkg/c.py, pkg/d.py, pkg/e.py, pkg/f.py,\n"
                "           pkg/g.py, pkg/deep, pkg/sub/__init__.py, pkg/sub/lazy.py,\n"
                "           pkg/__init__.py, pkg/README.md]\n"
            ),
        },
    )
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert capsys.readouterr().out == (
        # a folder dep over modules the stage never loads: their edits would rerun it
        "wide: modules its deps cover but it never loads (or result-neutral)\n"
        "  - pkg/sub/other.py\n"
        "  - pkg/unused.py\n"
        "short (2 matrix items): 1 loaded file(s) no dep covers\n"
        "  - pkg/tables/table.yaml\n"
        "short (2 matrix items): code deps it never loads (reruns it needlessly, or gone)\n"
        "  - pkg/README.md\n"
    )
    exact = ", ".join(compact(tmp_path, LOADED))
    (tmp_path / "dvc.yaml").write_text(
        f"stages:\n  ok:\n    cmd: python -m stages.s\n    deps: [{exact}]\n"
    )
    assert main(["--root", str(tmp_path), "--check"]) == 0
    assert capsys.readouterr().out == (
        "every loaded file is covered by a dep, every code dep loaded (1 stages)\n"
    )


def stages_with_every_profile(root: Path, tmp_path: Path) -> dict[str, tuple[str, tuple]]:
    """The stages DVC expands from dvc.yaml with params.yaml and with each profile applied (the
    default runs no data-scaling stage; profiles/data-scaling.yaml does)."""
    import shutil

    import yaml

    from tagrpo.config.profiles import merged_with_profile

    stages = dict(dvc_stages(root))
    for profile in sorted((root / "profiles").glob("*.yaml")):
        checkout = tmp_path / profile.stem
        dvc_project(checkout)
        shutil.copy(root / "dvc.yaml", checkout / "dvc.yaml")
        merged = merged_with_profile(profile, root / "params.yaml")
        (checkout / "params.yaml").write_text(yaml.safe_dump(merged))
        stages |= {
            f"{name} ({profile.name})": stage for name, stage in dvc_stages(checkout).items()
        }
    return stages


def test_dvc_yaml_deps_cover_every_project_file_each_stage_loads(tmp_path: Path) -> None:
    """Editing any module a stage imports (at any depth, even inside a function) reruns it.

    Fix a failure by adding the file, or its package folder, to the stage's deps in dvc.yaml (or
    by removing a dep it no longer loads); ``python -m tagrpo.pipeline.stage_deps`` prints the
    folder deps each stage needs, ``--check`` what is missing or needless.
    """
    import yaml

    root = project_root()
    results = check_stages(root, stages_with_every_profile(root, tmp_path))
    declared = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    assert {result.stage.partition("@")[0].partition(" ")[0] for result in results} == set(declared)
    missing = [f"{result.stage}: {path}" for result in results for path in result.missing]
    assert not missing, "deps that dvc.yaml does not declare:\n" + "\n".join(missing)
    # And no code dep the command never loads (moved, renamed or no longer imported): DVC would
    # rerun the stage for nothing, or refuse a dep that is gone.
    needless = [f"{result.stage}: {dep}" for result in results for dep in result.unneeded]
    assert not needless, "code deps the stage never loads:\n" + "\n".join(needless)
    # And no folder dep over a module the stage does not load (or a result-neutral one).
    over = [f"{result.stage}: {path}" for result in results for path in result.over]
    assert not over, "modules deps cover that the stage never loads:\n" + "\n".join(over)


def test_folder_deps_ignore_python_bytecode() -> None:
    """A folder dep hashes every file DVC does not ignore: with __pycache__ in the hash, running
    the code (without PYTHONDONTWRITEBYTECODE) changed the folder and reran its stages."""
    from dvc.repo import Repo

    root = project_root()
    with Repo(str(root)) as repo:
        pyc = os.path.join(root, "tagrpo", "grading", "__pycache__", "pool.cpython-311.pyc")
        assert repo.dvcignore.is_ignored_file(pyc)
        assert repo.dvcignore.is_ignored_dir(os.path.dirname(pyc))
        assert not repo.dvcignore.is_ignored_file(
            os.path.join(root, "tagrpo", "grading", "pool.py")
        )


def test_write_rewrites_code_deps_keeps_data_deps_and_then_checks_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--write`` turns a stale deps list into what the import graph needs; data deps stay."""
    write(tmp_path, PROJECT)
    dvc_project(tmp_path)
    write(
        tmp_path,
        {
            "params.yaml": "seeds: [0, 1]\n",
            "data/in.txt": "x\n",
            "dvc.yaml": (
                "stages:\n"
                "  short:\n"
                "    matrix: {seed: '${seeds}'}\n"
                "    cmd: python -m stages.s --seed ${item.seed}\n"
                "    deps: [data/in.txt, stages/s.py, pkg/a.py, pkg/gone.py]\n"
            ),
        },
    )
    assert main(["--root", str(tmp_path), "--check"]) == 1
    capsys.readouterr()
    assert main(["--root", str(tmp_path), "--write"]) == 0
    assert capsys.readouterr().out == "dvc.yaml: code deps rewritten for 1 stage(s): short\n"
    # the data dep first; a folder only where every module of it is loaded (pkg/deep, stages):
    # not pkg (pkg/unused.py), not pkg/sub (pkg/sub/other.py); pkg/gone.py is gone
    expected = (
        "    deps: [data/in.txt, pkg/__init__.py, pkg/a.py, pkg/b.py, pkg/c.py, pkg/d.py, "
        "pkg/deep, pkg/e.py,\n"
        "           pkg/f.py, pkg/g.py, pkg/sub/__init__.py, pkg/sub/lazy.py, "
        "pkg/tables/table.yaml, stages]\n"
    )
    assert (tmp_path / "dvc.yaml").read_text().endswith(expected)
    assert main(["--root", str(tmp_path), "--check"]) == 0


# What a train stage must not depend on: evaluation code and the vLLM evaluation backend (an
# evaluation fix must not retrain every policy), and the result-neutral modules.
NOT_TRAINING_CODE = (
    "tagrpo/evaluation",
    "tagrpo/backends/vllm_backend.py",
    "tagrpo/backends/vllm_worker.py",
    "tagrpo/backends/sample_store.py",
    *RESULT_NEUTRAL,
)


def test_train_stages_depend_on_no_evaluation_tracking_or_progress_code() -> None:
    root = project_root()
    train = {
        name: deps
        for name, (_, deps) in dvc_stages(root).items()
        if name.partition("@")[0].startswith("train")
    }
    assert train
    found = [
        f"{name}: {dep}"
        for name, deps in train.items()
        for dep in deps
        for banned in NOT_TRAINING_CODE
        if covers(dep, banned) or covers(banned, dep)
    ]
    assert not found, "train stages depending on evaluation or result-neutral code:\n" + "\n".join(
        found
    )


def test_no_stage_depends_on_settings_that_cannot_change_results() -> None:
    """The `runtime` section (resume, checkpoints, workers) and common.grading.workers are no
    stage's params: changing them reruns nothing (docs/design.md, "What a stage depends on")."""
    import yaml

    declared = yaml.safe_load((project_root() / "dvc.yaml").read_text())["stages"]
    neutral = ("runtime", "runtime.verl", "common", "common.grading", "common.grading.workers")
    found = [
        f"{name}: {param}"
        for name, stage in declared.items()
        for param in stage.get("params", [])
        if isinstance(param, str) and (param in neutral or param.startswith("runtime."))
    ]
    assert not found, "\n".join(found)
