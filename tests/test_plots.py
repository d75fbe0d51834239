"""DVC plots: templates current and one colour per method, the long-form CSVs, and the page
`dvc plots show` writes rendered offline in headless Chromium (every plot drawn).

The data are small synthetic stage outputs; tests/test_pipeline_smoke.py renders the page of a
real smoke run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from browser import dump_dom, screenshot
from choice_benchmark import WITH_MINI_CHOICE
from not_tested import not_tested

from tagrpo.config.params import config_with
from tagrpo.metrics.compare import chance_pass_at_k
from tagrpo.pipeline.plots import (
    OFFLINE_TEMPLATE,
    TEMPLATE_DIR,
    node_modules,
    offline_template,
    template_text,
    templates,
)
from tagrpo.plumbing.layout import report_outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.report.palette import method_colours
from tagrpo.report.plot_data import PLOT_DATA_ROLES, split_policy, write_plot_data

ROOT = project_root()


def test_committed_templates_are_the_generated_ones() -> None:
    for name, spec in templates().items():
        path = ROOT / TEMPLATE_DIR / f"{name}.json"
        assert path.is_file(), f"{path} missing: run python -m tagrpo.pipeline.plots templates"
        assert path.read_text() == template_text(spec), f"{path} is stale: regenerate it"
    used = {
        entry.get("template")
        for plot in yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
        for entry in plot.values()
    }
    assert set(templates()) <= used, "a generated template no dvc.yaml plot uses"


def test_every_method_has_its_own_colour() -> None:
    from tagrpo.algorithms import METHODS

    colours = method_colours()
    assert set(colours) == {"base", *METHODS}
    assert len(set(colours.values())) == len(colours)
    assert colours["ta_grpo"] == "#d62728" and colours["base"] == "#000000"


def test_policy_names_split_into_method_seed_and_data_multiple() -> None:
    assert split_policy("ta_grpo-s0") == ("ta_grpo", "0", 1.0)
    assert split_policy("grpo_x4_ds-s12") == ("grpo_x4_ds", "12", 1.0)
    assert split_policy("grpo_data2.5x-s1") == ("grpo", "1", 2.5)
    assert split_policy("base") == ("base", "", 1.0)


def vega_libraries() -> Path:
    """node_modules with vega, vega-lite, vega-embed (`make install`), or a loud skip."""
    try:
        return node_modules()
    except FileNotFoundError as error:
        not_tested(str(error))


def test_no_policy_gives_an_empty_long_table_with_its_columns(tmp_path: Path) -> None:
    from tagrpo.report.plot_data import passk_long

    table = passk_long(tmp_path, [])
    assert table.empty
    assert list(table.columns) == [
        "policy", "method", "seed", "data_multiple", "benchmark", "kind", "k",
        "pass_at_k", "ci_low", "ci_high", "n_problems", "n_samples",
    ]  # fmt: skip


def test_offline_template_inlines_the_npm_builds() -> None:
    page = offline_template(vega_libraries())
    assert "{plot_divs}" in page and "{refresh_tag}" in page
    assert "{scripts}" not in page  # dvc-render would insert its CDN tags there
    assert not re.search(r"<script[^>]+src=", page)
    for package in ("vega@5", "vega-lite@5", "vega-embed@6"):
        assert package in page
    assert page.count("<script>") == 3


def _write_stage_outputs(root: Path) -> None:
    """What the stages before the report write, for base, grpo, ta_grpo and a 2x grpo."""
    policies = {"base": 0.30, "grpo-s0": 0.35, "ta_grpo-s0": 0.45, "grpo_data2.0x-s0": 0.40}
    for policy, level in policies.items():
        rows = [
            [
                name,
                kind,
                k,
                min(1.0, level * k**0.5 + shift),
                level * k**0.5 - 0.05,
                level * k**0.5 + 0.05,
                10,
                4,
                policy,
            ]
            for name, kind, shift in [
                ("mini_chains", "benchmark", 0.0),
                ("mini_choice", "benchmark", 0.1),
            ]
            for k in (1, 2, 4)
        ]
        rows += [
            ["competition", "group", k, level * k**0.5, None, None, 10, 4, policy]
            for k in (1, 2, 4)
        ]
        folder = root / "evals" / policy
        folder.mkdir(parents=True)
        pd.DataFrame(
            rows,
            columns=[
                "name",
                "kind",
                "k",
                "pass_at_k",
                "ci_low",
                "ci_high",
                "n_problems",
                "n_samples",
                "policy",
            ],
        ).to_csv(folder / "passk.csv", index=False)
    for policy, slope in (("grpo-s0", 0.01), ("ta_grpo-s0", 0.02)):
        steps = range(1, 11)
        history = {
            "step": list(steps),
            "original/reward_mean": [0.3 + slope * s for s in steps],
            "reward_mean": [0.3 + slope * s for s in steps],
            "kl": [0.001 * s for s in steps],
            "response_length_mean": [20.0] * 10,
            "original/zero_gradient_rate": [0.2 - slope * s for s in steps],
            "train/zero_gradient_rate": [0.1] * 10,
        }
        if policy.startswith("ta_grpo"):
            history["joint/zero_gradient_rate"] = [0.02] * 10
        (root / "plots" / "train").mkdir(parents=True, exist_ok=True)
        pd.DataFrame(history).to_csv(root / "plots" / "train" / f"{policy}.csv", index=False)
    (root / "plots" / "diagnostics").mkdir(parents=True)
    pd.DataFrame(
        [
            ["ta_grpo-s0", label, grouping, size, 4, rate, rate / 2, rate / 2]
            for label, base in (("base", 0.2), ("50%", 0.25), ("100%", 0.22))
            for grouping, size, rate in (("original", 8, base), ("joint", 32, base / 10))
        ],
        columns=[
            "policy",
            "label",
            "grouping",
            "group_size",
            "questions",
            "zero_gradient_rate",
            "all_correct_rate",
            "all_wrong_rate",
        ],
    ).to_csv(root / "plots" / "diagnostics" / "zero_gradient.csv", index=False)
    pd.DataFrame({"step": [1, 2, 3], "loss": [3.0, 2.0, 1.5]}).to_csv(
        root / "plots" / "base_model_sft.csv", index=False
    )
    pd.DataFrame({"phrasing": ["expr", "words"], "success": [0.6, 0.3]}).to_csv(
        root / "plots" / "base_model_phrasings.csv", index=False
    )


@pytest.fixture(scope="module")
def plots_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DVC project with this checkout's plot definitions and the report's plot data."""
    root = tmp_path_factory.mktemp("plots")
    _write_stage_outputs(root)
    config = config_with(
        {
            "runs.methods": ["grpo", "ta_grpo"],
            "runs.seeds": [0],
            "runs.one_seed_methods": [],
            "runs.control_methods": [],
            "runs.data_scaling.methods": ["grpo"],
            "runs.data_scaling.multiples": [2.0],
            **WITH_MINI_CHOICE,  # world v2 has no multiple choice; the chance floor needs one
        }
    )
    outputs = report_outputs()
    metrics = write_plot_data(config, root, {r: root / outputs[r] for r in PLOT_DATA_ROLES})
    assert metrics["competition"]["ta_grpo"]["pass@4"] == pytest.approx(0.9)
    dvc_yaml = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    (root / "dvc.yaml").write_text(yaml.safe_dump({"plots": dvc_yaml["plots"]}))
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=root, check=True, env=_env())
    shutil.copytree(ROOT / TEMPLATE_DIR, root / TEMPLATE_DIR, dirs_exist_ok=True)
    shutil.copy(ROOT / ".dvc" / "config", root / ".dvc" / "config")
    (root / OFFLINE_TEMPLATE).unlink(missing_ok=True)  # tagrpo plots builds it
    return root


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["DVC_NO_ANALYTICS"] = "1"
    return env


