"""The report table: find JUnit files, parse the new ones on Spark, append them as Parquet.

Layout under ``--out``: ``cases/`` is the table (partitioned by date and target) and
``manifest/`` remembers every file already looked at (path, size, mtime, SHA-1,
rejection reason), which is what makes a second build incremental and a
re-ingested file add nothing.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reports.ingest import ROW_FIELDS, FileIdentity, parse_document
from reports.progress import Progress

__all__ = [
    "CASES_SCHEMA",
    "Ingest",
    "SourceFile",
    "discover",
    "ingest",
    "read_cases",
]

PARSED_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("started_at", T.TimestampType()),
        T.StructField("target", T.StringType()),
        T.StructField("target_version", T.StringType()),
        T.StructField("harness_version", T.StringType()),
        T.StructField("scenario", T.StringType()),
        T.StructField("classname", T.StringType()),
        T.StructField("behaviour", T.StringType()),
        T.StructField("outcome", T.StringType()),
        T.StructField("duration_s", T.DoubleType()),
        T.StructField("message", T.StringType()),
        T.StructField("reruns", T.IntegerType()),
        T.StructField("source_file", T.StringType()),
        T.StructField("file_sha1", T.StringType()),
        T.StructField("reject_reason", T.StringType()),
    ]
)
assert tuple(PARSED_SCHEMA.fieldNames()) == ROW_FIELDS

TABLE_COLUMNS = [
    "run_id",
    "started_at",
    "harness_version",
    "target_version",
    "scenario",
    "classname",
    "behaviour",
    "outcome",
    "duration_s",
    "message",
    "reruns",
    "source_file",
]
PARTITION_COLUMNS = ["date", "target"]

# Given on read so a target called "2024" is not inferred as a number.
CASES_SCHEMA = T.StructType(
    [f for f in PARSED_SCHEMA.fields if f.name in TABLE_COLUMNS]
    + [T.StructField("date", T.DateType()), T.StructField("target", T.StringType())]
)

MANIFEST_SCHEMA = T.StructType(
    [
        T.StructField("source_file", T.StringType()),
        T.StructField("size", T.LongType()),
        T.StructField("modified_ms", T.LongType()),
        T.StructField("file_sha1", T.StringType()),
        T.StructField("rows", T.LongType()),
        T.StructField("reject_reason", T.StringType()),
        T.StructField("note", T.StringType()),
        T.StructField("ingested_at", T.TimestampType()),
    ]
)


@dataclass(frozen=True)
class SourceFile:
    uri: str
    size: int
    modified_ms: int
    local: bool  # listed by Python, readable by the workers' own open()


@dataclass
class Ingest:
    """What one build did to the table."""

    found: int = 0
    parsed: int = 0
    skipped_known: int = 0
    accepted: int = 0
    duplicates: int = 0
    rows_added: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)


def _has_scheme(path: str) -> bool:
    scheme = urlparse(path).scheme
    return len(scheme) > 1  # "C:" is a drive, not a scheme


def _local_files(arg: str) -> Iterator[str] | None:
    """Files named by a local path, glob or directory (recursing into *.xml)."""
    matches = sorted(glob.glob(arg, recursive=True)) if glob.has_magic(arg) else [arg]
    matches = [m for m in matches if os.path.exists(m)]
    if not matches:
        return None

    def walk() -> Iterator[str]:
        for match in matches:
            if os.path.isdir(match):
                for root, dirs, names in os.walk(match):
                    dirs.sort()
                    for name in sorted(names):
                        if name.endswith(".xml"):
                            yield os.path.join(root, name)
            else:
                yield match

    return walk()


def _hadoop_files(spark: SparkSession, arg: str) -> list[SourceFile] | None:
    """Same as _local_files for any Hadoop filesystem URI (hdfs://, s3a://, file://)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(arg)
    fs = path.getFileSystem(conf)
    statuses = fs.globStatus(path)
    if not statuses:
        return None
    found: list[SourceFile] = []
    for status in statuses:
        if status.isDirectory():
            listing = fs.listFiles(status.getPath(), True)
            while listing.hasNext():
                item = listing.next()
                uri = item.getPath().toString()
                if uri.endswith(".xml"):
                    found.append(SourceFile(uri, item.getLen(), item.getModificationTime(), False))
        else:
            found.append(
                SourceFile(
                    status.getPath().toString(),
                    status.getLen(),
                    status.getModificationTime(),
                    False,
                )
            )
    return sorted(found, key=lambda f: f.uri)


def discover(spark: SparkSession, inputs: Iterable[str]) -> tuple[list[SourceFile], list[tuple]]:
    """Every file the inputs name, and (input, reason) for inputs that name nothing."""
    files: dict[str, SourceFile] = {}
    missing: list[tuple] = []
    for arg in inputs:
        if _has_scheme(arg):
            listed = _hadoop_files(spark, arg)
        else:
            names = _local_files(arg)
            listed = None
            if names is not None:
                listed = []
                for name in names:
                    stat = os.stat(name)
                    uri = "file:" + os.path.abspath(name)
                    listed.append(SourceFile(uri, stat.st_size, int(stat.st_mtime * 1000), True))
        if listed is None:
            missing.append((arg, "no such file or directory"))
            continue
        for found in listed:
            files.setdefault(found.uri, found)
    return list(files.values()), missing


def _identity(
    source: SourceFile, run_id: str | None, target: str | None, version: str | None
) -> FileIdentity:
    modified = datetime.fromtimestamp(source.modified_ms / 1000, tz=UTC)
    return FileIdentity(source.uri, modified, run_id, target, version)


def _parse_local(origins: list[FileIdentity]) -> Iterator[tuple]:
    for origin in origins:
        try:
            with open(origin.path.removeprefix("file:"), "rb") as handle:
                content = handle.read()
        except OSError as exc:
            yield (None,) * 12 + (origin.path, None, f"unreadable: {exc}")
            continue
        yield from parse_document(content, origin)


def _parsed_rows(
    spark: SparkSession, origins: list[FileIdentity], local: bool
) -> DataFrame:
    sc = spark.sparkContext
    slices = max(1, min(len(origins), sc.defaultParallelism * 4))
    if local:
        # Workers read local files themselves: no copy of every byte through the JVM.
        rdd = sc.parallelize(origins, slices).mapPartitions(lambda part: _parse_local(list(part)))
    else:
        by_uri = {o.path: o for o in origins}
        contents = sc.binaryFiles(",".join(by_uri), minPartitions=slices)
        rdd = contents.flatMap(lambda item: parse_document(item[1], by_uri[item[0]]))
    return spark.createDataFrame(rdd, PARSED_SCHEMA, verifySchema=False)


def _manifest(spark: SparkSession, out: str) -> list[T.Row]:
    try:
        return spark.read.schema(MANIFEST_SCHEMA).parquet(f"{out}/manifest").collect()
    except Exception as exc:  # first build: nothing there yet
        if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
            return []
        raise


def ingest(
    spark: SparkSession,
    inputs: Iterable[str],
    out: str,
    *,
    run_id: str | None = None,
    target: str | None = None,
    target_version: str | None = None,
    progress: Progress | None = None,
) -> Ingest:
    """Append the rows of every new input file to ``out/cases`` and record it in the manifest."""
    progress = progress or Progress(enabled=False)
    report = Ingest()
    files, missing = discover(spark, inputs)
    report.found = len(files)
    report.rejected.extend(missing)
    known = _manifest(spark, out)
    seen = {(r.source_file, r.size, r.modified_ms) for r in known}
    known_sha1 = {r.file_sha1: r.source_file for r in known if r.rows and r.file_sha1}
    new = [f for f in files if (f.uri, f.size, f.modified_ms) not in seen]
    report.skipped_known = len(files) - len(new)
    progress.say(
        f"{len(files)} files found, {len(new)} new, {report.skipped_known} already ingested"
    )
    if not new:
        return report

    sizes = {f.uri: f for f in new}
    manifest_rows: list[tuple] = []
    now = datetime.now(UTC)
    for local in (True, False):
        batch = [f for f in new if f.local == local]
        if not batch:
            continue
        origins = [_identity(f, run_id, target, target_version) for f in batch]
        parsed = _parsed_rows(spark, origins, local).cache()
        with progress.watch(spark.sparkContext, f"parsing {len(batch)} files"):
            per_file = (
                parsed.groupBy("source_file", "file_sha1", "reject_reason").count().collect()
            )
        report.parsed += len(batch)
        accepted: set[str] = set()
        for row in sorted(per_file, key=lambda r: r.source_file):
            source = sizes[row.source_file]
            note = None
            rows = 0
            if row.reject_reason is not None:
                report.rejected.append((row.source_file, row.reject_reason))
            elif row.file_sha1 in known_sha1:
                note = f"same content as {known_sha1[row.file_sha1]}"
                report.duplicates += 1
            else:
                known_sha1[row.file_sha1] = row.source_file
                accepted.add(row.source_file)
                rows = row["count"]
            manifest_rows.append(
                (source.uri, source.size, source.modified_ms, row.file_sha1, rows,
                 row.reject_reason, note, now)
            )
        if accepted:
            report.accepted += len(accepted)
            fresh = parsed.where(F.col("source_file").isin(sorted(accepted)))
            with progress.watch(spark.sparkContext, f"writing {len(accepted)} files to cases/"):
                _append_cases(fresh, f"{out}/cases")
            report.rows_added += sum(r["count"] for r in per_file if r.source_file in accepted)
        parsed.unpersist()
    # The manifest goes last: a crash before it only means the files are parsed again.
    spark.createDataFrame(manifest_rows, MANIFEST_SCHEMA).coalesce(1).write.mode(
        "append"
    ).parquet(f"{out}/manifest")
    return report


def _append_cases(rows: DataFrame, path: str) -> None:
    table = rows.withColumn("date", F.to_date("started_at")).select(
        *TABLE_COLUMNS, *PARTITION_COLUMNS
    )
    # One task per (date, target) so each partition directory gets one file, not one per task.
    table = table.repartition(*PARTITION_COLUMNS)
    table.write.mode("append").partitionBy(*PARTITION_COLUMNS).parquet(path)


def read_cases(spark: SparkSession, out: str) -> DataFrame:
    return spark.read.schema(CASES_SCHEMA).parquet(f"{out}/cases")


def rejected_files(spark: SparkSession, out: str, current: list[tuple[str, str]]) -> list[tuple]:
    """Every rejected file of the history (latest verdict per path) plus this build's."""
    latest: dict[str, T.Row] = {}
    for row in sorted(_manifest(spark, out), key=lambda r: r.ingested_at):
        latest[row.source_file] = row
    listed = {path: reason for path, reason in current}
    for path, row in latest.items():
        if row.reject_reason is not None:
            listed.setdefault(path, row.reject_reason)
    return sorted(listed.items())
