"""The reward function through verl's custom-reward hook, and registration through verl's
plugin mechanism (``VERL_USE_EXTERNAL_MODULES``) in a fresh interpreter."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.reward import get_custom_reward_fn

from tagrpo.plumbing.paths import project_root
from tagrpo.verl_ext import reward as reward_module


@pytest.fixture(scope="module")
def score_fn():
    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://tagrpo.verl_ext.reward",
                    "name": "compute_score",
                    "reward_kwargs": {"grading_workers": 1, "item_timeout_s": 5.0},
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    yield fn
    reward_module.close_pools()


def score(fn, **kwargs):
    async def go():
        return await fn(**kwargs)

    return asyncio.run(go())


def test_reward_grades_with_the_grading_module(score_fn) -> None:
    correct = score(
        score_fn,
        data_source="math",
        solution_str="So x = 1/2, i.e. $\\boxed{\\frac{1}{2}}$.",
        ground_truth="0.5",
        extra_info={"answer_kind": "math"},
    )
    assert correct == {"score": 1.0, "acc": 1.0, "pred": "\\frac{1}{2}"}
    wrong = score(
        score_fn, data_source="math", solution_str="$\\boxed{3}$", ground_truth="4", extra_info={}
    )
    assert wrong == {"score": 0.0, "acc": 0.0, "pred": "3"}
    missing = score(
        score_fn, data_source="math", solution_str="I think 4.", ground_truth="4", extra_info=None
    )
    assert missing == {"score": 0.0, "acc": 0.0, "pred": ""}


def test_reward_grades_multiple_choice_by_letter(score_fn) -> None:
    # The benchmark name decides when the row does not say (gpqa_diamond: option letters).
    by_source = score(
        score_fn,
        data_source="gpqa_diamond",
        solution_str="The correct option is \\boxed{C}.",
        ground_truth="C",
        extra_info={},
    )
    assert by_source == {"score": 1.0, "acc": 1.0, "pred": "C"}
    wrong_letter = score(
        score_fn,
        data_source="gpqa_diamond",
        solution_str="\\boxed{B}",
        ground_truth="C",
        extra_info={"answer_kind": "multiple_choice"},
    )
    assert wrong_letter["score"] == 0.0 and wrong_letter["pred"] == "B"


def test_concurrent_requests_share_batches(score_fn) -> None:
    """Many coroutines at once (as verl's reward loop issues them) are graded in few batches."""
    cases = [(f"$\\boxed{{{i}}}$", str(i if i % 3 else i + 1)) for i in range(40)]

    async def go():
        batcher = reward_module._batcher(1, 5.0)
        before = batcher.batches
        results = await asyncio.gather(
            *(
                score_fn(data_source="math", solution_str=s, ground_truth=g, extra_info={})
                for s, g in cases
            )
        )
        return results, batcher.batches - before

    results, batches = asyncio.run(go())
    assert [r["score"] for r in results] == [0.0 if i % 3 == 0 else 1.0 for i in range(40)]
    assert 1 <= batches <= 2


def test_plugin_registers_everything_in_a_fresh_verl_process() -> None:
    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "print(get_adv_estimator_fn('avspo').__module__)\n"
        "print(get_trainer_cls('tagrpo_sync').__name__)\n"
        "print(_agent_loop_registry['tagrpo_agent']['_target_'])\n"
    )
    env = {
        **os.environ,
        "VERL_USE_EXTERNAL_MODULES": "tagrpo.verl_ext.plugin",
        "PYTHONPATH": str(project_root()),
    }
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=540
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [
        "tagrpo.verl_ext.estimators",
        "TATrainer",
        "tagrpo.verl_ext.agent_loop.TAAgentLoop",
    ]
