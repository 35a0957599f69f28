"""Mutation score of the conformance suite against the reference MTA (cosmic-ray).

Run: python3 benchmarks/bench_mutation.py [--modules shadowing safety_net ...]
     [--sample 16] [--seed 13] [--lanes 2] [--out out/mutation] [--node-start fork]
then python3 benchmarks/bench_mutation.py --out out/mutation --unit-tests

A measurement, not a test. For each reference_impl module that implements behaviours,
cosmic-ray lists every mutant (``cosmic-ray init``, its core operators), one mutant at a
time is applied to a *copy* of the tree (a lane: ``OUT/lane-K``, never this checkout)
and the conformance suite runs against it, restricted to the scenarios of the
behaviours that module implements (``-m``), without the slow ``durability_*`` workloads,
stopping at the first failure (``-x``). A mutant is *killed* when a scenario fails,
*survived* when all pass, *timed out* when the run outlives its per-mutant limit
(``--timeout-factor`` times the module's unmutated run plus 120 s: a killing run
waits out the failing check's own limits, so it can outlast a passing one).

Why cosmic-ray: mutmut 3 (tried on reference_impl/directory.py) decides which tests
cover a mutant from calls recorded in the pytest process; the MTA runs in the node
processes, so it found a test for none of the module's 31 mutants and ran none (fork
server and ``SHADOWCHECK_NODE_START=exec`` alike). cosmic-ray writes the mutant into
the file before the test command starts, so every node imports it.

Why not ``cosmic-ray exec``: the reference nodes are processes of their own (forked
from a fork server, each leading its own process group), so cosmic-ray's timeout,
which kills the test command's process group, would leave them running; here each
test run is wrapped (``_run-tests``) and every process of its session is reaped.
Mutants are still made, applied and recorded by cosmic-ray (``cosmic_ray.mutating``,
one session database per module in OUT, readable with ``cr-report``).

Mutants inside annotations are equivalent by construction (every module has
``from __future__ import annotations``: an annotation is never evaluated) and are
not run. ``--sample N`` runs a seeded random sample of N mutants per module (the
full set is ~1,900 mutants, ~20 hours on 2 cores); the output says so. Before any
mutant, a canary (``Delivery.deliver`` raising) must be killed - it proves the node
processes run the lane's code - and each module's unmutated selection must pass.

``--unit-tests`` then runs a finished run's survivors against the reference MTA's own
tests of their module (tests/reference, ``UNIT_TESTS``) and prints what those kill in
a second table, apart from the suite's score: the suite is what certifies an MTA, the
unit tests only guard this reference implementation.

Survivors are listed in OUT/survivors.md with their diffs; dispositions (equivalent,
or the check that would kill it) are kept in benchmarks/mutation_dispositions.md,
whose table this script reads to print the score over non-equivalent mutants.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
DISPOSITIONS = ROOT / "benchmarks" / "mutation_dispositions.md"

#: the behaviours each module implements (its docstring and code); its mutants are
#: tested by the scenarios of these behaviours only
BEHAVIOURS: dict[str, list[str]] = {
    "shadowing": [
        "CR-1", "CR-2", "CR-3", "CR-4", "CR-5", "CR-6", "CR-7", "CR-10", "TO-4",
        "DI-2", "DI-4", "SN-2", "SN-10", "SN-12", "PR-1", "PR-2", "PR-5", "PR-6", "XS-6",
    ],
    "safety_net": [
        "SN-1", "SN-2", "SN-3", "SN-4", "SN-5", "SN-6", "SN-7", "SN-8", "SN-9",
        "SN-10", "SN-11", "SN-12", "DI-6",
    ],
    "delivery": [
        "DI-1", "DI-7", "CR-9", "CR-10", "SN-1", "SN-12", "XS-4", "XS-5", "XS-6",
        "TO-2", "PR-3",
    ],
    "smtp_in": [
        "CR-1", "CR-2", "CR-3", "CR-4", "CR-8", "XS-1", "XS-2", "XS-3", "DI-3",
        "TO-1", "TO-2", "SN-5",
    ],
    "queue_db": [
        "CR-10", "DI-1", "DI-3", "DI-4", "DI-5", "DI-6", "PR-2", "PR-3", "SN-1",
        "SN-2", "SN-4", "SN-5", "SN-7",
    ],
    "peer_link": ["CR-1", "CR-2", "DI-2", "PR-2", "XS-2", "XS-6"],
    # tiny: a quick smoke run of this script
    "directory": ["SN-5", "SN-10", "SN-11"],
}  # fmt: skip

#: the reference MTA's own tests that exercise each module (real nodes, raw sockets, real
#: SQLite), run by ``--unit-tests`` on the mutants the suite let through: what they kill
#: is reported apart, as a second line of defence, never folded into the suite's score
UNIT_TESTS: dict[str, list[str]] = {
    "shadowing": [
        "test_shadow_copy.py", "test_promotion.py", "test_stall_watch.py",
        "test_smtp_in_workers.py",
    ],
    "safety_net": ["test_safety_net.py", "test_smtp_limits.py"],
    "delivery": ["test_legacy_2010.py", "test_bounces.py", "test_shadow_copy.py"],
    "smtp_in": ["test_credentials.py", "test_smtp_limits.py", "test_protocol.py"],
    "queue_db": ["test_queue_durability.py", "test_discard_paging.py", "test_safety_net.py"],
    "peer_link": ["test_protocol.py", "test_discard_paging.py"],
    "directory": ["test_safety_net.py"],
}

#: what a lane needs to run the suite: the plugin, the MTA, the scenarios, the ini
LANE_CONTENT = ["pyproject.toml", "pytest_shadowcheck", "reference_impl", "scenarios"]
TIMEOUT_MARK = "MUTANT TIMEOUT"
TIMEOUT_RC = 124
UNIT_TIMEOUT = 600.0


@dataclass
class Mutant:
    module: str
    job_id: str
    operator: str
    occurrence: int
    line: int
    col: int
    end: tuple[int, int]
    definition: str | None


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed | survived | timeout | error | invalid
    seconds: float
    diff: str = ""
    output: str = ""


@dataclass
class Tally:
    total: int = 0
    annotation: int = 0
    sampled: int = 0
    counts: dict[str, int] = field(default_factory=dict)


# --- the wrapped test run (cosmic-ray's test command) -----------------------------------


def _session_members(sid: int) -> list[int]:
    """Every live process of session ``sid`` but this one."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the fields after the command name (which may hold spaces and parentheses)
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def run_tests(lane: Path, timeout: float, pytest_args: list[str]) -> int:
    """Run pytest in ``lane``; on timeout interrupt it (so the harness tears its nodes
    down), then kill whatever of this session is left: node processes lead process
    groups of their own, so a process-group kill would miss them."""
    if os.getsid(0) != os.getpid():  # run_in_lane starts it as a session leader
        os.setsid()
    env = dict(os.environ, PYTHONPATH=str(lane), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *pytest_args], cwd=lane, env=env)
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print(TIMEOUT_MARK, flush=True)
        rc = TIMEOUT_RC
    for pid in _session_members(os.getsid(0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return rc


# --- mutants --------------------------------------------------------------------------


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) of every annotation in ``source``, as (line, column)."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        annotations: list[ast.expr | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(node.returns)
        elif isinstance(node, ast.arg | ast.AnnAssign):
            annotations.append(node.annotation)
        for a in annotations:
            if a is not None and a.end_lineno is not None and a.end_col_offset is not None:
                spans.append(((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)))
    return spans


def in_annotation(m: Mutant, spans: list[tuple[tuple[int, int], tuple[int, int]]]) -> bool:
    return any(start <= (m.line, m.col) and m.end <= end for start, end in spans)


def list_mutants(module: str, out: Path) -> list[Mutant]:
    """cosmic-ray's mutants of reference_impl/MODULE.py, in a session database of its own."""
    from cosmic_ray.work_db import WorkDB, use_db

    config = out / f"{module}.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f'module-path = "reference_impl/{module}.py"\n'
        "timeout = 600.0\nexcluded-modules = []\n"
        'test-command = "true"\n'  # never used: run_lane runs the tests
        '[cosmic-ray.distributor]\nname = "local"\n'
    )
    session = out / f"{module}.sqlite"
    session.unlink(missing_ok=True)
    subprocess.run(
        [sys.executable, "-m", "cosmic_ray.cli", "init", str(config), str(session)],
        cwd=ROOT, check=True,
    )  # fmt: skip
    mutants = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in db.work_items:
            spec = item.mutations[0]
            mutants.append(
                Mutant(
                    module, item.job_id, spec.operator_name, spec.occurrence,
                    spec.start_pos[0], spec.start_pos[1], tuple(spec.end_pos),
                    spec.definition_name,
                )
            )  # fmt: skip
    mutants.sort(key=lambda m: (m.line, m.col, m.operator, m.occurrence))
    return mutants


