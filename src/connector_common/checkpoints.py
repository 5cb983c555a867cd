"""Where a Spark checkpoint location is: a local folder, or somewhere only a filesystem client
reaches (``s3a://``, ``gs://``, ``hdfs://``, ...)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["local_checkpoint"]


def local_checkpoint(location: str) -> Path | None:
    """The folder of a checkpoint given as a path or a ``file:`` URI; ``None`` for any other
    scheme (a remote store this process cannot open as a path)."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        return Path(parts.path)
    return Path(location) if parts.scheme == "" else None
