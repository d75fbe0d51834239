"""The report's validity section: the criteria the base model alone decides, the strategy
(solution path) tables, and the rows that need trained policies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.config.params import Params
from tagrpo.plumbing.layout import BASE_POLICY, base_model_outputs, data_outputs, policy_name
from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.chance import multiple_choice_options
from tagrpo.report.inputs import (
    in_distribution_benchmarks,
    primary_benchmarks,
    run_bands,
    strategy_responses,
    training_histories,
)


def base_criteria(
    config: Params, root: Path, passk: pd.DataFrame, policies: Sequence[str] = ()
) -> tuple[dict[str, Any], pd.DataFrame]:
    """The validity criteria that the base model alone decides (V2, V3, the edges, the harder
    group's band, the identical-reward regime), by name, and the strategy-entropy summary of
    the base and ``policies``. The report's table and ``tagrpo.report.draws`` (the same rows
    over several base draws) both use it."""
    from tagrpo.metrics.testbed import phrasing_dispersion
    from tagrpo.report import validity

    ks = config.evaluate.ks
    bands = run_bands(config, root)
    probe_path = root / base_model_outputs()["probe_samples"]
    probe = pd.read_parquet(probe_path) if probe_path.exists() else None
    dispersion = (
        phrasing_dispersion(probe, config.evaluate.bootstrap_resamples, config.common.seed)
        if probe is not None and not probe.empty
        else None
    )
    path_group = bands.path_group
    if path_group is not None and path_group not in config.evaluate.groups:
        raise ValueError(
            f"{bands.source} reads V3 on the group {path_group!r}, which evaluate.groups lacks"
        )
    strategy, strategies = validity.strategy_criterion(
        strategy_responses(root, [BASE_POLICY, *policies]),
        (
            primary_benchmarks(config)
            if path_group is None
            else (path_group, list(config.evaluate.groups[path_group]))
        ),
        ks[-1],
        config.evaluate.bootstrap_resamples,
        config.common.seed,
        bands,
    )
    base_passk = passk[passk["policy"] == BASE_POLICY]
    benchmarks = sorted(config.benchmark_names())
    edges = validity.edge_criteria(
        base_passk, benchmarks, multiple_choice_options(config), ks[-1], bands
    )
    criteria: dict[str, Any] = {
        "V2": validity.phrasing_criterion(dispersion),
        "V3": strategy,
        **{c.name: c for c in edges},
    }
    harder = validity.harder_criterion(base_passk, config.report.harder_group, ks[-1], bands)
    if harder is not None:
        criteria[harder.name] = harder
    probe_metrics = json.loads((root / base_model_outputs().metrics).read_text())
    criteria["regime"] = validity.regime_criterion(
        probe_metrics.get("probe/original/zero_gradient_rate"),
        int(probe_metrics.get("probe/original/groups", 0)),
        bands,
    )
    return criteria, strategies


def policy_entropy_table(strategies: pd.DataFrame, samples: int, trained_samples: int) -> str:
    """V3's per-policy strategy entropy, labelled with what it is read from (the evaluation's
    ``samples`` responses per question, a trained policy's ``trained_samples``), so it is not
    mistaken for the over-training table's."""
    rows = [
        [
            r.policy,
            f"{r.entropy_bits:.2f}",
            f"{100 * r.questions_with_two_or_more:.0f}%",
            r.strategies,
        ]
        for r in strategies.itertuples()
    ]
    return "\n".join(
        [
            "Strategy entropy per policy (bits, mean over the evaluated questions; each "
            f"question's entropy read from the policy's {samples} evaluation responses to it"
            + (
                ""
                if trained_samples == samples
                else f", a trained policy's {trained_samples}: a plug-in entropy from fewer "
                "responses reads lower"
            )
            + "):",
            "",
            markdown_table(
                ["policy", "entropy (bits)", "questions with >= 2 strategies", "strategies"], rows
            ),
        ]
    )


def strategy_over_training_table(frame: pd.DataFrame, group_size: int, samples: int) -> str:
    """The over-training entropy per method and checkpoint, and a note on why its base value
    differs from the validity section's (other questions, fewer responses per question)."""
    table = (
        frame.groupby(["method", "fraction"], sort=False)["entropy_bits"]
        .agg(["mean", "count"])
        .reset_index()
    )
    rows = [
        [m, f"{f:.2f}", f"{v:.3f}", str(int(c))]
        for m, f, v, c in table[["method", "fraction", "mean", "count"]].itertuples(index=False)
    ]
    base = frame.loc[frame["method"] == "base", "entropy_bits"]
    # The same policy reads lower here: a plug-in entropy from G answers is biased down more
    # than one from n (n > G), and the questions are the training batch's, not the benchmarks'.
    note = (
        f"The base's value here{f' ({base.iloc[0]:.3f})' if len(base) else ''} is not the "
        "testbed-validity section's base entropy: this table reads each training question's "
        f"first G = {group_size} responses (the base-model probe at fraction 0, the rollout "
        "dumps after), that one each evaluated benchmark question's "
        f"{samples} evaluation responses. Different questions, and an entropy read from fewer "
        "responses per question is lower (the plug-in estimate is biased down), so compare "
        "the rows of one table, not values across the two."
    )
    return "\n".join(
        [markdown_table(["method", "fraction", "entropy (bits)", "runs"], rows), "", note]
    )


