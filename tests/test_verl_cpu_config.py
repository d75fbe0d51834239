"""The CPU configuration of a verl run: derived from params, refused where it does not fit.

``profiles/verl-cpu.yaml`` composes with verl's own config for every method and passes verl's
validation; the CPU-only settings (logical GPU, one storage unit / reward / agent worker,
sdpa, no remove-padding, tensor parallel 1, fsdp2, fp32, device cpu) come from the launcher;
the CPU modules are loaded (platform first) only for CPU runs; ``hf`` on a GPU run and vLLM on
a CPU run are refused naming the profile to use.
"""

from __future__ import annotations

import pytest
from hydra.core.global_hydra import GlobalHydra
from verl_helpers import ROOT, paper_config, run_for

from tagrpo.algorithms import METHODS
from tagrpo.config.engines import VerlSettings
from tagrpo.config.params import ConfigError, Params, config_with, validate_params
from tagrpo.config.profiles import merged_with_profile
from tagrpo.verl_ext import PLUGIN_MODULE
from tagrpo.verl_ext.device import CPU_MODULES, LOGICAL_CPUS, run_device
from tagrpo.verl_ext.launcher import build_command
from tagrpo.verl_ext.overrides import build_overrides, hydra_value

PLATFORM_MODULE = "tagrpo.verl_ext.cpu_platform"


def cpu_params() -> Params:
    """The params under profiles/verl-cpu.yaml, as the train stage hands them to the launcher."""
    merged = merged_with_profile(ROOT / "profiles" / "verl-cpu.yaml", ROOT / "params.yaml")
    return validate_params(merged)


def compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            return compose("ppo_trainer", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("method", sorted(METHODS))
def test_cpu_profile_composes_and_passes_verls_validation(method: str, tmp_path) -> None:
    from verl.utils.config import validate_config

    from tagrpo.verl_ext.settings import validate_run

    cfg = compose(build_overrides(run_for(method, tmp_path), cpu_params()))
    validate_config(cfg, use_reference_policy=True, use_critic=False)
    validate_run(cfg)
    arr = cfg.actor_rollout_ref
    assert cfg.trainer.device == "cpu" and cfg.trainer.n_gpus_per_node == 1
    assert cfg.ray_kwargs.ray_init.num_gpus == 1  # a logical GPU for the placement groups
    assert cfg.ray_kwargs.ray_init.num_cpus == LOGICAL_CPUS
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
    assert cfg.reward.num_workers == 1 and arr.rollout.agent.num_workers == 1
    assert arr.rollout.name == "hf" and arr.rollout.tensor_model_parallel_size == 1
    assert arr.rollout.max_num_seqs == cpu_params().verl.max_num_seqs
    assert arr.model.override_config.attn_implementation == "sdpa"
    assert arr.model.use_remove_padding is False
    assert arr.actor.strategy == "fsdp2" and arr.ref.strategy == "fsdp2"
    for role in (arr.actor, arr.ref):
        assert dict(role.fsdp_config.mixed_precision) == {
            "param_dtype": "fp32",
            "reduce_dtype": "fp32",
            "buffer_dtype": "fp32",
        }
        assert role.fsdp_config.use_torch_compile is False
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    modules = env.VERL_USE_EXTERNAL_MODULES.split(",")
    assert modules[0] == PLATFORM_MODULE  # before any verl trainer module, in every worker
    assert modules == [*CPU_MODULES, PLUGIN_MODULE]
    assert env.VERL_PLATFORM == "cpu"


def test_gpu_runs_never_load_the_cpu_modules(tmp_path) -> None:
    params = paper_config()
    overrides = build_overrides(run_for("ta_grpo", tmp_path), params)
    joined = " ".join(overrides)
    assert "cpu_platform" not in joined and "hf_rollout" not in joined
    assert "VERL_PLATFORM" not in joined and "trainer.device=cpu" not in joined
    assert "actor_rollout_ref.rollout.name=vllm" in overrides
    # Hydra writes its output next to the run's data, not into outputs/ of the project root.
    run_dir = hydra_value(str(tmp_path / "a dir" / "hydra"))
    assert f"hydra.run.dir={run_dir}" in overrides
    command = build_command("ta_grpo", params, 0, "p", tmp_path, model="m")
    assert command.env["VERL_USE_EXTERNAL_MODULES"] == PLUGIN_MODULE
    assert not [arg for arg in command.argv if "include_dashboard" in arg]  # Ray's dashboard
    assert "VERL_PLATFORM" not in command.env


def test_cpu_command_carries_the_platform_and_private_temp_dir(tmp_path) -> None:
    command = build_command(
        "grpo", cpu_params(), 0, "p", tmp_path, model="m", temp_dir=tmp_path / "run"
    )
    assert command.env["VERL_USE_EXTERNAL_MODULES"].split(",")[0] == PLATFORM_MODULE
    assert command.env["VERL_PLATFORM"] == "cpu"
    assert command.env["TMPDIR"] == str(tmp_path / "run")
    ray_temp = hydra_value(str(tmp_path / "run" / "ray"))
    assert f"++ray_kwargs.ray_init._temp_dir={ray_temp}" in command.argv
    forwarded = hydra_value(str(tmp_path / "run"))
    assert f"++ray_kwargs.ray_init.runtime_env.env_vars.TMPDIR={forwarded}" in command.argv
    assert "++ray_kwargs.ray_init.include_dashboard=False" in command.argv  # CPU: no dashboard


@pytest.mark.parametrize(
    ("device", "engine", "message"),
    [
        ("cuda", "hf", "profiles/paper.yaml"),
        ("cpu", "vllm", "profiles/verl-cpu.yaml"),
        ("cpu", "sglang", "profiles/verl-cpu.yaml"),
    ],
)
def test_engine_that_does_not_fit_the_device_is_refused(device, engine, message) -> None:
    # model_construct skips the settings model's own check: the launcher's is tested alone.
    with pytest.raises(ValueError, match=message):
        run_device(VerlSettings.model_construct(device=device, rollout_engine=engine))


def test_dry_run_refuses_hf_on_a_gpu_run(monkeypatch, tmp_path, capsys) -> None:
    from tagrpo.verl_ext.launcher import run_training

    paper = paper_config()
    unchecked = paper.verl.model_copy(update={"rollout_engine": "hf"})  # model_copy: no check
    params = paper.model_copy(update={"verl": unchecked})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    with pytest.raises(ValueError, match="rollout_engine: hf is the CPU engine"):
        run_training("grpo", 0, "grpo-s0", params, dry_run=True)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("device", "engine", "message"),
    [("cuda", "hf", "profiles/paper.yaml"), ("cpu", "vllm", "profiles/verl-cpu.yaml")],
)
def test_params_check_refuses_an_engine_that_does_not_fit_the_device(
    device, engine, message
) -> None:
    """The typed params refuse the combination when the file is loaded, before any stage."""
    merged = merged_with_profile(ROOT / "profiles" / "verl-cpu.yaml", ROOT / "params.yaml")
    merged["verl"].update(device=device, rollout_engine=engine)
    with pytest.raises(ConfigError, match=message):
        validate_params(merged)


