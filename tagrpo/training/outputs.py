"""What a training run leaves behind: checkpoints, rollout dumps, the per-step metrics table."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.plumbing.layout import checkpoint_name
from tagrpo.training.rollout import QuestionRollout

__all__ = ["DUMP_COLUMNS", "checkpoint_name", "checkpoint_steps", "rollout_frame"]

# One row per response in a rollout dump (the diagnostics read these columns).
DUMP_COLUMNS = (
    "step",
    "checkpoint",
    "question_id",
    "variant",
    "sample_index",
    "prompt_used",
    "scored_under",
    "response",
    "reward",
    "pred",
    "advantage",
    "num_tokens",
    "finished",
    "kept",
)


def checkpoint_steps(total_steps: int, fractions: Sequence[float]) -> dict[int, float]:
    """Step (1-based) at which each fraction of training is reached: ``ceil(f * steps)``."""
    if total_steps < 1:
        raise ValueError("total_steps must be >= 1")
    steps: dict[int, float] = {}
    for fraction in sorted(fractions):
        if not 0 < fraction <= 1:
            raise ValueError(f"checkpoint fractions must be in (0, 1], got {fraction}")
        # In very short runs several fractions fall on one step: it is named by the largest.
        steps[max(1, math.ceil(fraction * total_steps - 1e-9))] = fraction
    return steps


def save_policy_folder(model, tokenizer, directory: str | Path) -> None:
    """An ordinary Hugging Face folder that :func:`tagrpo.backends.models.load_causal_lm`
    reloads."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def rollout_frame(
    step: int,
    checkpoint: str,
    rollouts: Iterable[QuestionRollout],
    scored_under: Mapping[tuple[str, int], str],
) -> pd.DataFrame:
    """One row per response of ``rollouts`` (kept and dropped ones).

    ``scored_under[(question_id, variant)]`` is the prompt text the response was scored with;
    dropped rollouts have no advantages (NaN).
    """
    rows: list[dict[str, Any]] = []
    for rollout in rollouts:
        values = rollout.advantages
        variants = rollout.variant_of_response
        for index, completion in enumerate(rollout.completions):
            variant = int(variants[index])
            rows.append(
                {
                    "step": step,
                    "checkpoint": checkpoint,
                    "question_id": rollout.question.id,
                    "variant": variant,
                    "sample_index": index % rollout.per_variant,
                    "prompt_used": rollout.generation_prompts[rollout.variants.index(variant)],
                    "scored_under": scored_under.get((rollout.question.id, variant), ""),
                    "response": completion.text,
                    "reward": float(rollout.rewards[index]),
                    "pred": rollout.preds[index] if rollout.preds else "",
                    "advantage": float(values[index]) if values is not None else float("nan"),
                    "num_tokens": completion.num_tokens,
                    "finished": completion.finished,
                    "kept": rollout.kept,
                }
            )
    return pd.DataFrame(rows, columns=list(DUMP_COLUMNS))


def write_history_csv(history: Sequence[Mapping[str, float]], path: str | Path) -> None:
    """Per-step metrics as CSV (the union of keys; ``step`` first) for ``dvc plots``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys: list[str] = []
    for record in history:
        keys += [key for key in record if key not in keys]
    fields = ["step", *sorted(key for key in keys if key != "step")]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(history)
