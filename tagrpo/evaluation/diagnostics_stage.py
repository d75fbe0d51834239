"""The ``diagnostics`` stage's work: probe the base policy and each checkpoint of
``diagnostics.policies``, then tabulate gradient vanishing and diversity (Figures 3 and 4); the
stage renders the tables with :mod:`tagrpo.report.vanishing_diversity`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.factory import make_stored_backend
from tagrpo.config.params import Params
from tagrpo.equivalence.similarity import SimilarityScorer
from tagrpo.evaluation.vanishing_diversity import (
    diversity_comparison,
    question_groups,
    rate_comparisons,
    sample_training_questions,
    variant_distances,
    zero_gradient_rows,
)
from tagrpo.grading.grade_fn import grade_fn_for
from tagrpo.splits.training_set import load_training_questions

if TYPE_CHECKING:
    from tagrpo.backends.sample_store import SampleStore

BASE_LABEL = "base"


def checkpoint_label(name: str) -> str:
    """``checkpoint-025`` -> ``25%`` (the paper's axis labels); ``base`` stays."""
    if name == BASE_LABEL:
        return name
    return f"{int(name.removeprefix('checkpoint-'))}%"


def checkpoints_to_probe(config: Params, root: Path) -> list[tuple[str, str, Path]]:
    """``(policy, checkpoint, model folder)``: the base policy once, then each policy's."""
    settings = config.diagnostics
    found: list[tuple[str, str, Path]] = []
    if settings.include_base:
        found.append((BASE_LABEL, BASE_LABEL, root / settings.base_model))
    for policy in settings.policies:
        for name in settings.checkpoints:
            folder = root / "models" / policy / "checkpoints" / name
            if not folder.is_dir():
                raise FileNotFoundError(
                    f"{folder} is missing: train {policy} with train.save_checkpoints and "
                    f"train.checkpoints covering {name}"
                )
            found.append((policy, name, folder))
    return found


def _with_base_per_policy(frame: pd.DataFrame, policies: list[str]) -> pd.DataFrame:
    """The base point belongs to every policy's curve (the paper's "Base")."""
    base = frame[frame["policy"] == BASE_LABEL]
    rest = frame[frame["policy"] != BASE_LABEL]
    order = {p: i for i, p in enumerate(policies)}
    merged = pd.concat([*(base.assign(policy=p) for p in policies), rest], ignore_index=True)
    return merged.sort_values("policy", key=lambda s: s.map(order), kind="stable")


@dataclass(frozen=True)
class Diagnostics:
    """What the stage measured: its metrics and the tables its figure and section show."""

    metrics: dict[str, Any]
    zero_gradient: pd.DataFrame
    distances: pd.DataFrame
    comparisons: pd.DataFrame
    questions: int


def run_diagnostics(
    config: Params, root: Path, out: dict[str, Path], store: SampleStore | None = None
) -> Diagnostics:
    """Probe every checkpoint; write ``out``'s tables (samples, zero_gradient, distances,
    comparisons); return them with the metrics. With a ``store``, each checkpoint's samples
    are saved per phrasing as they are drawn and reused by a rerun (see
    :mod:`tagrpo.backends.sample_store`)."""
    import torch  # heavy: loaded only when the stage runs

    settings = config.diagnostics
    group, neighbours = settings.group_size, settings.n_neighbours
    torch.set_num_threads(config.common.torch_threads)
    questions = load_training_questions(
        root / settings.input,
        n_neighbours=neighbours,
        neighbours=settings.neighbours,
        limit=settings.questions,
    )
    sampling = SamplingParams(
        n=group,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens,
        seed=config.common.seed,
    )
    probes = checkpoints_to_probe(config, root)
    metrics: dict[str, Any] = {"questions": float(len(questions))}
    started = time.perf_counter()
    samples, zero_rows, distances, comparisons = [], [], [], []
    grading = config.common.grading
    with grade_fn_for(grading, grading.grader) as grade:  # graders start while MiniLM loads
        scorer = SimilarityScorer(
            settings.embedding.model, batch_size=settings.embedding.batch_size
        )
        for policy, name, folder in probes:
            label = checkpoint_label(name)
            probe_started = time.perf_counter()
            backend = make_stored_backend(
                settings.backend, config, folder, store, f"diagnostics/{policy}/{name}"
            )
            frame = sample_training_questions(
                backend, questions, group, neighbours, sampling, grade
            )
            del backend
            samples.append(frame.assign(policy=policy, checkpoint=label))
            groups = question_groups(frame, group, neighbours)
            for row in zero_gradient_rows(groups, group, neighbours):
                zero_rows.append({"policy": policy, "label": label, **row})
                metrics[f"{policy}/{name}/{row['grouping']}/zero_gradient_rate"] = row[
                    "zero_gradient_rate"
                ]
            spread = variant_distances(frame, scorer.embed, group)
            distances.append(spread.assign(policy=policy, label=label))
            for comparison in [*rate_comparisons(groups), diversity_comparison(spread)]:
                row = comparison.as_row()
                comparisons.append({"policy": policy, "label": label, **row})
                key = f"{policy}/{name}/{row['measure']}/{row['first']}-{row['second']}"
                metrics[key] = row["difference"]
            print(
                f"[diagnostics] {policy} {label}: {len(frame)} responses, "
                f"{time.perf_counter() - probe_started:.1f} s"
            )
    zero_gradient = _with_base_per_policy(pd.DataFrame(zero_rows), settings.policies)
    spread_all = _with_base_per_policy(pd.concat(distances, ignore_index=True), settings.policies)
    compared = _with_base_per_policy(pd.DataFrame(comparisons), settings.policies)
    pd.concat(samples, ignore_index=True).to_parquet(out["samples"], index=False)
    zero_gradient.to_csv(out["zero_gradient"], index=False)
    spread_all.to_csv(out["distances"], index=False)
    compared.to_csv(out["comparisons"], index=False)
    metrics["seconds"] = time.perf_counter() - started
    metrics["checkpoints_probed"] = float(len(probes))
    if store is not None:
        metrics.update(store.counts())
    return Diagnostics(metrics, zero_gradient, spread_all, compared, len(questions))
