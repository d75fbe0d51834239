"""DVC stage ``rephrase``: N problem-equivalent rephrasings per training question.

``rephrase.backend``: ``rules`` (deterministic transforms, equivalent by construction; the
embedded default), ``openai`` (any OpenAI-compatible endpoint: the paper's Appendix A prompt,
concurrent requests, retries, a persistent reply cache) or ``hf`` (a local transformers model).
The stage fails, writing nothing, when the endpoint refuses the run or more than
``rephrase.max_failed_share`` of the slots got no rephrasing
(:mod:`tagrpo.rephrase.rephrase_stage`).

Outputs: ``data/rephrased/candidates.parquet`` (one row per question and slot; failed requests
are rows with their error) and ``metrics/rephrase.json``. API keys come from the environment
variable named in ``openai.api_key_env`` only.
"""

from __future__ import annotations

import argparse
from typing import Any

from tagrpo.config.params import load_config
from tagrpo.pipeline.runtime import require_inputs, run_main, running_stage
from tagrpo.plumbing.layout import data_outputs, rephrase_outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.rephrase.rephrase_stage import rephrase_training_set


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    config = load_config()
    train = data_outputs()["processed"] / "train.parquet"
    require_inputs(project_root(), [train], "rephrase")
    with running_stage("rephrase", rephrase_outputs(), config, log_sections=("rephrase",)) as ctx:
        metrics = rephrase_training_set(config, ctx.root, ctx.root / train, ctx.path("candidates"))
        ctx.set_metrics(metrics)
        for key in ("requests/requests", "requests/http_requests", "requests/cache_hits"):
            if key in metrics:
                print(f"[rephrase] {key} = {metrics[key]:.0f}")
    return metrics


if __name__ == "__main__":
    run_main(main, "rephrase")
