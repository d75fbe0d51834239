"""verl checkpoints to Hugging Face folders (copy, merge fallback), and the trainer's resumable
checkpoints: every N steps and at the quarters (exported), once the step is logged, with the
trainer's own state, restored on resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from tagrpo.algorithms.avspo import AdaptiveThreshold, AVSPOConfig
from tagrpo.backends.models import load_causal_lm
from tagrpo.config.params import embedded
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.training.warmstart import TinyModelConfig, build_model
from tagrpo.verl_ext.checkpoint import (
    actor_dir,
    export_checkpoint,
    export_hf,
    exported_checkpoints,
    has_weights,
    merge_command,
)
from tagrpo.verl_ext.resume import LATEST_CHECKPOINT
from tagrpo.verl_ext.settings import MethodSettings
from tagrpo.verl_ext.trainer import TRAINER_STATE_FILE, TATrainer

AVSPO = AVSPOConfig(trigger="adaptive")


@pytest.fixture(scope="module")
def actor_policy():
    tokenizer = train_tokenizer(["What is 3 + 4?", "The answer is 7."] * 20, vocab_size=280)
    torch.manual_seed(0)
    model = build_model(tokenizer, embedded(TinyModelConfig, hidden_size=16, intermediate_size=32))
    return model, tokenizer


def write_actor(root: Path, step: int, actor_policy, weights: bool = True) -> Path:
    """What verl leaves for one step: actor/huggingface with config, tokenizer (and weights)."""
    model, tokenizer = actor_policy
    hf = actor_dir(root, step) / "huggingface"
    if weights:
        model.save_pretrained(hf)
    else:
        model.config.save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    (actor_dir(root, step) / "model_world_size_1_rank_0.pt").write_bytes(b"shard")
    return actor_dir(root, step)


def same_weights(a, b) -> bool:
    first, second = a.state_dict(), b.state_dict()
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_export_copies_a_full_hf_folder_and_keeps_other_entries(tmp_path, actor_policy) -> None:
    actor = write_actor(tmp_path / "ckpt", 8, actor_policy)
    target = tmp_path / "models" / "p"
    (target / "checkpoints" / "checkpoint-025").mkdir(parents=True)
    assert export_hf(actor, target) == "copy"
    loaded, tokenizer = load_causal_lm(target)
    assert same_weights(loaded, actor_policy[0])
    assert tokenizer.eos_token == actor_policy[1].eos_token
    assert (target / "checkpoints" / "checkpoint-025").is_dir()
    assert not (tmp_path / "models" / ".p.partial").exists()


def test_export_merges_shards_with_verls_merger_when_no_weights(tmp_path, actor_policy) -> None:
    actor = write_actor(tmp_path / "ckpt", 3, actor_policy, weights=False)
    calls = []

    def fake_merger(argv, check):
        calls.append(argv)
        actor_policy[0].save_pretrained(Path(argv[argv.index("--target_dir") + 1]))

    target = tmp_path / "out"
    assert export_hf(actor, target, runner=fake_merger) == "merge"
    assert calls == [merge_command(actor, tmp_path / ".out.partial")]
    assert calls[0][1:6] == ["-m", "verl.model_merger", "merge", "--backend", "fsdp"]
    assert (target / "tokenizer.json").exists() and has_weights(target)

    def broken_merger(argv, check):
        Path(argv[argv.index("--target_dir") + 1]).mkdir(parents=True)

    with pytest.raises(RuntimeError, match="no loadable"):
        export_hf(actor, tmp_path / "other", runner=broken_merger)


class FakeLogger:
    """verl's Tracking as fit() uses it: ``log(data=..., step=...)``."""

    def __init__(self, events: list) -> None:
        self.events = events

    def log(self, data, step) -> None:
        self.events.append(("log", step))


