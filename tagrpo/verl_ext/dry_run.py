"""What a paper-scale run will do, as text: the verl command and the evaluation settings.

``python -m stages.train --method M --dry-run`` prints it before any GPU work (with the
preflight's memory and cost, :mod:`tagrpo.verl_ext.cost`), and
``tests/test_paper_profiles.py`` keeps the text of the paper profiles equal to checked-in
expectations (``tests/fixtures/dry_run/``), so a change of what a paper run trains or
evaluates with shows up as a diff to review.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tagrpo.config.params import Params


def evaluation_settings(config: Params) -> dict[str, Any]:
    """The settings the evaluate stage samples and scores with (what Table 1 depends on)."""
    settings = config.evaluate
    values: dict[str, Any] = {
        "evaluate.backend": settings.backend,
        "evaluate.prompt_format": settings.prompt_format,
        "evaluate.n": settings.n,
        "evaluate.ks": settings.ks,
        "evaluate.temperature": settings.temperature,
        "evaluate.top_p": settings.top_p,
        "evaluate.max_new_tokens": settings.max_new_tokens,
        "evaluate.max_questions_per_benchmark": settings.max_questions_per_benchmark,
        "evaluate.groups": settings.groups,
    }
    if settings.prompt_format == "chat":  # raw prompts take no template options
        values["common.chat_template_kwargs"] = config.common.chat_template_kwargs
    if config.data.source == "hub":
        values["data.hub.benchmarks"] = config.data.hub.benchmarks
    return values


def evaluation_lines(config: Params) -> list[str]:
    """``# evaluate: key = value`` lines of :func:`evaluation_settings`."""
    return [f"# evaluate: {key} = {value}" for key, value in evaluation_settings(config).items()]


def preflight_lines(
    config: Params, method: str, policy: str, model: str, root: Path, multiple: float = 1.0
) -> list[str]:
    """The dry run's preflight (:func:`run_lines`) over this profile's training set at
    ``multiple`` (a data-scaling run's), or first a line saying why its cost is not estimated
    (the table here is another profile's)."""
    from tagrpo.verl_ext.cost import run_lines, scaled_questions, training_questions

    try:
        questions = training_questions(config, root)
    except ValueError as error:
        return [f"# cost: not estimated: {error}", *run_lines(config, method, policy, model, None)]
    if questions is not None:
        questions = scaled_questions(questions, multiple)
    return run_lines(config, method, policy, model, questions)


def dry_run_text(
    config: Params, method: str, seed: int, root: Path, model: str, questions: int | None = None
) -> str:
    """The verl command of ``method`` (one override per line), the evaluation settings, and
    the preflight's memory per card and cost over ``questions`` training questions
    (:mod:`tagrpo.verl_ext.cost`).

    ``root`` and ``model`` are given, so the text does not depend on the checkout or on the
    base-model stage having run; the interpreter is written as ``python``.
    """
    from tagrpo.plumbing.layout import policy_name
    from tagrpo.verl_ext.cost import run_lines
    from tagrpo.verl_ext.launcher import build_command

    policy = policy_name(method, seed)
    command = build_command(method, config, seed, policy, root, model=model, environ={})
    argv = ["python" if word == sys.executable else word for word in command.argv]
    rows = config.train.rows_per_question(method)
    lines = [
        f"# train: batch_unit = {config.train.batch_unit}, rows per question = {rows}, "
        f"questions per step = {config.train.questions_per_step(method)}",
        *[f"{key}={value}" for key, value in sorted(command.env.items())],
        " ".join(argv[:3]),
        *argv[3:],
        *evaluation_lines(config),
        *run_lines(config, method, policy, model, questions),
    ]
    return "\n".join(lines) + "\n"
