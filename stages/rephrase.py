"""DVC stage ``rephrase``: N problem-equivalent rephrasings per training question.

``rephrase.backend`` (params.yaml):
  rules   deterministic transforms, equivalent by construction (the embedded default: the
          mini world's other phrasing families; instruction wrappers and reorderings that keep
          every number and formula for MATH text)
  openai  any OpenAI-compatible endpoint (OpenAI itself, ``vllm serve``): the paper's
          Appendix A prompt, concurrent requests, retries, a persistent reply cache
  hf      a local transformers model with the same prompt

Outputs: ``data/rephrased/candidates.parquet`` (one row per question and slot; failed requests
are rows with their error, not gaps) and ``metrics/rephrase.json`` (requests sent, cache hits,
retries, failures by kind, token usage, parse repairs), also logged to MLflow.

The reply cache (``rephrase.cache_dir``, default ``.cache/rephrase/`` in the checkout) is not a
DVC output, so DVC's deleting the outputs before a rerun does not empty it: a rerun sends no
request whose reply is stored, and a killed run resumes where it stopped. API keys are read
from the environment variable named in ``openai.api_key_env``, never from params.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from typing import Any

from tagrpo.env import apply_offline_defaults

apply_offline_defaults()

from tagrpo.params import stage_params  # noqa: E402
from tagrpo.paths import project_root  # noqa: E402
from tagrpo.rephrase.settings import open_cache, rephrase_settings  # noqa: E402
from tagrpo.tracking import log_metrics, stage_run  # noqa: E402


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", default="data/processed/train.parquet")
    parser.add_argument("--out", default="data/rephrased/candidates.parquet")
    parser.add_argument("--metrics", default="metrics/rephrase.json")
    args = parser.parse_args(argv)

    from tagrpo.data.schema import read_questions
    from tagrpo.rephrase.generate import make_rephraser, write_candidates

    params = stage_params("rephrase")
    root = project_root()
    settings = rephrase_settings(params)
    with stage_run("rephrase", params):
        started = time.perf_counter()
        questions = read_questions(str(root / args.train))
        cache = open_cache(settings)
        try:
            rephraser = make_rephraser(settings, cache=cache, root=root)
            candidates = rephraser.rephrase(questions, round=0)
        finally:
            if cache is not None:
                cache.close()
        out = root / args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        write_candidates(candidates, out)

        failures = Counter(c.error for c in candidates if c.text is None)
        metrics: dict[str, Any] = {
            "backend": settings.get("backend", "rules"),
            "questions": len(questions),
            "slots": len(candidates),
            "rephrased": sum(c.text is not None for c in candidates),
            "missing": sum(c.text is None for c in candidates),
            "missing_by_reason": dict(sorted(failures.items())),
            "seconds": time.perf_counter() - started,
            **rephraser.metrics(),
        }
        numeric = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        numeric.update({f"missing_by_reason/{k}": v for k, v in failures.items()})
        log_metrics(numeric)
        metrics_path = root / args.metrics
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        print(
            f"[rephrase] {metrics['backend']}: {len(questions)} questions x "
            f"{settings.get('n', 3)} = {len(candidates)} slots, {metrics['rephrased']} rephrased, "
            f"{metrics['missing']} missing {dict(failures) or ''}"
        )
        for key in ("requests/requests", "requests/http_requests", "requests/cache_hits"):
            if key in metrics:
                print(f"[rephrase] {key} = {metrics[key]:.0f}")
        for candidate in [c for c in candidates if c.text is None][:10]:
            print(
                f"[rephrase] missing {candidate.question_id}#{candidate.variant}: "
                f"{candidate.error} {candidate.detail or ''}"[:300]
            )
    return metrics


if __name__ == "__main__":
    main()
