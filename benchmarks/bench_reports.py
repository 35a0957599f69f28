"""Benchmark: ``reports build`` on Spark against a single-process Python baseline.

    python3 benchmarks/bench_reports.py --files 2000 --cases 500
    python3 benchmarks/bench_reports.py --files 20000 --cases 500 --skip-warm   # 10,000,000
    python3 benchmarks/bench_reports.py --targets 50 --files 10000 --cases 500 \
        --skip-warm --dashboard --screenshot /tmp/dashboard-50x200.png      # 50 x 200 runs

Generates N JUnit files x M test cases (kept under --data between runs), then times
in one run:

* baseline   - one Python process: stdlib ElementTree parse + dict aggregation
               (pass counts per target x version x behaviour, outcome flips in run
               order, sorted durations per scenario);
* cold build - ``python -m reports build`` in a fresh process, JVM start-up,
               Parquet and dashboard included;
* increment  - the same command after one new run of M cases was added (--increments
               times, one more run each time);
* warm build - ``build()`` into a fresh --out inside an already started Spark;
* warm pass  - in the same Spark, the baseline's questions and nothing more (no
               Parquet, no aggregates, no outputs), to show what persistence costs;
* dashboard  - (--dashboard) the size of dashboard.html and the time a headless
               Chromium takes to load and draw it.

and prints each figure, the cold build's cost per test case and the Spark/baseline
ratios. ``--targets N`` spreads the runs over N targets (t00, t01, ...) instead of
the three default ones: ``--targets 50 --files 10000`` is 50 targets x 200 runs.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BEHAVIOURS = (
    [f"CR-{i}" for i in range(1, 11)]
    + [f"DI-{i}" for i in range(1, 8)]
    + [f"PR-{i}" for i in range(1, 7)]
    + [f"SN-{i}" for i in range(1, 13)]
    + [f"XS-{i}" for i in range(1, 7)]
    + [f"TO-{i}" for i in range(1, 5)]
)
TARGETS = [("reference", ["0.1.0", "0.2.0"]), ("postfix", ["3.8"]), ("exim", ["4.97", "4.98"])]
# Early enough that 20,000 hourly runs end in the past (a run in the future is rejected).
START = datetime(2023, 1, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # measure this checkout, whatever is installed


def _targets(count: int | None) -> list[tuple[str, list[str]]]:
    if not count:
        return TARGETS
    return [(f"t{i:02d}", ["1.0", "1.1"]) for i in range(count)]


def _document(
    run: int, cases: int, rng: random.Random, targets: list[tuple[str, list[str]]] = TARGETS
) -> str:
    target, versions = targets[run % len(targets)]
    version = versions[(run // len(targets)) % len(versions)]
    started = START + timedelta(hours=run)
    out = [
        '<?xml version="1.0" encoding="utf-8"?><testsuites>'
        f'<testsuite name="pytest" errors="0" failures="0" skipped="0" tests="{cases}" '
        f'time="1.0" timestamp="{started.isoformat()}" hostname="bench"><properties>'
        f'<property name="shadowcheck.run_id" value="run-{run:06d}"/>'
        f'<property name="shadowcheck.target" value="{target}"/>'
        f'<property name="shadowcheck.target_version" value="{version}"/>'
        '<property name="shadowcheck.harness_version" value="0.1.0"/></properties>'
    ]
    for index in range(cases):
        behaviour = BEHAVIOURS[index % len(BEHAVIOURS)]
        roll = rng.random()
        body = ""
        if roll < 0.03:
            body = '<failure message="message lost">AssertionError</failure>'
        elif roll < 0.035:
            body = '<error message="setup failed">TimeoutError</error>'
        elif roll < 0.06:
            body = '<skipped type="pytest.skip" message="UNTESTABLE"/>'
        out.append(
            f'<testcase classname="scenarios.test_s{index % 25}" '
            f'name="test_case_{index}[{behaviour}]" time="{rng.uniform(0.01, 3):.3f}">'
            f"{body}</testcase>"
        )
    out.append("</testsuite></testsuites>")
    return "".join(out)


def generate(
    directory: Path, files: int, cases: int, first_run: int = 0, targets: int | None = None
) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(first_run * 7919 + cases)
    written = []
    for run in range(first_run, first_run + files):
        path = directory / f"run-{run:06d}.xml"
        if not path.exists():
            path.write_text(_document(run, cases, rng, _targets(targets)))
        written.append(path)
    return written


def baseline(paths: list[Path]) -> dict[str, int]:
    """The same questions answered by one Python process with the standard library."""
    pass_counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
    history: dict[tuple, list[tuple[str, str, bool]]] = defaultdict(list)
    durations: dict[tuple, list[float]] = defaultdict(list)
    for path in paths:
        root = ET.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        for suite in suites:
            props = {p.get("name"): p.get("value") for p in suite.iter("property")}
            run, target = props["shadowcheck.run_id"], props["shadowcheck.target"]
            version, started = props["shadowcheck.target_version"], suite.get("timestamp") or ""
            for case in suite.iter("testcase"):
                name = case.get("name") or ""
                outcome = "passed"
                for tag in ("error", "failure", "skipped"):
                    if case.find(tag) is not None:
                        outcome = tag
                        break
                behaviour = name[name.find("[") + 1 : -1]
                counts = pass_counts[(target, version, behaviour)]
                counts[0 if outcome == "passed" else 1 if outcome != "skipped" else 2] += 1
                if outcome != "skipped":
                    history[(target, version, name)].append((started, run, outcome == "passed"))
                durations[(target, name)].append(float(case.get("time") or 0))
    flips = 0
    for runs in history.values():
        runs.sort()
        flips += sum(1 for a, b in itertools.pairwise(runs) if a[2] != b[2])
    for values in durations.values():
        values.sort()
    return {"matrix_cells": len(pass_counts), "flips": flips, "scenarios": len(durations)}


def _load() -> str:
    """The machine's load: figures on a shared machine mean little without it."""
    one, five, _ = os.getloadavg()
    return f"[load {one:.1f} / {five:.1f}]"


