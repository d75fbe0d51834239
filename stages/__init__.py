"""DVC stages: one module per stage, each runnable as ``python -m stages.<name>``."""