def checkpointing_trainer(tmp_path: Path, actor_policy, monkeypatch, events: list) -> TATrainer:
    """The tagrpo_sync trainer with verl's save replaced by writing what verl leaves."""

    def fake_verl_save(self):  # stands in for verl's FSDP save of self.global_steps
        events.append(("save", self.global_steps))
        write_actor(Path(self.config.trainer.default_local_dir), self.global_steps, actor_policy)
        tracker = Path(self.config.trainer.default_local_dir) / LATEST_CHECKPOINT
        tracker.write_text(str(self.global_steps))

    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", fake_verl_save)
    trainer = TATrainer.__new__(TATrainer)
    trainer.ta = MethodSettings("avspo", group_size=8, n_neighbours=3, estimator_config=AVSPO)
    trainer.estimator_state = AdaptiveThreshold(AVSPO)
    trainer.responses_generated = 0.0
    trainer.total_training_steps = 10
    trainer.config = OmegaConf.create(
        {
            "trainer": {
                "default_local_dir": str(tmp_path / "ckpt"),
                "tagrpo": {
                    "export_dir": str(tmp_path / "models" / "p"),
                    "checkpoints": [0.25, 0.5, 0.75, 1.0],
                    "checkpoint_every": 4,
                },
            }
        }
    )
    trainer.logger = FakeLogger(events)
    trainer.on_train_begin()
    return trainer


def test_trainer_checkpoints_every_n_steps_and_exports_the_quarters_after_logging(
    tmp_path, actor_policy, monkeypatch
):
    events: list = []
    trainer = checkpointing_trainer(tmp_path, actor_policy, monkeypatch, events)
    for step in range(1, 11):  # fit(): step, _save_checkpoint(), metrics, dump, log
        trainer.global_steps = step
        trainer._save_checkpoint()
        trainer.logger.log(data={"x": 1.0}, step=step)
    saves = [step for kind, step in events if kind == "save"]
    assert saves == [3, 4, 5, 8, 10]  # every 4, and ceil(f * 10) for the quarters
    # Each checkpoint only once its step is logged: a resume never loses a logged step.
    for step in saves:
        assert events.index(("log", step)) == events.index(("save", step)) - 1
    export = tmp_path / "models" / "p"
    assert exported_checkpoints(export) == [
        "checkpoint-025",
        "checkpoint-050",
        "checkpoint-075",
        "checkpoint-100",
    ]
    final, _ = load_causal_lm(export)
    assert same_weights(final, actor_policy[0])
    # The final policy is checkpoint-100's files, not a second copy.
    weights = next(export.glob("*.safetensors"))
    assert (
        weights.stat().st_ino
        == (export / "checkpoints/checkpoint-100" / weights.name).stat().st_ino
    )
    state = json.loads((tmp_path / "ckpt/global_step_8" / TRAINER_STATE_FILE).read_text())
    assert state == {
        "responses_generated": 0.0,
        "estimator_state": {"tau": 0.5, "previous_reward": None},
    }


def test_a_resumed_trainer_restores_its_state_and_the_missing_export(
    tmp_path, actor_policy, monkeypatch
):
    """The state a run carries across steps (cumulative responses, AVSPO's threshold) comes back
    from the checkpoint; a quarter's export a crash prevented is made on resume."""
    events: list = []
    trainer = checkpointing_trainer(tmp_path, actor_policy, monkeypatch, events)
    trainer.global_steps = 3
    trainer.responses_generated = 768.0
    trainer.estimator_state.update(acr=0.4, mean_reward=0.3)
    trainer._save_checkpoint()
    trainer.logger.log(data={}, step=3)
    export = tmp_path / "models" / "p"
    shutil.rmtree(export / "checkpoints" / "checkpoint-025")  # killed between save and export

    def fake_verl_load(self):
        self.global_steps = int(
            (Path(self.config.trainer.default_local_dir) / LATEST_CHECKPOINT).read_text()
        )

    monkeypatch.setattr(PPOTrainer, "_load_checkpoint", fake_verl_load)
    resumed = checkpointing_trainer(tmp_path, actor_policy, monkeypatch, [])
    resumed._load_checkpoint()
    assert resumed.global_steps == 3 and resumed.responses_generated == 768.0
    assert resumed.estimator_state.state_dict() == trainer.estimator_state.state_dict()
    assert resumed.estimator_state.tau != AVSPO.tau_init
    assert exported_checkpoints(export) == ["checkpoint-025"]


def test_export_checkpoint_writes_the_final_policy_only_when_final(tmp_path, actor_policy) -> None:
    actor = write_actor(tmp_path / "ckpt", 2, actor_policy)
    written = export_checkpoint(actor, tmp_path / "m", "checkpoint-050", final=False)
    assert written == [tmp_path / "m" / "checkpoints" / "checkpoint-050"]
    assert not (tmp_path / "m" / "config.json").exists()
