"""``format("iggy_routed")``: the routed sink, one module per role.

:mod:`~iggy_spark.sink.datasource` is what Spark finds; :mod:`~iggy_spark.sink.writer` runs each
micro-batch, :mod:`~iggy_spark.sink.task` routes and admits a task's rows
(:mod:`~iggy_spark.sink.admission`, :mod:`~iggy_spark.sink.breaker`) and
:mod:`~iggy_spark.sink.outbox` sends them (:mod:`~iggy_spark.sink.sending`), effectively once
(:mod:`~iggy_spark.sink.delivery`); the query's state lives in a control topic in Iggy
(:mod:`~iggy_spark.sink.control_topic` reads and appends the records of
:mod:`~iggy_spark.sink.control_records`). The Iggy client pieces it shares with the ``iggy``
source sit at the package root.

Internal: the sink's public names are those of :mod:`iggy_spark`.
"""
