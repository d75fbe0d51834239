"""The tagrpo_sync trainer's advantage path over a faked TransferQueue.

Records are built with verl's own ``list_of_dict_to_tensordict`` (jagged response tensors, as
the V1 rollout writes them) under shuffled ``{uid}_{session}_{i}`` keys plus one padding row.
Joint (TA-GRPO) and per-rephrasing (TA-GRPO*) grouping are checked against hand-computed
advantages and zero-gradient rates; AVSPO through verl's registry; DS bookkeeping; rollout
dumps at the quarter steps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from transfer_queue import KVBatchMeta
from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

import tagrpo.verl_ext.trainer as trainer_module
from tagrpo.algorithms import AdaptiveThreshold, AVSPOConfig, avspo_advantages
from tagrpo.data.prompts import chat_messages
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.verl_ext.estimators import VERL_ESTIMATORS
from tagrpo.verl_ext.settings import MethodSettings
from tagrpo.verl_ext.trainer import TATrainer, parse_key, trajectory_layout

G = 8
EPS = 1e-6


class FakeTQ:
    """An in-memory TransferQueue with the two calls the trainer makes."""

    def __init__(self, records: dict[str, dict[str, Any]]) -> None:
        self.records = records

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        return list_of_dict_to_tensordict(
            [{field: self.records[key][field] for field in select_fields} for key in keys]
        )

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        for name in fields.keys():  # noqa: SIM118 - iterating a TensorDict yields rows
            for key, value in zip(keys, fields[name].unbind(), strict=True):
                self.records[key][name] = value
        return KVBatchMeta(keys=list(keys), tags=[{} for _ in keys], partition_id=partition_id)


def rewards_u1(session: int) -> float:
    """q0 all correct, rephrasing 1 half, rephrasing 2 all wrong, rephrasing 3 all correct."""
    variant, sample = divmod(session, G)
    return {0: 1.0, 1: float(sample < 4), 2: 0.0, 3: 1.0}[variant]


def make_batch(reward_fns: dict[str, Any], per_question: int, seed: int = 0):
    """Records and a shuffled batch (plus a padding row) for the given per-uid reward rules."""
    records, keys = {}, []
    for uid, reward_of in reward_fns.items():
        for session in range(per_question):
            length = 1 + session % 5
            scores = torch.zeros(length)
            scores[-1] = reward_of(session)
            key = f"{uid}_{session}_0"
            records[key] = {
                "response_mask": torch.ones(length, dtype=torch.int64),
                "rm_scores": scores,
            }
            keys.append(key)
    order = np.random.default_rng(seed).permutation(len(keys))
    keys = [keys[i] for i in order]
    records["padf00d_0_0"] = {
        "response_mask": torch.zeros(1, dtype=torch.int64),
        "rm_scores": torch.zeros(1),
    }
    keys.append("padf00d_0_0")
    tags = [{"is_padding": key.startswith("pad")} for key in keys]
    return records, KVBatchMeta(keys=keys, tags=tags, partition_id="train")


def make_trainer(method: str, monkeypatch, records, avspo: dict | None = None) -> TATrainer:
    config = AVSPOConfig(**(avspo or {})) if method == "avspo" else None
    settings = MethodSettings(method, G, 3, config)
    trainer = TATrainer.__new__(TATrainer)
    algorithm = {
        "adv_estimator": settings.spec.estimator,
        "norm_adv_by_std_in_grpo": True,
        "tagrpo": settings.as_config(),
    }
    actor = {"ppo_mini_batch_size": 1, "ppo_epochs": 1}
    trainer.config = OmegaConf.create(
        {
            "algorithm": algorithm,
            "data": {"train_batch_size": 2},
            "actor_rollout_ref": {"actor": actor},
        }
    )
    trainer.ta = settings
    trainer.estimator_state = AdaptiveThreshold(config) if config is not None else None
    monkeypatch.setattr(trainer_module, "tq", FakeTQ(records))
    return trainer


def written_advantages(records) -> dict[str, float]:
    """The scalar advantage of each trajectory, checking it is constant over its tokens."""
    values = {}
    for key, record in records.items():
        advantages = record["advantages"]
        assert advantages.shape == record["response_mask"].shape
        assert torch.equal(record["returns"], advantages)
        values[key] = float(advantages[0])
        assert torch.allclose(advantages, torch.full_like(advantages, values[key]))
    return values


def test_keys_parse_into_uid_session_index() -> None:
    assert parse_key("3f2a-11_17_0") == ("3f2a-11", 17, 0)
    settings = MethodSettings("ta_grpo_star", G, 3)
    layout = trajectory_layout(
        ["b_9_0", "a_0_0", "pad_0_0", "b_31_0"], [{}, {}, {"is_padding": True}, {}], settings
    )
    assert layout.real.tolist() == [True, True, False, True]
    assert layout.question.tolist() == [0, 1, 0] and layout.variant.tolist() == [1, 0, 3]


@pytest.mark.parametrize("method", ["ta_grpo", "ta_grpo_unanchored"])
def test_joint_methods_normalise_over_the_32_responses(monkeypatch, method: str) -> None:
    records, batch = make_batch({"u1": rewards_u1, "u2": lambda s: 0.0}, 4 * G)
    trainer = make_trainer(method, monkeypatch, records)
    metrics: dict[str, float] = {}
    out = trainer._compute_advantage(batch, metrics)
    assert out.keys == batch.keys
    advantages = written_advantages(records)
    std = math.sqrt((20 * 0.375**2 + 12 * 0.625**2) / 31)  # 20 of 32 correct, sample std
    for key, value in advantages.items():
        uid, session, _ = parse_key(key)
        if uid == "u1":
            reward = rewards_u1(session)
            assert value == pytest.approx((reward - 0.625) / (std + EPS), rel=1e-5)
        else:  # u2: every response wrong; the padding row gets no advantage
            assert value == 0.0
    # q0's all-correct responses of u1 get a positive advantage: the joint group is mixed.
    assert advantages["u1_0_0"] > 0
    assert metrics["original/zero_gradient_rate"] == 1.0
    assert metrics["original/all_correct_rate"] == 0.5
    assert metrics["neighbours/zero_gradient_rate"] == 0.5
    assert metrics["joint/zero_gradient_rate"] == 0.5
    assert metrics["train/zero_gradient_rate"] == 0.5
    assert metrics["optimiser_updates"] == 2.0  # train_batch_size 2 / ppo_mini_batch_size 1
    assert metrics["train/effective_zero_gradient_rate"] == 0.5
    assert metrics["reward_mean"] == pytest.approx(20 / 64)
    assert metrics["responses_generated"] == 64.0


def test_a_question_with_failed_sessions_stops_the_run(monkeypatch) -> None:
    """verl pads the trajectories of failed agent-loop sessions; the trainer refuses them."""
    records, batch = make_batch({"u1": rewards_u1, "u2": lambda s: 0.0}, 4 * G)
    position = batch.keys.index("u2_5_0")
    batch = KVBatchMeta(
        keys=[k for i, k in enumerate(batch.keys) if i != position],
        tags=[t for i, t in enumerate(batch.tags) if i != position],
        partition_id="train",
    )
    trainer = make_trainer("ta_grpo", monkeypatch, records)
    with pytest.raises(RuntimeError, match=r"rollout\.n=32 \(uid u2: 31\): agent-loop sessions"):
        trainer._compute_advantage(batch, {})
    assert all("advantages" not in record for record in records.values())


def test_ta_grpo_star_normalises_each_rephrasing_on_its_own(monkeypatch) -> None:
    records, batch = make_batch({"u1": rewards_u1, "u2": lambda s: 0.0}, 4 * G)
    trainer = make_trainer("ta_grpo_star", monkeypatch, records)
    metrics: dict[str, float] = {}
    trainer._compute_advantage(batch, metrics)
    advantages = written_advantages(records)
    std = math.sqrt(8 * 0.25 / 7)  # rephrasing 1 of u1: 4 of 8 correct
    for key, value in advantages.items():
        uid, session, _ = parse_key(key)
        if uid == "u1" and session // G == 1:
            expected = (rewards_u1(session) - 0.5) / (std + EPS)
            assert value == pytest.approx(expected, rel=1e-5)
        else:  # every other (question, variant) group has equal rewards: zero gradient
            assert value == 0.0
    assert advantages["u1_0_0"] == 0.0
    assert metrics["original/zero_gradient_rate"] == 1.0
    assert metrics["joint/zero_gradient_rate"] == 0.5
    assert metrics["train/zero_gradient_rate"] == 7 / 8
    assert metrics["train/effective_zero_gradient_rate"] == 7 / 8
    assert metrics["train/groups"] == 8.0


def test_grpo_groups_per_question_and_ds_counts_verls_evictions(monkeypatch) -> None:
    records, batch = make_batch({"a": lambda s: float(s < 3), "b": lambda s: 1.0}, G)
    trainer = make_trainer("grpo_ds", monkeypatch, records)
    metrics = {
        "training/filter_groups/evicted_samples": 3,
        "training/filter_groups/discarded_surplus_samples": 1,
    }
    trainer._compute_advantage(batch, metrics)
    advantages = written_advantages(records)
    std = math.sqrt((3 * (5 / 8) ** 2 + 5 * (3 / 8) ** 2) / 7)
    assert advantages["a_0_0"] == pytest.approx((1 - 3 / 8) / (std + EPS), rel=1e-5)
    assert advantages["a_7_0"] == pytest.approx((0 - 3 / 8) / (std + EPS), rel=1e-5)
    assert advantages["b_4_0"] == 0.0
    assert metrics["ds/pre_filter_zero_gradient_rate"] == 3 / 6
    assert metrics["ds/dropped_groups"] == 3.0
    assert metrics["responses_generated"] == 16 + (3 + 1) * G
    assert "neighbours/zero_gradient_rate" not in metrics


def test_avspo_runs_through_verls_registry_with_the_trainers_threshold(monkeypatch) -> None:
    assert core_algos.get_adv_estimator_fn("avspo") is VERL_ESTIMATORS["avspo"]
    rules = {"a": lambda s: float(s < 4), "b": lambda s: 0.0, "c": lambda s: 1.0}
    records, batch = make_batch(rules, G)
    trainer = make_trainer("avspo", monkeypatch, records, {"trigger": "always"})
    metrics: dict[str, float] = {}
    trainer._compute_advantage(batch, metrics)
    advantages = written_advantages(records)
    keys = [k for k in batch.keys if not k.startswith("pad")]
    rewards = np.array([rules[parse_key(k)[0]](parse_key(k)[1]) for k in keys])
    ids = np.array(["abc".index(parse_key(k)[0]) for k in keys])
    expected = avspo_advantages(rewards, ids, 3, AVSPOConfig(trigger="always"), 0.5)
    for key, value in zip(keys, expected.advantages, strict=True):
        assert advantages[key] == pytest.approx(value, rel=1e-5, abs=1e-6)
    # Collapsed groups get a signal: all-wrong below zero, all-correct above.
    assert advantages["b_0_0"] < 0 < advantages["c_0_0"]
    assert metrics["avspo/acr"] == pytest.approx(2 / 3)
    assert metrics["avspo/triggered"] == 1.0 and metrics["avspo/augmented_groups"] == 2.0
    assert metrics["avspo/tau"] == 0.5
    assert metrics["train/zero_gradient_rate"] == pytest.approx(2 / 3)
    assert metrics["train/effective_zero_gradient_rate"] == 0.0
    assert trainer.estimator_state.tau == pytest.approx(0.5 - 0.01 * 2 / 3)  # no improvement yet


def test_avspo_through_verls_stock_compute_advantage() -> None:
    """With verl's own trainer path (DataProto + compute_advantage) the estimator is found by
    name and gives the core's advantages for groups given by uid."""
    rewards = np.array([1, 0, 0, 0, 0, 0, 1, 1, 1, 1], dtype=np.float32)
    uids = np.array(["x"] * 4 + ["y"] * 2 + ["z"] * 4, dtype=object)
    scores = torch.zeros(10, 3)
    scores[:, -1] = torch.from_numpy(rewards)
    data = DataProto.from_single_dict(
        {"token_level_rewards": scores, "response_mask": torch.ones(10, 3), "uid": uids}
    )
    config = OmegaConf.create({"tagrpo": {"avspo": {"trigger": "always", "anchor_reward": 0.2}}})
    out = compute_advantage(data, adv_estimator="avspo", config=config)
    ids = np.array([0] * 4 + [1] * 2 + [2] * 4)
    expected = avspo_advantages(rewards, ids, 3, AVSPOConfig(trigger="always", anchor_reward=0.2))
    np.testing.assert_allclose(
        out.batch["advantages"][:, 0].numpy(), expected.advantages, rtol=1e-5
    )
    assert torch.equal(out.batch["advantages"][:, 0], out.batch["advantages"][:, 2])
    with pytest.raises(ValueError, match="norm_adv_by_std_in_grpo"):
        VERL_ESTIMATORS["avspo"](
            scores, torch.ones(10, 3), uids, {"norm_adv_by_std_in_grpo": False}
        )


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["What is 3 + 4?", "Compute 3 plus 4.", "The answer is \\boxed{7}."]
    return train_tokenizer([*texts, *(chat_messages(t)[0]["content"] for t in texts)] * 20, 300)


