"""DVC stage ``preflight``: validate params.yaml and record the data stage's external inputs.

A stage that refused bad params itself would do so only once DVC reached it, after the stages
before it ran on them. Every other stage depends on ``data/preflight/params.ok``:
DVC runs this stage first and stops at its failure, before it touches any other stage. The
file's text is constant, so a valid params change reruns only the stages whose params changed.

The stage is ``always_changed`` (it also hashes the benchmark files outside the repository,
which DVC cannot track: :mod:`tagrpo.splits.inputs`); it takes about a second. It also drops
dvc.lock's entries of stages the params no longer have (:func:`tagrpo.plumbing.verify.prune_lock`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from tagrpo.config.params import ConfigError, load_config
from tagrpo.pipeline.runtime import refuse_concurrent_dvc, run_main
from tagrpo.plumbing.dvc_stages import outputs_outside_project
from tagrpo.plumbing.layout import preflight_outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.verify import prune_lock
from tagrpo.report.inputs import judging_problem
from tagrpo.splits.inputs import (
    INPUT_LINKS,
    PARAMS_OK,
    data_dir_problem,
    input_manifest,
    link_inputs,
    manifest_text,
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    try:
        config = load_config()
    except (ConfigError, OSError) as error:
        print(f"[preflight] {error}", file=sys.stderr)
        print(
            "[preflight] refused before any stage ran: no output was deleted; fix params.yaml "
            "(tagrpo params check) and run again",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    root = project_root()
    # A second `dvc repro` in this checkout stops here, before it rewrites anything the running
    # one reads (this stage's outputs, dvc.lock).
    refuse_concurrent_dvc(root, "preflight")
    # The report stage judges the run under report.preregistration: a file it cannot judge
    # under is refused now, not after every training.
    problems = [data_dir_problem(config, root) or judging_problem(config, root)]
    # An output behind a symlink out of the project: DVC refuses it after its stage ran.
    problems += outputs_outside_project(root)
    problems = [problem for problem in problems if problem]
    if problems:
        for problem in problems:
            print(f"[preflight] {problem}", file=sys.stderr)
        print(
            "[preflight] refused before any stage ran: no output was deleted",
            file=sys.stderr,
        )
        raise SystemExit(2)
    manifest = input_manifest(config)
    files = manifest["files"]
    missing = sorted(name for name, entry in files.items() if entry == "missing")
    metrics = {
        "input_files": len(files),
        "input_files_missing": len(missing),
        "input_bytes": sum(entry["bytes"] for entry in files.values() if entry != "missing"),
    }
    if missing:
        print(f"[preflight] data inputs missing (the data stage will need them): {missing}")
    outputs = preflight_outputs()
    _write(root / outputs["inputs"], manifest_text(manifest))
    _write(root / outputs.metrics, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    link_inputs(config, root / INPUT_LINKS)  # what `dvc status` of the data stage follows
    # dvc.lock keeps the entries of stages these params no longer have (a profile's matrix
    # items, an edited runs list): dropped here, before any stage compares with dvc.lock.
    pruned = prune_lock(root)
    if pruned:
        print(f"[preflight] dvc.lock: removed {len(pruned)} entries of stages not in the DAG")
    _write(root / outputs["params_ok"], PARAMS_OK)  # last: only a complete run gives it
    print(f"[preflight] params valid; data inputs: {metrics}")
    return metrics


if __name__ == "__main__":
    run_main(main, "preflight")
