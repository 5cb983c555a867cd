"""What the tests share that is not a fixture: broker and Spark helpers, test-only data sources
(imported by name in Spark's Python workers, whose PYTHONPATH holds ``tests/``) and the jobs some
tests run as scripts (``python tests/support/<job>.py``)."""
