"""DVC stage ``report``: ``reports/report.md`` and its figures, from the stages' outputs.

Data counts, the equivalence section, the base policy's signal figures, the training
summaries, the diagnostics section and every policy's pass@k (Table 1-style tables, the full
table with bootstrap CIs, curves) (:mod:`tagrpo.report.build`).
"""

from __future__ import annotations

import argparse
from typing import Any

from tagrpo.config.params import load_config
from tagrpo.pipeline.runtime import require_inputs, run_main, running_stage
from tagrpo.plumbing.layout import data_outputs, evaluate_outputs, report_outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.tracking import git_state
from tagrpo.report.build import build_report
from tagrpo.report.plot_data import PLOT_DATA_ROLES, write_plot_data


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    config = load_config()
    policies = ["base", *config.runs.policies()]
    require_inputs(
        project_root(),
        [data_outputs().metrics, *(evaluate_outputs(p)["passk"] for p in policies)],
        "report",
    )
    with running_stage("report", report_outputs(), config, log_sections=("report",)) as ctx:
        out = {role: ctx.path(role) for role in report_outputs().outs}
        metrics = build_report(config, ctx.root, out, git_state())
        metrics |= write_plot_data(config, ctx.root, {r: out[r] for r in PLOT_DATA_ROLES})
        if ctx.run is not None:
            import mlflow

            mlflow.log_artifact(str(ctx.path("report")))
            mlflow.log_artifact(str(ctx.path("claims")))  # the verdicts, in words
            mlflow.log_artifacts(str(ctx.path("figures")), "figures")
        ctx.set_metrics(metrics)
    print(f"[report] wrote {report_outputs()['report']}")
    return metrics


if __name__ == "__main__":
    run_main(main, "report")
