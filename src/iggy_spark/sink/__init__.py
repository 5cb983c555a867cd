"""``format("iggy_routed")``: the routed sink, one module per role, in layers (lowest first; a
module imports only its own layer and those below, held by ``tests/test_layering.py``):

1. **pure rules**, no I/O: :mod:`~iggy_spark.sink.admission` (which destinations a row may
   name), :mod:`~iggy_spark.sink.breaker`, :mod:`~iggy_spark.sink.refusals` (every reason a row
   is refused), :mod:`~iggy_spark.sink.options`, the encoding of rows into messages
   (:mod:`~iggy_spark.sink.encoding`, :mod:`~iggy_spark.sink.json_payloads`,
   :mod:`~iggy_spark.sink.columns`, :mod:`~iggy_spark.sink.partitioning`), effectively-once's
   decisions (:mod:`~iggy_spark.sink.delivery`), the control topic's records
   (:mod:`~iggy_spark.sink.control_records`) and the ledger (:mod:`~iggy_spark.sink.report`);
2. **what talks to Iggy**: topics and sends (:mod:`~iggy_spark.sink.sending`,
   :mod:`~iggy_spark.sink.topic_request`), a task's :mod:`~iggy_spark.sink.outbox`, the query's
   state in its control topic (:mod:`~iggy_spark.sink.control_topic`,
   :mod:`~iggy_spark.sink.migration`);
3. the write **task** (:mod:`~iggy_spark.sink.task`): routes, admits and parks a task's rows;
4. the **writer** (:mod:`~iggy_spark.sink.writer`): Spark's contract, run per micro-batch;
5. what Spark and users call: :mod:`~iggy_spark.sink.datasource`, the destinations table
   (:mod:`~iggy_spark.sink.monitoring`).

The Iggy client pieces it shares with the ``iggy`` source sit at the package root.

Internal: the sink's public names are those of :mod:`iggy_spark` and
:mod:`iggy_spark.monitoring`.
"""
