"""Fixtures for every test of the project (the per-package conftest files add theirs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harnesskit import ThreadedSink


@pytest.fixture
def plain_smtp() -> Iterator[ThreadedSink]:
    sink = ThreadedSink()
    try:
        yield sink
    finally:
        sink.close()
