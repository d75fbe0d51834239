"""The pipeline's plumbing: running stages, tracking them, rerunning them; no science here.

runtime          ``running_stage``: lock, writable check, staging, atomic commit, MLflow run
layout           where every stage writes (dvc.yaml declares the same paths)
paths            the project root, the shared benchmark data and the tracking store
env              the offline / no-telemetry defaults ``import tagrpo`` applies
progress         progress bars for the steps a person waits on
procfs           other processes from Linux ``/proc``: name, parent, state, start time, CPU
tracking         the MLflow store: URI, experiment per checkout, tags, redaction, metrics
parent_run       one MLflow parent run per pipeline invocation (Prefect's or dvc's)
stage_run        one MLflow run per stage execution, nested under the parent run
tracking_assets  what a stage run logs besides params and metrics (models, datasets)
dvc_stages       dvc.yaml expanded the way DVC expands it (no DVC import)
rerun            reruns with other params, in a scratch copy or as a DVC experiment
plan             what ``dvc repro`` would rerun after a params change, and why
verify           outputs rehashed and compared with dvc.lock
compare          ``tagrpo compare``: the pass@k table of the latest evaluations, from MLflow
plots            the DVC plot templates and the page that renders offline
cli              the ``tagrpo`` command line
stage_deps       each stage's code deps from the import graph (``--check``, ``--write``)

Importing this package imports nothing itself (``import tagrpo`` loads ``env`` through it).
"""
