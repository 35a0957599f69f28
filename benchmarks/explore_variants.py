"""Benchmark: does exploration alone find each broken variant of the reference?

    nice -n 10 python benchmarks/explore_variants.py [--only NAME,...] [--limit 300]
        [--seed 1] [--shrink-attempts 16] [--lanes 1] [--concurrency N] [--out table.md
        [--resume]]

For each variant of ``tests/conformance/mta_variants`` (target ``broken:NAME``, as the
conformance tests run them) a child ``pytest --shadowcheck --shadowcheck-explore-only
--shadowcheck-explore=LIMIT`` explores from one seed and stops at the first FAIL
(``-x``), which the plugin shrinks. The child explores at the plugin's own concurrency
(scenarios in lanes: as a user's deep exploration runs), or ``--concurrency N`` scenarios
at once (1: one after another, the figures of sessions 12-14). The table, in Markdown,
has per variant: found or not, the operations of the explored scenarios reported up to
the find, the seconds from the child's start to the failing scenario's verdict (the
"found at" its failure text gives, since session 35; before, the child's end less its
shrinking, which counted the other lanes' scenarios still running: an upper bound;
wall-clock, so with several scenarios at once it is the user's wait), the
shrunk length (operations) and the file the shrunk scenario was written to. Timing lives
here, not in the tests. ``--lanes N`` runs N variants at a time (their seconds are then
comparable only with other rows measured at the same load). A FAIL counts as a find
only when the reference passes the same scenario (its shrunk form) run again: a FAIL
every variant would share is the harness's, or an overloaded machine's. A find under
none of the behaviours the variant's own scenarios evidence is counted and marked
"another behaviour": the catalogue model names the first rule a run breaks, and a defect
in discarding (say) may first show as a copy a restarted primary never hands back
(DI-5). ``--out`` is rewritten as
each variant is done, so a run stopped early leaves its rows; ``--resume`` keeps them
and explores the other variants (the whole table takes hours on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFORMANCE = ROOT / "tests" / "conformance"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(CONFORMANCE))

from mta_variants import all_variants  # noqa: E402

from pytest_shadowcheck.plugin.exploration import (  # noqa: E402
    DEEP_OPERATIONS,
    deep_length,
    explored_index,
)
from pytest_shadowcheck.scenario.loader import load_scenario_file  # noqa: E402

SUITE = ROOT / "scenarios"

_SHRUNK = re.compile(
    r"shrunk explored scenario: (\d+) -> (\d+) operations \((.*); (\d+) attempts, ([\d.]+)s"
)
_FILE = re.compile(r"written as a scenario file: (\S+)")
_FOUND_AT = re.compile(r"found at (\d\d):(\d\d):(\d\d) local time")


@dataclass
class Row:
    variant: str
    found: bool
    operations: int
    seconds: float
    shrunk: str
    wall: float
    file: str = ""
    #: the child's failure to run (no JUnit, an internal error): no figure for this row
    error: str = ""
    #: the behaviours the explored scenario FAILed under ("-" when none failed)
    under: str = "-"
    #: found under none of the behaviours the variant's own scenarios evidence
    elsewhere: bool = False
    #: why a FAIL is not counted as a find: under none of the variant's behaviours, or
    #: the reference FAILs the same scenario too (a fault of the harness, or the load)
    discounted: str = ""


def explore(
    name: str, limit: float, seed: int, attempts: int, work: Path, concurrency: int | None
) -> Row:
    junit = work / f"{name}.xml"
    command = [
        sys.executable, "-m", "pytest", "--shadowcheck", "--shadowcheck-explore-only",
        f"--shadowcheck-explore={limit:g}s", f"--shadowcheck-explore-seed={seed}",
        "--shadowcheck-target", f"broken:{name}",
        "--shadowcheck-target-plugin", "broken_target",
        "--shadowcheck-shrink-attempts", str(attempts),
        "--shadowcheck-report", str(work / name),
        f"--junitxml={junit}", "-p", "no:cacheprovider", "-p", "no:xdist", "-x", "-q",
    ]  # fmt: skip
    if concurrency is not None:
        command += ["--shadowcheck-concurrency", str(concurrency)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(CONFORMANCE), *filter(None, [env.get("PYTHONPATH")])]
    )
    began, launched = time.monotonic(), datetime.now()
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - began
    output = done.stdout + done.stderr
    if done.returncode not in (0, 1) or not junit.is_file():
        # pytest's 2-4 (interrupted, internal or usage error), 5 (nothing ran): the
        # child explored nothing, which is no evidence that the variant was not found
        last = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
        said = last[0].replace("|", "/")  # a cell of the Markdown table
        return Row(name, False, 0, wall, "-", wall, error=f"exit {done.returncode}: {said}")
    seconds, operations, found = wall, 0, False
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            operations += _drawn(case)
            if any(child.tag == "failure" for child in case):
                found = True
                break
    shrunk, file = "-", ""
    match = _SHRUNK.search(output)
    if match:
        seconds -= float(match.group(5))  # shrinking ran inside the failing item
        shrunk = f"{match.group(2)} of {match.group(1)} ({match.group(4)} runs)"
        where = _FILE.search(output)
        file = where.group(1) if where else ""
    found_at = _FOUND_AT.search(output)
    if found_at:
        # the moment the failing verdict was in, from the child's own clock: scenarios
        # still running in other lanes, shrinking and the report come after it
        hour, minute, second = (int(g) for g in found_at.groups())
        moment = launched.replace(hour=hour, minute=minute, second=second, microsecond=0)
        if moment < launched - timedelta(seconds=1):
            moment += timedelta(days=1)  # past midnight
        seconds = (moment - launched).total_seconds()
    row = Row(name, found, operations, max(seconds, 0.0), shrunk, wall, file)
    if found:
        _judge_the_find(row, work / name / "certification.json", work, env)
    return row


def _drawn(case: ET.Element) -> int:
    """The operations drawn for an explored scenario's JUnit case (a deep exploration's
    first scenarios are shorter: plugin/exploration.py DEEP_RAMP)."""
    found = explored_index(case.get("name", "").partition("[")[0])
    return deep_length(found[1]) if found else DEEP_OPERATIONS


def _judge_the_find(row: Row, certification: Path, work: Path, env: dict[str, str]) -> None:
    """A FAIL is the variant found only if the reference does not FAIL the same scenario
    (its shrunk form when there is one) - else it is a FAIL of the harness or of an
    overloaded machine, which every variant would share; a find under none of the
    behaviours the variant's own scenarios evidence is marked ``elsewhere``."""
    failed = next(
        (s for s in json.loads(certification.read_text())["scenarios"] if s["verdict"] == "FAIL"),
        None,
    )
    if failed is None:
        return
    under = sorted(b for b, v in failed["by_behaviour"].items() if v["status"] == "FAIL")
    row.under = ", ".join(under)
    row.elsewhere = not variant_behaviours(row.variant) & set(under)
    if not under:
        # an explored scenario's invariant (a loss, a damaged copy) fails the scenario and
        # no behaviour: named by its check
        checks = [c["name"] for c in failed.get("checks", []) if c["status"] == "FAIL"]
        row.under, row.elsewhere = f"an invariant ({', '.join(checks[:2])})", False
    scenario = row.file or failed["source"].rpartition(":")[0]
    junit = work / f"{row.variant}-reference.xml"
    command = [
        sys.executable, "-m", "pytest", "--shadowcheck", "--shadowcheck-target", "reference",
        scenario, f"--junitxml={junit}", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
    ]  # fmt: skip
    subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, check=False)
    cases = list(ET.parse(junit).getroot().iter("testcase")) if junit.is_file() else []
    if any(child.tag == "failure" for case in cases for child in case):
        row.found = False
        row.discounted = "the reference FAILs that scenario too"


