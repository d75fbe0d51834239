"""Evaluation: sampling, grading and pass@k, independent of the backend."""
