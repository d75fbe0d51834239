"""Every DVC stage as a Prefect flow, for running or scheduling one stage from the Prefect UI.

The flows call the same ``main`` functions that ``python -m stages.<name>`` runs; DVC stays the
owner of the DAG and the cache (``flows.pipeline`` runs the whole DAG through ``dvc repro``).
Grading inside a stage uses worker processes, so math-verify's signal-based timeouts keep
working even though Prefect runs flow code in worker threads.
"""

from __future__ import annotations

from prefect import flow

from stages import (
    base_model,
    check_equivalence,
    data,
    diagnostics,
    evaluate,
    preflight,
    rephrase,
    report,
    train,
)


@flow(name="stage-preflight", log_prints=True)
def preflight_flow() -> dict:
    return preflight.main([])


@flow(name="stage-data", log_prints=True)
def data_flow() -> dict:
    return data.main([])


@flow(name="stage-base-model", log_prints=True)
def base_model_flow() -> dict:
    return base_model.main([])


@flow(name="stage-rephrase", log_prints=True)
def rephrase_flow() -> dict:
    return rephrase.main([])


@flow(name="stage-check-equivalence", log_prints=True)
def check_equivalence_flow() -> dict:
    return check_equivalence.main([])


@flow(name="stage-train", log_prints=True)
def train_flow(method: str = "ta_grpo", seed: int = 0, data_multiple: float = 1.0) -> dict:
    return train.main(
        ["--method", method, "--seed", str(seed), "--data-multiple", str(data_multiple)]
    )


@flow(name="stage-evaluate", log_prints=True)
def evaluate_flow(
    method: str | None = None, seed: int = 0, data_multiple: float = 1.0, policy: str | None = None
) -> dict:
    """A trained policy by method, seed (and data multiple), or the base policy."""
    if method is not None:
        return evaluate.main(
            ["--method", method, "--seed", str(seed), "--data-multiple", str(data_multiple)]
        )
    return evaluate.main(["--policy", policy or "base"])


@flow(name="stage-diagnostics", log_prints=True)
def diagnostics_flow() -> dict:
    return diagnostics.main([])


@flow(name="stage-report", log_prints=True)
def report_flow() -> str:
    return str(report.main([]))


STAGE_FLOWS = {
    "preflight": preflight_flow,
    "data": data_flow,
    "base_model": base_model_flow,
    "rephrase": rephrase_flow,
    "check_equivalence": check_equivalence_flow,
    "train": train_flow,
    "evaluate": evaluate_flow,
    "evaluate_base": evaluate_flow,  # evaluate_flow() evaluates the base policy
    "train_one_seed": train_flow,
    "evaluate_one_seed": evaluate_flow,
    "train_control": train_flow,  # the negative control with runs.control_seeds
    "evaluate_control": evaluate_flow,
    "train_scaling": train_flow,  # with data_multiple > 1
    "evaluate_scaling": evaluate_flow,
    "diagnostics": diagnostics_flow,
    "report": report_flow,
}

if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2 or sys.argv[1] not in STAGE_FLOWS:
        raise SystemExit(f"usage: python -m flows.stages {{{','.join(STAGE_FLOWS)}}}")
    STAGE_FLOWS[sys.argv[1]]()
