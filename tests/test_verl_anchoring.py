"""The anchoring pass of ``tagrpo_sync`` (issue 22, point 6) on a fake batch.

A fake TransferQueue (with partitions) and a fake actor whose log-probability of every token is
-0.1 x the length of the prompt it is given: the log-ratio of a neighbour response is then
-0.1 x (|q0| - |q^n|) on each of its tokens, computable by hand. Checked: what the actor is
given (the neighbour responses only, under the other prompt: its ids, positions and tags), what
the metrics come out as, that the partition is cleared and the stored records are untouched,
and that ``train.anchoring_diagnostic: false`` skips the pass.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from transfer_queue import KVBatchMeta
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

import tagrpo.verl_ext.trainer as trainer_module
from tagrpo.algorithms.anchoring import anchoring_shift
from tagrpo.verl_ext import ANCHORING_PARTITION
from tagrpo.verl_ext.settings import MethodSettings
from tagrpo.verl_ext.trainer import (
    TATrainer,
    anchoring_metrics,
    counterpart_prompt_ids,
    neighbour_rows,
    optimiser_updates_per_step,
    trajectory_layout,
)

G, N = 2, 3
Q0 = [1, 2, 3, 4]  # q0's prompt ids: 4 tokens
# Rephrasing n's prompt: 4 + n tokens (so under the fake actor d = -0.1 x (4 - (4 + n)) = 0.1 n).
REPHRASING = {n: [50 + n] * (4 + n) for n in range(1, N + 1)}
SLOPE = 0.1


class FakeTQ:
    """An in-memory TransferQueue: records per (partition, key), every field or some."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        self.cleared: list[str] = []

    def put_rows(self, partition: str, keys: list[str], rows: list[dict[str, Any]]) -> None:
        for key, row in zip(keys, rows, strict=True):
            self.records.setdefault((partition, key), {}).update(row)

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        rows = [self.records[(partition_id, key)] for key in keys]
        fields = select_fields or list(rows[0])
        return list_of_dict_to_tensordict([{name: row[name] for name in fields} for row in rows])

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        for name in fields.keys():  # noqa: SIM118 - iterating a TensorDict yields rows
            value = fields.get(name)
            rows = list(value.unbind()) if isinstance(value, torch.Tensor) else value.tolist()
            self.put_rows(partition_id, list(keys), [{name: row} for row in rows])
        tags = list(tags or [{}] * len(keys))
        return KVBatchMeta(keys=list(keys), tags=tags, partition_id=partition_id)

    def kv_clear(self, keys, partition_id):
        for key in keys:
            del self.records[(partition_id, key)]
        self.cleared.append(partition_id)


class FakeActor:
    """``compute_log_prob``: -SLOPE x prompt length for every position of prompt + response,
    written back as verl's tqbridge does (``log_probs`` in the meta's partition)."""

    def __init__(self, tq: FakeTQ) -> None:
        self.tq = tq
        self.seen: list[tuple[list[int], list[int], dict[str, Any]]] = []

    def compute_log_prob(self, meta: KVBatchMeta) -> KVBatchMeta:
        assert meta.partition_id == ANCHORING_PARTITION
        assert meta.extra_info["compute_loss"] is False
        for key, tag in zip(meta.keys, meta.tags, strict=True):
            record = self.tq.records[(meta.partition_id, key)]
            prompt = record["prompts"].tolist()
            assert record["input_ids"].tolist() == prompt + record["responses"].tolist()
            assert record["position_ids"].tolist() == list(range(len(record["input_ids"])))
            assert record["attention_mask"].tolist() == [1] * len(record["input_ids"])
            self.seen.append((key, prompt, dict(tag)))
            record["log_probs"] = torch.full((len(record["input_ids"]),), -SLOPE * len(prompt))
        return meta


