"""What one base draw's checkout contributes to the claims family
(:class:`tagrpo.report.family.DrawInputs`): every method's per-problem pass@k over its seeds,
the base's, the data-scaling runs', and the diagnostics' per-question measures of TA-GRPO's
policies (Fig. 3's identical-reward rates, Fig. 4's strategy entropy and embedding distance).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tagrpo.metrics.compare import SeedRuns
from tagrpo.report.claims import TA
from tagrpo.report.family import (
    EMBEDDING_DISTANCE,
    IDENTICAL_AS_DRAWN,
    IDENTICAL_SIZE_MATCHED,
    QUESTIONS,
    STRATEGY_ENTROPY,
    DrawInputs,
)


def diagnostic_measures(
    samples: pd.DataFrame | None,
    distances: pd.DataFrame | None,
    policies: Sequence[str],
    checkpoint: str,
    group: int,
    neighbours: int,
) -> dict[str, SeedRuns]:
    """The per-(policy, question) measures of rows 1, 2 and 10 and the embedding distance,
    from the diagnostics stage's samples (``diagnostics/samples.parquet``) and distances
    (``plots/diagnostics/distances.csv``) of ``policies`` at ``checkpoint`` (its label, e.g.
    ``100%``); one "seed" per policy. A policy missing there is an error naming it."""
    from tagrpo.evaluation.vanishing_diversity import question_groups

    if samples is None or not policies:
        return {}
    per_measure: dict[str, list[pd.Series]] = {}
    for policy in policies:
        part = samples[(samples["policy"] == policy) & (samples["checkpoint"] == checkpoint)]
        if part.empty:
            raise ValueError(f"the diagnostics' samples have no {policy} at {checkpoint}")
        wide = question_groups(part, group, neighbours).pivot(
            index="question_id", columns="grouping", values="identical"
        )
        per_measure.setdefault(IDENTICAL_SIZE_MATCHED, []).append(
            wide["original_N1G"] - wide["joint"]
        )
        per_measure.setdefault(IDENTICAL_AS_DRAWN, []).append(wide["original"] - wide["joint"])
        entropy = strategy_entropy_difference(part, group)
        if entropy is not None:
            per_measure.setdefault(STRATEGY_ENTROPY, []).append(entropy)
        if distances is not None:
            chosen = distances[(distances["policy"] == policy) & (distances["label"] == checkpoint)]
            if chosen.empty:
                raise ValueError(f"the diagnostics' distances have no {policy} at {checkpoint}")
            per_measure.setdefault(EMBEDDING_DISTANCE, []).append(
                _neighbours_minus_q0(chosen, "mean_distance")
            )
    return {name: _as_runs(series) for name, series in per_measure.items()}


def _neighbours_minus_q0(frame: pd.DataFrame, column: str) -> pd.Series:
    """Per question: the mean over its neighbours (``variant`` > 0) minus q0's (variant 0)."""
    original = frame[frame["variant"] == 0].groupby("question_id")[column].mean()
    neighbour = frame[frame["variant"] > 0].groupby("question_id")[column].mean()
    return (neighbour - original.reindex(neighbour.index)).reindex(
        original.index.union(neighbour.index)
    )


def strategy_entropy_difference(samples: pd.DataFrame, group: int) -> pd.Series | None:
    """Per training question: the strategy entropy (bits) of each neighbour's first G responses,
    averaged over the neighbours that have a labelled response, minus that of q0's first G
    responses (the same size, so the plug-in bias is the same); NaN where either side has no
    response on a known path. Each response's path is read against the problem parsed from
    q0's text (a rephrasing is the same problem). None when the texts are not mini-world
    problems (no solution paths to read)."""
    from tagrpo.metrics.testbed import strategy_entropy
    from tagrpo.miniworld.solver import parse_problem
    from tagrpo.miniworld.strategy import strategy_of

    first = samples[samples["sample_index"] < group]
    texts = first[first["variant"] == 0].groupby("question_id")["prompt"].first()
    problems = {question: parse_problem(text) for question, text in texts.items()}
    if not problems or any(problem is None for problem in problems.values()):
        return None
    labels = [
        strategy_of(problems[question], response)
        for question, response in zip(first["question_id"], first["response"], strict=True)
    ]
    # strategy_entropy groups by (benchmark, question_id): the variant stands in for the
    # benchmark, so each (variant, question) group of G responses gets its own entropy.
    labelled = first.assign(strategy=labels, benchmark=first["variant"].astype(str))
    table = strategy_entropy(labelled[["benchmark", "question_id", "strategy"]])
    if table is None or table.empty:
        return pd.Series(np.nan, index=sorted(problems), dtype=float)
    table = table.rename(columns={"benchmark": "variant"}).astype({"variant": int})
    return _neighbours_minus_q0(table, "entropy_bits").reindex(sorted(problems))


def _as_runs(series: Sequence[pd.Series]) -> SeedRuns:
    """Per-policy series over questions as one-k :class:`SeedRuns` (NaN where unmeasured)."""
    questions = sorted(set().union(*(s.index for s in series)))
    values = np.stack([s.reindex(questions).to_numpy(dtype=float) for s in series])
    index = pd.MultiIndex.from_arrays([[QUESTIONS] * len(questions), questions])
    return SeedRuns(values[:, :, None], index, (0,))


def load_draw_inputs(config: Any, root: Path) -> DrawInputs:
    """One built checkout's :class:`DrawInputs` (``config``: its params): every method's
    evaluations over its seeds, the base's, the data-scaling runs', the diagnostics of its
    TA-GRPO policies at their last checkpoint and the optimiser updates. A missing output of a
    run the params train is an error naming it."""
    from tagrpo.plumbing.layout import BASE_POLICY, diagnostics_outputs, policy_name
    from tagrpo.report.claims import load_policy_runs, load_seed_runs
    from tagrpo.report.training import load_training_summaries, updates_by_method

    ks = config.evaluate.ks
    runs = config.runs
    loaded = load_seed_runs(root, {m: runs.seeds_of(m) for m in runs.all_methods()}, ks)
    base = load_policy_runs(root, [BASE_POLICY], ks)
    scaling = runs.data_scaling
    scaled = {
        (method, float(multiple)): load_policy_runs(
            root, [policy_name(method, seed, multiple) for seed in scaling.seeds], ks
        )
        for method in scaling.methods
        for multiple in scaling.multiples
    }
    settings = config.diagnostics
    policies = [p for p in settings.policies if p.rpartition("-s")[0] == TA]
    paths = diagnostics_outputs()
    samples_path, distances_path = root / paths["samples"], root / paths["distances"]
    diagnostics: dict[str, SeedRuns] = {}
    if policies and samples_path.exists():
        columns = ["question_id", "variant", "sample_index", "prompt", "response", "reward",
                   "policy", "checkpoint"]  # fmt: skip
        samples = pd.read_parquet(samples_path, columns=columns)
        distances = pd.read_csv(distances_path) if distances_path.exists() else None
        last = max(settings.checkpoints, key=lambda name: int(name.removeprefix("checkpoint-")))
        diagnostics = diagnostic_measures(
            samples,
            distances,
            policies,
            f"{int(last.removeprefix('checkpoint-'))}%",  # the stage's checkpoint label
            settings.group_size,
            settings.n_neighbours,
        )
    updates = updates_by_method(load_training_summaries(root, runs.policies()))
    return DrawInputs(loaded, base, scaled, diagnostics, updates)


__all__ = ["diagnostic_measures", "load_draw_inputs", "strategy_entropy_difference"]
