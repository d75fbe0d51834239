"""What the report reads: each policy's pass@k, training histories and strategy-labelled
responses, the benchmark groups the params name, the bands the run is judged against,
and the labels of its claims family, base draw and pre-registration.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.config.params import Params
from tagrpo.plumbing.layout import evaluate_outputs
from tagrpo.report.chance import multiple_choice_options
from tagrpo.report.family import registered_family
from tagrpo.report.plot_data import read_policy_passk


def read_passk(root: Path, policies: list[str]) -> pd.DataFrame:
    """Every policy's pass@k table (an error naming the first one missing)."""
    return pd.concat([read_policy_passk(root, p) for p in policies], ignore_index=True)


def in_distribution_benchmarks(config: Params) -> tuple[str, list[str]]:
    """The group named by ``report.in_distribution`` and its benchmarks (every benchmark when
    it is null)."""
    name = config.report.in_distribution
    if name is None:
        return "all benchmarks", sorted(config.benchmark_names())
    return name, list(config.evaluate.groups[name])


def primary_benchmarks(config: Params) -> tuple[str, list[str]]:
    """The group named by ``report.primary_group`` and its benchmarks (validated free-form);
    every free-form benchmark when it is null."""
    name = config.report.primary_group
    if name is None:
        options = multiple_choice_options(config)
        return "free-form benchmarks", sorted(set(config.benchmark_names()) - set(options))
    return name, list(config.evaluate.groups[name])


def training_histories(root: Path, policies: Sequence[str], column: str) -> list[list[float]]:
    """Each policy's per-step ``column`` from its training history (an error naming a missing
    file or column)."""
    from tagrpo.plumbing.layout import train_outputs

    histories = []
    for policy in policies:
        path = root / train_outputs(policy)["history"]
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the train stage of {policy}")
        frame = pd.read_csv(path)
        if column not in frame.columns:
            raise KeyError(f"{path} has no column {column!r}")
        histories.append(frame.sort_values("step")[column].tolist())
    return histories


def strategy_responses(root: Path, policies: Sequence[str]) -> dict[str, pd.DataFrame]:
    """The evaluated responses (with ``correct``: V3's pass@k per path) of each policy that
    carry a ``strategy`` label (none in a world with one solution template: then nothing is
    read)."""
    import pyarrow.parquet as pq

    from tagrpo.metrics.testbed import STRATEGY_COLUMN

    frames = {}
    for policy in policies:
        path = root / evaluate_outputs(policy)["responses"]
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the evaluate stage of {policy}")
        if STRATEGY_COLUMN in pq.read_schema(path).names:
            columns = ["benchmark", "question_id", "correct", STRATEGY_COLUMN]
            frames[policy] = pd.read_parquet(path, columns=columns)
    return frames


def parity_responses(
    root: Path, policies: Sequence[str], with_texts: bool = False
) -> dict[str, pd.DataFrame]:
    """Each policy's evaluated responses with the columns the grader-parity table reads
    (every grader's verdicts, when the evaluation graded them: older ones lack them), and the
    response texts when ``with_texts``."""
    import pyarrow.parquet as pq

    from tagrpo.evaluation.parity import GRADERS, verdict_columns

    base = ["benchmark", "question_id", "sample_index", "answer", "answer_kind"]
    wanted = [*base, *(column for g in GRADERS for column in verdict_columns(g))]
    wanted += ["response"] if with_texts else []
    frames = {}
    for policy in policies:
        path = root / evaluate_outputs(policy)["responses"]
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the evaluate stage of {policy}")
        names = set(pq.read_schema(path).names)
        frames[policy] = pd.read_parquet(path, columns=[c for c in wanted if c in names])
    return frames


def run_bands(config: Params, root: Path) -> Any:
    """The bands this run is judged against: its pre-registration's (``report.preregistration``),
    world v2's when it names none."""
    from tagrpo.report import validity

    if config.report.preregistration is None:
        return validity.DEFAULT_BANDS
    return validity.bands_from_preregistration(root / config.report.preregistration)


def claims_family(config: Params, root: Path) -> str:
    """``v3`` or ``v2``: the claims family of the pre-registration the run names
    (:func:`tagrpo.report.family.registered_family`; none: world v2's)."""
    relative = config.report.preregistration
    return registered_family(root / relative if relative is not None else None)


PIPELINE_FAMILIES = ("v2", "v3")


def judging_problem(config: Params, root: Path) -> str | None:
    """Why a pipeline run's report could not judge the run under its pre-registration
    (``report.preregistration``): a file missing or naming no claims family, or the study's
    re-registration, whose family is judged across base draws by ``python -m
    tagrpo.report.study --main``, never within one run. None when it can."""
    relative = config.report.preregistration
    if relative is not None and not (root / relative).is_file():
        return f"report.preregistration: {relative} does not exist"
    try:
        family = claims_family(config, root)
    except (ValueError, KeyError, TypeError) as error:
        return f"report.preregistration: {error}"
    if family not in PIPELINE_FAMILIES:
        return (
            f"report.preregistration: {relative} registers the {family} family, judged across "
            "base draws by `python -m tagrpo.report.study --main`, not by one run's report; a "
            "study draw's report is judged under preregistration/world-v3.yaml (its profiles set "
            "it)"
        )
    return None


def draw_label(config: Params) -> str:
    """The base draw a checkout is: its warm-start's SFT seed (``SFT seed 0``)."""
    if config.base_model.kind != "warmstart":
        return f"the {config.base_model.kind} base model"
    return f"SFT seed {config.base_model.warmstart.seed}"


def preregistration_line(config: Params, root: Path) -> str:
    """Which pre-registration the run is judged under: its path, SHA-256 and the commit that
    last changed it (the study's first training must come after that commit)."""
    relative = config.report.preregistration
    if relative is None:
        return "No pre-registration (`report.preregistration: null`)."
    return registration_line(root, relative)


def registration_line(root: Path, relative: str) -> str:
    """A pre-registration file's line: its path, SHA-256 and the commit that last changed it."""
    path = root / relative
    if not path.is_file():
        raise FileNotFoundError(f"report.preregistration: {path} does not exist")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    try:
        commit = subprocess.run(
            ["git", "log", "-1", "--format=%H", "--", relative],
            cwd=root, capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = ""
    committed = f", last committed at `{commit[:12]}`" if commit else " (not committed)"
    return f"Pre-registration: `{relative}`, SHA-256 `{digest}`{committed}."
