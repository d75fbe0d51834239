"""Reruns with other params: resolution and validation, the scratch copy, the DAG order, the
`dvc exp run -S` arguments, and the Prefect flow's parameter form and log streaming."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tagrpo.config.params import ConfigError
from tagrpo.pipeline.rerun import (
    RerunRequest,
    changed_leaves,
    hydra_value,
    parse_dot,
    prepare_scratch,
    profile_names,
    resolve_params,
    set_param_arguments,
    stage_order,
    topological,
)
from tagrpo.plumbing.dvc_stages import load_stages
from tagrpo.plumbing.paths import project_root

ROOT = project_root()


def test_a_subset_keeps_the_control_methods_with_their_own_seeds() -> None:
    def runs_of(methods: list[str] | None, seeds: list[int] | None, diagnosed: str) -> dict:
        # diagnostics.policies must name a trained policy (it is never changed silently)
        override = f'diagnostics.policies=["{diagnosed}"]'
        request = RerunRequest("calibration", methods, seeds, [override])
        return resolve_params(ROOT, request)["runs"]

    # grpo_flipped keeps its own seeds (0, 1), cut to the chosen ones: only 1 is left.
    runs = runs_of(["grpo", "grpo_flipped"], [1, 2], "grpo-s1")
    assert runs["methods"] == ["grpo"] and runs["seeds"] == [1, 2]
    assert runs["control_methods"] == ["grpo_flipped"] and runs["control_seeds"] == [1]
    only_control = runs_of(["grpo_flipped"], None, "grpo_flipped-s0")
    assert only_control["methods"] == ["grpo_flipped"] and only_control["seeds"] == [0, 1]
    assert only_control["control_methods"] == []
    no_control = runs_of(None, [2], "grpo-s2")
    assert no_control["control_methods"] == [] and no_control["methods"] == ["grpo"]


def test_profiles_subsets_and_overrides_resolve_into_validated_params() -> None:
    assert profile_names(ROOT)[0] == "current" and "smoke" in profile_names(ROOT)
    resolved = resolve_params(
        ROOT,
        RerunRequest(
            profile="smoke",
            methods=["grpo", "ta_grpo"],
            seeds=[0, 1],
            overrides=["train.learning_rate=2e-4", "evaluate.ks=[1,2]"],
        ),
    )
    assert resolved["common"]["profile"] == "smoke"  # the profile
    assert resolved["runs"] == {
        "methods": ["grpo", "ta_grpo"],
        "seeds": [0, 1],
        "one_seed_methods": [],  # none of them chosen
        "one_seed": [0],
        "control_methods": [],  # grpo_flipped, the smoke profile's control, not chosen
        "control_seeds": [0],
        "data_scaling": {"methods": ["grpo"], "multiples": [2.5], "seeds": [0]},
    }
    assert resolved["train"]["learning_rate"] == 2e-4  # YAML value: a float
    assert resolved["evaluate"]["ks"] == [1, 2]
    current = yaml.safe_load((ROOT / "params.yaml").read_text())
    changes = changed_leaves(current, resolved)
    assert changes["runs.methods"] == ["grpo", "ta_grpo"]
    assert "data.synthetic.train_size" in changes and "train.kl_coef" not in changes


def _runs(request: RerunRequest, root: Path = ROOT) -> dict:
    return resolve_params(root, request)["runs"]


def test_method_and_seed_subsets_restrict_every_list_of_runs(tmp_path: Path) -> None:
    # The checkout's params with these one-seed methods (ta_grpo among them, as in the default:
    # diagnostics.policies names ta_grpo-s0).
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["runs"]["one_seed_methods"] = ["grpo_ds", "ta_grpo", "avspo"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    _runs = functools.partial(globals()["_runs"], root=tmp_path)
    keep_diagnostics = ["diagnostics.policies=[grpo-s0]"]
    runs = _runs(RerunRequest(methods=["grpo", "avspo"], overrides=keep_diagnostics))
    assert runs["methods"] == ["grpo"] and runs["seeds"] == [0, 1, 2]
    assert runs["one_seed_methods"] == ["avspo"] and runs["one_seed"] == [0]  # still one seed
    assert runs["data_scaling"]["methods"] == ["grpo"]
    # Only one-seed methods: trained as runs.methods with their one seed.
    runs = _runs(RerunRequest(methods=["avspo"], overrides=["diagnostics.policies=[avspo-s0]"]))
    assert runs["methods"] == ["avspo"] and runs["seeds"] == [0]
    assert runs["one_seed_methods"] == [] and runs["data_scaling"]["methods"] == []
    # Seeds without the one seed: the one-seed methods and data-scaling runs are not trained.
    runs = _runs(RerunRequest(seeds=[1], overrides=["diagnostics.policies=[grpo-s1]"]))
    assert runs["seeds"] == [1] and runs["one_seed_methods"] == [] and runs["one_seed"] == [1]
    assert runs["data_scaling"]["seeds"] == [] and runs["data_scaling"]["methods"] == []
    assert runs["methods"] == params["runs"]["methods"]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (RerunRequest(overrides=["train.no_such_key=1"]), "train.no_such_key: not a params key"),
        (RerunRequest(overrides=["train.learning_rate=-1"]), "train.learning_rate = -1"),
        (RerunRequest(overrides=["no equals sign"]), "expected key.path=value"),
        (RerunRequest(methods=["grpo"]), "diagnostics.policies ['ta_grpo-s0']"),
        (RerunRequest(profile="nope"), "nope: not one of"),
        (RerunRequest(seeds=[]), "an empty seed list"),
    ],
)
def test_invalid_requests_stop_before_anything_runs(request_: RerunRequest, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        resolve_params(ROOT, request_)


def test_set_param_arguments_speak_dvcs_override_grammar() -> None:
    assert hydra_value([1, 2]) == "[1,2]"
    assert hydra_value(["grpo", "ta_grpo"]) == "[grpo,ta_grpo]"
    assert hydra_value(2e-4) == "0.0002"
    assert hydra_value("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"
    assert hydra_value("two words") == "'two words'"
    assert hydra_value("null") == "'null'" and hydra_value(None) == "null"
    assert hydra_value(True) == "true"
    assert hydra_value({"a": 1}) == "{a:1}"
    resolved = resolve_params(ROOT, RerunRequest(overrides=["train.learning_rate=2e-4"]))
    assert set_param_arguments(ROOT, resolved) == ["-S", "train.learning_rate=0.0002"]


def test_topological_order_follows_dvc_dag() -> None:
    dot = 'strict digraph {\n"a";\n"c";\n"b";\n"a" -> "b";\n"b" -> "c";\n}\n'
    assert topological(*parse_dot(dot)) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="cycle"):
        topological(["a", "b"], [("a", "b"), ("b", "a")])
    order = stage_order(ROOT)
    assert sorted(order) == sorted(load_stages(ROOT))
    position = {stage: index for index, stage in enumerate(order)}
    assert position["data"] < position["base_model"] < position["check_equivalence"]
    assert position["train@grpo-0"] < position["evaluate@grpo-0"] < position["report"]
    one_seed = position["train_one_seed@ta_grpo-0"] < position["evaluate_one_seed@ta_grpo-0"]
    assert one_seed and position["evaluate_one_seed@ta_grpo-0"] < position["report"]
    assert position["diagnostics"] < position["report"]


def _git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_scratch_copy_holds_the_work_tree_the_params_and_linked_outputs(tmp_path: Path) -> None:
    source = tmp_path / "checkout"
    source.mkdir()
    (source / "dvc.yaml").write_text(
        "stages:\n  s:\n    cmd: x\n    outs:\n      - models/m\n"
        "    metrics:\n      - metrics/m.json:\n          cache: false\n"
    )
    (source / "params.yaml").write_text("a: {b: 1}\n")
    (source / "code.py").write_text("old\n")
    (source / "gone.py").write_text("tracked, deleted in the work tree\n")
    (source / ".gitignore").write_text("/models\n/.cache\n")
    (source / ".dvc").mkdir()
    (source / ".dvc" / "config").write_text("[core]\n    analytics = false\n")
    _git(source, "init", "-q")
    _git(source, "add", "-A")
    _git(source, "commit", "-q", "-m", "init")
    (source / "code.py").write_text("edited, not committed\n")
    (source / "new.py").write_text("untracked\n")
    (source / "gone.py").unlink()
    (source / "models" / "m").mkdir(parents=True)
    (source / "models" / "m" / "weights.bin").write_bytes(b"\0" * 100)
    (source / "metrics").mkdir()
    (source / "metrics" / "m.json").write_text("{}\n")
    (source / ".cache").mkdir()
    params_before = (source / "params.yaml").read_bytes()

    target = source / ".tagrpo" / "runs" / "r1"
    commit = prepare_scratch(source, target, {"a": {"b": 2}}, "test: a.b=2")
    assert (source / "params.yaml").read_bytes() == params_before  # never edited
    assert yaml.safe_load((target / "params.yaml").read_text()) == {"a": {"b": 2}}
    assert (target / "code.py").read_text() == "edited, not committed\n"
    assert (target / "new.py").is_file() and not (target / "gone.py").exists()
    linked = target / "models" / "m" / "weights.bin"
    assert os.stat(linked).st_ino == os.stat(source / "models" / "m" / "weights.bin").st_ino
    assert (target / "metrics" / "m.json").is_file()
    assert (target / ".cache").is_symlink()
    assert (
        str((source / ".dvc" / "cache").resolve()) in (target / ".dvc" / "config.local").read_text()
    )
    assert _git(target, "rev-parse", "HEAD").strip() == commit
    assert "tagrpo rerun: test: a.b=2" in _git(target, "log", "-1", "--format=%s")
    assert _git(target, "status", "--porcelain", "--untracked-files=no", "--", "params.yaml") == ""
    with pytest.raises(FileExistsError):
        prepare_scratch(source, target, {"a": {"b": 3}}, "again")


def test_output_logger_logs_lines_and_throttles_progress_bars() -> None:
    from flows.pipeline import OutputLogger

    class Recorder:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def info(self, line: str) -> None:
            self.lines.append(line)

    recorder = Recorder()
    output = OutputLogger(recorder, every_s=3600)
    output.feed("Running stage 'x':\n> python -m stages.x\nsampling:  10%|#")
    output.feed("   | 1/10\rsampling:  50%|#####     | 5/10\rsampling: 100%|##########| 10/10\n")
    output.feed("done\npartial")
    output.close()
    assert recorder.lines == [
        "Running stage 'x':",
        "> python -m stages.x",
        "sampling:  10%|#   | 1/10",  # the first redraw, then none within the interval
        "sampling: 100%|##########| 10/10",  # a bar's final line ends with a newline
        "done",
        "partial",
    ]


def test_the_deployment_form_has_typed_parameters_with_help() -> None:
    from prefect.utilities.callables import parameter_schema

    from flows.pipeline import pipeline
    from tagrpo.algorithms import METHODS

    fields = parameter_schema(pipeline.fn).model_dump()["properties"]
    assert fields["profile"]["enum"] == profile_names(ROOT)
    assert fields["profile"]["default"] == "current"
    assert fields["methods"]["items"]["enum"] == list(METHODS)
    assert fields["methods"]["default"] == []
    assert fields["overrides"]["items"]["pattern"]
    assert fields["mode"]["default"] == "scratch"
    assert all(field["description"] for field in fields.values())


def test_the_flow_loaded_from_its_entrypoint_validates_parameters() -> None:
    """Loaded from its file as a deployment does, the flow refuses values outside the form's
    choices. (That a served run resolves the types is checked with a real server in
    tests/test_pipeline_smoke.py: with string annotations it did not.)"""
    from prefect.exceptions import ParameterTypeError
    from prefect.flows import load_flow_from_entrypoint

    loaded = load_flow_from_entrypoint(str(ROOT / "flows" / "pipeline.py") + ":pipeline")
    valid = loaded.validate_parameters({"profile": "smoke", "methods": ["grpo"], "seeds": [1]})
    assert valid["methods"] == ["grpo"] and valid["mode"] == "scratch"
    key = "rephrase.openai.model=sk-" + "a1B2c3D4" * 3
    wrong_values = ({"profile": "nope"}, {"methods": ["sgd"]}, {"overrides": ["no-equals"]})
    for wrong in (*wrong_values, {"overrides": ["evaluate.n=4", key]}):
        with pytest.raises(ParameterTypeError):
            loaded.validate_parameters(wrong)


def test_a_key_shaped_override_is_refused_by_the_schema_the_server_enforces() -> None:
    """Issue 40.4: Prefect stores a flow run's parameters (and shows them in its UI) before the
    flow runs. The deployment's parameter schema, which the server enforces when a run is
    created from it (and the UI's form checks), refuses a key-shaped override, so no run
    holding one is stored; ordinary overrides pass."""
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import ValidationError, validate

    from flows.pipeline import pipeline

    schema = parameter_schema(pipeline.fn).model_dump()
    keys = [
        "rephrase.openai.model=sk-" + "a1B2c3D4" * 3,
        "report.title=Bearer abcdefghijkl",
        "data.hub.revision=hf_" + "x" * 20,
        "report.title=ghp_" + "y" * 24,
        "report.title=AKIA" + "Z" * 16,
    ]
    for override in keys:
        with pytest.raises(ValidationError):
            validate({"overrides": [override]}, schema, raise_on_error=True)
    ordinary = ["train.learning_rate=2e-4", "report.title=sk-line", "data.hub.revision=abc123"]
    validate({"overrides": ordinary}, schema, raise_on_error=True)


def test_the_flow_command_refuses_a_key_before_any_flow_run_exists(tmp_path: Path) -> None:
    """`python -m flows.pipeline run --set k=sk-...` stops with one line that does not echo
    the key, before a Prefect server starts or a flow run (whose parameters Prefect stores)
    is created (issue 40.4); an invalid override likewise."""
    key = "sk-proj" + "1234567890abcdef"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    for override, expected in (
        (f"rephrase.openai.model={key}", "overrides.0: looks like an API key"),
        ("train.no_such_key=1", "train.no_such_key: not a params key"),
    ):
        command = [sys.executable, "-m", "flows.pipeline", "run", "--profile", "smoke"]
        result = subprocess.run(
            [*command, "--set", override],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 2 and expected in output, output[-3000:]
        assert key not in output and "Traceback" not in output
        assert not list((tmp_path / "prefect").rglob("*.db"))  # no server, no stored run