def record(out: Path, outcomes: list[Outcome], skipped: dict[str, list[str]]) -> None:
    """Write the results into each module's cosmic-ray session (for ``cr-report``)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    by_module: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_module.setdefault(o.mutant.module, []).append(o)
    for module in set(by_module) | set(skipped):
        with use_db(str(out / f"{module}.sqlite"), WorkDB.Mode.open) as db:
            for job in skipped.get(module, []):
                db.set_result(job, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
            for o in by_module.get(module, []):
                test = TestOutcome.SURVIVED if o.status == "survived" else TestOutcome.KILLED
                if o.status in ("error", "invalid"):
                    test = TestOutcome.INCOMPETENT
                db.set_result(
                    o.mutant.job_id,
                    WorkResult(
                        worker_outcome=WorkerOutcome.NORMAL,
                        test_outcome=test,
                        diff=o.diff,
                        output=o.output[-4000:],
                    ),
                )


# --- lanes ----------------------------------------------------------------------------


def make_lane(out: Path, index: int, unit_tests: bool = False) -> Path:
    lane = out / f"lane-{index}"
    shutil.rmtree(lane, ignore_errors=True)
    lane.mkdir(parents=True)
    for name in [*LANE_CONTENT, *(["tests/reference"] if unit_tests else [])]:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, lane / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, lane / name)
    return lane


def pytest_args(module: str) -> list[str]:
    marks = " or ".join(BEHAVIOURS[module])
    return [
        "--shadowcheck", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
        "-m", marks, "-k", "not durability_",
    ]  # fmt: skip


def unit_test_args(module: str) -> list[str]:
    files = [f"tests/reference/{name}" for name in UNIT_TESTS[module]]
    return ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *files]


def test_command(lane: Path, timeout: float, args: list[str]) -> list[str]:
    return [
        sys.executable, str(Path(__file__).resolve()), "_run-tests", "--lane", str(lane),
        "--timeout", str(timeout), "--", *args,
    ]  # fmt: skip


def run_in_lane(
    lane: Path, module: str, timeout: float, args: list[str] | None = None
) -> tuple[int, str, float]:
    started = time.perf_counter()
    proc = subprocess.run(
        test_command(lane, timeout, pytest_args(module) if args is None else args),
        capture_output=True, text=True, start_new_session=True, timeout=timeout + 120,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - started


def run_mutant(lane: Path, m: Mutant, timeout: float, args: list[str] | None = None) -> Outcome:
    """Apply ``m`` to the lane's copy with cosmic-ray, run the tests (the suite's selection
    unless ``args`` says otherwise), restore the file."""
    import cosmic_ray.plugins
    from cosmic_ray.mutating import use_mutation

    path = lane / "reference_impl" / f"{m.module}.py"
    operator = cosmic_ray.plugins.get_operator(m.operator)()
    started = time.perf_counter()
    with use_mutation(path, operator, m.occurrence) as (original, mutated):
        if mutated is None:
            return Outcome(m, "error", 0.0, output="cosmic-ray made no mutation")
        try:
            compile(mutated, str(path), "exec")
        except SyntaxError as exc:  # e.g. a signature's bare ``*`` made ``|``: not a program
            return Outcome(m, "invalid", 0.0, output=f"SyntaxError: {exc}")
        diff = "".join(
            line
            for line in __import__("difflib").unified_diff(
                original.splitlines(True), mutated.splitlines(True), n=1
            )
            if not line.startswith(("---", "+++"))
        )
        rc, output, _ = run_in_lane(lane, m.module, timeout, args)
    seconds = time.perf_counter() - started
    if rc == 0:
        status = "survived"
    elif rc == TIMEOUT_RC and TIMEOUT_MARK in output:
        status = "timeout"
    elif rc in (1, 2, 3):  # failed, interrupted (a node crashed the run), internal error
        status = "killed"
    else:  # usage error, nothing collected: the harness, not the mutant
        status = "error"
    return Outcome(m, status, seconds, diff, output)


def in_lanes(lanes: list[Path], jobs: dict[str, Callable[[Path], T]]) -> dict[str, T]:
    """Run each job in the first free lane (one job per lane at a time)."""
    pending: queue.Queue[str] = queue.Queue()
    for name in jobs:
        pending.put(name)
    results: dict[str, T] = {}

    def loop(lane: Path) -> None:
        while True:
            try:
                name = pending.get_nowait()
            except queue.Empty:
                return
            results[name] = jobs[name](lane)

    threads = [threading.Thread(target=loop, args=(lane,)) for lane in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {name: results[name] for name in jobs}


def run_unmutated(
    lanes: list[Path],
    modules: list[str],
    timeout: float,
    args_for: Callable[[str], list[str] | None],
    what: str,
) -> dict[str, float] | None:
    """Each module's tests on the unmutated code (they must pass, or no kill means
    anything): the seconds each took, or None, saying why, if one failed."""

    def job(module: str) -> Callable[[Path], tuple[int, str, float]]:
        return lambda lane: run_in_lane(lane, module, timeout, args_for(module))

    results = in_lanes(lanes, {module: job(module) for module in modules})
    for module, (rc, output, _) in results.items():
        if rc != 0:
            print(output[-3000:], file=sys.stderr)
            print(f"{module}: {what} fails on the unmutated code; no score", file=sys.stderr)
            return None
    return {module: seconds for module, (_, _, seconds) in results.items()}


def canary(lane: Path, module: str) -> bool:
    """True if a mutant that only the node processes run is killed in ``lane``."""
    path = lane / "reference_impl" / "delivery.py"
    original = path.read_text()
    lines = original.splitlines(True)
    at = next(i for i, line in enumerate(lines) if line.startswith("    async def deliver("))
    while not lines[at].rstrip().endswith(":"):
        at += 1
    lines.insert(at + 1, '        raise RuntimeError("mutation canary")\n')
    path.write_text("".join(lines))
    try:
        rc, _, _ = run_in_lane(lane, module, 600)
    finally:
        path.write_text(original)
    return rc != 0


# --- dispositions and report ----------------------------------------------------------


def killed_by(output: str) -> str | None:
    """The first scenario pytest's summary names as failed or in error."""
    match = re.search(r"^(?:FAILED|ERROR) \S*?::(\S+)", output, re.M)
    return match.group(1) if match else None


