"""``tagrpo compare``: the pass@k table of the latest evaluation of each method, from MLflow.

Reads the tracking store, not the workspace: it compares whatever was evaluated (``dvc exp``
copies, Prefect reruns), each policy's latest FINISHED ``evaluate`` run of one profile (by
default the profile of the checkout's params.yaml). Runs are separated by checkout (their
``tagrpo.checkout`` tag: one table per checkout, by default only this checkout's), and a table
whose runs come from several commits says so and names each run's commit. Data-scaling policies
are columns of their own (``grpo_data1.5x``). A method evaluated with one seed shows its
bootstrap 95% interval over problems (from the run's ``pass_at_k_ci`` metrics; benchmark groups
have none), which is conditional on that seed (marked ``*``); with several seeds, the mean over
seeds and a t-interval over the seed means.
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

from tagrpo.algorithms.methods import METHODS

PASS_PREFIX = "pass_at_k/"
CI_PREFIX = "pass_at_k_ci/"
CHECKOUT_TAG = "tagrpo.checkout"
UNRECORDED = "(checkout not recorded)"
ALL_CHECKOUTS = "all"


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
    checkout: str = UNRECORDED
    commit: str = "unknown"
    dirty: str = "unknown"


@dataclass(frozen=True)
class Cell:
    value: float
    low: float | None
    high: float | None
    seeds: int


def parse_metrics(metrics: dict[str, float]) -> tuple[dict, dict]:
    """pass@k values and CI bounds from metric keys of the earlier layout, one key per k:
    ``pass_at_k/<name>/<k>`` and ``pass_at_k_ci/<name>/<k>/{low,high}``."""
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


def curve_keys(metrics: dict[str, float]) -> list[str]:
    """The run's pass@k curves (``pass_at_k/<name>``, ``pass_at_k_ci/<name>/{low,high}``: one
    key per name, step = k); keys of the earlier layout end in a number and are not curves."""

    def is_curve(key: str) -> bool:
        head, _, last = key.rpartition("/")
        if key.startswith(PASS_PREFIX):
            return not last.isdigit()
        if key.startswith(CI_PREFIX):
            return last in ("low", "high") and not head.rpartition("/")[2].isdigit()
        return False

    return [key for key in metrics if is_curve(key)]


def read_passk(client: Any, run: Any) -> tuple[dict, dict]:
    """A run's pass@k values and CI bounds by (name, k): the curves' histories (step = k; the
    latest value at a step wins), plus any keys of the earlier layout."""
    passk, intervals = parse_metrics(run.data.metrics)
    bounds: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for key in curve_keys(run.data.metrics):
        history = sorted(
            client.get_metric_history(run.info.run_id, key), key=lambda m: (m.step, m.timestamp)
        )
        for metric in history:
            if key.startswith(PASS_PREFIX):
                passk[(key[len(PASS_PREFIX) :], metric.step)] = metric.value
            else:
                name, _, bound = key[len(CI_PREFIX) :].rpartition("/")
                bounds[(name, metric.step)][bound] = metric.value
    intervals |= {key: (b["low"], b["high"]) for key, b in bounds.items() if len(b) == 2}
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


def experiments_of(client: Any, experiment: str) -> list[Any]:
    """``experiment`` and the experiments other checkouts log to (``<experiment> @ ...``)."""
    found = []
    token = None
    while True:
        page = client.search_experiments(max_results=1000, page_token=token)
        found += [e for e in page if e.name == experiment or e.name.startswith(f"{experiment} @ ")]
        token = page.token
        if not token:
            return sorted(found, key=lambda e: e.name)


def latest_evaluations(
    client: Any, experiment: str, profile: str, checkout: str | None = None
) -> list[EvaluationRun]:
    """Per checkout and policy, its latest FINISHED evaluate run of ``profile``; only the runs
    of ``checkout`` (a ``tagrpo.checkout`` value) unless it is None."""
    experiments = experiments_of(client, experiment)
    if not experiments:
        raise LookupError(f"no MLflow experiment {experiment!r} in this tracking store")
    query = (
        f"tags.stage = 'evaluate' and attributes.status = 'FINISHED' and tags.profile = '{profile}'"
    )
    runs = _search_all(client, [e.experiment_id for e in experiments], query)
    everywhere = len(runs)
    if checkout is not None:
        runs = [run for run in runs if run.data.tags.get(CHECKOUT_TAG, UNRECORDED) == checkout]
    if not runs:
        where = f" of the checkout {checkout}" if checkout is not None else ""
        others = (
            f" ({everywhere} in other checkouts: --checkout all shows them)" if everywhere else ""
        )
        raise LookupError(f"no finished evaluate run of profile {profile!r}{where}{others}")
    runs.sort(key=lambda run: run.info.start_time, reverse=True)
    latest: dict[tuple[str, str], EvaluationRun] = {}
    for run in runs:  # newest first: the first run seen of a policy is its latest
        tags = run.data.tags
        policy = tags.get("policy", "")
        where = tags.get(CHECKOUT_TAG, UNRECORDED)
        if not policy or (where, policy) in latest:
            continue
        passk, intervals = read_passk(client, run)
        if not passk:
            continue
        latest[(where, policy)] = EvaluationRun(
            policy=policy,
            method=column_name(tags.get("method", policy), tags.get("data_multiple", "")),
            seed=tags.get("seed", ""),
            run_id=run.info.run_id,
            start_time=run.info.start_time,
            profile=profile,
            passk=passk,
            intervals=intervals,
            checkout=where,
            commit=tags.get("git_commit", "unknown"),
            dirty=tags.get("git_dirty", "unknown"),
        )
    if not latest:
        raise LookupError(f"no finished evaluate run with pass@k metrics for profile {profile!r}")
    return list(latest.values())


def by_checkout(runs: Iterable[EvaluationRun]) -> dict[str, list[EvaluationRun]]:
    """The runs of each checkout: never compared in one table."""
    groups: dict[str, list[EvaluationRun]] = defaultdict(list)
    for run in runs:
        groups[run.checkout].append(run)
    return dict(sorted(groups.items()))


def _t_quantile(df: int) -> float:
    from scipy.stats import t  # heavy: only a method with several seeds needs it

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
    checkout: str = UNRECORDED

    @property
    def commits(self) -> list[str]:
        """The commits the compared runs were made at (more than one: a mixed table)."""
        return sorted({run.commit for runs in self.runs.values() for run in runs})


def compare(
    runs: Sequence[EvaluationRun],
    profile: str,
    methods: Sequence[str] | None = None,
    ks: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
) -> Comparison:
    checkouts = {run.checkout for run in runs}
    if len(checkouts) > 1:
        raise ValueError(f"runs of several checkouts in one table: {sorted(checkouts)}")
    by_method: dict[str, list[EvaluationRun]] = defaultdict(list)
    for run in runs:
        if not methods or run.method in methods:
            by_method[run.method].append(run)
    missing = sorted(set(methods or ()) - set(by_method))
    if missing:
        raise LookupError(f"no finished evaluation of {missing} for profile {profile!r}")
    keys = {key for run in runs for key in run.passk}
    # A filter naming what no run has is refused with what there is, never dropped silently.
    for asked, present, what in (
        (ks, {k for _, k in keys}, "k"),
        (names, {n for n, _ in keys}, "benchmark or group"),
    ):
        absent = sorted(set(asked or ()) - present)
        if absent:
            raise LookupError(
                f"no pass@k for {what} {', '.join(map(str, absent))} in the evaluations of "
                f"profile {profile!r}: they have {what} {', '.join(map(str, sorted(present)))}"
            )
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
    checkout = next(iter(checkouts), UNRECORDED)
    return Comparison(profile, order, rows, cells, dict(by_method), checkout)


CONDITIONAL_MARK = "*"
CSV_HEADER = (
    *("benchmark", "k", "method", "pass_at_k", "low", "high", "seeds", "interval", "checkout"),
)


def interval_kind(cell: Cell) -> str:
    """What a cell's interval is: over problems given one seed, or over seeds."""
    if cell.low is None or cell.high is None:
        return "none"
    return "bootstrap_given_seed" if cell.seeds == 1 else "t_over_seeds"


