"""Offline-safe environment defaults, applied by the project rather than by the user.

``import tagrpo`` calls :func:`apply_offline_defaults` (the package ``__init__``), and every entry
point imports tagrpo before mlflow, prefect, transformers or huggingface_hub, because several of
these read their settings once at import time.
"""

from __future__ import annotations

import os

# Values are defaults: a user who exports a different value keeps it.
OFFLINE_DEFAULTS: dict[str, str] = {
    # Prefect: no telemetry, generous ephemeral-server start-up on 2-core machines.
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    # MLflow honours DO_NOT_TRACK only when it is exactly "true"; Prefect accepts it too.
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DVC_NO_ANALYTICS": "1",
    # The embedded default never touches a hub: fail in seconds instead of retrying for a minute.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
}


def apply_offline_defaults(online: bool = False) -> None:
    """Set the offline/no-telemetry environment defaults (``setdefault`` semantics).

    ``online=True`` keeps telemetry off but lets Hugging Face hubs be reached, for the paper
    profile on machines with internet.
    """
    for key, value in OFFLINE_DEFAULTS.items():
        if online and key in {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"}:
            continue
        os.environ.setdefault(key, value)