def mutant_key(m: Mutant) -> str:
    return f"{m.module}.py:{m.line} {m.operator}#{m.occurrence}"


def read_dispositions() -> dict[str, str]:
    """key -> equivalent | gap | outside, from the table rows of DISPOSITIONS (outside:
    observable, but no behaviour of the catalogue describes it; counted as a gap)."""
    found: dict[str, str] = {}
    if DISPOSITIONS.exists():
        for row in DISPOSITIONS.read_text().splitlines():
            match = re.match(r"\|\s*`([^`]+)`\s*\|\s*(equivalent|gap|outside)\s*\|", row)
            if match:
                found[match.group(1)] = match.group(2)
    return found


def write_survivors(out: Path, outcomes: list[Outcome]) -> None:
    lines = ["# Surviving mutants\n"]
    for o in sorted(outcomes, key=lambda o: (o.mutant.module, o.mutant.line)):
        if o.status != "survived":
            continue
        m = o.mutant
        lines.append(f"## `{mutant_key(m)}` in {m.definition}\n\n```diff\n{o.diff}```\n")
    (out / "survivors.md").write_text("\n".join(lines))


def report(
    tallies: dict[str, Tally],
    outcomes: list[Outcome],
    args: argparse.Namespace,
    unit: dict[str, str] | None = None,
) -> None:
    dispositions = read_dispositions()
    print()
    if args.sample:
        print(
            f"seeded random sample: {args.sample} mutants per module (seed {args.seed}), "
            "not the full set"
        )
    header = (
        f"{'module':<12} {'mutants':>7} {'annot.':>6} {'run':>4} {'killed':>6} "
        f"{'survived':>8} {'timeout':>7} {'error':>5} {'invalid':>7} {'score':>6} {'equiv.':>6} "
        f"{'non-eq.':>7}"
    )
    print(header)
    kinds = ("killed", "survived", "timeout", "error", "invalid")
    grand = dict.fromkeys((*kinds, "equivalent"), 0)
    for module, t in tallies.items():
        c = {k: t.counts.get(k, 0) for k in kinds}
        equivalent = sum(
            1
            for o in outcomes
            if o.mutant.module == module
            and o.status == "survived"
            and dispositions.get(mutant_key(o.mutant)) == "equivalent"
        )
        for k, v in c.items():
            grand[k] += v
        grand["equivalent"] += equivalent
        cells = _score_cells(c, equivalent)
        print(f"{module:<12} {t.total:>7} {t.annotation:>6} {t.sampled:>4} {cells}")
    print(f"{'all':<12} {'':>7} {'':>6} {'':>4} " + _score_cells(grand, grand["equivalent"]))
    undecided = [
        mutant_key(o.mutant)
        for o in outcomes
        if o.status == "survived" and mutant_key(o.mutant) not in dispositions
    ]
    if undecided:
        print(f"{len(undecided)} survivor(s) without a disposition in {DISPOSITIONS.name}:")
        for key in undecided:
            print(f"  {key}")
    print("score = (killed + timed out) / (killed + timed out + survived); non-eq. = the same")
    print("without the survivors recorded as equivalent in mutation_dispositions.md; invalid =")
    print("the mutant does not compile (not run, not counted)")
    if unit is not None:
        report_unit(tallies, outcomes, dispositions, unit)


