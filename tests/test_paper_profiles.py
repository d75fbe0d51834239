"""The paper profiles' dry runs (verl command + evaluation settings) equal checked-in texts.

A change of what ``profiles/paper.yaml`` or ``profiles/paper-authors-hparams.yaml`` trains or
evaluates with shows up here as a diff. After an intended change, rewrite the expectations:

    TAGRPO_WRITE_EXPECTATIONS=1 python -m pytest tests/test_paper_profiles.py

and review ``git diff tests/fixtures/dry_run``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tagrpo.config.params import validate_params
from tagrpo.config.profiles import merged_with_profile
from tagrpo.plumbing.paths import project_root
from tagrpo.verl_ext.dry_run import dry_run_text

SOURCE = project_root()
EXPECTED = SOURCE / "tests" / "fixtures" / "dry_run"
ROOT = Path("/project")  # a fixed checkout path: the text must not depend on where tests run

PROFILES = ("paper", "paper-authors-hparams")  # the second a delta over the first (base: paper)
CASES = [
    (profile, method)
    for profile in PROFILES
    for method in ("grpo", "ta_grpo", "ta_grpo_unanchored")
]


def profile_config(name: str):
    # As `tagrpo params apply profiles/NAME.yaml`: its base profiles first, then itself.
    merged = merged_with_profile(SOURCE / "profiles" / f"{name}.yaml", SOURCE / "params.yaml")
    return validate_params(merged, name)


@pytest.mark.parametrize(("profile", "method"), CASES)
def test_dry_run_matches_the_checked_in_expectation(profile, method, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = profile_config(profile)
    # With MATH's 7,498 training questions: the preflight's cost lines are pinned too.
    text = dry_run_text(config, method, 0, ROOT, config.base_model.hub.hub_id, questions=7498)
    # The tracking store is the checkout's own (common.tracking.uri), wherever root points.
    text = text.replace(str(SOURCE), "<checkout>")
    path = EXPECTED / f"{profile}-{method}.txt"
    if os.environ.get("TAGRPO_WRITE_EXPECTATIONS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs: see this module's docstring"


def test_what_the_expectations_pin() -> None:
    """The settings issue 22 is about, read from the expectations themselves."""
    paper = (EXPECTED / "paper-ta_grpo.txt").read_text().splitlines()
    authors = (EXPECTED / "paper-authors-hparams-ta_grpo_unanchored.txt").read_text().splitlines()
    assert "++data.apply_chat_template_kwargs.date_string='26 Jul 2024'" in paper
    assert "# evaluate: evaluate.prompt_format = chat" in paper
    assert "data.train_batch_size=256" in paper
    assert "# evaluate: evaluate.prompt_format = raw" in authors
    assert "# evaluate: evaluate.n = 128" in authors
    # Not the authors' 256 rows of ~6.9 per question in file order: 64 questions x 4 variants,
    # shuffled (the profile's header lists every difference).
    assert "# train: batch_unit = rows, rows per question = 4, questions per step = 64" in authors
    assert "data.train_batch_size=64" in authors and "data.shuffle=True" in authors
    assert "actor_rollout_ref.actor.loss_agg_mode=token-mean" in authors
    # vLLM's share of a card: the authors' 0.6 (0.8 did not fit a 4B model beside the actor).
    for lines in (paper, authors):
        assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.6" in lines
        assert not any(line.startswith("# DOES NOT FIT") for line in lines)
    assert any(line.startswith("# memory per card (GiB of 79.6): rollout 57.2") for line in paper)


def test_the_authors_profile_names_the_verl_versions_differences() -> None:
    """Their vendored verl 0.5.0.dev vs 0.9.1: token-mean per micro-batch vs per mini-batch,
    synchronous rollout with max_num_seqs 1,024 vs the async agent loop with 256."""
    header = "\n".join(
        line
        for line in (SOURCE / "profiles" / "paper-authors-hparams.yaml").read_text().splitlines()
        if line.startswith("#")
    )
    for named in (
        "verl 0.5.0.dev",
        "token-mean: theirs averages the tokens of each micro-batch",
        "one token mean over the whole",
        "rollout.max_num_seqs=1024",
        "asynchronous agent loop",
        "rollout.gpu_memory_utilization=0.6",
        "train.anchoring_diagnostic",
    ):
        assert named in header, named
