"""Write the small result files (CSV, HTML) next to the table, on any filesystem."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import SparkSession

__all__ = ["csv_text", "write_text"]


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
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    target = jvm.org.apache.hadoop.fs.Path(f"{out.rstrip('/')}/{name}")
    stream = target.getFileSystem(conf).create(target, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
    return str(target.toString())
