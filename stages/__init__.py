"""DVC stages: one module per stage, each runnable as ``python -m stages.<name>``.

Importing ``tagrpo`` first applies the offline defaults before any stage imports a library
that reads them (transformers, mlflow).
"""

import tagrpo  # noqa: F401
