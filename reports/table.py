"""The report table: find JUnit files, parse the new ones on Spark, append them as Parquet.

Layout under ``--out``: ``cases/`` is the table (partitioned by date and target) and
``manifest/`` remembers every file already looked at (path, size, mtime, SHA-1,
rejection reason), which is what makes a second build incremental and a
re-ingested file add nothing.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from urllib.parse import urlparse

from pyspark import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reports.ingest import EPOCH, ROW_FIELDS, FileIdentity, parse_document
from reports.progress import Progress
from reports.spark import hadoop_path, path_name_escaper

__all__ = [
    "CASES_SCHEMA",
    "Ingest",
    "NewRun",
    "SourceFile",
    "all_runs",
    "discover",
    "ingest",
    "read_cases",
    "read_partitions",
]

PARSED_SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("started_at", T.LongType()),  # microseconds; see reports.ingest
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
        T.StructField("status", T.StringType()),  # reports.verdicts; null in old files
        T.StructField("partial", T.BooleanType()),
        T.StructField("certification", T.StringType()),
        T.StructField("source_file", T.StringType()),
    ]
)
# The SHA-1 and rejection reason stay in Python (the accumulator carries them per
# file): two fewer strings per row to convert in the JVM.
_SENT = len(PARSED_SCHEMA.fields)
assert tuple(PARSED_SCHEMA.fieldNames()) == ROW_FIELDS[:_SENT]
# Rows cross to the JVM without per-field Python conversions.
assert not any(f.dataType.needConversion() for f in PARSED_SCHEMA.fields)

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
    "status",
    "partial",
    "certification",
    "source_file",
]
PARTITION_COLUMNS = ["date", "target"]

# Given on read so a target called "2024" is not inferred as a number.
CASES_SCHEMA = T.StructType(
    [
        T.StructField(f.name, T.TimestampType() if f.name == "started_at" else f.dataType)
        for f in PARSED_SCHEMA.fields
        if f.name in TABLE_COLUMNS
    ]
    + [T.StructField("date", T.DateType()), T.StructField("target", T.StringType())]
)

_SCENARIO = ROW_FIELDS.index("scenario")
_DAY_US = 86_400_000_000  # rows' dates travel as days since the epoch (UTC)

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
        # JSON [[testcase, reason], ...]: cases of an accepted file left out of cases/
        T.StructField("case_rejections", T.StringType()),
    ]
)
_M_FILE, _M_SHA1, _M_ROWS, _M_REASON, _M_AT, _M_CASES = 0, 3, 4, 5, 7, 8  # positions in a row
assert [MANIFEST_SCHEMA.fieldNames()[i] for i in (_M_FILE, _M_SHA1, _M_ROWS, _M_REASON, _M_AT,
                                                  _M_CASES)] \
    == ["source_file", "file_sha1", "rows", "reject_reason", "ingested_at", "case_rejections"]


@dataclass(frozen=True)
class SourceFile:
    uri: str
    size: int
    modified_ms: int
    local: bool  # listed by Python, readable by the workers' own open()


@dataclass
class NewRun:
    """A run that received rows in a build: its earliest start and its rows' dates."""

    started_us: int
    dates: set[date] = field(default_factory=set)


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
    # (file, testcase, reason): cases left out of files that were otherwise added
    rejected_cases: list[tuple[str, str, str]] = field(default_factory=list)
    runs: dict[tuple[str, str], NewRun] = field(default_factory=dict)  # runs that got rows
    earlier_rows: int = 0  # rows that earlier builds added to cases/
    # Every manifest row after this build, oldest first (MANIFEST_SCHEMA order).
    manifest: list[tuple] = field(default_factory=list)


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
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = hadoop_path(spark, arg)
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


class _FileSummaries(AccumulatorParam):
    """Per-file verdicts sent back by the parse tasks: path -> (reason or None, rows, runs,
    rejected cases).

    Merging is by key, so a retried task cannot count a file twice.
    """

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, value1: dict, value2: dict) -> dict:
        value1.update(value2)
        return value1


def _read_local(path: str) -> bytes | OSError:
    try:
        with open(path.removeprefix("file:"), "rb") as handle:
            return handle.read()
    except OSError as exc:
        return exc


def _digest_local(paths: Iterable[str]) -> Iterator[tuple[str, str | None, str | None]]:
    for path in paths:
        content = _read_local(path)
        if isinstance(content, OSError):
            yield path, None, f"unreadable: {content}"
        else:
            yield path, hashlib.sha1(content).hexdigest(), None


