"""World v3's calibration rules over base draws (tagrpo.report.draws): the competition length
and the primary endpoint, on hand-made pass@k tables; the confirmatory draws' verdict
(``--confirmatory``) on fake checkouts of the confirmatory profile."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tagrpo.config.params import config_with, validate_params
from tagrpo.config.profiles import merged_with_profile
from tagrpo.report import draw_checkouts, draws
from tagrpo.report.draws import competition_rule, confirmatory_seed, primary_endpoint_rule
from tagrpo.report.inputs import read_passk
from tagrpo.report.validity import Bands

pytestmark = pytest.mark.core

V3 = Bands(harder_pass_at_1=(0.02, 1.0), harder_pass_at_k=(0.25, 0.85))


def _passk(policy: str, values: dict[tuple[str, int], float]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"policy": policy, "kind": "group", "name": g, "k": k, "pass_at_k": v}
            for (g, k), v in values.items()
        ]
    )


def _base(long4: tuple[float, float], long5: tuple[float, float]) -> pd.DataFrame:
    return _passk(
        "base",
        {
            ("competition", 1): long4[0],
            ("competition", 32): long4[1],
            ("competition5", 1): long5[0],
            ("competition5", 32): long5[1],
        },
    )


LENGTHS = {4: "competition", 5: "competition5"}


def test_competition_rule_needs_every_draw_and_prefers_the_mean_nearer_55() -> None:
    both = {
        "d0": _base((0.10, 0.60), (0.03, 0.40)),
        "d1": _base((0.12, 0.70), (0.05, 0.45)),
    }
    chosen, rows = competition_rule(both, LENGTHS, V3, 32)
    # Both pass; chains of 4 average 65% (10 from 55), chains of 5 42.5% (12.5 from 55).
    assert chosen == "competition" and [r[-1] for r in rows] == ["PASS", "PASS"]
    assert rows[0][2:] == ["10.0 / 60.0", "12.0 / 70.0", "65.0", "PASS"]
    one_draw_fails = {
        "d0": _base((0.10, 0.60), (0.03, 0.40)),
        "d1": _base((0.12, 0.90), (0.019, 0.45)),  # 4: pass@32 over 85%; 5: pass@1 under 2%
    }
    chosen, rows = competition_rule(one_draw_fails, LENGTHS, V3, 32)
    assert chosen is None and [r[-1] for r in rows] == ["FAIL", "FAIL"]
    with pytest.raises(KeyError, match="no base pass@1 and pass@32"):
        competition_rule({"d0": _base((0.1, 0.6), (0.1, 0.6))}, {6: "competition6"}, V3, 32)


def _grpo(draw: dict[tuple[str, int], list[float]]) -> pd.DataFrame:
    """Per (group, k) the values of the draw's seeds."""
    frames = []
    for seed in range(len(next(iter(draw.values())))):
        frames.append(_passk(f"grpo-s{seed}", {key: v[seed] for key, v in draw.items()}))
    return pd.concat(frames, ignore_index=True)


ORDER = [("in_distribution", 32), ("competition", 32), ("in_distribution", 16)]


def test_primary_endpoint_is_the_first_pair_inside_the_band_on_every_draw() -> None:
    draws = {
        "d0": _grpo(
            {
                ("in_distribution", 32): [0.95, 0.90, 0.80],  # mean 88.3: a ceiling
                ("competition", 32): [0.80, 0.86, 0.70],  # mean 78.7
                ("in_distribution", 16): [0.7, 0.7, 0.7],
            }
        ),
        "d1": _grpo(
            {
                ("in_distribution", 32): [0.80, 0.80, 0.80],
                ("competition", 32): [0.60, 0.60, 0.63],
                ("in_distribution", 16): [0.7, 0.7, 0.7],
            }
        ),
    }
    chosen, rows = primary_endpoint_rule(draws, ORDER, (0.30, 0.85), "competition")
    assert chosen == ("competition", 32)
    assert [r[-1] for r in rows] == ["FAIL", "PASS"]  # the order stops at the first pass
    assert rows[0][2] == "d0 88.3, d1 80.0"
    # Without an L_c the competition group cannot be the endpoint: the order goes on.
    chosen, rows = primary_endpoint_rule(draws, ORDER, (0.30, 0.85), None)
    assert chosen == ("in_distribution", 16) and rows[1][2] == "no L_c"
    chosen, _ = primary_endpoint_rule(draws, ORDER[:1], (0.30, 0.85), "competition")
    assert chosen is None


def test_the_confirmatory_seed_comes_from_the_freeze_commit() -> None:
    commit = "0000c350" + "ab" * 16  # 0x0000c350 = 50000
    assert confirmatory_seed(commit, [0, 11]) == 50000
    assert confirmatory_seed(commit, [50000, 50001, 3]) == 50002  # used seeds are skipped
    assert confirmatory_seed("fffffffff", []) == 0xFFFFFFFF % 1_000_000
    with pytest.raises(ValueError, match="not a commit"):
        confirmatory_seed("main", [])


