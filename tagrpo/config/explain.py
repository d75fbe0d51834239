"""``tagrpo params explain KEY``: type, bounds, help and current value of params keys (the
values live in params.yaml only: the models declare no defaults)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from tagrpo.config.params import Params, load_config
from tagrpo.plumbing.config_model import ConfigModel


def _bounds(info: FieldInfo) -> str:
    parts = []
    for item in info.metadata:
        for name, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{symbol} {value}")
        if getattr(item, "min_length", None):
            parts.append(f"length >= {item.min_length}")
    return ", ".join(parts)


def _type_name(annotation: Any) -> str:
    has_args = getattr(annotation, "__args__", None)
    text = str(annotation) if has_args else getattr(annotation, "__name__", str(annotation))
    return text.replace("typing.", "")


def _rows(model: type[ConfigModel], instance: Any, prefix: str) -> list[list[str]]:
    rows = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        value = getattr(instance, name)
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, ConfigModel):
            rows += _rows(annotation, value, f"{path}.")
            continue
        rows.append(
            [
                path,
                _type_name(annotation),
                repr(value),
                _bounds(info),
                info.description or "",
            ]
        )
    return rows


def explain(key: str = "", params_path: str | Path | None = None) -> str:
    """The keys at or under ``key`` ("" = all), one block each."""
    config = load_config(params_path)
    model: type[ConfigModel] = Params
    instance: Any = config
    prefix = ""
    for part in [p for p in key.split(".") if p]:
        fields = model.model_fields
        if part not in fields:
            raise KeyError(f"{prefix}{part} is not a params key; allowed: {sorted(fields)}")
        annotation = fields[part].annotation
        instance = getattr(instance, part)
        if not (isinstance(annotation, type) and issubclass(annotation, ConfigModel)):
            info = fields[part]
            return (
                f"{prefix}{part}\n  type: {_type_name(annotation)}\n"
                f"  value: {instance!r} (in {_source(params_path)}; there is no default)\n"
                f"  bounds: {_bounds(info) or '-'}\n"
                f"  help: {info.description or '-'}"
            )
        model, prefix = annotation, f"{prefix}{part}."
    # "now": the value in the file (profile included), not a default (the models have none).
    lines = [f"# values now in {_source(params_path)} (profile {config.common.profile!r})"]
    for path, kind, value, bounds, help_text in _rows(model, instance, prefix):
        limits = f" [{bounds}]" if bounds else ""
        lines.append(f"{path}: {kind}, now {value}{limits}  # {help_text}")
    return "\n".join(lines)


def _source(params_path: str | Path | None) -> str:
    return str(params_path) if params_path else "params.yaml"
