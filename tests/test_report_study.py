"""The study command end to end (python -m tagrpo.report.study) on tiny hand-made checkouts, one
per base draw: every claim row paired by draw, V1-V5 per draw and V5 over the draws, the
report folder with the pre-registration's hash and each draw's dvc.lock; refusals of runs that
are not the pre-registered study (or not one experiment); Part B's power calculation; and the
report stage choosing world v3's family for a checkout that names world-v3.yaml."""

from __future__ import annotations

import hashlib
import json
import subprocess
from math import comb
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tagrpo.config.params import config_with
from tagrpo.plumbing.layout import policy_name, report_outputs
from tagrpo.report.study import main
from tagrpo.report.study_checkouts import experiment_differences, registration_deviations
from tagrpo.report.study_power import PowerInputs, power_table

ROOT = Path(__file__).resolve().parents[1]
METHODS = ["grpo", "grpo_ds", "grpo_x4", "grpo_x4_ds", "ta_grpo_star", "ta_grpo",
           "ta_grpo_unanchored", "grpo_flipped"]  # fmt: skip
SEEDS = (0, 1)
MULTIPLES = (1.5, 2.0, 2.5)
BENCHMARKS = {"mini_chains": "in_distribution", "mini_long": "competition", "mini_unseen": "ood"}
PROBLEMS = 3
N = 4  # samples per problem
WORLD = 424242  # the test's "confirmatory" world seed
TEXTS = ["What is 12 + 7 - 4?", "What is 20 - 3 + 8?", "What is 9 + 5 - 6?"]


def _correct(draw: int, method: str, seed: int, j: int) -> int:
    """Correct samples (of 4) of problem j in every benchmark: fixed per (draw, method, seed),
    varying between them (a seeded generator)."""
    if method == "base":
        return 1 if j == 0 else 0
    low, high = {"grpo_flipped": (0, 2), "grpo": (1, 4), "ta_grpo": (2, 5)}.get(method, (1, 5))
    key = [draw, (["base", *METHODS].index(method) if method in METHODS else 99), seed]
    return int(np.random.default_rng(key).integers(low, high, size=PROBLEMS)[j])


def _pass_at(c: int, k: int) -> float:
    return 1.0 - comb(N - c, k) / comb(N, k)


def _registration(**study: object) -> dict:
    document = yaml.safe_load((ROOT / "preregistration/world-v3.yaml").read_text())
    document["confirmatory"]["world_seed"] = WORLD
    document["study"].update(
        {"base_draws": [0, 1], "seeds_per_draw": 2,
         "primary_endpoint": {"contrast": ["ta_grpo", "grpo"], "group": "in_distribution",
                              "k": 2}},
    )  # fmt: skip
    document["study"].update(study)
    return document


def _config(draw: int, **overrides: object):
    return config_with(
        {
            "base_model.warmstart.seed": draw,
            "data.synthetic.seed": WORLD,
            "runs.methods": METHODS,
            "runs.seeds": list(SEEDS),
            "runs.control_methods": [],
            "runs.one_seed_methods": [],
            "runs.one_seed": [0],
            "runs.data_scaling": {"methods": ["grpo", "grpo_ds"], "multiples": list(MULTIPLES),
                                  "seeds": list(SEEDS)},
            "evaluate.n": N,
            "evaluate.ks": [1, 2],
            "evaluate.bootstrap_resamples": 50,
            "diagnostics.policies": ["ta_grpo-s0", "ta_grpo-s1"],
            "diagnostics.group_size": 2,
            "diagnostics.n_neighbours": 1,
            "report.preregistration": "preregistration/world-v3.yaml",
            "report.primary_group": "in_distribution",
            "report.primary_k": 2,
            **overrides,
        }
    )  # fmt: skip


def _write_policy(root: Path, draw: int, policy: str, method: str, seed: int) -> None:
    rows, passk = [], []
    for benchmark in BENCHMARKS:
        counts = [_correct(draw, method, seed, j) for j in range(PROBLEMS)]
        rows += [
            {"benchmark": benchmark, "question_id": f"{benchmark}-{j}", "correct": i < c,
             "strategy": "forward" if i % 2 == 0 else "backward"}
            for j, c in enumerate(counts)
            for i in range(N)
        ]  # fmt: skip
        for k in (1, 2):
            value = float(np.mean([_pass_at(c, k) for c in counts]))
            passk += [
                {"name": benchmark, "kind": "benchmark", "k": k, "pass_at_k": value},
                {"name": BENCHMARKS[benchmark], "kind": "group", "k": k, "pass_at_k": value},
            ]
    folder = root / "evals" / policy
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "responses.parquet")
    pd.DataFrame(passk).assign(policy=policy).to_csv(folder / "passk.csv", index=False)