def test_cpu_profile_trains_the_five_methods_with_one_seed() -> None:
    merged = merged_with_profile(ROOT / "profiles" / "verl-cpu.yaml", ROOT / "params.yaml")
    config = validate_params(merged)
    assert config.train.backend == "verl" and config.verl.device == "cpu"
    assert config.runs.policies() == [
        "grpo-s0",
        "grpo_ds-s0",
        "ta_grpo_star-s0",
        "ta_grpo-s0",
        "avspo-s0",
    ]
    assert config.runs.data_scaling.methods == []


def test_unknown_device_and_engine_are_errors() -> None:
    with pytest.raises(ConfigError, match=r"verl\.device = 'tpu': Input should be 'cuda' or 'cpu'"):
        config_with({"verl.device": "tpu"}, paper_config())
    with pytest.raises(ConfigError, match=r"verl\.rollout_engine = 'naive': Input should be"):
        config_with({"verl.rollout_engine": "naive"}, paper_config())
    assert run_device(paper_config().verl) == "cuda"
    assert run_device(cpu_params().verl) == "cpu"


def test_micro_batches_that_do_not_divide_are_refused_before_verl_starts(tmp_path) -> None:
    """verl would assert in the first step; the command is not even built."""
    # grpo: 4 questions x 8 = 32 per step, 16 per mini-batch
    params = config_with({"verl.log_prob_micro_batch_size_per_gpu": 64}, cpu_params())
    with pytest.raises(ValueError, match=r"log_prob_micro_batch_size_per_gpu=64 does not divide"):
        build_overrides(run_for("grpo", tmp_path), params)
    params = config_with({"verl.micro_batch_size_per_gpu": 32}, cpu_params())
    with pytest.raises(ValueError, match=r"micro_batch_size_per_gpu=32 does not divide the 16"):
        build_overrides(run_for("grpo", tmp_path), params)
    for method in METHODS:  # the profile's sizes fit every method
        build_overrides(run_for(method, tmp_path), cpu_params())
