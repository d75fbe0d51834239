"""The verl backend: every method of the paper on stock ``verl==0.9.1`` (Ray, FSDP, vLLM).

A clean extension through verl's own extension points, no fork and no copied verl code. The
science (grouping, advantages, AVSPO, zero-gradient diagnostics) comes from
:mod:`tagrpo.algorithms`, the core the local backend also uses.

settings     the method's settings as carried in the verl config (``algorithm.tagrpo``)
             and the rollout-correction refusal for TA-GRPO (pure Python, no verl import)
data         the training parquet: one row per question, rephrasings in ``extra_info``,
             over-long rephrasings replaced offline (counted)
estimators   every tagrpo advantage estimator (``avspo``) in verl's registry, one loop
agent_loop   ``tagrpo_agent``: response j of a question generated from variant j // G;
             for TA-GRPO the stored prompt is q0's (Eq. 4)
trainer      ``tagrpo_sync``: V1 sync trainer with the method's groups (per rephrasing for
             TA-GRPO*), the zero-gradient diagnostics as metrics, rollout dumps and Hugging
             Face exports at 25/50/75/100% of training, resumable checkpoints every N steps
reward       ``compute_score`` for verl's custom reward hook (the grading module)
plugin       imports the registering modules; the target of ``VERL_USE_EXTERNAL_MODULES``
overrides    the Hydra overrides of ``python -m verl.trainer.main_ppo`` for each method
launcher     the ``train.backend: verl`` path of the train stage (``--dry-run`` prints it)
checkpoint   verl checkpoints to Hugging Face folders for evaluation
device       cuda or cpu: engine/device checks, the modules and overrides a CPU run needs
process      verl in its own session and temp dir, always cleaned up
resume       the run's work area: resumed by the same run only, promoted into the outputs
cost         the preflight: memory per card (refused when it does not fit), GPU-hours, disk
cpu_platform the CPU platform for verl (VERL_PLATFORM=cpu; loaded first, CPU runs only)
cpu_engines  verl's FSDP engine registered for device cpu (unpinned offload; CPU runs only)
hf_rollout   the ``hf`` rollout engine: transformers generate behind verl's server protocol,
             trained weights through verl's weight sync (CPU runs only)

Importing this package imports nothing from verl; only ``plugin`` and the modules it loads do.
"""

PLUGIN_MODULE = "tagrpo.verl_ext.plugin"
REWARD_MODULE = "pkg://tagrpo.verl_ext.reward"
AGENT_LOOP_NAME = "tagrpo_agent"
TRAINER_MODE = "tagrpo_sync"
AVSPO_ESTIMATOR = "avspo"
# Set by the hf rollout engine on every output: the training step of the weights it sampled with.
WEIGHTS_STEP_FIELD = "tagrpo_weights_step"
# Set by the tagrpo agent loop on every output: q0's prompt ids (generation prompt for variant 0).
ORIGINAL_PROMPT_IDS = "tagrpo_original_prompt_ids"
# The TransferQueue partition of the anchoring pass (each step's records, cleared after it).
ANCHORING_PARTITION = "tagrpo_anchoring"

__all__ = [
    "AGENT_LOOP_NAME",
    "ANCHORING_PARTITION",
    "AVSPO_ESTIMATOR",
    "ORIGINAL_PROMPT_IDS",
    "PLUGIN_MODULE",
    "REWARD_MODULE",
    "TRAINER_MODE",
    "WEIGHTS_STEP_FIELD",
]