def _run_build(paths: list[Path], out: Path, master: str) -> float:
    command = [sys.executable, "-m", "reports", "build", *map(str, paths), "--out", str(out),
               "--master", master, "--quiet"]
    began = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    return time.perf_counter() - began


def _class_archive() -> Path:
    from reports.spark import _class_archive as archive

    return archive()


def _warm_build(data: Path, out: Path, master: str) -> tuple[float, float, float, dict]:
    """Start-up, a warm build, then a warm pass (see ``_spark_pass``) in the same session."""
    from reports.build import build
    from reports.spark import start_spark

    began = time.perf_counter()
    spark = start_spark(master)
    spark.range(1).count()  # JVM and Python workers up
    started = time.perf_counter() - began
    began = time.perf_counter()
    build(spark, [str(data)], str(out))
    elapsed = time.perf_counter() - began
    began = time.perf_counter()
    answers = _spark_pass(spark, data)
    passed = time.perf_counter() - began
    spark.stop()
    return started, elapsed, passed, answers


def _build_parser_rows(spark: Any, history: Path) -> Any:
    """The rows the build's own parser makes of every file (junitparser in the Python
    workers); lazy: the caller's action does the parsing."""
    from reports.table import _FileSummaries, _identity, _parsed_rows, discover

    files, _ = discover(spark, [str(history)])
    origins = [_identity(f, None, None, None) for f in files]
    summaries = spark.sparkContext.accumulator({}, _FileSummaries())
    return _parsed_rows(spark, origins, True, summaries)