def make_batch(method: str) -> tuple[FakeTQ, KVBatchMeta, MethodSettings]:
    """One question, (N+1)G sessions with responses of 1 + session % 3 tokens, and a padding
    row; old log-probs as the fake actor would give under the stored prompt."""
    settings = MethodSettings(method, G, N)
    anchored = settings.spec.anchor == "original"
    tq, keys, rows, tags = FakeTQ(), [], [], []
    for session in range(settings.rollout_n):
        variant = settings.variant_of(session)
        generation = Q0 if variant == 0 else REPHRASING[variant]
        stored = Q0 if anchored else generation
        response = [100 + session] * (1 + session % 3)
        ids = stored + response
        keys.append(f"u1_{session}_0")
        tags.append({"is_padding": False, "prompt_len": len(stored), "seq_len": len(ids)})
        rows.append(
            {
                "prompts": torch.tensor(stored),
                "responses": torch.tensor(response),
                "input_ids": torch.tensor(ids),
                "position_ids": torch.arange(len(ids)),
                "attention_mask": torch.ones(len(ids), dtype=torch.int64),
                "response_mask": torch.ones(len(response), dtype=torch.int64),
                "old_log_probs": torch.full((len(response),), -SLOPE * len(stored)),
                "extra_fields": {
                    "tagrpo_generation_prompt_ids": generation,
                    "tagrpo_original_prompt_ids": Q0,
                },
            }
        )
    keys.append("padf00d_0_0")
    tags.append({"is_padding": True, "prompt_len": 4, "seq_len": 5})
    rows.append({**rows[0], "extra_fields": {}})
    tq.put_rows("train", keys, rows)
    return tq, KVBatchMeta(keys=keys, tags=tags, partition_id="train"), settings


@pytest.mark.parametrize("method", ["ta_grpo", "ta_grpo_star", "ta_grpo_unanchored"])
def test_the_anchoring_pass_scores_each_neighbour_response_under_the_other_prompt(
    monkeypatch, method
) -> None:
    tq, batch, settings = make_batch(method)
    before = {k: dict(v) for k, v in tq.records.items()}
    actor = FakeActor(tq)
    monkeypatch.setattr(trainer_module, "tq", tq)
    trainer = TATrainer.__new__(TATrainer)
    trainer.ta = settings
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"temperature": 1.0}}})
    trainer.actor_rollout_wg = actor
    metrics = trainer._anchoring_shift(batch)

    anchored = method == "ta_grpo"
    for key, prompt, tag in actor.seen:
        variant = settings.variant_of(int(key.split("_")[1]))
        # the other prompt of each neighbour response
        expected = REPHRASING[variant] if anchored else Q0
        assert prompt == expected, key
        assert tag["prompt_len"] == len(expected)
    # Only the N*G neighbour responses are scored again: not q0's G (their two prompts are
    # one), not verl's padding row.
    assert [key for key, _, _ in actor.seen] == [f"u1_{s}_0" for s in range(G, settings.rollout_n)]
    assert tq.cleared == [ANCHORING_PARTITION]
    assert tq.records.keys() == before.keys()  # the pass's records are gone, the batch's kept
    for key, record in before.items():
        assert torch.equal(tq.records[key]["prompts"], record["prompts"])

    # By hand: response tokens 1 + session % 3; d = 0.1 n on each token of a response to q^n.
    tokens, log_weights, groups = [], [], []
    for session in range(G, settings.rollout_n):
        variant = settings.variant_of(session)
        length = 1 + session % 3
        tokens += [SLOPE * variant] * length
        log_weights.append(SLOPE * variant * length)
        groups.append(variant)
    tokens = np.array(tokens)
    weights = np.exp(log_weights)
    assert metrics["anchoring/neighbour_responses"] == N * G
    assert metrics["anchoring/neighbour_tokens"] == tokens.size
    assert metrics["anchoring/log_ratio_mean"] == pytest.approx(tokens.mean())
    assert metrics["anchoring/log_ratio_p99"] == pytest.approx(np.percentile(tokens, 99))
    assert metrics["anchoring/ess_fraction"] == pytest.approx(
        weights.sum() ** 2 / (weights**2).sum() / weights.size
    )
    # sessions 2..7: lengths 3,1 | 2,3 | 1,2 -> per group weights e^{0.3}, e^{0.1} etc.
    by_group = [np.exp([0.1 * 3, 0.1 * 1]), np.exp([0.2 * 2, 0.2 * 3]), np.exp([0.3 * 1, 0.3 * 2])]
    assert metrics["anchoring/ess_fraction_group_mean"] == pytest.approx(
        np.mean([w.sum() ** 2 / (w**2).sum() / 2 for w in by_group])
    )


