"""Start a quiet SparkSession the same way on a laptop and on a cluster."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

__all__ = [
    "JavaMissingError",
    "check_java",
    "configured_settings",
    "hadoop_path",
    "jvm_class",
    "path_name_escaper",
    "start_spark",
    "stop_spark",
]

MIN_JAVA = 17

# Spark logs every stage at INFO; keep warnings from our own failures only.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


# C1 alone (see start_spark); its code cache, 48 MB by default without the optimising
# tier, fills after four or five builds in one JVM (each build's queries are new classes)
# and the JVM then stops compiling: later builds ran interpreted, 15-90 % slower
_DRIVER_JIT = os.environ.get(
    "SHADOWCHECK_DRIVER_JIT", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"
)


class SparkSettingsError(ValueError):
    """SHADOWCHECK_SPARK_CONF does not read as ``key=value;key=value``."""


class JavaMissingError(RuntimeError):
    """Spark needs a Java runtime; raised before Spark fails in a less readable way."""


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def check_java() -> int:
    """The major version of the Java that Spark will use; JavaMissingError if unusable."""
    java = _java_binary()
    if java is None:
        raise JavaMissingError(
            f"Java {MIN_JAVA} or later is required by Spark and was not found "
            "(set JAVA_HOME or put java on PATH; Debian: apt-get install openjdk-17-jre-headless)"
        )
    try:
        probe = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        raise JavaMissingError(f"cannot run {java}: {exc}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', probe.stderr + probe.stdout)
    if match is None:
        raise JavaMissingError(f"cannot tell the Java version of {java}: {probe.stderr.strip()}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise JavaMissingError(f"Spark needs Java {MIN_JAVA}+, found Java {major} at {java}")
    return major


def _log_config() -> str:
    path = Path(tempfile.gettempdir()) / "shadowcheck-reports-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return str(path)


def _class_archive() -> Path:
    """Where the driver JVM's class-data archive for this Java and Spark is kept."""
    import pyspark

    java = _java_binary() or "java"
    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    key = "\n".join([str(Path(java).resolve()), pyspark.__version__, _DRIVER_JIT, *jars])
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"shadowcheck-spark-{digest}.jsa"


# Set by start_spark(record_classes=True) when the archive is to be written at exit.
_recording: Path | None = None


def _archive_options(record: bool) -> str:
    """JVM options that load Spark's classes from a class-data archive (AppCDS).

    A fresh driver JVM spends seconds parsing and verifying the same ~10,000 classes
    from Spark's jars; mapped from an archive, an incremental build started in 6 s
    instead of 12 to 17 (load 10 to 12). The archive is written at the exit of a
    recording JVM (see stop_spark) and kept per Java and Spark version.
    """
    global _recording
    archive = _class_archive()
    quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a stale archive is just not used
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive} {quiet}"
    if not record or SparkContext._gateway is not None:  # a JVM is up already
        return ""
    for stale in archive.parent.glob("shadowcheck-spark-*.jsa.*.tmp"):
        _drop_if_orphaned(stale)
    _recording = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    return f"-XX:ArchiveClassesAtExit={_recording} {quiet}"


def _drop_if_orphaned(partial: Path) -> None:
    """Delete an archive being recorded by a process that no longer runs."""
    try:
        os.kill(int(partial.name.split(".")[-2]), 0)
    except (ValueError, ProcessLookupError):
        partial.unlink(missing_ok=True)
    except OSError:
        pass  # alive, another user's


def stop_spark(spark: SparkSession) -> None:
    """Stop the session; a recording JVM is then waited for and its archive kept."""
    global _recording
    context = spark.sparkContext
    gateway = context._gateway
    # PySpark's stop waits for its accumulator server, whose handler polls the JVM's
    # connection once a second: 0.93 s of an 11 s build, doing nothing. Told to stop, it
    # ends at its next poll in a thread of its own (a daemon: an exiting process does not
    # wait for it; a long-lived one sees it closed within the second).
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        context._accumulatorServer = None  # type: ignore[assignment]  # (as PySpark does)
        threading.Thread(target=server.shutdown, name="accumulators-stop", daemon=True).start()
    spark.stop()
    recorded, _recording = _recording, None
    process = getattr(gateway, "proc", None)
    if recorded is None or process is None or process.stdin is None:
        return
    process.stdin.close()  # the gateway JVM exits at end of input, writing the archive
    try:
        exited = process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        exited = None
    _keep_archive(recorded, exited == 0)


def _keep_archive(recorded: Path, clean_exit: bool) -> None:
    # A truncated archive crashes the JVM that maps it: keep only a complete one,
    # checked by a JVM that maps it, and publish it with an atomic rename.
    crash_log = recorded.with_name(f"{recorded.name}.crash.log")  # not hs_err_pid* in cwd
    try:
        if clean_exit and recorded.exists():
            probe = subprocess.run(
                [_java_binary() or "java", f"-XX:SharedArchiveFile={recorded}",
                 f"-XX:ErrorFile={crash_log}", "-XX:-CreateCoredumpOnCrash", "-version"],
                capture_output=True, timeout=60, check=False, cwd=recorded.parent,
            )
            if probe.returncode == 0:
                recorded.replace(recorded.with_name(recorded.name.split(".jsa.")[0] + ".jsa"))
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        recorded.unlink(missing_ok=True)
        crash_log.unlink(missing_ok=True)