def report_unit(
    tallies: dict[str, Tally],
    outcomes: list[Outcome],
    dispositions: dict[str, str],
    unit: dict[str, str],
) -> None:
    """The suite's survivors against the MTA's own tests (``--unit-tests``), apart."""
    print()
    print("the suite's survivors against tests/reference (--unit-tests):")
    both_header = "non-eq. killed, suite + unit"
    print(f"{'module':<12} {'survived':>8} {'unit-killed':>11} {both_header:>29}")
    grand = [0, 0, 0, 0]
    for module in tallies:
        mine = [o for o in outcomes if o.mutant.module == module]
        detected = sum(o.status in ("killed", "timeout") for o in mine)
        survivors = [mutant_key(o.mutant) for o in mine if o.status == "survived"]
        by_unit = sum(unit.get(key) in ("killed", "timeout") for key in survivors)
        equivalent = sum(
            dispositions.get(key) == "equivalent" and unit.get(key) not in ("killed", "timeout")
            for key in survivors
        )
        non_eq = detected + len(survivors) - equivalent
        both = detected + by_unit
        for i, v in enumerate((len(survivors), by_unit, both, non_eq)):
            grand[i] += v
        share = f"{both}/{non_eq} = {100 * both / non_eq:.0f}%" if non_eq else "-"
        print(f"{module:<12} {len(survivors):>8} {by_unit:>11} {share:>29}")
    share = f"{grand[2]}/{grand[3]} = {100 * grand[2] / grand[3]:.0f}%" if grand[3] else "-"
    print(f"{'all':<12} {grand[0]:>8} {grand[1]:>11} {share:>29}")
    missing = [
        mutant_key(o.mutant)
        for o in outcomes
        if o.status == "survived" and mutant_key(o.mutant) not in unit
    ]
    if missing:
        print(f"{len(missing)} survivor(s) not yet run against the unit tests")


