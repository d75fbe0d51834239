"""The same sources loaded from the Hugging Face Hub, for users with internet access.

These ids are **not exercised offline**: the project's default profile reads the local copies
(:mod:`tagrpo.data.sources.local`) and the tests replace ``datasets.load_dataset`` with a fake.
Each hub copy has its own field names; a small *adapter* renames them to the local layout and
the row is then normalised by the very same ``normalise_<name>`` function as the local file, so
answer extraction, id schemes and rejection reasons are written once.

Differences from the local copies a user should know about:

* MATH train on the hub has no ``unique_id``; ids are generated as
  ``train/<subject>/hub-<row>`` (EleutherAI, one config per subject) or ``train/hub-<row>``.
* ``Idavidrein/gpqa`` is gated: accept its terms on the website and log in
  (``huggingface-cli login``) first. Its ``Record ID`` becomes the question id.
* ``math-ai/olympiadbench`` and ``math-ai/minervamath`` carry a plain ``answer`` column instead
  of the original fields; the adapters map it. Row counts of alternative copies may differ
  from the local files (e.g. 674 instead of 675 OlympiadBench problems).
* ``datasets.load_dataset`` is imported lazily so that importing this module never needs
  ``datasets`` or a network; set ``HF_DATASETS_OFFLINE=0`` / ``HF_HUB_OFFLINE=0`` (or use
  ``tagrpo.pipeline.env.apply_offline_defaults(online=True)``) before calling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tagrpo.data.schema import LoadResult
from tagrpo.data.sources.local import normalise_records

Adapter = Callable[[Mapping[str, Any], "str | None", int], dict[str, Any]]

MATH_SUBJECT_CONFIGS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)


def _identity(record: Mapping[str, Any], config: str | None, row: int) -> dict[str, Any]:
    return dict(record)


def _math_eleuther(record: Mapping[str, Any], config: str | None, row: int) -> dict[str, Any]:
    return {**record, "unique_id": f"train/{config}/hub-{row}"}


def _math_lighteval(record: Mapping[str, Any], config: str | None, row: int) -> dict[str, Any]:
    return {**record, "unique_id": f"train/hub-{row}"}


def _answer_as_final_answer(
    record: Mapping[str, Any], config: str | None, row: int
) -> dict[str, Any]:
    # math-ai/olympiadbench: a plain answer column instead of final_answer (a list upstream)
    mapped = dict(record)
    if mapped.get("final_answer") is None and mapped.get("answer") is not None:
        mapped["final_answer"] = [str(mapped["answer"])]
    return mapped


def _question_as_problem(record: Mapping[str, Any], config: str | None, row: int) -> dict[str, Any]:
    # math-ai/minervamath names the problem "question" and gives the answer directly
    mapped = dict(record)
    if mapped.get("problem") is None and mapped.get("question") is not None:
        mapped["problem"] = mapped["question"]
    return mapped


@dataclass(frozen=True)
class HubSpec:
    """One Hugging Face copy of a source: repo, configs (concatenated in order), split, adapter."""

    repo_id: str
    split: str
    configs: tuple[str | None, ...] = (None,)
    adapter: Adapter = _identity


# The first spec of each source is the default; the others can be chosen with ``repo_id=``.
HUB_SOURCES: dict[str, tuple[HubSpec, ...]] = {
    "math": (
        HubSpec("EleutherAI/hendrycks_math", "train", MATH_SUBJECT_CONFIGS, _math_eleuther),
        HubSpec("DigitalLearningGmbH/MATH-lighteval", "train", ("default",), _math_lighteval),
    ),
    "math500": (HubSpec("HuggingFaceH4/MATH-500", "test"),),
    "amc23": (HubSpec("math-ai/amc23", "test"),),
    "aime24": (
        HubSpec("HuggingFaceH4/aime_2024", "train"),
        HubSpec("math-ai/aime24", "test"),
    ),
    "aime25": (
        HubSpec("math-ai/aime25", "test"),
        HubSpec("yentinglin/aime_2025", "train"),
    ),
    "olympiadbench": (
        HubSpec("Hothan/OlympiadBench", "train", ("OE_TO_maths_en_COMP",)),
        HubSpec("math-ai/olympiadbench", "test", (None,), _answer_as_final_answer),
    ),
    "minerva_math": (HubSpec("math-ai/minervamath", "test", (None,), _question_as_problem),),
    "gpqa_diamond": (HubSpec("Idavidrein/gpqa", "train", ("gpqa_diamond",)),),
    # The data-scaling pool (paper section 5.5); "default" holds the ~94k verified rows.
    "openr1_math": (HubSpec("open-r1/OpenR1-Math-220k", "train", ("default",)),),
}


def hub_spec(name: str, repo_id: str | None = None) -> HubSpec:
    """The default (or the named) Hugging Face copy of a source."""
    if name not in HUB_SOURCES:
        raise KeyError(f"unknown source {name!r}; known: {sorted(HUB_SOURCES)}")
    specs = HUB_SOURCES[name]
    if repo_id is None:
        return specs[0]
    for spec in specs:
        if spec.repo_id == repo_id:
            return spec
    known = [spec.repo_id for spec in specs]
    raise ValueError(f"{name}: no field mapping for hub repo {repo_id!r}; known: {known}")


def _hub_records(spec: HubSpec, revision: str | None) -> Iterator[tuple[int, dict[str, Any]]]:
    from datasets import load_dataset  # lazy: optional, and slow to import

    row_index = 0  # running index over all configs, like a line number in the local file
    for config in spec.configs:
        dataset = load_dataset(spec.repo_id, config, split=spec.split, revision=revision)
        for row_in_config, record in enumerate(dataset):
            yield row_index, spec.adapter(record, config, row_in_config)
            row_index += 1


def load_hub(
    name: str, *, repo_id: str | None = None, revision: str | None = None, **options: Any
) -> LoadResult:
    """Load a source from the Hugging Face Hub with the same rules as :func:`load_local`.

    ``options`` are the normaliser options (``seed`` for GPQA, ``keep_empty_boxed`` for MATH).
    """
    spec = hub_spec(name, repo_id)
    return normalise_records(name, _hub_records(spec, revision), **options)
