"""The whole params file as one typed model: load, check, override (profiles:
:mod:`tagrpo.config.profiles`).

``params.yaml`` holds every value, and is the single place a user reads; :class:`Params`
declares every key's type, bounds and help, without a second set of defaults (a key missing
from the file is an error naming it). Every stage calls :func:`load_config` before it deletes
an output or loads a model, so a typo or a wrong type stops the run at once with the key path,
the value and what is allowed. Tests and notebooks start from the checkout's params.yaml:
:func:`repo_params`, :func:`config_with`, ``embedded(<Section>, ...)``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError, model_validator

from tagrpo.config.base_model import BaseModelSettings
from tagrpo.config.common import CommonSettings, RunsSettings
from tagrpo.config.data import DataSettings
from tagrpo.config.engines import HFEngineSettings, VerlSettings, VLLMEngineSettings
from tagrpo.config.equivalence import CheckEquivalenceSettings
from tagrpo.config.evaluation import DiagnosticsSettings, EvaluateSettings, ReportSettings
from tagrpo.config.rephrase import RephraseSettings
from tagrpo.config.runtime import RuntimeSettings
from tagrpo.config.train import LocalBackendSettings, TrainSettings
from tagrpo.plumbing.config_model import REDACTED, ConfigModel, redact_secrets, secret_shaped_leaves

SectionT = TypeVar("SectionT", bound=ConfigModel)


class ConfigError(ValueError):
    """params that cannot run: each line names the key path, the value and what is allowed."""

    def __init__(self, source: str, problems: list[str]) -> None:
        # Values are echoed to help; a key pasted into the wrong field must not be (nor into
        # an override, which the source may name).
        self.source = source = redact_secrets(source)
        self.problems = problems = [redact_secrets(problem) for problem in problems]
        listed = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"{source}: {len(problems)} problem(s) in the params:\n{listed}")


class Params(ConfigModel):
    """Every section of params.yaml (one per DVC stage, plus shared ones)."""

    common: CommonSettings
    runs: RunsSettings
    data: DataSettings
    base_model: BaseModelSettings
    rephrase: RephraseSettings
    check_equivalence: CheckEquivalenceSettings
    train: TrainSettings
    local: LocalBackendSettings
    verl: VerlSettings
    evaluate: EvaluateSettings
    hf: HFEngineSettings
    vllm: VLLMEngineSettings
    diagnostics: DiagnosticsSettings
    report: ReportSettings
    runtime: RuntimeSettings

    @model_validator(mode="after")
    def _runnable(self) -> Params:
        """Combinations that would run as a different experiment than the one named."""
        from tagrpo.algorithms import METHODS

        problems = []
        neighbour_methods = sorted(
            set(self.runs.all_methods())
            & {name for name, spec in METHODS.items() if spec.use_neighbours}
        )
        if neighbour_methods and self.train.n_neighbours == 0:
            problems.append(
                f"train.n_neighbours = 0, but {neighbour_methods} sample the rephrasings: they "
                "would train as plain GRPO under another name (set N >= 1 or drop them)"
            )
        if neighbour_methods and self.train.neighbours == "none":
            problems.append(f"train.neighbours = 'none', but {neighbour_methods} need rephrasings")
        if self.train.n_neighbours > self.rephrase.n and self.train.neighbours != "miniworld":
            problems.append(
                f"train.n_neighbours ({self.train.n_neighbours}) exceeds rephrase.n "
                f"({self.rephrase.n}): there are not that many rephrasings per question"
            )
        if self.data.source == "synthetic":
            base = self.data.synthetic.train_size
            if self.train.questions is not None:
                if self.train.questions > base:
                    problems.append(
                        f"train.questions ({self.train.questions}) exceeds "
                        f"data.synthetic.train_size ({base}): an empty or short training set"
                    )
                base = min(base, self.train.questions)
            largest = max([1.0, *self.runs.data_scaling.multiples])
            needed = round((largest - 1.0) * base)
            if needed > self.data.synthetic.extra_size:
                problems.append(
                    f"runs.data_scaling.multiples up to {largest:g} need {needed} extra questions "
                    f"beyond the {base} of the 1x set, but data.synthetic.extra_size is "
                    f"{self.data.synthetic.extra_size}"
                )
        limit = self.rephrase.max_questions
        if limit is not None and self.train.neighbours != "miniworld":
            trained = self.train.questions
            if trained is None or trained > limit:
                problems.append(
                    f"train.questions ({trained if trained is not None else 'null: all'}) "
                    f"exceeds rephrase.max_questions ({limit}): the runs would train on "
                    "questions that were never rephrased or checked"
                )
        if self.diagnostics.n_neighbours > self.rephrase.n:
            problems.append(
                f"diagnostics.n_neighbours ({self.diagnostics.n_neighbours}) exceeds rephrase.n "
                f"({self.rephrase.n})"
            )
        trained = set(self.runs.policies())
        missing = [p for p in self.diagnostics.policies if p not in trained]
        if missing:
            problems.append(
                f"diagnostics.policies {missing} are not trained by runs.methods x runs.seeds"
            )
        benchmark_names = self.benchmark_names()
        for group, members in self.evaluate.groups.items():
            unknown = [name for name in members if name not in benchmark_names]
            if unknown:
                problems.append(
                    f"evaluate.groups.{group}: {unknown} are not benchmarks of data.source "
                    f"{self.data.source} (benchmarks: {sorted(benchmark_names)})"
                )
        for key in ("in_distribution", "harder_group"):
            group = getattr(self.report, key)
            if group is not None and group not in self.evaluate.groups:
                problems.append(
                    f"report.{key} ({group!r}) is not a group of evaluate.groups "
                    f"({sorted(self.evaluate.groups)})"
                )
        problems += self._primary_group_problems()
        if self.report.primary_k is not None and self.report.primary_k not in self.evaluate.ks:
            problems.append(
                f"report.primary_k ({self.report.primary_k}) is not one of evaluate.ks "
                f"{self.evaluate.ks}"
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def primary_k(self) -> int:
        """The k of the primary endpoint: ``report.primary_k``, else the largest evaluate.ks."""
        return self.report.primary_k or max(self.evaluate.ks)

    def _primary_group_problems(self) -> list[str]:
        """``report.primary_group`` must name a group of free-form benchmarks: pass@k of a
        multiple-choice benchmark at large k measures guessing (its chance floor)."""
        primary = self.report.primary_group
        if primary is None:
            return []
        if primary not in self.evaluate.groups:
            return [
                f"report.primary_group ({primary!r}) is not a group of evaluate.groups "
                f"({sorted(self.evaluate.groups)})"
            ]
        options = self.multiple_choice_options()
        chosen = [name for name in self.evaluate.groups[primary] if name in options]
        if chosen:
            return [
                f"report.primary_group ({primary!r}) holds multiple-choice benchmarks {chosen}: "
                "the primary endpoint is on free-form benchmarks only"
            ]
        return []

    def multiple_choice_options(self) -> dict[str, int]:
        """The profile's multiple-choice benchmarks -> options per question: a file or hub
        source's ``choices`` (:mod:`tagrpo.data.sources`), a mini-world benchmark's
        ``options``."""
        if self.data.source == "synthetic":
            benchmarks = self.data.synthetic.benchmarks
            return {n: b.options for n, b in sorted(benchmarks.items()) if b.multiple_choice}
        from tagrpo.data.sources.registry import SOURCES

        chosen = [SOURCES[name] for name in sorted(self.benchmark_names())]
        return {source.name: source.choices for source in chosen if source.choices is not None}

    def benchmark_names(self) -> set[str]:
        """The benchmarks the data stage writes for the configured source."""
        if self.data.source == "synthetic":
            return set(self.data.synthetic.benchmarks)
        return set(getattr(self.data, self.data.source).benchmarks)

    def section(self, name: str) -> ConfigModel:
        return getattr(self, name)


# --------------------------------------------------------------------------- loading


def default_params_path() -> Path:
    """params.yaml of the project the process runs in (the current directory's checkout)."""
    from tagrpo.plumbing.paths import project_root

    return project_root() / "params.yaml"


def repo_params_path() -> Path:
    """params.yaml of the checkout this package is imported from, whatever the current
    directory (tests run stages in scratch projects)."""
    path = Path(__file__).resolve().parents[2] / "params.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: tagrpo is not imported from a checkout")
    return path


