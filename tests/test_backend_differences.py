"""Where the local backend and verl agree and where they differ (issue 22, point 7): the rows of
the table in ``tagrpo/verl_ext/README.md`` that no other test pins, and the table itself (every
test it names exists)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from tiny_policy import boxed_grade, tiny_policy, tiny_questions
from verl_helpers import paper_config, run_for

import tagrpo.training.trainer as trainer_module
from tagrpo.config.params import config_with
from tagrpo.verl_ext.overrides import build_overrides, verl_training_steps

ROOT = Path(__file__).resolve().parents[1]
VERL = Path(__import__("verl").__file__).parent


def test_step_counts_local_rounds_up_verl_floors(tmp_path) -> None:
    from tagrpo.config.common import MiniWorldSettings
    from tagrpo.config.data import SyntheticSettings
    from tagrpo.config.params import embedded
    from tagrpo.data.schema import write_questions
    from tagrpo.miniworld.dataset import build_miniworld
    from tagrpo.training.train_stage import plan_training

    train = build_miniworld(
        embedded(SyntheticSettings, train_size=80), embedded(MiniWorldSettings)
    )["train"].questions
    (tmp_path / "data").mkdir()
    write_questions(train, str(tmp_path / "data" / "train.parquet"))
    base = {"train.input": "data/train.parquet", "train.neighbours": "miniworld"}
    for batch, epochs, local, verl in ((8, 2, 20, 20), (6, 2, 27, 26), (6, 1.5, 20, 13)):
        config = config_with({**base, "train.batch_questions": batch, "train.epochs": epochs})
        assert plan_training(config, "grpo", 0, root=tmp_path).steps == local
        assert verl_training_steps(80, batch, epochs) == verl


def test_verls_step_rule_is_the_installed_verls() -> None:
    source = (VERL / "trainer" / "ppo" / "v1" / "trainer_base.py").read_text()
    loader = source[source.index("self.train_dataloader = StatefulDataLoader(") :]
    assert "drop_last=True" in loader[: loader.index(")\n")]
    assert (
        "self.steps_per_epoch = len(self.train_dataset) // self.config.data.train_batch_size"
        in source
    )
    assert "total_training_steps = self.steps_per_epoch * self.config.trainer.total_epochs" in (
        source
    )


def test_verl_balances_trajectories_across_ranks_by_default() -> None:
    # verl's _balance_batch reorders a step's trajectories by length over the data-parallel
    # ranks: a question's group can land in several mini-batches (the launcher keeps it on).
    defaults = yaml.safe_load((VERL / "trainer" / "config" / "ppo_trainer.yaml").read_text())
    assert defaults["trainer"]["balance_batch"] is True
    overrides = build_overrides(run_for("grpo", Path("/tmp/x")), paper_config())
    assert not [o for o in overrides if "balance_batch" in o]


def test_local_mini_batches_hold_whole_questions(monkeypatch) -> None:
    rows_per_call: list[int] = []
    original = trainer_module.policy_loss

    def recording(*args, **kwargs):
        rows_per_call.append(int(args[2].numel()))  # the advantages of the micro-batch
        return original(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "policy_loss", recording)
    model, tokenizer = tiny_policy(seed=3)
    config = trainer_module.TrainConfig.create(
        "grpo", steps=1, batch_questions=3, mini_batches=2, group_size=2, max_new_tokens=4
    )
    trainer_module.Trainer(config, model, tokenizer, tiny_questions(), boxed_grade).step(1)
    # 3 questions x 2 responses in 2 mini-batches of whole questions: 2 + 1 questions
    assert rows_per_call == [4, 2]


@pytest.mark.parametrize("loss_agg_mode", ["seq-mean-token-mean", "token-mean"])
def test_shared_hyperparameters_reach_verl(loss_agg_mode) -> None:
    params = config_with(
        {
            "train.loss_agg_mode": loss_agg_mode,
            "train.kl_coef": 0.003,
            "train.clip_low": 0.2,
            "train.clip_high": 0.28,
            "train.temperature": 0.7,
        },
        base=paper_config(),
    )
    overrides = set(build_overrides(run_for("ta_grpo", Path("/tmp/x")), params))
    for expected in (
        f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode}",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.kl_loss_coef=0.003",
        "algorithm.use_kl_in_reward=False",
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "actor_rollout_ref.rollout.temperature=0.7",
        "actor_rollout_ref.actor.ppo_epochs=1",
    ):
        assert expected in overrides, expected


def test_the_readme_table_names_tests_that_exist() -> None:
    text = (ROOT / "tagrpo" / "verl_ext" / "README.md").read_text()
    table = text[text.index("## Where the two backends differ") :]
    table = table[: table.index("\n## ", 3)]
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", table)
    assert len(named) >= 15
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert all("tests/" in row for row in rows[1:]), "every row names its test"
    for path, name in named:
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name} does not exist"
