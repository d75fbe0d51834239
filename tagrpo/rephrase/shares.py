"""The failed-share limit every stage that drops or replaces items applies (rephrase,
check_equivalence, the verl training data): a module of its own, so that a stage needing only
the check does not load the rephrasing backends (its code deps, tagrpo/pipeline/stage_deps.py)."""

from __future__ import annotations

from tagrpo.plumbing.errors import UserMistake


class TooManyFailuresError(UserMistake, RuntimeError):
    """More slots failed than the configured share allows (the endpoint or the share to fix)."""


def check_failed_share(failed: int, total: int, limit: float, what: str, hint: str) -> None:
    """Raise :class:`TooManyFailuresError` when ``failed / total`` exceeds ``limit``."""
    if total and failed / total > limit:
        raise TooManyFailuresError(
            f"{failed} of {total} {what} ({failed / total:.1%}) exceeds the allowed share "
            f"{limit:.1%}: {hint}"
        )