def test_neighbour_rows_skip_q0_and_padding() -> None:
    settings = MethodSettings("ta_grpo_star", 1, 1)
    keys = ["u1_0_0", "pad_0_0", "u1_1_0", "u2_1_0", "u2_0_0"]
    tags = [{}, {"is_padding": True}, {}, {}, {}]
    assert neighbour_rows(trajectory_layout(keys, tags, settings)).tolist() == [2, 3]


def test_metrics_follow_the_anchor() -> None:
    settings = MethodSettings("ta_grpo_star", 1, 1)
    f64 = torch.float64
    stored = [torch.tensor([math.log(0.5), math.log(0.25)], dtype=f64)]
    other = [torch.tensor([math.log(0.25), math.log(0.25)], dtype=f64)]
    masks = [torch.ones(2)]
    # TA-GRPO*: stored = under q^1, other = under q0: d = [ln 0.5, 0]
    metrics = anchoring_metrics(stored, other, masks, [0], [1], settings, ["u1 session 1"])
    assert metrics == anchoring_shift([np.log([0.25, 0.25])], [np.log([0.5, 0.25])], [1])
    assert metrics["anchoring/log_ratio_mean"] == pytest.approx(-math.log(2) / 2)
    with pytest.raises(RuntimeError, match=r"u1 session 1: \(3,\) response tokens"):
        anchoring_metrics(stored, other, [torch.ones(3)], [0], [1], settings, ["u1 session 1"])


def test_a_neighbour_response_without_its_prompt_ids_stops_the_run() -> None:
    labels = ["u1 session 1", "u1 session 2"]
    with pytest.raises(RuntimeError, match="u1 session 2 has no tagrpo_generation_prompt_ids"):
        counterpart_prompt_ids([{"tagrpo_generation_prompt_ids": [7]}, {}], labels, True)
    assert counterpart_prompt_ids(
        [{"tagrpo_original_prompt_ids": [1]}, {"tagrpo_original_prompt_ids": [7, 8]}],
        labels,
        anchored=False,
    ) == [[1], [7, 8]]


def test_the_anchoring_diagnostic_switched_off_scores_nothing_more(monkeypatch) -> None:
    """``train.anchoring_diagnostic: false`` (``trainer.tagrpo.anchoring``): verl's old log-prob
    pass only, no anchoring metrics."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    tq, batch, settings = make_batch("ta_grpo")
    actor = FakeActor(tq)
    monkeypatch.setattr(trainer_module, "tq", tq)
    monkeypatch.setattr(PPOTrainer, "_compute_old_log_prob", lambda self, batch, metrics: batch)
    trainer = TATrainer.__new__(TATrainer)
    trainer.ta = settings
    trainer.actor_rollout_wg = actor
    for enabled, expected in ((False, 0), (True, N * G)):
        trainer.config = OmegaConf.create(
            {
                "actor_rollout_ref": {"rollout": {"temperature": 1.0}},
                "trainer": {"tagrpo": {"anchoring": enabled}},
            }
        )
        metrics: dict[str, float] = {}
        actor.seen.clear()
        trainer._compute_old_log_prob(batch, metrics)
        assert len(actor.seen) == expected
        assert ("anchoring/ess_fraction" in metrics) is enabled


def test_optimiser_updates_per_step_from_verls_config() -> None:
    config = OmegaConf.create(
        {
            "data": {"train_batch_size": 64},
            "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 32, "ppo_epochs": 1}},
        }
    )
    assert optimiser_updates_per_step(config) == 2
    config.actor_rollout_ref.actor.ppo_epochs = 3
    assert optimiser_updates_per_step(config) == 6
    config.actor_rollout_ref.actor.ppo_mini_batch_size = 48
    with pytest.raises(ValueError, match="not a multiple"):
        optimiser_updates_per_step(config)
