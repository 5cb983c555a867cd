"""The local broker's wire tests: a broker per test module (the local one, or the server
``IGGY_URL`` names) and fresh names per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from iggy_local import LocalIggy
from iggy_spark_testing.brokers import ExternalIggy, iggy_server


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalIggy | ExternalIggy]:
    with iggy_server() as started:
        yield started


@pytest.fixture
def names() -> tuple[str, str]:
    """A fresh stream and topic name per test, so tests share one broker safely."""
    suffix = uuid.uuid4().hex[:8]
    return f"stream-{suffix}", f"topic-{suffix}"
