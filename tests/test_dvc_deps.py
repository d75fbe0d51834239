"""Stage deps that cannot go stale: each DVC stage's deps cover every project file its command
loads (tagrpo/pipeline/stage_deps.py reads the import graph), and folder deps ignore bytecode."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tagrpo.pipeline.paths import project_root
from tagrpo.pipeline.stage_deps import (
    ImportGraph,
    check_stages,
    command_modules,
    compact,
    covers,
    dvc_stages,
    folder_deps,
    main,
)


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


def test_folder_deps_name_a_package_when_the_stage_loads_at_least_half(tmp_path: Path) -> None:
    write(tmp_path, PROJECT)
    assert folder_deps(tmp_path, LOADED) == [
        "pkg/__init__.py",
        "pkg/a.py",
        "pkg/b.py",
        "pkg/c.py",
        "pkg/d.py",
        "pkg/deep",  # 2 of its 2 modules
        "pkg/e.py",
        "pkg/f.py",
        "pkg/g.py",
        "pkg/sub",  # 2 of 3
        "pkg/tables",  # data only
        "stages/__init__.py",
        "stages/s.py",
    ]
    assert folder_deps(tmp_path, {"pkg/sub/lazy.py"}) == ["pkg/sub/lazy.py"]  # 1 of 3


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
                "  ok:\n"
                "    cmd: python -m stages.s\n"
                "    deps: &code [stages, pkg]\n"
                "    params: [seeds]\n"
                "  short:\n"
                "    matrix: {seed: '${seeds}'}\n"
                "    cmd: python -m stages.s --seed ${item.seed}\n"
                "    deps: [stages, pkg/a.py, pkg/b.py, pkg/c.py, pkg/d.py, pkg/e.py, pkg/f.py,\n"
                "           pkg/g.py, pkg/deep, pkg/sub, pkg/__init__.py, pkg/README.md]\n"
            ),
        },
    )
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert capsys.readouterr().out == (
        "short (2 matrix items): 1 loaded file(s) no dep covers\n"
        "  - pkg/tables/table.yaml\n"
        "short (2 matrix items): code deps it never loads (reruns it needlessly, or gone)\n"
        "  - pkg/README.md\n"
    )
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  ok:\n    cmd: python -m stages.s\n    deps: [stages, pkg]\n"
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

    from tagrpo.config.params import merged_with_profile

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
    # the data dep first; pkg/unused.py and pkg/gone.py are not loaded, so no folder `pkg`
    expected = (
        "    deps: [data/in.txt, pkg/__init__.py, pkg/a.py, pkg/b.py, pkg/c.py, pkg/d.py, "
        "pkg/deep, pkg/e.py,\n"
        "           pkg/f.py, pkg/g.py, pkg/sub, pkg/tables, stages/__init__.py, stages/s.py]\n"
    )
    assert (tmp_path / "dvc.yaml").read_text().endswith(expected)
    assert main(["--root", str(tmp_path), "--check"]) == 0
