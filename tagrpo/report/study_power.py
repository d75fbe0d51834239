"""Part B of world v3 (``python -m tagrpo.report.study --power``): the study's size from the
confirmatory draws' GRPO-only checkouts (base, GRPO with its seeds, the negative control): the
cheapest design (D >= 2 draws, S >= 2 seeds per draw) whose projected 95% half-width of the
primary endpoint is at most ``study.v5_max_half_width``, under the registered assumptions
(:func:`power_table`); D = 5, S = 5 when none reaches it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tagrpo.metrics.compare import SeedRuns
from tagrpo.metrics.draws import (
    draw_difference_parts,
    draw_seed_components,
    projected_draw_half_width,
)
from tagrpo.plumbing.markdown import markdown_table

# Part B's search (world-v3.md, "Study size"): D >= 2 draws and S >= 2 seeds per draw, capped.
MIN_DRAWS, MAX_DRAWS, MIN_SEEDS, MAX_SEEDS = 2, 5, 2, 5


@dataclass(frozen=True)
class PowerInputs:
    """Part B's measured inputs at the primary endpoint: GRPO's seed-level variance and
    between-draw components (:class:`tagrpo.metrics.draws.DrawSeedComponents`) and the
    problem component of GRPO minus the base over the draws (with its degrees of freedom)."""

    group: str
    k: int
    seed: float
    draw: float
    between: float
    draws: int
    seeds: int
    problem: float
    problem_df: float


def power_inputs(
    grpo: Sequence[SeedRuns], base: Sequence[SeedRuns], group: str, members: Sequence[str], k: int
) -> PowerInputs:
    """:class:`PowerInputs` from the confirmatory draws' GRPO runs and bases (>= 2 draws)."""
    components = draw_seed_components(grpo, members, k)
    _, parts = draw_difference_parts(grpo, base, members)
    index = grpo[0].ks.index(int(k))
    return PowerInputs(
        group=group,
        k=int(k),
        seed=components.seed,
        draw=components.draw,
        between=components.between,
        draws=components.draws,
        seeds=components.seeds,
        problem=float(parts.problem[index]),
        problem_df=max(parts.problems - parts.strata, 1.0),
    )


def power_table(inputs: PowerInputs, target: float) -> tuple[pd.DataFrame, tuple[int, int], bool]:
    """The projected 95% half-width of TA-GRPO minus GRPO at the primary endpoint for every
    design (D draws in 2..5, S seeds per draw in 2..5), under the registered assumptions
    (world-v3.md, "Study size"): pairing by draw removes nothing, so a contrast's per-draw
    values have the mean square ``2 x (draw + seed / S)`` (twice GRPO's between-draw variance of
    its mean score, the seeds' part scaled to S; the seed-level variance twice GRPO's); the
    problem component is GRPO minus the base's; each term with its own t quantile, in quadrature
    (:func:`tagrpo.metrics.draws.projected_draw_half_width`, as the analysis computes it).

    The cheapest design is the one with the fewest trainings per method (D x S), of equal cost
    the fewer draws (each draw adds a warm-start, a base evaluation and the diagnostics), whose
    half-width is <= ``target``; (5, 5) when none is (the bool: whether one reached it)."""
    rows = []
    for draws in range(MIN_DRAWS, MAX_DRAWS + 1):
        for seeds in range(MIN_SEEDS, MAX_SEEDS + 1):
            mean_square = 2.0 * (inputs.draw + inputs.seed / seeds)
            width = projected_draw_half_width(inputs.problem, inputs.problem_df, mean_square, draws)
            rows.append(
                {
                    "draws": draws,
                    "seeds_per_draw": seeds,
                    "trainings_per_method": draws * seeds,
                    "draw_mean_square": mean_square,
                    "half_width": width,
                    "reaches": width <= target,
                }
            )
    frame = pd.DataFrame(rows).sort_values(
        ["trainings_per_method", "draws"], kind="stable", ignore_index=True
    )
    reaching = frame[frame["reaches"]]
    if reaching.empty:
        return frame, (MAX_DRAWS, MAX_SEEDS), False
    best = reaching.iloc[0]
    return frame, (int(best["draws"]), int(best["seeds_per_draw"])), True


