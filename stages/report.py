"""DVC stage ``report``: ``reports/report.md`` and its figures, from the stages' metrics.

Reads the data counts, the equivalence stage's section, the base model's signal figures, the
training summaries and every policy's pass@k table, and writes a Markdown report with a
Table 1-style pass@k table, the full pass@k table with bootstrap CIs, and pass@k curves (PNG).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tagrpo.env import apply_offline_defaults

apply_offline_defaults()

import pandas as pd  # noqa: E402

from tagrpo.params import load_params, stage_params  # noqa: E402
from tagrpo.paths import project_root  # noqa: E402
from tagrpo.report.markdown import (  # noqa: E402
    markdown_table,
    passk_curves,
    passk_long_table,
    table1,
)
from tagrpo.report.training import load_training_summaries, training_section  # noqa: E402
from tagrpo.tracking import git_state, stage_run  # noqa: E402


def data_section(counts: dict[str, Any]) -> str:
    rows = [
        [key, fields["rows_in"], fields["kept"], fields["rejected"]]
        for key, fields in counts["sources"].items()
    ]
    total = counts["total"]
    rows.append(["**total**", total["rows_in"], total["kept"], total["rejected"]])
    return (
        "## Data\n\nEvery upstream row is kept or rejected with a reason (rows in = kept + "
        "rejected).\n\n" + markdown_table(["split/source", "rows in", "kept", "rejected"], rows)
    )


def base_model_section(metrics: dict[str, float], phrasings: pd.DataFrame) -> str:
    lines = ["## Base policy", ""]
    if "parameters" in metrics:
        lines.append(
            f"Warm-started tiny Llama: {int(metrics['parameters']):,} parameters, "
            f"vocabulary {int(metrics['vocab_size'])}, SFT on {int(metrics['sft_examples']):,} "
            f"examples, final loss {metrics['sft_final_loss']:.3f}, "
            f"{metrics['sft_seconds']:.0f} s on CPU."
        )
        lines.append("")
    if "probe/success_original" not in metrics:
        lines.append("No phrasing probe was run for this profile.")
        return "\n".join(lines)
    g = "G"
    figures = [
        ["training questions probed", int(metrics["probe/questions"])],
        ["success on original phrasing", f"{100 * metrics['probe/success_original']:.1f}%"],
        [
            f"original {g}-groups with mixed rewards",
            f"{100 * metrics['probe/original/mixed_rate']:.1f}%",
        ],
        [
            f"original {g}-groups all correct / all wrong",
            f"{100 * metrics['probe/original/all_correct_rate']:.1f}% / "
            f"{100 * metrics['probe/original/all_wrong_rate']:.1f}%",
        ],
        [
            "neighbour Nx{g} groups with identical rewards".replace("{g}", g),
            f"{100 * metrics.get('probe/neighbours/zero_gradient_rate', float('nan')):.1f}%",
        ],
        [
            f"joint (N+1)x{g} groups with identical rewards",
            f"{100 * metrics['probe/joint/zero_gradient_rate']:.1f}%",
        ],
        [
            "success spread across phrasings (max - min)",
            f"{100 * metrics['probe/phrasing_spread']:.1f} points",
        ],
    ]
    lines.append(markdown_table(["signal", "value"], figures))
    lines.append("")
    lines.append("Success by phrasing family (the same questions, each posed in every family):")
    lines.append("")
    lines.append(
        markdown_table(
            ["phrasing", "success", "responses"],
            [
                [r.phrasing, f"{100 * r.success:.1f}%", int(r.responses)]
                for r in phrasings.itertuples()
            ],
        )
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports/report.md")
    parser.add_argument("--figures", default="reports/figures")
    args = parser.parse_args(argv)

    params = stage_params("report")
    all_params = load_params()
    root = project_root()
    with stage_run("report", params) as run:
        counts = json.loads((root / "metrics/data.json").read_text())
        equivalence = (root / "reports/sections/equivalence.md").read_text().strip()
        diagnostics = (root / "reports/sections/diagnostics.md").read_text().strip()
        base = json.loads((root / "metrics/base_model.json").read_text())
        phrasings = pd.read_csv(root / "plots/base_model_phrasings.csv")
        passk_files = sorted((root / "evals").glob("*/passk.csv"))
        if not passk_files:
            raise FileNotFoundError("no evals/*/passk.csv: run the evaluate stage first")
        passk = pd.concat([pd.read_csv(path) for path in passk_files], ignore_index=True)
        groups = all_params["evaluate"].get("groups", {})
        largest_k = int(passk["k"].max())
        figure = root / args.figures / "passk_curves.png"
        passk_curves(passk, figure, f"pass@k ({all_params['common'].get('profile', '')})")

        state = git_state()
        sections = [
            f"# {params.get('title', 'TA-GRPO pipeline report')}",
            "",
            f"Profile `{all_params['common'].get('profile')}`, git commit "
            f"`{state['git_commit'][:12]}` (dirty: {state['git_dirty']}). Generated by "
            "`dvc repro`; every number below comes from this run's stage outputs.",
            "",
            data_section(counts),
            "",
            equivalence,
            "",
            base_model_section(base, phrasings),
            "",
            training_section(load_training_summaries(root / "metrics")),
            "",
            diagnostics,
            "",
            f"## pass@{largest_k} (percent), as in the paper's Table 1",
            "",
            table1(passk, largest_k, groups),
            "",
            "## pass@1 (percent)",
            "",
            table1(passk, 1, groups),
            "",
            "## pass@k with bootstrap 95% confidence intervals over problems (percent)",
            "",
            passk_long_table(passk),
            "",
            "## pass@k curves",
            "",
            f"![pass@k curves]({figure.relative_to((root / args.out).parent).as_posix()})",
            "",
        ]
        out = root / args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(sections))
        if run is not None:
            import mlflow

            mlflow.log_artifact(str(out))
            mlflow.log_artifact(str(figure))
    print(f"[report] wrote {out.relative_to(root)} and {figure.relative_to(root)}")
    return out


if __name__ == "__main__":
    main()
