"""tagrpo: Transformation-Augmented GRPO and its baselines, as a reproducible pipeline.

The package is the library layer, one folder per floor (docs/design.md; tests/test_floors.py
keeps it): the plumbing (:mod:`tagrpo.plumbing`) at the bottom; algorithm, metric, grading and
data code; the params schema; the engines and the mini world; each stage's work; and on top the
tools a person runs (:mod:`tagrpo.pipeline`). ``stages/`` (one module per DVC stage) and
``flows/`` (Prefect orchestration) import from here, never the other way round.
"""

__version__ = "0.1.0"

# The one place the offline / no-telemetry environment defaults are applied: every entry point
# (stages, flows, the CLI, tests) imports this package before mlflow, prefect or transformers,
# which read these variables when they are imported. Users' own values win (setdefault).
from tagrpo.plumbing.env import apply_offline_defaults

apply_offline_defaults()
