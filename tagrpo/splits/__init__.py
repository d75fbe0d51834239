"""The data stage's tables: the training split and the benchmark splits, built from the
sources of :mod:`tagrpo.data` or the mini world, and read back for training.

build         the ``data`` stage: load the sources, write the split and the benchmarks, count rows
inputs        the manifest of the benchmark files outside the checkout (the ``preflight`` stage)
training_set  the training split as trainers read it (q0, its accepted neighbours, the answer)
"""
