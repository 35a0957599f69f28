"""Ingestion on real Spark: every flavour, rejected files, Parquet layout, re-ingestion."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reports.build import build
from reports.table import read_cases

pytestmark = pytest.mark.spark


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_flavour_lands_in_the_table_and_bad_files_are_listed(
    spark, flavours: Path, malformed: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    missing = str(tmp_path / "nowhere" / "*.xml")
    result = build(spark, [str(flavours), str(malformed), missing], str(out))

    rows = read_cases(spark, str(out)).collect()
    by_target = {r.target for r in rows}
    assert by_target == {"reference", "postfix", "javamta"}
    assert {r.run_id for r in rows} == {"ci-1001", "ci-1002", "ant-7", "mvn-88"}
    # 6 + 6 + 3 + 4 rows: one per case x behaviour, cases without a behaviour kept once.
    assert len(rows) == 19
    assert result.ingest.rows_added == 19
    assert {r.outcome for r in rows} == {"passed", "failed", "error", "skipped"}
    surefire = {r.scenario: r for r in rows if r.target == "javamta"}
    assert surefire["resubmitsFromSafetyNet SN-4"].reruns == 1

    rejected = {Path(r["file"]).name: r["reason"] for r in read_csv(out / "rejected.csv")}
    assert set(rejected) == {
        "empty.xml", "truncated.xml", "not_junit.xml", "no_cases.xml", "binary.xml", "*.xml"
    }
    assert rejected["truncated.xml"].startswith("malformed XML")
    assert rejected["*.xml"] == "no such file or directory"

    # Partitioned by date and target, one file per partition.
    partitions = sorted(p.relative_to(out / "cases").parent.as_posix()
                        for p in (out / "cases").rglob("*.parquet"))
    assert "date=2025-03-01/target=reference" in partitions
    assert len(partitions) == len(set(partitions))
    for name in ("matrix.csv", "flaky.csv", "regressions.csv", "dashboard.html"):
        assert (out / name).stat().st_size > 0


def test_reingesting_adds_nothing_and_new_files_are_the_only_ones_parsed(
    spark, flavours: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first = build(spark, [str(flavours)], str(out))
    assert (first.ingest.parsed, first.ingest.accepted) == (4, 4)

    again = build(spark, [str(flavours)], str(out))
    assert again.ingest.parsed == 0
    assert again.ingest.skipped_known == 4
    assert read_cases(spark, str(out)).count() == first.ingest.rows_added

    # Same content under a new name and a touched mtime: parsed, recognised, not added.
    copy = flavours / "copy_of_xunit2.xml"
    copy.write_bytes((flavours / "pytest_xunit2.xml").read_bytes())
    os.utime(flavours / "surefire.xml", (1, 1))
    third = build(spark, [str(flavours)], str(out))
    assert third.ingest.parsed == 2
    assert third.ingest.duplicates == 2
    assert third.ingest.rows_added == 0
    assert read_cases(spark, str(out)).count() == first.ingest.rows_added


def test_hadoop_uri_and_glob_inputs(spark, flavours: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    uri = "file://" + str(flavours) + "/pytest_*.xml"
    result = build(spark, [uri, str(flavours / "sure*.xml")], str(out))
    assert result.ingest.accepted == 3
    runs = {r.run_id for r in read_cases(spark, str(out)).select("run_id").collect()}
    assert runs == {"ci-1001", "ci-1002", "mvn-88"}


def test_flags_name_target_when_files_do_not(spark, tmp_path: Path) -> None:
    source = next(Path(__file__).parent.joinpath("data", "flavours").rglob("ant_jenkins.xml"))
    plain = tmp_path / "results" / "junit.xml"
    plain.parent.mkdir()
    plain.write_bytes(source.read_bytes())
    out = tmp_path / "out"
    build(spark, [str(plain)], str(out), target="exim", target_version="4.97", run_id="n-1")
    rows = read_cases(spark, str(out)).collect()
    identity = {(r.target, r.target_version, r.run_id) for r in rows}
    assert identity == {("exim", "4.97", "n-1")}


def test_a_build_of_nothing_but_bad_files_still_writes_every_output(
    spark, malformed: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = build(spark, [str(malformed)], str(out))
    assert (result.ingest.accepted, result.rows) == (0, 0)
    assert len(read_csv(out / "rejected.csv")) == len(list(malformed.iterdir()))
    assert read_csv(out / "matrix.csv") == []
    assert "No rejected file." not in (out / "dashboard.html").read_text()


def test_small_tables_get_one_partition_and_no_codegen_unless_the_user_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reports.build import _SMALL_TABLE_SETTINGS, SMALL_TABLE_CASES, _small_table_settings

    monkeypatch.delenv("SHADOWCHECK_SPARK_CONF", raising=False)
    monkeypatch.delenv("SHADOWCHECK_SHUFFLE", raising=False)
    assert _small_table_settings(SMALL_TABLE_CASES) == _SMALL_TABLE_SETTINGS
    assert _SMALL_TABLE_SETTINGS["spark.sql.shuffle.partitions"] == "1"
    assert _small_table_settings(SMALL_TABLE_CASES + 1) == {}
    assert _SMALL_TABLE_SETTINGS["spark.sql.codegen.wholeStage"] == "false"
    monkeypatch.setenv(
        "SHADOWCHECK_SPARK_CONF",
        "spark.sql.adaptive.enabled=true;spark.sql.codegen.wholeStage=true",
    )
    assert set(_small_table_settings(10)) == {
        "spark.sql.shuffle.partitions",
        "spark.sql.codegen.factoryMode",
    }
    monkeypatch.setenv("SHADOWCHECK_SHUFFLE", "4")
    assert set(_small_table_settings(10)) == {"spark.sql.codegen.factoryMode"}


def test_the_package_shipped_to_the_executors_hides_nothing_from_later_processes(
    spark,
) -> None:
    # A child given this process's path, as multiprocessing's spawn and forkserver give
    # it, imports the installed harness, not the partial copy Spark ships to its
    # executors (a forkserver started after a build could not import the harness).
    assert not [p for p in sys.path if "shadowcheck-reports-" in p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = subprocess.run(
        [sys.executable, "-c", "import pytest_shadowcheck.targets.base, reports.verdicts"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
