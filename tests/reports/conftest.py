"""Fixtures for the reports tests: one local Spark per test process, JUnit writers."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    from reports.spark import JavaMissingError, start_spark

    try:
        session = start_spark("local[2]", app_name="shadowcheck-reports-tests")
    except JavaMissingError as exc:
        pytest.skip(f"Spark cannot start: {exc}")
    yield session
    session.stop()


@pytest.fixture
def flavours(tmp_path: Path) -> Path:
    """A private copy of the hand-made JUnit files (tests touch mtimes and add files)."""
    copy = tmp_path / "in"
    shutil.copytree(DATA / "flavours", copy)
    return copy


@pytest.fixture
def malformed(tmp_path: Path) -> Path:
    copy = tmp_path / "bad"
    shutil.copytree(DATA / "malformed", copy)
    return copy


