"""GPQA-Diamond (``gpqa_diamond/test.jsonl``, 198 rows): four options shuffled per question;
the gold is the letter of the correct one.

``Question_w_answers`` is never read: it puts the correct answer at B in every row. Two
upstream rows repeat an *incorrect* option; the gold letter is still unique, so they are kept
(``meta.duplicate_distractors``) unless ``reject_duplicate_distractors`` is set. The hub copy
(``Idavidrein/gpqa``) is gated: accept its terms on the website and log in
(``huggingface-cli login``) first; its ``Record ID`` becomes the question id.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from typing import Any

from tagrpo.data.prompts import CHOICE_LETTERS
from tagrpo.data.schema import Question
from tagrpo.data.sources.base import (
    HubSpec,
    Reject,
    Source,
    compact,
    optional_text,
    problem_text,
    required_text,
)

# Upstream option 0 is the correct answer.
OPTION_FIELDS = (
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
)


def option_permutation(question_text: str, seed: int) -> tuple[int, ...]:
    """Option order for one question: ``perm[k]`` = index of the upstream option at letter k.

    The permutation comes straight from sha256(seed, question) rather than ``random.shuffle``
    so it is identical on every Python version and platform, and independent of row order.
    """
    digest = hashlib.sha256(f"{seed}\x00{question_text}".encode()).digest()
    permutations = list(itertools.permutations(range(len(OPTION_FIELDS))))
    return permutations[int.from_bytes(digest, "big") % len(permutations)]


def build(
    record: Mapping[str, Any],
    row_index: int,
    *,
    seed: int = 0,
    reject_duplicate_distractors: bool = False,
) -> Question:
    question_id = SOURCE.question_id(record, row_index)
    problem = problem_text(record, "Question")
    options = [required_text(record, field_name) for field_name in OPTION_FIELDS]
    if not all(options):
        empty = [name for name, text in zip(OPTION_FIELDS, options, strict=True) if not text]
        raise Reject("empty_option", ", ".join(empty))
    correct, distractors = options[0], options[1:]
    if correct in distractors:
        raise Reject("duplicate_options", "the correct answer also appears as an incorrect one")
    duplicate_distractors = len(set(distractors)) < len(distractors)
    if duplicate_distractors and reject_duplicate_distractors:
        raise Reject("duplicate_options", "two incorrect answers are identical")
    permutation = option_permutation(problem, seed)
    choices = [options[upstream_index] for upstream_index in permutation]
    gold_letter = CHOICE_LETTERS[permutation.index(0)]
    return Question(
        id=question_id,
        source="gpqa_diamond",
        split="test",
        problem=problem,
        answer=gold_letter,
        answer_kind="multiple_choice",
        choices=choices,
        subject=optional_text(record, "High-level domain"),
        meta=compact(
            {
                "shuffle_seed": seed,
                "duplicate_distractors": True if duplicate_distractors else None,
                "subdomain": optional_text(record, "Subdomain"),
            }
        ),
    )


SOURCE = Source(
    name="gpqa_diamond",
    title="GPQA-Diamond",
    split="test",
    file="gpqa_diamond/test.jsonl",
    id_field="Record ID",  # present on the Hugging Face copy only
    build=build,
    hub=(HubSpec("Idavidrein/gpqa", "train", ("gpqa_diamond",)),),
    answer_kind="multiple_choice",
    choices=len(OPTION_FIELDS),  # the correct answer and three incorrect ones
    group="ood",
)
