"""The verl command of every method: Hydra composition with ``--cfg job``, Appendix B values,
the per-method differences, verl's own config validation, and the train stage's dry run."""

from __future__ import annotations

import contextlib
import io
import shlex
import sys
from typing import Any

import pytest
import yaml
from hydra.core.global_hydra import GlobalHydra
from verl_helpers import MODEL, ROOT, paper_config, run_for

from tagrpo.algorithms import METHODS
from tagrpo.config.params import ConfigError, config_with, validate_params
from tagrpo.verl_ext.dry_run import evaluation_lines, preflight_lines
from tagrpo.verl_ext.launcher import build_command
from tagrpo.verl_ext.overrides import build_overrides, hydra_value
from tagrpo.verl_ext.settings import refuse_rollout_correction, validate_run

# method: (rollout.n, default agent loop, adv_estimator, DS on, calculate_log_probs)
EXPECTED = {
    "grpo": (8, "single_turn_agent", "grpo", False, True),
    "grpo_ds": (8, "single_turn_agent", "grpo", True, True),
    "grpo_x4": (32, "single_turn_agent", "grpo", False, True),
    "grpo_x4_ds": (32, "single_turn_agent", "grpo", True, True),
    "ta_grpo_star": (32, "tagrpo_agent", "grpo", False, True),
    "ta_grpo": (32, "tagrpo_agent", "grpo", False, False),
    "ta_grpo_unanchored": (32, "tagrpo_agent", "grpo", False, True),
    "avspo": (8, "single_turn_agent", "avspo", False, True),
    "grpo_flipped": (8, "single_turn_agent", "grpo_flipped", False, True),
}


def cfg_job(overrides: list[str]) -> dict[str, Any]:
    """``python -m verl.trainer.main_ppo --cfg job <overrides>``, in process (imports once)."""
    from verl.trainer.main_ppo import main

    argv, output = sys.argv, io.StringIO()
    GlobalHydra.instance().clear()
    try:
        sys.argv = ["main_ppo", "--cfg", "job", *overrides]
        with contextlib.redirect_stdout(output):
            main()
    finally:
        sys.argv = argv
        GlobalHydra.instance().clear()
    return yaml.safe_load(output.getvalue())


