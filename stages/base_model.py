"""DVC stage ``base_model``: produce the policy training starts from, and probe it by phrasing.

``base_model.kind`` chooses how (:mod:`tagrpo.training.base_policy`). Outputs: ``models/base/``,
``plots/base_model_sft.csv``, ``plots/base_model_phrasings.csv``, ``probes/base_model.parquet``
and ``metrics/base_model.json``.
"""

from __future__ import annotations

import argparse
import time

from tagrpo.config.params import load_config
from tagrpo.pipeline.runtime import require_inputs, run_main, running_stage
from tagrpo.plumbing.layout import base_model_outputs
from tagrpo.plumbing.paths import project_root


def main(argv: list[str] | None = None) -> dict[str, float]:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    from tagrpo.plumbing.layout import data_outputs
    from tagrpo.training import base_policy

    config = load_config()
    processed = data_outputs()["processed"]
    train_path = processed / "train.parquet"
    if config.base_model.probe.enabled or config.base_model.kind == "warmstart":
        require_inputs(project_root(), [train_path], "base_model")
    with running_stage(
        "base_model", base_model_outputs(), config, log_sections=("base_model",)
    ) as ctx:
        started = time.perf_counter()
        if config.base_model.kind == "warmstart":

            def log(step: int, record: dict[str, float]) -> None:
                if step % 25 == 0 or step == config.base_model.warmstart.training.steps - 1:
                    ctx.log({"sft_loss": record["loss"], "sft_lr": record["lr"]}, step=step)

            metrics = base_policy.warm_start_policy(
                config, ctx.root / processed, ctx.path("model"), ctx.path("sft_plot"), log
            )
        else:
            metrics = base_policy.external_policy(config, ctx.path("model"), ctx.path("sft_plot"))
        metrics["build_seconds"] = time.perf_counter() - started
        if config.base_model.probe.enabled:
            probe_started = time.perf_counter()
            metrics.update(
                base_policy.probe_phrasings(
                    config,
                    ctx.path("model"),
                    ctx.root / train_path,
                    ctx.path("phrasing_plot"),
                    ctx.path("probe_samples"),
                )
            )
            metrics["probe_seconds"] = time.perf_counter() - probe_started
        else:
            base_policy.no_probe(ctx.path("phrasing_plot"), ctx.path("probe_samples"))
        ctx.set_metrics(metrics)
        for key in sorted(metrics):
            headline = key.startswith("probe/") and "/" not in key[len("probe/") :]
            if headline or key.startswith("probe/original"):
                print(f"[base_model] {key} = {metrics[key]:.4f}")
    return metrics


if __name__ == "__main__":
    run_main(main, "base_model")
