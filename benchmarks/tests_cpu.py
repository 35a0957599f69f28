"""Where the project's own tests spend the machine: CPU-seconds per test and per folder.

The tests mostly start other processes (child pytest runs, MTA nodes, a Spark JVM), so a
test's own process time says little. Each test runs in a cgroup of its own (cgroup v1
``cpuacct``, or v2's ``cpu.stat``): every process it starts is counted with it, and one
it leaves running (a worker's Spark JVM) goes on counting in the group of the test that
started it, read again when the run ends. Needs root (it creates cgroups); containers
that docker starts are dockerd's and are not counted.

    python3 benchmarks/tests_cpu.py [-- PYTEST ARGS]    # default: -n 4, the CI's command

prints the run's wall time and CPU-seconds, the CPU floor (CPU-seconds / cores), then
the folders and the 25 tests that cost most.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# the plugin each pytest process (and xdist worker) loads: one cgroup per test
PLUGIN = """
import os, time
import pytest

BASE = os.environ["TESTS_CPU_CGROUP"]
OUT = os.environ["TESTS_CPU_OUT"]
V2 = not os.path.exists(os.path.join(BASE, "cpuacct.usage"))
count = [0]


def usage(group):
    if V2:
        with open(os.path.join(group, "cpu.stat")) as f:
            return int(f.readline().split()[1]) / 1e6
    with open(os.path.join(group, "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


def enter(group):
    with open(os.path.join(group, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    count[0] += 1
    group = os.path.join(BASE, f"{os.getpid()}-{count[0]}")
    os.makedirs(group, exist_ok=True)
    enter(group)
    began = time.time()
    yield
    ended = time.time()
    enter(BASE)
    with open(OUT, "a") as f:
        f.write(f"{item.nodeid}\\t{os.path.basename(group)}\\t{began:.2f}\\t{ended:.2f}\\n")


def pytest_unconfigure(config):
    # what a test left running charged its group after it ended: read when all is done
    with open(OUT + ".groups", "a") as f:
        for name in os.listdir(BASE):
            if name.startswith(f"{os.getpid()}-"):
                f.write(f"{name}\\t{usage(os.path.join(BASE, name)):.3f}\\n")
"""


def cgroup_base() -> Path:
    v1 = Path("/sys/fs/cgroup/cpuacct")
    base = v1 if (v1 / "cpuacct.usage").exists() else Path("/sys/fs/cgroup")
    group = base / f"tests-cpu-{os.getpid()}"
    group.mkdir()
    return group


def machine_busy() -> float:
    """CPU-seconds the whole machine has spent busy since boot (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="how many tests to list")
    parser.add_argument("pytest_args", nargs="*", default=["-n", "4", "-q"])
    args = parser.parse_args()
    base = cgroup_base()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tests_cpu_plugin.py").write_text(PLUGIN)
        out = Path(tmp) / "tests.tsv"
        env = {
            **os.environ,
            "TESTS_CPU_CGROUP": str(base),
            "TESTS_CPU_OUT": str(out),
            "PYTHONPATH": os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")])),
        }
        busy_before = machine_busy()
        began = time.monotonic()
        command = [sys.executable, "-m", "pytest", "-p", "tests_cpu_plugin", *args.pytest_args]
        rc = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        wall = time.monotonic() - began
        busy = machine_busy() - busy_before
        groups = dict(line.split("\t") for line in Path(f"{out}.groups").read_text().splitlines())
        tests = []
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)  # per worker
        for line in out.read_text().splitlines():
            nodeid, group, start, end = line.split("\t")
            tests.append((nodeid, float(groups.get(group, 0.0)), float(end) - float(start)))
            spans[group.split("-")[0]].append((float(start), float(end)))
    for group_dir in base.iterdir():
        if group_dir.is_dir():
            group_dir.rmdir()
    base.rmdir()
    total = sum(cpu for _, cpu, _ in tests)
    cores = os.cpu_count() or 1
    print(f"\n{len(tests)} tests, exit {rc}: wall {wall:.0f} s, {total:.0f} CPU-seconds counted")
    floor = total / cores
    print(f"CPU floor on {cores} cores: {floor:.0f} s (wall / floor {wall / floor:.2f})")
    # docker's containers run under dockerd, outside the tests' groups: the machine's
    # own count shows them (and anything else that ran meanwhile)
    print(f"the machine was busy {busy:.0f} CPU-seconds ({busy / (wall * cores):.0%} of its cores)")
    # the run's shape: a worker that ends long before the others leaves the tail to them
    first = min((start for worker in spans.values() for start, _ in worker), default=0.0)
    print("\nworkers (pid: tests, wall time in tests, when its last test ended):")
    for pid, worker in sorted(spans.items(), key=lambda kv: max(e for _, e in kv[1])):
        busy_s = sum(end - start for start, end in worker)
        ended_at = max(end for _, end in worker) - first
        print(f"  {pid:>8}: {len(worker):4} tests, in tests {busy_s:6.0f} s, "
              f"ended {ended_at:6.0f} s after the first began")
    folders: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for nodeid, cpu, test_wall in tests:
        folder = "/".join(nodeid.split("::")[0].split("/")[:2])
        folders[folder][0] += cpu
        folders[folder][1] += test_wall
        folders[folder][2] += 1
    print("\nfolder                          tests   CPU-s  share   wall-s (summed)")
    for folder, (cpu, test_wall, n) in sorted(folders.items(), key=lambda kv: -kv[1][0]):
        print(f"{folder:32} {int(n):5} {cpu:7.0f} {cpu / total:6.1%} {test_wall:8.0f}")
    print(f"\nthe {args.top} tests that cost most (CPU-s, wall-s):")
    for nodeid, cpu, test_wall in sorted(tests, key=lambda t: -t[1])[: args.top]:
        print(f"{cpu:7.1f} {test_wall:7.1f}  {nodeid}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
