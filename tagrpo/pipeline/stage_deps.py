"""Each DVC stage's code, read from the import graph, against the deps dvc.yaml declares for it.

DVC reruns a stage only when one of its declared deps changes, so a project file its command
loads but no dep covers can change without DVC noticing: the committed result goes stale and
``dvc status`` says nothing. For every stage command ``python -m <module>`` this module computes
the files of this repository that the command loads (the transitive closure below) and reports
each one that no file or folder dep of the stage covers.

What counts as loaded (static, with ``ast``; it over-approximates, never under):

- every ``import`` and ``from ... import`` anywhere in a module: module level, inside functions,
  under ``TYPE_CHECKING``; relative ones resolved; ``from pkg import name`` adds ``pkg.name``
  when that is a module; loading ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first;
- a string constant naming a project module (``"tagrpo.verl_ext.plugin"``, ``"pkg.mod:attr"``,
  ``"pkg://tagrpo.verl_ext.reward"``): modules loaded by name (verl's external modules and
  reward function, ``python -m`` subprocesses, worker preloads);
- in a package ``__init__`` with a module-level ``__getattr__`` (lazy exports), a string
  constant naming one of its submodules;
- a string constant equal to the name of a non-Python file in the module's folder or its
  non-package subfolders (``paper_numbers.yaml``): data the module reads beside its code.

Not seen: ``import_module(name)`` with a project module name computed at run time (none today).

Not deps: the modules of :data:`RESULT_NEUTRAL`, code that cannot change what a stage writes
(MLflow tracking, progress bars, the dry-run and cost preflight text). The walk does not enter
them, so what only they load is no dep either, and editing them reruns nothing. A stage's code
deps are then exactly what it loads: a package folder only when the stage loads every module
in it (a folder with one module the stage never loads would rerun it for that module's edits:
the vLLM evaluation backend beside the transformers one), else the files.

    python -m tagrpo.pipeline.stage_deps            # each stage's code deps (folders, files)
    python -m tagrpo.pipeline.stage_deps --files    # ... as single files
    python -m tagrpo.pipeline.stage_deps --check    # exit 1 listing missing or needless deps
    python -m tagrpo.pipeline.stage_deps --write    # rewrite the code deps in dvc.yaml
"""

from __future__ import annotations

import argparse
import ast
import posixpath
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# ``tagrpo.verl_ext.plugin``, ``pkg://tagrpo.verl_ext.reward``, ``tagrpo.pipeline.cli:main``
_MODULE_REFERENCE = re.compile(r"(?:[a-z]+://)?([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?::[\w.]+)?")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_PYTHON = re.compile(r"python(?:3(?:\.\d+)?)?")
_SKIPPED_DIRS = frozenset({"__pycache__"})


@dataclass(frozen=True)
class Neutral:
    """Why a module cannot change a stage's outputs, and the stages whose outputs it does write
    into (their ``python -m`` modules): for those it is code like any other."""

    reason: str
    except_for: tuple[str, ...] = ()


# Code that cannot change what a stage writes (docs/design.md, "What a stage depends on"): it
# logs, displays or refuses, and no output's bytes come from it. The import walk does not enter
# these modules, so they and what only they load are no stage's deps.
RESULT_NEUTRAL: dict[str, Neutral] = {
    # The report writes git_state() (the commit) into report.md: code of that stage.
    "tagrpo/plumbing/tracking.py": Neutral(
        "MLflow: the store, runs, tags, logged metrics", except_for=("stages.report",)
    ),
    "tagrpo/pipeline/stage_run.py": Neutral("one MLflow run per stage execution"),
    "tagrpo/pipeline/parent_run.py": Neutral("the pipeline's MLflow parent run"),
    "tagrpo/plumbing/tracking_assets.py": Neutral("models and datasets logged to MLflow"),
    "tagrpo/plumbing/progress.py": Neutral("progress bars on stderr"),
    "tagrpo/verl_ext/dry_run.py": Neutral("--dry-run: prints the verl command, trains nothing"),
    "tagrpo/verl_ext/cost.py": Neutral(
        "the preflight's memory and cost arithmetic: refuses a run, never changes one"
    ),
}


def neutral_for(modules: Iterable[str]) -> frozenset[str]:
    """The :data:`RESULT_NEUTRAL` files for a stage running ``modules``."""
    running = set(modules)
    return frozenset(
        path for path, why in RESULT_NEUTRAL.items() if not running.intersection(why.except_for)
    )


@dataclass(frozen=True)
class Module:
    name: str  # dotted: ``tagrpo.training.train_stage``
    path: str  # its file relative to the root, POSIX: ``tagrpo/training/train_stage.py``
    is_package: bool  # an ``__init__.py``