@pytest.fixture(scope="module")
def composed(tmp_path_factory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("verl")
    params = paper_config()
    env = {"MLFLOW_TRACKING_URI": "sqlite:////x y/mlflow.db"}
    return {m: cfg_job(build_overrides(run_for(m, tmp, **env), params)) for m in METHODS}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_cfg_job_carries_appendix_b(composed, method: str) -> None:
    cfg = composed[method]
    actor = cfg["actor_rollout_ref"]["actor"]
    rollout = cfg["actor_rollout_ref"]["rollout"]
    assert cfg["data"]["max_prompt_length"] == 512
    assert cfg["data"]["max_response_length"] == 3072
    assert rollout["temperature"] == 1.0
    assert actor["use_kl_loss"] is True and actor["kl_loss_type"] == "low_var_kl"
    assert actor["kl_loss_coef"] == 0.001
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"]) == (0.2, 0.2)
    assert cfg["data"]["train_batch_size"] == 256
    assert actor["ppo_mini_batch_size"] == 128
    assert actor["optim"]["lr"] == 1e-6
    assert actor["optim"]["lr_warmup_steps_ratio"] == 0.1
    assert actor["optim"]["lr_scheduler_type"] == "cosine"
    assert cfg["trainer"]["total_epochs"] == 2
    assert cfg["algorithm"]["use_kl_in_reward"] is False
    assert cfg["trainer"]["v1"]["trainer_mode"] == "tagrpo_sync"
    assert cfg["trainer"]["use_v1"] is True
    assert (cfg["trainer"]["n_gpus_per_node"], cfg["trainer"]["nnodes"]) == (4, 1)
    assert cfg["actor_rollout_ref"]["model"]["path"] == MODEL
    assert cfg["reward"]["custom_reward_function"]["path"] == "pkg://tagrpo.verl_ext.reward"
    assert cfg["algorithm"]["tagrpo"]["method"] == method
    assert (
        cfg["algorithm"]["tagrpo"]["group_size"],
        cfg["algorithm"]["tagrpo"]["n_neighbours"],
    ) == (
        8,
        3,
    )
    assert "hf_model" in actor["checkpoint"]["save_contents"]
    assert cfg["data"]["seed"] == 3 and rollout["seed"] == 3
    env = cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env == {
        "VERL_USE_EXTERNAL_MODULES": "tagrpo.verl_ext.plugin",
        "MLFLOW_TRACKING_URI": "sqlite:////x y/mlflow.db",
    }
    assert cfg["data"]["train_files"].endswith("a dir/train.parquet")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_cfg_job_differs_per_method_as_the_paper_says(composed, method: str) -> None:
    n, agent, estimator, ds, log_probs = EXPECTED[method]
    cfg = composed[method]
    rollout = cfg["actor_rollout_ref"]["rollout"]
    assert rollout["n"] == n
    assert rollout["agent"]["default_agent_loop"] == agent
    assert cfg["algorithm"]["adv_estimator"] == estimator
    assert cfg["algorithm"]["filter_groups"]["enable"] is ds
    if ds:
        assert cfg["algorithm"]["filter_groups"]["metric"] == "acc"
    assert rollout["calculate_log_probs"] is log_probs
    if method == "avspo":
        assert cfg["algorithm"]["tagrpo"]["avspo"]["trigger"] == "adaptive"
    else:
        assert "avspo" not in cfg["algorithm"]["tagrpo"]


def test_verl_validate_config_and_ours_accept_every_method(tmp_path) -> None:
    """The composed config passes verl's own pre-Ray validation and the trainer's checks."""
    from hydra import compose, initialize_config_module
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    params = paper_config()
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        for method in sorted(METHODS):
            cfg = compose(
                "ppo_trainer", overrides=build_overrides(run_for(method, tmp_path), params)
            )
            assert need_reference_policy(cfg) and not need_critic(cfg)
            validate_config(cfg, use_reference_policy=True, use_critic=False)
            settings = validate_run(cfg)
            assert settings.rollout_n == EXPECTED[method][0]
    GlobalHydra.instance().clear()


def test_validate_run_rejects_a_config_that_is_not_the_method(tmp_path) -> None:
    from hydra import compose, initialize_config_module

    params = paper_config()
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        base = build_overrides(run_for("ta_grpo", tmp_path), params)
        wrong_n = compose("ppo_trainer", overrides=[*base, "actor_rollout_ref.rollout.n=8"])
        with pytest.raises(ValueError, match=r"rollout.n must be 32"):
            validate_run(wrong_n)
        wrong_estimator = compose("ppo_trainer", overrides=[*base, "algorithm.adv_estimator=rloo"])
        with pytest.raises(ValueError, match="adv_estimator must be grpo"):
            validate_run(wrong_estimator)
        bypass = compose(
            "ppo_trainer", overrides=[*base, "algorithm.rollout_correction.bypass_mode=True"]
        )
        with pytest.raises(ValueError, match=r"under the original question q0.*bypass_mode"):
            validate_run(bypass)
        star = build_overrides(run_for("ta_grpo_star", tmp_path), params)
        star_bypass = compose(
            "ppo_trainer", overrides=[*star, "algorithm.rollout_correction.bypass_mode=True"]
        )
        assert validate_run(star_bypass).method == "ta_grpo_star"  # scored under q^n: allowed
    GlobalHydra.instance().clear()


def test_rollout_correction_refusal_is_specific_to_ta_grpo() -> None:
    for key, value in [("bypass_mode", True), ("rollout_is", "token"), ("rollout_rs", "seq")]:
        algorithm = {"rollout_correction": {key: value}}
        with pytest.raises(ValueError, match=key):
            refuse_rollout_correction("ta_grpo", algorithm)
        for method in ("grpo", "ta_grpo_star", "grpo_x4"):
            refuse_rollout_correction(method, algorithm)
    refuse_rollout_correction("ta_grpo", {"rollout_correction": {"bypass_mode": False}})
    refuse_rollout_correction("ta_grpo", {"rollout_correction": None})


def test_hydra_values_are_quoted_only_when_needed() -> None:
    assert hydra_value(True) == "True" and hydra_value(None) == "null"
    assert hydra_value(1e-6) == "1e-06" and hydra_value(256) == "256"
    assert hydra_value("vllm") == "vllm"
    assert hydra_value("seq-mean-token-mean") == "seq-mean-token-mean"
    assert hydra_value("/a b/c.parquet") == "'/a b/c.parquet'"
    assert hydra_value("null") == "'null'"
    assert hydra_value("it's") == "'it\\'s'"
    assert hydra_value(["model", "hf_model"]) == "[model,hf_model]"


def test_batch_must_split_over_the_gpus(tmp_path) -> None:
    params = config_with({"verl.n_gpus_per_node": 3}, paper_config())
    with pytest.raises(ValueError, match="do not split over 3 GPUs"):
        build_overrides(run_for("grpo", tmp_path), params)
    raw = paper_config().model_dump(mode="json")
    with pytest.raises(ConfigError, match=r"verl\.gpus: unknown key"):
        validate_params({**raw, "verl": {**raw["verl"], "gpus": 4}})


def test_dry_run_prints_the_command_and_touches_nothing(monkeypatch, capsys) -> None:
    import stages.train as train_stage

    config = config_with({"verl.model": MODEL}, paper_config())
    monkeypatch.setattr(train_stage, "load_config", lambda: config)
    assert train_stage.main(["--method", "ta_grpo", "--seed", "1", "--dry-run"]) == {}
    printed = capsys.readouterr().out
    command_text, marker, evaluation = printed.partition("# evaluate: ")
    # After the command: the settings the evaluate stage will sample with, then the
    # preflight's memory per card and cost (tagrpo/verl_ext/cost.py).
    preflight = preflight_lines(config, "ta_grpo", "ta_grpo-s1", MODEL, ROOT)
    assert marker + evaluation == "\n".join([*evaluation_lines(config), *preflight]) + "\n"
    assert preflight[0].startswith("# memory per card (GiB of 79.6): rollout 57.2")
    assert "evaluate.prompt_format = chat\n" in evaluation
    words = shlex.split(command_text.replace("\\\n", " "))
    env = dict(word.split("=", 1) for word in words[: words.index(sys.executable)])
    argv = words[words.index(sys.executable) :]
    expected = build_command("ta_grpo", config, 1, "ta_grpo-s1", ROOT)
    assert argv == expected.argv and env == expected.env
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert env["VERL_USE_EXTERNAL_MODULES"] == "tagrpo.verl_ext.plugin"
    assert "actor_rollout_ref.rollout.n=32" in argv
    assert f"trainer.default_local_dir='{ROOT / 'checkpoints/verl/ta_grpo-s1'}'" in argv
    assert not (ROOT / "checkpoints" / "verl" / "ta_grpo-s1").exists()


def test_dry_run_is_refused_for_the_local_backend(monkeypatch) -> None:
    import stages.train as train_stage

    config = config_with({"train.backend": "local"}, paper_config())
    monkeypatch.setattr(train_stage, "load_config", lambda: config)
    with pytest.raises(SystemExit):
        train_stage.main(["--method", "grpo", "--dry-run"])


def test_chat_template_options_reach_verls_data_config(tmp_path) -> None:
    """The same `common.chat_template_kwargs` the vLLM evaluation uses (test_vllm_backend)."""
    no_thinking = {"common.chat_template_kwargs": {"enable_thinking": False}}
    params = config_with(no_thinking, paper_config())
    cfg = cfg_job(build_overrides(run_for("ta_grpo", tmp_path), params))
    assert cfg["data"]["apply_chat_template_kwargs"] == {"enable_thinking": False}
    steps = config_with({"train.steps": 5}, paper_config())
    assert (
        cfg_job(build_overrides(run_for("grpo", tmp_path), steps))["trainer"][
            "total_training_steps"
        ]
        == 5
    )


def test_the_overrides_read_the_typed_train_section(tmp_path) -> None:
    """Every train value reaches verl from the typed section: mini_batches and warmup_ratio
    (which the old dict path read with defaults 1 and 0.0 that disagreed with params.yaml)."""
    config = config_with(
        {"train.mini_batches": 4, "train.warmup_ratio": 0.25, "train.min_lr_ratio": 0.05},
        paper_config(),
    )
    overrides = build_overrides(run_for("grpo", tmp_path), config)
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=64" in overrides  # 256 / 4
    assert "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.25" in overrides
    assert "actor_rollout_ref.actor.optim.min_lr_ratio=0.05" in overrides
    assert "++trainer.tagrpo.checkpoints=[0.25,0.5,0.75,1.0]" in overrides


def test_an_epsilon_verl_cannot_use_is_refused(tmp_path) -> None:
    """verl's grpo estimator hard-codes 1e-6 and algorithm.tagrpo carries none: another
    train.epsilon would be ignored on the verl backend, so it is refused."""
    config = config_with({"train.epsilon": 1e-4}, paper_config())
    with pytest.raises(ValueError, match=r"train\.epsilon = 0\.0001: the verl backend"):
        build_overrides(run_for("grpo", tmp_path), config)


def test_a_fraction_of_an_epoch_is_refused_unless_steps_are_set(tmp_path) -> None:
    """verl's trainer.total_epochs is an integer: 1.5 epochs would silently train 1."""
    with pytest.raises(ValueError, match=r"train\.epochs = 1\.5: verl trains whole epochs"):
        build_overrides(
            run_for("grpo", tmp_path), config_with({"train.epochs": 1.5}, paper_config())
        )
    steps = config_with({"train.epochs": 1.5, "train.steps": 3}, paper_config())
    overrides = build_overrides(run_for("grpo", tmp_path), steps)
    assert "trainer.total_training_steps=3" in overrides


def test_verl_processes_refuse_settings_the_launcher_did_not_write() -> None:
    """No fallback values inside verl: a missing key is an error naming it."""
    from tagrpo.verl_ext.settings import MethodSettings, checkpoint_fractions

    written = {"method": "ta_grpo", "group_size": 8, "n_neighbours": 3}
    assert MethodSettings.from_algorithm({"tagrpo": written}).rollout_n == 32
    for key in ("method", "group_size", "n_neighbours"):
        partial = {k: v for k, v in written.items() if k != key}
        with pytest.raises(ValueError, match=rf"algorithm\.tagrpo\.{key} is not set"):
            MethodSettings.from_algorithm({"tagrpo": partial})
    with pytest.raises(ValueError, match=r"algorithm\.tagrpo\.avspo is not set"):
        MethodSettings.from_algorithm({"tagrpo": {**written, "method": "avspo"}})
    with pytest.raises(ValueError, match=r"avspo takes its settings"):
        MethodSettings("avspo", 8, 3)
    assert checkpoint_fractions({"tagrpo": {"checkpoints": [0.5, 1.0]}}) == (0.5, 1.0)
    with pytest.raises(ValueError, match=r"trainer\.tagrpo\.checkpoints is not set"):
        checkpoint_fractions({"tagrpo": {"export_dir": "x"}})
