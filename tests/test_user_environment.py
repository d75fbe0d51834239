"""A GPU user's set-up works as set up: environments are never versioned or copied, make runs
in the environment the user chose, the CLI and the UI share one Prefect home, and a delta
profile is merged onto its base."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tagrpo.config.params import ConfigError, read_yaml_mapping
from tagrpo.config.profiles import merged_with_profile, profile_base_chain
from tagrpo.pipeline.rerun import (
    RerunRequest,
    delta_profiles,
    prepare_scratch,
    profile_help,
    resolve_params,
)

ROOT = Path(__file__).resolve().parents[1]


def _git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True).stdout


def _fake_environment(folder: Path, *, conda: bool = False) -> None:
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_text("#!/bin/sh\n")
    (folder / "lib" / "site-packages" / "torch").mkdir(parents=True)
    (folder / "lib" / "site-packages" / "torch" / "big.so").write_bytes(b"\0" * 1000)
    if conda:
        (folder / "conda-meta").mkdir()
    else:
        (folder / "pyvenv.cfg").write_text("home = /usr/bin\n")


@pytest.mark.parametrize("name", [".venv", ".venv-gpu", ".venv-engines", ".venv-cu13"])
def test_every_venv_folder_is_ignored_by_git(name: str) -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", f"{name}/bin/python"], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0, f"{name} is not ignored by .gitignore"


def test_a_scratch_copy_never_takes_an_environment(tmp_path: Path) -> None:
    """An environment the user did not ignore (named anything, at the top or nested in an
    untracked folder, venv or conda) stays out of the rerun's copy; other untracked files
    are copied as before."""
    source = tmp_path / "checkout"
    source.mkdir()
    (source / "dvc.yaml").write_text("stages: {}\n")
    (source / "params.yaml").write_text("a: 1\n")
    (source / ".gitignore").write_text("/.tagrpo\n")  # nothing about environments
    _git(source, "init", "-q")
    _git(source, "add", "-A")
    _git(source, "commit", "-q", "-m", "init")
    _fake_environment(source / "gpu-env")
    _fake_environment(source / "tools" / "conda-env", conda=True)
    (source / "tools" / "helper.py").write_text("untracked, copied\n")
    (source / "notes.md").write_text("untracked, copied\n")
    status = _git(source, "status", "--porcelain", "--untracked-files=all")
    assert "gpu-env/pyvenv.cfg" in status  # git would hand it over

    target = source / ".tagrpo" / "runs" / "r1"
    prepare_scratch(source, target, {"a": 2}, "test")
    assert (target / "notes.md").is_file() and (target / "tools" / "helper.py").is_file()
    assert not (target / "gpu-env").exists()
    assert not (target / "tools" / "conda-env").exists()


# -- make: the environment the user set up --------------------------------------------------


def _make_dry_run(target: str, env_overrides: dict[str, str], *args: str) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "VENV", "MAKEFLAGS")}
    env.update(env_overrides)
    done = subprocess.run(
        ["make", "-n", target, *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def _interpreter_printing(folder: Path, checkout: str) -> Path:
    """A stand-in environment whose python answers make's question (which checkout does
    ``import tagrpo`` load) with ``checkout``."""
    (folder / "bin").mkdir(parents=True)
    python = folder / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho {checkout}\n")
    python.chmod(0o755)
    return folder


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_runs_in_the_active_environment_that_imports_this_checkout(tmp_path: Path) -> None:
    gpu = _interpreter_printing(tmp_path / "venv-gpu", str(ROOT.resolve()))
    shown, _ = _make_dry_run("mlflow-ui", {"VIRTUAL_ENV": str(gpu)})
    assert f"{gpu}/bin/mlflow ui" in shown
    assert "/bin/pip install" not in shown  # make installs nothing into it
    assert "using the environment" in shown


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_keeps_to_dot_venv_when_the_active_environment_is_another_projects(
    tmp_path: Path,
) -> None:
    other = _interpreter_printing(tmp_path / "other", "/somewhere/else")
    shown, said = _make_dry_run("mlflow-ui", {"VIRTUAL_ENV": str(other)})
    assert f"{ROOT.resolve()}/.venv/bin/mlflow ui" in shown
    assert f"the active environment {other} does not import this checkout" in said


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_venv_chooses_explicitly_and_no_environment_means_dot_venv(tmp_path: Path) -> None:
    chosen = _interpreter_printing(tmp_path / "chosen", str(ROOT.resolve()))
    shown, _ = _make_dry_run("prefect-server", {}, f"VENV={chosen}")
    assert f"{chosen}/bin/prefect server start" in shown
    shown, said = _make_dry_run("prefect-server", {})
    assert f"{ROOT.resolve()}/.venv/bin/prefect server start" in shown and not said


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_install_refuses_an_environment_without_this_checkout(tmp_path: Path) -> None:
    other = _interpreter_printing(tmp_path / "other", "/somewhere/else")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MAKEFLAGS")}
    done = subprocess.run(
        ["make", "install", f"VENV={other}"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert f"VENV={other} does not import this checkout's tagrpo (/somewhere/else)" in done.stdout


# -- one Prefect home -------------------------------------------------------------------------


def test_the_flows_use_the_checkouts_prefect_home_unless_one_is_set(tmp_path: Path) -> None:
    """``python -m flows.pipeline`` outside make: the home make prefect-server serves; an
    explicit PREFECT_HOME wins. Checked in a fresh interpreter: Prefect reads it on import."""
    script = (
        "import flows.pipeline\n"
        "from prefect.settings import get_current_settings\n"
        "print(get_current_settings().home)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    shown = (
        subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert Path(shown) == ROOT / ".prefect"
    mine = tmp_path / "my-prefect"
    shown = (
        subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(mine)},
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert Path(shown) == mine


# -- a delta profile is merged onto its base ----------------------------------------------------


def test_the_authors_profile_is_merged_onto_the_paper_profile() -> None:
    profile = ROOT / "profiles" / "paper-authors-hparams.yaml"
    assert profile_base_chain(profile) == ["paper", "paper-authors-hparams"]
    merged = merged_with_profile(profile, ROOT / "params.yaml")
    assert merged["train"]["backend"] == "verl"  # from paper.yaml: the delta does not set it
    assert merged["data"]["source"] == "hub"
    assert merged["evaluate"]["n"] == 128  # the delta's own value wins
    assert merged["common"]["profile"] == "paper-authors-hparams"
    # The Prefect flow resolves the same params; its form and the CLI name the base.
    rerun = resolve_params(ROOT, RerunRequest(profile="paper-authors-hparams"))
    assert rerun == merged
    assert delta_profiles(ROOT) == {"paper-authors-hparams": ["paper", "paper-authors-hparams"]}
    assert "paper-authors-hparams = paper + paper-authors-hparams" in profile_help(ROOT)


def test_the_prefect_form_describes_the_delta_profile() -> None:
    from prefect.utilities.callables import parameter_schema

    from flows.pipeline import pipeline

    schema = parameter_schema(pipeline.fn).model_dump()
    described = yaml.safe_dump(schema["properties"]["profile"])
    assert "paper-authors-hparams = paper + paper-authors-hparams" in described


def test_a_broken_base_is_refused_naming_the_file(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "delta.yaml").write_text("base: missing\nevaluate: {n: 8}\n")
    with pytest.raises(ConfigError, match=r"base: 'missing' is not a profile in"):
        merged_with_profile(profiles / "delta.yaml", params)
    (profiles / "a.yaml").write_text("base: b\n")
    (profiles / "b.yaml").write_text("base: a\n")
    with pytest.raises(ConfigError, match="profiles form a cycle: a -> b -> a"):
        merged_with_profile(profiles / "a.yaml", params)
    assert read_yaml_mapping(params) == read_yaml_mapping(ROOT / "params.yaml")
