"""The ``rephrase`` stage's work: N rephrasings per training question, counted and checked.

A failed request is a row with its error, never a gap; but a run where more than
``rephrase.max_failed_share`` of the slots got no rephrasing is not the experiment that was
asked for (TA-GRPO would train on copies of q0): it stops with the counts, after writing
nothing. A refused endpoint (wrong key, URL or model) stops it at the first reply.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from tagrpo.config.params import Params
from tagrpo.data.schema import read_questions
from tagrpo.rephrase.candidates import write_candidates
from tagrpo.rephrase.generate import make_rephraser
from tagrpo.rephrase.settings import open_cache, questions_to_rephrase
from tagrpo.rephrase.shares import check_failed_share


def rephrase_training_set(
    config: Params, root: Path, train_path: Path, out_path: Path
) -> dict[str, Any]:
    """Write ``out_path`` (candidates, one row per question and slot); return the metrics."""
    settings = config.rephrase
    started = time.perf_counter()
    source = read_questions(str(train_path))
    questions = questions_to_rephrase(source, settings)
    cache = open_cache(settings)
    try:
        rephraser = make_rephraser(settings, config.common.seed, cache=cache, root=root)
        candidates = rephraser.rephrase(questions, round=0)
    finally:
        if cache is not None:
            cache.close()
    failures = Counter(c.error for c in candidates if c.text is None)
    metrics: dict[str, Any] = {
        "backend": settings.backend,
        "questions": len(questions),
        "questions_not_rephrased": len(source) - len(questions),  # rephrase.max_questions
        "slots": len(candidates),
        "rephrased": sum(c.text is not None for c in candidates),
        "missing": sum(c.text is None for c in candidates),
        "missing_share": sum(c.text is None for c in candidates) / max(1, len(candidates)),
        "missing_by_reason": dict(sorted(failures.items())),
        "seconds": time.perf_counter() - started,
        **rephraser.metrics(),
    }
    print(
        f"[rephrase] {settings.backend}: {len(questions)} questions x {settings.n} = "
        f"{len(candidates)} slots, {metrics['rephrased']} rephrased, {metrics['missing']} "
        f"missing {dict(failures) or ''}"
    )
    for candidate in [c for c in candidates if c.text is None][:10]:
        print(
            f"[rephrase] missing {candidate.question_id}#{candidate.variant}: "
            f"{candidate.error} {candidate.detail or ''}"[:300]
        )
    check_failed_share(
        metrics["missing"],
        len(candidates),
        settings.max_failed_share,
        "rephrasing slots got no rephrasing",
        f"by reason {dict(failures)}{_most_common_detail(candidates)}; fix the endpoint or "
        "raise rephrase.max_failed_share",
    )
    write_candidates(candidates, out_path)
    return metrics


def _most_common_detail(candidates: list[Any]) -> str:
    """``, most often 'DETAIL' (N)``: the commonest failure's detail (for an endpoint, its
    kind, host and port), so that the one-line error says what to fix."""
    details = Counter(c.detail for c in candidates if c.text is None and c.detail)
    if not details:
        return ""
    detail, count = details.most_common(1)[0]
    return f", most often {detail[:300]!r} ({count})"
