"""The base class of every params model, and the checks shared by several sections.

A params model declares, for each key of its section, the type, the bounds and a one-line
help (``Field(description=...)``, shown by ``tagrpo params explain``), and no default: the
values live in params.yaml only, so a key missing there is an error naming it (the few
exceptions, each with its reason, are listed in ``tests/test_config.py``). Unknown keys are
rejected, values are coerced only where that is unambiguous (the string ``"1e-4"`` for a
float; never a float such as ``2.0`` for an integer key, which reads as a typo or a value meant
for another key), and instances are immutable.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

__all__ = [
    "ENV_NAME",
    "KEY_SHAPE_PATTERN",
    "REDACTED",
    "ConfigModel",
    "EnvVarName",
    "Field",
    "looks_like_secret",
    "mask_key_shapes",
    "redact_secrets",
    "secret_shaped_leaves",
]

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Shapes of API keys and tokens seen in the wild: OpenAI/Anthropic-style prefixes, bearer
# headers, Hugging Face and GitHub tokens, AWS access keys, and long opaque strings.
_SECRET_SHAPES = (
    re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bBearer\s+\S{8,}", re.IGNORECASE),
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{32,}\b"),
)

# The prefixed shapes only: refused in any string field of the params (the long opaque shape
# would also match a pinned git revision or a checksum, which are legitimate values).
_PREFIXED_SHAPES = _SECRET_SHAPES[:5]
# The same prefixed shapes as one pattern without flags, valid both as a Python and as an
# ECMA-262 (JSON Schema) regular expression: a Prefect parameter schema refuses them with it,
# in the UI and on the server, before a flow run that holds one is stored.
KEY_SHAPE_PATTERN = (
    r"\b(?:(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}|[Bb][Ee][Aa][Rr][Ee][Rr]\s+\S{8,}"
    r"|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}\b)"
)

REDACTED = "[redacted: looks like an API key]"


def redact_secrets(text: str) -> str:
    """``text`` with every key-shaped part replaced (for messages that echo user values)."""
    for shape in _SECRET_SHAPES:
        text = shape.sub(REDACTED, text)
    return text


def mask_key_shapes(text: str) -> str:
    """``text`` with every part that has a key or token's prefix (``sk-...``, ``Bearer ...``,
    ``hf_...``, ``ghp_...``, ``AKIA...``) replaced: for what is stored or shown with its
    checksums and run ids intact (MLflow tags, run names, one-line errors naming md5s)."""
    for shape in _PREFIXED_SHAPES:
        text = shape.sub(REDACTED, text)
    return text


def looks_like_secret(value: Any) -> bool:
    """True for a string shaped like an API key or token (to refuse or redact it)."""
    if not isinstance(value, str):
        return False
    return any(shape.search(value) for shape in _SECRET_SHAPES)


def secret_shaped_leaves(tree: Any, prefix: str = "") -> list[str]:
    """Dotted keys of every string (at any depth, in lists too) with a key or token's prefix
    (``sk-...``, ``Bearer ...``, ``hf_...``, ``ghp_...``, ``AKIA...``)."""
    if isinstance(tree, dict):
        return [
            found
            for key, value in tree.items()
            for found in secret_shaped_leaves(value, f"{prefix}.{key}" if prefix else str(key))
        ]
    if isinstance(tree, (list, tuple)):
        return [
            found
            for index, value in enumerate(tree)
            for found in secret_shaped_leaves(value, f"{prefix}.{index}")
        ]
    if isinstance(tree, str) and any(shape.search(tree) for shape in _PREFIXED_SHAPES):
        return [prefix]
    return []


def _env_var_name(value: str | None) -> str | None:
    if value is None:
        return None
    if looks_like_secret(value):
        raise ValueError(
            "this looks like an API key, not the name of an environment variable: put the key "
            "in the environment (export OPENAI_API_KEY=...) and name the variable here"
        )
    if not ENV_NAME.fullmatch(value):
        raise ValueError(
            f"must be the name of an environment variable (letters, digits, _), got {value!r}"
        )
    return value


# Every ``*_env`` field: the name of the variable holding a secret, never the secret itself.
EnvVarName = Annotated[str | None, AfterValidator(_env_var_name)]


def _unwrapped(annotation: Any) -> Any:
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _takes_int(annotation: Any) -> bool:
    """The annotation accepts an int and no float (``int``, ``int | None``)."""
    annotation = _unwrapped(annotation)
    if annotation is int:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [_unwrapped(member) for member in typing.get_args(annotation)]
        return int in members and float not in members
    return False


def floats_for_ints(annotation: Any, value: Any, path: str = "") -> list[str]:
    """Where ``value`` holds a float (``2.0`` included) that ``annotation`` wants as an int:
    the path of each (``""`` for the value itself, ``[1]`` for a list item, ``[k]`` for a
    mapping's value, ``key 3.0`` for a mapping's key)."""
    annotation = _unwrapped(annotation)
    if isinstance(value, float) and _takes_int(annotation):
        return [path]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return next(
            (found for member in args if (found := floats_for_ints(member, value, path))), []
        )
    if origin in (list, tuple, set, frozenset) and isinstance(value, list | tuple) and args:
        item = args[0]
        return [
            found
            for index, entry in enumerate(value)
            for found in floats_for_ints(item, entry, f"{path}[{index}]")
        ]
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        found = []
        for key, entry in value.items():
            if isinstance(key, float) and _takes_int(args[0]):
                found.append(f"{path} key {key!r}".strip())
            found += floats_for_ints(args[1], entry, f"{path}[{key!r}]")
        return found
    return []


class ConfigModel(BaseModel):
    """A params section: every key required, unknown keys rejected, immutable."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=True,  # the listed exceptions' defaults are checked like values
        protected_namespaces=(),  # fields such as ``model`` are params names
    )

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_floats_for_ints(cls, value: Any, info: ValidationInfo) -> Any:
        """``group_size: 2.0`` is refused, not read as 2 (pydantic's lax mode would)."""
        field = cls.model_fields.get(info.field_name or "")
        found = floats_for_ints(field.annotation, value) if field is not None else []
        if found:
            where = "" if found == [""] else f" (at {', '.join(found)})"
            raise ValueError(
                f"an integer key given a float{where}: write it without a decimal point"
            )
        return value