def test_plot_data_is_long_form_with_method_and_seed(plots_project: Path) -> None:
    passk = pd.read_csv(plots_project / "plots" / "passk.csv")
    assert set(passk["method"]) == {"base", "grpo", "ta_grpo"}
    assert {"benchmark", "k", "pass_at_k", "ci_low", "ci_high", "policy"} <= set(passk)
    # one row per (policy, benchmark, k): a line per benchmark panel, not a zig-zag
    assert not passk.duplicated(["policy", "benchmark", "k"]).any()
    # The chance floor of the multiple-choice benchmark (10 options), empty for free-form.
    choice = passk[passk["benchmark"] == "mini_choice"]
    assert list(choice["chance"]) == [chance_pass_at_k(10, k) for k in choice["k"]]
    assert passk[passk["benchmark"] != "mini_choice"]["chance"].isna().all()
    rates = pd.read_csv(plots_project / "plots" / "zero_gradient.csv")
    assert set(rates[rates["policy"] == "ta_grpo-s0"]["grouping"]) == {"original", "joint", "train"}
    scaling = pd.read_csv(plots_project / "plots" / "data_scaling.csv")
    assert set(scaling["data_multiple"]) == {1.0, 2.0} and set(scaling["k"]) == {4}
    assert set(scaling["policy"]) == {"grpo-s0", "ta_grpo-s0", "grpo_data2.0x-s0"}


def _plots_page(root: Path) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "tagrpo.pipeline.cli", "plots", "show"],
        cwd=root,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    page = root / "dvc_plots" / "index.html"
    assert page.is_file(), result.stdout
    return page


def check_rendered(page: Path, plots: int, shot: Path | None = None) -> str:
    """The page is self-contained and every plot is drawn in headless Chromium."""
    vega_libraries()
    html = page.read_text()
    assert "cdn.jsdelivr" not in html and not re.search(r"<script[^>]+src=", html)
    assert html.count("vegaEmbed(") == plots
    dom = dump_dom(page.as_uri())
    canvases = [c for c in re.findall(r"<canvas[^>]*>", dom) if 'class="marks"' in c]
    assert len(canvases) == plots, f"{len(canvases)} of {plots} plots drawn"
    for canvas in canvases:
        width, height = (int(re.search(rf'{a}="(\d+)"', canvas)[1]) for a in ("width", "height"))
        assert width > 100 and height > 100, canvas
    if shot is not None:
        screenshot(page.as_uri(), shot)
    return dom


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dvc_plots_page_renders_offline_in_chromium(plots_project: Path) -> None:
    vega_libraries()
    page = _plots_page(plots_project)
    plots = len(yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"])
    check_rendered(page, plots)
    html = page.read_text()
    for title in (
        "pass@k per benchmark",
        "Training reward",
        "Zero-gradient",
        "Identical rewards",
        "training-data multiple",
    ):
        assert title in html
    # Each method in its colour: the pass@k legend lists base, grpo and ta_grpo.
    spec = re.search(r"var spec = (\{.*?\});\s*vegaEmbed\('#pass_at_k'", page.read_text(), re.S)
    assert spec is not None
    assert '"field": "method"' in spec.group(1) and '"field": "benchmark"' in spec.group(1)
