"""Where the tables of ``aggregates/`` live, and how a build replaces them crash-safely.

Two kinds of table:

* whole tables (``runs``, ``names``, ...): small, rewritten whole each build;
* partitioned tables (``behaviour_runs``, ``durations``): one directory per
  ``target=T/month=YYYY-MM``; a build rewrites only the partitions its runs touch,
  so its cost does not grow with the history's length.

Every build stages what it writes beside the tables (``NAME.next-TAG``), then
writes the marker ``_swapping-TAG`` (its content says which partitioned tables
are swapped per partition, and which targets are replaced whole), then moves
the staged directories in place, the old ones aside (``NAME.old-TAG``), and
deletes the old ones and the marker last. A build that dies before the marker
leaves staged directories the next build deletes; one that dies after it is
rolled forward by the next build: every step of the swap can be done again.
"""

from __future__ import annotations

import json
from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from reports.spark import hadoop_path, jvm_class, path_name_escaper

__all__ = [
    "PARTITIONED",
    "PARTITION_COLUMNS",
    "escape",
    "exists",
    "finish_swap",
    "is_partitioned",
    "month_of",
    "path",
    "read",
    "read_months",
    "recover",
    "start_swap",
]

PARTITION_COLUMNS = ["target", "month"]
_LONG, _STRING = T.LongType(), T.StringType()


def _fields(*pairs: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(name, kind) for name, kind in pairs])


# Explicit schemas: inferring partition values would read a target named "1.0" as a number.
PARTITIONED: dict[str, T.StructType] = {
    "behaviour_runs": _fields(
        ("target_version", _STRING), ("run_id", _STRING), ("behaviour", _STRING),
        ("passed", _LONG), ("failed", _LONG), ("errors", _LONG), ("skipped", _LONG),
        ("outside", _LONG), ("rank", T.ByteType()), ("partial", T.BooleanType()),
        ("target", _STRING), ("month", _STRING),
    ),
    "durations": _fields(
        ("sid", _LONG), ("date", T.DateType()), ("runs", _LONG),
        ("p50_s", T.DoubleType()), ("p95_s", T.DoubleType()),
        ("target", _STRING), ("month", _STRING),
    ),
}
_SWAP_MARK = "_swapping-"


def month_of(day: date) -> str:
    return day.strftime("%Y-%m")


def path(out: str, name: str) -> str:
    return f"{out.rstrip('/')}/aggregates/{name}"


def _hadoop_fs(spark: SparkSession, where: str):  # type: ignore[no-untyped-def]
    hpath = hadoop_path(spark, where)
    return hpath, hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def exists(spark: SparkSession, where: str) -> bool:
    hpath, fs = _hadoop_fs(spark, where)
    return bool(fs.exists(hpath))


def escape(spark: SparkSession, value: str) -> str:
    """A partition value as Spark spells it in a directory name."""
    return path_name_escaper(spark)(value)


def is_partitioned(spark: SparkSession, out: str, name: str) -> bool:
    """True when NAME is in this version's layout (an older one wrote its files at the top)."""
    folder, fs = _hadoop_fs(spark, path(out, name))
    if not fs.exists(folder):
        return False
    return not any(s.getPath().getName().startswith("part-") for s in fs.listStatus(folder))


def read(
    spark: SparkSession, out: str, name: str, schema: T.StructType | None = None
) -> DataFrame | None:
    where = path(out, name)
    if not exists(spark, where):
        return None
    # A known schema spares the job that reads it from a Parquet footer.
    reader = spark.read if schema is None else spark.read.schema(schema)
    return reader.parquet(where)


def read_months(
    spark: SparkSession, out: str, name: str, months: dict[str, set[str]]
) -> DataFrame:
    """Some partitions of a partitioned table, named directly (listing every partition
    of a long history costs what a build should not); the missing ones are skipped."""
    base = path(out, name)
    _, fs = _hadoop_fs(spark, base)
    paths = []
    for target, chosen in sorted(months.items()):
        target_dir = f"{base}/target={escape(spark, target)}"
        hpath, _ = _hadoop_fs(spark, target_dir)
        if not fs.exists(hpath):
            continue
        present = {s.getPath().getName() for s in fs.listStatus(hpath)}
        paths += [f"{target_dir}/month={m}" for m in sorted(chosen) if f"month={m}" in present]
    schema = PARTITIONED[name]
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", base).parquet(*paths)


def _write_marker(spark: SparkSession, out: str, tag: str, plan: dict) -> None:
    marker, fs = _hadoop_fs(spark, path(out, f"{_SWAP_MARK}{tag}"))
    stream = fs.create(marker, False)
    try:
        stream.write(bytearray(json.dumps(plan).encode("utf-8")))
    finally:
        stream.close()