def test_rollout_dumps_only_at_the_quarter_steps(monkeypatch, tmp_path, tokenizer) -> None:
    q0, rephrasing = chat_messages("What is 3 + 4?"), chat_messages("Compute 3 plus 4.")

    def ids(messages):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    answer = tokenizer("The answer is \\boxed{7}.", add_special_tokens=False)["input_ids"]
    records, keys = {}, []
    for session in (0, 9):  # variant 0 and variant 1 of question "q"
        response = [*answer, tokenizer.eos_token_id]
        records[f"q_{session}_0"] = {
            "prompts": torch.tensor(ids(q0)),  # ta_grpo: stored prompt is q0's
            "responses": torch.tensor(response),
            "response_mask": torch.ones(len(response), dtype=torch.int64),
            "rm_scores": torch.tensor([0.0] * (len(response) - 1) + [1.0]),
            "advantages": torch.full((len(response),), 0.5 if session else -0.25),
            "old_log_probs": -torch.arange(len(response), dtype=torch.float32) - session,
            "ref_log_prob": torch.full((len(response),), -0.5),
            "raw_prompt": q0,
            "extra_info": {"id": "math/q", "rephrased_prompts": [rephrasing] * 3},
            "extra_fields": {
                "reward_extra_info": {"acc": 1.0, "pred": "7"},
                "tagrpo_generation_prompt_ids": ids(rephrasing if session else q0),
                "tagrpo_weights_step": 3,
            },
        }
        keys.append(f"q_{session}_0")
    batch = KVBatchMeta(keys=keys, tags=[{}, {}], partition_id="train")
    trainer = make_trainer("ta_grpo", monkeypatch, records)
    trainer.tokenizer = tokenizer
    trainer.total_training_steps = 8
    trainer.use_reference_policy = True
    trainer.config = OmegaConf.merge(
        trainer.config,
        {
            "trainer": {"tagrpo": {"checkpoints": [0.25, 0.5, 0.75, 1.0]}},
            "actor_rollout_ref": {"rollout": {"response_length": 64, "calculate_log_probs": False}},
            "data": {"apply_chat_template_kwargs": {}},
        },
    )
    written = []
    for step in range(1, 9):
        trainer.global_steps = step
        trainer._log_rollout_data(batch, {}, str(tmp_path))
        written.append(sorted(p.name for p in tmp_path.iterdir()))
    assert written[0] == [] and written[1] == ["checkpoint-025.parquet"]
    assert written[-1] == [f"checkpoint-{n}.parquet" for n in ("025", "050", "075", "100")]
    frame = pd.read_parquet(tmp_path / "checkpoint-050.parquet")
    assert frame["step"].tolist() == [4, 4]
    assert frame["variant"].tolist() == [0, 1] and frame["sample_index"].tolist() == [0, 1]
    template = tokenizer.apply_chat_template
    assert frame["prompt_used"].tolist() == [
        template(q0, add_generation_prompt=True, tokenize=False),
        template(rephrasing, add_generation_prompt=True, tokenize=False),
    ]
    assert (
        frame["scored_under"].tolist()
        == [template(q0, add_generation_prompt=True, tokenize=False)] * 2
    )
    assert frame["response"].tolist() == ["The answer is \\boxed{7}."] * 2
    assert frame["reward"].tolist() == [1.0, 1.0] and frame["pred"].tolist() == ["7", "7"]
    assert frame["advantage"].tolist() == [-0.25, 0.5]
    assert frame["finished"].tolist() == [True, True]
    assert frame["question_id"].tolist() == ["math/q", "math/q"]
    # What verl computed for each trajectory, token by token (the verl-only columns).
    length = len(answer) + 1
    assert frame["key"].tolist() == ["q_0_0", "q_9_0"] and frame["session"].tolist() == [0, 9]
    assert [list(x) for x in frame["prompt_ids"]] == [ids(q0), ids(q0)]
    assert [list(x) for x in frame["generation_prompt_ids"]] == [ids(q0), ids(rephrasing)]
    assert list(frame["response_ids"][1]) == [*answer, tokenizer.eos_token_id]
    assert list(frame["old_log_probs"][1]) == [-9.0 - i for i in range(length)]
    assert list(frame["ref_log_probs"][0]) == [-0.5] * length
    assert list(frame["token_advantages"][1]) == [0.5] * length
    assert frame["rollout_log_probs"].isna().all()  # not asked of the engine (ta_grpo)
    assert frame["weights_step"].tolist() == [3, 3]


