"""Where things live: the project root, the shared benchmark data and the tracking store."""

from __future__ import annotations

import os
from pathlib import Path

_DVC_EXP_MARKER = os.sep + os.path.join(".dvc", "tmp", "exps") + os.sep


def project_root(start: Path | None = None) -> Path:
    """The directory holding ``params.yaml`` and ``dvc.yaml``.

    ``dvc exp run --queue`` runs stages in a temporary copy under ``.dvc/tmp/exps/``; for
    state that must be shared between runs (the MLflow store) use :func:`home_root` instead.
    """
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "dvc.yaml").exists() and (candidate / "params.yaml").exists():
            return candidate
    # Installed package used outside a checkout: fall back to the source tree if present.
    source_tree = Path(__file__).resolve().parents[2]  # tagrpo/plumbing/paths.py
    if (source_tree / "dvc.yaml").exists():
        return source_tree
    return here


def home_root(start: Path | None = None) -> Path:
    """The user's real checkout, even when called from a ``dvc exp`` temporary copy."""
    root = str(project_root(start))
    marker = root.find(_DVC_EXP_MARKER)
    return Path(root[:marker]) if marker >= 0 else Path(root)


def checkout_root(start: Path | None = None) -> Path:
    """The checkout whose runs these are: :func:`home_root`, and for a Prefect scratch copy
    (``<checkout>/.tagrpo/runs/<name>/``) the checkout that made it."""
    root = home_root(start)
    parts = root.parts
    for index in range(len(parts) - 2):
        if parts[index : index + 2] == (".tagrpo", "runs"):
            return Path(*parts[:index])
    return root


def resolve_path(value: str | os.PathLike[str], base: Path | None = None) -> Path:
    """Resolve a params path: ``~`` and env vars expanded, relative paths against ``base``."""
    expanded = Path(os.path.expandvars(os.path.expanduser(os.fspath(value))))
    if expanded.is_absolute():
        return expanded
    return ((base or project_root()) / expanded).resolve()


def shared_data_dir(configured: str | os.PathLike[str] | None = None) -> Path:
    """The directory of third-party benchmark files (never committed to this project).

    Precedence: ``TAGRPO_DATA_DIR`` env var, then the configured value (params), then
    ``../shared/data`` next to the checkout.
    """
    env_value = os.environ.get("TAGRPO_DATA_DIR")
    if env_value:
        return resolve_path(env_value)
    if configured:
        return resolve_path(configured, base=home_root())
    return (home_root() / ".." / "shared" / "data").resolve()