def _read_marker(spark: SparkSession, out: str, tag: str) -> dict:
    marker, fs = _hadoop_fs(spark, path(out, f"{_SWAP_MARK}{tag}"))
    stream = fs.open(marker)
    try:
        text = str(jvm_class(spark, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8"))
    finally:
        stream.close()
    # An empty marker (an older version's) swaps every table whole.
    return json.loads(text) if text.strip() else {}


def start_swap(spark: SparkSession, out: str, tag: str, partitioned: dict[str, list]) -> None:
    """Every staged table is complete: write the marker, then swap.

    ``partitioned``: the tables swapped partition by partition (the others whole),
    each with the directory names (``target=…``) of the targets it replaces whole.
    """
    _write_marker(spark, out, tag, {"partitioned": partitioned})
    finish_swap(spark, out, tag)


def _retire(spark: SparkSession, final: str, retired: str) -> None:
    dst, fs = _hadoop_fs(spark, final)
    if fs.exists(dst):
        old, _ = _hadoop_fs(spark, retired)
        fs.mkdirs(old.getParent())
        if not fs.rename(dst, old):
            raise OSError(f"cannot move {final} to {retired}")


def _move(spark: SparkSession, source: str, final: str, retired: str) -> None:
    """``final`` aside to ``retired`` (if there), then ``source`` to ``final``."""
    _retire(spark, final, retired)
    src, fs = _hadoop_fs(spark, source)
    dst, _ = _hadoop_fs(spark, final)
    fs.mkdirs(dst.getParent())
    if not fs.rename(src, dst):
        raise OSError(f"cannot move {source} to {final}")


def _dirs(spark: SparkSession, where: str, prefix: str) -> list[str]:
    hpath, fs = _hadoop_fs(spark, where)
    if not fs.exists(hpath):
        return []
    return sorted(
        s.getPath().getName() for s in fs.listStatus(hpath)
        if s.isDirectory() and s.getPath().getName().startswith(prefix)
    )


def _swap_partitions(spark: SparkSession, out: str, name: str, tag: str, whole: list) -> None:
    final = path(out, name)
    staged, retired = f"{final}.next-{tag}", f"{final}.old-{tag}"
    for target in whole:  # rebuilt targets: every old partition goes, staged or not
        if exists(spark, f"{staged}/{target}"):
            _move(spark, f"{staged}/{target}", f"{final}/{target}", f"{retired}/{target}")
        elif not exists(spark, f"{retired}/{target}"):  # else moved in before a crash
            _retire(spark, f"{final}/{target}", f"{retired}/{target}")  # no row left
    for target in _dirs(spark, staged, "target="):
        for month in _dirs(spark, f"{staged}/{target}", "month="):
            part = f"{target}/{month}"
            _move(spark, f"{staged}/{part}", f"{final}/{part}", f"{retired}/{part}")


def finish_swap(spark: SparkSession, out: str, tag: str) -> None:
    """Move what ``NAME.next-TAG`` holds in place, then drop the old copies and the marker."""
    plan = _read_marker(spark, out, tag)
    partitioned: dict[str, list] = plan.get("partitioned", {})
    folder, fs = _hadoop_fs(spark, path(out, ""))
    names = {s.getPath().getName().split(".next-")[0] for s in fs.listStatus(folder)
             if s.getPath().getName().endswith(f".next-{tag}")}
    for name in sorted(names | set(partitioned)):
        if name in partitioned:
            _swap_partitions(spark, out, name, tag, partitioned[name])
            continue
        final, staged = path(out, name), f"{path(out, name)}.next-{tag}"
        if exists(spark, staged):  # not moved before a crash
            _move(spark, staged, final, f"{final}.old-{tag}")
    for status in fs.listStatus(folder):
        if status.getPath().getName().endswith((f".old-{tag}", f".next-{tag}")):
            fs.delete(status.getPath(), True)
    marker, _ = _hadoop_fs(spark, path(out, f"{_SWAP_MARK}{tag}"))
    fs.delete(marker, False)


def recover(spark: SparkSession, out: str) -> None:
    """Finish a swap a crash cut short; drop tables staged by a build that never swapped."""
    folder, fs = _hadoop_fs(spark, path(out, ""))
    if not fs.exists(folder):
        return
    names = [status.getPath().getName() for status in fs.listStatus(folder)]
    for name in names:
        if name.startswith(_SWAP_MARK):
            finish_swap(spark, out, name.removeprefix(_SWAP_MARK))
    for status in fs.listStatus(folder):
        if ".next-" in status.getPath().getName() or ".old-" in status.getPath().getName():
            fs.delete(status.getPath(), True)
