"""The project root from anywhere: the checkout around the working directory, else the source
tree of the installed package (a notebook or a script started outside the checkout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tagrpo
from tagrpo.plumbing.paths import project_root

SOURCE_TREE = Path(tagrpo.__file__).resolve().parent.parent


def test_the_checkout_around_the_working_directory_is_the_root(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "params.yaml").write_text("{}\n")
    assert project_root(nested) == tmp_path.resolve()


def test_outside_a_checkout_the_root_is_the_packages_source_tree(tmp_path: Path) -> None:
    assert (SOURCE_TREE / "dvc.yaml").is_file()
    assert project_root(tmp_path) == SOURCE_TREE
    # The same for a process started elsewhere (its working directory holds no checkout).
    shown = subprocess.run(
        [sys.executable, "-c", "from tagrpo.plumbing.paths import project_root as p; print(p())"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(SOURCE_TREE), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == str(SOURCE_TREE)
