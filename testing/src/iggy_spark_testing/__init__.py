"""Tooling for trying and proving iggy-spark, shipped apart from the connectors.

A throwaway Postgres (:mod:`~iggy_spark_testing.harness`), a seeded workload that records what
it committed (:mod:`~iggy_spark_testing.workload`), reading Iggy topics back
(:mod:`~iggy_spark_testing.readback`), the consistency oracle, the faults and the killable job
the fault tests use (:mod:`~iggy_spark_testing.oracle`, :mod:`~iggy_spark_testing.chaos`,
:mod:`~iggy_spark_testing.job`), raw Iggy frames
(:mod:`~iggy_spark_testing.iggy_frames`) and the demo. The notebook, the demo, the tests and the
benchmarks need it; a production job does not.
"""