# --------------------------------------------------------------------------- confirmatory draws
# Fake checkouts of the confirmatory profile (profiles/confirmatory.yaml, with the competition
# group evaluated at chain lengths 4 and 5 as calibration does): params.yaml, the committed
# pre-registration, every policy's pass@k table and in-distribution responses, and the draw's
# validity rows in fake-validity.csv, which the patched recomputed_rows returns (the rows' own
# computation is the report's, tested with it).

ROOT = Path(__file__).resolve().parents[1]
REGISTRATION = yaml.safe_load((ROOT / "preregistration/world-v3.yaml").read_text())
GRPO = [f"grpo-s{seed}" for seed in (0, 1, 2)]
POLICIES = ["base", *GRPO, "grpo_flipped-s0", "grpo_flipped-s1"]
SAMPLES = 32  # per problem
KS = (1, 2, 4, 8, 16, 32)


def _confirmatory_config(draw: int, **overrides: object):
    merged = merged_with_profile(ROOT / "profiles/confirmatory.yaml", ROOT / "params.yaml")
    profile = validate_params(merged, "profiles/confirmatory.yaml")
    benchmarks = profile.model_dump(mode="json")["data"]["synthetic"]["benchmarks"]
    return config_with(
        {
            "base_model.warmstart.seed": draw,
            "data.synthetic.benchmarks": {
                **benchmarks, "mini_long5": {"size": 96, "lengths": {5: 1.0}}
            },
            "evaluate.groups": {**profile.evaluate.groups, "competition5": ["mini_long5"]},
            **overrides,
        },
        base=profile,
    )  # fmt: skip


def _rows(**changed: tuple[str, str]) -> list[list[str]]:
    """A draw's validity rows, every one passing but V5 (not run) and the chains of 5; a
    criterion in ``changed`` gets that (measured, verdict)."""
    rows = {
        "V1 (policy)": ("+41.54 [+21.84, +61.24] points (3 GRPO seeds)", "PASS"),
        "V1 (reward)": ("+42.84 [+20.01, +65.66] points over 3 run(s)", "PASS"),
        "V2": ("p = 0.0010 (1000 permutations)", "PASS"),
        "V3": ("+24.34 [+19.11, +27.26] points over 256 problems", "PASS"),
        "V4": ("grpo_flipped: +21.85 [+15.59, +28.11] points", "PASS"),
        "V5": ("not run: runs lacks ta_grpo or grpo", "FAIL"),
        "edges: mini_chains": ("59.6%", "PASS"),
        "edges: mini_long": ("36.4%", "PASS"),
        "edges: mini_unseen": ("36.6%", "PASS"),
        "edges: mini_long5": ("95.0%", "FAIL"),
        "harder: competition": ("pass@1 6.2%, pass@32 36.4%", "PASS"),
        "harder: competition5": ("pass@1 1.0%, pass@32 28.2%", "FAIL"),
        "regime": ("56.2% [48.5, 63.7] of 160 groups", "PASS"),
    }
    rows.update(changed)
    return [[name, f"the band of {name}", *value] for name, value in rows.items()]


def _group_values(
    policy: str, draw: int, competition: dict[int, tuple[float, float]]
) -> dict[tuple[str, int], float]:
    """pass@k per (group, k): the base's competition groups from (pass@1, pass@32) per chain
    length (linear in log2 k between them); GRPO's rising with k, the draw and the seed."""
    values = {}
    for k in KS:
        if policy == "base":
            for length, group in ((4, "competition"), (5, "competition5")):
                low, high = competition[length]
                values[(group, k)] = low + (high - low) * (k.bit_length() - 1) / 5
            values[("in_distribution", k)] = min(0.05 * k, 0.6)
        else:
            seed = int(policy.rsplit("-s", 1)[1])
            for group in ("in_distribution", "competition", "competition5"):
                values[(group, k)] = min(0.2 + 0.02 * k + 0.01 * (draw + seed), 0.99)
    return values


