"""The pipeline both connectors were built for, as a library call and a job: ``pg_cdc`` →
``iggy_routed``.

:func:`serve_metrics` serves Prometheus metrics of both connectors from the driver. This
package lives apart from either connector because it spans both; install it with
``pip install iggy-spark[all]`` and run it as ``pg-to-iggy`` (or ``python -m pg_to_iggy``).
"""

from __future__ import annotations

from pg_to_iggy.metrics import MetricsServer, serve_metrics
from pg_to_iggy.ordering import in_key_order
from pg_to_iggy.pipeline import JSON_COLUMNS, main, start_pipeline

__all__ = [
    "JSON_COLUMNS", "MetricsServer", "in_key_order", "main", "serve_metrics", "start_pipeline",
]