def start_spark(
    master: str | None = None,
    app_name: str = "shadowcheck-reports",
    *,
    record_classes: bool = False,
) -> SparkSession:
    """A SparkSession for ``master`` (default ``local[*]``), started without log spam.

    An already running session is reused (tests share one per process). With
    ``record_classes`` (the CLI), a driver JVM that finds no class-data archive
    writes one when stop_spark ends it.
    """
    check_java()
    extra = _extra_settings()
    # Workers must run the interpreter that has this project installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log_option = f"-Dlog4j2.configurationFile=file:{_log_config()}"
    driver_options = f"{log_option} {_DRIVER_JIT} {_archive_options(record_classes)}".strip()
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master or "local[*]")
        # A build is one short job: the JIT's optimising tier costs more CPU than it
        # saves before the JVM exits (start-up alone: 8.8 s of CPU instead of 14.7).
        .config("spark.driver.extraJavaOptions", driver_options)
        .config("spark.executor.extraJavaOptions", log_option)
        .config("spark.driver.memory", os.environ.get("SHADOWCHECK_DRIVER_MEMORY", "4g"))
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.ui.enabled", "false")
        # PySpark's DataFrame debugging wraps every column function in four py4j calls
        # (the call site sent to the JVM and cleared again) and a first attempt to import
        # IPython: a fifth of a build's driver calls, for call sites in error messages
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        # Small shuffles: a handful of partitions per core, AQE coalesces the rest.
        .config("spark.sql.shuffle.partitions", os.environ.get("SHADOWCHECK_SHUFFLE", "8"))
        .config("spark.sql.adaptive.enabled", "true")
        # A build names a few hundred partition directories; listing them in the driver
        # takes milliseconds, a Spark job to list them ~1 s.
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "4096")
        # Cached inputs of the aggregates are read a few times each, right away:
        # compressing them cost more (2.5 s of 3.3 on a million cases) than it saved.
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        # collect_list per scenario/day: stay hash-based up to 100k groups per task
        # (the default 128 falls back to sorting, 3x slower on a million cases).
        .config("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", "100000")
    )
    for key, value in extra.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _import_short_names(spark)
    _ship_package(spark)
    return spark


# Classes PySpark looks up by their short names on every column expression. py4j tries
# a short name in each package the gateway imports, and every miss is a search through
# all of Spark's ~250 jars: 7 % of a build's JVM samples went to failing to find
# "java.lang.functions" and the like. Named imports are tried before package ones.
_SHORT_NAMES = ("org.apache.spark.sql.functions", "org.apache.spark.api.python.PythonUtils")


def _import_short_names(spark: SparkSession) -> None:
    from py4j.java_gateway import java_import

    jvm = spark.sparkContext._jvm
    assert jvm is not None
    for name in _SHORT_NAMES:
        java_import(jvm, name)


def jvm_class(spark: SparkSession, name: str) -> Any:
    """The JVM class ``name`` (fully qualified) in one py4j call: ``jvm.org.apache...``
    resolves one package at a time, each step a failed class lookup in every jar."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return getattr(jvm, name)


def hadoop_path(spark: SparkSession, where: str) -> Any:
    """A Hadoop ``Path`` for ``where``."""
    return jvm_class(spark, "org.apache.hadoop.fs.Path")(where)


def path_name_escaper(spark: SparkSession) -> Callable[[str], str]:
    """Spells a partition value as Spark does in a directory name (the JVM method looked
    up once, for callers escaping many values)."""
    utils = jvm_class(spark, "org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils")
    escape = utils.escapePathName
    return lambda value: str(escape(value))


def configured_settings() -> dict[str, str]:
    """The settings SHADOWCHECK_SPARK_CONF gives (a build leaves these alone)."""
    try:
        return _extra_settings()
    except SparkSettingsError:
        return {}


def _extra_settings() -> dict[str, str]:
    """``SHADOWCHECK_SPARK_CONF="key=value;key=value"``: settings over the ones above
    (a cluster's executor memory, an experiment with another shuffle width)."""
    text = os.environ.get("SHADOWCHECK_SPARK_CONF", "")
    settings = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SparkSettingsError(
                f"SHADOWCHECK_SPARK_CONF: {item!r} is not key=value "
                "(e.g. spark.sql.shuffle.partitions=2;spark.driver.memory=8g)"
            )
        settings[key.strip()] = value.strip()
    return settings


def _ship_package(spark: SparkSession) -> None:
    """Send this very ``reports`` package to the executors.

    Workers unpickle the parse functions by module name; on a cluster they may have
    no copy of the project, or an older one. A zip of the driver's package, added
    to their path, makes them run the same code (they still need junitparser).
    """
    package = Path(__file__).parent
    # The verdict vocabulary too (reports.verdicts imports it); only that module of
    # the plugin, so the workers need no pytest.
    plugin = package.parent / "pytest_shadowcheck"
    sources = [(p, f"reports/{p.name}") for p in sorted(package.glob("*.py"))] + [
        (plugin / name, f"pytest_shadowcheck/{name}")
        for name in ("__init__.py", "version.py", "statuses.py")
    ]
    digest = hashlib.sha1(b"".join(p.read_bytes() for p, _ in sources)).hexdigest()[:12]
    archive = Path(tempfile.gettempdir()) / f"shadowcheck-reports-{digest}.zip"
    if not archive.exists():
        partial = archive.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w") as bundle:
            for source, name in sources:
                bundle.write(source, name)
        partial.replace(archive)
    before = list(sys.path)
    spark.sparkContext.addPyFile(str(archive))
    # addPyFile also puts the zip first on this process's own path, where its partial
    # pytest_shadowcheck would hide the installed one from every process started from
    # here later (a multiprocessing forkserver child found no pytest_shadowcheck.version).
    # This process has the package already; the zip is for the executors.
    sys.path[:] = [entry for entry in sys.path if entry in before]
