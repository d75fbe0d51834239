"""``data``: where the training split and the benchmarks come from."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator, model_validator

from tagrpo.config.common import check_chain_lengths
from tagrpo.plumbing.config_model import ConfigModel, Field

PHRASING_FAMILIES = ("expr", "words", "imperative", "story", "unseen")


class SyntheticBenchmark(ConfigModel):
    size: int = Field(ge=1, le=100_000, description="problems in the benchmark")
    lengths: dict[int, float] = Field(description="chain-length weights")
    # Defaults here, and only here: the entries of data.synthetic.benchmarks are named by the
    # user, and an entry states only what differs from the usual benchmark (test_config lists
    # every default a params model may keep, with its reason).
    families: list[str] = Field(
        default_factory=lambda: ["expr", "words", "imperative", "story"],
        min_length=1,
        description="phrasing families problems are posed in",
    )
    multiple_choice: bool = Field(False, description="pose problems as multiple choice")
    options: int = Field(
        4, ge=2, le=26, description="options per multiple-choice question (letters A-Z)"
    )

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, weights: dict[int, float]) -> dict[int, float]:
        return check_chain_lengths(weights)

    @field_validator("families")
    @classmethod
    def _families(cls, families: list[str]) -> list[str]:
        unknown = sorted(set(families) - set(PHRASING_FAMILIES))
        if unknown:
            raise ValueError(f"unknown families {unknown}; allowed: {list(PHRASING_FAMILIES)}")
        return families


class SyntheticSettings(ConfigModel):
    seed: int = Field(ge=0, description="seed of the generated mini world")
    train_size: int = Field(ge=1, le=1_000_000, description="training questions generated")
    extra_size: int = Field(
        ge=0, le=1_000_000, description="more questions for the data-scaling runs (pool)"
    )
    benchmarks: dict[str, SyntheticBenchmark] = Field(
        min_length=1,
        description="generated benchmarks by name",
    )


def _check_source_names(names: list[str], kind: str) -> list[str]:
    from tagrpo.data.sources.registry import SOURCES

    unknown = [name for name in names if name not in SOURCES]
    if unknown:
        raise ValueError(f"unknown {kind} {unknown}; allowed: {sorted(SOURCES)}")
    return names


def _loader_options(name: str) -> set[str]:
    """The options a source's row builder takes (data.max_problem_chars is set for all)."""
    from tagrpo.data.sources.registry import SOURCES

    return SOURCES[name].loader_options()


