"""Run the whole conformance suite N times in a row: determinism and wall time.

Run: python3 benchmarks/bench_suite.py [--runs 20] [--workers 2] [--target reference]
     [--out out/suite-runs] [--against REV]

Each run is a fresh ``pytest --shadowcheck`` process (no retries, no reruns)
writing its own JUnit XML; the script prints one line per run (wall time,
passed / outside-guarantee / failed counts), then the wall-time median and
maximum, and exits non-zero if any run had a failure or an error.

``--against REV`` measures wall-time growth: it checks REV out in a git worktree
and alternates runs of both checkouts over the scenarios both have (by name), so
new scenarios do not count as growth and a busy minute hits both sides alike.
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


def scenario_ids(checkout: Path) -> dict[str, str]:
    """Scenario name -> pytest node ID, as collected in ``checkout``."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--shadowcheck", "--collect-only", "-q",
         "-p", "no:cacheprovider"],
        cwd=checkout, env=_env(checkout), capture_output=True, text=True, check=True,
    )  # fmt: skip
    ids = [line for line in proc.stdout.splitlines() if ".yaml::" in line]
    return {node.split("::", 1)[1].split("[", 1)[0]: node for node in ids}


def _env(checkout: Path) -> dict[str, str]:
    # the checkout's own package and reference MTA, whatever the editable install points at
    return dict(os.environ, PYTHONPATH=str(checkout.resolve()))


def worktree(rev: str, out: Path) -> Path:
    path = (out / f"against-{rev}").resolve()
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], check=True)
    return path


def run_once(
    checkout: Path, junit: Path, args: argparse.Namespace, nodes: list[str]
) -> tuple[float, Counter[str], subprocess.CompletedProcess[str]]:
    command = [
        sys.executable, "-m", "pytest", "--shadowcheck", "-q", "-p", "no:cacheprovider",
        "--shadowcheck-target", args.target, f"--junitxml={junit.resolve()}", *nodes,
    ]  # fmt: skip
    if args.workers:
        command += ["-n", str(args.workers)]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=checkout, env=_env(checkout), capture_output=True, text=True)
    wall = time.perf_counter() - started
    counts = tally(junit) if junit.exists() else Counter({"error": 1})
    return wall, counts, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (0: none)")
    parser.add_argument("--target", default="reference")
    parser.add_argument("--out", type=Path, default=Path("out/suite-runs"))
    parser.add_argument(
        "--against", metavar="REV", help="also time this git revision over the common scenarios"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    here = Path.cwd()
    sides: list[tuple[str, Path, list[str]]] = [("", here, [])]
    if args.against:
        base = worktree(args.against, args.out)
        ours, theirs = scenario_ids(here), scenario_ids(base)
        common = sorted(set(ours) & set(theirs))
        print(
            f"{len(common)} scenarios in both; only here: {len(set(ours) - set(theirs))}, "
            f"only in {args.against}: {len(set(theirs) - set(ours))}"
        )
        sides = [
            ("HEAD ", here, [ours[n] for n in common]),
            (f"{args.against} ", base, [theirs[n] for n in common]),
        ]
    walls: dict[str, list[float]] = {label: [] for label, _, _ in sides}
    bad_runs = 0
    for run in range(1, args.runs + 1):
        for label, checkout, nodes in sides:
            junit = args.out / f"run-{label.strip() or 'suite'}-{run:02d}.xml"
            wall, counts, proc = run_once(checkout, junit, args, nodes)
            walls[label].append(wall)
            failed = counts["failure"] + counts["error"]
            bad_runs += bool(failed or proc.returncode != 0)
            # the 1-minute load average: other jobs on the machine move the wall time a lot
            load = os.getloadavg()[0]
            print(
                f"{label}run {run:2d}: {wall:6.1f} s  passed {counts['passed']:3d}  "
                f"outside-guarantee {counts['outside']:2d}  skipped {counts['skipped']:2d}  "
                f"failed {failed:2d}  (exit {proc.returncode})  load {load:.1f}",
                flush=True,
            )
            if failed:
                print("\n".join(proc.stdout.splitlines()[-15:]), flush=True)
    for label, times in walls.items():
        print(
            f"{label}{args.runs} runs: wall median {statistics.median(times):.1f} s, "
            f"max {max(times):.1f} s"
        )
    if args.against:
        now, then = (statistics.median(walls[label]) for label, _, _ in sides)
        print(f"wall-time growth over {args.against}: {(now / then - 1):+.1%}")
    print(f"runs with a failure: {bad_runs}")
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
