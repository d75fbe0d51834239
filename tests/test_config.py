"""The typed params: every mistake a user makes is caught before work, with key, value and what
is allowed; params.yaml and the models agree; profiles may only override; secrets never pass."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tagrpo.config.params import (
    ConfigError,
    Params,
    apply_overrides,
    config_with,
    deep_merge,
    embedded,
    load_config,
    read_yaml_mapping,
    repo_params,
    validate_params,
)
from tagrpo.config.profiles import apply_profile, merged_with_profile
from tagrpo.pipeline.cli import main as cli
from tagrpo.pipeline.rerun import RerunRequest, resolve_params
from tagrpo.plumbing.config_model import ConfigModel
from tagrpo.plumbing.paths import project_root

ROOT = project_root()


def _default() -> dict[str, Any]:
    return read_yaml_mapping(ROOT / "params.yaml")


def _problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        validate_params(raw, "params.yaml")
    return caught.value.problems


def _model_paths(model: type[ConfigModel], prefix: str = "") -> set[str]:
    paths = set()
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, ConfigModel):
            paths |= _model_paths(annotation, f"{prefix}{name}.")
        else:
            paths.add(f"{prefix}{name}")
    return paths


def _yaml_paths(node: dict[str, Any], model: type[ConfigModel], prefix: str = "") -> set[str]:
    paths = set()
    for name, value in node.items():
        info = model.model_fields.get(name)
        annotation = info.annotation if info else None
        if isinstance(annotation, type) and issubclass(annotation, ConfigModel):
            paths |= _yaml_paths(value, annotation, f"{prefix}{name}.")
        else:
            paths.add(f"{prefix}{name}")
    return paths


def test_params_yaml_lists_every_key_the_models_know() -> None:
    # A user reads one file, and it is the only one that holds values.
    assert _yaml_paths(_default(), Params) == _model_paths(Params)
    assert load_config() == repo_params()


# The only defaults a params model may declare, each with its reason. Everything else is a
# value, and values live in params.yaml only.
ALLOWED_DEFAULTS = {
    # Entries of data.synthetic.benchmarks are named by the user; an entry states only what
    # differs from the usual benchmark (mini_long: {size: 96, lengths: {4: 1.0}}).
    "SyntheticBenchmark.families",
    "SyntheticBenchmark.multiple_choice",
    "SyntheticBenchmark.options",
}
# tagrpo.algorithms.avspo.AVSPOConfig keeps its defaults: the library calls the estimator with
# it directly; params loading still requires every key of train.estimators.avspo (below).
OWN_DEFAULTS = {"AVSPOConfig"}


def _params_models() -> set[type[ConfigModel]]:
    """Every model reachable from Params, through sections, dict values and estimators."""
    from typing import get_args

    from tagrpo.algorithms.estimators import ESTIMATORS

    found: set[type[ConfigModel]] = set()
    pending: list[Any] = [Params]
    pending += [spec.config_model for spec in ESTIMATORS.values() if spec.config_model]
    while pending:
        annotation = pending.pop()
        if isinstance(annotation, type) and issubclass(annotation, ConfigModel):
            if annotation in found:
                continue
            found.add(annotation)
            pending += [info.annotation for info in annotation.model_fields.values()]
            pending += [base for base in annotation.__mro__[1:] if base is not ConfigModel]
        pending += list(get_args(annotation))
    return found


def test_no_params_model_declares_a_default_value() -> None:
    models = _params_models()
    assert {"Params", "TrainSettings", "SyntheticBenchmark", "ConsistencyConfig"} <= {
        model.__name__ for model in models
    }
    with_default = {
        f"{model.__name__}.{name}"
        for model in models
        if model.__name__ not in OWN_DEFAULTS
        for name, info in model.model_fields.items()
        if not info.is_required()
    }
    assert with_default == ALLOWED_DEFAULTS


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("train", "mini_batches"), "train.mini_batches: required key is missing"),
        (("train", "warmup_ratio"), "train.warmup_ratio: required key is missing"),
        (("train", "checkpoints"), "train.checkpoints: required key is missing"),
        (("runtime", "verl", "checkpoint_dir"), "runtime.verl.checkpoint_dir: required key"),
        # null is a value (3 x item_timeout_s + 10); an absent key is not
        (("common", "grading", "wall_timeout_s"), "wall_timeout_s: required key is missing"),
        (("data", "synthetic"), "data.synthetic: required key is missing"),
        (("train", "estimators", "avspo", "alpha"), "avspo: required keys are missing: ['alpha']"),
        (("train", "estimators", "avspo"), "avspo: required key is missing"),
    ],
)
def test_a_key_missing_from_params_yaml_is_an_error_naming_it(path, expected) -> None:
    raw = copy.deepcopy(_default())
    node = raw
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    problems = _problems(raw)
    assert any(expected in problem for problem in problems), problems


def test_embedded_sections_are_the_params_yaml_values() -> None:
    from tagrpo.config.data import SyntheticBenchmark
    from tagrpo.config.equivalence import ConsistencyConfig, SolverEndpoint, StructuralConfig
    from tagrpo.config.rephrase import EndpointConfig

    config = repo_params()
    structural = config.check_equivalence.structural
    assert embedded(StructuralConfig) == structural
    assert embedded(StructuralConfig, numbers="strict") == structural.model_copy(
        update={"numbers": "strict"}
    )
    assert embedded(ConsistencyConfig) == config.check_equivalence.consistency.rule()
    assert embedded(EndpointConfig) == config.rephrase.openai
    assert embedded(SolverEndpoint) == config.check_equivalence.consistency.openai
    with pytest.raises(ValueError, match="numbers"):
        embedded(StructuralConfig, numbers="loose")
    with pytest.raises(TypeError, match="SyntheticBenchmark is not a section"):
        embedded(SyntheticBenchmark)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # The typo that trained at a different learning rate, silently.
        (lambda r: r["train"].update(learning_rte=1e-3), "train.learning_rte: unknown key"),
        # A scalar replacing a whole section.
        (lambda r: r.update(train=5), "train = 5: Input should be a valid dictionary"),
        (lambda r: r["train"].update(learning_rate="abc"), "train.learning_rate = 'abc'"),
        (lambda r: r["train"].update(learning_rate=-1.0), "greater than 0"),
        (lambda r: r["evaluate"].update(ks=[1, 128]), "largest k (128) exceeds n (64)"),
        (lambda r: r["runs"].update(methods=["grpo", "ta_grpoo"]), "unknown methods ['ta_grpoo']"),
        # A neighbour method with N = 0 would train as plain GRPO under its own name.
        (lambda r: r["train"].update(n_neighbours=0), "would train as plain GRPO"),
        # An empty training set.
        (lambda r: r["data"]["synthetic"].update(train_size=0), "train_size = 0"),
        (lambda r: r["train"].update(questions=0), "train.questions = 0"),
        # --data-multiple with nothing to draw from.
        (
            lambda r: r["runs"]["data_scaling"].update(multiples=[3.0]),
            "multiples up to 3 need 1280 extra questions beyond the 640 of the 1x set, but "
            "data.synthetic.extra_size is 960",
        ),
        (
            lambda r: r["runs"]["data_scaling"].update(methods=["ta_grpo"]),
            "['ta_grpo'] sample rephrasings",
        ),
        (lambda r: r["train"].update(mini_batches=33), "mini_batches (33) > batch_questions (32)"),
        (lambda r: r["data"].update(source="s3"), "data.source = 's3'"),
        (
            lambda r: r["rephrase"]["openai"].update(api_key_env="sk-" + "abcdefghijklmnopqrstu"),
            "looks like an API key",
        ),
        (lambda r: r["vllm"].update(api_key_env="my key"), "name of an environment variable"),
        (
            lambda r: r["diagnostics"].update(policies=["grpo-s9"]),
            "diagnostics.policies ['grpo-s9'] are not trained",
        ),
        (
            lambda r: r["evaluate"]["groups"].update(ood=["mini_unseen", "gpqa"]),
            "evaluate.groups.ood: ['gpqa'] are not benchmarks",
        ),
        (
            lambda r: r["report"].update(primary_group="hard"),
            "report.primary_group ('hard') is not a group of evaluate.groups",
        ),
        (
            # The primary endpoint is pass@k_large: a 20-option benchmark there is chance.
            lambda r: (
                r["data"]["synthetic"]["benchmarks"].update(
                    mini_choice={"size": 8, "lengths": {2: 1.0}, "multiple_choice": True}
                ),
                r["evaluate"]["groups"].update(ood=["mini_unseen", "mini_choice"]),
                r["report"].update(primary_group="ood"),
            ),
            "report.primary_group ('ood') holds multiple-choice benchmarks ['mini_choice']",
        ),
        (
            lambda r: r["train"]["estimators"]["avspo"].update(trigger="sometimes"),
            "avspo.trigger",
        ),
        (lambda r: r["train"]["estimators"].update(dr_grpo={}), "no configurable estimator"),
        (
            lambda r: r["data"]["local"]["options"].update(math={"keep_empty": True}),
            "math: unknown loader options ['keep_empty']",
        ),
    ],
)
def test_each_mistake_is_refused_with_key_value_and_what_is_allowed(mutate, expected) -> None:
    raw = copy.deepcopy(_default())
    mutate(raw)
    problems = _problems(raw)
    assert any(expected in problem for problem in problems), problems


def test_unknown_keys_list_what_is_allowed_and_all_problems_are_reported_at_once() -> None:
    raw = copy.deepcopy(_default())
    raw["train"]["learning_rte"] = 1e-3
    raw["evaluate"]["nn"] = 3
    problems = _problems(raw)
    assert len(problems) == 2
    assert "allowed keys:" in problems[0] and "learning_rate" in problems[0]


def test_unambiguous_values_are_coerced() -> None:
    raw = copy.deepcopy(_default())
    raw["train"]["learning_rate"] = "1e-4"  # how PyYAML reads 1e-4 without a dot
    raw["train"]["group_size"] = 8
    config = validate_params(raw)
    assert config.train.learning_rate == 1e-4 and config.train.group_size == 8
    raw["train"]["group_size"] = 8.5
    assert any("group_size" in p for p in _problems(raw))


def test_an_integer_key_given_a_float_is_refused_even_when_whole() -> None:
    """`group_size: 2.0` reads as a typo or a value meant for another key (issue 40.5): refused
    by name, at any depth (a list item, a mapping's key or value), never read as 2."""
    raw = copy.deepcopy(_default())
    raw["train"]["group_size"] = 2.0
    raw["runs"]["seeds"] = [0, 1.0]
    raw["common"]["miniworld"]["train_lengths"] = {3.0: 1.0}
    raw["data"]["synthetic"]["benchmarks"]["mini_chains"]["size"] = 128.0
    problems = _problems(raw)
    refused = "train.group_size = 2.0: an integer key given a float"
    assert any(p.startswith(refused) for p in problems)
    assert any(p.startswith("runs.seeds = [0, 1.0]") and "[1]" in p for p in problems)
    assert any(
        p.startswith("common.miniworld.train_lengths") and "(at key 3.0)" in p for p in problems
    )
    assert any(p.startswith("data.synthetic.benchmarks.mini_chains.size = 128.0") for p in problems)
    # A float key given an integer stays a float (no ambiguity), and None stays allowed.
    raw = copy.deepcopy(_default())
    raw["train"]["learning_rate"] = 1
    assert validate_params(raw).train.learning_rate == 1.0


def test_common_profile_is_a_known_profile_or_custom() -> None:
    """The label tags every MLflow run and picks what `tagrpo compare` shows: a typo would
    file runs under a profile that does not exist (issue 40.5)."""
    from tagrpo.config.common import KNOWN_PROFILES, SHIPPED_PROFILES

    assert sorted(SHIPPED_PROFILES) == sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml"))
    for name in ("embedded", "custom", "smoke"):
        raw = copy.deepcopy(_default())
        raw["common"]["profile"] = name
        assert validate_params(raw).common.profile == name
    raw = copy.deepcopy(_default())
    raw["common"]["profile"] = "smoke-test"
    (problem,) = _problems(raw)
    assert problem.startswith("common.profile = 'smoke-test': must be one of ")
    assert all(name in problem for name in KNOWN_PROFILES)


def test_profiles_may_only_override_existing_keys(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text((ROOT / "params.yaml").read_text())
    typo = tmp_path / "typo.yaml"
    typo.write_text("trian:\n  epochs: 1\ntrain:\n  lerning_rate: 1.0e-3\n")
    with pytest.raises(ConfigError) as caught:
        apply_profile(typo, params)
    assert [p.split(":")[0] for p in caught.value.problems] == ["trian", "train.lerning_rate"]
    assert params.read_text() == (ROOT / "params.yaml").read_text()  # nothing written
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("train: 5\n")
    with pytest.raises(ConfigError, match="a section, given the scalar 5"):
        apply_profile(scalar, params)
    bad_value = tmp_path / "bad.yaml"
    bad_value.write_text("train: {learning_rate: abc}\n")
    with pytest.raises(ConfigError, match="learning_rate"):
        apply_profile(bad_value, params)
    good = tmp_path / "good.yaml"
    good.write_text("common: {profile: custom}\ntrain: {estimators: {avspo: {trigger: batch}}}\n")
    assert apply_profile(good, params).train.estimator_config("avspo").trigger == "batch"
    assert load_config(params).common.profile == "custom"


@pytest.mark.parametrize("profile", sorted((ROOT / "profiles").glob("*.yaml")))
def test_every_shipped_profile_applies_cleanly(profile: Path) -> None:
    merged = merged_with_profile(profile, ROOT / "params.yaml")
    assert validate_params(merged).common.profile == profile.stem


def test_overrides_and_config_with_follow_the_same_rules() -> None:
    raw = _default()
    changed = apply_overrides(raw, ["train.learning_rate=2e-4", "runs.seeds=[0, 1, 2]"])
    config = validate_params(changed)  # "2e-4" is a string to YAML, a float to the model
    assert config.train.learning_rate == 2e-4 and config.runs.seeds == [0, 1, 2]
    with pytest.raises(ConfigError, match="not a params key"):
        apply_overrides(raw, ["train.learning_rte=2e-4"])
    with pytest.raises(ConfigError, match=r"key\.path=value"):
        apply_overrides(raw, ["train.learning_rate"])
    moved = config_with(
        {"runs.seeds": [3], "runs.one_seed": [3], "diagnostics.policies": ["grpo-s3"]}
    )
    assert moved.runs.policies()[0] == "grpo-s3"
    with pytest.raises(KeyError):
        config_with({"runs.sedes": [3]})


def test_deep_merge_replaces_scalars_and_lists_and_merges_mappings() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 3}
    merged = deep_merge(base, {"a": {"c": [9]}, "e": {"f": 1}})
    assert merged == {"a": {"b": 1, "c": [9]}, "d": 3, "e": {"f": 1}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 3}  # input untouched


def test_params_check_and_explain_commands(tmp_path: Path, capsys) -> None:
    assert cli(["params", "check"]) == 0
    assert "valid" in capsys.readouterr().out
    broken = tmp_path / "params.yaml"
    raw = _default()
    raw["train"]["learning_rte"] = 1e-3
    broken.write_text(yaml.safe_dump(raw))
    assert cli(["params", "check", str(broken)]) == 2
    assert "train.learning_rte: unknown key" in capsys.readouterr().err
    not_yaml = tmp_path / "list.yaml"
    not_yaml.write_text("- a\n")
    assert cli(["params", "check", str(not_yaml)]) == 2
    assert "must be a mapping" in capsys.readouterr().err
    assert cli(["params", "explain", "train.learning_rate"]) == 0
    shown = capsys.readouterr().out
    assert "type: float" in shown and "bounds: > 0, <= 1" in shown and "help: peak" in shown
    assert cli(["params", "explain", "train.lerning_rate"]) == 2


def test_params_check_never_echoes_a_key_shaped_value(tmp_path: Path, capsys) -> None:
    secret = "sk-proj-" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"
    raw = _default()
    raw["rephrase"]["openai"]["api_key_env"] = secret  # the key pasted where its name goes
    raw["train"]["learning_rate"] = secret  # and into a number
    broken = tmp_path / "params.yaml"
    broken.write_text(yaml.safe_dump(raw))
    assert cli(["params", "check", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "rephrase.openai.api_key_env = '[redacted: looks like an API key]'" in err
    assert "train.learning_rate = '[redacted: looks like an API key]'" in err
    assert secret not in err and "Ab3dE5" not in err


def test_a_key_shaped_value_is_refused_in_any_string_field(tmp_path: Path, capsys) -> None:
    """Not only *_env fields: a key pasted as the model name, into a list or a free-form
    mapping is refused naming the key, never echoed (issue 33.5); a pinned revision is not."""
    secret = "sk-proj-" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"
    raw = _default()
    raw["rephrase"]["openai"]["model"] = secret
    raw["runs"]["seeds"] = [0, "Bearer " + "abcdefgh12345"]
    broken = tmp_path / "params.yaml"
    broken.write_text(yaml.safe_dump(raw))
    assert cli(["params", "check", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "2 problem(s)" in err
    assert (
        "  - rephrase.openai.model = '[redacted: looks like an API key]': looks like an API key "
        "or token: secrets never go in params (they are logged, tracked and committed); put it "
        "in the environment and name the variable in an *_env key"
    ) in err.splitlines()
    assert "  - runs.seeds.1 = '[redacted: looks like an API key]': looks like" in err
    assert secret not in err and "abcdefgh12345" not in err
    assert cli(["params", "explain", "rephrase.openai.model", "--file", str(broken)]) == 2
    assert secret not in capsys.readouterr().out
    # An override, as `tagrpo plan -S` and the Prefect flow pass it: refused before any work,
    # the message (which names the request) redacted.
    with pytest.raises(ConfigError) as refused:
        resolve_params(ROOT, RerunRequest(overrides=[f"rephrase.openai.model={secret}"]))
    assert refused.value.problems[0].startswith("rephrase.openai.model = '[redacted")
    assert secret not in str(refused.value)
    # A pinned dataset revision (40 hex digits) is a value, not a key.
    revision = "0123456789abcdef0123456789abcdef01234567"
    raw = _default()
    raw["data"]["hub"]["options"]["math"]["revision"] = revision
    assert validate_params(raw).data.hub.options["math"]["revision"] == revision


def _comments(text: str) -> list[str]:
    return [line[line.index("#") :] for line in text.splitlines() if "#" in line]


@pytest.mark.parametrize(
    "profile", sorted((ROOT / "profiles").glob("*.yaml")), ids=lambda path: path.stem
)
def test_params_apply_keeps_every_comment_and_writes_the_merged_params(
    profile: Path, tmp_path: Path
) -> None:
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    original = params.read_text()
    expected = merged_with_profile(profile, params)
    assert cli(["params", "apply", str(profile), "--params", str(params)]) == 0
    written = params.read_text()
    assert yaml.safe_load(written) == expected  # PyYAML (the stages) reads the merged values
    assert _comments(written) == _comments(original)  # all 139 comment lines, in order
    assert len(_comments(original)) > 100


def test_a_key_given_twice_is_refused_as_dvc_refuses_it(tmp_path: Path, capsys) -> None:
    """PyYAML keeps the last of two equal keys; DVC refuses the file: so do the params (33.8)."""
    text = (ROOT / "params.yaml").read_text()
    assert "\ntrain:\n" in text
    doubled = text.replace("\ntrain:\n", "\ntrain:\n  learning_rate: 0.5\n", 1)
    path = tmp_path / "params.yaml"
    path.write_text(doubled)
    first = doubled[: doubled.index("  learning_rate: 0.5")].count("\n") + 1
    inserted = doubled.index("  learning_rate: 0.5")
    second = doubled[: doubled.index("\n  learning_rate:", inserted)].count("\n") + 2
    assert cli(["params", "check", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"tagrpo params check: {path}: 1 problem(s) in the params:",
        f"  - duplicate key 'learning_rate' (line {second}; first on line {first}): DVC refuses "
        "such a file, YAML readers keep the last; remove one",
    ]
    with pytest.raises(ConfigError, match="duplicate key 'learning_rate'"):
        load_config(path)


def test_a_binary_profile_is_refused_with_a_clear_error(tmp_path: Path, capsys) -> None:
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    profile = tmp_path / "broken.yaml"
    profile.write_bytes(b"common:\n  profile: x\n\x89PNG\r\n\x1a\n\x00\x00")
    assert cli(["params", "apply", str(profile), "--params", str(params)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"tagrpo params apply: {profile}: 1 problem(s) in the params:\n"
        "  - not UTF-8 text: byte 0x89 at offset 21 (line 3); is it a binary file?\n"
    )
    assert params.read_bytes() == (ROOT / "params.yaml").read_bytes()


def test_stacking_a_profile_says_what_it_keeps_from_the_earlier_one(tmp_path: Path, capsys) -> None:
    """profiles/seeds3.yaml applied over profiles/local.yaml keeps local's data source and
    model: the command says so, key by key (issue 33.8)."""
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    local, seeds3 = tmp_path / "profiles" / "local.yaml", tmp_path / "profiles" / "seeds3.yaml"
    assert cli(["params", "apply", str(local), "--params", str(params)]) == 0
    assert capsys.readouterr().out == f"applied {local}: profile is now 'local'\n"
    assert cli(["params", "apply", str(seeds3), "--params", str(params)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        f"applied {seeds3}: profile is now 'seeds3'",
        f"note: stacked on profile 'local', already applied to the params: 35 of its keys stay "
        f"as it set them, {seeds3} does not set them:",
    ]
    assert "  data.source = 'local'" in out and "  base_model.kind = 'gguf_package'" in out
    assert not any(line.startswith(("  runs.seeds ", "  runs.methods ")) for line in out)
    assert out[-1].endswith("git checkout HEAD -- params.yaml, then apply it again")
    assert load_config(params).data.source == "local"
    # On the embedded default: no note.
    shutil.copy(ROOT / "params.yaml", params)
    assert cli(["params", "apply", str(seeds3), "--params", str(params)]) == 0
    assert capsys.readouterr().out == f"applied {seeds3}: profile is now 'seeds3'\n"


def test_a_misspelt_override_suggests_the_key(capsys) -> None:
    with pytest.raises(ConfigError) as refused:
        apply_overrides(_default(), ["train.lerning_rate=2e-4"])
    assert refused.value.problems == [
        "train.lerning_rate: not a params key; did you mean train.learning_rate?"
    ]
    with pytest.raises(ConfigError) as refused:
        apply_overrides(_default(), ["trian.learning_rate=2e-4"])
    assert refused.value.problems == [
        "trian.learning_rate: trian is not a params key; did you mean train?"
    ]
    with pytest.raises(ConfigError) as refused:
        apply_overrides(_default(), ["train.zzz=1"])
    assert refused.value.problems == ["train.zzz: not a params key"]


def test_explain_shows_values_as_the_files_not_as_defaults(capsys) -> None:
    """`= 'local'` read like a default; the values are the file's, and the models have none
    (issue 33.14)."""
    assert cli(["params", "explain", "train"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == "# values now in params.yaml (profile 'embedded')"
    assert shown[1] == (
        "train.backend: Literal['local', 'verl'], now 'local'  # local (tagrpo/training) | "
        "verl (section verl)"
    )
    assert cli(["params", "explain", "train.backend"]) == 0
    assert "  value: 'local' (in params.yaml; there is no default)" in capsys.readouterr().out


def test_primary_k_is_one_of_the_evaluated_ks() -> None:
    from tagrpo.config.params import ConfigError, config_with

    assert config_with({"report.primary_k": None}).primary_k() == 32  # the largest k
    assert config_with({"report.primary_k": 16}).primary_k() == 16
    with pytest.raises(ConfigError, match=r"report.primary_k \(12\) is not one of evaluate.ks"):
        config_with({"report.primary_k": 12})
