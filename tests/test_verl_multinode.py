"""One node or several: the Ray cluster a verl run uses, in its overrides and environment.

One node (``verl.nnodes: 1``, no ``RAY_ADDRESS``): a private cluster in the run's temp dir (Ray's
``_temp_dir``, every process's ``TMPDIR``), so nothing of the run lands elsewhere. Several
nodes, or ``RAY_ADDRESS`` set: the run joins the cluster ``ray start`` runs
(``ray_init.address=auto``) with neither, since Ray finds that cluster's address under its own
temp dir (``<temp dir>/ray_current_cluster``: with the private one it finds none and starts a
single-node cluster, and verl stops with "Total available GPUs ... is less than total desired
GPUs"). The run's marker (``TAGRPO_VERL_RUN``) is set in both modes.
"""

from __future__ import annotations

import pytest
from hydra.core.global_hydra import GlobalHydra
from verl_helpers import paper_config

from tagrpo.config.engines import VerlSettings
from tagrpo.config.params import config_with
from tagrpo.verl_ext.launcher import build_command, ray_cluster
from tagrpo.verl_ext.overrides import hydra_value
from tagrpo.verl_ext.process import RUN_MARKER

ADDRESS_OVERRIDE = "++ray_kwargs.ray_init.address=auto"
TEMP_DIR_OVERRIDE = "++ray_kwargs.ray_init._temp_dir="
WORKER_ENV = "++ray_kwargs.ray_init.runtime_env.env_vars."


def command_for(tmp_path, nnodes: int, environ: dict[str, str]):
    config = config_with({"verl.nnodes": nnodes, "verl.n_gpus_per_node": 8}, paper_config())
    temp = tmp_path / "tagrpo-verl-test"
    command = build_command(
        "ta_grpo", config, 0, "ta_grpo-s0", tmp_path, model="m", temp_dir=temp, environ=environ
    )
    return command, temp


def test_one_node_runs_a_private_cluster_in_the_runs_temp_dir(tmp_path) -> None:
    command, temp = command_for(tmp_path, 1, {})
    assert command.env["TMPDIR"] == str(temp) and command.env[RUN_MARKER] == str(temp)
    assert f"{TEMP_DIR_OVERRIDE}{hydra_value(str(temp / 'ray'))}" in command.argv
    assert ADDRESS_OVERRIDE not in command.argv
    assert f"{WORKER_ENV}TMPDIR={hydra_value(str(temp))}" in command.argv


@pytest.mark.parametrize(
    ("nnodes", "environ"),
    [(2, {}), (4, {}), (1, {"RAY_ADDRESS": "10.0.0.1:6379"}), (2, {"RAY_ADDRESS": "auto"})],
)
def test_several_nodes_join_the_cluster_ray_start_runs(tmp_path, nnodes, environ) -> None:
    command, temp = command_for(tmp_path, nnodes, environ)
    assert "TMPDIR" not in command.env
    assert command.env[RUN_MARKER] == str(temp)
    assert ADDRESS_OVERRIDE in command.argv
    assert not any(word.startswith(TEMP_DIR_OVERRIDE) for word in command.argv)
    assert not any(word.startswith(f"{WORKER_ENV}TMPDIR=") for word in command.argv)
    assert f"{WORKER_ENV}{RUN_MARKER}={hydra_value(str(temp))}" in command.argv
    assert f"trainer.nnodes={nnodes}" in command.argv
    assert "trainer.n_gpus_per_node=8" in command.argv


def test_the_cluster_address_reaches_ray_init_through_verls_config(tmp_path) -> None:
    """verl's main_ppo passes ``ray_kwargs.ray_init`` to ``ray.init`` as keyword arguments."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    command, _ = command_for(tmp_path, 2, {})
    overrides = command.argv[3:]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            cfg = compose("ppo_trainer", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()
    ray_init = OmegaConf.to_container(cfg.ray_kwargs.ray_init)
    assert ray_init["address"] == "auto" and "_temp_dir" not in ray_init
    assert "include_dashboard" not in ray_init  # Ray refuses it when it joins a cluster
    assert ray_init["num_cpus"] is None  # Ray refuses resource counts when it joins a cluster
    assert cfg.trainer.nnodes == 2 and cfg.trainer.n_gpus_per_node == 8


def test_a_cpu_run_refuses_to_join_a_cluster() -> None:
    cpu = VerlSettings.model_construct(device="cpu", rollout_engine="hf", nnodes=1)
    assert ray_cluster(cpu, {}) is None
    with pytest.raises(ValueError, match=r"set verl\.nnodes to 1 and unset RAY_ADDRESS"):
        ray_cluster(cpu, {"RAY_ADDRESS": "10.0.0.1:6379"})
    with pytest.raises(ValueError, match=r"verl\.device: cpu"):
        ray_cluster(cpu.model_copy(update={"nnodes": 2}), {})
