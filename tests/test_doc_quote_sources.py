"""The ``profile-keys`` and ``pins`` sources of the docs' quoted blocks (docs/paper-scale.md's
settings and versions): each renders its file's values, and a changed value makes the block
quoting it stale."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tagrpo.config.params import load_config, validate_params
from tagrpo.config.profiles import merged_with_profile
from tagrpo.pipeline.doc_quotes import QuoteError, refreshed, render

ROOT = Path(__file__).resolve().parents[1]


def _checkout(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    return tmp_path


def test_profile_keys_renders_a_column_per_profile_and_follows_the_profile(
    tmp_path: Path,
) -> None:
    root = _checkout(tmp_path)
    embedded = load_config(root / "params.yaml").train.batch_questions
    profile = root / "profiles" / "paper.yaml"
    paper = validate_params(merged_with_profile(profile, root / "params.yaml")).train
    text = "<!-- quote: profile-keys embedded paper -- train.batch_questions -->\nold\n"
    text += "<!-- end quote -->\n"
    current = refreshed(text, root)
    assert current.splitlines()[1:4] == [
        "| key | `embedded` | `paper` |",
        "|---|---|---|",
        f"| `train.batch_questions` | `{embedded}` | `{paper.batch_questions}` |",
    ]
    lines = profile.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  batch_questions:"))
    lines[at] = f"  batch_questions: {2 * paper.batch_questions}"
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert refreshed(current, root) != current
    changed = f"| `train.batch_questions` | `{embedded}` | `{2 * paper.batch_questions}` |"
    assert changed in refreshed(current, root)


def test_profile_keys_refuses_what_it_cannot_render() -> None:
    with pytest.raises(QuoteError, match="profiles, then -- and the keys"):
        render("profile-keys paper train.epochs", ROOT)
    with pytest.raises(QuoteError, match="at least one profile and one key"):
        render("profile-keys paper --", ROOT)
    with pytest.raises(QuoteError, match="no profile 'nope'"):
        render("profile-keys nope -- train.epochs", ROOT)
    with pytest.raises(QuoteError, match=r"train\.epoch: not a params key"):
        render("profile-keys paper -- train.epoch", ROOT)


def test_pins_renders_each_files_versions_and_follows_the_file(tmp_path: Path) -> None:
    (tmp_path / "gpu.txt").write_text(
        "# a comment naming torch==9.9\nverl[vllm,fsdp]==0.9.1\ntorch==2.11.0\nvllm==0.24.0\n"
        "fastapi<0.151\n",
        encoding="utf-8",
    )
    (tmp_path / "lock.txt").write_text("torch==2.13.0\nVerl==0.9.1\n", encoding="utf-8")
    spec = "pins gpu.txt lock.txt -- verl torch vllm"
    text = f"<!-- quote: {spec} -->\n<!-- end quote -->\n"
    current = refreshed(text, tmp_path)
    assert current == (
        f"<!-- quote: {spec} -->\n"
        "| package | `gpu.txt` | `lock.txt` |\n"
        "|---|---|---|\n"
        "| `verl` | `0.9.1` | `0.9.1` |\n"
        "| `torch` | `2.11.0` | `2.13.0` |\n"
        "| `vllm` | `0.24.0` | not pinned |\n"
        "<!-- end quote -->\n"
    )
    (tmp_path / "lock.txt").write_text("torch==2.14.0\nverl==0.9.1\n", encoding="utf-8")
    assert "| `torch` | `2.11.0` | `2.14.0` |" in refreshed(current, tmp_path)


def test_pins_refuses_unknown_packages_and_files(tmp_path: Path) -> None:
    (tmp_path / "gpu.txt").write_text("torch==2.11.0\nfastapi<0.151\n", encoding="utf-8")
    with pytest.raises(QuoteError, match=r"pins: vllm, fastapi pinned in none of gpu\.txt"):
        render("pins gpu.txt -- torch vllm fastapi", tmp_path)
    with pytest.raises(QuoteError, match=r"nope\.txt: no such file"):
        render("pins nope.txt -- torch", tmp_path)
    with pytest.raises(QuoteError, match="requirements files, then --"):
        render("pins gpu.txt torch", tmp_path)