# Beyond this many bytes of new local files, the workers hash them in parallel.
DRIVER_HASH_BYTES = 512 * 1024 * 1024


def _file_digests(
    spark: SparkSession, batch: list[SourceFile], local: bool
) -> list[tuple[str, str | None, str | None]]:
    """(uri, SHA-1, error) of every file: a cheap first pass, before any is parsed.

    Local files up to DRIVER_HASH_BYTES are hashed right here: 0.1 s for 2,000 files
    (118 MB), where a Spark job took 1.1 to 1.4 s, most of it starting Python workers.
    """
    sc = spark.sparkContext
    slices = max(1, min(len(batch), sc.defaultParallelism * 4))
    uris = [f.uri for f in batch]
    if local and sum(f.size for f in batch) <= DRIVER_HASH_BYTES:
        return list(_digest_local(uris))
    if local:
        return sc.parallelize(uris, slices).mapPartitions(_digest_local).collect()
    contents = sc.binaryFiles(",".join(uris), minPartitions=slices)
    return contents.map(_digest_content).collect()


def _digest_content(item: tuple[str, bytes]) -> tuple[str, str | None, str | None]:
    return item[0], hashlib.sha1(item[1]).hexdigest(), None


def _summarised(
    documents: Iterator[tuple[FileIdentity, bytes | OSError]],
    summaries: Accumulator | _DriverSummaries,
) -> Iterator[tuple]:
    """Good rows only; each file's verdict goes to the accumulator instead.

    A verdict is (reason or None, rows, runs): runs maps (target, run_id) to the
    earliest start (microseconds) and the days of that run's rows in the file,
    which is how the aggregates know what a build touched without another pass.
    """
    verdicts: dict[str, tuple[str | None, int, dict, list]] = {}
    for origin, content in documents:
        if isinstance(content, OSError):
            verdicts[origin.path] = (f"unreadable: {content}", 0, {}, [])
            continue
        rows = list(parse_document(content, origin))
        refused = [r for r in rows if r[-1] is not None]
        cases = [(r[_SCENARIO], r[-1]) for r in refused if r[_SCENARIO] is not None]
        reason = next((r[-1] for r in refused if r[_SCENARIO] is None), None)
        if reason is not None:
            verdicts[origin.path] = (reason, 0, {}, cases)
            continue
        good = [r for r in rows if r[-1] is None]
        runs: dict[tuple[str, str], list] = {}
        for row in good:
            run = runs.setdefault((row[2], row[0]), [row[1], set()])
            run[0] = min(run[0], row[1])
            run[1].add(row[1] // _DAY_US)
        verdicts[origin.path] = (None, len(good), runs, cases)
        for row in good:
            yield row[:_SENT]
    summaries.add(verdicts)


class _DriverSummaries:
    """What the accumulator does, for files parsed in the driver itself."""

    def __init__(self) -> None:
        self.value: dict = {}

    def add(self, verdicts: dict) -> None:
        _FileSummaries().addInPlace(self.value, verdicts)


# Up to this many bytes of new local files, the driver parses them itself.
DRIVER_PARSE_BYTES = 16 * 1024 * 1024


def _parsed_rows(
    spark: SparkSession,
    origins: list[FileIdentity],
    local: bool,
    summaries: Accumulator | _DriverSummaries,
) -> DataFrame:
    sc = spark.sparkContext
    if isinstance(summaries, _DriverSummaries):
        # A run's JUnit file parses in milliseconds; starting the Python workers for it
        # took a second of the README's report step. The rows reach the JVM pickled,
        # unpickled there: no Python worker either way.
        rows = list(_summarised(((o, _read_local(o.path)) for o in origins), summaries))
        return spark.createDataFrame(rows, PARSED_SCHEMA, verifySchema=False)
    slices = max(1, min(len(origins), sc.defaultParallelism * 4))
    if local:
        # Workers read local files themselves: no copy of every byte through the JVM.
        rdd = sc.parallelize(origins, slices).mapPartitions(
            lambda part: _summarised(((o, _read_local(o.path)) for o in part), summaries)
        )
    else:
        by_uri = {o.path: o for o in origins}
        contents = sc.binaryFiles(",".join(by_uri), minPartitions=slices)
        rdd = contents.mapPartitions(
            lambda part: _summarised(((by_uri[uri], data) for uri, data in part), summaries)
        )
    return spark.createDataFrame(rdd, PARSED_SCHEMA, verifySchema=False)


# The manifest gets one file per build; past this many it is rewritten as one.
MANIFEST_COMPACT_AT = 8


def _manifest_files(spark: SparkSession, out: str) -> list:  # Hadoop Paths
    path = hadoop_path(spark, f"{out.rstrip('/')}/manifest")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return []
    return [
        status.getPath()
        for status in fs.listStatus(path)
        if status.getPath().getName().endswith(".parquet")
    ]


def _manifest(spark: SparkSession, out: str, files: list) -> list[tuple]:
    """The manifest's rows, each once (a compaction cut short leaves copies behind),
    oldest first."""
    if not files:
        return []
    rows = (
        spark.read.schema(MANIFEST_SCHEMA)
        .parquet(*(f.toString() for f in files))
        .collect()
    )
    return sorted(dict.fromkeys(tuple(row) for row in rows), key=lambda r: r[_M_AT])


def _write_manifest(
    spark: SparkSession, out: str, known: list[tuple], added: list[tuple], files: list
) -> None:
    """Append this build's rows; past MANIFEST_COMPACT_AT files, rewrite it as one.

    A compaction writes every row into one new file before deleting the old ones, so
    a crash in between leaves duplicate rows (dropped on read), never lost ones.
    """
    compact = len(files) + 1 > MANIFEST_COMPACT_AT
    rows = known + added if compact else added
    spark.createDataFrame(rows, MANIFEST_SCHEMA).coalesce(1).write.mode("append").parquet(
        f"{out}/manifest"
    )
    if compact:
        for old in files:
            old.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(old, False)



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
    manifest_files = _manifest_files(spark, out)
    known = _manifest(spark, out, manifest_files)
    report.manifest = list(known)
    report.earlier_rows = sum(r[_M_ROWS] or 0 for r in known)
    seen = {r[:3] for r in known}  # (source_file, size, modified_ms)
    known_sha1 = {r[_M_SHA1]: r[_M_FILE] for r in known if r[_M_ROWS] and r[_M_SHA1]}
    new = [f for f in files if (f.uri, f.size, f.modified_ms) not in seen]
    report.skipped_known = len(files) - len(new)
    progress.say(
        f"{len(files)} files found, {len(new)} new, {report.skipped_known} already ingested"
    )
    if not new:
        return report

    manifest_rows: list[tuple] = []
    now = datetime.now(UTC)
    for local in (True, False):
        batch = [f for f in new if f.local == local]
        if batch:
            manifest_rows += _ingest_batch(
                spark, batch, local, out, known_sha1, report, progress,
                (run_id, target, target_version), now,
            )
    # The manifest goes last: a crash before it only means the files are parsed again.
    _write_manifest(spark, out, known, manifest_rows, manifest_files)
    report.manifest.extend(manifest_rows)
    return report


def _ingest_batch(
    spark: SparkSession,
    batch: list[SourceFile],
    local: bool,
    out: str,
    known_sha1: dict[str, str],
    report: Ingest,
    progress: Progress,
    flags: tuple[str | None, str | None, str | None],
    now: datetime,
) -> list[tuple]:
    """Hash, then parse and append the files of one kind (local or Hadoop); manifest rows."""
    verdicts: dict[str, tuple[str | None, str | None, str | None]] = {}  # sha1, reason, note
    with progress.watch(spark.sparkContext, f"hashing {len(batch)} files"):
        digests = _file_digests(spark, batch, local)
    accepted: list[SourceFile] = []
    by_uri = {f.uri: f for f in batch}
    for uri, sha1, error in sorted(digests, key=lambda d: d[0]):
        if error is not None or sha1 is None:
            verdicts[uri] = (sha1, error or "unreadable", None)
        elif sha1 in known_sha1:
            verdicts[uri] = (sha1, None, f"same content as {known_sha1[sha1]}")
            report.duplicates += 1
        else:
            known_sha1[sha1] = uri
            accepted.append(by_uri[uri])
    in_driver = local and sum(f.size for f in accepted) <= DRIVER_PARSE_BYTES
    summaries: Accumulator | _DriverSummaries = (
        _DriverSummaries() if in_driver else spark.sparkContext.accumulator({}, _FileSummaries())
    )
    if accepted:
        run_id, target, version = flags
        origins = [_identity(f, run_id, target, version) for f in accepted]
        rows = _parsed_rows(spark, origins, local, summaries)
        with progress.watch(spark.sparkContext, f"parsing {len(accepted)} files into cases/"):
            _append_cases(rows, f"{out}/cases", one_task=in_driver)
    report.parsed += len(batch)
    parsed: dict[str, tuple[str | None, int, dict, list]] = summaries.value
    digest_of = {uri: sha1 for uri, sha1, _ in digests}
    manifest: list[tuple] = []
    for source in batch:
        _, reason, note = verdicts.get(source.uri, (None, None, None))
        sha1 = digest_of.get(source.uri)
        rows_added = 0
        cases: list = []
        if source.uri in parsed:
            reason, rows_added, runs, cases = parsed[source.uri]
            for key, (started_us, days) in runs.items():
                run = report.runs.setdefault(key, NewRun(started_us))
                run.started_us = min(run.started_us, started_us)
                run.dates |= {(EPOCH + timedelta(days=d)).date() for d in days}
        if reason is not None:
            report.rejected.append((source.uri, reason))
        elif rows_added:
            report.accepted += 1
            report.rows_added += rows_added
        report.rejected_cases += [(source.uri, name, why) for name, why in cases]
        manifest.append(
            (source.uri, source.size, source.modified_ms, sha1, rows_added, reason, note, now,
             json.dumps(cases) if cases else None)
        )
    return manifest


def _append_cases(rows: DataFrame, path: str, *, one_task: bool = False) -> None:
    table = (
        rows.withColumn("started_at", F.timestamp_micros("started_at"))
        .withColumn("date", F.to_date("started_at"))
        .select(*TABLE_COLUMNS, *PARTITION_COLUMNS)
    )
    if one_task:
        # Rows the driver parsed (at most DRIVER_PARSE_BYTES of JUnit): one task writes
        # them all, one file per partition directory, with no shuffle before it.
        table.coalesce(1).write.mode("append").partitionBy(*PARTITION_COLUMNS).parquet(path)
        return
    # One task per (date, target) so each partition directory gets one file, not one per
    # task; the writer then sorts each task's rows by partition and keeps one file open.
    # An explicit count: AQE would coalesce to 3 tasks on 2 cores, one of them alone.
    slots = rows.sparkSession.sparkContext.defaultParallelism
    table = table.repartition(2 * slots, *PARTITION_COLUMNS)
    table.write.mode("append").partitionBy(*PARTITION_COLUMNS).parquet(path)


def read_cases(spark: SparkSession, out: str) -> DataFrame:
    return spark.read.schema(CASES_SCHEMA).parquet(f"{out}/cases")


def all_runs(spark: SparkSession, out: str) -> dict[tuple[str, str], NewRun]:
    """Every run in ``cases/`` with its start and dates: one full scan."""
    found = (
        read_cases(spark, out)
        .groupBy("target", "run_id")
        .agg(
            F.unix_micros(F.min("started_at")).alias("started_us"),
            F.collect_set("date").alias("dates"),
        )
        .collect()
    )
    return {(r.target, r.run_id): NewRun(r.started_us, set(r.dates)) for r in found}


def read_partitions(spark: SparkSession, out: str, dates: dict[str, set[date]]) -> DataFrame:
    """The cases of some (target, date) partitions only, named directly.

    Reading ``cases/`` and filtering would list every partition directory first,
    seconds on a long history; an incremental build needs a handful of them.
    """
    escape = path_name_escaper(spark)
    base = f"{out.rstrip('/')}/cases"
    paths = [
        f"{base}/date={day.isoformat()}/target={escape(target)}"
        for target, days in sorted(dates.items())
        for day in sorted(days)
    ]
    if not paths:
        return spark.createDataFrame([], CASES_SCHEMA)
    return spark.read.schema(CASES_SCHEMA).option("basePath", base).parquet(*paths)


def rejected_files(done: Ingest) -> list[tuple[str, str, str]]:
    """(file, reason, testcase) for every rejected file and test case of the history
    (latest verdict per path) plus this build's; testcase is "" for a whole file."""
    latest = {row[_M_FILE]: row for row in done.manifest}  # oldest first: latest wins
    listed = {path: reason for path, reason in done.rejected}
    cases: dict[str, list] = {}
    for path, row in latest.items():
        if row[_M_REASON] is not None:
            listed.setdefault(path, row[_M_REASON])
        if len(row) > _M_CASES and row[_M_CASES]:
            cases[path] = json.loads(row[_M_CASES])
    found = [(path, reason, "") for path, reason in listed.items()]
    found += [(path, why, name) for path, pairs in cases.items() for name, why in pairs]
    return sorted(found)
