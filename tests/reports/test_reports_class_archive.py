"""The driver JVM's class-data archive: written by the first CLI build, used by the next."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from reports_junit_helpers import write_history

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TMPDIR=str(tmp), PYSPARK_PYTHON=sys.executable)
    return subprocess.run(
        [sys.executable, "-m", "reports", "build", *args, "--master", "local[2]"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )


def _rows(out: Path) -> dict[str, list[list[str]]]:
    found = {}
    for name in ("matrix.csv", "flaky.csv", "regressions.csv", "trends.csv", "durations.csv"):
        with (out / name).open(newline="") as handle:
            found[name] = sorted(csv.reader(handle))
    return found


def test_first_build_records_the_archive_and_the_next_maps_it(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java")
    temp = tmp_path / "tmp"
    temp.mkdir()
    write_history(tmp_path / "in")

    first = _cli(temp, str(tmp_path / "in"), "--out", str(tmp_path / "one"))
    assert first.returncode == 0, first.stderr
    archives = list(temp.glob("shadowcheck-spark-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 1_000_000
    assert not list(temp.glob("*.tmp"))  # the recording was published, not left behind

    second = _cli(temp, str(tmp_path / "in"), "--out", str(tmp_path / "two"))
    assert second.returncode == 0, second.stderr
    assert "cds" not in second.stderr + second.stdout  # the JVM says nothing about it
    assert _rows(tmp_path / "two") == _rows(tmp_path / "one")

    # A recording cut short (here: truncated) must never be published: a JVM that
    # maps a truncated archive crashes.
    from reports.spark import _keep_archive

    partial = temp / "shadowcheck-spark-cut.jsa.999999.tmp"
    partial.write_bytes(archives[0].read_bytes()[:1_000_000])
    _keep_archive(partial, clean_exit=True)
    assert not partial.exists()
    assert not (temp / "shadowcheck-spark-cut.jsa").exists()
    assert not list(temp.glob("*.log")) and not list(Path.cwd().glob("hs_err_pid*.log"))