class ImportGraph:
    """The modules and data files of the repository at ``root`` that each module loads."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self._find = cache(self._find_uncached)
        self._loads = cache(self._loads_uncached)

    def find(self, name: str) -> Module | None:
        """The project module ``name`` (a package's ``__init__.py`` or a ``.py`` file), else None.

        Namespace packages (a folder without ``__init__.py``) have no file and give None; their
        submodules are found all the same.
        """
        return self._find(name)

    def _find_uncached(self, name: str) -> Module | None:
        base = self.root.joinpath(*name.split("."))
        if (base / "__init__.py").is_file():
            return Module(name, self._relative(base / "__init__.py"), True)
        if base.with_suffix(".py").is_file():
            return Module(name, self._relative(base.with_suffix(".py")), False)
        return None

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def with_parents(self, name: str) -> list[Module]:
        """``a.b.c`` and the packages Python runs first (``a``, ``a.b``) that are project files."""
        parts = name.split(".")
        found = (self.find(".".join(parts[:i])) for i in range(1, len(parts) + 1))
        return [module for module in found if module is not None]

    def loads(self, module: Module) -> tuple[tuple[Module, ...], tuple[str, ...]]:
        """The project modules ``module`` loads directly and the data files it names."""
        return self._loads(module)

    def _loads_uncached(self, module: Module) -> tuple[tuple[Module, ...], tuple[str, ...]]:
        path = self.root / module.path
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = module.name if module.is_package else module.name.rpartition(".")[0]
        lazy = module.is_package and any(
            isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for node in tree.body
        )
        data_files = _data_files(path.parent)
        names: set[str] = set()
        data: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, package, module)
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                reference = _MODULE_REFERENCE.fullmatch(text)
                if reference:
                    names.add(reference.group(1))
                if lazy and _IDENTIFIER.fullmatch(text):
                    names.add(f"{module.name}.{text}")
                data.update(self._relative(found) for found in data_files.get(text, ()))
        loaded = {found for name in names for found in self.with_parents(name)}
        loaded.discard(module)
        return tuple(sorted(loaded, key=lambda m: m.path)), tuple(sorted(data))

    def closure(self, entry: str, neutral: Iterable[str] = ()) -> set[str]:
        """Every project file (modules and data) that running ``python -m entry`` loads, except
        the ``neutral`` files (relative paths) and what only they load."""
        start = self.with_parents(entry)
        if not start or start[-1].name != entry:
            raise ValueError(f"{entry!r} is not a module of {self.root}")
        skipped = frozenset(neutral)
        files: set[str] = set()
        seen: set[Module] = set()
        todo = list(start)
        while todo:
            module = todo.pop()
            if module in seen or module.path in skipped:
                continue
            seen.add(module)
            files.add(module.path)
            loaded, data = self.loads(module)
            files.update(data)
            todo.extend(loaded)
        return files


def _absolute(node: ast.ImportFrom, package: str, module: Module) -> str:
    """The absolute module name of ``from <node.module> import ...`` inside ``package``."""
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts):
        raise ValueError(f"{module.path}:{node.lineno}: relative import beyond the top package")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def _data_files(folder: Path) -> dict[str, list[Path]]:
    """Non-Python files of ``folder`` and of its subfolders that are not packages, by name."""
    found: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            if entry.name not in _SKIPPED_DIRS and not (entry / "__init__.py").exists():
                for name, paths in _data_files(entry).items():
                    found.setdefault(name, []).extend(paths)
        elif entry.suffix not in (".py", ".pyc"):
            found.setdefault(entry.name, []).append(entry)
    return found


def command_modules(cmd: str) -> list[str]:
    """The modules a stage command runs: ``python -m <module>`` (or ``python <file>.py``)."""
    words = shlex.split(cmd)
    modules = []
    for index, word in enumerate(words[:-1]):
        if not _PYTHON.fullmatch(Path(word).name):
            continue
        following = words[index + 1]
        if following == "-m" and index + 2 < len(words):
            modules.append(words[index + 2])
        elif following.endswith(".py"):
            modules.append(following.removesuffix(".py").replace("/", "."))
    return modules


def covers(dep: str, path: str) -> bool:
    """Whether the dvc.yaml dep ``dep`` (a file or a folder) covers the file ``path``."""
    dep = posixpath.normpath(dep)
    return path == dep or path.startswith(dep + "/")


@dataclass(frozen=True)
class StageDeps:
    """One stage's code: what its command loads against what its deps cover."""

    stage: str  # DVC's name: ``train@grpo-0``
    modules: tuple[str, ...]  # what its command runs
    needed: tuple[str, ...]  # project files the command loads
    missing: tuple[str, ...]  # needed files no dep covers
    # Code deps (a .py file or a path in a package folder) that cover no needed file: a module
    # moved or no longer imported, kept in dvc.yaml (DVC reruns the stage for nothing, or
    # fails on a dep that is gone).
    unneeded: tuple[str, ...]
    # Python files a code dep covers that the command does not load (a folder dep over a
    # module it never imports, or a RESULT_NEUTRAL one): edits to them rerun it for nothing.
    over: tuple[str, ...] = ()


def dvc_stages(root: str | Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every stage as DVC itself expands dvc.yaml: name -> (command, file and folder deps)."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    # Without git: reading dvc.yaml needs none (a source archive is checked too).
    with Repo(str(root), config={"core": {"no_scm": True}}) as repo:
        stages = {}
        for stage in repo.index.stages:
            cmd = stage.cmd if isinstance(stage.cmd, str) else "\n".join(stage.cmd)
            deps = tuple(
                dep.def_path for dep in stage.deps if not isinstance(dep, ParamsDependency)
            )
            stages[stage.name] = (cmd, deps)
        return stages


def _is_code_dep(root: Path, dep: str) -> bool:
    top = posixpath.normpath(dep).split("/")[0]
    return dep.endswith(".py") or (root / top / "__init__.py").is_file()


def check_stages(
    root: str | Path, stages: Mapping[str, tuple[str, Iterable[str]]] | None = None
) -> list[StageDeps]:
    """:class:`StageDeps` of every stage (of ``stages``, or of dvc.yaml at ``root``).

    Raises ValueError naming the stage when its command runs no Python module this can read: a
    stage this cannot check must not pass as checked.
    """
    graph = ImportGraph(root)
    results = []
    for name, (cmd, deps) in (dvc_stages(root) if stages is None else stages).items():
        deps = tuple(deps)
        modules = command_modules(cmd)
        if not modules:
            raise ValueError(f"stage {name}: no `python -m <module>` in its command {cmd!r}")
        try:
            needed = stage_code(graph, modules)
        except ValueError as error:
            raise ValueError(f"stage {name}: {error}") from None
        missing = sorted(path for path in needed if not any(covers(dep, path) for dep in deps))
        code_deps = [dep for dep in deps if _is_code_dep(graph.root, dep)]
        unneeded = [dep for dep in code_deps if not any(covers(dep, path) for path in needed)]
        over = sorted(
            path
            for path in _python_files(graph.root, code_deps)
            if path not in needed and any(covers(dep, path) for dep in code_deps)
        )
        results.append(
            StageDeps(
                name,
                tuple(modules),
                tuple(sorted(needed)),
                tuple(missing),
                tuple(unneeded),
                tuple(over),
            )
        )
    return results


def stage_code(graph: ImportGraph, modules: Iterable[str]) -> set[str]:
    """The project files a stage running ``modules`` loads, its RESULT_NEUTRAL ones excepted."""
    modules = list(modules)
    neutral = neutral_for(modules)
    return set().union(*(graph.closure(module, neutral) for module in modules))


def _python_files(root: Path, deps: Iterable[str]) -> set[str]:
    """The Python files (relative paths) that the file and folder ``deps`` hold."""
    found: set[str] = set()
    for dep in deps:
        path = root / dep
        if path.is_dir():
            found.update(
                item.relative_to(root).as_posix()
                for item in path.rglob("*.py")
                if not _SKIPPED_DIRS.intersection(item.relative_to(path).parts)
            )
        elif path.suffix == ".py":
            found.add(posixpath.normpath(dep))
    return found


def compact(root: str | Path, files: Iterable[str]) -> list[str]:
    """``files`` with each folder whose Python files are all among them written as the folder.

    The shortest deps list that covers ``files`` and no other Python file (a folder dep also
    covers the non-Python files in it, e.g. a README).
    """
    root = Path(root).resolve()
    wanted = set(files)
    result: set[str] = set(wanted)
    folders = {posixpath.dirname(path) for path in wanted} - {""}
    # Every ancestor folder too, deepest first, so that a parent absorbs its children.
    for folder in list(folders):
        while "/" in folder:
            folder = posixpath.dirname(folder)
            folders.add(folder)
    for folder in sorted(folders, key=lambda f: (-f.count("/"), f)):
        inside = _python_files(root, [folder])
        if inside and inside <= wanted:
            result = {path for path in result if not covers(folder, path)} | {folder}
    return sorted(result)


def _grouped(results: list[StageDeps]) -> dict[str, list[StageDeps]]:
    """Matrix items of one dvc.yaml stage (``train@grpo-0``, ...) under its key."""
    groups: dict[str, list[StageDeps]] = {}
    for result in results:
        groups.setdefault(result.stage.partition("@")[0], []).append(result)
    return groups


_DEPS_LIST = re.compile(r"^(    deps: \[)([^\]]*)(\])", re.M)


def write_dvc_yaml(root: str | Path, width: int = 100) -> list[str]:
    """Rewrite each stage's code deps in ``root/dvc.yaml`` from the import graph; return the
    stage keys whose deps changed.

    Only flow-list ``deps: [...]`` written in a stage's own block are rewritten, from the
    modules its ``cmd`` runs (so stages a profile enables, such as data scaling, are covered
    too); the data deps (outputs of other stages, files outside the packages) keep their place
    and order, first. A stage that inherits its deps (``<<: *train``) follows its source.
    """
    root = Path(root)
    path = root / "dvc.yaml"
    text = path.read_text()
    graph = ImportGraph(root)
    stage_key = re.compile(r"^  ([A-Za-z_][\w-]*):", re.M)
    keys = [(match.start(), match.group(1)) for match in stage_key.finditer(text)]
    changed: list[str] = []
    pieces: list[str] = []
    cursor = 0
    for match in _DEPS_LIST.finditer(text):
        start, key = [(start, name) for start, name in keys if start < match.start()][-1]
        # ``cmd: python -m ...`` or a folded ``cmd: >-`` block on the lines below it
        command = re.search(r"^    cmd: (.*(?:\n      .*)*)", text[start : match.start()], re.M)
        modules = command_modules(" ".join(command.group(1).split())) if command else []
        if not modules:
            raise ValueError(f"dvc.yaml: stage {key}: no `python -m <module>` before its deps")
        needed = stage_code(graph, modules)
        old = [dep.strip() for dep in match.group(2).replace("\n", " ").split(",") if dep.strip()]
        data = [dep for dep in old if not _is_code_dep(root, dep)]
        new = data + compact(root, needed)
        if new != old:
            changed.append(key)
        lines, line = [], match.group(1)
        for index, dep in enumerate(new):
            piece = dep + ("," if index < len(new) - 1 else "]")
            if len(line) + 1 + len(piece) > width and not line.endswith("["):
                lines.append(line)
                line = " " * len(match.group(1)) + piece
            else:
                line = line + ("" if line.endswith("[") else " ") + piece
        lines.append(line)
        pieces.append(text[cursor : match.start()] + "\n".join(lines))
        cursor = match.end()
    path.write_text("".join(pieces) + text[cursor:])
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".", help="the checkout with dvc.yaml (default: .)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="list the missing and the needless code deps per stage; exit 1 if any",
    )
    parser.add_argument(
        "--files", action="store_true", help="print the files each stage needs, not folders"
    )
    parser.add_argument(
        "--write", action="store_true", help="rewrite the code deps of dvc.yaml from the code"
    )
    args = parser.parse_args(argv)
    root = Path(args.root)
    if args.write:
        changed = write_dvc_yaml(root)
        print(f"dvc.yaml: code deps rewritten for {len(changed)} stage(s): {', '.join(changed)}")
        return 0
    results = check_stages(root)
    failed = False
    for key, items in _grouped(results).items():
        label = key if len(items) == 1 else f"{key} ({len(items)} matrix items)"
        missing = sorted({path for item in items for path in item.missing})
        unneeded = sorted({dep for item in items for dep in item.unneeded})
        over = sorted({path for item in items for path in item.over})
        if args.check:
            if missing:
                failed = True
                print(f"{label}: {len(missing)} loaded file(s) no dep covers")
                print("".join(f"  - {path}\n" for path in missing), end="")
            if unneeded:
                failed = True
                print(f"{label}: code deps it never loads (reruns it needlessly, or gone)")
                print("".join(f"  - {dep}\n" for dep in unneeded), end="")
            if over:
                failed = True
                print(f"{label}: modules its deps cover but it never loads (or result-neutral)")
                print("".join(f"  - {path}\n" for path in over), end="")
        else:
            needed = sorted({path for item in items for path in item.needed})
            deps = sorted(needed) if args.files else compact(root, needed)
            print(f"{label}: runs {', '.join(items[0].modules)}; code deps:")
            print("".join(f"  - {path}\n" for path in deps), end="")
    if args.check and not failed:
        print(
            f"every loaded file is covered by a dep, every code dep loaded ({len(results)} stages)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