def _diagnostics(root: Path, draw: int) -> None:
    samples, distances = [], []
    forward, backward = "12 + 7 = 19.", "12 - 4 = 8."
    for seed in SEEDS:
        policy = f"ta_grpo-s{seed}"
        for q, text in enumerate(TEXTS):
            problem = text.removeprefix("What is ").rstrip("?").split()
            start, first, last = problem[0], problem[2], problem[-1]
            fwd, bwd = f"{start} + {first} = 1.", f"{start} - {last} = 1."
            q0 = [(fwd, 1.0)] * 4 if (q + draw) % 2 else [(fwd, 1.0), (bwd, 0.0)] * 2
            neighbour = [(fwd, 1.0), (bwd, float(seed == 0))]
            for variant, responses in ((0, q0), (1, neighbour)):
                for index, (response, reward) in enumerate(responses):
                    samples.append(
                        {"question_id": f"q{q}", "variant": variant, "sample_index": index,
                         "prompt": text, "response": response, "reward": reward,
                         "policy": policy, "checkpoint": "100%"}
                    )  # fmt: skip
                distances.append(
                    {"question_id": f"q{q}", "variant": variant, "responses": 2,
                     "mean_distance": 0.2 + 0.05 * variant + 0.01 * (q + draw + seed),
                     "policy": policy, "label": "100%"}
                )  # fmt: skip
    del forward, backward
    (root / "diagnostics").mkdir()
    pd.DataFrame(samples).to_parquet(root / "diagnostics" / "samples.parquet")
    (root / "plots" / "diagnostics").mkdir(parents=True)
    pd.DataFrame(distances).to_csv(root / "plots" / "diagnostics" / "distances.csv", index=False)


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def build_checkout(root: Path, draw: int, registration: dict, **overrides: object) -> Path:
    """A built checkout of one base draw: params, the pre-registration (committed), every
    policy's evaluations, GRPO's training histories, the training summaries, the base's probe
    summary, the diagnostics of TA-GRPO's policies and a dvc.lock."""
    root.mkdir(parents=True)
    config = _config(draw, **overrides)
    (root / "params.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
    (root / "preregistration").mkdir()
    (root / "preregistration" / "world-v3.yaml").write_text(yaml.safe_dump(registration))
    (root / "dvc.lock").write_text(f"schema: '2.0'\nstages: {{}}\n# draw {draw}\n")
    _write_policy(root, draw, "base", "base", 0)
    (root / "metrics" / "train").mkdir(parents=True)
    (root / "plots" / "train").mkdir(parents=True)
    for method in METHODS:
        for seed in SEEDS:
            policy = policy_name(method, seed)
            _write_policy(root, draw, policy, method, seed)
            summary = {"optimiser_updates": 80}
            (root / "metrics" / "train" / f"{policy}.json").write_text(json.dumps(summary))
            rewards = [0.2, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5 + 0.01 * seed, 0.55]
            pd.DataFrame({"step": range(1, 9), "original/reward_mean": rewards}).to_csv(
                root / "plots" / "train" / f"{policy}.csv", index=False
            )
    for method in ("grpo", "grpo_ds"):
        for multiple in MULTIPLES:
            for seed in SEEDS:
                _write_policy(root, draw, policy_name(method, seed, multiple), method, seed)
    summary = {"probe/original/groups": 160.0, "probe/original/zero_gradient_rate": 0.5}
    (root / "metrics" / "base_model.json").write_text(json.dumps(summary))
    _diagnostics(root, draw)
    _git(root, "init", "-q")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", "params.yaml",
         "dvc.lock", "preregistration")  # fmt: skip
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "draw")
    return root


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("study")
    registration = _registration()
    return {f"draw{d}": build_checkout(base / f"d{d}", d, registration) for d in (0, 1)}


def _runs_args(checkouts: dict[str, Path]) -> list[str]:
    return [item for label, root in checkouts.items() for item in ("--run", f"{label}={root}")]


