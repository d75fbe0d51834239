"""``tagrpo compare``: the pass@k table of the latest evaluation of each method, from MLflow.

Reads the tracking store, not the workspace: it compares whatever was evaluated (any checkout,
``dvc exp`` copies, Prefect reruns), each policy's latest FINISHED ``evaluate`` run of one
profile. Data-scaling policies are columns of their own (``grpo_data1.5x``). A method
evaluated with one seed shows its bootstrap 95% interval over problems (from
the run's ``pass_at_k_ci`` metrics; benchmark groups have none); with several seeds, the mean
over seeds and a t-interval over the seed means.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

PASS_PREFIX = "pass_at_k/"
CI_PREFIX = "pass_at_k_ci/"


@dataclass(frozen=True)
class EvaluationRun:
    """One policy's latest evaluate run."""

    policy: str
    method: str
    seed: str
    run_id: str
    start_time: int  # ms since the epoch
    profile: str
    passk: dict[tuple[str, int], float]
    intervals: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Cell:
    value: float
    low: float | None
    high: float | None
    seeds: int


def parse_metrics(metrics: dict[str, float]) -> tuple[dict, dict]:
    """``pass_at_k/<name>/<k>`` values and ``pass_at_k_ci/<name>/<k>/{low,high}`` bounds."""
    passk: dict[tuple[str, int], float] = {}
    bounds: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for key, value in metrics.items():
        if key.startswith(PASS_PREFIX):
            name, _, k = key[len(PASS_PREFIX) :].rpartition("/")
            if k.isdigit():
                passk[(name, int(k))] = value
        elif key.startswith(CI_PREFIX):
            rest, _, bound = key[len(CI_PREFIX) :].rpartition("/")
            name, _, k = rest.rpartition("/")
            if k.isdigit() and bound in ("low", "high"):
                bounds[(name, int(k))][bound] = value
    intervals = {key: (b["low"], b["high"]) for key, b in bounds.items() if len(b) == 2}
    return passk, intervals


