"""Sampling progress bars say which benchmark they sample and how far along the benchmarks
are ("sampling mini_chains (1 of 2)"): the sampler's bar used to say only "sampling"."""

from __future__ import annotations

from tagrpo.backends.base import Completion, SamplingParams
from tagrpo.data.schema import Question
from tagrpo.evaluation.runner import sample_benchmarks
from tagrpo.plumbing import progress


class RecordingBackend:
    """Answers "1" to everything and records the bar title a sampler would show."""

    def __init__(self) -> None:
        self.titles: list[str] = []

    def generate(self, conversations, sampling: SamplingParams) -> list[list[Completion]]:
        self.titles.append(progress.describe("sampling"))
        return [[Completion("1", 1, True)] * sampling.n for _ in conversations]


def _questions(benchmark: str, count: int) -> list[Question]:
    return [Question(f"{benchmark}-{i}", benchmark, "test", "1+0?", "1") for i in range(count)]


def test_each_benchmarks_bar_names_it_and_its_place() -> None:
    backend = RecordingBackend()
    benchmarks = {"mini_chains": _questions("mini_chains", 2), "mini_unseen": _questions("u", 1)}
    responses = sample_benchmarks(backend, benchmarks, SamplingParams(n=3, max_new_tokens=4))
    assert backend.titles == ["sampling mini_chains (1 of 2)", "sampling mini_unseen (2 of 2)"]
    assert len(responses) == 9  # 3 questions x n=3
    assert progress.describe("sampling") == "sampling"  # the label ends with its block


def test_the_bar_carries_the_label(monkeypatch) -> None:
    monkeypatch.setenv("TAGRPO_PROGRESS", "1")
    with progress.labelled("mini_choice (4 of 4)"), progress.bar(10, "sampling") as shown:
        assert shown.desc == "sampling mini_choice (4 of 4)"
