"""DVC plots: the paper's figures as Vega-Lite templates, and a page that renders offline.

* Templates (``.dvc/plots/<name>.json``, where DVC looks for custom templates) are generated
  here from the method registry, so every method has one fixed colour in every figure and a
  new method cannot be left without one (``tests/test_plots.py`` checks the files are current).
  They encode the columns of :mod:`tagrpo.report.plot_data`'s long-form CSVs: ``method``
  (colour), ``policy`` (one line per seed), ``benchmark``/``grouping`` (one panel each).
* ``dvc plots show`` loads vega, vega-lite and vega-embed from a CDN by default: blank offline.
  The project installs the three from npm (``package.json``/``package-lock.json``, ``npm ci``
  in ``make install``) and :func:`write_offline_template` inlines their builds into an HTML
  template, ``.dvc/plots/offline.html``, which ``.dvc/config`` names as ``plots.html_template``.
  The page ``dvc plots show`` writes is then one self-contained file.

    python -m tagrpo.pipeline.plots templates          # regenerate .dvc/plots/*.json
    python -m tagrpo.pipeline.plots offline-template   # (re)build .dvc/plots/offline.html
    tagrpo plots show|diff [dvc plots args]   # the same, building the page template if missing
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tagrpo.plumbing.paths import project_root
from tagrpo.report.palette import CHANCE_COLOUR, CHANCE_DASH, method_colours

TEMPLATE_DIR = Path(".dvc") / "plots"
OFFLINE_TEMPLATE = TEMPLATE_DIR / "offline.html"
# npm package -> its browser build (node_modules/<package>/<build>).
VENDORED = {
    "vega": "build/vega.min.js",
    "vega-lite": "build/vega-lite.min.js",
    "vega-embed": "build/vega-embed.min.js",
}
_PLACEHOLDERS = ("{plot_divs}", "{scripts}", "{refresh_tag}")  # dvc-render's, replaced verbatim
_SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"  # an identifier, never fetched


def _colour(title: str = "method") -> dict[str, Any]:
    colours = method_colours()
    return {
        "field": "method",
        "type": "nominal",
        "title": title,
        "scale": {"domain": list(colours), "range": list(colours.values())},
    }


def _axes(x_type: str = "quantitative", x_scale: dict[str, Any] | None = None) -> dict[str, Any]:
    x: dict[str, Any] = {"field": "<DVC_METRIC_X>", "type": x_type, "title": "<DVC_METRIC_X_LABEL>"}
    if x_scale:
        x["scale"] = x_scale
    y = {"field": "<DVC_METRIC_Y>", "type": "quantitative", "title": "<DVC_METRIC_Y_LABEL>"}
    return {"x": x, "y": y}


def _tooltip(*fields: str) -> list[dict[str, str]]:
    return [{"field": name} for name in fields]


def _faceted(field: str, layer: list[dict[str, Any]], columns: int = 4) -> dict[str, Any]:
    return {
        "$schema": _SCHEMA,
        "title": "<DVC_METRIC_TITLE>",
        "data": {"values": "<DVC_METRIC_DATA>"},
        "facet": {"field": field, "type": "nominal", "title": None},
        "columns": columns,
        "spec": {"width": 220, "height": 180, "layer": layer},
        "resolve": {"scale": {"y": "shared"}},
    }


def passk_template() -> dict[str, Any]:
    """pass@k against k (log2 axis), a panel per benchmark or group, a colour per method, a
    line per policy (seed), bootstrap 95% CI bars, the chance floor grey dashed (a
    multiple-choice benchmark); ``rev`` dashes compare revisions."""
    axes = _axes(x_scale={"type": "log", "base": 2})
    axes["x"]["axis"] = {"values": [2**i for i in range(16)]}  # powers of 2 only (as in the paper)
    encoding = {
        **axes,
        "color": _colour(),
        "detail": {"field": "policy", "type": "nominal"},
        "strokeDash": {"field": "rev", "type": "nominal", "title": "revision"},
    }
    return _faceted(
        "benchmark",
        [
            {
                "mark": {"type": "line", "point": True},
                "encoding": {
                    **encoding,
                    "tooltip": _tooltip(
                        "policy", "benchmark", "k", "pass_at_k", "ci_low", "ci_high", "rev"
                    ),
                },
            },
            {
                "mark": {"type": "rule", "opacity": 0.6},
                "encoding": {
                    "x": encoding["x"],
                    "y": {"field": "ci_low", "type": "quantitative"},
                    "y2": {"field": "ci_high"},
                    "color": _colour(),
                    "detail": {"field": "policy", "type": "nominal"},
                },
            },
            {
                # The chance floor of a multiple-choice benchmark (empty for free-form ones).
                "transform": [{"filter": "isFinite(toNumber(datum.chance))"}],
                "mark": {
                    "type": "line",
                    "color": CHANCE_COLOUR,
                    "strokeDash": list(CHANCE_DASH),
                    "strokeWidth": 2,
                },
                "encoding": {
                    "x": encoding["x"],
                    "y": {"field": "chance", "type": "quantitative"},
                    "detail": {"field": "rev", "type": "nominal"},
                    "tooltip": _tooltip("benchmark", "k", "chance"),
                },
            },
        ],
    )


def curves_template(facet: str | None = None, window: int = 5) -> dict[str, Any]:
    """Training curves against steps, coloured by method, a line per policy: each step faint,
    a ``window``-step moving mean bold (per-step rates over a few questions are noisy)."""
    axes = _axes()
    lines = {
        # Full-strength swatches: the faint per-step layer would otherwise set their look.
        "color": {**_colour(), "legend": {"symbolOpacity": 1, "symbolStrokeWidth": 3}},
        "detail": {"field": "policy", "type": "nominal"},
        "strokeDash": {"field": "rev", "type": "nominal", "title": "revision"},
    }
    half = window // 2
    layer = [
        {
            "transform": [
                {
                    "window": [{"op": "mean", "field": "<DVC_METRIC_Y>", "as": "moving_mean"}],
                    "frame": [-half, half],
                    "groupby": ["policy", "rev"],
                    "sort": [{"field": "<DVC_METRIC_X>"}],
                }
            ],
            "mark": {"type": "line", "strokeWidth": 2},
            "encoding": {
                "x": axes["x"],
                "y": {
                    "field": "moving_mean",
                    "type": "quantitative",
                    "title": "<DVC_METRIC_Y_LABEL>",
                },
                **lines,
                "tooltip": _tooltip("policy", "<DVC_METRIC_X>", "<DVC_METRIC_Y>", "moving_mean"),
            },
        },
        {
            "mark": {"type": "line", "opacity": 0.25, "strokeWidth": 1},
            "encoding": {**axes, **lines},
        },
    ]
    if facet:
        return _faceted(facet, layer)
    return {
        "$schema": _SCHEMA,
        "title": "<DVC_METRIC_TITLE>",
        "data": {"values": "<DVC_METRIC_DATA>"},
        "width": 480,
        "height": 260,
        "layer": layer,
    }


def scaling_template() -> dict[str, Any]:
    """pass@k against the training-data multiple, a panel per benchmark, colour per method."""
    encoding = {**_axes(), "color": _colour(), "detail": {"field": "seed", "type": "nominal"}}
    return _faceted(
        "benchmark",
        [
            {
                "mark": {"type": "line", "point": {"size": 60}},
                "encoding": {
                    **encoding,
                    "tooltip": _tooltip("policy", "benchmark", "k", "pass_at_k", "rev"),
                },
            }
        ],
    )


def checkpoints_template() -> dict[str, Any]:
    """Identical-reward rates at the probed checkpoints (Figure 3), coloured by grouping (each
    of a stated group size: compare groupings of equal size), a panel per policy."""
    return _faceted(
        "policy",
        [
            {
                "mark": {"type": "line", "point": True},
                "encoding": {
                    **_axes(x_type="ordinal"),
                    "x": {**_axes(x_type="ordinal")["x"], "sort": None},
                    "color": {"field": "grouping", "type": "nominal", "title": "responses"},
                    "strokeDash": {"field": "rev", "type": "nominal", "title": "revision"},
                    "tooltip": _tooltip(
                        "policy",
                        "label",
                        "grouping",
                        "group_size",
                        "zero_gradient_rate",
                        "all_correct_rate",
                        "all_wrong_rate",
                    ),
                },
            }
        ],
        columns=2,
    )


def templates() -> dict[str, dict[str, Any]]:
    """Template name (dvc.yaml's ``template:``) -> Vega-Lite spec with DVC's anchors."""
    return {
        "tagrpo_passk": passk_template(),
        "tagrpo_curves": curves_template(),
        "tagrpo_curves_by_grouping": curves_template(facet="grouping"),
        "tagrpo_data_scaling": scaling_template(),
        "tagrpo_checkpoints": checkpoints_template(),
    }


def template_text(spec: dict[str, Any]) -> str:
    return json.dumps(spec, indent=2) + "\n"


def write_templates(root: Path | None = None) -> list[Path]:
    folder = (root or project_root()) / TEMPLATE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, spec in templates().items():
        path = folder / f"{name}.json"
        path.write_text(template_text(spec))
        written.append(path)
    return written


# --------------------------------------------------------------------------- offline page


def node_modules(root: Path | None = None) -> Path:
    """Where ``npm ci`` put the charting libraries: ``TAGRPO_NODE_MODULES``, else the nearest
    ``node_modules`` from the checkout upwards (a Prefect scratch copy or a ``dvc exp`` copy
    lives inside the checkout), else beside the Python environment (``make install`` puts
    ``.venv`` and ``node_modules`` in the same checkout; a test's scratch copy has neither)."""
    start = (root or project_root()).resolve()
    candidates = [
        *(
            [Path(os.environ["TAGRPO_NODE_MODULES"])]
            if os.environ.get("TAGRPO_NODE_MODULES")
            else []
        ),
        *(folder / "node_modules" for folder in (start, *start.parents)),
        Path(sys.prefix).resolve().parent / "node_modules",
    ]
    for candidate in candidates:
        if all((candidate / p / b).is_file() for p, b in VENDORED.items()):
            return candidate
    raise FileNotFoundError(
        f"vega, vega-lite and vega-embed are not installed (looked in node_modules from {start} "
        f"upwards and beside {sys.prefix}): run `make install` (npm ci)"
    )


def _inline_script(package: str, folder: Path) -> str:
    meta = json.loads((folder / package / "package.json").read_text())
    code = (folder / package / VENDORED[package]).read_text(encoding="utf-8")
    for placeholder in _PLACEHOLDERS:
        if placeholder in code:
            raise ValueError(f"{package} contains dvc-render's placeholder {placeholder}")
    # "</script" would end the inline element early; "<\/script" means the same in JavaScript.
    code = code.replace("</script", "<\\/script")
    header = f"{package} {meta['version']} ({meta.get('license', 'see its package')})"
    return f"<!-- {header} -->\n<script>\n{code}\n</script>"


def offline_template(folder: Path) -> str:
    """A dvc-render page template with the three libraries inlined (no network needed)."""
    versions = ", ".join(
        f"{p}@{json.loads((folder / p / 'package.json').read_text())['version']}" for p in VENDORED
    )
    scripts = "\n".join(_inline_script(package, folder) for package in VENDORED)
    return f"""<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<!-- Generated by `python -m tagrpo.pipeline.plots offline-template` from npm packages ({versions},
     package-lock.json). dvc plots show fills the placeholders below. -->
{{refresh_tag}}
<title>tagrpo: DVC plots</title>
{scripts}
<style>
  body {{ font-family: sans-serif; margin: 16px; }}
  body > div {{ margin-bottom: 28px; }}
</style>
</head>
<body>
<h1>tagrpo plots</h1>
{{plot_divs}}
</body>
</html>
"""


def write_offline_template(root: Path | None = None) -> Path:
    root = root or project_root()
    target = root / OFFLINE_TEMPLATE
    target.parent.mkdir(parents=True, exist_ok=True)
    text = offline_template(node_modules(root))
    temporary = target.with_name(f".{target.name}.{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)
    return target


def dvc_root(start: Path | None = None) -> Path:
    """The DVC repository holding ``start`` (default: the working directory)."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".dvc").is_dir():
            return candidate
    return project_root(start)


def dvc_plots(args: list[str], root: Path | None = None) -> int:
    """``dvc plots <args>`` with the offline page template (built first if missing)."""
    root = root or dvc_root()
    template = root / OFFLINE_TEMPLATE
    if not template.is_file():
        write_offline_template(root)
    dvc = Path(sys.executable).with_name("dvc")
    command = [str(dvc) if dvc.exists() else "dvc", "plots", *args]
    if args and args[0] in ("show", "diff") and "--html-template" not in args:
        command += ["--html-template", str(template)]
    return subprocess.run(command, cwd=root, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["templates"]:
        for path in write_templates():
            print(f"wrote {path}")
        return 0
    if argv == ["offline-template"]:
        print(f"wrote {write_offline_template()}")
        return 0
    print("usage: python -m tagrpo.pipeline.plots {templates|offline-template}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
