"""Typed configuration: one pydantic model per params.yaml section (the base class,
``ConfigModel``, is :mod:`tagrpo.plumbing.config_model`; ``common.grading`` is declared in
:mod:`tagrpo.grading.settings`, beside its grader).

common       ``common`` and ``runs`` (which methods and seeds the DAG trains)
data         ``data``
base_model   ``base_model``
rephrase     ``rephrase`` and the OpenAI-compatible endpoint settings
equivalence  ``check_equivalence``
train        ``train`` (shared by both training backends), ``local``
engines      ``verl``, ``hf``, ``vllm``
evaluation   ``evaluate``, ``diagnostics``, ``report``
runtime      ``runtime``: how runs execute (resume, checkpoints, workers); no stage's dep
params       the whole file: :func:`load_config`, overrides, error messages, and
             :func:`repo_params` (the checkout's params.yaml, for tests and notebooks)
profiles     a profile merged over params.yaml (``base:`` chains, comments kept)

Import the section you need (``from tagrpo.config.train import TrainSettings``); this package
imports nothing itself, so components can use their section without loading the others.
"""
