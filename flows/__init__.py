"""Prefect flows: orchestration only; the work happens in ``stages`` and ``tagrpo``."""
