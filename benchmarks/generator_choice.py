"""Benchmark: our seeded generator and ddmin, or Hypothesis's stateful testing?

    nice -n 10 python3 benchmarks/generator_choice.py [--quick] [--plans 1000]
        [--replay FILE:VARIANT ...] [--replays 5] [--replay-only] [--out table.md]

Issue 27 asks for Hypothesis's stateful testing "or a generator of our own only if
measured better". Both sides here draw the SAME operations: generator.py's ``Drawer``
and ``Operation`` (sends, waits, node and next-hop faults, live settings, clock
advances, resubmissions). Ours is ``plan()``; Hypothesis's is a
``RuleBasedStateMachine`` whose rules are the drawer's operations, enabled by the same
cluster state (``ClusterState``) as ``plan()``'s, and whose random draws come from
``st.randoms()`` so that Hypothesis shrinks them.

1. Shrink cost. Every shrink attempt is a real cluster run (13.2 s measured), so what
   counts is the number of ORACLE CALLS to a 1-minimal result, and what each shrinker
   holds after Hypothesis's own shrinking limit (300 s: 22 runs). The oracle is offline: a failure
   is a pattern of operations (a core that a real ddmin run kept, or a pattern a model
   rule needs), judged on the cluster state the kept operations produce. (a) our
   ``shrink_operations`` (ddmin over operation numbers, engine/shrink.py) from the
   first failing plans of our generator; (b) Hypothesis from its own first failing
   example, every example it executes counted (a started machine = a cluster run), and
   (a') ddmin from that same first failing example, for a like-for-like start.
   ``--quick`` (under a minute) leaves the real cores out: Hypothesis may take
   thousands of runs to shrink one.
2. Finding: how many of 1,000 scenarios of each generator hold the operation patterns
   the model's rules need (offline).
3. Replay: how often a shrunk scenario file reproduces its FAIL on its variant, run
   again and again on the real cluster (``--replay``); a replay that does not fail is
   what Hypothesis's stateful replay would report as ``Flaky``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFORMANCE = ROOT / "tests" / "conformance"
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pytest_shadowcheck.engine.exploration_plan import (  # noqa: E402
    ClusterState,
    ExplorationPlan,
    Operation,
    topology_data,
)
from pytest_shadowcheck.engine.generator import EXPLORE_TOPOLOGIES, Drawer, plan  # noqa: E402
from pytest_shadowcheck.engine.shrink import Budget, shrink_operations  # noqa: E402
from pytest_shadowcheck.plugin.exploration import DEEP_OPERATIONS  # noqa: E402
from pytest_shadowcheck.scenario.capabilities import CAPABILITIES  # noqa: E402
from pytest_shadowcheck.verdict import CheckResult, Status, Verdict  # noqa: E402

#: the reference's capabilities: every operation can be drawn
CAPS = frozenset(CAPABILITIES)
#: seconds one shrink attempt costs on the cluster: the mean of the 50 attempts (10-22 s
#: each, 659 s in all) of the four shrinks of the explore_variants run in CORES
SECONDS_PER_CALL = 13.2
#: Hypothesis stops shrinking after MAX_SHRINKING_SECONDS (300 s, its engine's constant):
#: this many cluster runs; ddmin is given the same number to compare what each holds then
CUTOFF_RUNS = int(300 // SECONDS_PER_CALL)


# -- what an operation is, seen from the cluster state --------------------------------


def _first(op: Operation) -> str:
    return next(iter(op.steps[0])) if op.steps else ""


def _is_send(op: Operation) -> bool:
    return _first(op) == "send"


def _starts(op: Operation, nodes: Sequence[str], category: str) -> bool:
    """Whether ``op`` starts a fault of ``category`` (node, hop)."""
    kind, what = op.effect
    if kind == "script":
        return category == "hop"
    if kind == "cut":
        to_node = what.partition("->")[2] in nodes
        return to_node == (category == "node")
    return category == "node" and kind in ("down", "pause")


def _restarts(op: Operation) -> bool:
    return _first(op) in ("restart", "wipe")


Pattern = Callable[[Sequence[Operation], Sequence[str]], bool]


def _replay(ops: Sequence[Operation], nodes: Sequence[str]) -> list[tuple[Operation, ClusterState]]:
    """Each operation with the cluster state just before it (faults on)."""
    state = ClusterState(tuple(nodes))
    out = []
    for op in ops:
        out.append((op, ClusterState(state.nodes, set(state.down), set(state.paused),
                               set(state.cut), set(state.scripted))))  # fmt: skip
        state.apply(op.effect)
    return out


def held_then_node_fault(ops: Sequence[Operation], nodes: Sequence[str]) -> bool:
    """A next hop holds mail back (its fault on, a send since it started) and a node
    fails: what shadow copies are for (PR-1, DI-1)."""
    sent = False
    for op, before in _replay(ops, nodes):
        if not before.faulted("hop"):
            sent = False
        elif _is_send(op):
            sent = True
        elif sent and _starts(op, nodes, "node"):
            return True
    return False


def setting_then_send(ops: Sequence[Operation], nodes: Sequence[str]) -> bool:
    """A setting changed while the cluster runs, then a send (CR-4/5/6 live)."""
    changed = False
    for op in ops:
        changed = changed or _first(op) == "set_settings"
        if changed and _is_send(op):
            return True
    return False


def restart_while_held(ops: Sequence[Operation], nodes: Sequence[str]) -> bool:
    """A node restarted (same or new queue database) while a copy is held: a send
    since a next-hop fault started, still on (PR-2, PR-3, DI-5)."""
    sent = False
    for op, before in _replay(ops, nodes):
        if not before.faulted("hop"):
            sent = False
        elif _is_send(op):
            sent = True
        elif sent and _restarts(op):
            return True
    return False


def point_then_send(ops: Sequence[Operation], nodes: Sequence[str]) -> bool:
    """A protocol-point cut on a node-to-node link, then a send while it is on (CR-3,
    DI-2)."""
    points: set[str] = set()
    for op, before in _replay(ops, nodes):
        points &= before.node_links()  # a healed link's point is gone
        if _is_send(op) and points:
            return True
        fault = op.steps[0].get("fault", {}) if op.steps else {}
        if fault.get("kind") == "cut_at" and _starts(op, nodes, "node"):
            points.add(op.effect[1])
    return False


#: the patterns the model's rules need, for finding (part 2) and as shrink oracles
PATTERNS: dict[str, Pattern] = {
    "hop holds mail, then a node fault": held_then_node_fault,
    "live setting change, then a send": setting_then_send,
    "restart while a copy is held": restart_while_held,
    "protocol-point cut between nodes, then a send": point_then_send,
}

#: cores a real shrink kept (normalised labels, in order), from the command
#: benchmarks/explore_variants.py runs (seed 11, 120 s, 40 shrink attempts) on these
#: variants; offline, ddmin on the same plans with these cores as the oracle makes the
#: same number of attempts as the real shrink did (5, 19, 20 and 6)
CORES: dict[str, tuple[str, ...]] = {
    "shadows-when-disabled": ("resubmit DB2 on mbx1", "set ShadowRedundancyEnabled=false"),
    "never-rejects-unredundant": (
        "set RejectMessageOnShadowFailure=true",
        "pause mbx2",
        "send via mbx1",
    ),
    "shadow-drops-copies": ("mailbox refuses DATA with 421", "send via mbx2", "resume mbx2"),
    "shadow-ignores-notifications": ("send via mbx2",),
}


def normalised(label: str) -> str:
    """An operation's label without its message number (``send m3 via n1``)."""
    return re.sub(r"^send m\d+ ", "send ", label)


