"""Inputs verified before use (issue 53): the local source files against their manifests (rows
and SHA-256, tagrpo/data/sources/manifests.py) in the data stage, and every stage's inputs that
another stage wrote against dvc.lock, by content (tagrpo.plumbing.verify.check_inputs).

The drills run the real stage commands in small scratch projects: the data stage on a copy of
the shared benchmark files with one truncated, the rephrase and base_model stages on a DVC
project whose data stage's parquet was damaged after dvc.lock recorded it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tagrpo.config.params import deep_merge, repo_params
from tagrpo.data.schema import write_questions
from tagrpo.data.sources.manifests import (
    MANIFESTS,
    SourceMismatchError,
    check_source_files,
    jsonl_rows_and_sha256,
)
from tagrpo.data.sources.registry import SOURCES
from tagrpo.plumbing.paths import project_root, shared_data_dir
from tagrpo.plumbing.verify import OutputCorruptedError, check_inputs, dvc_md5
from tagrpo.report.build import data_section, source_files_sentence

HINT = " (TAGRPO_TRACEBACK=1 or --traceback for the traceback)"  # the stages' one-line errors
ROOT = project_root()
AIME24 = MANIFESTS["aime24"]


@pytest.fixture
def shared() -> Path:
    directory = shared_data_dir()
    if not (directory / "SOURCES.md").is_file():
        pytest.skip(f"shared benchmark data not found at {directory} (set TAGRPO_DATA_DIR)")
    return directory


def _sources_md(directory: Path) -> dict[str, tuple[int, str]]:
    """SOURCES.md's row count (its table) and SHA-256 (its list) per file."""
    text = (directory / "SOURCES.md").read_text(encoding="utf-8")
    rows = {
        name: int(count.replace(",", ""))
        for name, count in re.findall(r"^\| `([^`]+\.jsonl)` \| ([\d,]+) \|", text, re.M)
    }
    digests = dict(
        (name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+\.jsonl)$", text, re.M)
    )
    return {name: (rows[name], digests[name]) for name in rows}


def test_the_manifests_are_those_of_sources_md_and_of_the_files(shared: Path) -> None:
    recorded = _sources_md(shared)
    for name, manifest in MANIFESTS.items():
        assert manifest.file == SOURCES[name].file
        assert recorded[manifest.file] == (manifest.rows, manifest.sha256), manifest.file
        assert jsonl_rows_and_sha256(shared / manifest.file) == (manifest.rows, manifest.sha256)
    # Every shared file a registered source reads has a manifest (math/test.jsonl: none reads it).
    read = {source.file for source in SOURCES.values()}
    assert sorted(set(recorded) & read) == sorted(m.file for m in MANIFESTS.values())


def test_rows_are_counted_as_the_loader_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    for text, rows in ((b"", 0), (b"{}\n", 1), (b"{}\n{", 2), (b"\n\n", 2)):
        path.write_bytes(text)
        assert jsonl_rows_and_sha256(path) == (rows, hashlib.sha256(text).hexdigest())


def _truncated_copy(shared: Path, target: Path) -> tuple[int, str]:
    """``target``: a copy of the shared data, aime24 truncated to 100,000 bytes (the drill's
    ``truncate -s 100000``); that file's rows and SHA-256."""
    shutil.copytree(shared, target)
    benchmark = target / AIME24.file
    benchmark.chmod(0o644)
    with benchmark.open("r+b") as stream:
        stream.truncate(100_000)
    return jsonl_rows_and_sha256(benchmark)


def test_a_file_that_differs_from_its_manifest_is_refused_unless_told(
    shared: Path, tmp_path: Path
) -> None:
    rows, digest = _truncated_copy(shared, tmp_path / "data")
    assert rows == 17
    with pytest.raises(SourceMismatchError) as refused:
        check_source_files(["aime25", "aime24"], tmp_path / "data", refuse_mismatch=True)
    assert str(refused.value) == (
        f"source files under {tmp_path / 'data'} differ from their manifests "
        "(tagrpo/data/sources/manifests.py): aime24/test.jsonl: found 17 rows, sha256 "
        f"{digest}; its manifest has 30 rows, sha256 {AIME24.sha256}. Restore the files from "
        "their origin (SOURCES.md), or set data.verify_sources: false to use your own copy "
        "(the report then says so)"
    )
    checks = check_source_files(["aime25", "aime24"], tmp_path / "data", refuse_mismatch=False)
    assert [(c.file, c.status) for c in checks] == [
        ("aime25/test.jsonl", "matches"),
        ("aime24/test.jsonl", "differs"),
    ]
    # A parquet copy read in place of the jsonl file is not the file the manifest describes.
    import pandas as pd

    (tmp_path / "data" / AIME24.file).unlink()
    parquet = tmp_path / "data" / "aime24" / "test.parquet"
    pd.DataFrame({"id": [1, 2], "problem": ["a", "b"], "answer": ["1", "2"]}).to_parquet(parquet)
    with pytest.raises(SourceMismatchError) as refused:
        check_source_files(["aime24"], tmp_path / "data", refuse_mismatch=True)
    sha256 = hashlib.sha256(parquet.read_bytes()).hexdigest()
    assert (
        f"aime24/test.parquet: found 2 rows, sha256 {sha256}; its manifest of aime24/test.jsonl "
        f"has 30 rows, sha256 {AIME24.sha256}. Restore"
    ) in str(refused.value)
    # A source without a manifest (a user-supplied pool) is recorded, never refused.
    (tmp_path / "data" / "openr1_math").mkdir()
    (tmp_path / "data" / "openr1_math" / "train.jsonl").write_text("{}\n")
    (unlisted,) = check_source_files(["openr1_math"], tmp_path / "data", refuse_mismatch=True)
    assert (unlisted.status, unlisted.rows) == ("no manifest", 1)