@pytest.mark.parametrize("method", ["grpo", "grpo_ds", "ta_grpo", "avspo"])
def test_trainer_builds_from_the_composed_config_with_verls_sync_buffer(method, tmp_path) -> None:
    """The real constructor (no Ray): sync replay buffer, DS filter on `acc` only for DS."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl_helpers import paper_config, run_for

    from tagrpo.verl_ext.overrides import build_overrides

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        overrides = build_overrides(run_for(method, tmp_path), paper_config())
        config = compose("ppo_trainer", overrides=overrides)
        wrong = compose("ppo_trainer", overrides=[*overrides, "algorithm.use_kl_in_reward=True"])
    GlobalHydra.instance().clear()
    trainer = TATrainer(config)
    assert trainer.trainer_mode == "sync" and type(trainer.replay_buffer) is ReplayBuffer
    ds = method == "grpo_ds"
    assert trainer.replay_buffer.filter_groups_metric == ("acc" if ds else None)
    assert trainer.replay_buffer.gen_batch_size == (1 if ds else 256)
    assert trainer.ta.method == method
    assert (trainer.estimator_state is not None) == (method == "avspo")  # its adaptive tau
    with pytest.raises(ValueError, match="use_kl_in_reward must be False"):
        TATrainer(wrong)


def test_the_negative_control_reaches_verls_registry_with_flipped_grpo_advantages() -> None:
    """``grpo_flipped`` is found by name in verl's registry and gives minus verl's GRPO."""
    assert core_algos.get_adv_estimator_fn("grpo_flipped") is VERL_ESTIMATORS["grpo_flipped"]
    rewards = np.array([1, 0, 0, 0, 1, 1, 1, 1], dtype=np.float32)
    uids = np.array(["x"] * 4 + ["y"] * 4, dtype=object)
    scores = torch.zeros(8, 3)
    scores[:, -1] = torch.from_numpy(rewards)

    def advantages(estimator: str) -> np.ndarray:
        data = DataProto.from_single_dict(
            {"token_level_rewards": scores, "response_mask": torch.ones(8, 3), "uid": uids}
        )
        out = compute_advantage(data, adv_estimator=estimator, config=OmegaConf.create({}))
        return out.batch["advantages"].numpy().copy()

    flipped = advantages("grpo_flipped")
    scale = math.sqrt(0.75 / 3) + EPS
    expected = [-0.75 / scale, 0.25 / scale, 0.25 / scale, 0.25 / scale, 0.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(flipped[:, 0], expected, rtol=1e-5)
    np.testing.assert_allclose(flipped, -advantages("grpo"), rtol=1e-6)


def test_the_tagrpo_sync_trainer_runs_the_negative_control_with_flipped_advantages(
    monkeypatch,
) -> None:
    """Through the trainer's own advantage path: the method's estimator (grpo_flipped) found in
    verl's registry, groups per uid, every advantage minus GRPO's."""
    rules = {"a": lambda s: float(s < 2), "b": lambda s: 0.0}  # a: 2 of 8 correct
    records, batch = make_batch(rules, G)
    trainer = make_trainer("grpo_flipped", monkeypatch, records)
    metrics: dict[str, float] = {}
    trainer._compute_advantage(batch, metrics)
    advantages = written_advantages(records)
    std = math.sqrt((2 * 0.75**2 + 6 * 0.25**2) / 7)
    assert advantages["a_0_0"] == pytest.approx(-0.75 / (std + EPS), rel=1e-5)  # correct: down
    assert advantages["a_5_0"] == pytest.approx(0.25 / (std + EPS), rel=1e-5)  # wrong: up
    assert advantages["b_3_0"] == 0.0
    assert metrics["train/zero_gradient_rate"] == 0.5
