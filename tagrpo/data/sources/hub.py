"""The same sources loaded from the Hugging Face Hub, for users with internet access.

These ids are **not exercised offline**: the project's default profile reads the local copies
(:mod:`tagrpo.data.sources.local`) and the tests replace ``datasets.load_dataset`` with a fake.
Each hub copy (a source's ``hub`` specs) has its own field names; its *adapter* renames them to
the local layout and the row is then built by the very same row builder as the local file, so
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
  ``tagrpo.plumbing.env.apply_offline_defaults(online=True)``) before calling.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tagrpo.data.schema import LoadResult
from tagrpo.data.sources.base import HubSpec, normalise_records
from tagrpo.data.sources.registry import get_source


def hub_spec(name: str, repo_id: str | None = None) -> HubSpec:
    """The default (or the named) Hugging Face copy of a source."""
    specs = get_source(name).hub
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
    """Load a source from the Hugging Face Hub with the same rules as
    :func:`~tagrpo.data.sources.local.load_local`.

    ``options`` are the row builder's options (``seed`` for GPQA, ``keep_empty_boxed`` for MATH)
    and ``max_problem_chars``.
    """
    spec = hub_spec(name, repo_id)
    return normalise_records(get_source(name), _hub_records(spec, revision), **options)