def _stage_project(root: Path, sections: dict) -> dict[str, str]:
    """A project folder (params.yaml of the repo's params + ``sections``, tracking off; a
    dvc.yaml of no stage) and the environment its stage commands run in."""
    root.mkdir(parents=True, exist_ok=True)
    params = deep_merge(repo_params().model_dump(mode="json"), sections)
    params["common"]["tracking"]["enabled"] = False
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    if not (root / "dvc.yaml").exists():
        (root / "dvc.yaml").write_text("stages: {}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TAGRPO_", "DVC_"))}
    return {**env, "PYTHONPATH": str(ROOT), "DVC_NO_ANALYTICS": "1"}


def _stage(root: Path, env: dict[str, str], name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"stages.{name}"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_data_stage_refuses_a_truncated_benchmark_and_records_the_override(
    shared: Path, tmp_path: Path
) -> None:
    """The drill: a copy of the shared data with aime24 truncated. Refused in one line naming
    the file, rows and digest; ``data.verify_sources: false`` lets it through, recorded in the
    metrics and said in the report."""
    _, digest = _truncated_copy(shared, tmp_path / "data")
    profile = yaml.safe_load((ROOT / "profiles" / "local.yaml").read_text())
    profile["common"]["data_dir"] = str(tmp_path / "data")
    project = tmp_path / "project"
    env = _stage_project(project, profile)

    refused = _stage(project, env, "data")
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[0] == (
        f"stage data failed: SourceMismatchError: source files under {tmp_path / 'data'} differ "
        "from their manifests (tagrpo/data/sources/manifests.py): aime24/test.jsonl: found "
        f"17 rows, sha256 {digest}; its manifest has 30 rows, sha256 {AIME24.sha256}. Restore "
        "the files from their origin (SOURCES.md), or set data.verify_sources: false to use "
        "your own copy (the report then says so)" + HINT
    )
    assert "Traceback" not in refused.stderr
    assert not (project / "metrics" / "data.json").exists()
    assert not (project / "data" / "processed").exists()

    env = _stage_project(project, deep_merge(profile, {"data": {"verify_sources": False}}))
    let_through = _stage(project, env, "data")
    assert let_through.returncode == 0, let_through.stderr
    assert "[data] test/aime24: in 17 = kept 16 + rejected 1" in let_through.stdout
    assert (
        f"[data] warning: aime24/test.jsonl: found 17 rows, sha256 {digest}; its manifest has "
        f"30 rows, sha256 {AIME24.sha256}"
    ) in let_through.stdout
    assert (
        "[data] source files matching their manifests: 7 of 8 (data.verify_sources: false: not "
        "required)"
    ) in let_through.stdout
    record = json.loads((project / "metrics" / "data.json").read_text())["source_files"]
    assert record["verify_sources"] is False
    assert record["files"]["aime24/test.jsonl"] == {
        "source": "aime24",
        "rows": 17,
        "sha256": digest,
        "manifest": "differs",
        "expected_rows": 30,
        "expected_sha256": AIME24.sha256,
    }
    assert sorted(record["files"]) == sorted(m.file for m in MANIFESTS.values())
    assert [e["manifest"] for f, e in record["files"].items() if f != AIME24.file] == [
        "matches"
    ] * 7
    assert source_files_sentence(record) == (
        "**`data.verify_sources` is false**: the source files were read without having to match "
        "their manifests (a user's own copy); of 8, 7 match, 1 differ: `aime24/test.jsonl` (17 "
        f"rows, sha256 {digest[:12]}…; manifest 30 rows, {AIME24.sha256[:12]}…)."
    )


def test_the_report_says_the_files_were_checked() -> None:
    record = {
        "verify_sources": True,
        "files": {
            "math/train.jsonl": {"manifest": "matches"},
            "openr1_math/train.parquet": {"manifest": "no manifest"},
        },
    }
    sentence = source_files_sentence(record)
    counts = {"sources": {}, "total": {"rows_in": 0, "kept": 0, "rejected": 0}}
    assert data_section({**counts, "source_files": record}).endswith(f"\n\n{sentence}")
    assert sentence not in data_section(counts)  # the synthetic and hub sources: no files
    assert sentence == (
        "The 2 source files were checked against their manifests (rows and SHA-256 of the shared "
        "data's SOURCES.md) before use: 1 match; 1 have no manifest (not checked): "
        "`openr1_math/train.parquet`."
    )


# --------------------------------------------------------------------------- against dvc.lock

# The data stage of the DVC project: copies a prepared processed folder into place.
_WRITE_PROCESSED = (
    "import shutil; shutil.copytree('prepared', 'data/processed', dirs_exist_ok=True)"
)


@pytest.fixture
def locked_project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A DVC project whose data stage wrote data/processed (dvc.lock and DVC's cache record
    it); the rephrase and base_model stages as dvc.yaml declares their inputs."""
    if shutil.which("dvc") is None:
        pytest.skip("dvc is not installed")
    from tagrpo.config.common import MiniWorldSettings
    from tagrpo.config.data import SyntheticSettings
    from tagrpo.config.params import embedded
    from tagrpo.miniworld.dataset import build_miniworld

    built = build_miniworld(
        embedded(SyntheticSettings, seed=3, train_size=6), embedded(MiniWorldSettings)
    )
    (tmp_path / "prepared" / "benchmarks").mkdir(parents=True)
    write_questions(built["train"].questions, str(tmp_path / "prepared" / "train.parquet"))
    write_questions(
        built["mini_chains"].questions, str(tmp_path / "prepared/benchmarks/mini_chains.parquet")
    )
    declared = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    stages = {
        "data": {"cmd": f'{sys.executable} -c "{_WRITE_PROCESSED}"', "outs": ["data/processed"]},
        # Their real commands and outputs; the deps dvc.yaml gives them that another stage writes.
        "rephrase": {
            "cmd": declared["rephrase"]["cmd"],
            "deps": ["data/processed/train.parquet"],
            "outs": declared["rephrase"]["outs"],
        },
        "base_model": {
            "cmd": declared["base_model"]["cmd"],
            "deps": ["data/processed"],
            "outs": declared["base_model"]["outs"],
        },
    }
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    env = _stage_project(tmp_path, {})
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=tmp_path, env=env, check=True)
    subprocess.run(["dvc", "repro", "data"], cwd=tmp_path, env=env, check=True, capture_output=True)
    return tmp_path, env


def _flip_byte(path: Path) -> None:
    """One byte changed, size and mtime kept (what DVC's state cache cannot see)."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_damaged_intermediate_parquet_is_refused_in_one_line(
    locked_project: tuple[Path, dict[str, str]],
) -> None:
    root, env = locked_project
    train = root / "data/processed/train.parquet"
    locked = hashlib.md5(train.read_bytes()).hexdigest()
    # Intact: the rephrase stage runs (no false alarm), its input checked.
    assert check_inputs(root, ["data/processed/train.parquet"]) == ["data/processed"]
    ran = _stage(root, env, "rephrase")
    assert ran.returncode == 0, ran.stderr
    assert (root / "data/rephrased/candidates.parquet").is_file()
    before = (root / "data/rephrased/candidates.parquet").read_bytes()

    # Truncated (the drill's damaged parquet): one line naming it and the command that
    # rebuilds it, not pyarrow's traceback; the previous outputs kept.
    train.write_bytes(train.read_bytes()[:-200])
    found = hashlib.md5(train.read_bytes()).hexdigest()
    refused = _stage(root, env, "rephrase")
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert refused.stderr.splitlines()[0] == (
        "stage rephrase failed: OutputCorruptedError: data/processed/train.parquet: content "
        f"differs from dvc.lock ({found} != {locked}). It was changed after stage data wrote it "
        "(DVC's state cache trusts size and mtime, so `dvc status` may not see it): rebuild it "
        "with `dvc repro -f -s data`, or restore it with `dvc checkout --relink --force "
        "data/processed`; if you changed it on purpose, `dvc commit data` records it" + HINT
    )
    assert (root / "data/rephrased/candidates.parquet").read_bytes() == before

    # The base_model stage reads the whole folder: the changed file named within it.
    (restore,) = re.findall(r"restore it with `([^`]+)`", refused.stderr)
    subprocess.run(shlex.split(restore), cwd=root, env=env, check=True, capture_output=True)
    assert hashlib.md5(train.read_bytes()).hexdigest() == locked
    _flip_byte(root / "data/processed/benchmarks/mini_chains.parquet")
    refused = _stage(root, env, "base_model")
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    (entry,) = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["data"]["outs"]
    assert refused.stderr.splitlines()[0] == (
        "stage base_model failed: OutputCorruptedError: data/processed: content differs from "
        f"dvc.lock ({dvc_md5(root / 'data/processed')} != {entry['md5']}); changed files: "
        "data/processed/benchmarks/mini_chains.parquet. It was changed after stage data wrote "
        "it (DVC's state cache trusts size and mtime, so `dvc status` may not see it): rebuild "
        "it with `dvc repro -f -s data`, or restore it with `dvc checkout --relink --force "
        "data/processed`; if you changed it on purpose, `dvc commit data` records it" + HINT
    )
    assert not (root / "models" / "base").exists()
    # The rephrase stage does not read the benchmarks: not refused for them.
    assert check_inputs(root, ["data/processed/train.parquet"]) == ["data/processed"]
    with pytest.raises(OutputCorruptedError, match=r"mini_chains\.parquet"):
        check_inputs(root, ["data/processed"])
