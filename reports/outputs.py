"""Write the small result files (CSV, HTML) next to the table, on any filesystem."""

from __future__ import annotations

import csv
import io
import os
import uuid
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession

from reports.spark import hadoop_path

__all__ = ["csv_text", "write_csv_frame", "write_text"]


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    return "" if value is None else value


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_cell(v) for v in row])
    return buffer.getvalue()


def local_dir(out: str) -> str | None:
    """The local directory behind ``out``, or None for a remote filesystem."""
    parsed = urlparse(out)
    if len(parsed.scheme) <= 1:
        return out
    if parsed.scheme == "file":
        return parsed.path
    return None


def write_text(spark: SparkSession, out: str, name: str, text: str) -> str:
    """Write ``out/name``; local directories directly, other URIs through Hadoop."""
    directory = local_dir(out)
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    target = hadoop_path(spark, f"{out.rstrip('/')}/{name}")
    stream = target.getFileSystem(conf).create(target, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
    return str(target.toString())


def write_csv_frame(
    spark: SparkSession, frame: DataFrame, out: str, name: str, columns: Sequence[str]
) -> str:
    """Write ``out/name`` from a Spark frame, by Spark's CSV writer, in the frame's order.

    For outputs that grow with the history (durations.csv: one row per scenario and
    day, 1.25 million at 10,000,000 test cases): collecting them into Python cost
    more than everything else an incremental build does.
    """
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    base = out.rstrip("/")
    staging = f"{base}/.{name}.{uuid.uuid4().hex[:8]}"
    # coalesce(1) after the frame's sort keeps its order (partitions in sequence).
    frame.select(*columns).coalesce(1).write.option("header", True).csv(staging)
    path = hadoop_path(spark, staging)
    fs = path.getFileSystem(conf)
    parts = [s.getPath() for s in fs.listStatus(path) if s.getPath().getName().startswith("part-")]
    target = hadoop_path(spark, f"{base}/{name}")
    if parts and fs.getFileStatus(parts[0]).getLen() > 0:
        fs.delete(target, False)
        if not fs.rename(parts[0], target):
            raise OSError(f"cannot move {parts[0].toString()} to {target.toString()}")
        written = str(target.toString())
    else:  # no row: Spark may write no header
        written = write_text(spark, out, name, csv_text(columns, []))
    fs.delete(path, True)
    return written.removeprefix("file:")
