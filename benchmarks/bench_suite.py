"""Run the whole conformance suite N times in a row: determinism and wall time.

Run: python3 benchmarks/bench_suite.py [--runs 20] [--workers 2] [--target reference]
     [--out out/suite-runs]

Each run is a fresh ``pytest --shadowcheck`` process (no retries, no reruns)
writing its own JUnit XML; the script prints one line per run (wall time,
passed / outside-guarantee / failed counts), then the wall-time median and
maximum, and exits non-zero if any run had a failure or an error.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def tally(junit: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = child.tag
            elif child.tag == "skipped":
                message = child.get("message") or ""
                outcome = "outside" if message.startswith("OUTSIDE-GUARANTEE") else "skipped"
        counts[outcome] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (0: none)")
    parser.add_argument("--target", default="reference")
    parser.add_argument("--out", type=Path, default=Path("out/suite-runs"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    walls: list[float] = []
    bad_runs = 0
    for run in range(1, args.runs + 1):
        junit = args.out / f"run-{run:02d}.xml"
        command = [
            sys.executable, "-m", "pytest", "--shadowcheck", "-q", "-p", "no:cacheprovider",
            "--shadowcheck-target", args.target, f"--junitxml={junit}",
        ]  # fmt: skip
        if args.workers:
            command += ["-n", str(args.workers)]
        started = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - started
        walls.append(wall)
        counts = tally(junit) if junit.exists() else Counter({"error": 1})
        failed = counts["failure"] + counts["error"]
        bad_runs += bool(failed or proc.returncode not in (0,))
        # the 1-minute load average: other jobs on the machine move the wall time a lot
        load = os.getloadavg()[0]
        print(
            f"run {run:2d}: {wall:6.1f} s  passed {counts['passed']:3d}  "
            f"outside-guarantee {counts['outside']:2d}  skipped {counts['skipped']:2d}  "
            f"failed {failed:2d}  (exit {proc.returncode})  load {load:.1f}",
            flush=True,
        )
        if failed:
            tail = "\n".join(proc.stdout.splitlines()[-15:])
            print(tail, flush=True)
    print(
        f"{args.runs} runs: wall median {statistics.median(walls):.1f} s, max {max(walls):.1f} s; "
        f"runs with a failure: {bad_runs}"
    )
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
