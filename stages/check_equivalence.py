"""DVC stage ``check_equivalence``: verify every rephrasing, keep N per question.

Structural, embedding-similarity and answer-consistency checks, regeneration of rejected slots
and the fallback (:mod:`tagrpo.equivalence.check_stage`); the stage fails when too many slots end
without a checked rephrasing. Outputs: ``data/rephrased/train.parquet`` (the trainers' input),
``data/rephrased/verdicts.parquet``, ``data/rephrased/rejections.parquet``,
``reports/sections/equivalence.md`` and ``metrics/check_equivalence.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tagrpo.backends.sample_store import SampleStore, default_store_dir
from tagrpo.config.params import load_config
from tagrpo.equivalence.check_stage import check_rephrasings
from tagrpo.pipeline.runtime import require_inputs, run_main, running_stage
from tagrpo.plumbing.layout import check_equivalence_outputs, data_outputs, rephrase_outputs
from tagrpo.plumbing.paths import project_root


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    config = load_config()
    inputs = [data_outputs()["processed"] / "train.parquet", rephrase_outputs()["candidates"]]
    if config.check_equivalence.consistency.enabled:
        inputs.append(Path(config.check_equivalence.consistency.local.model))
    require_inputs(project_root(), inputs, "check_equivalence")
    outputs = check_equivalence_outputs()
    store = SampleStore(default_store_dir())  # the local solver's samples survive a failure
    with running_stage(
        "check_equivalence", outputs, config, log_sections=("check_equivalence", "rephrase")
    ) as ctx:
        summary = check_rephrasings(
            config,
            ctx.root,
            ctx.root / data_outputs()["processed"] / "train.parquet",
            ctx.root / rephrase_outputs()["candidates"],
            {role: ctx.path(role) for role in outputs.outs},
            store,
        )
        ctx.set_metrics(summary)
        print(f"[check_equivalence] policy {summary['policy']}; seconds {summary['seconds']}")
    store.discard()  # the outputs now hold the verdicts; a forced rerun samples afresh
    return summary


if __name__ == "__main__":
    run_main(main, "check_equivalence")
