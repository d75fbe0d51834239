"""Reruns with other params, never by editing the user's params.yaml (no Prefect import).

A rerun request (a profile, subsets of ``runs.methods`` and ``runs.seeds``, ``key=value``
overrides) is resolved into a complete, validated params mapping (:func:`resolve_params`). It
then runs either

* in a **scratch copy** (:func:`prepare_scratch`): a clone of the checkout's git repository at
  its HEAD, with the work tree's uncommitted changes copied over, the resolved params.yaml
  committed, the outputs of the checkout hard-linked in (so DVC reruns only what the new params
  change) and the checkout's DVC cache shared; it stays in ``.tagrpo/runs/<name>`` for
  inspection; or
* as a **DVC experiment** (:func:`set_param_arguments`): ``dvc exp run --temp -S key=value ...``
  for every leaf that differs, run in DVC's temporary copy and listed by ``dvc exp show``.

:func:`stage_order` lists the stages in the order ``dvc repro`` would run them, from ``dvc dag``
(:func:`stage_graph`: with its edges).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tagrpo.config.params import ConfigError, apply_overrides, read_yaml_mapping, validate_params
from tagrpo.config.profiles import merged_with_profile, profile_base_chain
from tagrpo.plumbing.config_model import mask_key_shapes
from tagrpo.plumbing.dvc_stages import pipeline_outputs
from tagrpo.plumbing.verify import prune_lock

CURRENT_PROFILE = "current"  # params.yaml as it is in the checkout
RUNS_DIR = Path(".tagrpo") / "runs"
# Shared with the scratch copy instead of copied: the rephrase reply cache (a rerun must not
# resend paid requests) is keyed by everything that affects a reply.
SHARED_STATE = (".cache",)


@dataclass(frozen=True)
class RerunRequest:
    profile: str = CURRENT_PROFILE
    methods: list[str] | None = None
    seeds: list[int] | None = None
    overrides: list[str] = field(default_factory=list)
    force: bool = False

    def describe(self) -> str:
        parts = [f"profile {self.profile}"]
        if self.methods:
            parts.append(f"methods {','.join(self.methods)}")
        if self.seeds is not None:
            parts.append(f"seeds {','.join(map(str, self.seeds))}")
        parts += self.overrides
        if self.force:
            parts.append("force")
        # Shown in logs, MLflow notes and Prefect artifacts: never a key-shaped value.
        return mask_key_shapes("; ".join(parts))


def profile_names(root: Path) -> list[str]:
    """``current`` and every ``profiles/<name>.yaml``."""
    return [CURRENT_PROFILE, *sorted(p.stem for p in (root / "profiles").glob("*.yaml"))]


def delta_profiles(root: Path) -> dict[str, list[str]]:
    """Each profile that is a delta over another (``base:``), with the names it is merged
    from, base first: ``{"paper-authors-hparams": ["paper", "paper-authors-hparams"]}``. A
    broken chain is left out here and refused when the profile is used."""
    chains = {}
    for name in profile_names(root)[1:]:
        try:
            chain = profile_base_chain(root / "profiles" / f"{name}.yaml")
        except (ConfigError, OSError):
            continue
        if len(chain) > 1:
            chains[name] = chain
    return chains


def profile_help(root: Path) -> str:
    """What a profile choice means, the deltas named with their bases (the Prefect form's
    description of ``profile`` and the CLI's help)."""
    text = 'params.yaml as it is ("current"), or merged with profiles/NAME.yaml'
    deltas = delta_profiles(root)
    if deltas:
        text += "; a delta profile is merged onto its base first: " + ", ".join(
            f"{name} = {' + '.join(chain)}" for name, chain in deltas.items()
        )
    return text


def resolve_params(root: Path, request: RerunRequest) -> dict[str, Any]:
    """The complete params of the rerun: params.yaml, then the profile, then the subsets, then
    the overrides; validated (:class:`ConfigError` names every problem)."""
    params_path = root / "params.yaml"
    if request.profile == CURRENT_PROFILE:
        raw = read_yaml_mapping(params_path)
    else:
        profile = root / "profiles" / f"{request.profile}.yaml"
        if not profile.is_file():
            raise ConfigError("profile", [f"{request.profile}: not one of {profile_names(root)}"])
        raw = merged_with_profile(profile, params_path)
    if request.seeds is not None and not request.seeds:
        raise ConfigError("seeds", ["an empty seed list trains nothing"])
    subsets = run_subsets(raw, request.methods, request.seeds)
    resolved = apply_overrides(raw, [*subsets, *request.overrides])
    typed = validate_params(resolved, f"rerun ({request.describe()})").model_dump(mode="json")
    # Each override's value as the schema reads it: YAML 1.1 leaves "2e-4" a string, which
    # would reach params.yaml (and dvc's -S) quoted.
    for assignment in request.overrides:
        path = assignment.partition("=")[0].strip().split(".")
        _set(resolved, path, _get(typed, path))
    return resolved


def run_subsets(
    raw: Mapping[str, Any], methods: Sequence[str] | None, seeds: Sequence[int] | None
) -> list[str]:
    """``key=value`` assignments that restrict every list of ``runs`` to ``methods`` and
    ``seeds`` (None: as the params say), so only those are trained and evaluated.

    * methods: ``runs.methods`` keeps the chosen methods that are not one-seed methods,
      ``runs.one_seed_methods`` the chosen ones that are (they keep their one seed; if only
      such methods are chosen they become ``runs.methods`` with ``runs.seeds`` = the one seed),
      ``runs.control_methods`` the chosen ones that are control methods (with their own seeds),
      ``runs.data_scaling.methods`` the chosen ones among the data-scaling methods;
    * seeds: ``runs.seeds`` = the seeds; the one-seed methods are dropped unless their seed
      is chosen; ``runs.control_seeds`` and ``runs.data_scaling.seeds`` keep the chosen ones
      (none: no control or data-scaling runs).

    ``diagnostics.policies`` is not changed: naming a policy that is no longer trained is an
    error that asks for an override (the diagnostics would otherwise probe another policy).
    """
    if not methods and seeds is None:
        return []
    runs = validate_params(raw, "params").runs
    chosen_seeds = list(seeds) if seeds is not None else list(runs.seeds)
    multi, one_seed = list(runs.methods), list(runs.one_seed_methods)
    control = list(runs.control_methods)
    scaling_methods = list(runs.data_scaling.methods)
    one_seed_value = list(runs.one_seed)
    if methods:
        special = {*runs.one_seed_methods, *runs.control_methods}
        multi = [m for m in methods if m not in special]
        one_seed = [m for m in methods if m in runs.one_seed_methods]
        control = [m for m in methods if m in runs.control_methods]
        scaling_methods = [m for m in scaling_methods if m in methods]
        if not multi and one_seed:
            multi, one_seed = one_seed, []
            if seeds is None:
                chosen_seeds = list(runs.one_seed)
        elif not multi:
            multi, control = control, []
            if seeds is None:
                chosen_seeds = list(runs.control_seeds)
    control_seeds = [s for s in runs.control_seeds if s in chosen_seeds]
    if not control_seeds:
        control, control_seeds = [], chosen_seeds[:1]
    if one_seed_value[0] not in chosen_seeds:
        one_seed, one_seed_value = [], chosen_seeds[:1]
    scaling_seeds = [s for s in runs.data_scaling.seeds if s in chosen_seeds]
    if not scaling_seeds:
        scaling_methods = []
    values = {
        "runs.methods": multi,
        "runs.seeds": chosen_seeds,
        "runs.one_seed_methods": one_seed,
        "runs.one_seed": one_seed_value,
        "runs.control_methods": control,
        "runs.control_seeds": control_seeds,
        "runs.data_scaling.methods": scaling_methods,
        "runs.data_scaling.seeds": scaling_seeds,
    }
    return [f"{key}={json.dumps(value)}" for key, value in values.items()]


def _get(tree: Mapping[str, Any], path: list[str]) -> Any:
    for part in path:
        tree = tree[part]
    return tree


def _set(tree: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        tree = tree[part]
    tree[path[-1]] = value


def changed_leaves(
    current: Mapping[str, Any], resolved: Mapping[str, Any], prefix: str = ""
) -> dict[str, Any]:
    """Dotted keys whose value differs (lists are leaves); a removed key is an error."""
    changes: dict[str, Any] = {}
    for key in sorted(set(current) | set(resolved), key=str):
        name = f"{prefix}{key}"
        if key not in resolved:
            raise ConfigError("rerun", [f"{name}: removed by the profile (use the scratch mode)"])
        new = resolved[key]
        old = current.get(key)
        if isinstance(new, Mapping) and isinstance(old, Mapping):
            changes.update(changed_leaves(old, new, f"{name}."))
        elif key not in current or old != new:
            changes[name] = new
    return changes


_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")


def hydra_value(value: Any) -> str:
    """A value in the override grammar of ``dvc exp run -S`` (Hydra's)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if _BARE.match(value) and value.lower() not in ("null", "true", "false"):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, Sequence):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot pass {type(value).__name__} to dvc exp run -S")


def set_param_arguments(root: Path, resolved: Mapping[str, Any]) -> list[str]:
    """``-S key=value`` for every leaf of the resolved params that params.yaml lacks."""
    changes = changed_leaves(read_yaml_mapping(root / "params.yaml"), resolved)
    return [arg for key, value in changes.items() for arg in ("-S", f"{key}={hydra_value(value)}")]


# --------------------------------------------------------------------------- DAG order


def parse_dot(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Nodes (in the order listed) and edges (upstream, downstream) of ``dvc dag --dot``."""
    nodes: list[str] = []
    edges: list[tuple[str, str]] = []
    for line in text.splitlines():
        edge = re.fullmatch(r'\s*"([^"]+)"\s*->\s*"([^"]+)";?\s*', line)
        if edge:
            edges.append((edge[1], edge[2]))
            continue
        node = re.fullmatch(r'\s*"([^"]+)";?\s*', line)
        if node:
            nodes.append(node[1])
    return nodes, edges


def topological(nodes: list[str], edges: list[tuple[str, str]]) -> list[str]:
    """Kahn's order, ties broken by the listed order (DVC lists stages as dvc.yaml does)."""
    pending = {node: 0 for node in nodes}
    for _, downstream in edges:
        pending[downstream] = pending.get(downstream, 0) + 1
    order: list[str] = []
    ready = [node for node in pending if pending[node] == 0]
    while ready:
        node = ready.pop(0)
        order.append(node)
        for upstream, downstream in edges:
            if upstream == node:
                pending[downstream] -= 1
                if pending[downstream] == 0:
                    ready.append(downstream)
    if len(order) != len(pending):
        raise ValueError(f"dvc dag has a cycle among {sorted(set(pending) - set(order))}")
    return order


def dvc_binary() -> str:
    """This environment's dvc (the stages must run with its python), else the PATH's."""
    local = Path(sys.executable).with_name("dvc")
    return str(local) if local.exists() else "dvc"


def stage_graph(root: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Every stage of ``root``'s pipeline in an order ``dvc repro -s`` can run them, and the
    edges (upstream, downstream) of ``dvc dag``."""
    result = subprocess.run(
        [dvc_binary(), "dag", "--dot"], cwd=root, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"dvc dag failed in {root}:\n{result.stderr[-4000:]}")
    nodes, edges = parse_dot(result.stdout)
    return topological(nodes, edges), edges


def stage_order(root: Path) -> list[str]:
    """Every stage of ``root``'s pipeline in an order ``dvc repro -s`` can run them."""
    return stage_graph(root)[0]


# --------------------------------------------------------------------------- scratch copy


def _git(args: list[str], cwd: Path) -> str:
    command = ["git", "-c", "user.name=tagrpo", "-c", "user.email=tagrpo@localhost", *args]
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}:\n{result.stderr[-2000:]}")
    return result.stdout


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard links: outputs can be gigabytes. Safe because neither DVC nor the stages write
    into an existing output file: both delete outputs and write new files."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _link_tree(source: Path, target: Path) -> int:
    if source.is_file():
        _link_or_copy(source, target)
        return 1
    count = 0
    for path in source.rglob("*"):
        if path.is_file():
            _link_or_copy(path, target / path.relative_to(source))
            count += 1
    return count


def is_environment(folder: Path) -> bool:
    """A Python virtual environment (``pyvenv.cfg``) or a conda environment (``conda-meta/``)."""
    return (folder / "pyvenv.cfg").is_file() or (folder / "conda-meta").is_dir()


def work_tree_files(source: Path) -> list[str]:
    """The files of ``source``'s work tree a scratch copy takes over: modified tracked files and
    untracked ones git does not ignore, leaving out every environment folder whatever its name
    or .gitignore (an environment belongs to the machine, and the rerun runs in the
    interpreter that started it)."""
    listed = _git(["ls-files", "-m", "-o", "--exclude-standard", "--directory", "-z"], source)
    files: list[str] = []
    for name in filter(None, listed.split("\0")):
        path = source / name
        if path.is_file():
            files.append(name.rstrip("/"))
            continue
        if not path.is_dir() or _left_out(path):
            continue
        # An untracked folder (git lists it once): its files, pruning environments inside.
        for folder, subfolders, names in os.walk(path):
            subfolders[:] = [d for d in subfolders if not _left_out(Path(folder, d))]
            relative = Path(folder).relative_to(source)
            files += [(relative / n).as_posix() for n in names if Path(folder, n).is_file()]
    return sorted(set(files))


def _left_out(folder: Path) -> bool:
    # A nested git repository is left out as git itself lists it (one entry, no files).
    return is_environment(folder) or (folder / ".git").exists()


def prepare_scratch(source: Path, target: Path, resolved: Mapping[str, Any], message: str) -> str:
    """Build the scratch copy in ``target`` (must not exist); returns its commit sha."""
    if target.exists():
        raise FileExistsError(f"{target} exists: every rerun gets a fresh copy")
    head = _git(["rev-parse", "HEAD"], source).strip()
    target.parent.mkdir(parents=True, exist_ok=True)
    # --shared: the clone borrows the checkout's objects (nothing copied, nothing written there).
    _git(["clone", "--quiet", "--shared", "--no-checkout", str(source), str(target)], source)
    _git(["checkout", "--quiet", "--detach", head], target)
    # The work tree as it is: modified and new (not ignored) files, deletions; never an
    # environment (a .venv-gpu the user did not ignore would be gigabytes per rerun).
    for name in work_tree_files(source):
        _link_or_copy_text(source / name, target / name)
    for name in filter(None, _git(["ls-files", "-d", "-z"], source).split("\0")):
        (target / name).unlink(missing_ok=True)
    header = "# Written by a tagrpo rerun (" + message.replace("\n", " ") + ")\n"
    (target / "params.yaml").write_text(header + yaml.safe_dump(dict(resolved), sort_keys=False))
    _git(["add", "-A"], target)
    _git(["commit", "--quiet", "--allow-empty", "-m", f"tagrpo rerun: {message}"], target)
    # The checkout's outputs and lock: DVC then reruns only the stages the params change.
    lock = source / "dvc.lock"
    if lock.is_file():
        shutil.copy2(lock, target / "dvc.lock")
        prune_lock(target)  # only the stages of the resolved params
    for output in sorted(pipeline_outputs(source)):
        if (source / output).exists() and not (target / output).exists():
            _link_tree(source / output, target / output)
    for name in SHARED_STATE:
        if (source / name).exists():
            os.symlink((source / name).resolve(), target / name)
    cache = source / ".dvc" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    # Outputs the rerun produces land in the checkout's cache: `dvc checkout` can bring them
    # into the checkout later, and DVC's run cache is shared.
    (target / ".dvc").mkdir(exist_ok=True)
    (target / ".dvc" / "config.local").write_text(f"[cache]\n    dir = {cache.resolve()}\n")
    return _git(["rev-parse", "HEAD"], target).strip()


def _link_or_copy_text(source: Path, target: Path) -> None:
    # Source files are copied, not linked: an edit in the checkout must not change the rerun.
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
