"""The paper's Figure 1/3 mechanism on the embedded default: joint groups collapse less.

Runs the first training steps of ``grpo`` and ``ta_grpo`` from the built base policy on the
default training set with the real grader, and compares, step by step, the zero-gradient rate
of TA-GRPO's joint (N+1)G groups with that of GRPO's G groups on the originals. Uses this
tree's ``base_model`` and ``check_equivalence`` outputs when they are built; otherwise (a
fresh clone, as in CI) builds them with ``dvc repro check_equivalence`` in a scratch copy
(about 4 minutes on 2 cores: the base policy's SFT dominates).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scratch_project import run_checked, scratch_project

from tagrpo.config.params import load_config
from tagrpo.pipeline.paths import project_root

# Time limit: a fresh clone builds the default's base policy: about 4 min idle.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]

STEPS = 4


@pytest.fixture(scope="module")
def default_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project root holding the default profile's base policy and rephrased training set."""
    root = project_root()
    train = load_config().train
    needed = [root / train.model / "config.json", root / train.input]
    if all(path.exists() for path in needed):
        return root
    scratch = tmp_path_factory.mktemp("default")
    env = scratch_project(scratch)
    run_checked(["dvc", "repro", "check_equivalence"], scratch, env, timeout=35 * 60)
    return scratch


def _rates(method: str, config, grade, root: Path) -> list[dict[str, float]]:
    from tagrpo.backends.models import load_causal_lm
    from tagrpo.data.training_set import load_training_questions
    from tagrpo.training.trainer import TrainConfig, Trainer

    train = config.train
    questions = load_training_questions(
        root / train.input, train.n_neighbours, train.neighbours, limit=train.questions
    )
    model, tokenizer = load_causal_lm(root / train.model)
    run = TrainConfig(method, STEPS, 0, train, config.local, config.common.torch_threads)
    trainer = Trainer(run, model, tokenizer, questions, grade)
    return [trainer.step(step).metrics for step in range(1, STEPS + 1)]


def test_ta_grpo_joint_groups_collapse_less_than_grpo_original_groups(default_root) -> None:
    from tagrpo.grading.grade_fn import make_grade_fn

    config = load_config(default_root / "params.yaml")
    with make_grade_fn(workers=2) as grade:
        grpo = _rates("grpo", config, grade, default_root)
        ta = _rates("ta_grpo", config, grade, default_root)
    grpo_original = [m["original/zero_gradient_rate"] for m in grpo]
    ta_joint = [m["joint/zero_gradient_rate"] for m in ta]
    print(f"\nper-step zero-gradient rate: grpo original {grpo_original}, ta_grpo joint {ta_joint}")
    # TA-GRPO's training groups are its joint groups.
    assert [m["train/zero_gradient_rate"] for m in ta] == ta_joint
    assert np.mean(ta_joint) < np.mean(grpo_original)
    assert all(j <= g for j, g in zip(ta_joint, grpo_original, strict=True))
    # Same questions per step (same seed): TA-GRPO's own q0 groups collapse like GRPO's.
    assert np.mean([m["original/zero_gradient_rate"] for m in ta]) > np.mean(ta_joint)
