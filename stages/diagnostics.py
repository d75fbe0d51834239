"""DVC stage ``diagnostics``: gradient vanishing and response diversity across training.

The paper's Figures 3 and 4 (:mod:`tagrpo.evaluation.diagnostics_stage`): the base policy and the
25/50/75/100% checkpoints of ``diagnostics.policies`` answer the first training questions, G
responses to the original and G to each of the N accepted neighbours. Outputs:
``diagnostics/samples.parquet``, ``plots/diagnostics/*.csv``, ``reports/diagnostics.png``,
``reports/sections/diagnostics.md`` and ``metrics/diagnostics.json``.
"""

from __future__ import annotations

import argparse
from typing import Any

from tagrpo.backends.sample_store import SampleStore, default_store_dir
from tagrpo.config.params import load_config
from tagrpo.evaluation.diagnostics_stage import checkpoints_to_probe, run_diagnostics
from tagrpo.pipeline.runtime import run_main, running_stage
from tagrpo.plumbing.layout import diagnostics_outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.report.vanishing_diversity import write_figure_and_section


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    config = load_config()
    checkpoints_to_probe(config, project_root())  # every checkpoint exists, before any work
    outputs = diagnostics_outputs()
    store = SampleStore(default_store_dir())  # samples survive a failure after sampling
    with running_stage(
        "diagnostics", outputs, config, log_sections=("diagnostics", config.diagnostics.backend)
    ) as ctx:
        paths = {role: ctx.path(role) for role in outputs.outs}
        measured = run_diagnostics(config, ctx.root, paths, store)
        write_figure_and_section(measured, paths["figure"], paths["section"], config.diagnostics)
        metrics = measured.metrics
        if ctx.run is not None:
            import mlflow

            mlflow.log_artifact(str(paths["figure"]))
            mlflow.log_artifact(str(paths["section"]))
        ctx.set_metrics(metrics)
        print(
            f"[diagnostics] {metrics['checkpoints_probed']:.0f} checkpoints, "
            f"{metrics['seconds']:.1f} s; samples reused {store.samples_reused}, "
            f"resampled {store.samples_resampled}"
        )
    store.discard()  # the outputs now hold the samples; a forced rerun samples afresh
    return metrics


if __name__ == "__main__":
    run_main(main, "diagnostics")
