"""Rephrasings from a local transformers model (no endpoint), cached like the others.

The model sees the same Appendix A prompt through its chat template. Samples are drawn in
batches with :class:`~tagrpo.backends.hf.HFBackend`; ``per_variant`` and ``choices`` both
sample N completions of one prompt (locally they are the same thing), ``numbered`` samples
one completion and parses a list from it. The model's identity in cache keys is a content
hash of its folder, so retraining the model invalidates its cached rephrasings.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.models import load_causal_lm, resolve
from tagrpo.config.rephrase import LocalRephraseModel
from tagrpo.data.rephrase_templates import RephraseTemplate
from tagrpo.data.schema import Question
from tagrpo.rephrase.cache import ReplyCache
from tagrpo.rephrase.candidates import Candidate, candidates_from_reply, plan_requests


def model_fingerprint(source: Any) -> str:
    """sha256 over a model folder's files (names and bytes), or the hub id and revision."""

    resolved = resolve(source)
    if resolved.kind != "local":
        return f"{resolved.kind}:{resolved.hub_id or resolved.gguf_file}@{resolved.revision}"
    digest = hashlib.sha256()
    for path in sorted(Path(resolved.path).rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(resolved.path)).encode())
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return f"sha256:{digest.hexdigest()[:24]}"


class HFRephraser:
    """A :class:`~tagrpo.rephrase.candidates.Rephraser` over a local causal LM."""

    name = "hf"

    def __init__(
        self,
        model_dir: str | Path,
        template: RephraseTemplate,
        n: int = 3,
        mode: str = "per_variant",
        seed: int = 0,
        cache: ReplyCache | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        max_batch_sequences: int = 32,
    ) -> None:
        self.model_dir = str(model_dir)
        self.template = template
        self.n = n
        self.mode = mode
        self.seed = seed
        self.cache = cache
        self.sampling = {"temperature": temperature, "top_p": top_p, "max_tokens": max_new_tokens}
        self.max_batch_sequences = max_batch_sequences
        self.fingerprint = model_fingerprint(self.model_dir)
        self._backend: Any = None
        self.issues: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()

    @classmethod
    def from_settings(
        cls,
        settings: LocalRephraseModel,
        template: RephraseTemplate,
        n: int,
        mode: str,
        seed: int,
        cache: ReplyCache | None,
        root: Path | None = None,
    ) -> HFRephraser:
        model = Path(settings.model)
        if root is not None and not model.is_absolute():
            model = root / model
        return cls(
            model,
            template,
            n=n,
            mode=mode,
            seed=seed,
            cache=cache,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_new_tokens=settings.max_new_tokens,
            max_batch_sequences=settings.max_batch_sequences,
        )

    def _generator(self) -> Any:
        if self._backend is None:
            from tagrpo.backends.hf import HFBackend  # torch: the model loads at the first request

            model, tokenizer = load_causal_lm(self.model_dir)
            self._backend = HFBackend(model, tokenizer, self.max_batch_sequences)
        return self._backend

    def rephrase(
        self,
        questions: Sequence[Question],
        round: int = 0,
        slots: Mapping[str, Sequence[int]] | None = None,
    ) -> list[Candidate]:

        # Locally, N choices of one prompt is how per-variant sampling is done efficiently.
        mode = "numbered" if self.mode == "numbered" else "choices"
        planned = plan_requests(
            questions,
            backend="hf",
            model=self.fingerprint,
            template=self.template,
            mode=mode,
            n=self.n,
            seed=self.seed,
            sampling=self.sampling,
            round=round,
            slots=slots,
        )
        stored = self.cache.get_many(p.key for p in planned) if self.cache is not None else {}
        todo = [p for p in planned if p.key not in stored]
        fresh: dict[str, list[str]] = {}
        # One generate() call per group of equal sample counts (n is per call).
        by_count: dict[int, list[Any]] = {}
        for plan in todo:
            by_count.setdefault(plan.n_choices, []).append(plan)
        for count, plans in sorted(by_count.items()):
            sampling = SamplingParams(
                n=count,
                temperature=self.sampling["temperature"],
                top_p=self.sampling["top_p"],
                max_new_tokens=self.sampling["max_tokens"],
                seed=self.seed * 1009 + round,
            )
            completions = self._generator().generate([p.messages for p in plans], sampling)
            for plan, samples in zip(plans, completions, strict=True):
                texts = [sample.text for sample in samples]
                fresh[plan.key] = texts
                if self.cache is not None:
                    self.cache.put(
                        plan.key, "rephrase", {"texts": texts, "model": self.fingerprint}
                    )
        self.counts["generated"] += len(todo)
        self.counts["cache_hits"] += len(planned) - len(todo)
        out = []
        for plan in planned:
            cached = plan.key in stored
            texts = stored[plan.key]["texts"] if cached else fresh[plan.key]
            out.extend(
                candidates_from_reply(
                    plan,
                    texts,
                    f"hf:{self.fingerprint}",
                    round,
                    self.issues,
                    cached=cached,
                    attempts=1,  # as when generated: the file must not depend on the cache
                )
            )
        return out

    def metrics(self) -> dict[str, float]:
        metrics = {f"requests/{k}": float(v) for k, v in self.counts.items()}
        metrics.update({f"parse/{k}": float(v) for k, v in self.issues.items()})
        return metrics