def build_confirmatory_checkout(
    root: Path,
    draw: int,
    rows: list[list[str]],
    registration: dict | None = None,
    competition: dict[int, tuple[float, float]] | None = None,
    **overrides: object,
) -> Path:
    """A fake built checkout of one confirmatory draw (``competition``: the base's pass@1 and
    pass@32 per chain length, default 6% and 40% at both). Every problem of mini_chains: the
    base 4 correct of 32, each GRPO seed 12 + 2 x draw (the negative control 6)."""
    config = _confirmatory_config(draw, **overrides)
    (root / "preregistration").mkdir(parents=True)
    (root / "params.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
    (root / "preregistration/world-v3.yaml").write_text(
        yaml.safe_dump(registration or REGISTRATION)
    )
    pd.DataFrame(rows, columns=["criterion", "requirement", "measured", "verdict"]).to_csv(
        root / "fake-validity.csv", index=False
    )
    for policy in POLICIES:
        correct = {"base": 4, "grpo_flipped-s0": 6, "grpo_flipped-s1": 6}.get(policy, 12 + 2 * draw)
        folder = root / "evals" / policy
        folder.mkdir(parents=True)
        pd.DataFrame(
            [
                {"benchmark": "mini_chains", "question_id": f"q{j}", "correct": i < correct}
                for j in range(4)
                for i in range(SAMPLES)
            ]
        ).to_parquet(folder / "responses.parquet")
        values = _group_values(policy, draw, competition or {4: (0.06, 0.40), 5: (0.06, 0.40)})
        _passk(policy, values).to_csv(folder / "passk.csv", index=False)
    return root


@pytest.fixture
def fake_rows(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, list[str]]]:
    """recomputed_rows reads a checkout's fake-validity.csv; each call is recorded (root,
    harder groups)."""
    calls: list[tuple[Path, list[str]]] = []

    def rows(root: Path, harder: Sequence[str] = ()) -> pd.DataFrame:
        calls.append((root, list(harder)))
        return pd.read_csv(root / "fake-validity.csv", dtype=str)

    monkeypatch.setattr(draw_checkouts, "recomputed_rows", rows)
    return calls


def _checkouts(
    tmp_path: Path,
    rows: dict[int, list[list[str]]] | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    **kwargs: object,
) -> dict[str, Path]:
    """Fake checkouts of the draws ``seeds`` (``rows``: a draw's rows, default :func:`_rows`)."""
    return {
        f"draw{d}": build_confirmatory_checkout(
            tmp_path / f"d{d}", d, (rows or {}).get(d, _rows()), **kwargs
        )
        for d in seeds
    }


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end)]


def test_confirmatory_uses_the_frozen_length_where_the_other_passes_the_rule(
    tmp_path: Path, fake_rows: list[tuple[Path, list[str]]]
) -> None:
    # Chains of 5 pass the competition rule on every draw; chains of 4 (the frozen L_c) fail
    # its pass@1 floor on draw 1, and so does draw 1's row.
    long5 = {
        "harder: competition5": ("pass@1 5.0%, pass@32 55.0%", "PASS"),
        "edges: mini_long5": ("55.0%", "PASS"),
    }
    checkouts = {
        f"draw{d}": build_confirmatory_checkout(
            tmp_path / f"d{d}",
            d,
            _rows(**long5)
            if d != 1
            else _rows(**long5, **{"harder: competition": ("pass@1 1.0%, pass@32 30.0%", "FAIL")}),
            competition={4: (0.01 if d == 1 else 0.03, 0.30), 5: (0.05, 0.55)},
        )
        for d in (0, 1, 2)
    }
    base = {label: read_passk(root, ["base"]) for label, root in checkouts.items()}
    chosen, _ = competition_rule(base, LENGTHS, V3, 32)
    assert chosen == "competition5"  # what re-choosing L_c would give
    text, passed = draws.confirmatory_markdown(checkouts, "CMD")
    assert not passed
    assert fake_rows == [(root, ["competition5"]) for root in checkouts.values()]
    assert "L_c = chains of 4, the group `competition`;" in text
    deciding = _section(text, "**Acceptance rows**", "Rows shown but not deciding")
    assert "| harder: competition | the band of harder: competition | PASS | FAIL | PASS |" in (
        deciding
    )
    assert "competition5" not in deciding and "mini_long5" not in deciding
    shown = _section(text, "Rows shown but not deciding", "**Verdict")
    assert "| harder: competition5 | " + " | ".join(["pass@1 5.0%, pass@32 55.0%"] * 3) in shown
    assert text.splitlines()[-1] == (
        "**Verdict: NOT ACCEPTED** (every acceptance row passes on 2 of 3 confirmatory draws: "
        "draw0, draw2; failing: draw1: harder: competition (pass@1 1.0%, pass@32 30.0%))."
    )