def _search_all(client: Any, experiment_ids: list[str], filter_string: str) -> list[Any]:
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs(
            experiment_ids,
            filter_string=filter_string,
            order_by=["attributes.start_time DESC"],
            max_results=1000,
            page_token=token,
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def column_name(method: str, data_multiple: str) -> str:
    """A data-scaling policy is its own column (``grpo_data1.5x``, as its policy is named),
    never averaged with the method's 1x seeds."""
    if not data_multiple or float(data_multiple) == 1.0:
        return method
    return f"{method}_data{float(data_multiple)}x"


def latest_evaluations(
    client: Any, experiment: str, profile: str | None = None
) -> tuple[str, list[EvaluationRun]]:
    """The profile compared (default: that of the most recent evaluation) and, per policy,
    its latest FINISHED evaluate run of that profile."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise LookupError(f"no MLflow experiment {experiment!r} in this tracking store")
    query = "tags.stage = 'evaluate' and attributes.status = 'FINISHED'"
    runs = _search_all(client, [found.experiment_id], query)
    if not runs:
        raise LookupError(f"experiment {experiment!r} has no finished evaluate run")
    profile = profile or runs[0].data.tags.get("profile", "")
    latest: dict[str, EvaluationRun] = {}
    for run in runs:  # newest first: the first run seen of a policy is its latest
        tags = run.data.tags
        policy = tags.get("policy", "")
        if tags.get("profile") != profile or not policy or policy in latest:
            continue
        passk, intervals = parse_metrics(run.data.metrics)
        if not passk:
            continue
        latest[policy] = EvaluationRun(
            policy=policy,
            method=column_name(tags.get("method", policy), tags.get("data_multiple", "")),
            seed=tags.get("seed", ""),
            run_id=run.info.run_id,
            start_time=run.info.start_time,
            profile=profile,
            passk=passk,
            intervals=intervals,
        )
    if not latest:
        raise LookupError(f"no finished evaluate run with pass@k metrics for profile {profile!r}")
    return profile, list(latest.values())


def _t_quantile(df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def combine(runs: Sequence[EvaluationRun], key: tuple[str, int]) -> Cell | None:
    """One method's cell: a single seed's value and interval, or the mean over seeds."""
    values = [run.passk[key] for run in runs if key in run.passk]
    if not values:
        return None
    if len(values) == 1:
        run = next(run for run in runs if key in run.passk)
        low, high = run.intervals.get(key, (None, None))
        return Cell(values[0], low, high, 1)
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = _t_quantile(len(values) - 1) * sd / math.sqrt(len(values))
    return Cell(mean, mean - half, mean + half, len(values))


def method_order(methods: Iterable[str]) -> list[str]:
    """base first, then the registry's order (a method's data-scaling columns after it, by
    multiple), then anything else alphabetically."""
    from tagrpo.algorithms import METHODS

    registry = list(METHODS)

    def key(column: str) -> tuple[bool, int, float, str]:
        method, _, scale = column.partition("_data")
        try:
            multiple = float(scale.removesuffix("x")) if scale else 1.0
        except ValueError:
            method, multiple = column, 1.0
        index = registry.index(method) if method in registry else len(registry)
        return (column != "base", index, multiple, column)

    return sorted(set(methods), key=key)


@dataclass(frozen=True)
class Comparison:
    profile: str
    methods: list[str]
    rows: list[tuple[str, int]]
    cells: dict[tuple[str, int, str], Cell]
    runs: dict[str, list[EvaluationRun]]


def compare(
    runs: Sequence[EvaluationRun],
    profile: str,
    methods: Sequence[str] | None = None,
    ks: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
) -> Comparison:
    by_method: dict[str, list[EvaluationRun]] = defaultdict(list)
    for run in runs:
        if not methods or run.method in methods:
            by_method[run.method].append(run)
    missing = sorted(set(methods or ()) - set(by_method))
    if missing:
        raise LookupError(f"no finished evaluation of {missing} for profile {profile!r}")
    keys = {key for run in runs for key in run.passk}
    keys = {(n, k) for n, k in keys if (not ks or k in ks) and (not names or n in names)}
    # Benchmarks (they have intervals) before groups, then by name and k.
    has_ci = {key for run in runs for key in run.intervals}
    rows = sorted(keys, key=lambda key: (key not in has_ci, key[0], key[1]))
    order = method_order(by_method)
    cells = {
        (name, k, method): cell
        for method in order
        for name, k in rows
        if (cell := combine(by_method[method], (name, k))) is not None
    }
    return Comparison(profile, order, rows, cells, dict(by_method))


def _percent(cell: Cell | None, with_interval: bool = True) -> str:
    if cell is None:
        return "-"
    text = f"{100 * cell.value:.1f}"
    if with_interval and cell.low is not None and cell.high is not None:
        text += f" [{100 * cell.low:.1f}, {100 * cell.high:.1f}]"
    return text


def render(comparison: Comparison, style: str = "text") -> str:
    """The table as aligned text, markdown or CSV (percent; CSV in fractions)."""
    header = ["benchmark", "k", *comparison.methods]
    if style == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["benchmark", "k", "method", "pass_at_k", "low", "high", "seeds"])
        for name, k in comparison.rows:
            for method in comparison.methods:
                cell = comparison.cells.get((name, k, method))
                if cell is not None:
                    writer.writerow([name, k, method, cell.value, cell.low, cell.high, cell.seeds])
        return out.getvalue()
    body = [
        [name, str(k), *(_percent(comparison.cells.get((name, k, m))) for m in comparison.methods)]
        for name, k in comparison.rows
    ]
    if style == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        table = "\n".join(lines)
    else:
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
        lines = [_aligned(row, widths) for row in [header, *body]]
        lines.insert(1, "  ".join("-" * w for w in widths))
        table = "\n".join(line.rstrip() for line in lines)
    return "\n".join([_title(comparison), "", table, "", *_provenance(comparison)])


def _aligned(row: list[str], widths: list[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))


def _title(comparison: Comparison) -> str:
    seeds = {len(runs) for runs in comparison.runs.values()}
    interval = (
        "bootstrap 95% CI over problems"
        if seeds == {1}
        else "one seed: bootstrap 95% CI over problems; several: mean and t 95% CI over seeds"
    )
    return f"pass@k (%) [{interval}], profile {comparison.profile!r}"


def _provenance(comparison: Comparison) -> list[str]:
    lines = []
    for method in comparison.methods:
        runs = sorted(comparison.runs[method], key=lambda run: run.seed)
        described = ", ".join(
            f"seed {run.seed} run {run.run_id[:8]} "
            f"({datetime.fromtimestamp(run.start_time / 1000, UTC):%Y-%m-%d %H:%M} UTC)"
            for run in runs
        )
        lines.append(f"{method}: {described}")
    return lines