def validity_section(
    config: Params,
    root: Path,
    runs: Mapping[str, Any],
    base: Any,
    passk: pd.DataFrame,
    table_path: Path | None = None,
) -> tuple[str, dict[str, float]]:
    """The "Testbed validity" table (:mod:`tagrpo.report.validity`) and its PASS/FAIL metrics;
    the same rows as a CSV at ``table_path`` (what ``tagrpo.report.draws`` reads across
    runs)."""
    from tagrpo.report import validity
    from tagrpo.report.claims import negative_controls

    benchmarks = sorted(config.benchmark_names())
    group, members = in_distribution_benchmarks(config)
    grpo_policies = (
        [policy_name("grpo", seed) for seed in config.runs.seeds_of("grpo")]
        if "grpo" in runs
        else []
    )
    histories = training_histories(root, grpo_policies, "original/reward_mean")
    controls = negative_controls(list(runs))
    primary = primary_benchmarks(config)
    base_only, strategies = base_criteria(config, root, passk, [*config.runs.policies()])
    bands = run_bands(config, root)
    resolution, power = validity.resolution_criterion(
        runs.get("ta_grpo"), runs.get("grpo"), primary, config.primary_k(), bands
    )
    criteria = [
        validity.rl_gain(runs.get("grpo"), base, group, members, bands),
        validity.reward_trend(histories),
        base_only["V2"],
        base_only["V3"],
        validity.control_criterion(
            runs.get("grpo"),
            (controls[0], runs[controls[0]]) if controls else None,
            benchmarks,
        ),
        resolution,
        *(c for name, c in base_only.items() if name not in ("V2", "V3")),
    ]
    lines = [
        "## Testbed validity",
        "",
        "Can this run's miniature measure what the project is for? Each criterion (issue 21; "
        f"thresholds: {bands.source}, fixed before any method comparison is "
        "read) is computed from this run's outputs. Intervals are 95%, t-based on crossed "
        "variance components of seeds and problems (see the statistics section); a criterion "
        "that cannot be measured fails. V5 is blind: it states the design's resolution, not "
        "the primary estimate.",
        "",
        validity.validity_table(criteria),
    ]
    if not strategies.empty:
        evaluate = config.evaluate
        lines += ["", policy_entropy_table(strategies, evaluate.n, evaluate.samples(True))]
    if power:
        lines += ["", power]
    passed = sum(c.passed for c in criteria)
    lines += ["", f"**{passed} of {len(criteria)} criteria pass.**"]
    if table_path is not None:
        pd.DataFrame(
            [
                {
                    "criterion": c.name,
                    "requirement": c.requirement,
                    "measured": c.measured,
                    "verdict": "PASS" if c.passed else "FAIL",
                }
                for c in criteria
            ]
        ).to_csv(table_path, index=False)
    metrics = {f"validity/{c.key}": float(c.passed) for c in criteria}
    return "\n".join(lines), metrics


def strategy_section(config: Params, root: Path, figures_dir: Path, figure_link: str) -> str:
    """Strategy entropy over training per method (:mod:`tagrpo.report.strategies`): a figure and
    its table, or why there is none (a world with one solution path, or no probe)."""
    from tagrpo.data.schema import read_questions
    from tagrpo.report.strategies import strategy_figure, strategy_over_training

    heading = ["## Strategy entropy over training", ""]
    probe_path = root / base_model_outputs()["probe_samples"]
    train_path = root / data_outputs()["processed"] / "train.parquet"
    probe = pd.read_parquet(probe_path) if probe_path.exists() else None
    questions = read_questions(str(train_path)) if train_path.exists() else []
    if probe is None or probe.empty or not all("family" in q.meta for q in questions[:1]):
        return "\n".join(
            [*heading, "Not measurable: the solution paths are the mini world's (no probe of "
             "mini-world questions in this profile)."]
        )  # fmt: skip
    frame = strategy_over_training(
        root,
        {
            m: [policy_name(m, s) for s in config.runs.seeds_of(m)]
            for m in config.runs.all_methods()
        },
        config.train.checkpoints,
        config.train.group_size,
        probe,
        {q.id: q.problem for q in questions},
    )
    strategy_figure(frame, figures_dir / "strategy_entropy.png")
    return "\n".join(
        [
            *heading,
            "Per question, the entropy (bits) of the solution paths its first G responses to "
            "q0 took (forward or backward; 1 = both equally, 0 = one only), averaged over the "
            "questions of the base probe (fraction 0) and of the batch dumped at each checkpoint; "
            "each line the mean over the method's seeds, each seed a faint point. A fall is a "
            "narrowing of the policy's solution paths (the paper's diversity collapse).",
            "",
            f"![Strategy entropy over training]({figure_link}/strategy_entropy.png)",
            "",
            strategy_over_training_table(frame, config.train.group_size, config.evaluate.n),
        ]
    )