def _score_cells(c: dict[str, int], equivalent: int) -> str:
    detected = c["killed"] + c["timeout"]
    ran = detected + c["survived"]
    score = f"{100 * detected / ran:.0f}%" if ran else "-"
    non_eq = ran - equivalent
    adjusted = f"{100 * detected / non_eq:.0f}%" if non_eq else "-"
    return (
        f"{c['killed']:>6} {c['survived']:>8} {c['timeout']:>7} {c['error']:>5} "
        f"{c['invalid']:>7} {score:>6} {equivalent:>6} {adjusted:>7}"
    )


def report_again(out: Path, args: argparse.Namespace) -> int:
    """The table from a finished run's OUT/tallies.json and OUT/outcomes.jsonl."""
    saved = json.loads((out / "tallies.json").read_text())
    args.sample, args.seed = saved["sample"], saved["seed"]
    tallies = {m: Tally(*numbers) for m, numbers in saved["modules"].items()}
    outcomes = []
    for line in (out / "outcomes.jsonl").read_text().splitlines():
        row = json.loads(line)
        fields = dict(row["mutant"], end=tuple(row["mutant"]["end"]))
        o = Outcome(Mutant(**fields), row["status"], row["seconds"], row["diff"])
        outcomes.append(o)
        counts = tallies[o.mutant.module].counts
        counts[o.status] = counts.get(o.status, 0) + 1
    write_survivors(out, outcomes)
    report(tallies, outcomes, args, read_unit_outcomes(out))
    return 0