def core_pattern(core: Sequence[str]) -> Pattern:
    def holds(ops: Sequence[Operation], nodes: Sequence[str]) -> bool:
        want = iter(core)
        need = next(want, None)
        for op in ops:
            if need is not None and normalised(op.label) == need:
                need = next(want, None)
        return need is None

    return holds


# -- Hypothesis's side: the same operations as a state machine ------------------------


@dataclass
class _Tally:
    """What one Hypothesis run executed: every machine started is a cluster run."""

    pattern: Pattern | None = None
    runs: int = 0
    first_failure: int = 0
    #: the fewest operations of a failing run, and the run that first had them (the
    #: final example is the simplest choice sequence, not always the shortest)
    shortest: int = 0
    reached: int = 0
    first_ops: list[Operation] = field(default_factory=list)
    last_failing: list[Operation] = field(default_factory=list)
    #: (run, operations) of every failing run: what Hypothesis holds at any run
    failing: list[tuple[int, int]] = field(default_factory=list)
    nodes: tuple[str, ...] = ()
    collected: list[tuple[list[Operation], tuple[str, ...]]] = field(default_factory=list)


class _PatternFound(AssertionError):
    pass


def machine(tally: _Tally) -> type[RuleBasedStateMachine]:
    """A state machine whose rules are Drawer's operations, enabled as plan() enables
    them; its teardown is the oracle (tally.pattern) or collects the run."""
    usable = [
        t for t in EXPLORE_TOPOLOGIES
        if topology_data(t).get("clock", "real") != "virtual" or "virtual_clock" in CAPS
    ]  # fmt: skip
    r = st.randoms(use_true_random=False)

    class Exploration(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            tally.runs += 1
            self.ops: list[Operation] = []
            self.drawer: Drawer | None = None
            self.plan: ExplorationPlan | None = None

        @initialize(
            topology=st.sampled_from(usable),
            beat=st.sampled_from((0.5, 1.0)),
            span=st.sampled_from((2.0, 3.0, 4.0)),
            reject=st.sampled_from((True, True, True, False)),
            hold=st.sampled_from((600.0, 3600.0)),
        )
        def start(self, topology: str, beat: float, span: float, reject: bool, hold: float) -> None:
            values: dict[str, Any] = {
                "ShadowHeartbeatFrequency": beat,
                "ShadowResubmitTimeSpan": span,
                "TransientFailureRetryInterval": 0.5,
                "SendConnectionInactivityTimeout": 1.0,
                "RejectMessageOnShadowFailure": reject,
            }
            if topology_data(topology).get("clock") == "virtual":
                values["SafetyNetHoldTime"] = hold
            self.drawer = Drawer(random.Random(0), topology, CAPS)
            self.drawer.reject = reject
            self.drawer.single_holder = not reject
            self.plan = ExplorationPlan(0, 0, topology, values, self.ops, CAPS)

        # the bookkeeping plan()'s loop does around each operation
        def _draw(self, rng: random.Random) -> Drawer:
            assert self.drawer is not None and self.plan is not None
            self.drawer.rng = rng
            self.drawer.recovery = self.plan.recovery(self.ops)
            return self.drawer

        def _done(self, op: Operation, ended: bool = False) -> None:
            drawer = self.drawer
            assert drawer is not None
            drawer.state.apply(op.effect)
            self.ops.append(op)
            if ended and drawer.state.quiet() and drawer.reject and drawer.redundancy:
                drawer.single_holder = False

        @rule(rng=r)
        def send(self, rng: random.Random) -> None:
            self._done(self._draw(rng).send())

        @rule(rng=r)
        def wait(self, rng: random.Random) -> None:
            self._done(self._draw(rng).wait())

        @precondition(lambda self: not self.drawer.state.faulted("node"))
        @rule(rng=r)
        def start_node_fault(self, rng: random.Random) -> None:
            self._done(self._draw(rng).start_fault("node"))

        @precondition(lambda self: self.drawer.state.faulted("node"))
        @rule(rng=r)
        def end_node_fault(self, rng: random.Random) -> None:
            self._done(self._draw(rng).end_fault("node"), ended=True)

        @precondition(lambda self: not self.drawer.state.faulted("hop"))
        @rule(rng=r)
        def start_hop_fault(self, rng: random.Random) -> None:
            self._done(self._draw(rng).start_fault("hop"))

        @precondition(lambda self: self.drawer.state.faulted("hop"))
        @rule(rng=r)
        def end_hop_fault(self, rng: random.Random) -> None:
            self._done(self._draw(rng).end_fault("hop"), ended=True)

        @precondition(lambda self: self.drawer.can("set_settings"))
        @rule(rng=r)
        def change_setting(self, rng: random.Random) -> None:
            self._done(self._draw(rng).set_settings())

        @precondition(lambda self: self.drawer.virtual and self.drawer.can("advance"))
        @rule(minutes=st.sampled_from((1, 5, 20, 45)))
        def advance(self, minutes: int) -> None:
            step = {"advance": f"{minutes}m"}
            self._done(Operation(f"advance {minutes}m", (step,), behaviours=("SN-3",)))

        @precondition(
            lambda self: (
                self.drawer.can("resubmit")
                and self.drawer.state.quiet()
                and self.drawer.resubmits < 1
            )
        )
        @rule(data=st.data())
        def resubmit(self, data: st.DataObject) -> None:
            drawer = self.drawer
            assert drawer is not None and self.plan is not None
            node = data.draw(st.sampled_from(drawer.nodes))
            databases = sorted(
                set(topology_data(self.plan.topology)["directory"]["recipients"].values())
            )
            database = data.draw(st.sampled_from(databases))
            step = {"resubmit": {"node": node, "database": database, "start": "-1h", "end": "now"}}
            drawer.resubmits += 1
            self._done(Operation(f"resubmit {database} on {node}", (step,), behaviours=("SN-5",)))

        @invariant()
        def oracle(self) -> None:
            # checked after every operation, as the model check is: a run stops at the
            # operation where the failure shows
            if self.drawer is None or tally.pattern is None:
                return
            if tally.pattern(self.ops, self.drawer.nodes):
                if not tally.first_failure:
                    tally.first_failure = tally.runs
                    tally.first_ops = list(self.ops)
                    tally.nodes = self.drawer.nodes
                if not tally.shortest or len(self.ops) < tally.shortest:
                    tally.shortest, tally.reached = len(self.ops), tally.runs
                tally.last_failing = list(self.ops)
                tally.failing.append((tally.runs, len(self.ops)))
                raise _PatternFound(f"{len(self.ops)} operations")

        def teardown(self) -> None:
            if self.drawer is not None and tally.pattern is None:
                tally.collected.append((list(self.ops), self.drawer.nodes))

    return Exploration


def _hypothesis_settings(examples: int, shrink: bool) -> settings:
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    return settings(
        database=None,
        derandomize=True,
        max_examples=examples,
        stateful_step_count=DEEP_OPERATIONS,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )


def hypothesis_shrink(pattern: Pattern, trial: int, examples: int) -> _Tally:
    tally = _Tally(pattern=pattern)
    factory = seed(trial)(machine(tally))
    with contextlib.suppress(_PatternFound):
        run_state_machine_as_test(factory, settings=_hypothesis_settings(examples, True))
    return tally


def hypothesis_collect(count: int) -> list[tuple[list[Operation], tuple[str, ...]]]:
    tally = _Tally()
    factory = seed(1)(machine(tally))
    run_state_machine_as_test(factory, settings=_hypothesis_settings(count, False))
    return tally.collected


# -- our side: ddmin over operation numbers (engine/shrink.py) -------------------------


def ddmin_calls(
    ops: Sequence[Operation], nodes: Sequence[str], pattern: Pattern
) -> tuple[int, int, int]:
    """(oracle calls, final length, length after CUTOFF_RUNS calls) of
    shrink_operations on ``ops``, known to fail."""

    def verdict(failing: bool) -> Verdict:
        v = Verdict("explored", ["CR-1"])
        status = Status.FAIL if failing else Status.PASS
        v.add(CheckResult("pattern", status, "", ""))
        return v

    def attempt(keep: list[int]) -> Verdict:
        return verdict(pattern([ops[i] for i in keep], nodes))

    result = shrink_operations(verdict(True), len(ops), attempt, Budget(10**6, 1e9))
    cut = shrink_operations(verdict(True), len(ops), attempt, Budget(CUTOFF_RUNS, 1e9))
    return result.attempts, len(result.kept), len(cut.kept)


def one_minimal(ops: Sequence[Operation], nodes: Sequence[str], pattern: Pattern) -> bool:
    return not any(
        pattern([o for j, o in enumerate(ops) if j != i], nodes) for i in range(len(ops))
    )


# -- the three measurements -----------------------------------------------------------


@dataclass
class HypothesisTrial:
    find: int  # runs up to the first failing one
    shrink: int  # runs after it, the final replay included
    to_shortest: int  # runs after it until the shortest failing run was first seen
    final: int  # operations of the example Hypothesis reports
    shortest: int
    minimal: bool  # no single operation of the final example can be left out
    at_cutoff: int  # operations of the example it holds after CUTOFF_RUNS shrink runs


@dataclass
class ShrinkRow:
    oracle: str
    #: ddmin from our first failing plans: (calls, final length), all 1-minimal
    ours: list[tuple[int, int, int]] = field(default_factory=list)
    hyp: list[HypothesisTrial] = field(default_factory=list)
    #: ddmin from Hypothesis's first failing example, and that example's length
    ours_same_start: list[tuple[int, int, int]] = field(default_factory=list)
    start_lengths: list[int] = field(default_factory=list)


def measure_shrink(name: str, pattern: Pattern, trials: int, examples: int) -> ShrinkRow:
    row = ShrinkRow(name)
    index = 0
    while len(row.ours) < trials and index < 2000:
        explored = plan(11, index, capabilities=CAPS, length=DEEP_OPERATIONS)
        nodes = topology_data(explored.topology)["nodes"]
        if pattern(explored.operations, nodes):
            row.ours.append(ddmin_calls(explored.operations, nodes, pattern))
        index += 1
    for trial in range(trials):
        tally = hypothesis_shrink(pattern, trial, examples)
        if not tally.first_failure:
            continue
        final = tally.last_failing
        row.hyp.append(
            HypothesisTrial(
                tally.first_failure,
                tally.runs - tally.first_failure,
                tally.reached - tally.first_failure,
                len(final),
                tally.shortest,
                one_minimal(final, tally.nodes, pattern),
                [n for run, n in tally.failing if run <= tally.first_failure + CUTOFF_RUNS][-1],
            )
        )
        row.start_lengths.append(len(tally.first_ops))
        row.ours_same_start.append(ddmin_calls(tally.first_ops, tally.nodes, pattern))
    return row


def _median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):g}" if values else "-"


