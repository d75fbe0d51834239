"""A grading-worker body that never says it is ready (for the pool's start-up deadline tests).

It lives in an importable module because the pool's forkserver imports a worker's target by
name; a function defined inside a test could not be pickled to it.
"""

import time


def never_ready(*args: object) -> None:
    time.sleep(3600)
