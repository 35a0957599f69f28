"""Fixtures for every test of the project (the per-package conftest files add theirs)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from harnesskit import ThreadedSink

# The child pytest runs of these tests do not need Hypothesis's reporting plugin, which
# imports all of Hypothesis (about 1 CPU-second) at the end of every run.
os.environ["PYTEST_ADDOPTS"] = " ".join(
    filter(None, [os.environ.get("PYTEST_ADDOPTS", ""), "-p no:hypothesispytest"])
)


@pytest.fixture
def plain_smtp() -> Iterator[ThreadedSink]:
    sink = ThreadedSink()
    try:
        yield sink
    finally:
        sink.close()
