"""Run the whole conformance suite N times in a row: determinism, wall time, and how
close the wall time is to the floor the machine sets.

Run: python3 benchmarks/bench_suite.py [--runs 20] [--workers N] [--target reference]
     [--out out/suite-runs] [--against REV] [--beside] [--histories]

Each run is a fresh ``pytest --shadowcheck`` process (no retries, no reruns) writing
its own JUnit XML, with the plugin's own choice of concurrency unless ``--workers`` is
given. The script prints one line per run: wall time, CPU-seconds, the floor and the
wall/floor ratio, passed / outside-guarantee / failed counts. The **floor** is the
larger of the CPU-seconds divided by the cores and the longest scenario: no schedule on
this machine can end sooner. CPU-seconds are the whole machine's busy time over the run
(``/proc/stat``), so measure on a quiet machine. Then the medians, and a non-zero exit if
any run had a failure or an error.

``--beside`` runs a second suite beside each measured one (same command, own JUnit), as
the load of another job: a flake under that load is a defect, not the machine's.
``--histories`` keeps every scenario's history of each run (and of the one beside) in a
directory next to its JUnit (``run-suite-01-histories/``): a flake's timing can be read
afterwards instead of run for again, and the runs end with the timing windows that came
closest to failing (``benchmarks/timing_margins.py``).

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


def busy_seconds() -> float:
    """CPU-seconds the whole machine has been busy since boot (all cores)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def longest_case(junit: Path) -> float:
    times = [float(c.get("time") or 0) for c in ET.parse(junit).getroot().iter("testcase")]
    return max(times, default=0.0)


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


def command(args: argparse.Namespace, junit: Path, nodes: list[str]) -> list[str]:
    out = [
        sys.executable, "-m", "pytest", "--shadowcheck", "-q",
        "--shadowcheck-target", args.target, f"--junitxml={junit.resolve()}", *nodes,
    ]  # fmt: skip
    if args.workers is not None:
        out += ["-n", str(args.workers)]
    if args.histories:
        # every scenario's history beside the run's JUnit, to read a flake's timing after
        out.append(f"--shadowcheck-history={junit.resolve().with_suffix('')}-histories")
    return out


def run_once(
    checkout: Path, junit: Path, args: argparse.Namespace, nodes: list[str]
) -> tuple[float, float, Counter[str], subprocess.CompletedProcess[str]]:
    beside = None
    if args.beside:
        other = junit.with_name(junit.stem + "-beside.xml")
        beside = subprocess.Popen(
            command(args, other, nodes), cwd=checkout, env=_env(checkout),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    busy = busy_seconds()
    started = time.perf_counter()
    proc = subprocess.run(
        command(args, junit, nodes), cwd=checkout, env=_env(checkout), capture_output=True,
        text=True,
    )  # fmt: skip
    wall = time.perf_counter() - started
    cpu = busy_seconds() - busy
    if beside is not None:
        beside.wait()
    counts = tally(junit) if junit.exists() else Counter({"error": 1})
    return wall, cpu, counts, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--workers", type=int, default=None,
        help="pytest-xdist workers (0: none; default: the plugin's own choice)",
    )  # fmt: skip
    parser.add_argument(
        "--beside", action="store_true", help="run a second suite beside each measured run"
    )
    parser.add_argument(
        "--histories", action="store_true",
        help="keep every scenario's history of each run (and of the one beside) under --out",
    )  # fmt: skip
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
    cpus: dict[str, list[float]] = {label: [] for label, _, _ in sides}
    ratios: dict[str, list[float]] = {label: [] for label, _, _ in sides}
    cores = len(os.sched_getaffinity(0))
    bad_runs = 0
    kept: list[Path] = []  # this invocation's histories of this checkout's runs
    for run in range(1, args.runs + 1):
        for label, checkout, nodes in sides:
            junit = args.out / f"run-{label.strip() or 'suite'}-{run:02d}.xml"
            if checkout == here:
                runs = [junit, junit.with_name(junit.stem + "-beside.xml")]
                kept += [j.resolve().with_name(j.stem + "-histories") for j in runs]
            wall, cpu, counts, proc = run_once(checkout, junit, args, nodes)
            floor = max(cpu / cores, longest_case(junit) if junit.exists() else 0.0)
            walls[label].append(wall)
            cpus[label].append(cpu)
            ratios[label].append(wall / floor if floor else float("nan"))
            failed = counts["failure"] + counts["error"]
            bad_runs += bool(failed or proc.returncode != 0)
            # the 1-minute load average: other jobs on the machine move the wall time a lot
            load = os.getloadavg()[0]
            print(
                f"{label}run {run:2d}: {wall:6.1f} s  cpu {cpu:6.1f} s  floor {floor:5.1f} s  "
                f"wall/floor {wall / floor if floor else float('nan'):4.2f}  "
                f"passed {counts['passed']:3d}  "
                f"outside-guarantee {counts['outside']:2d}  skipped {counts['skipped']:2d}  "
                f"failed {failed:2d}  (exit {proc.returncode})  load {load:.1f}",
                flush=True,
            )
            if failed:
                print("\n".join(proc.stdout.splitlines()[-15:]), flush=True)
    for label, times in walls.items():
        print(
            f"{label}{args.runs} runs on {cores} cores: wall median "
            f"{statistics.median(times):.1f} s, max {max(times):.1f} s; CPU median "
            f"{statistics.median(cpus[label]):.1f} s; wall/floor median "
            f"{statistics.median(ratios[label]):.2f}"
        )
    if args.against:
        now, then = (statistics.median(walls[label]) for label, _, _ in sides)
        print(f"wall-time growth over {args.against}: {(now / then - 1):+.1%}")
    print(f"runs with a failure: {bad_runs}")
    if args.histories:
        # a window the machine pushed near its bound flakes next: name the tightest
        from timing_margins import report

        print("\nthe timing windows that came closest to failing (benchmarks/timing_margins.py):")
        print("\n".join(report([d for d in kept if d.is_dir()], [here / "scenarios"], 8)))
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