def shrink_table(rows: list[ShrinkRow], trials: int) -> str:
    lines = [
        "| failure = | ddmin on our plans (16 ops): calls, final length | "
        "Hypothesis: runs to find, runs to shrink (to its shortest), final length "
        "(shortest seen), 1-minimal | ddmin from Hypothesis's first failure: start "
        "length, calls, final length | "
        f"length held after {CUTOFF_RUNS} shrink runs (Hypothesis's 300 s limit): "
        "ddmin from the same start, Hypothesis | "
        f"shrink time at {SECONDS_PER_CALL:g} s a run: ddmin on ours, Hypothesis |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        h, same = r.hyp, r.ours_same_start
        ours_calls = [c for c, _, _ in r.ours]
        lines.append(
            f"| {r.oracle} | {_median(ours_calls)}, {_median([n for _, n, _ in r.ours])} | "
            f"{_median([t.find for t in h])}, {_median([t.shrink for t in h])} "
            f"({_median([t.to_shortest for t in h])}), {_median([t.final for t in h])} "
            f"({_median([t.shortest for t in h])}), {sum(t.minimal for t in h)} of {len(h)} "
            f"(found in {len(h)} of {trials}) | "
            f"{_median(r.start_lengths)}, {_median([c for c, _, _ in same])}, "
            f"{_median([n for _, n, _ in same])} | "
            f"{_median([k for _, _, k in same])}, {_median([t.at_cutoff for t in h])} | "
            f"{_cost(ours_calls)}, {_cost([t.shrink for t in h])} |"
        )
    return "\n".join(lines)


def _cost(calls: Sequence[int]) -> str:
    if not calls:
        return "-"
    return f"{statistics.median(calls) * SECONDS_PER_CALL / 60:.0f} min"


def finding_table(count: int) -> str:
    ours = []
    for index in range(count):
        explored = plan(1, index, capabilities=CAPS, length=DEEP_OPERATIONS)
        ours.append((explored.operations, tuple(topology_data(explored.topology)["nodes"])))
    hyp = hypothesis_collect(count)
    lines = [
        f"| pattern | ours: scenarios with it, of {len(ours)} | "
        f"Hypothesis: scenarios with it, of {len(hyp)} | "
        "ours: per 1,000 operations | Hypothesis: per 1,000 operations |",
        "|---|---|---|---|---|",
    ]
    ops_ours = sum(len(o) for o, _ in ours)
    ops_hyp = sum(len(o) for o, _ in hyp)
    for name, pattern in PATTERNS.items():
        a = sum(pattern(o, n) for o, n in ours)
        b = sum(pattern(o, n) for o, n in hyp)
        lines.append(
            f"| {name} | {a} ({100 * a / len(ours):.0f} %) | "
            f"{b} ({100 * b / max(len(hyp), 1):.0f} %)"
            f" | {1000 * a / ops_ours:.1f} | {1000 * b / max(ops_hyp, 1):.1f} |"
        )
    lines.append(
        f"| (operations generated) | {ops_ours} ({ops_ours / len(ours):.1f} a scenario) | "
        f"{ops_hyp} ({ops_hyp / max(len(hyp), 1):.1f} a scenario) | | |"
    )
    return "\n".join(lines)


def replay_table(files: Sequence[str], replays: int) -> str:
    """Each shrunk scenario file run ``replays`` times on its variant: how often it
    FAILs again (the rest is what Hypothesis would call Flaky)."""
    lines = [
        "| shrunk scenario | variant | FAILed again | the other runs | seconds a run (median) |",
        "|---|---|---|---|---|",
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(CONFORMANCE), *filter(None, [env.get("PYTHONPATH")])]
    )
    for spec in files:
        path, _, variant = spec.rpartition(":")
        failed, others, times = 0, [], []
        for _ in range(replays):
            began = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "--shadowcheck",
                 "--shadowcheck-target", f"broken:{variant}",
                 "--shadowcheck-target-plugin", "broken_target",
                 "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-rA", path],
                cwd=ROOT, env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            times.append(time.monotonic() - began)
            if done.returncode == 1:
                failed += 1
            else:
                # pytest's last line, e.g. "1 passed in 11.02s", and why (-rA)
                tail = [ln for ln in done.stdout.splitlines() if ln.strip()]
                others.append(tail[-1].strip("= ") if tail else f"exit {done.returncode}")
        lines.append(
            f"| {Path(path).name} | {variant} | {failed} of {replays} | "
            f"{'; '.join(others) or '-'} | {statistics.median(times):.0f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer plans and trials (<1 min)")
    parser.add_argument("--plans", type=int, default=1000, help="scenarios for the finding table")
    parser.add_argument("--trials", type=int, default=10, help="shrinks per oracle and side")
    parser.add_argument("--replay", nargs="*", default=[], metavar="FILE:VARIANT")
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--replay-only", action="store_true", help="only part 3")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here")
    args = parser.parse_args()
    plans, trials, examples = args.plans, args.trials, 300
    if args.quick:
        plans, trials, examples = 200, 3, 150
    began = time.monotonic()
    parts: list[str] = []
    if not args.replay_only:
        oracles: dict[str, Pattern] = dict(PATTERNS)
        if not args.quick:  # Hypothesis may take thousands of runs to shrink one
            oracles.update({f"core of {n}": core_pattern(c) for n, c in CORES.items()})
        rows = [measure_shrink(name, p, trials, examples) for name, p in oracles.items()]
        parts += [
            f"## 1. Shrink cost (oracle calls, each a cluster run; {trials} trials each, "
            f"Hypothesis given {examples} examples to find; medians)",
            "",
            shrink_table(rows, trials),
            "",
            "## 2. Finding (offline, no cluster)",
            "",
            finding_table(plans),
        ]
    if args.replay:
        table = replay_table(args.replay, args.replays)
        parts += ["", "## 3. Replay on the real cluster", "", table]
    parts += ["", f"({time.monotonic() - began:.0f} s)"]
    text = "\n".join(parts) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
