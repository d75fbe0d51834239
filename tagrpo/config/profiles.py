"""Profiles: a YAML file of params keys merged over params.yaml (``tagrpo params apply``).

A profile may only override keys params.yaml has (a misspelt key is refused, naming it), may
build on another profile (``base: NAME``), and is written into params.yaml with its comments
and key order kept, so DVC sees ordinary param changes and ``tagrpo params restore`` returns
to the embedded default (:mod:`tagrpo.pipeline.restore`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tagrpo.config.params import (
    ConfigError,
    Params,
    deep_merge,
    default_params_path,
    read_yaml_mapping,
    unknown_override_keys,
    validate_params,
)

# A profile's top-level ``base: NAME`` (not a params key): the profile is a delta over
# ``NAME.yaml`` beside it, which is merged first (e.g. paper-authors-hparams over paper).
PROFILE_BASE_KEY = "base"
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][\w.-]*")


def profile_layers(profile_path: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """The profile and the profiles it builds on (``base:``), base first, each as (file, its
    overrides without ``base``). A missing base or a cycle is refused, naming the file."""
    layers: list[tuple[Path, dict[str, Any]]] = []
    path, seen = Path(profile_path), []
    while True:
        if path.resolve() in seen:
            cycle = " -> ".join(p.stem for p in [*seen, path.resolve()])
            raise ConfigError(
                str(profile_path), [f"{PROFILE_BASE_KEY}: profiles form a cycle: {cycle}"]
            )
        seen.append(path.resolve())
        overrides = read_yaml_mapping(path)
        base = overrides.pop(PROFILE_BASE_KEY, None)
        layers.append((path, overrides))
        if base is None:
            return layers[::-1]
        base_path = path.parent / f"{base}.yaml"
        if (
            not isinstance(base, str)
            or not _PROFILE_NAME.fullmatch(base)
            or not base_path.is_file()
        ):
            raise ConfigError(
                str(path),
                [
                    f"{PROFILE_BASE_KEY}: {base!r} is not a profile in {path.parent} "
                    "(the NAME of NAME.yaml)"
                ],
            )
        path = base_path


def profile_base_chain(profile_path: str | Path) -> list[str]:
    """The names a profile is merged from, base first (``["paper", "paper-authors-hparams"]``)."""
    return [path.stem for path, _ in profile_layers(profile_path)]


def profile_overrides(profile_path: str | Path) -> dict[str, Any]:
    """Everything a profile sets: its bases' overrides, then its own."""
    merged: dict[str, Any] = {}
    for _, overrides in profile_layers(profile_path):
        merged = deep_merge(merged, overrides)
    return merged


def merged_with_profile(profile_path: str | Path, params_path: str | Path) -> dict[str, Any]:
    """params merged with a profile (after the profiles it builds on, ``base:``), refused if a
    profile names a key params lacks."""
    merged = read_yaml_mapping(params_path)
    for path, override in profile_layers(profile_path):
        unknown = list(unknown_override_keys(merged, override))
        if unknown:
            raise ConfigError(
                str(path),
                [
                    f"{key}: not a key of {Path(params_path).name} (a profile may only override)"
                    for key in unknown
                ],
            )
        merged = deep_merge(merged, override)
    validate_params(merged, f"{params_path} + {profile_path}")
    return merged


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            found.update(_leaves(value, path))
        else:
            found[path] = value
    return found


def kept_from_earlier_profile(
    profile_path: str | Path, params_path: str | Path | None = None
) -> tuple[str, list[str]] | None:
    """Applying ``profile_path`` to a params file that already has another profile applied
    (``common.profile`` is not ``embedded``) keeps that profile's values wherever the new one
    is silent: (the earlier profile's name, ``key = value`` of each kept key, as now in the
    file). The keys are those ``profiles/<earlier>.yaml`` sets (beside ``profile_path``);
    without that file, ``["(its file is not in <folder>: the keys cannot be listed)"]``.
    None when nothing is stacked."""
    target = Path(params_path) if params_path else default_params_path()
    profile_path = Path(profile_path)
    current = read_yaml_mapping(target)
    earlier = str((current.get("common") or {}).get("profile", "embedded"))
    new = profile_overrides(profile_path)
    bases = profile_base_chain(profile_path)
    if earlier in ("embedded", str((new.get("common") or {}).get("profile", "")), *bases):
        return None
    earlier_path = profile_path.parent / f"{earlier}.yaml"
    if not earlier_path.is_file():
        return earlier, [f"(its file is not in {profile_path.parent}: the keys cannot be listed)"]
    overridden = _leaves(new)
    current_leaves = _leaves(current)
    kept = [
        f"{key} = {current_leaves.get(key)!r}"
        for key in _leaves(profile_overrides(earlier_path))
        if key != "common.profile"
        and not any(key == other or key.startswith(f"{other}.") for other in overridden)
        and key in current_leaves
    ]
    return earlier, kept


def apply_profile(profile_path: str | Path, params_path: str | Path | None = None) -> Params:
    """Write params.yaml merged with a profile (only after the result validates).

    DVC then sees ordinary param changes, so only the affected stages rerun, and
    ``tagrpo params restore`` returns to the embedded default.
    """
    target = Path(params_path) if params_path else default_params_path()
    merged = merged_with_profile(profile_path, target)
    text = _with_comments_kept(target, profile_overrides(profile_path))
    if yaml.safe_load(text) != merged:  # the round trip must write exactly the merged params
        raise RuntimeError(f"applying {profile_path} would not write the validated params")
    target.write_text(text, encoding="utf-8")
    return validate_params(merged, str(target))


def _with_comments_kept(params_path: Path, override: Mapping[str, Any]) -> str:
    """params.yaml with ``override`` merged in, its comments and key order kept (ruamel's
    round trip; DVC depends on ruamel.yaml, so it is always installed)."""
    import io

    from ruamel.yaml import YAML

    editor = YAML()  # round-trip mode: comments, order and flow/block style survive
    editor.width = 4096  # a flow mapping stays on its line (ruamel's wrapping splits lists)
    editor.preserve_quotes = True
    editor.representer.add_representer(
        type(None), lambda dumper, _: dumper.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    editor.representer.add_representer(float, _yaml11_float)
    document = editor.load(params_path.read_text(encoding="utf-8"))
    _merge_in_place(document, override)
    stream = io.StringIO()
    editor.dump(document, stream)
    return stream.getvalue()


def _yaml11_float(dumper: Any, value: float) -> Any:
    """A new float as YAML 1.1 readers (PyYAML, which the stages use) read it back: ruamel
    writes ``1e-06``, which PyYAML reads as a string; ``1.0e-06`` is a float to both."""
    text = yaml.safe_dump(value).splitlines()[0]  # PyYAML's own spelling: 1.0e-06, .inf, .nan
    return dumper.represent_scalar("tag:yaml.org,2002:float", text)


def _merge_in_place(node: Any, override: Mapping[str, Any]) -> None:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    for key, value in override.items():
        old = node.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            _merge_in_place(old, value)
            continue
        new = copy.deepcopy(value)
        # A list or mapping written inline (``seeds: [0, 1, 2]``) is replaced inline.
        flow = getattr(getattr(old, "fa", None), "flow_style", lambda: False)()
        if flow and isinstance(new, list):
            new = CommentedSeq(new)
            new.fa.set_flow_style()
        elif flow and isinstance(new, dict):
            new = CommentedMap(new)
            new.fa.set_flow_style()
        node[key] = new
