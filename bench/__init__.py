"""The project's benchmarks: ``python -m bench`` runs them all (``./run bench``).

Each ``bench_*`` module also runs on its own (``python -m bench.bench_source --help``) and
writes ``bench/results/<name>.json``; :mod:`bench.report` turns those into ``latest.json``,
``results.md`` and the plots. Shared pieces: :mod:`bench.common` (machine record, interleaved
rounds, Spark timing, CPU accounting), :mod:`bench.cdc` (the Postgres workload and slots),
:mod:`bench.iggy` (brokers and read-back), :mod:`bench.handwritten` (the baselines).
"""
