"""Every repository path and ``tagrpo.*`` module the documentation names exists.

README.md, docs/*.md, the package READMEs and the docstrings/comments of the code name files
(``tagrpo/plumbing/layout.py``, ``stages/train.py``, ``profiles/paper.yaml``,
``docs/design.md``) and modules (``tagrpo.config.engines``, ``tagrpo.metrics.pass_at_k``).
When a module moves, these references go stale silently; this test names each one that points
at nothing, with the file that mentions it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Top-level folders whose files are source, not pipeline outputs (data/, models/, plots/ ... are
# written by the stages and may be absent in a checkout).
SOURCE_DIRS = (
    "tagrpo",
    "stages",
    "flows",
    "tests",
    "profiles",
    "docs",
    "benchmarks",
    "requirements",
)
PATH = re.compile(r"(?<![\w./<>{}$-])((?:" + "|".join(SOURCE_DIRS) + r")/[\w./-]*[\w/])")
# A path that holds a placeholder or pattern (``stages/<name>.py``, ``tests/test_*.py``) names
# no single file.
PATTERN_NEXT = re.compile(r"[<*{]")
# An upper-case name stands for any: ``profiles/NAME.yaml``, ``models/P``.
PLACEHOLDER = re.compile(r"^(?!README)[A-Z][A-Z_]*(\.\w+)?$")
MODULE = re.compile(r"(?<![\w./-])(tagrpo(?:\.[A-Za-z_]\w*)+)")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
CODE_DIRS = ("tagrpo", "stages", "flows", "benchmarks")
# MLflow tag keys share the prefix (``tagrpo.checkout``): the code writes them as string literals
# named ``*_TAG``, passed to ``set_tag``/``tags.get`` or used as dict keys.
TAG_KEY = re.compile(
    r"""(?:\w+_TAG\s*=\s*|set_tag\(|tags\.get\()["'](tagrpo\.\w+)["']|["'](tagrpo\.\w+)["']\s*:"""
)


def documentation_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted((ROOT / "tagrpo").rglob("README.md"))
    return [f for f in files if f.exists()]


def code_files() -> list[Path]:
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))


def params_files() -> list[Path]:
    """params.yaml and the profiles, whose comments name files and modules too."""
    return [ROOT / "params.yaml", *sorted((ROOT / "profiles").glob("*.yaml"))]


def mentioned_paths(text: str) -> set[str]:
    """Repository paths named in ``text``: a file (``tagrpo/plumbing/layout.py``) anywhere, a folder
    (``tagrpo/config``) only in backticks (prose such as "benchmarks/groups" is no path)."""
    found = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if PATTERN_NEXT.match(text, match.end()) or any(
            PLACEHOLDER.match(part) for part in path.split("/")
        ):
            continue
        is_file = "." in path.rsplit("/", 1)[-1]
        if is_file or text[match.start() - 1 : match.start()] == "`":
            found.add(path)
    return found


def module_exists(dotted: str) -> bool:
    """``tagrpo.a.b``: a module or package; ``tagrpo.a.b.name``: ``name`` defined in it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        if base.with_suffix(".py").is_file() or base.is_dir():  # a namespace package too
            break
    else:
        return False
    if cut == len(parts):
        return True
    target: object = importlib.import_module(".".join(parts[:cut]))
    for name in parts[cut:]:
        if not hasattr(target, name):
            return False
        target = getattr(target, name)
    return True


def test_documented_repository_paths_exist() -> None:
    missing = []
    for doc in documentation_files() + code_files() + params_files():
        text = doc.read_text(encoding="utf-8")
        for path in sorted(mentioned_paths(text)):
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
        if doc.suffix == ".md":
            for link in MARKDOWN_LINK.findall(text):
                if "://" in link or link.startswith("mailto:"):
                    continue
                if not (doc.parent / link).exists():
                    missing.append(f"{doc.relative_to(ROOT)}: link {link}")
    assert not missing, "documentation names paths that do not exist:\n" + "\n".join(missing)


def mlflow_tag_keys() -> set[str]:
    keys = set()
    for source in code_files():
        for match in TAG_KEY.finditer(source.read_text(encoding="utf-8")):
            keys.add(match.group(1) or match.group(2))
    return keys


def test_documented_tagrpo_modules_exist() -> None:
    tags = mlflow_tag_keys()
    assert "tagrpo.checkout" in tags and "tagrpo.pid" in tags, sorted(tags)
    missing = []
    for doc in documentation_files() + code_files() + params_files():
        text = doc.read_text(encoding="utf-8")
        for dotted in sorted(set(MODULE.findall(text))):
            if dotted not in tags and not module_exists(dotted.rstrip(".")):
                missing.append(f"{doc.relative_to(ROOT)}: {dotted}")
    assert not missing, "documentation names modules that do not exist:\n" + "\n".join(missing)


def test_mentioned_paths_skip_placeholders_and_outputs() -> None:
    text = (
        "`tagrpo/plumbing/layout.py`, `stages/<name>.py`, `tests/test_*.py`, `models/P`, "
        "see tests/test_layout.py. `.venv/bin/tagrpo params apply profiles/local.yaml`, "
        "`tagrpo/config`, these benchmarks/groups, profiles/NAME.yaml, `tagrpo/verl_ext/README.md`"
    )
    assert mentioned_paths(text) == {
        "tagrpo/plumbing/layout.py",
        "tests/test_layout.py",
        "profiles/local.yaml",
        "tagrpo/config",
        "tagrpo/verl_ext/README.md",
    }


def test_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run is "exactly the README's test command": the command it runs is in README's
    two-command block."""
    ci_lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    ci_command = ci_lines[-1]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(make run[^\n]*\n.*?)```", readme, re.DOTALL)
    assert block, "README.md has no ```bash block starting with `make run`"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert ci_command in commands, (ci_command, commands)


ANCHORED_LINK = re.compile(r"\]\(([^)\s#]*\.md)?#([^)\s]+)\)")


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return anchors


def test_documented_anchors_exist() -> None:
    """A link to a section (``docs/results.md#what-ran``) names a heading the page has."""
    missing = []
    for doc in documentation_files():
        for target, anchor in ANCHORED_LINK.findall(doc.read_text(encoding="utf-8")):
            page = (doc.parent / target) if target else doc
            if page.is_file() and anchor not in heading_anchors(page.read_text(encoding="utf-8")):
                missing.append(f"{doc.relative_to(ROOT)}: {target}#{anchor}")
    assert not missing, "links to sections that do not exist:\n" + "\n".join(missing)


def test_heading_anchors_are_githubs() -> None:
    page = "# A\n## What ran\n### The embedded default, per stage\n## The intervals' calibration\n"
    assert heading_anchors(page) == {
        "a",
        "what-ran",
        "the-embedded-default-per-stage",
        "the-intervals-calibration",
    }
