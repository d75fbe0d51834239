"""verl checkpoints as Hugging Face folders, laid out like the local backend's outputs.

verl saves the actor of step ``s`` under ``<default_local_dir>/global_step_<s>/actor``: FSDP
shards, plus a ``huggingface/`` folder with config and tokenizer, and full weights when
``actor.checkpoint.save_contents`` includes ``hf_model`` (the launcher sets it). Exports go to

    models/<policy>/checkpoints/checkpoint-025 ... checkpoint-100   (each a HF folder)
    models/<policy>/                                                 (the final policy)

which is what :func:`tagrpo.backends.models.load_causal_lm`, the evaluation stage and vLLM read.
When a checkpoint has no full weights, verl's own merger (``python -m verl.model_merger merge
--backend fsdp``) builds them from the shards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

HF_SUBDIR = "huggingface"
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")
Runner = Callable[..., object]


def actor_dir(checkpoint_root: str | Path, step: int) -> Path:
    """verl's actor checkpoint folder of ``step``."""
    return Path(checkpoint_root) / f"global_step_{step}" / "actor"


def has_weights(folder: Path) -> bool:
    """Whether ``folder`` holds a config and model weights (a loadable HF folder)."""
    if not (folder / "config.json").exists():
        return False
    return any(next(folder.glob(pattern), None) is not None for pattern in WEIGHT_GLOBS)


def merge_command(actor: Path, target: Path) -> list[str]:
    """verl's FSDP-shards-to-HF merger for one actor checkpoint."""
    return [
        sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(actor),
        "--target_dir",
        str(target),
    ]


def export_hf(actor: str | Path, target: str | Path, runner: Runner = subprocess.run) -> str:
    """Write the HF folder of one actor checkpoint into ``target``; returns how (copy | merge).

    Files are staged next to ``target`` and moved in only once complete, so an interrupted
    export never leaves a half-written policy; other entries of ``target`` (the
    ``checkpoints/`` folder of the final policy) are kept.
    """
    actor, target = Path(actor), Path(target)
    hf = actor / HF_SUBDIR
    staging = target.parent / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    if has_weights(hf):
        shutil.copytree(hf, staging)
        how = "copy"
    else:
        runner(merge_command(actor, staging), check=True)
        if hf.is_dir():  # tokenizer and generation config: the merger writes weights + config
            for item in hf.iterdir():
                if item.is_file() and not (staging / item.name).exists():
                    shutil.copy2(item, staging / item.name)
        how = "merge"
    if not has_weights(staging):
        raise RuntimeError(f"no loadable Hugging Face model was produced from {actor}")
    target.mkdir(parents=True, exist_ok=True)
    for item in staging.iterdir():
        destination = target / item.name
        if destination.is_dir():
            shutil.rmtree(destination)
        elif destination.exists():
            destination.unlink()
        shutil.move(str(item), destination)
    staging.rmdir()
    return how


def export_checkpoint(
    actor: str | Path,
    export_dir: str | Path,
    name: str,
    final: bool,
    runner: Runner = subprocess.run,
) -> list[Path]:
    """Export one training checkpoint as ``checkpoints/<name>``, and as the policy if final.

    The final policy is the last checkpoint's files, hard-linked (one copy on disk, ~4 bytes
    per parameter saved: 7 GB for Qwen3-1.7B), copied where links are not possible.
    """
    export_dir = Path(export_dir)
    written = [export_dir / "checkpoints" / name]
    export_hf(actor, written[0], runner)
    if final:
        for item in written[0].iterdir():
            destination = export_dir / item.name
            if destination.is_dir():
                shutil.rmtree(destination)
            destination.unlink(missing_ok=True)
            if item.is_dir():
                shutil.copytree(item, destination)
                continue
            try:
                os.link(item, destination)
            except OSError:
                shutil.copy2(item, destination)
        written.append(export_dir)
    return written


def exported_checkpoints(export_dir: str | Path) -> Sequence[str]:
    """Names of the checkpoint folders present under ``export_dir/checkpoints``."""
    folder = Path(export_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and has_weights(p))
