"""Command line: ``python -m reports build PATH... --out DIR``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="shadowcheck-reports",
        description="Aggregate shadowcheck JUnit XML results on Apache Spark.",
    )
    commands = top.add_subparsers(dest="command", required=True)
    build = commands.add_parser(
        "build",
        help="ingest JUnit files into OUT/cases and write the metrics and dashboard",
        description="Paths may be files, directories (searched for *.xml), globs or any "
        "Hadoop filesystem URI (hdfs://, s3a://, file://).",
    )
    build.add_argument("paths", nargs="+", metavar="PATH")
    build.add_argument("--out", required=True, metavar="DIR", help="output directory or URI")
    build.add_argument(
        "--master", default=None, help="Spark master URL (default local[*]; spark://host:port)"
    )
    build.add_argument("--target", help="target name when the files do not carry one")
    build.add_argument("--target-version", help="target version when the files do not carry one")
    build.add_argument("--run-id", help="run id when the files do not carry one")
    build.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # Imported late so --help works without Java or Spark.
    from reports.build import build
    from reports.progress import Progress
    from reports.spark import JavaMissingError, SparkSettingsError, start_spark, stop_spark

    progress = Progress(enabled=not args.quiet)
    try:
        progress.say(f"starting Spark ({args.master or 'local[*]'})")
        spark = start_spark(args.master, record_classes=True)
    except JavaMissingError as exc:
        print(f"shadowcheck-reports: {exc}", file=sys.stderr)
        return 3
    except SparkSettingsError as exc:
        print(f"shadowcheck-reports: {exc}", file=sys.stderr)
        return 2
    try:
        result = build(
            spark,
            args.paths,
            args.out,
            run_id=args.run_id,
            target=args.target,
            target_version=args.target_version,
            progress=progress,
        )
    finally:
        stop_spark(spark)
    done = result.ingest
    # Every file is accounted for: already ingested, added, rejected or a duplicate
    # (an input that names nothing counts among the rejected).
    print(
        f"{done.found} files ({done.skipped_known} already ingested, {done.accepted} added, "
        f"{len(done.rejected)} rejected, {done.duplicates} duplicate); "
        f"{len(done.rejected_cases)} test cases rejected; table: {result.runs} runs, "
        f"{result.rows} scenario results; outputs in {args.out}"
    )
    return 0
