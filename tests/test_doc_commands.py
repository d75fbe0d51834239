"""What README.md and docs/*.md quote works: every command, flag, make target, path and profile.

A quoted thing is inside backticks or a fenced code block. Checked:

* ``python -m <module> ...`` of this project (``stages``, ``flows``, ``tagrpo``,
  ``benchmarks``): the module exists and its argparse parser (captured from its ``main``,
  nothing run) has every quoted ``--flag``, after the quoted subcommands;
* ``tagrpo <subcommand> ... --flag`` (any path before ``tagrpo``, e.g. ``.venv/bin/tagrpo``):
  the subcommands and flags exist in ``tagrpo.pipeline.cli.build_parser``;
* ``make <target>``: the Makefile has a rule for it with a recipe or prerequisites (and every
  ``.PHONY`` name has one);
* ``dvc repro <stage>`` / ``dvc repro -s <stage>``: the stage (before ``@``) is in dvc.yaml;
* not read: a ```text block, which is what a command prints;
* a repository path (``reports/report.md``, ``preregistration/world-v2.md``): it is in git, or
  a DVC output of dvc.yaml (or under or above one), or under a location the tools create
  (:data:`GENERATED`, each with what creates it);
* a profile (``--profile NAME``, "the `NAME` profile"): ``profiles/NAME.yaml`` exists;
* a params key (``train.learning_rate``, ``-S runs.methods=[grpo]``, a dotted name whose first
  part is a params.yaml section): it is a key of params.yaml or of a profile, or a field of
  the params models (``tagrpo/config/``).

Placeholders are skipped: upper-case words (``P``, ``KEY``, ``NAME``), ``<...>``, ``...``,
patterns with ``*`` or ``{``. :func:`test_planted_mistakes_are_each_named` shows the checks
fail on a wrong flag, path, target, profile and subcommand.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import re
import shlex
import subprocess
from pathlib import Path
from unittest import mock

import yaml

# The project's packages, bound now: a later test that loads a flow from its file (Prefect puts
# flows/ on sys.path) must not make ``stages`` resolve to flows/stages.py.
import stages  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("stages", "flows", "tagrpo", "benchmarks")
# Locations the tools create (git ignores them), with what creates each: a path under one
# cannot be checked in a fresh clone.
GENERATED = {
    ".venv": "make install",
    ".venv-engines": "make engines",
    ".venv-gpu": "docs/paper-scale.md's install",
    ".cache": "the reply, sample and engines-model caches",
    ".tagrpo": "scratch copies and stage locks",
    ".prefect": "the Prefect home (make, flows/__init__.py)",
    "mlruns": "MLflow's artifacts",
    "mlflow.db": "MLflow's store",
    "checkpoints": "verl's work area (runtime.verl.checkpoint_dir)",
    "dvc_plots": "dvc plots show",
    "node_modules": "make install (npm ci)",
    ".dvc/plots/offline.html": "make install",
    ".dvc/cache": "DVC",
    ".dvc/tmp": "DVC",
    "reports/study/main-report": "python -m tagrpo.report.study --main (make study, at the end)",
}
FILE_SUFFIX = re.compile(r"\.(md|py|ya?ml|json|toml|txt|lock|parquet|csv|png|html|jsonl|sh|cfg)$")
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
# A ```text block is what a command prints (README's "a good run ends with"), not commands.
OUTPUT_FENCE = re.compile(r"```text\n.*?```", re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(
    r"(?:^|(?<=[\s(]))(?P<cmd>python -m [\w.<>]+|(?:[\w./-]*/)?tagrpo(?= )|make|dvc repro)"
    r"(?P<args>(?: [^;&|#`]*)?)"
)
PROFILE_WORD = re.compile(
    r"`([\w.-]+)`(?=(?:,? (?:and |or )?`[\w.-]+`)* profiles?\b)|\bprofiles? `([\w.-]+)`"
)
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*(\.[A-Za-z]+)?$|[<>*{}$]|\.\.\.")
# A dotted params key in quoted text: not part of a path, a module or a file name.
PARAMS_KEY = re.compile(r"(?<![\w./-])(?<!-m )([a-z_]+(?:\.[A-Za-z_][\w-]*)+)(?![\w/(-])")
# Dotted names that are not this project's keys though they start like one, each with why.
NOT_PARAMS_KEYS = {
    "train.lerning_rate": "the user guide's example of a misspelt key, which is refused",
    "data.shuffle": "verl's own config key (its trainer's data section)",
}


def quoted_texts(markdown: str) -> list[str]:
    """The fenced blocks' lines (``\\``-continued lines joined) and the inline code spans."""
    quoted = []
    for block in FENCE.findall(OUTPUT_FENCE.sub("", markdown)):
        # A shell comment is prose, not a command.
        lines = block.replace("\\\n", " ").splitlines()
        quoted += [re.split(r"(?:^|\s)#", line, maxsplit=1)[0] for line in lines]
    quoted += SPAN.findall(FENCE.sub("", markdown))
    return quoted