def _spark_pass(spark: Any, history: Path) -> dict[str, int]:
    """The baseline's questions answered on Spark, nothing persisted.

    The build's own parser (junitparser in the Python workers) feeds three
    aggregations that mirror ``baseline``: pass counts per target x version x
    behaviour, outcome flips per target x version x scenario in run order, sorted
    durations per target x scenario. No Parquet, no aggregates/, no CSVs: what is
    left of a build when the table and the incremental state it keeps are taken
    away, so that the two ratios show where a build's time goes.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cases = (
        _build_parser_rows(spark, history)
        .select("run_id", "started_at", "target", "target_version", "scenario",
                "behaviour", "outcome", "duration_s")
        .cache()
    )
    try:
        cells = cases.groupBy("target", "target_version", "behaviour").agg(
            F.count(F.when(F.col("outcome") == "passed", 1)).alias("passed"),
            F.count(F.when(F.col("outcome").isin("failed", "error"), 1)).alias("failed"),
            F.count(F.when(F.col("outcome") == "skipped", 1)).alias("skipped"),
        )
        ok = (F.col("outcome") == "passed").cast("int")
        order = Window.partitionBy("target", "target_version", "scenario").orderBy(
            "started_at", "run_id", ok
        )
        flips = (
            cases.where(F.col("outcome") != "skipped")
            .select(ok.alias("ok"), F.lag(ok).over(order).alias("before"))
            .where(F.col("ok") != F.col("before"))
        )
        scenarios = cases.groupBy("target", "scenario").agg(
            F.array_sort(F.collect_list("duration_s")).alias("sorted")
        )
        return {
            "matrix_cells": len(cells.collect()),
            "flips": flips.count(),
            "scenarios": len(scenarios.collect()),
        }
    finally:
        cases.unpersist()


def measure_dashboard(page: Path, screenshot: Path | None) -> None:
    """Size of the page, and a headless Chromium's time to load and draw it (median of 3)."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,2400"):
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options,
        service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")),
    )
    try:
        times = []
        for _ in range(3):
            driver.get("about:blank")
            began = time.perf_counter()
            driver.get(page.as_uri())  # returns after the load event: every script ran
            drawn = driver.execute_script("return window.shadowcheckRendered")
            times.append(time.perf_counter() - began)
            assert drawn is not None, "the page's script did not finish"
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        cells = driver.execute_script("return document.querySelectorAll('#matrix td.cell').length")
        if screenshot is not None:
            driver.find_element("css selector", "#matrix td.cell").click()
            driver.save_screenshot(str(screenshot))
    finally:
        driver.quit()
    size = page.stat().st_size
    each = ", ".join(f"{t:.2f}" for t in times)
    print(f"dashboard.html: {size / 1e6:.2f} MB (target <= 5 MB); {cells} matrix cells; "
          f"headless Chromium load + draw {sorted(times)[1]:.2f}s (runs {each}; "
          f"target <= 3 s); console errors: {len(severe)}  {_load()}")
    if screenshot is not None:
        print(f"screenshot (a cell clicked): {screenshot}")


