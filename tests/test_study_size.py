"""study-v3's size rule (tagrpo/report/study_size.py): the pilot's components, the cost of a main
draw from the records' seconds, and the design the rule chooses, on made-up inputs whose answer
is known."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tagrpo.metrics.compare import SeedRuns
from tagrpo.metrics.draws import draw_seed_components, projected_draw_half_width
from tagrpo.report.study_size import (
    SizeInputs,
    design_table,
    main_draw_seconds,
    projected_half_width,
    run_seconds,
    size_inputs,
)

pytestmark = pytest.mark.core

REGISTRATION = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "preregistration/study-v3.yaml").read_text()
)
PROBLEMS = pd.MultiIndex.from_tuples(
    [("study_long", f"q{j}") for j in range(40)], names=["benchmark", "question_id"]
)


def _runs(values: np.ndarray) -> SeedRuns:
    return SeedRuns(values[:, :, None], PROBLEMS, (16,))


def test_the_method_by_draw_variance_is_the_contrast_variance_less_the_seeds_part() -> None:
    rng = np.random.default_rng(0)
    ta, grpo = [], []
    for draw in range(3):
        shift = 0.05 * draw
        ta.append(_runs(np.clip(rng.uniform(0.2, 0.8, (2, 40)) + shift, 0, 1)))
        grpo.append(_runs(rng.uniform(0.2, 0.8, (2, 40))))
    inputs = size_inputs(ta, grpo, ["study_long"], 16)
    contrast = [t.values[:, :, 0].mean(axis=0).mean() - g.values[:, :, 0].mean(axis=0).mean()
                for t, g in zip(ta, grpo, strict=True)]  # fmt: skip
    assert inputs.between == pytest.approx(np.var(contrast, ddof=1))
    s2_ta = draw_seed_components(ta, ["study_long"], 16).seed
    s2_grpo = draw_seed_components(grpo, ["study_long"], 16).seed
    assert (inputs.s2_ta, inputs.s2_grpo) == pytest.approx((s2_ta, s2_grpo))
    assert inputs.s2_md == pytest.approx(max(inputs.between - (s2_ta + s2_grpo) / 2, 0.0))
    assert (inputs.draws, inputs.seeds, inputs.problem_df) == (3, 2, 39)
    ms = inputs.s2_md + inputs.s2_ta / 4 + inputs.s2_grpo / 4  # S = 4: GRPO max(4, 3)
    assert projected_half_width(inputs, 5, 4) == pytest.approx(
        projected_draw_half_width(inputs.problem, 39, ms, 5)
    )


PIECES = {
    "train": {"grpo": 100.0, "ta_grpo": 300.0, "ta_grpo_unanchored": 300.0, "ta_grpo_star": 300.0,
              "grpo_ds": 200.0, "grpo_x4": 250.0, "grpo_x4_ds": 500.0, "grpo_flipped": 100.0,
              "grpo_data2.5x": 250.0},
    "evaluate_trained": 100.0,
    "evaluate_base": 120.0,
    "diagnostics_per_policy": 10.0,
    "fixed": {"base_model": 400.0},
    "overhead_per_stage": 0.0,
}  # fmt: skip


def test_a_main_draw_costs_its_runs_evaluations_and_fixed_stages() -> None:
    # S = 2: GRPO x 3, six methods x 2, the control x 2, GRPO 2.5x x 2 = 19 trainings.
    runs = 3 * 100 + 2 * (300 * 3 + 200 + 250 + 500) + 2 * 100 + 2 * 250
    assert main_draw_seconds(PIECES, 2) == runs + 19 * 100 + 120 + 4 * 10 + 400


def _inputs(s2_md: float) -> SizeInputs:
    return SizeInputs(problem=0.015**2 / 1.962**2, problem_df=1023, s2_ta=4e-4, s2_grpo=4e-4,
                      s2_md=s2_md, between=0.0, draws=3, seeds=2)  # fmt: skip


def test_the_rule_chooses_the_cheapest_design_within_4_points_then_5_then_the_narrowest() -> None:
    rule = REGISTRATION["size_rule"]
    frame, chosen = design_table(_inputs(0.0), PIECES, rule)
    assert len(frame) == 7 * 4  # D 2..8 x S 2..5
    feasible = frame[frame["hours"] <= 10.0]
    within = feasible[feasible["half_width"] <= 0.04].sort_values(["hours", "draws"])
    assert (chosen["draws"], chosen["seeds_per_draw"]) == tuple(
        within.iloc[0][["draws", "seeds_per_draw"]].astype(int)
    )
    assert chosen["why"].startswith("the cheapest feasible design within 4 points")
    # A large method-by-draw variance: nothing feasible reaches 5 points.
    frame, chosen = design_table(_inputs(0.02), PIECES, rule)
    feasible = frame[frame["hours"] <= 10.0]
    assert (feasible["half_width"] > 0.05).all()
    best = feasible.sort_values(["half_width", "hours"]).iloc[0]
    assert (chosen["draws"], chosen["seeds_per_draw"]) == (int(best["draws"]),
                                                           int(best["seeds_per_draw"]))  # fmt: skip
    assert chosen["why"].startswith("no feasible design reaches V5")
    hours = math.ceil(chosen["draws"] / 2) * main_draw_seconds(PIECES, chosen["seeds_per_draw"])
    assert chosen["projected_hours"] == pytest.approx(hours / 3600, abs=0.01)


def test_the_seconds_come_from_the_records_and_the_default(tmp_path: Path) -> None:
    default = tmp_path / "default"
    (default / "metrics/train").mkdir(parents=True)
    # The project's DAG: its preflight runs on every start (always_changed).
    stages = {"preflight": {"cmd": "true", "always_changed": True}, "data": {"cmd": "true"}}
    (default / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    for name, seconds in (("grpo-s0", 50.0), ("grpo-s1", 70.0), ("grpo_x4-s0", 200.0)):
        (default / f"metrics/train/{name}.json").write_text(json.dumps({"seconds": seconds}))
    records = []
    for draw, scale in ((0, 1.0), (1, 2.0)):
        record = tmp_path / f"draw{draw}"
        for folder in ("metrics/train", "metrics/eval"):
            (record / folder).mkdir(parents=True)
        for name, seconds in (("grpo-s0", 100.0), ("grpo-s1", 140.0), ("ta_grpo-s0", 300.0),
                              ("ta_grpo_unanchored-s0", 330.0)):  # fmt: skip
            (record / f"metrics/train/{name}.json").write_text(
                json.dumps({"seconds": seconds * scale})
            )
        for name, seconds in (("base", 90.0), ("grpo-s0", 60.0), ("ta_grpo-s0", 80.0)):
            (record / f"metrics/eval/{name}.json").write_text(json.dumps({"seconds": seconds}))
        (record / "metrics/base_model.json").write_text(json.dumps({"seconds": 400.0}))
        (record / "metrics/check_equivalence.json").write_text(
            json.dumps({"seconds": {"total_s": 40.0}})
        )
        (record / "metrics/diagnostics.json").write_text(json.dumps({"seconds": 30.0}))
        (record / "params.yaml").write_text(
            yaml.safe_dump({"diagnostics": {"policies": ["a", "b"]}})
        )
        # The last start found all but the evaluations of grpo and ta_grpo, the diagnostics
        # and the report recorded, and ran those and the preflight: 60 + 80 + 30 + 1 s of their
        # own work and 5 s (draw 0) or 7 s (draw 1) of each of the 5 stages' overhead.
        outs = {
            f"train@{name}": f"metrics/train/{name}.json"
            for name in ("grpo-s0", "grpo-s1", "ta_grpo-s0", "ta_grpo_unanchored-s0")
        }
        outs |= {f"eval@{name}": f"metrics/eval/{name}.json" for name in ("base", "grpo-s0")}
        outs |= {"eval@ta_grpo-s0": "metrics/eval/ta_grpo-s0.json"}
        outs |= {name: f"metrics/{name}.json" for name in ("base_model", "diagnostics")}
        outs |= {"check_equivalence": "metrics/check_equivalence.json", "report": "reports/r.md"}
        outs |= {"preflight": "metrics/preflight.json"}  # recorded at start, run again
        (record / "metrics/preflight.json").write_text(json.dumps({"seconds": 1.0}))
        stages = {name: {"outs": [{"path": out}]} for name, out in outs.items()}
        (record / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))
        last_start = {"eval@grpo-s0", "eval@ta_grpo-s0", "diagnostics", "report"}
        draw_file = {
            "seconds_this_start": 171.0 + 5 * (5.0 + 2.0 * draw),
            "stages": len(stages),
            "stages_recorded_at_start": sorted(set(stages) - last_start),
        }
        (record / "DRAW.json").write_text(json.dumps(draw_file))
        records.append(record)
    pieces = run_seconds(records, default, REGISTRATION["size_rule"]["cost"])
    grpo = (100 + 140 + 200 + 280) / 4
    assert pieces["train"]["grpo"] == grpo
    assert pieces["train"]["ta_grpo"] == pieces["train"]["ta_grpo_star"] == 450.0
    assert pieces["train"]["grpo_x4"] == pytest.approx(200.0 * grpo / 60.0)
    assert pieces["train"]["grpo_ds"] == 2.0 * grpo
    assert pieces["train"]["grpo_data2.5x"] == 2.5 * grpo
    assert pieces["evaluate_trained"] == 70.0 and pieces["evaluate_base"] == 90.0
    assert pieces["diagnostics_per_policy"] == 10.0  # 30 s over 2 policies and the base
    assert pieces["fixed"] == {"base_model": 400.0, "check_equivalence": 40.0, "preflight": 1.0}
    assert pieces["overhead_per_stage"] == pytest.approx(6.0)  # the two last starts: 5 and 7 s

    # A last start that ran no stage (the record collected again, in a DAG with no stage that
    # runs on every start) measures nothing; with no measurement at all the cost cannot be
    # priced, and an older record is refused by name.
    (default / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"data": {"cmd": "true"}}}))
    for record in records:
        draw_file = json.loads((record / "DRAW.json").read_text())
        stages = yaml.safe_load((record / "dvc.lock").read_text())["stages"]
        draw_file["stages_recorded_at_start"] = sorted(stages)
        (record / "DRAW.json").write_text(json.dumps(draw_file))
    with pytest.raises(ValueError, match="no pilot record has a last start that ran a stage"):
        run_seconds(records, default, REGISTRATION["size_rule"]["cost"])
    (records[0] / "DRAW.json").write_text(json.dumps({"seconds_this_start": 1.0, "stages": 10}))
    with pytest.raises(ValueError, match=r"draw0/DRAW\.json: no stages_recorded_at_start"):
        run_seconds(records, default, REGISTRATION["size_rule"]["cost"])


def _unsized(text: str) -> str:
    """The registration as it was before its size was written: the top-level ``size:`` block
    (once written, the committed file has it) back to the one ``size: null`` line."""
    lines, kept, skipping = text.splitlines(keepends=True), [], False
    for line in lines:
        if line.startswith("size:"):
            kept.append("size: null\n" if line.rstrip() == "size:" else line)
            skipping = line.rstrip() == "size:"
            continue
        if skipping and line.startswith(" "):
            continue
        skipping = False
        kept.append(line)
    return "".join(kept)


def test_the_chosen_size_is_written_once_into_the_registration() -> None:
    from tagrpo.report.study_size import registration_with_size

    text = _unsized(
        (Path(__file__).resolve().parents[1] / "preregistration/study-v3.yaml").read_text()
    )
    size = {"draws": 4, "seeds_per_draw": 3, "projected_half_width": 0.0391, "why": "x"}
    updated = registration_with_size(text, size)
    assert yaml.safe_load(updated)["size"] == size
    # Everything else byte for byte: only the size line changed.
    before, after = text.splitlines(), updated.splitlines()
    changed = [line for line in before if line not in after]
    assert len(changed) == 1 and changed[0].startswith("size: null")
    with pytest.raises(ValueError, match="already has its size"):
        registration_with_size(updated, size)
    with pytest.raises(ValueError, match="0 'size: null' lines"):
        registration_with_size(text.replace("size: null", "size:  null"), size)