def _words(args: str) -> list[str]:
    try:
        words = shlex.split(args, comments=True)
    except ValueError:
        words = args.split()
    return [w.strip("[]()") for w in words if w.strip("[]()")]


def _is_placeholder(word: str) -> bool:
    return bool(PLACEHOLDER.search(word)) or any(
        PLACEHOLDER.match(part) for part in word.split("/") if part
    )


class _Captured(Exception):
    pass


@functools.cache
def module_parser(module: str) -> argparse.ArgumentParser | None:
    """The argparse parser ``python -m module`` builds, captured from ``main`` before it
    parses anything (None: the module parses no arguments with argparse)."""
    if module == "tagrpo.pipeline.cli":
        from tagrpo.pipeline.cli import build_parser

        return build_parser()
    spec = importlib.util.find_spec(module)
    source = Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""
    if "ArgumentParser" not in source or "\ndef main(" not in source:
        return None  # never imported: a module without a parser is not run
    imported = importlib.import_module(module)
    captured: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        captured.append(self)
        raise _Captured

    with (
        mock.patch.object(argparse.ArgumentParser, "parse_args", capture),
        mock.patch.object(argparse.ArgumentParser, "parse_known_args", capture),
        contextlib.suppress(_Captured),
    ):
        imported.main([])
    return captured[0] if captured else None


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parser_problems(
    parser: argparse.ArgumentParser, name: str, words: list[str], command: str
) -> list[str]:
    """Subcommands (leading words naming a subparser) and flags the parser does not have."""
    problems = []
    current = parser
    for word in words:
        choices = _subparsers(current)
        if not choices:
            break
        if word.startswith("-") or _is_placeholder(word):
            break
        if word not in choices:
            problems.append(f"{command}: no subcommand {word!r} (has {sorted(choices)})")
            return problems
        current = choices[word]
        name += f" {word}"
    options = {s for a in current._actions for s in a.option_strings}
    for word in words:
        flag = word.split("=", 1)[0]
        if re.fullmatch(r"--?[A-Za-z][\w-]*", flag) and flag not in options:
            problems.append(f"{command}: {name} has no option {flag}")
    for index, word in enumerate(words[:-1]):
        if word == "--profile" and not _is_placeholder(words[index + 1]):
            problems += profile_problems(words[index + 1], command)
    return problems


@functools.cache
def make_rules() -> tuple[dict[str, bool], set[str]]:
    """Each Makefile target with whether its rule does something (a recipe or prerequisites),
    and the ``.PHONY`` names."""
    rules: dict[str, bool] = {}
    phony: set[str] = set()
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ").splitlines()
    for index, line in enumerate(lines):
        match = re.match(r"^([\w.%$() -]+?)\s*:(?![=:])(.*)$", line)
        if not match or line.startswith(("\t", "#", "export ")):
            continue
        prerequisites = match.group(2).split(";")[0].split("#")[0].strip()
        recipe = ";" in match.group(2) or (
            index + 1 < len(lines) and lines[index + 1].startswith("\t")
        )
        for target in match.group(1).split():
            if target == ".PHONY":
                phony.update(prerequisites.split())
            else:
                rules[target] = rules.get(target, False) or recipe or bool(prerequisites)
    return rules, phony


def make_problems(words: list[str], command: str) -> list[str]:
    targets = [w for w in words if not w.startswith("-") and "=" not in w]
    if not targets or _is_placeholder(targets[0]):
        return []
    rules, _ = make_rules()
    if not rules.get(targets[0]):
        return [f"{command}: the Makefile has no rule doing anything for {targets[0]!r}"]
    return []


@functools.cache
def dvc_stage_names() -> frozenset[str]:
    return frozenset(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])


def dvc_problems(words: list[str], command: str) -> list[str]:
    problems = []
    for word in words:
        if word.startswith("-") or _is_placeholder(word):
            continue
        if word.split("@", 1)[0] not in dvc_stage_names():
            problems.append(f"{command}: no stage {word.split('@', 1)[0]!r} in dvc.yaml")
    return problems


def profile_problems(name: str, where: str) -> list[str]:
    if name in ("current", "embedded") or (ROOT / "profiles" / f"{name}.yaml").is_file():
        return []
    return [f"{where}: no profile {name!r} (profiles/{name}.yaml)"]