def repo_params() -> Params:
    """The checkout's params.yaml, validated: the starting point of tests and notebooks (the
    models hold no default values)."""
    return load_config(repo_params_path())


def embedded(section: type[SectionT], /, **overrides: Any) -> SectionT:
    """The section ``section`` as the checkout's params.yaml sets it, with ``overrides``
    (validated): for tests and notebooks (``embedded(StructuralConfig, numbers="strict")``).

    The section is found by type in :class:`Params`; a base class (``ConsistencyConfig``) takes
    its fields from the section of its subclass.
    """
    node: Any = read_yaml_mapping(repo_params_path())
    for part in section_path(section):
        node = node[part]
    given = {name: node[name] for name in section.model_fields if name in node}
    return section.model_validate({**given, **overrides})


def section_path(model: type[ConfigModel]) -> tuple[str, ...]:
    """Where ``model`` sits in :class:`Params` (``("check_equivalence", "structural")``); a
    base class is found through its first subclass there."""
    found: list[tuple[str, ...]] = []

    def walk(current: type[ConfigModel], location: tuple[str, ...]) -> None:
        for name, info in current.model_fields.items():
            annotation = info.annotation
            if isinstance(annotation, type) and issubclass(annotation, ConfigModel):
                if issubclass(annotation, model):
                    found.append((*location, name))
                walk(annotation, (*location, name))

    walk(Params, ())
    exact = [path for path in found if _model_at(path) is model]
    if not (exact or found):
        raise TypeError(f"{model.__name__} is not a section of params.yaml")
    return (exact or found)[0]


