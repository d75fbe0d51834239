"""Prefect flows: orchestration only; the work happens in ``stages`` and ``tagrpo``.

Importing ``tagrpo`` first applies the offline defaults before Prefect reads its settings.
"""

import tagrpo  # noqa: F401