def power_markdown(checkouts: Mapping[str, Path], command: str) -> tuple[str, tuple[int, int]]:
    """Part B from the confirmatory draws' checkouts (base, GRPO with >= 2 seeds each): the
    measured components, the table of designs and the chosen (D, S)."""
    import yaml

    from tagrpo.config.params import load_config
    from tagrpo.plumbing.layout import BASE_POLICY, policy_name
    from tagrpo.report.claims import load_policy_runs
    from tagrpo.report.inputs import preregistration_line, run_bands

    if len(checkouts) < MIN_DRAWS:
        raise ValueError(
            f"Part B needs the confirmatory draws (>= {MIN_DRAWS}), got {len(checkouts)}"
        )
    configs = {label: load_config(root / "params.yaml") for label, root in checkouts.items()}
    first_label = next(iter(configs))
    first, root0 = configs[first_label], checkouts[first_label]
    seeds = {label: c.base_model.warmstart.seed for label, c in configs.items()}
    if len(set(seeds.values())) != len(seeds):
        raise ValueError(f"two checkouts are the same base draw: {seeds}")
    for label, config in configs.items():
        if config.data.synthetic != first.data.synthetic or config.train != first.train:
            raise ValueError(f"draw {label}: another world or RL budget than the first draw's")
        if config.runs.seeds_of("grpo") != first.runs.seeds_of("grpo"):
            raise ValueError(f"draw {label}: other GRPO seeds than the first draw's")
    if first.report.preregistration is None:
        raise ValueError("report.preregistration names no pre-registration")
    registration = yaml.safe_load((root0 / first.report.preregistration).read_text())
    endpoint = registration["study"]["primary_endpoint"]
    if endpoint.get("group") is not None and endpoint.get("k") is not None:
        group, k = str(endpoint["group"]), int(endpoint["k"])
        source = "the pre-registration's primary endpoint"
    else:
        group, k = first.report.primary_group, first.primary_k()
        source = (
            "**not registered yet**: the run's report.primary_group and primary k (record the "
            "freeze's primary endpoint before Part B)"
        )
    if group is None:
        raise ValueError("no primary group: register the primary endpoint (group, k)")
    members = list(first.evaluate.groups[group])
    ks = first.evaluate.ks
    grpo_policies = [policy_name("grpo", s) for s in first.runs.seeds_of("grpo")]
    grpo = [load_policy_runs(root, grpo_policies, ks) for root in checkouts.values()]
    base = [load_policy_runs(root, [BASE_POLICY], ks) for root in checkouts.values()]
    inputs = power_inputs(grpo, base, group, members, k)
    target = run_bands(first, root0).max_half_width
    frame, (draws, per_draw), reached = power_table(inputs, target)
    chosen_line = (
        f"**Chosen: D = {draws} draws, S = {per_draw} seeds per draw** (the cheapest design "
        f"whose projected half-width is <= {100 * target:.0f} points: {draws * per_draw} "
        "trainings per method)."
        if reached
        else f"**No design with D <= {MAX_DRAWS} and S <= {MAX_SEEDS} reaches "
        f"{100 * target:.0f} points: the study runs D = {MAX_DRAWS}, S = {MAX_SEEDS} and reports "
        "V5 as it comes out.**"
    )
    grid = frame.pivot(index="draws", columns="seeds_per_draw", values="half_width")
    rows = [
        [f"D = {d}", *(f"{100 * grid.loc[d, s]:.2f}" for s in grid.columns)] for d in grid.index
    ]
    text = "\n".join(
        [
            "# World v3, Part B: the study's size",
            "",
            f"Made by `{command}` (tagrpo.report.study --power) from the confirmatory draws "
            + ", ".join(f"{label} (SFT seed {seeds[label]})" for label in configs)
            + f": base, GRPO with {inputs.seeds} seeds per draw.",
            "",
            preregistration_line(first, root0),
            "",
            f"Primary endpoint ({source}): pass@{k} on `{group}` ({len(members)} benchmark(s), "
            f"{int(inputs.problem_df + len(members))} problems).",
            "",
            "Measured (points^2): GRPO's seed-level variance of one seed's score "
            f"{1e4 * inputs.seed:.3f} (pooled within draws, {inputs.draws * (inputs.seeds - 1)}"
            f" df); the between-draw variance of its mean score {1e4 * inputs.between:.3f}, "
            f"of which the draws' own {1e4 * inputs.draw:.3f} (less the seeds' part, "
            f"{1e4 * inputs.seed:.3f} / {inputs.seeds}; truncated at 0); the problem component "
            f"of GRPO minus the base {1e4 * inputs.problem:.3f} ({inputs.problem_df:g} df).",
            "",
            "Projection (world-v3.md, Study size): a contrast's per-draw values have the mean "
            "square 2 x (draws' own + seed-level / S) (pairing by draw assumed to remove "
            "nothing; both methods as variable as GRPO), the problem component that of GRPO "
            "minus the base; the half-width adds the problem term (problems - benchmarks df) "
            "and the draw term (mean square / D, D - 1 df) in quadrature, each with its own t "
            "quantile, as the study's analysis does.",
            "",
            "Projected 95% half-width (points) by draws D and seeds per draw S:",
            "",
            markdown_table(["", *(f"S = {s}" for s in grid.columns)], rows),
            "",
            chosen_line,
            "",
            "Part B then reads, in `preregistration/world-v3.yaml`: `study.base_draws` (the "
            f"{draws} SFT seeds of the study's draws) and `study.seeds_per_draw: {per_draw}`.",
        ]
    )
    return text, (draws, per_draw)