def variant_behaviours(name: str) -> set[str]:
    """The behaviours the scenarios the variant fails evidence."""
    wanted = set(next(v.fails for v in all_variants() if v.name == name))
    return {b for s in _suite() if s.name in wanted for b in s.behaviours}


_SUITE_CACHE: list[Any] = []


def _suite() -> list[Any]:
    if not _SUITE_CACHE:
        for path in sorted(SUITE.glob("*.yaml")):
            _SUITE_CACHE.extend(load_scenario_file(path))
    return _SUITE_CACHE


def row_line(r: Row) -> str:
    """The row's line of the Markdown table (read back by :func:`read_rows`)."""
    if r.error:
        return f"| {r.variant} | error: {r.error} | - | - | - | - |"
    ops = str(r.operations) if r.found else f"{r.operations} (none found)"
    secs = f"{r.seconds:.0f}" if r.found else f"> {r.seconds:.0f}"
    yes = "yes, under another behaviour" if r.elsewhere else "yes"
    found = yes if r.found else (f"no: {r.discounted}" if r.discounted else "no")
    return f"| {r.variant} | {found} | {r.under} | {ops} | {secs} | {r.shrunk} |"


def read_rows(text: str) -> list[Row]:
    """The rows of a table this script wrote (``--resume``)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] in ("variant", "---"):
            continue
        name, found, under, ops, secs, shrunk = cells
        if found.startswith("error: "):
            rows.append(Row(name, False, 0, 0.0, "-", 0.0, error=found.removeprefix("error: ")))
            continue
        seconds = float(secs.lstrip("> "))
        operations = int(ops.split()[0])
        row = Row(name, found.startswith("yes"), operations, seconds, shrunk, seconds, under=under)
        row.elsewhere = found.endswith("another behaviour")
        row.discounted = found.removeprefix("no: ") if found.startswith("no: ") else ""
        rows.append(row)
    return rows


def table(rows: list[Row], limit: float, seed: int) -> str:
    found = sum(r.found for r in rows)
    elsewhere = sum(r.found and r.elsewhere for r in rows)
    broken = sum(bool(r.error) for r in rows)
    lines = [
        f"Exploration alone (seed {seed}, at most {limit:g}s of exploring each): "
        f"{found} of {len(rows)} variants found"
        + (f" ({elsewhere} under another behaviour than their own)" if elsewhere else "")
        + (f"; {broken} could not be explored (see the rows)." if broken else "."),
        "",
        "| variant | found | FAIL under | operations to find | seconds to find | "
        "shrunk to (operations) |",
        "|---|---|---|---|---|---|",
        *(row_line(r) for r in rows),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated variant names")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds of exploring each")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shrink-attempts", type=int, default=16)
    parser.add_argument("--lanes", type=int, default=1, help="variants explored at a time")
    parser.add_argument(
        "--concurrency", type=int, default=None,
        help="explored scenarios at once in each child (default: the plugin's choice)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=None,
        help="also write the table here (rewritten as each variant is done)",
    )  # fmt: skip
    parser.add_argument(
        "--resume", action="store_true",
        help="keep the rows already in --out and explore only the other variants",
    )  # fmt: skip
    args = parser.parse_args()
    if args.resume and args.out is None:
        parser.error("--resume continues the table of --out: give --out")
    wanted = [n for n in args.only.split(",") if n]
    variants = [v.name for v in all_variants() if v.fails and (not wanted or v.name in wanted)]
    unknown = sorted(set(wanted) - set(variants))
    if unknown:
        parser.error(f"unknown variant(s): {', '.join(unknown)}")
    done: dict[str, Row] = {}
    if args.resume and args.out.is_file():
        done = {r.variant: r for r in read_rows(args.out.read_text(encoding="utf-8"))}
    order = {name: i for i, name in enumerate(variants)}
    lock = threading.Lock()

    def keep(row: Row) -> None:
        """The table so far, in the variants' order: a run stopped early leaves it."""
        with lock:
            done[row.variant] = row
            if args.out:
                rows = sorted(done.values(), key=lambda r: order.get(r.variant, len(order)))
                args.out.write_text(table(rows, args.limit, args.seed), encoding="utf-8")

    with tempfile.TemporaryDirectory(prefix="explore-variants-") as tmp:

        def one(name: str) -> Row:
            row = explore(
                name, args.limit, args.seed, args.shrink_attempts, Path(tmp), args.concurrency
            )
            outcome = (
                f"ERROR, {row.error}"
                if row.error
                else f"{'found' if row.found else 'not found'} after {row.operations} "
                f"operations, {row.seconds:.0f}s; FAIL under {row.under}; shrunk {row.shrunk} "
                f"({row.wall:.0f}s in all)"
            )
            if row.discounted:
                outcome += f"; not counted: {row.discounted}"
            print(f"{name}: {outcome}", file=sys.stderr, flush=True)
            keep(row)
            return row

        # threads only wait on the child pytest processes
        with ThreadPoolExecutor(max_workers=max(1, args.lanes)) as pool:
            list(pool.map(one, [name for name in variants if name not in done]))
    rows = sorted(done.values(), key=lambda r: order.get(r.variant, len(order)))
    print(table(rows, args.limit, args.seed))
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