def read_unit_outcomes(out: Path) -> dict[str, str] | None:
    path = out / "unit_outcomes.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {row["key"]: row["status"] for row in rows}


def unit_tests_on_survivors(out: Path, args: argparse.Namespace) -> int:
    """Run each survivor of a finished run against its module's tests/reference files;
    survivors already in OUT/unit_outcomes.jsonl keep their result (delete it to redo)."""
    done = read_unit_outcomes(out) or {}
    survivors = []
    for line in (out / "outcomes.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["status"] == "survived" and row["key"] not in done:
            survivors.append(Mutant(**dict(row["mutant"], end=tuple(row["mutant"]["end"]))))
    lanes = [make_lane(out, i, unit_tests=True) for i in range(args.lanes)]

    def job(m: Mutant) -> Callable[[Path], Outcome]:
        def confirmed(lane: Path) -> Outcome:
            # These tests time real sockets on a shared machine: a kill counts only if a
            # second run fails too (a first failure alone is recorded as "flaky").
            first = run_mutant(lane, m, UNIT_TIMEOUT, unit_test_args(m.module))
            if first.status != "killed":
                return first
            again = run_mutant(lane, m, UNIT_TIMEOUT, unit_test_args(m.module))
            return first if again.status == "killed" else Outcome(m, "flaky", first.seconds)

        return confirmed

    modules = sorted({m.module for m in survivors})
    passed = run_unmutated(lanes, modules, UNIT_TIMEOUT, unit_test_args, "its unit tests")
    if passed is None:
        return 2
    for module, seconds in passed.items():
        print(f"{module}: unmutated unit tests pass in {seconds:.0f} s", flush=True)
    results = in_lanes(lanes, {mutant_key(m): job(m) for m in survivors})
    with (out / "unit_outcomes.jsonl").open("a") as log:
        for key, o in results.items():
            by = killed_by(o.output) if o.status == "killed" else None
            log.write(json.dumps({"key": key, "status": o.status, "killed_by": by}) + "\n")
            print(f"{o.status:<8} {o.seconds:5.0f}s {key}" + (f" by {by}" if by else ""))
    return report_again(out, args)


# --- main -----------------------------------------------------------------------------


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_run-tests":
        sub = argparse.ArgumentParser()
        sub.add_argument("--lane", type=Path, required=True)
        sub.add_argument("--timeout", type=float, required=True)
        ns, rest = sub.parse_known_args(sys.argv[2:])
        return run_tests(ns.lane, ns.timeout, [a for a in rest if a != "--"])

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", nargs="+", default=list(BEHAVIOURS)[:5], choices=BEHAVIOURS)
    parser.add_argument("--sample", type=int, default=16, help="mutants per module; 0: all")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--dry-run", action="store_true", help="list the mutants to run, run none")
    parser.add_argument(
        "--report-only", action="store_true",
        help="print the table again from OUT (after editing the dispositions), run nothing",
    )  # fmt: skip
    parser.add_argument(
        "--unit-tests", action="store_true",
        help="run a finished run's survivors against the MTA's own tests (tests/reference)",
    )  # fmt: skip
    parser.add_argument("--lanes", type=int, default=2, help="mutants tested at once")
    parser.add_argument("--timeout-factor", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "mutation")
    parser.add_argument(
        "--node-start", choices=["fork", "exec"], default="fork",
        help="how the reference target starts nodes (SHADOWCHECK_NODE_START)",
    )  # fmt: skip
    args = parser.parse_args()
    os.environ["SHADOWCHECK_NODE_START"] = args.node_start
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        return report_again(out, args)
    if args.unit_tests:
        return unit_tests_on_survivors(out, args)
    lanes = [make_lane(out, i) for i in range(args.lanes)]

    tallies: dict[str, Tally] = {}
    skipped: dict[str, list[str]] = {}
    plan: dict[str, list[Mutant]] = {}
    for module in args.modules:
        mutants = list_mutants(module, out)
        spans = annotation_spans((ROOT / "reference_impl" / f"{module}.py").read_text())
        candidates = [m for m in mutants if not in_annotation(m, spans)]
        chosen = candidates
        if args.sample and args.sample < len(candidates):
            chosen = random.Random(f"{args.seed}:{module}").sample(candidates, args.sample)
        chosen_ids = {m.job_id for m in chosen}
        skipped[module] = [m.job_id for m in mutants if m.job_id not in chosen_ids]
        tallies[module] = Tally(len(mutants), len(mutants) - len(candidates), len(chosen))
        plan[module] = chosen

    if args.dry_run:
        for module in args.modules:
            for m in sorted(plan[module], key=lambda m: (m.line, m.col)):
                print(f"{mutant_key(m)} in {m.definition}")
        return 0

    if not canary(lanes[0], args.modules[0]):
        print("canary survived: the nodes do not run the lane's code; no score", file=sys.stderr)
        return 2
    print("canary killed: the node processes run the mutated copy")

    # the unmutated selection must pass; its time sets the per-mutant timeout
    timeouts: dict[str, float] = {}

    passed = run_unmutated(lanes, args.modules, 900, lambda _: None, "its selection")
    if passed is None:
        return 2
    for module, seconds in passed.items():
        timeouts[module] = args.timeout_factor * seconds + 120  # a kill waits out its check
        print(f"{module}: unmutated selection {seconds:.0f} s, timeout {timeouts[module]:.0f} s,"
              f" {tallies[module].sampled} of {tallies[module].total} mutants "
              f"({tallies[module].annotation} in annotations)", flush=True)  # fmt: skip

    (out / "tallies.json").write_text(
        json.dumps({
            "sample": args.sample, "seed": args.seed,
            "modules": {m: [t.total, t.annotation, t.sampled] for m, t in tallies.items()},
        })
    )  # fmt: skip

    # modules interleaved, so that every module progresses alike
    work: queue.Queue[Mutant] = queue.Queue()
    longest = max(len(p) for p in plan.values())
    for i in range(longest):
        for module in args.modules:
            if i < len(plan[module]):
                work.put(plan[module][i])
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    total = work.qsize()
    log = (out / "outcomes.jsonl").open("w")

    def lane_loop(lane: Path) -> None:
        while True:
            try:
                m = work.get_nowait()
            except queue.Empty:
                return
            o = run_mutant(lane, m, timeouts[m.module])
            with lock:
                outcomes.append(o)
                tallies[m.module].counts[o.status] = tallies[m.module].counts.get(o.status, 0) + 1
                log.write(json.dumps({
                    "key": mutant_key(m), "mutant": asdict(m), "status": o.status,
                    "seconds": round(o.seconds, 1), "diff": o.diff,
                    "killed_by": killed_by(o.output) if o.status == "killed" else None,
                    "output": o.output[-1500:] if o.status != "survived" else "",
                }) + "\n")  # fmt: skip
                log.flush()
                print(f"[{len(outcomes)}/{total}] {o.status:<8} {o.seconds:5.0f}s "
                      f"{mutant_key(m)}", flush=True)  # fmt: skip

    threads = [threading.Thread(target=lane_loop, args=(lane,)) for lane in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    record(out, outcomes, skipped)
    write_survivors(out, outcomes)
    report(tallies, outcomes, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