@functools.cache
def tracked_paths() -> frozenset[str]:
    """Every file git tracks (or will: untracked, not ignored) and every folder above one."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    paths: set[str] = set()
    for name in filter(None, listed.split("\0")):
        parts = name.split("/")
        paths.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(paths)


@functools.cache
def dvc_outputs() -> tuple[tuple[str, ...], ...]:
    """dvc.yaml's outs, metrics and plots, each as its path's parts (``${item.method}`` kept)."""
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    groups = [
        stage.get(key, [])
        for stage in spec["stages"].values()
        for key in ("outs", "metrics", "plots")
    ]
    names: list[str] = []
    for group in [*groups, spec.get("plots", [])]:
        for entry in group:
            names += list(entry) if isinstance(entry, dict) else [entry]
    return tuple(tuple(name.strip("/").split("/")) for name in names)


def _part_matches(part: str, output_part: str) -> bool:
    """A templated part (``${item.method}-s${item.seed}``) matches any name of its shape."""
    pieces = re.split(r"(\$\{[^}]*\})", output_part)
    regex = "".join("[^/]+" if p.startswith("${") else re.escape(p) for p in pieces)
    return re.fullmatch(regex, part) is not None


def path_problem(path: str, where: str) -> list[str]:
    path = path.rstrip("/.")
    if path in tracked_paths():
        return []
    if any(path == g or path.startswith(g + "/") for g in GENERATED):
        return []
    parts = path.split("/")
    for output in dvc_outputs():
        shared = min(len(parts), len(output))
        # The output, a file under it, or a folder above it.
        if all(_part_matches(a, b) for a, b in zip(parts[:shared], output[:shared], strict=True)):
            return []
    return [f"{where}: path {path} is not in git, not a DVC output and not a generated location"]


def _path_candidates(text: str) -> list[str]:
    found = []
    for raw in re.split(r"[\s,;()\[\]\"'=]+", text):
        word = raw.rstrip(".:")
        if "/" not in word or "://" in raw or word.startswith(("-", "..", "/", "~", "@")):
            continue
        if not re.fullmatch(r"[\w.@+-]+(/[\w.@+-]*)+", word) or _is_placeholder(word):
            continue
        first = word.split("/", 1)[0]
        repo_root_entry = first in tracked_paths() or first in GENERATED
        if repo_root_entry or FILE_SUFFIX.search(word):
            found.append(word)
    return found


def _key_paths(tree: object, prefix: str = "") -> set[str]:
    paths: set[str] = set()
    if isinstance(tree, dict):
        for key, value in tree.items():
            path = f"{prefix}{key}"
            paths |= {path, *_key_paths(value, f"{path}.")}
    return paths


def _model_paths(model: type, prefix: str = "") -> set[str]:
    from tagrpo.plumbing.config_model import ConfigModel

    paths: set[str] = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.add(path)
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, ConfigModel):
            paths |= _model_paths(annotation, f"{path}.")
    return paths


@functools.cache
def params_keys() -> frozenset[str]:
    """Every key path of params.yaml, of each profile and of the params models."""
    from tagrpo.config.params import Params

    keys = _key_paths(yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8")))
    for profile in sorted((ROOT / "profiles").glob("*.yaml")):
        keys |= _key_paths(yaml.safe_load(profile.read_text(encoding="utf-8")) or {})
    return frozenset(keys | _model_paths(Params))


@functools.cache
def params_sections() -> frozenset[str]:
    return frozenset(yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8")))


def params_key_problems(text: str, where: str) -> list[str]:
    """Dotted names whose first part is a params section but that are no params key
    (file names such as ``report.md`` and ``tagrpo.*`` modules are not keys)."""
    problems = []
    for match in PARAMS_KEY.finditer(text):
        key = match.group(1).rstrip(".")
        first, last = key.split(".", 1)[0], key.rsplit(".", 1)[-1]
        if first not in params_sections() or FILE_SUFFIX.search(key) or key in NOT_PARAMS_KEYS:
            continue
        if not all(re.fullmatch(r"[a-z_][a-z0-9_]*", part) for part in key.split(".")):
            continue  # a placeholder (verl.KEY), a class (vllm.LLM), a file name
        if last in {"md", "py", "yaml", "json", "csv", "parquet", "png", "lock", "txt", "log"}:
            continue
        if key not in params_keys():
            problems.append(f"{where}: `{text.strip()}`: no params key {key}")
    return problems


def problems_in(markdown: str, where: str) -> list[str]:
    """Every quoted command, flag, target, path and profile of ``markdown`` that does not exist."""
    problems: list[str] = []
    quoted = quoted_texts(markdown)
    for text in quoted:
        for match in COMMAND.finditer(text):
            command, words = match.group("cmd"), _words(match.group("args"))
            label = f"{where}: `{(command + match.group('args')).strip()}`"
            if command.startswith("python -m "):
                module = command.split()[-1]
                if module.split(".")[0] not in PROJECT_PACKAGES or _is_placeholder(module):
                    continue
                if importlib.util.find_spec(module) is None:
                    problems.append(f"{label}: no module {module}")
                    continue
                parser = module_parser(module)
                if parser is not None:
                    problems += parser_problems(parser, module, words, label)
            elif command.endswith("tagrpo"):
                if words and not _is_placeholder(words[0]):
                    cli = module_parser("tagrpo.pipeline.cli")
                    problems += parser_problems(cli, "tagrpo", words, label)
            elif command == "make":
                problems += make_problems(words, label)
            elif command == "dvc repro":
                problems += dvc_problems(words, label)
        for path in _path_candidates(text):
            problems += path_problem(path, f"{where}: `{text.strip()}`")
        problems += params_key_problems(text, where)
    prose = FENCE.sub("", markdown)
    for match in PROFILE_WORD.finditer(prose):
        problems += profile_problems(match.group(1) or match.group(2), where)
    return problems


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_phony_make_target_has_a_rule() -> None:
    rules, phony = make_rules()
    assert not sorted(t for t in phony if not rules.get(t)), "declared .PHONY, no rule"


def test_quoted_commands_flags_targets_paths_and_profiles_exist() -> None:
    problems = []
    for doc in documents():
        problems += problems_in(doc.read_text(encoding="utf-8"), str(doc.relative_to(ROOT)))
    assert not problems, "the documentation quotes what does not exist:\n" + "\n".join(problems)


def test_the_checks_see_the_documentation() -> None:
    """The checks are not vacuous: the documents quote stage flags, tagrpo subcommands, make
    targets and paths, and each is recognised."""
    quoted = [t for doc in documents() for t in quoted_texts(doc.read_text(encoding="utf-8"))]
    commands = [m.group("cmd") for t in quoted for m in COMMAND.finditer(t)]
    assert "python -m stages.train" in commands and "make" in commands
    assert any(c.endswith("tagrpo") for c in commands) and "dvc repro" in commands
    paths = {p for t in quoted for p in _path_candidates(t)}
    assert {"reports/report.md", "profiles/paper.yaml"} <= paths
    keys = {
        m.group(1) for t in quoted for m in PARAMS_KEY.finditer(t) if m.group(1) in params_keys()
    }
    assert {"train.learning_rate", "runs.methods", "data.synthetic.seed"} <= keys, sorted(keys)
    parser = module_parser("stages.train")
    assert parser is not None and "--dry-run" in {
        s for a in parser._actions for s in a.option_strings
    }


def test_planted_mistakes_are_each_named() -> None:
    planted = "\n".join(
        [
            "Evaluate one policy: `python -m stages.evaluate --policy P --model models/P`.",
            "```bash",
            "tagrpo params aply profiles/paper.yaml",
            ".venv/bin/tagrpo plan --costs",
            "make clean-outputs",
            "make nonexistent-target",
            "python -m flows.pipeline run --profile nope --method grpo",
            "dvc repro trian@grpo-0",
            "dvc exp run -S train.learnig_rate=2e-4",
            "```",
            "The results are in `reports/nope.md`; see `preregistration/world-v9.md`.",
            "Apply the `power` profile. Unchanged: `python -m stages.train --method M --dry-run`,",
            "`make run`, `reports/report.md`, `models/P`, `data/rephrased/train.parquet`.",
            "The key `data.synthetic.benchmarks.mini_chains.operations`; fine: `runs.seeds`,",
            "`train.estimators.<name>`, `-S runs.methods=[grpo]`, `tagrpo.config.train`.",
        ]
    )
    problems = problems_in(planted, "planted.md")
    expected = [
        "stages.evaluate has no option --model",
        "no subcommand 'aply'",
        "has no option --costs",
        "no rule doing anything for 'clean-outputs'",
        "no rule doing anything for 'nonexistent-target'",
        "no profile 'nope'",
        "no stage 'trian' in dvc.yaml",
        "path reports/nope.md is not in git",
        "path preregistration/world-v9.md is not in git",
        "no profile 'power'",
        "no params key train.learnig_rate",
        "no params key data.synthetic.benchmarks.mini_chains.operations",
    ]
    for fragment in expected:
        assert sum(fragment in p for p in problems) == 1, (fragment, problems)
    assert len(problems) == len(expected), problems