def _model_at(path: tuple[str, ...]) -> Any:
    current: Any = Params
    for part in path:
        current = current.model_fields[part].annotation
    return current


class _DuplicateKeyError(Exception):
    pass


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader (libyaml's parser where the wheel has it: every stage process reads
    params.yaml), refusing a key given twice in one mapping (PyYAML keeps the last silently;
    DVC refuses the file, so the stages and DVC would disagree on the params)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKeyError(
                    f"duplicate key {key!r} (line {line}; first on line {seen[key]}): DVC "
                    "refuses such a file, YAML readers keep the last; remove one"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping, without a duplicate key, in UTF-8 (a clear
    error naming the file otherwise)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ConfigError(
            str(path),
            [
                f"not UTF-8 text: byte 0x{data[error.start]:02x} at offset {error.start} "
                f"(line {line}); is it a binary file?"
            ],
        ) from None
    try:
        loaded = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKeyError as error:
        raise ConfigError(str(path), [str(error)]) from None
    except yaml.YAMLError as error:
        raise ConfigError(str(path), [f"not valid YAML: {error}"]) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(
            str(path), [f"the top level must be a mapping, got {type(loaded).__name__}"]
        )
    return loaded


def _format_location(location: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in location) or "(top level)"


def _allowed_keys(model: type[ConfigModel], location: tuple[Any, ...]) -> list[str] | None:
    """The keys allowed at ``location`` (for unknown-key messages)."""
    current: Any = model
    for part in location:
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            return None
        annotation = fields[part].annotation
        current = annotation if isinstance(annotation, type) else None
        if current is None:
            return None
    fields = getattr(current, "model_fields", None)
    return sorted(fields) if fields else None


def describe_errors(error: ValidationError, model: type[ConfigModel] = Params) -> list[str]:
    """One line per problem: key path, the value given, what is allowed."""
    lines = []
    for item in error.errors(include_url=False):
        location = tuple(item.get("loc", ()))
        path = _format_location(location)
        kind = item.get("type", "")
        value = item.get("input")
        if kind == "extra_forbidden":
            allowed = _allowed_keys(model, location[:-1])
            hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
            lines.append(f"{path}: unknown key{hint}")
            continue
        if kind == "missing":
            lines.append(f"{path}: required key is missing")
            continue
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        if not location:  # cross-section checks name their keys themselves
            lines.extend(message.split("\n"))
            continue
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        lines.append(f"{path} = {shown}: {message}")
    return lines


SECRET_IN_PARAMS = (
    "looks like an API key or token: secrets never go in params (they are logged, tracked and "
    "committed); put it in the environment and name the variable in an *_env key"
)


def validate_params(raw: Mapping[str, Any], source: str = "params") -> Params:
    """A mapping as :class:`Params`; :class:`ConfigError` listing every problem otherwise.

    A key-shaped string is refused in any field (``*_env`` fields say so themselves)."""
    secrets = [path for path in secret_shaped_leaves(dict(raw)) if not path.endswith("_env")]
    problems = [f"{path} = {REDACTED!r}: {SECRET_IN_PARAMS}" for path in secrets]
    try:
        params = Params.model_validate(dict(raw))
    except ValidationError as error:
        problems += [
            line
            for line in describe_errors(error)
            if not any(line.startswith((f"{path} ", f"{path}:")) for path in secrets)
        ]
    if problems:
        raise ConfigError(source, problems)
    return params


def load_config(path: str | Path | None = None) -> Params:
    """params.yaml (or ``path``) validated; the call every stage makes first."""
    params_path = Path(path) if path else default_params_path()
    return validate_params(read_yaml_mapping(params_path), str(params_path))


# --------------------------------------------------------------------------- profiles


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base``; lists and scalars are replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _free_form(location: tuple[str, ...]) -> bool:
    """Keys whose children are user-named (benchmark names, loader options, groups...)."""
    current: Any = Params
    for part in location:
        fields = getattr(current, "model_fields", None)
        if fields is None:
            return True
        if part not in fields:
            return False
        annotation = fields[part].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, ConfigModel)):
            return True  # a dict (or list) field: its keys are the user's
        current = annotation
    return False