class FileSourceSettings(ConfigModel):
    """The ``local`` (files in ``common.data_dir``) or ``hub`` (Hugging Face) sources."""

    train: list[str] = Field(min_length=1, description="training sources")
    benchmarks: list[str] = Field(
        description="benchmark sources",
    )
    options: dict[str, dict[str, Any]] = Field(
        description="loader options per source (e.g. the GPQA option-shuffle seed)",
    )
    extra: list[str] = Field(
        description="the data-scaling pool's sources (paper: openr1_math), shuffled by seed",
    )

    @field_validator("train", "benchmarks", "extra")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        return _check_source_names(names, "sources")

    @field_validator("options")
    @classmethod
    def _options(cls, options: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        _check_source_names(list(options), "sources in options")
        for name, given in options.items():
            allowed = _loader_options(name) | {"repo_id", "revision"}
            unknown = sorted(set(given) - allowed)
            if unknown:
                raise ValueError(
                    f"{name}: unknown loader options {unknown}; allowed: {sorted(allowed)}"
                )
        return options


class DataSettings(ConfigModel):
    source: Literal["synthetic", "local", "hub"] = Field(
        description="synthetic (mini world) | local (files) | hub (Hugging Face)"
    )
    synthetic: SyntheticSettings
    local: FileSourceSettings
    hub: FileSourceSettings
    extra_seed: int = Field(ge=0, description="order of the data-scaling pool (its chunks)")
    # Longest upstream problems: MATH train 4,309 characters, OlympiadBench 4,415.
    max_problem_chars: int = Field(
        ge=1, description="reject longer problems (too_long) before any tokenizer sees them"
    )

    verify_sources: bool = Field(
        description="local source files must match their manifests (rows, SHA-256; "
        "tagrpo/data/sources/manifests.py) or the data stage refuses them; false for your own "
        "copy (recorded in the data metrics and the report)"
    )

    @model_validator(mode="after")
    def _benchmarks(self) -> DataSettings:
        if self.source != "synthetic" and not getattr(self, self.source).benchmarks:
            raise ValueError(f"data.{self.source}.benchmarks is empty: nothing to evaluate on")
        return self


# -- provenance: which params built a table on disk --

REPHRASED_KEYS = ("rephrase.max_questions",)  # check_equivalence keeps that many questions


def recipe_keys(data: DataSettings, table: str) -> list[str]:
    """The params keys that decide the rows of the data stage's table ``table`` (``"train"``
    or a benchmark's name). The mini world draws its benchmarks first, in name order, and the
    training split excluding them (:func:`tagrpo.miniworld.dataset.build_miniworld`); a file
    source's table is its loader's rows under its options."""
    if data.source == "synthetic":
        keys = ["data.source", "data.synthetic.seed", "data.synthetic.benchmarks"]
        keys.append("common.miniworld")
        return keys + (["data.synthetic.train_size"] if table == "train" else [])
    prefix = f"data.{data.source}"
    names = getattr(data, data.source).train if table == "train" else [table]
    listed = [f"{prefix}.train"] if table == "train" else []
    options = [f"{prefix}.options.{name}" for name in names]
    return ["data.source", *listed, *options, "data.max_problem_chars"]


def _lookup(tree: Any, dotted: str) -> Any:
    """The value at ``dotted`` (None where a key is absent, e.g. a source without options)."""
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def _params_tree(config: Any) -> dict[str, Any]:
    """``config`` (a Params) as JSON values: what a recorded provenance is compared with."""
    return json.loads(config.model_dump_json())


def table_provenance(config: Any, table: str, extra_keys: Sequence[str] = ()) -> dict[str, Any]:
    """What a table written under ``config`` (a Params) records of its making
    (:data:`tagrpo.data.schema.PROVENANCE_KEY`): the profile, for messages, and the value of
    each key of :func:`recipe_keys` (and ``extra_keys``)."""
    tree = _params_tree(config)
    keys = [*recipe_keys(config.data, table), *extra_keys]
    return {
        "profile": config.common.profile,
        "table": table,
        "params": {key: _lookup(tree, key) for key in keys},
    }


def provenance_differences(recorded: dict[str, Any], config: Any) -> list[tuple[str, Any, Any]]:
    """(key, value the table was built with, value in ``config``) for each recorded key whose
    value ``config`` (a Params) does not share: empty when the table is the one it builds."""
    tree = _params_tree(config)
    found = [(key, value, _lookup(tree, key)) for key, value in recorded["params"].items()]
    return [(key, value, wanted) for key, value, wanted in found if value != wanted]


def table_mismatch(path: Path, config: Any) -> str | None:
    """Why the data table at ``path`` is not the one ``config`` builds (None: it is), from
    the provenance it was written with (:func:`table_provenance`)."""
    from tagrpo.data.schema import read_provenance

    made = read_provenance(str(path))
    if made is None:
        return "it records no provenance (written before the data stage recorded its params)"
    differences = provenance_differences(made, config)
    if not differences:
        return None
    shown = "; ".join(
        f"{key} = {json.dumps(built)} there, {json.dumps(wanted)} in profile "
        f"{config.common.profile}"
        for key, built, wanted in differences[:3]
    )
    more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
    return f"profile {made['profile']} built it ({shown}{more})"


def training_source(config: Any) -> str:
    """What ``config``'s data stage trains on, in words for a message."""
    data = config.data
    if data.source == "synthetic":
        return f"the mini world (data.synthetic.train_size = {data.synthetic.train_size})"
    names = ", ".join(getattr(data, data.source).train)
    return f"{names} (data.{data.source}.train)"
