"""dvc.yaml's stages expanded the way DVC expands them: matrix stages one per item
(``train@grpo-0``), ``${item.x}`` and ``${params.key}`` interpolated from params.yaml.

Used for what the pipeline writes (the git dirty flag ignores it), a stage's dependency hash
(:func:`deps_hash`: tagged on its MLflow run; what a verl run resumes only when unchanged) and
the layout agreement test; no DVC import (stages start fast).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tagrpo.plumbing.paths import project_root

# libyaml's parser (PyYAML's C extension) where the wheel has it: the same documents as
# yaml.safe_load, about 9x faster on dvc.yaml and params.yaml, which every stage process reads
# several times.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` of ``text``, with libyaml's parser when it is there."""
    return yaml.load(text, Loader=_SAFE_LOADER)


_REFERENCE = re.compile(r"\$\{([^}]+)\}")


@dataclass(frozen=True)
class ExpandedStage:
    name: str  # DVC's name: ``train@grpo-0`` for a matrix item
    stage: str  # the dvc.yaml key: ``train``
    item: dict[str, Any] = field(default_factory=dict)
    cmd: str = ""
    deps: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()  # outs, metrics and plots declared by the stage
    # the outs DVC caches (not ``cache: false``): DVC writes a .gitignore beside each
    cached_outs: tuple[str, ...] = ()


def _lookup(path: str, context: Mapping[str, Any]) -> Any:
    node: Any = context
    for part in path.strip().split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(f"dvc.yaml references ${{{path}}}, which params.yaml does not have")
        node = node[part]
    return node


def interpolate(value: Any, context: Mapping[str, Any]) -> Any:
    """``${a.b}`` replaced from ``context``; a string that is one reference keeps its type."""
    if not isinstance(value, str):
        return value
    whole = _REFERENCE.fullmatch(value)
    if whole:
        return _lookup(whole.group(1), context)
    return _REFERENCE.sub(lambda m: str(_lookup(m.group(1), context)), value)


def _entry_path(entry: Any) -> str:
    return next(iter(entry)) if isinstance(entry, Mapping) else str(entry)


def _entry_cached(entry: Any) -> bool:
    """Whether DVC caches an out, metric or plot: its default, unless ``cache: false``."""
    if not isinstance(entry, Mapping):
        return True
    options = next(iter(entry.values()))
    return not isinstance(options, Mapping) or options.get("cache", True) is not False


def expand_stages(
    dvc_yaml: Mapping[str, Any], params: Mapping[str, Any]
) -> dict[str, ExpandedStage]:
    """Every stage by DVC name, with paths interpolated."""
    expanded: dict[str, ExpandedStage] = {}
    for key, stage in (dvc_yaml.get("stages") or {}).items():
        matrix = {
            name: interpolate(values, params)
            for name, values in (stage.get("matrix") or {}).items()
        }
        # A matrix with an empty list expands to no stage at all (as in DVC); no matrix: one.
        combos = (
            [
                dict(zip(matrix, values, strict=True))
                for values in itertools.product(*matrix.values())
            ]
            if matrix
            else [{}]
        )
        for combo in combos:
            context = {**params, "item": combo}
            name = f"{key}@{'-'.join(str(v) for v in combo.values())}" if combo else key
            expanded[name] = ExpandedStage(
                name=name,
                stage=key,
                item=combo,
                cmd=str(interpolate(stage.get("cmd", ""), context)),
                deps=tuple(interpolate(_entry_path(d), context) for d in stage.get("deps", [])),
                params=tuple(
                    str(interpolate(_entry_path(p), context)) for p in stage.get("params", [])
                ),
                outs=tuple(
                    interpolate(_entry_path(entry), context)
                    for section in ("outs", "metrics", "plots")
                    for entry in stage.get(section, [])
                ),
                cached_outs=tuple(
                    interpolate(_entry_path(entry), context)
                    for section in ("outs", "metrics", "plots")
                    for entry in stage.get(section, [])
                    if _entry_cached(entry)
                ),
            )
    return expanded


def load_stages(root: str | Path) -> dict[str, ExpandedStage]:
    """:func:`expand_stages` of ``root/dvc.yaml`` with ``root/params.yaml`` ({} if absent)."""
    root = Path(root)
    dvc_path, params_path = root / "dvc.yaml", root / "params.yaml"
    if not dvc_path.exists():
        return {}
    params = safe_load(params_path.read_text()) if params_path.exists() else {}
    return expand_stages(safe_load(dvc_path.read_text()) or {}, params or {})


def pipeline_outputs(root: str | Path) -> set[str]:
    """Every path the pipeline writes (outs, metrics, plots of all stages)."""
    return {out for stage in load_stages(root).values() for out in stage.outs}


def deps_hash(dvc_name: str, root: Path | None = None) -> str:
    """sha256 over a dvc.yaml stage's dependency files and params values ("" if not in dvc.yaml).

    The same inputs give the same hash, so a run can be matched to the dvc.lock entry that
    recorded those inputs (and an orphaned run to none).
    """
    root = Path(root) if root is not None else project_root()
    try:
        stages = load_stages(root)
    except KeyError:
        return ""
    stage = stages.get(dvc_name)
    if stage is None:
        return ""
    digest = hashlib.sha256()
    for dep in sorted(stage.deps):
        path = root / dep
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts:
                continue
            digest.update(str(file.relative_to(root)).encode())
            digest.update(file.read_bytes() if file.exists() else b"<missing>")
    params = safe_load((root / "params.yaml").read_text()) or {}
    for key in sorted(stage.params):
        node: Any = params
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        digest.update(f"{key}={json.dumps(node, sort_keys=True, default=str)}".encode())
    return digest.hexdigest()[:16]


def outputs_outside_project(root: str | Path, dvc_names: list[str] | None = None) -> list[str]:
    """One line per folder that holds a cached output of the stages ``dvc_names`` (every stage
    when None) and resolves outside the project (a symlink to a scratch disk).

    DVC writes a .gitignore beside each cached output and refuses one whose real path leaves
    the repository ("... is outside of git repository"), but only after the stage has run, so
    the work is done and not recorded. A folder mounted on the output's place stays inside.
    """
    root = Path(root)
    real_root = root.resolve()
    stages = load_stages(root)
    chosen = stages.values() if dvc_names is None else [stages[n] for n in dvc_names if n in stages]
    problems: dict[str, str] = {}
    for stage in chosen:
        for out in stage.cached_outs:
            leaving = _first_leaving(root, real_root, Path(out).parent)
            if leaving is None:
                continue
            relative, real = leaving
            problems.setdefault(
                relative,
                f"{relative} resolves to {real}, outside the project: DVC records no output "
                f"there (it refuses {out} after the stage has run); mount that folder on "
                f"{relative} instead (mount --bind {real} {relative}), or put DVC's cache on "
                "that disk (dvc cache dir PATH) and keep the outputs in the project",
            )
    return list(problems.values())


def _first_leaving(root: Path, real_root: Path, folder: Path) -> tuple[str, Path] | None:
    """The first folder on the way from ``root`` to ``root/folder`` whose real path is outside
    the project (the symlink to name), with that real path; None when all stay inside."""
    prefix = Path()
    for part in folder.parts:
        prefix = prefix / part
        real = (root / prefix).resolve()
        if real != real_root and real_root not in real.parents:
            return prefix.as_posix(), real
    return None
