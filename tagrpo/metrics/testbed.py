"""Whether the testbed can measure what it is for (issue 21's validity criteria), computed from
stage outputs: does training raise the reward, does a question's difficulty depend on its
phrasing, do the responses use more than one solution strategy.

Pure computations on tables; :mod:`tagrpo.report.validity` turns them into the report's
"Testbed validity" table with the pass@k estimates of :mod:`tagrpo.metrics.compare`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tagrpo.metrics.compare import (
    Estimate,
    benchmark_strata,
    group_weights,
    resample_problems,
    t_interval,
)


def quarter_means(rewards: Sequence[float]) -> tuple[float, float]:
    """Mean reward of the first and of the last quarter of a run's steps (at least one step
    each, as the training summary's ``reward_first_quarter`` / ``reward_last_quarter``)."""
    values = np.asarray(rewards, dtype=np.float64)
    if values.size < 2:
        raise ValueError(f"a run needs at least 2 steps to compare quarters, got {values.size}")
    if np.isnan(values).any():
        raise ValueError("a step's reward is missing (nan)")
    quarter = max(1, values.size // 4)
    return float(values[:quarter].mean()), float(values[-quarter:].mean())


def reward_rise(runs: Sequence[Sequence[float]]) -> Estimate:
    """Last-quarter minus first-quarter training reward, with its 95% interval.

    With several runs (seeds) the unit is the run: the mean of the runs' rises, t with
    ``runs - 1`` degrees of freedom (each rise carries its own step noise, so that is counted).
    With one run: Welch's t between the two quarters' step rewards, conditional on that run.
    """
    if not runs:
        raise ValueError("no training run to measure")
    if len(runs) >= 2:
        rises = np.array([last - first for first, last in map(quarter_means, runs)])
        se = float(rises.std(ddof=1) / np.sqrt(rises.size))
        df = float(rises.size - 1)
        value = float(rises.mean())
    else:
        values = np.asarray(runs[0], dtype=np.float64)
        quarter_means(values)  # the same checks
        quarter = max(1, values.size // 4)
        first, last = values[:quarter], values[-quarter:]
        if quarter < 2:
            raise ValueError("one run of fewer than 8 steps: no within-run variance to use")
        a, b = last.var(ddof=1) / last.size, first.var(ddof=1) / first.size
        se = float(np.sqrt(a + b))
        df = (a + b) ** 2 / (a * a / (last.size - 1) + b * b / (first.size - 1)) if se else 1.0
        value = float(last.mean() - first.mean())
    low, high, p_value = t_interval(value, se, df)
    return Estimate(0, value, low, high, p_value, se, float(df), (len(runs),))


@dataclass(frozen=True)
class PhrasingDispersion:
    """Between-phrasing variation of per-question success against binomial noise (V2).

    ``statistic``: the sum over questions of Pearson's X^2 of homogeneity of success across the
    question's phrasings (a 2 x F table each), ``df`` = sum of (F - 1) over informative
    questions (those with both outcomes; the ``constant`` ones carry no information).
    ``dispersion`` = statistic / df: about 1 when phrasing only adds sampling noise.
    ``excess_sd``: sqrt of the mean over all questions of (observed variance of success across
    phrasings minus its binomial expectation): how much phrasing moves success, as a rate.
    """

    questions: int
    constant: int
    phrasings: int
    samples: int
    statistic: float
    df: int
    p_value: float  # chi-square approximation
    permutation_p: float  # responses permuted across a question's phrasings
    permutations: int
    dispersion: float
    excess_sd: float


def _homogeneity(counts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Pearson X^2 of a 2 x F table per row: ``counts[..., f]`` successes of ``sizes[f]``."""
    rate = counts.sum(axis=-1, keepdims=True) / sizes.sum()
    expected = sizes * rate
    variance = sizes * rate * (1.0 - rate)
    with np.errstate(invalid="ignore", divide="ignore"):
        terms = (counts - expected) ** 2 / variance
    return np.where(variance > 0, terms, 0.0).sum(axis=-1)


def phrasing_dispersion(
    samples: pd.DataFrame, permutations: int = 1000, seed: int = 0
) -> PhrasingDispersion:
    """V2 from the base model's phrasing probe (``question_id``, ``phrasing``, ``reward`` 0/1).

    Every question must have the same phrasings with the same number of samples each (the
    probe's design); anything else is an error naming the question.
    """
    from scipy.stats import chi2

    missing = {"question_id", "phrasing", "reward"} - set(samples.columns)
    if missing:
        raise KeyError(f"phrasing samples lack columns {sorted(missing)}")
    if samples.empty:
        raise ValueError("no phrasing samples")
    rewards = samples["reward"].to_numpy(dtype=np.float64)
    if not np.isin(rewards, (0.0, 1.0)).all():
        raise ValueError("phrasing rewards must be 0 or 1")
    sizes = samples.groupby(["question_id", "phrasing"], sort=True).size()
    shapes = sizes.groupby(level=0).agg(["size", "min", "max"])
    first = shapes.iloc[0]
    odd = shapes[(shapes != first).any(axis=1)]
    if not odd.empty or first["min"] != first["max"]:
        question = odd.index[0] if not odd.empty else shapes.index[0]
        raise ValueError(
            f"question {question}: every question needs the same phrasings with the same "
            f"number of samples (got {dict(shapes.loc[question])} vs {dict(first)})"
        )
    phrasings, per_phrasing = int(first["size"]), int(first["min"])
    if phrasings < 2:
        raise ValueError("one phrasing per question: nothing to compare")
    ordered = samples.sort_values(["question_id", "phrasing"], kind="stable")
    matrix = ordered["reward"].to_numpy(dtype=np.float64).reshape(-1, phrasings * per_phrasing)
    size_vector = np.full(phrasings, float(per_phrasing))
    counts = matrix.reshape(len(matrix), phrasings, per_phrasing).sum(axis=2)
    per_question = _homogeneity(counts, size_vector)
    totals = matrix.sum(axis=1)
    informative = (totals > 0) & (totals < matrix.shape[1])
    statistic = float(per_question.sum())
    df = int(informative.sum()) * (phrasings - 1)
    rng = np.random.default_rng(seed)
    exceed = 0
    for _ in range(permutations):
        shuffled = rng.permuted(matrix, axis=1)
        permuted = shuffled.reshape(len(matrix), phrasings, per_phrasing).sum(axis=2)
        exceed += int(_homogeneity(permuted, size_vector).sum() >= statistic - 1e-12)
    total = matrix.shape[1]
    rate = totals / total
    observed = (counts / per_phrasing).var(axis=1, ddof=1)
    # E[sample variance of the phrasings' rates] under one common rate p: p(1-p)/n, with the
    # unbiased p(1-p) estimate rate(1-rate) * total / (total - 1).
    expected = rate * (1.0 - rate) * total / (total - 1) / per_phrasing
    excess = float(np.mean(observed - expected))
    return PhrasingDispersion(
        questions=int(informative.sum()),
        constant=int((~informative).sum()),
        phrasings=phrasings,
        samples=per_phrasing,
        statistic=statistic,
        df=df,
        p_value=float(chi2.sf(statistic, df)) if df else float("nan"),
        permutation_p=(1 + exceed) / (1 + permutations) if permutations else float("nan"),
        permutations=permutations,
        dispersion=statistic / df if df else float("nan"),
        excess_sd=float(np.sqrt(max(excess, 0.0))),
    )


STRATEGY_COLUMN = "strategy"
# Labels of responses that took no known path (no first step, or one that fits neither path)
# or whose first step fits both: they count in no question's strategy mix.
NO_STRATEGY = ("unknown", "ambiguous")


def strategy_entropy(responses: pd.DataFrame, column: str = STRATEGY_COLUMN) -> pd.DataFrame | None:
    """Per question: the Shannon entropy (bits) of the solution-strategy labels of its sampled
    responses that took a known path (labels in :data:`NO_STRATEGY` left out), and how many
    distinct strategies occur. None when the responses carry no strategy label (a world with
    one solution template). A question none of whose responses took a known path is absent."""
    if column not in responses.columns:
        return None
    if responses[column].isna().any():
        rows = responses[responses[column].isna()]
        raise ValueError(
            f"responses without a {column} label, e.g. question {rows.iloc[0]['question_id']}"
        )
    keys = [c for c in ("benchmark", "question_id") if c in responses.columns]
    if "question_id" not in keys:
        raise KeyError("responses lack question_id")
    labelled = responses[~responses[column].isin(NO_STRATEGY)]
    counts = labelled.groupby([*keys, column], sort=True).size()
    rows = []
    for key, part in counts.groupby(level=list(range(len(keys))), sort=True):
        shares = part.to_numpy(dtype=np.float64) / part.sum()
        entropy = float(-(shares * np.log2(shares)).sum())
        rows.append(
            {
                **dict(zip(keys, np.atleast_1d(key), strict=True)),
                "entropy_bits": entropy + 0.0,
                "strategies": int(part.size),
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class PathDependence:
    """V3's "the base needs both paths": pass@k of all the base's responses minus that of its
    best single solution path, on a benchmark group.

    Per problem j, ``q_j = c_j / n_j`` over all responses and, per path p, ``q_jp = c_jp / n_jp``
    over the responses labelled p (a problem none of whose responses took p takes ``q_j``:
    conservative, it can only shrink the difference). Path p's pass@k is the benchmark-weighted
    mean of the plug-in ``1 - (1 - q_jp)^k``; the base's the same plug-in on ``q_j`` (one form
    for both, so their small-sample biases match). ``low``/``high``: the 95% percentile interval
    of ``difference`` over a bootstrap of the problems within benchmarks (the best path chosen
    again in each draw). ``filled[p]``: the problems that had no response on path p.
    """

    k: int
    base: float
    paths: dict[str, float]
    best: str
    difference: float
    low: float
    high: float
    problems: int
    filled: dict[str, int]


def path_dependence(
    responses: pd.DataFrame,
    benchmarks: Sequence[str],
    k: int,
    n_resamples: int = 1000,
    seed: int = 0,
    column: str = STRATEGY_COLUMN,
) -> PathDependence | None:
    """:class:`PathDependence` of one policy's evaluated responses (``benchmark``,
    ``question_id``, ``correct``, ``column``) on ``benchmarks``; None when no response took a
    known path (labels in :data:`NO_STRATEGY` are none)."""
    missing = {"benchmark", "question_id", "correct", column} - set(responses.columns)
    if missing:
        raise KeyError(f"responses lack columns {sorted(missing)}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    chosen = responses[responses["benchmark"].isin(benchmarks)]
    paths = sorted(set(chosen[column]) - set(NO_STRATEGY))
    if not paths:
        return None
    keys = ["benchmark", "question_id"]
    correct = chosen["correct"].astype(np.float64)
    overall = correct.groupby([chosen[key] for key in keys], sort=True).agg(["size", "sum"])
    rate = (overall["sum"] / overall["size"]).to_numpy()
    rates = [rate]
    filled = {}
    for path in paths:
        on_path = chosen[column] == path
        part = (
            correct[on_path]
            .groupby([chosen.loc[on_path, key] for key in keys])
            .agg(["size", "sum"])
        )
        part = part.reindex(overall.index, fill_value=0)
        size = part["size"].to_numpy()
        filled[path] = int((size == 0).sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            rates.append(np.where(size > 0, part["sum"].to_numpy() / size, rate))
    values = 1.0 - (1.0 - np.stack(rates, axis=1)) ** k  # problems x (base, paths...)
    problems = pd.MultiIndex.from_tuples(overall.index.tolist())
    weights = group_weights(problems, benchmarks)

    def difference(rows: np.ndarray) -> tuple[np.ndarray, float]:
        means = weights[rows] @ values[rows]
        return means, float(means[0] - means[1:].max())

    means, point = difference(np.arange(len(values)))
    rng = np.random.default_rng(seed)
    strata = benchmark_strata(problems)
    draws = np.array([difference(resample_problems(strata, rng))[1] for _ in range(n_resamples)])
    low, high = np.quantile(draws, [0.025, 0.975])
    best = paths[int(np.argmax(means[1:]))]
    return PathDependence(
        k=k,
        base=float(means[0]),
        paths={path: float(v) for path, v in zip(paths, means[1:], strict=True)},
        best=best,
        difference=point,
        low=float(low),
        high=float(high),
        problems=len(values),
        filled=filled,
    )