def test_the_study_over_two_draws_writes_every_row_paired_by_draw(
    checkouts: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    main([*_runs_args(checkouts), "--out", str(out)])
    assert "V5 over the draws FAIL" in capsys.readouterr().out
    report = (out / "report.md").read_text()
    digest = hashlib.sha256(
        (checkouts["draw0"] / "preregistration/world-v3.yaml").read_bytes()
    ).hexdigest()
    assert f"SHA-256 `{digest}`" in report and "last committed at `" in report
    assert "EXPLORATORY" not in report
    claims = pd.read_csv(out / "tables" / "claims.csv")
    assert claims["kind"].tolist()[:2] == ["control", "null control"]
    assert int(claims["in_family"].sum()) == 11
    # The primary endpoint, by hand: per draw, TA-GRPO's seed mean minus GRPO's at pass@2 on
    # mini_chains, then the mean over the two draws.
    per_draw = [
        np.mean([_pass_at(_correct(d, "ta_grpo", s, j), 2) for s in SEEDS for j in range(3)])
        - np.mean([_pass_at(_correct(d, "grpo", s, j), 2) for s in SEEDS for j in range(3)])
        for d in (0, 1)
    ]
    primary = claims[claims["claim"] == "TA-GRPO beats GRPO at pass@2 (primary endpoint)"]
    assert primary["estimate"].item() == pytest.approx(np.mean(per_draw))
    assert primary["seeds"].item().startswith("2 draws x 2 vs 2 seeds (paired by draw")
    # Two draws cannot resolve 2 points: V5 over the draws fails, every family row says so.
    family = claims[claims["in_family"]]
    assert family["verdict"].str.contains("underpowered: not evidence|not measurable").all()
    validity = pd.read_csv(out / "tables" / "validity_by_draw.csv")
    assert set(validity["draw"]) == {"draw0", "draw1", "over draws"}
    for draw in ("draw0", "draw1"):
        criteria = set(validity.loc[validity["draw"] == draw, "criterion"])
        assert {"V1 (policy)", "V1 (reward)", "V2", "V3", "V4", "V5", "regime"} <= criteria
    v5 = validity[validity["draw"] == "over draws"].iloc[0]
    assert v5["criterion"] == "V5 (over draws)" and v5["verdict"] == "FAIL"
    assert v5["measured"].startswith("+/-") and "2 draws" in v5["measured"]
    assert "V5 (over draws)" in report and "## Each draw alone" in report
    per_draw_table = pd.read_csv(out / "tables" / "per_draw.csv")
    alone = per_draw_table[per_draw_table["claim"] == primary["claim"].item()]
    assert alone["estimate"].tolist() == pytest.approx(per_draw)
    # The claims table alone (for README to quote) is the report's.
    assert (out / "claims.md").read_text().strip() in report
    for draw, root in checkouts.items():
        copied = out / "draws" / draw / "dvc.lock"
        assert copied.read_bytes() == (root / "dvc.lock").read_bytes()
    scores = pd.read_csv(out / "tables" / "scores.csv")
    assert {"base", "ta_grpo", "grpo_data2.5x"} <= set(scores["method"])


def test_runs_that_are_not_the_pre_registered_study_are_refused_or_labelled(
    tmp_path: Path,
) -> None:
    registration = _registration(seeds_per_draw=3)
    checkouts = {f"draw{d}": build_checkout(tmp_path / f"d{d}", d, registration) for d in (0, 1)}
    with pytest.raises(SystemExit, match="grpo has 2 seeds per draw, 3 registered"):
        main([*_runs_args(checkouts), "--out", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()
    main([*_runs_args(checkouts), "--exploratory", "--out", str(tmp_path / "exploratory")])
    report = (tmp_path / "exploratory" / "report.md").read_text()
    assert "**EXPLORATORY: not the pre-registered study.**" in report
    assert "- ta_grpo has 2 seeds per draw, 3 registered" in report
    assert "`python -m tagrpo.report.study --exploratory --run draw0=... --run draw1=...`" in report


def test_draws_that_are_not_one_experiment_are_refused() -> None:
    first = _config(0).model_dump(mode="json")
    second = _config(1, **{"train.learning_rate": 1e-4, "local.device": "cuda"}).model_dump(
        mode="json"
    )
    problems = experiment_differences({"draw0": first, "draw1": second})
    # The base draw and where a run executes may differ; what it computes may not.
    assert problems == ["train.learning_rate differs between draws (draw0: 0.0006, draw1: 0.0001)"]


def test_the_committed_pre_registration_sizes_a_study_these_runs_are_not(
    checkouts: dict[str, Path],
) -> None:
    """Against world-v3.yaml as committed (frozen, accepted, Part B filled: 5 draws of 5
    seeds): the fixture's two draws of fewer seeds on another world are refused without
    --exploratory, and every difference is named, the size first."""
    from tagrpo.report.study_checkouts import read_study

    study = read_study(checkouts)
    committed = yaml.safe_load((ROOT / "preregistration/world-v3.yaml").read_text())
    registered = committed["study"]
    deviations = registration_deviations(committed, study.configs, study.provenances)
    seed = committed["confirmatory"]["world_seed"]
    endpoint = registered["primary_endpoint"]
    assert deviations[:2] == [
        f"base draws [0, 1] run, {sorted(registered['base_draws'])} registered",
        f"data.synthetic.seed is 424242, the confirmatory world {seed}",
    ]
    assert f"grpo has {len(SEEDS)} seeds per draw, {registered['seeds_per_draw']} registered" in (
        deviations
    )
    assert (
        f"primary endpoint (in_distribution, 2) run, ({endpoint['group']}, {endpoint['k']}) "
        "registered"
    ) in deviations
    assert registration_deviations(study.registration, study.configs, study.provenances) == []


def test_part_b_power_from_grpo_and_the_base(
    checkouts: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    main(["--power", *_runs_args(checkouts)])
    text = capsys.readouterr().out
    # GRPO's per-seed scores at pass@2 on mini_chains, by hand.
    scores = np.array(
        [[np.mean([_pass_at(_correct(d, "grpo", s, j), 2) for j in range(3)]) for s in SEEDS]
         for d in (0, 1)]
    )  # fmt: skip
    seed = scores.var(axis=1, ddof=1).mean()
    between = scores.mean(axis=1).var(ddof=1)
    assert f"seed-level variance of one seed's score {1e4 * seed:.3f}" in text
    assert f"between-draw variance of its mean score {1e4 * between:.3f}" in text
    assert "the pre-registration's primary endpoint" in text
    assert "| D = 2 |" in text and "| D = 5 |" in text
    assert ("**Chosen: D = " in text) != ("**No design with D <= 5" in text)


def test_the_cheapest_design_within_the_caps() -> None:
    # No problem term and no draws' own variance: the mean square is 2 x seed / S.
    inputs = PowerInputs("in_distribution", 32, seed=4e-4, draw=0.0, between=2e-4, draws=3,
                         seeds=3, problem=0.0, problem_df=250.0)  # fmt: skip
    frame, chosen, reached = power_table(inputs, 0.02)
    assert reached and len(frame) == 16
    # Cost D x S, then the fewer draws: the first reaching design in that order.
    ordered = frame[["draws", "seeds_per_draw"]].apply(tuple, axis=1).tolist()
    assert ordered[:3] == [(2, 2), (2, 3), (3, 2)]
    first = frame[frame["reaches"]].iloc[0]
    assert chosen == (int(first["draws"]), int(first["seeds_per_draw"]))
    assert not frame[frame["trainings_per_method"] < first["trainings_per_method"]]["reaches"].any()
    # A tie in cost goes to the fewer draws: (2, 4) before (4, 2).
    assert ordered.index((2, 4)) < ordered.index((4, 2))
    wide = PowerInputs("in_distribution", 32, seed=0.1, draw=0.1, between=0.1, draws=3,
                       seeds=3, problem=0.01, problem_df=250.0)  # fmt: skip
    _, chosen, reached = power_table(wide, 0.02)
    assert (chosen, reached) == ((5, 5), False)


def test_the_report_stage_uses_world_v3_s_family_for_a_v3_checkout(
    checkouts: dict[str, Path], tmp_path: Path
) -> None:
    from tagrpo.config.params import load_config
    from tagrpo.plumbing.layout import BASE_POLICY
    from tagrpo.report.inputs import read_passk
    from tagrpo.report.statistics_section import statistics_sections

    root = checkouts["draw0"]
    config = load_config(root / "params.yaml")
    out = {role: tmp_path / path for role, path in report_outputs().outs.items()}
    for path in out.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    passk = read_passk(root, [BASE_POLICY, *config.runs.policies()])
    _, claims, _, headline = statistics_sections(config, root, out, passk)
    rows = [line for line in claims.splitlines()[2:]]
    assert rows[0].startswith("| Negative control") and rows[1].startswith("| A/A null")
    assert "conditional on the base draw (SFT seed 0)" in claims
    assert sum("underpowered: not evidence" in row or "not measurable" in row
               for row in rows) >= 11  # fmt: skip
    assert "claims/ta_grpo_beats_grpo_at_pass_2_primary_endpoint/estimate" in headline
