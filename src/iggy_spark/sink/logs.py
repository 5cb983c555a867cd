"""The sink's log lines: logger ``iggy_spark``, at INFO per batch and WARNING where a guarantee
weakens, visible in Spark's worker processes too (nobody configures logging there)."""

from __future__ import annotations

import logging

__all__ = ["log", "log_batch", "warn"]

log = logging.getLogger("iggy_spark")


def warn(line: str) -> None:
    _ensure_handler()
    log.warning(line)


def log_batch(line: str) -> None:
    """Log at INFO (see :func:`_ensure_handler`)."""
    _ensure_handler()
    log.info(line)


def _ensure_handler() -> None:
    """In Spark's worker processes nobody configures logging: add a handler."""
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
