"""tagql's benchmark suite: one package per pipeline stage (``ask``, ``knowledge``, ``routing``, ``tag``).

Run a benchmark as a module from the repository root, e.g. ``python -m bench.routing.spider --syn``;
``bench/README.md`` lists them all. Shared helpers (data path, result files) live in :mod:`bench.common`.
"""
