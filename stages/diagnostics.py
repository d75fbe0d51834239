"""DVC stage ``diagnostics``: gradient vanishing and response diversity across training.

The paper's Figures 3 and 4. The base policy and the 25/50/75/100% checkpoints of each policy in
``diagnostics.policies`` answer the first ``diagnostics.questions`` training questions: G
responses to the original and G to each of the N accepted neighbours. Per checkpoint we report
how often the G original responses, the N x G neighbour responses and the joint group share one
reward (all-correct / all-wrong), and per question the mean pairwise embedding distance of the
original responses and of the neighbour responses (:mod:`tagrpo.evaluation.diagnostics`).

Outputs: ``diagnostics/samples.parquet`` (every graded response), ``plots/diagnostics/*.csv``,
``reports/sections/diagnostics.md`` with ``reports/diagnostics.png``, ``metrics/diagnostics.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from tagrpo.env import apply_offline_defaults

apply_offline_defaults()

import pandas as pd  # noqa: E402

from tagrpo.params import stage_params  # noqa: E402
from tagrpo.paths import project_root  # noqa: E402
from tagrpo.tracking import log_metrics, stage_run  # noqa: E402

BASE_LABEL = "base"


def checkpoint_label(name: str) -> str:
    """``checkpoint-025`` -> ``25%`` (the paper's axis labels); ``base`` stays."""
    if name == BASE_LABEL:
        return name
    return f"{int(name.removeprefix('checkpoint-'))}%"


def checkpoints_to_probe(params: dict[str, Any], root: Path) -> list[tuple[str, str, Path]]:
    """``(policy, checkpoint, model folder)``: the base policy once, then each policy's."""
    found: list[tuple[str, str, Path]] = []
    if params.get("include_base", True):
        found.append((BASE_LABEL, BASE_LABEL, root / params.get("base_model", "models/base")))
    for policy in params["policies"]:
        for name in params["checkpoints"]:
            folder = root / "models" / policy / "checkpoints" / name
            if not folder.is_dir():
                raise FileNotFoundError(
                    f"{folder} is missing: train {policy} with train.save_checkpoints and "
                    f"train.checkpoints covering {name}"
                )
            found.append((policy, name, folder))
    return found


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="diagnostics/samples.parquet")
    parser.add_argument("--plots", default="plots/diagnostics")
    parser.add_argument("--section", default="reports/sections/diagnostics.md")
    parser.add_argument("--figure", default="reports/diagnostics.png")
    parser.add_argument("--metrics", default="metrics/diagnostics.json")
    args = parser.parse_args(argv)

    import torch

    from tagrpo.backends.base import SamplingParams
    from tagrpo.backends.factory import make_backend
    from tagrpo.equivalence.similarity import SimilarityScorer
    from tagrpo.evaluation.diagnostics import (
        distance_rows,
        distance_summary,
        phrased_training_questions,
        zero_gradient_rows,
    )
    from tagrpo.evaluation.grader import make_grade_fn
    from tagrpo.evaluation.phrasing import sample_phrasings
    from tagrpo.report.diagnostics import diagnostics_figure, diagnostics_section
    from tagrpo.training.data import load_training_questions

    params = stage_params("diagnostics")
    common = params["common"]
    root = project_root()
    torch.set_num_threads(int(common.get("torch_threads", 2)))
    questions = load_training_questions(
        root / params["input"],
        n_neighbours=int(params["n_neighbours"]),
        neighbours=params.get("neighbours", "auto"),
        limit=params.get("questions"),
    )
    phrased = phrased_training_questions(questions)
    sampling = SamplingParams(
        n=int(params["group_size"]),
        temperature=float(params["temperature"]),
        top_p=float(params["top_p"]),
        max_new_tokens=int(params["max_new_tokens"]),
        seed=int(common.get("seed", 0)),
    )
    embedding = params["embedding"]
    probes = checkpoints_to_probe(params, root)
    metrics: dict[str, float] = {"questions": float(len(phrased))}
    with stage_run("diagnostics", params) as run:
        started = time.perf_counter()
        scorer = SimilarityScorer(embedding["model"], batch_size=int(embedding["batch_size"]))
        grading = common.get("grading", {})
        samples, zero_rows, distances = [], [], []
        with make_grade_fn(
            workers=int(grading.get("workers", 2)),
            item_timeout_s=float(grading.get("item_timeout_s", 5.0)),
        ) as grade:
            for policy, name, folder in probes:
                label = checkpoint_label(name)
                probe_started = time.perf_counter()
                backend = make_backend(params, folder)
                frame = sample_phrasings(backend, phrased, sampling, grade)
                del backend
                frame.insert(0, "checkpoint", label)
                frame.insert(0, "policy", policy)
                samples.append(frame)
                for row in zero_gradient_rows(frame):
                    zero_rows.append({"policy": policy, "label": label, **row})
                    for key in ("zero_gradient_rate", "all_correct_rate", "all_wrong_rate"):
                        metrics[f"{policy}/{name}/{row['grouping']}/{key}"] = row[key]
                spread = distance_rows(frame, scorer.embed)
                distances.append(spread.assign(policy=policy, label=label))
                for key, value in distance_summary(spread).items():
                    metrics[f"{policy}/{name}/{key}"] = value
                print(
                    f"[diagnostics] {policy} {label}: {len(frame)} responses, "
                    f"{time.perf_counter() - probe_started:.1f} s"
                )
        zero_gradient = pd.DataFrame(zero_rows)
        spread_all = pd.concat(distances, ignore_index=True)[
            ["policy", "label", "question_id", "response_set", "responses", "mean_distance"]
        ]
        # The base point belongs to every policy's curve (the paper's "Base").
        base_zero = zero_gradient[zero_gradient["policy"] == BASE_LABEL]
        base_spread = spread_all[spread_all["policy"] == BASE_LABEL]
        per_policy_zero = [base_zero.assign(policy=p) for p in params["policies"]]
        per_policy_spread = [base_spread.assign(policy=p) for p in params["policies"]]
        zero_gradient = pd.concat(
            [*per_policy_zero, zero_gradient[zero_gradient["policy"] != BASE_LABEL]],
            ignore_index=True,
        )
        spread_all = pd.concat(
            [*per_policy_spread, spread_all[spread_all["policy"] != BASE_LABEL]],
            ignore_index=True,
        )
        order = {p: i for i, p in enumerate(params["policies"])}
        zero_gradient = zero_gradient.sort_values(
            "policy", key=lambda s: s.map(order), kind="stable"
        )

        samples_path = root / args.samples
        samples_path.parent.mkdir(parents=True, exist_ok=True)
        pd.concat(samples, ignore_index=True).to_parquet(samples_path, index=False)
        plots = root / args.plots
        plots.mkdir(parents=True, exist_ok=True)
        zero_gradient.to_csv(plots / "zero_gradient.csv", index=False)
        spread_all.to_csv(plots / "distances.csv", index=False)
        figure = root / args.figure
        diagnostics_figure(zero_gradient, spread_all, figure)
        section = root / args.section
        section.parent.mkdir(parents=True, exist_ok=True)
        report_dir = section.parent.parent  # reports/: the section is included in report.md
        section.write_text(
            diagnostics_section(
                zero_gradient,
                spread_all,
                figure.relative_to(report_dir).as_posix(),
                questions=len(phrased),
                group_size=sampling.n,
                n_neighbours=int(params["n_neighbours"]),
                embedding_model=str(embedding["model"]),
            )
            + "\n"
        )
        metrics["seconds"] = time.perf_counter() - started
        log_metrics(metrics)
        if run is not None:
            import mlflow

            mlflow.log_artifact(str(figure))
            mlflow.log_artifact(str(section))
        metrics_path = root / args.metrics
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        finite = {key: value for key, value in metrics.items() if value == value}  # no NaN
        metrics_path.write_text(json.dumps(finite, indent=2, sort_keys=True) + "\n")
    print(f"[diagnostics] {len(probes)} checkpoints in {metrics['seconds']:.1f} s")
    return metrics


if __name__ == "__main__":
    main()