def unknown_override_keys(
    base: Mapping[str, Any], override: Mapping[str, Any], prefix: tuple[str, ...] = ()
) -> Iterator[str]:
    """Key paths of ``override`` that do not exist in ``base`` (a profile may only override)."""
    for key, value in override.items():
        location = (*prefix, str(key))
        if _free_form(prefix):
            continue
        if key not in base:
            yield ".".join(location)
            continue
        if isinstance(value, Mapping) and isinstance(base[key], Mapping):
            yield from unknown_override_keys(base[key], value, location)
        elif (
            isinstance(base[key], Mapping) and not isinstance(value, Mapping) and value is not None
        ):
            yield f"{'.'.join(location)} (a section, given the scalar {value!r})"


def _did_you_mean(part: str, node: Any, parents: list[str]) -> str:
    """``"; did you mean a.b.c?"`` for the closest existing key, or ``""``."""
    import difflib

    if not isinstance(node, dict):
        return ""
    close = difflib.get_close_matches(part, [str(key) for key in node], n=1, cutoff=0.6)
    return f"; did you mean {'.'.join([*parents, close[0]])}?" if close else ""


def apply_overrides(raw: Mapping[str, Any], assignments: list[str]) -> dict[str, Any]:
    """``key.path=value`` assignments (values parsed as YAML) applied to a params mapping.

    Only existing keys may be set (the same rule as profiles); the result is validated.
    """
    merged = copy.deepcopy(dict(raw))
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        if not sep or not key.strip():
            raise ConfigError("overrides", [f"{assignment!r}: expected key.path=value"])
        parts = key.strip().split(".")
        node: Any = merged
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node, dict) or part not in node:
                hint = _did_you_mean(part, node, parts[:depth])
                raise ConfigError(
                    "overrides",
                    [f"{key}: {'.'.join(parts[: depth + 1])} is not a params key{hint}"],
                )
            node = node[part]
        if not isinstance(node, dict) or (
            parts[-1] not in node and not _free_form(tuple(parts[:-1]))
        ):
            hint = _did_you_mean(parts[-1], node, parts[:-1])
            raise ConfigError("overrides", [f"{key}: not a params key{hint}"])
        node[parts[-1]] = yaml.safe_load(text)
    validate_params(merged, "overrides")
    return merged


def config_with(overrides: Mapping[str, Any] | None = None, base: Params | None = None) -> Params:
    """``base`` (default: the checkout's params.yaml, :func:`repo_params`) with dotted-key
    overrides, validated.

    ``config_with({"train.learning_rate": 1e-3, "runs.methods": ["grpo"]})``: for tests and
    notebooks; the same existence rule as profiles (only existing keys may be set).
    """
    raw = (base or repo_params()).model_dump(mode="json")
    for key, value in (overrides or {}).items():
        parts = key.split(".")
        node: Any = raw
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(f"{'.'.join(parts[: depth + 1])} is not a params key")
            node = node[part]
        if not isinstance(node, dict) or (
            parts[-1] not in node and not _free_form(tuple(parts[:-1]))
        ):
            raise KeyError(f"{key} is not a params key")
        node[parts[-1]] = value
    return validate_params(raw, "overrides")
