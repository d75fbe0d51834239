"""The top floor: running and tracking stages, and the tools a person runs on a checkout.

runtime          ``running_stage``: lock, writable check, staging, atomic commit, MLflow run
parent_run       one MLflow parent run per pipeline invocation (Prefect's or dvc's)
stage_run        one MLflow run per stage execution, nested under the parent run
rerun            reruns with other params, in a scratch copy or as a DVC experiment
plan             what ``dvc repro`` would rerun after a params change, and why
compare          ``tagrpo compare``: the pass@k table of the latest evaluations, from MLflow
plots            the DVC plot templates and the page that renders offline
cli              the ``tagrpo`` command line
stage_deps       each stage's code deps from the import graph (``--check``, ``--write``)

The ground-floor helpers these build on (paths, layout, processes, MLflow store) are in
:mod:`tagrpo.plumbing`; nothing in the library imports this folder. Importing this package
imports nothing itself.
"""
