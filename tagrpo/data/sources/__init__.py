"""Upstream data sets, one module per benchmark (and per training set), like nanochat's
``tasks/``.

Each module holds one :class:`~tagrpo.data.sources.base.Source`: its local file under the data
directory (``shared/data``, SOURCES.md), its Hugging Face copies and their field adapters, the
row builder that turns a record into a :class:`~tagrpo.data.schema.Question` (answer
extraction, id scheme, rejection reasons), the answer kind, the options of a multiple-choice
benchmark (its chance level), the paper's display name and Table 1 group.
:mod:`.registry` lists them by name; :func:`.local.load_local` and :func:`.hub.load_hub` load
one through the same :func:`.base.normalise_records` (rows in = kept + rejected).

Adding a benchmark
------------------
1. Write ``tagrpo/data/sources/<name>.py`` (copy ``amc23.py``, or ``gpqa_diamond.py`` for
   multiple choice): ``build(record, row_index, *, <options>) -> Question``, raising
   ``Reject(reason)`` (a code of ``base.REJECTION_REASONS``) for a row it cannot use, and
   ``SOURCE = Source(name, title, split, file, id_field, build, hub=(HubSpec(repo, split),),
   answer_kind=..., choices=..., group=...)``.
2. Add the module to the import and the tuple in ``tagrpo/data/sources/registry.py``.
3. Tests: a few rows in ``tests/fixtures/data/<name>/test.jsonl`` and their counts and
   rejection reasons in ``EXPECTED`` of ``tests/test_data_sources.py``; if the file ships in
   ``shared/data``, its exact kept count in ``EXPECTED_KEPT`` of ``tests/test_data_shared.py``
   and its rows and SHA-256 (from SOURCES.md) in ``MANIFESTS`` of :mod:`.manifests` (the data
   stage refuses a local file that differs; tests/test_input_checks.py checks the two agree).
4. Use it: its name in ``data.local.benchmarks`` / ``data.hub.benchmarks`` of params.yaml or a
   profile, and in ``evaluate.groups`` where it has a ``group`` (a test keeps the paper and
   local profiles' groups equal to the sources'). Validation, the data stage's input manifest,
   the multiple-choice answer kind and the report's chance floor all read the ``Source``.
"""
