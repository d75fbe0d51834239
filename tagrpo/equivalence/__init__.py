"""Whether a rephrasing keeps its question: structural, similarity and answer-consistency
checks, regeneration and the check_equivalence stage's work."""
