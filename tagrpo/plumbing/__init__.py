"""The ground floor: where things are, processes, tracking; no science and no params schema.

layout           where every stage writes (dvc.yaml declares the same paths)
paths            the project root, the shared benchmark data and the tracking store
env              the offline / no-telemetry defaults ``import tagrpo`` applies
progress         progress bars for the steps a person waits on
procfs           other processes from Linux ``/proc``: name, parent, state, start time, CPU
dvc_stages       dvc.yaml expanded the way DVC expands it (no DVC import)
verify           outputs rehashed and compared with dvc.lock
tracking         the MLflow store: URI, experiment per checkout, tags, redaction, metrics
tracking_assets  what a stage run logs besides params and metrics (models, datasets)
config_model     the base class of every params model and the secret checks and redaction
markdown         the one markdown table format of reports and calculators

Imports nothing of ``tagrpo`` outside this folder (``tests/test_floors.py``). Importing this
package imports nothing itself (``import tagrpo`` loads ``env`` through it).
"""
