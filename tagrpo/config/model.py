"""The base class of every params model, and the checks shared by several sections.

A params model declares, for each key of its section, the type, the bounds and a one-line
help (``Field(description=...)``, shown by ``tagrpo params explain``), and no default: the
values live in params.yaml only, so a key missing there is an error naming it (the few
exceptions, each with its reason, are listed in ``tests/test_config.py``). Unknown keys are
rejected, values are coerced only where that is unambiguous (the string ``"1e-4"`` for a
float, ``8.0`` for an int), and instances are immutable.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = [
    "ENV_NAME",
    "REDACTED",
    "ConfigModel",
    "EnvVarName",
    "Field",
    "looks_like_secret",
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

REDACTED = "[redacted: looks like an API key]"


def redact_secrets(text: str) -> str:
    """``text`` with every key-shaped part replaced (for messages that echo user values)."""
    for shape in _SECRET_SHAPES:
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


class ConfigModel(BaseModel):
    """A params section: every key required, unknown keys rejected, immutable."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=True,  # the listed exceptions' defaults are checked like values
        protected_namespaces=(),  # fields such as ``model`` are params names
    )
