"""The README main command's report step, timed as a user meets it: builds into a fresh
``--out``, each a fresh ``python -m reports build`` process adding one suite run's JUnit.

Run: python3 benchmarks/report_step.py RUN.xml [RUN.xml ...] [--rounds 3] [--against REV]

A round builds every given file in turn into a new output directory (the first build is
the cold one: no aggregates yet); the figure issue 28 asks for is the median of the
builds after the first. Each process's output goes to a file, as in a terminal: a pipe
would also wait for the Spark JVM, which ends a little after the Python process.

``--against REV`` alternates each round with one of REV (a git worktree), so that the
machine's own drift, often over a second between rounds, hits both sides alike.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_round(checkout: Path, inputs: list[Path], scratch: Path) -> list[float]:
    """Wall seconds of each build of ``inputs`` into a fresh output directory."""
    out = Path(tempfile.mkdtemp(prefix="report-step-", dir=scratch))
    times = []
    for number, junit in enumerate(inputs, 1):
        log = out.with_name(f"{out.name}-{number}.log")
        began = time.monotonic()
        with log.open("w") as handle:
            done = subprocess.run(
                [sys.executable, "-m", "reports", "build", str(junit), "--out", str(out)],
                cwd=checkout, stdout=handle, stderr=subprocess.STDOUT, check=False,
            )  # fmt: skip
        times.append(time.monotonic() - began)
        if done.returncode != 0:
            sys.exit(f"build {number} of {junit} failed (exit {done.returncode}); see {log}")
    return times


def _worktree(rev: str, scratch: Path) -> Path:
    path = scratch / f"worktree-{rev.replace('/', '_')}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=ROOT,
                       check=True, capture_output=True)  # fmt: skip
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="one suite run's JUnit each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="alternate with this revision")
    args = parser.parse_args()
    if len(args.inputs) < 2:
        parser.error("give two JUnit files or more: the builds after the first are measured")
    scratch = Path(tempfile.mkdtemp(prefix="report-step-bench-"))
    sides = {"this checkout": ROOT}
    if args.against:
        sides[args.against] = _worktree(args.against, scratch)
    medians: dict[str, list[float]] = {name: [] for name in sides}
    for number in range(1, args.rounds + 1):
        for name, checkout in sides.items():
            times = one_round(checkout, [p.resolve() for p in args.inputs], scratch)
            after = statistics.median(times[1:])
            medians[name].append(after)
            shown = ", ".join(f"{t:.2f}" for t in times)
            print(f"round {number}, {name}: {shown} s; median after the first {after:.2f} s")
    for name, values in medians.items():
        print(f"{name}: median of the rounds' medians {statistics.median(values):.2f} s "
              f"({', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip
    if args.against:
        subprocess.run(["git", "worktree", "remove", "--force", str(sides[args.against])],
                       cwd=ROOT, check=False, capture_output=True)  # fmt: skip
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