def compare_parsers(history: Path, master: str) -> None:
    """Parse-only passes over the same files: junitparser in Python workers vs Spark's XML reader.

    The XML reader gets an explicit schema (inference would cost a whole extra pass) and
    reads test cases only; it would need a second pass for the suite properties.
    """
    from pyspark.sql import types as T

    from reports.spark import start_spark

    spark = start_spark(master)
    spark.range(1).count()
    timings = {}
    for attempt in range(2):  # the first pass also warms the JVM up
        rows = _build_parser_rows(spark, history)
        began = time.perf_counter()
        rows.write.format("noop").mode("overwrite").save()
        timings[f"junitparser in workers (pass {attempt + 1})"] = time.perf_counter() - began
        result = T.StructType([T.StructField("_message", T.StringType()),
                               T.StructField("_VALUE", T.StringType())])
        schema = T.StructType(
            [T.StructField(n, T.StringType()) for n in ("_name", "_classname", "_time")]
            + [T.StructField(n, result) for n in ("failure", "error", "skipped")]
        )
        began = time.perf_counter()
        (spark.read.format("xml").option("rowTag", "testcase").schema(schema)
         .load(str(history)).write.format("noop").mode("overwrite").save())
        timings[f"Spark XML reader, test cases (pass {attempt + 1})"] = (
            time.perf_counter() - began
        )
        # ...and the second pass it would need for suite properties and timestamps.
        prop = T.StructType([T.StructField("_name", T.StringType()),
                             T.StructField("_value", T.StringType())])
        suite = T.StructType([
            T.StructField("_timestamp", T.StringType()),
            T.StructField("properties", T.StructType(
                [T.StructField("property", T.ArrayType(prop))])),
        ])
        began = time.perf_counter()
        (spark.read.format("xml").option("rowTag", "testsuite").schema(suite)
         .load(str(history)).write.format("noop").mode("overwrite").save())
        timings[f"Spark XML reader, suite properties (pass {attempt + 1})"] = (
            time.perf_counter() - began
        )
    for label, seconds in timings.items():
        print(f"parse only, {label}: {seconds:6.1f}s")
    spark.stop()


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    options.add_argument("--files", type=int, default=2000)
    options.add_argument("--cases", type=int, default=500)
    options.add_argument("--master", default="local[2]")
    options.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "bench-junit")
    options.add_argument("--skip-warm", action="store_true")
    options.add_argument("--increments", type=int, default=1,
                         help="how many times to add one new run (each timed)")
    options.add_argument("--fresh-class-archive", action="store_true",
                         help="delete the driver's class-data archive first (a first build)")
    options.add_argument("--compare-parsers", action="store_true",
                         help="only time junitparser against Spark's XML reader")
    options.add_argument("--targets", type=int, default=None,
                         help="spread the runs over this many targets (default: 3)")
    options.add_argument("--skip-baseline", action="store_true")
    options.add_argument("--dashboard", action="store_true",
                         help="measure dashboard.html: size, Chromium load and draw time")
    options.add_argument("--screenshot", type=Path, default=None)
    args = options.parse_args()

    shape = f"{args.files}x{args.cases}" + (f"-t{args.targets}" if args.targets else "")
    data = args.data / shape
    history = data / "history"
    began = time.perf_counter()
    paths = generate(history, args.files, args.cases, targets=args.targets)
    total = args.files * args.cases
    print(f"data: {args.files} files x {args.cases} cases = {total:,} test cases in {data} "
          f"(generated/checked in {time.perf_counter() - began:.1f}s)")

    if args.compare_parsers:
        compare_parsers(history, args.master)
        return
    summary: dict[str, int] | None = None
    base = float("nan")
    if not args.skip_baseline:
        began = time.perf_counter()
        summary = baseline(paths)
        base = time.perf_counter() - began
        print(f"baseline (1 Python process, ElementTree + dicts): {base:6.1f}s  {summary}  "
              f"{_load()}")

    out = data / "out"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(data / "new", ignore_errors=True)
    if args.fresh_class_archive:
        _class_archive().unlink(missing_ok=True)
    archived = _class_archive().exists()
    cold = _run_build([history], out, args.master)
    print(f"cold build ({args.master}, JVM start, Parquet, dashboard): {cold:6.1f}s  "
          f"ratio to baseline {cold / base:.2f}  {cold / total * 1e6:.1f} us per test case  "
          f"{_load()}")
    print("  the driver JVM " + ("mapped the class-data archive of an earlier build"
          if archived else "had no class-data archive and wrote one at exit"))

    for step in range(args.increments):
        generate(data / "new", 1, args.cases, first_run=args.files + step, targets=args.targets)
        increment = _run_build([history, data / "new"], out, args.master)
        print(f"incremental build (+1 run of {args.cases} cases):      {increment:6.1f}s  "
              f"{_load()}")

    if not args.skip_warm:
        warm_out = data / "out-warm"
        shutil.rmtree(warm_out, ignore_errors=True)
        startup, warm, spark_pass, answers = _warm_build(history, warm_out, args.master)
        print(f"Spark start-up (session + first job):               {startup:6.1f}s")
        print(f"warm build (Spark already up):                      {warm:6.1f}s  "
              f"ratio to baseline {warm / base:.2f}  {_load()}")
        same = ("no baseline to compare" if summary is None
                else "same answers as the baseline" if answers == summary
                else f"DIFFERENT: {answers}")
        print(f"warm pass (the baseline's work on Spark, no output): {spark_pass:6.1f}s  "
              f"ratio to baseline {spark_pass / base:.2f}  {same}  {_load()}")
        shutil.rmtree(warm_out, ignore_errors=True)
    if args.dashboard:
        measure_dashboard(out / "dashboard.html", args.screenshot)
    files = sum(1 for _ in (out / "cases").rglob("*.parquet"))
    print(f"cases/ holds {files} Parquet files; cpu count {os.cpu_count()}")


if __name__ == "__main__":
    main()