def test_confirmatory_accepts_when_every_row_passes_on_every_draw(
    tmp_path: Path, fake_rows: list[tuple[Path, list[str]]]
) -> None:
    # V5 (not run) and the chains of 5 fail on every draw: neither decides. The frozen primary
    # endpoint's GRPO means (53, 54, 55%) leave a band narrowed to [30, 53.5]%: shown, not
    # deciding either.
    registration = yaml.safe_load(yaml.safe_dump(REGISTRATION))
    registration["calibration"]["primary_endpoint_rule"]["grpo_mean_pass_at_k_band"] = [
        0.30,
        0.535,
    ]
    checkouts = _checkouts(tmp_path, registration=registration)
    text, passed = draws.confirmatory_markdown(checkouts, "CMD")
    assert passed
    lines = text.splitlines()
    assert lines[0] == (
        "Made by `CMD` (tagrpo.report.draws), under `preregistration/world-v3.yaml` "
        "(`world-v3.yaml`); world seed 279846, base draws draw0 (SFT seed 0), draw1 (SFT seed "
        "1), draw2 (SFT seed 2)."
    )
    assert lines[2] == (
        "**Frozen** (candidate 2, RL budget H3; train.epochs 3, train.learning_rate 0.0006, "
        "train.min_lr_ratio 0.1, train.batch_questions 32; not re-chosen here): L_c = chains of "
        "4, the group `competition`; the primary endpoint: group `competition`, pass@16."
    )
    assert lines[4] == (
        "**The primary endpoint's band** (a design check for Part B; it does not decide "
        "acceptance): GRPO's pass@16 on `competition`, each draw's mean over its 3 seeds (%): "
        "draw0 53.0, draw1 54.0, draw2 55.0; in the registered band [30, 53.5]% on every draw: "
        "no."
    )
    # Base 4 of 32 correct on every problem; GRPO 12, 14, 16 of 32 on draws 0, 1, 2.
    assert lines[6].startswith(
        "**GRPO minus the base, pass@1, in_distribution, over the 3 draw(s)** (the draw as the "
        "replicated unit): +31.25 ["
    )
    assert "| V5 | not run: runs lacks ta_grpo or grpo |" in _section(
        text, "Rows shown but not deciding", "**Verdict"
    )
    assert lines[-1] == (
        "**Verdict: ACCEPTED** (every acceptance row passes on 3 of 3 confirmatory draws: "
        "draw0, draw1, draw2)."
    )
    out = tmp_path / "draws.md"
    runs = [item for label, root in checkouts.items() for item in ("--run", f"{label}={root}")]
    draws.main(["--confirmatory", *runs, "--out", str(out)])
    command = "python -m tagrpo.report.draws --confirmatory " + " ".join(
        f"--run {label}=..." for label in checkouts
    )
    assert out.read_text() == draws.confirmatory_markdown(checkouts, command)[0] + "\n"
    with pytest.raises(SystemExit):
        draws.main(["--confirmatory", "--calibration", *runs])


def _frozen(*ids: int) -> dict:
    registration = yaml.safe_load(yaml.safe_dump(REGISTRATION))
    for candidate in registration["candidates"]:
        candidate["outcome"]["frozen"] = candidate["id"] in ids
    return registration


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"data.synthetic.seed": 3101},
            "draw draw0: data.synthetic.seed is 3101, not confirmatory.world_seed 279846",
        ),
        (
            {"seeds": (0, 1)},
            "the draws' base_model.warmstart.seed [0, 1] are not confirmatory.base_draws "
            "[0, 1, 2]: missing [2], extra []",
        ),
        (
            {"seeds": (0, 1, 2, 3)},
            "the draws' base_model.warmstart.seed [0, 1, 2, 3] are not confirmatory.base_draws "
            "[0, 1, 2]: missing [], extra [3]",
        ),
        (
            {"train.epochs": 2},
            "draw draw0: train.epochs is 2.0, not the frozen candidate 2's rl_budget.epochs 3",
        ),
        (
            {"registration": _frozen()},
            "preregistration/world-v3.yaml: 0 candidates with outcome.frozen: true ([]); the "
            "confirmatory draws judge exactly one",
        ),
        (
            {"registration": _frozen(1, 2)},
            "preregistration/world-v3.yaml: 2 candidates with outcome.frozen: true ([1, 2])",
        ),
    ],
    ids=["world seed", "missing draw", "extra draw", "epochs", "no frozen", "two frozen"],
)
def test_confirmatory_refuses_draws_that_are_not_the_registered_ones(
    tmp_path: Path,
    fake_rows: list[tuple[Path, list[str]]],
    kwargs: dict,
    message: str,
) -> None:
    checkouts = _checkouts(tmp_path, **kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        draws.confirmatory_markdown(checkouts, "CMD")
    assert fake_rows == []  # refused before any row is computed


def test_the_command_refuses_a_draw_label_given_twice(tmp_path: Path, capsys) -> None:
    # Two checkouts under one label used to keep the second silently: a draw judged on the
    # wrong checkout, or one draw fewer than the command line names.
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "params.yaml").write_text("common: {}\n")
    with pytest.raises(SystemExit):
        draws.main(
            ["--confirmatory", "--run", f"d0={tmp_path / 'a'}", "--run", f"d0={tmp_path / 'b'}"]
        )
    assert "--run d0 is given twice" in capsys.readouterr().err