def _percent(cell: Cell | None, with_interval: bool = True) -> str:
    if cell is None:
        return "-"
    text = f"{100 * cell.value:.1f}"
    if with_interval and cell.low is not None and cell.high is not None:
        text += f" [{100 * cell.low:.1f}, {100 * cell.high:.1f}]"
        if cell.seeds == 1:
            text += CONDITIONAL_MARK
    return text


def render(comparison: Comparison, style: str = "text") -> str:
    """The table as aligned text, markdown or CSV (percent; CSV in fractions)."""
    header = ["benchmark", "k", *comparison.methods]
    if style == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(
            [
                "benchmark",
                "k",
                "method",
                "pass_at_k",
                "low",
                "high",
                "seeds",
                "interval",
                "checkout",
            ]
        )
        for name, k in comparison.rows:
            for method in comparison.methods:
                cell = comparison.cells.get((name, k, method))
                if cell is not None:
                    writer.writerow(
                        [
                            *(name, k, method, cell.value, cell.low, cell.high, cell.seeds),
                            interval_kind(cell),
                            comparison.checkout,
                        ]
                    )
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
    one = f"{CONDITIONAL_MARK} one seed: bootstrap 95% CI over problems, conditional on that seed"
    several = "several seeds: mean and t 95% CI over seeds"
    interval = one if seeds == {1} else several if 1 not in seeds else f"{several}; {one}"
    lines = [
        f"pass@k (%), profile {comparison.profile!r}, checkout {comparison.checkout}",
        f"[{interval}]",
    ]
    commits = comparison.commits
    if len(commits) > 1:
        shown = ", ".join(commit[:8] for commit in commits)
        lines.append(f"MIXED: runs from {len(commits)} commits ({shown}); each run's is below")
    return "\n".join(lines)


def _provenance(comparison: Comparison) -> list[str]:
    mixed = len(comparison.commits) > 1
    lines = []
    for method in comparison.methods:
        runs = sorted(comparison.runs[method], key=lambda run: run.seed)
        described = ", ".join(_described(run, with_commit=mixed) for run in runs)
        lines.append(f"{method}: {described}")
    if not mixed and comparison.commits:
        lines.append(f"all runs at commit {comparison.commits[0][:8]}")
    return lines


def _described(run: EvaluationRun, with_commit: bool) -> str:
    started = datetime.fromtimestamp(run.start_time / 1000, UTC)
    commit = ""
    if with_commit:
        commit = f", commit {run.commit[:8]}" + ("+dirty" if run.dirty == "true" else "")
    return f"seed {run.seed} run {run.run_id[:8]} ({started:%Y-%m-%d %H:%M} UTC{commit})"
