"""Where every stage writes: the one place stages read their output paths from.

dvc.yaml declares the same paths (DVC needs them literally); ``tests/test_dvc_stages.py`` expands
dvc.yaml and checks that each stage's ``outs``/``metrics`` equal :func:`stage_outputs` here, so
the two cannot drift apart. All paths are relative to the project root.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BASE_POLICY = "base"
CHECKPOINT_FRACTIONS_NAME = "checkpoint-{:03d}"


def policy_name(method: str, seed: int, data_multiple: float = 1.0) -> str:
    """``ta_grpo-s0``; data-scaling runs add the multiple: ``grpo_data2.5x-s0``,
    ``grpo_data2.0x-s0`` (a float as DVC writes it in dvc.yaml: both name outputs alike)."""
    scale = "" if data_multiple == 1.0 else f"_data{float(data_multiple)}x"
    return f"{method}{scale}-s{seed}"


def dvc_stage_name(
    stage: str,
    method: str,
    seed: int,
    data_multiple: float = 1.0,
    one_seed_methods: tuple[str, ...] | list[str] = (),
    control_methods: tuple[str, ...] | list[str] = (),
) -> str:
    """DVC's name of a matrix stage item: ``train@grpo-0``, ``train_one_seed@avspo-0``,
    ``train_control@grpo_flipped-1``, ``train_scaling@grpo-1.5-0``."""
    if data_multiple != 1.0:
        return f"{stage}_scaling@{method}-{float(data_multiple)}-{seed}"
    if method in control_methods:
        return f"{stage}_control@{method}-{seed}"
    if method in one_seed_methods:
        return f"{stage}_one_seed@{method}-{seed}"
    return f"{stage}@{method}-{seed}"


def checkpoint_name(fraction: float) -> str:
    """``0.25`` -> ``checkpoint-025`` (percent of training, zero-padded)."""
    return CHECKPOINT_FRACTIONS_NAME.format(round(100 * fraction))


@dataclass(frozen=True)
class Outputs:
    """A stage's outputs: ``outs`` (data and models), ``metrics`` (JSON), by role."""

    outs: dict[str, Path]
    metrics: Path

    def all(self) -> list[Path]:
        return [*self.outs.values(), self.metrics]

    def __getitem__(self, role: str) -> Path:
        return self.outs[role]


def preflight_outputs() -> Outputs:
    """The gate every stage depends on: ``params_ok`` (constant text, written only when
    params.yaml validates) and the data stage's external-input manifest."""
    return Outputs(
        {
            "params_ok": Path("data/preflight/params.ok"),
            "inputs": Path("data/preflight/inputs.json"),
        },
        Path("metrics/preflight.json"),
    )


def data_outputs() -> Outputs:
    return Outputs({"processed": Path("data/processed")}, Path("metrics/data.json"))


def base_model_outputs() -> Outputs:
    return Outputs(
        {
            "model": Path("models/base"),
            "sft_plot": Path("plots/base_model_sft.csv"),
            "phrasing_plot": Path("plots/base_model_phrasings.csv"),
            "probe_samples": Path("probes/base_model.parquet"),
        },
        Path("metrics/base_model.json"),
    )


def rephrase_outputs() -> Outputs:
    return Outputs(
        {"candidates": Path("data/rephrased/candidates.parquet")}, Path("metrics/rephrase.json")
    )


def check_equivalence_outputs() -> Outputs:
    return Outputs(
        {
            "train": Path("data/rephrased/train.parquet"),
            "verdicts": Path("data/rephrased/verdicts.parquet"),
            "rejections": Path("data/rephrased/rejections.parquet"),
            "section": Path("reports/sections/equivalence.md"),
        },
        Path("metrics/check_equivalence.json"),
    )


def train_outputs(policy: str) -> Outputs:
    return Outputs(
        {
            "model": Path("models") / policy,
            "rollouts": Path("rollouts") / policy,
            "history": Path("plots/train") / f"{policy}.csv",
        },
        Path("metrics/train") / f"{policy}.json",
    )


def evaluate_outputs(policy: str) -> Outputs:
    return Outputs(
        {
            "responses": Path("evals") / policy / "responses.parquet",
            "passk": Path("evals") / policy / "passk.csv",
        },
        Path("metrics/eval") / f"{policy}.json",
    )


def diagnostics_outputs() -> Outputs:
    return Outputs(
        {
            "samples": Path("diagnostics/samples.parquet"),
            "zero_gradient": Path("plots/diagnostics/zero_gradient.csv"),
            "distances": Path("plots/diagnostics/distances.csv"),
            "comparisons": Path("plots/diagnostics/comparisons.csv"),
            "figure": Path("reports/diagnostics.png"),
            "section": Path("reports/sections/diagnostics.md"),
        },
        Path("metrics/diagnostics.json"),
    )


def report_outputs() -> Outputs:
    return Outputs(
        {
            "report": Path("reports/report.md"),
            "figures": Path("reports/figures"),
            "claims": Path("reports/claims.md"),
            "scores": Path("reports/tables/scores.csv"),
            "differences": Path("reports/tables/differences.csv"),
            "paper_scores": Path("reports/tables/paper_scores.csv"),
            "table1": Path("reports/tables/table1.csv"),
            "data_scaling": Path("reports/tables/data_scaling.csv"),
            "validity": Path("reports/tables/validity.csv"),
            # Long-form data of dvc.yaml's plots (tagrpo/report/plot_data.py).
            "passk_plot": Path("plots/passk.csv"),
            "training_plot": Path("plots/training.csv"),
            "zero_gradient_plot": Path("plots/zero_gradient.csv"),
            "data_scaling_plot": Path("plots/data_scaling.csv"),
        },
        Path("metrics/report.json"),
    )


def model_dir(policy: str) -> Path:
    """The folder of a policy: ``models/base`` or a trained ``models/<policy>``."""
    return Path("models") / policy


def stage_outputs(stage: str, **item: str) -> Outputs:
    """The outputs of a dvc.yaml stage; ``item`` holds a matrix stage's values."""
    if stage in ("train", "train_one_seed", "train_control", "train_scaling"):
        multiple = float(item.get("multiple", 1.0))
        return train_outputs(policy_name(item["method"], int(item["seed"]), multiple))
    if stage in ("evaluate", "evaluate_one_seed", "evaluate_control", "evaluate_scaling"):
        multiple = float(item.get("multiple", 1.0))
        return evaluate_outputs(policy_name(item["method"], int(item["seed"]), multiple))
    if stage == "evaluate_base":
        return evaluate_outputs(BASE_POLICY)
    builders = {
        "preflight": preflight_outputs,
        "data": data_outputs,
        "base_model": base_model_outputs,
        "rephrase": rephrase_outputs,
        "check_equivalence": check_equivalence_outputs,
        "diagnostics": diagnostics_outputs,
        "report": report_outputs,
    }
    return builders[stage]()
