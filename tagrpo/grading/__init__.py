"""Answer extraction, normalisation and equivalence checking for math and multiple choice."""
