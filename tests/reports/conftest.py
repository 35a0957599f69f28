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


@pytest.fixture(scope="session")
def history(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Output directory of one build over the history of reports_junit_helpers."""
    from reports_junit_helpers import write_history

    from reports.build import build

    root = tmp_path_factory.mktemp("history")
    write_history(root / "in")
    build(spark, [str(root / "in")], str(root / "out"))
    return root / "out"


@pytest.fixture
def history_copy(history: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(inputs, out): the shared history's inputs, to be read only, and a private copy
    of their build for a test to build on: one build fewer than building it again."""
    out = tmp_path / "out"
    shutil.copytree(history, out)
    return history.parent / "in", out
