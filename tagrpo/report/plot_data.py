"""Long-form CSVs for DVC's plots (one row per policy and point, with its method and seed), and
the headline numbers ``dvc exp show`` lists.

DVC colours a plot by revision and file only; the paper's figures need one colour per method and
one panel per benchmark, so the plot templates (:mod:`tagrpo.pipeline.plots`) encode the ``method``,
``benchmark`` and ``grouping`` columns written here. Written by the report stage; every policy
the params train must have its outputs (a missing one is an error, as in the report).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.config.params import Params
from tagrpo.plumbing.layout import BASE_POLICY, evaluate_outputs, train_outputs
from tagrpo.report.chance import chance_floor, multiple_choice_options

# Roles of the report stage's outputs written here (tagrpo.plumbing.layout.report_outputs).
PLOT_DATA_ROLES = ("passk_plot", "training_plot", "zero_gradient_plot", "data_scaling_plot")
# Training-history columns kept for the curves (renamed: DVC templates address plain names).
TRAINING_COLUMNS = {
    "original/reward_mean": "reward_original",
    "reward_mean": "reward",
    "kl": "kl",
    "response_length_mean": "response_length",
}
ZERO_GRADIENT_GROUPINGS = ("original", "neighbours", "joint", "train")


def split_policy(policy: str) -> tuple[str, str, float]:
    """``ta_grpo-s0`` -> (ta_grpo, 0, 1.0); ``grpo_data2.5x-s1`` -> (grpo, 1, 2.5);
    ``base`` -> (base, "", 1.0)."""
    name, sep, seed = policy.rpartition("-s")
    if not sep or not seed.isdigit():
        return policy, "", 1.0
    method, sep, multiple = name.rpartition("_data")
    if sep and multiple.endswith("x"):
        try:
            return method, seed, float(multiple[:-1])
        except ValueError:
            pass
    return name, seed, 1.0


def _identity(policy: str) -> dict[str, Any]:
    method, seed, multiple = split_policy(policy)
    return {"policy": policy, "method": method, "seed": seed, "data_multiple": multiple}


def read_policy_passk(root: Path, policy: str) -> pd.DataFrame:
    """One policy's pass@k table (an error naming it when its evaluation is missing)."""
    path = root / evaluate_outputs(policy)["passk"]
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run the evaluate stage of {policy}")
    return pd.read_csv(path)


def passk_long(root: Path, policies: list[str]) -> pd.DataFrame:
    """Every policy's pass@k rows: policy, method, seed, benchmark, kind, k, pass@k, CI."""
    frames = []
    for policy in policies:
        table = read_policy_passk(root, policy).rename(columns={"name": "benchmark"})
        identity = _identity(policy)
        frames.append(table.drop(columns=["policy"], errors="ignore").assign(**identity))
    columns = ["policy", "method", "seed", "data_multiple", "benchmark", "kind", "k"]
    values = ["pass_at_k", "ci_low", "ci_high", "n_problems", "n_samples"]
    if not frames:  # e.g. no data-scaling method and no TA-GRPO: the plot's table is empty
        return pd.DataFrame(columns=columns + values)
    return pd.concat(frames, ignore_index=True)[columns + values]


def training_long(root: Path, policies: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-step curves (reward, KL, length) and zero-gradient rates by grouping."""
    curves, rates = [], []
    for policy in policies:
        path = root / train_outputs(policy)["history"]
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the train stage of {policy}")
        history = pd.read_csv(path)
        identity = {k: v for k, v in _identity(policy).items() if k != "data_multiple"}
        kept = [c for c in TRAINING_COLUMNS if c in history]
        curves.append(history[["step", *kept]].rename(columns=TRAINING_COLUMNS).assign(**identity))
        for grouping in ZERO_GRADIENT_GROUPINGS:
            column = f"{grouping}/zero_gradient_rate"
            if column in history:
                rates.append(
                    pd.DataFrame(
                        {"step": history["step"], "zero_gradient_rate": history[column]}
                    ).assign(grouping=grouping, **identity)
                )
    return pd.concat(curves, ignore_index=True), pd.concat(rates, ignore_index=True)


def data_scaling_long(root: Path, config: Params, largest_k: int) -> pd.DataFrame:
    """pass@largest-k against the training-data multiple: the 1x policies of the data-scaling
    methods (and TA-GRPO, the paper's reference) and every scaled policy of
    ``runs.data_scaling`` (the ``train_scaling``/``evaluate_scaling`` matrices)."""
    methods = [*config.runs.data_scaling.methods, "ta_grpo"]
    policies = [p for p in config.runs.policies() if split_policy(p)[0] in methods]
    table = passk_long(root, [*policies, *config.runs.scaling_policies()])
    return table[table["k"] == largest_k].reset_index(drop=True)


def key_metrics(passk: pd.DataFrame, groups: Mapping[str, list[str]]) -> dict[str, Any]:
    """``{group: {method: {"pass@k": mean over seeds}}}`` at k = 1 and the largest k: the
    columns worth reading in ``dvc exp show`` (``metrics/report.json``)."""
    largest = int(passk["k"].max())
    wanted = passk[passk["benchmark"].isin(list(groups) or passk["benchmark"].unique())]
    wanted = wanted[wanted["k"].isin({1, largest})]
    means = wanted.groupby(["benchmark", "method", "k"])["pass_at_k"].mean()
    summary: dict[str, Any] = {}
    for (benchmark, method, k), value in means.items():
        summary.setdefault(benchmark, {}).setdefault(method, {})[f"pass@{k}"] = float(value)
    return summary


def write_plot_data(config: Params, root: Path, paths: Mapping[str, Path]) -> dict[str, Any]:
    """Write the CSVs of :data:`PLOT_DATA_ROLES` to ``paths``; returns the key metrics."""
    trained = config.runs.policies()
    passk = passk_long(root, [BASE_POLICY, *trained])
    # The chance floor of a multiple-choice benchmark (or a group holding one; empty: free-form),
    # drawn dashed by the pass@k template.
    options, groups = multiple_choice_options(config), config.evaluate.groups
    passk["chance"] = [
        chance_floor(name, int(k), options, groups)
        for name, k in zip(passk["benchmark"], passk["k"], strict=True)
    ]
    curves, rates = training_long(root, trained)
    largest_k = int(passk["k"].max())
    scaling = data_scaling_long(root, config, largest_k)
    for role, frame in zip(PLOT_DATA_ROLES, (passk, curves, rates, scaling), strict=True):
        paths[role].parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(paths[role], index=False)
    return key_metrics(passk, config.evaluate.groups)
