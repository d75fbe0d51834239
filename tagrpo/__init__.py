"""tagrpo: Transformation-Augmented GRPO and its baselines, as a reproducible pipeline.

The package is the library layer: pure algorithm and metric code, grading, data normalisation,
the miniature offline world and the generation backends, and apart from them the plumbing that
runs, tracks and reruns the stages (:mod:`tagrpo.pipeline`). ``stages/`` (one module per DVC
stage) and ``flows/`` (Prefect orchestration) import from here, never the other way round.
"""

__version__ = "0.1.0"

# The one place the offline / no-telemetry environment defaults are applied: every entry point
# (stages, flows, the CLI, tests) imports this package before mlflow, prefect or transformers,
# which read these variables when they are imported. Users' own values win (setdefault).
from tagrpo.pipeline.env import apply_offline_defaults

apply_offline_defaults()
