"""The engine: run one scenario against a target and judge it.

It starts the next-hop sinks and a FaultProxy for every link (client->node,
node->node, node->sink), has the target start the nodes pointed at those
proxies, runs the steps (send, faults, node actions, waits, clock advances,
control calls, inline checks: each kind by its handler in :mod:`.steps`, given the
typed spec the loader built), then the expectations and the always-on
no-loss invariant, and returns a :class:`~pytest_shadowcheck.verdict.Verdict`.
The :class:`Run` owns the run's state (proxies, sinks, nodes down or frozen, the
configuration changes a node that comes back gets again); the handlers act through it.
Everything is recorded in one :class:`~pytest_shadowcheck.history.History`.
Processes and sockets are released on every exit path (also Ctrl-C).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import threading
import traceback
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_shadowcheck.checks.bounces import bounce_invariant
from pytest_shadowcheck.checks.evaluate import run_check
from pytest_shadowcheck.checks.inside import queue_entries
from pytest_shadowcheck.checks.integrity import integrity_invariant
from pytest_shadowcheck.checks.lateness import overloaded, said
from pytest_shadowcheck.checks.no_loss import no_loss_invariant, premise_missing
from pytest_shadowcheck.checks.workload import WorkloadReport
from pytest_shadowcheck.engine.lag import watching_lag
from pytest_shadowcheck.engine.steps import STEPS, step_label
from pytest_shadowcheck.errors import ScenarioError
from pytest_shadowcheck.history import History
from pytest_shadowcheck.network import FaultProxy, MailSink
from pytest_shadowcheck.network.messages import Message
from pytest_shadowcheck.network.smtp_text import trace_value
from pytest_shadowcheck.progress import Progress
from pytest_shadowcheck.scenario.capabilities import QUEUE_PATHS
from pytest_shadowcheck.scenario.model import Scenario, Step, needs_lazy_storage
from pytest_shadowcheck.scenario.replay import Selection
from pytest_shadowcheck.scenario.steps import ACTION_SPECS, SEND_TIMEOUT, settings_text
from pytest_shadowcheck.targets.base import ClusterPlan, NodeHandle, Target, TargetError
from pytest_shadowcheck.verdict import CheckResult, Status, Verdict

__all__ = ["STOPPED", "Run", "TimelineWriter", "run_scenario"]

#: (history, workload report, scenario name) -> where the timeline page was written
TimelineWriter = Callable[[History, WorkloadReport, str], Path]

START_TIMEOUT = 60.0
#: where an MTA routing by MX connects (SMTP relay, RFC 5321 section 4.5.4.2)
MX_PORT = 25


@dataclass
class Run:
    """The state of one scenario run (what the checks read)."""

    scenario: Scenario
    target: Target
    history: History
    progress: Progress
    workdir: Path
    token: str = field(default_factory=lambda: secrets.token_hex(4))
    proxies: dict[str, FaultProxy] = field(default_factory=dict)
    sinks: dict[str, MailSink] = field(default_factory=dict)
    handles: dict[str, NodeHandle] = field(default_factory=dict)
    messages: dict[str, Message] = field(default_factory=dict)
    #: (t, node, action) for kill / restart / wipe / pause / resume
    node_actions: list[tuple[float, str, str]] = field(default_factory=list)
    down: set[str] = field(default_factory=set)
    #: frozen nodes: their control API cannot answer, so the engine does not call it
    paused: set[str] = field(default_factory=set)
    virtual_now: float | None = None
    #: configuration changed during the run (set_settings, directory, route), with the nodes
    #: it was for (None: all). A node that was down or frozen gets what it missed when it
    #: is back. What it took it must keep itself, as an admin's configuration is kept
    #: (a restart or a new queue database does not undo a Set-TransportConfig), except
    #: the directory: the organisation's, which every node reads again as it starts.
    changes: list[tuple[list[str] | None, tuple[Any, ...]]] = field(default_factory=list)
    #: node down or frozen -> how many changes there were then: the later ones skipped it
    missed_since: dict[str, int] = field(default_factory=dict)
    #: workload steps: N multiplied by this (--shadowcheck-workload-scale), seed replaced
    #: by this when given (--shadowcheck-workload-seed)
    workload_scale: float = 1.0
    workload_seed: int | None = None
    #: workload name -> the part of its plan to play (--shadowcheck-replay)
    workload_selection: dict[str, Selection] = field(default_factory=dict)
    #: the command line that runs this scenario again, for a workload's replay command
    replay_command: str = ""
    #: writes a workload's timeline page and says where (the report layer's, handed down
    #: by whoever runs the scenario: the engine does not know where reports go)
    timeline_writer: TimelineWriter | None = None
    #: changes a target without reload applied by restarting a node (Verdict.caveats)
    caveats: list[str] = field(default_factory=list)
    #: a Safety Net resubmission was asked for: a request may wait for a primary (SN-7)
    #: in no queue, so until_quiet also reads the requests
    resubmitted: bool = False

    # -- helpers the checks use ------------------------------------------------


    @property
    def peer_secret(self) -> str:
        """The boundary's secret in this run's cluster plan (docs/protocol.md section 3)."""
        return f"shadowcheck-{self.token}"

    def excerpt(
        self, around: float, links: list[str], before: float = 3.0, after: float = 2.0
    ) -> str:
        wanted = set()
        for link in links:
            if link.endswith("->*"):
                node = link[:-3]
                wanted |= {name for name in self.proxies if name.startswith(f"{node}->")}
            else:
                wanted.add(link)
        return self.history.excerpt(
            around, links=sorted(wanted) or None, before=before, after=after
        )

    async def settled_message(self, ref: str, timeout: float = SEND_TIMEOUT) -> Message:
        msg = self.messages[ref]
        if msg.task is not None and not msg.task.done():
            self.progress.waiting(timeout, f"for the reply to {ref}")
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(msg.task), timeout)
        return msg

    async def still_held(self, ref: str) -> str | None:
        """Name of a live node whose active or shadow queue holds ``ref`` (control API).

        A shadow copy counts only while the message's primary is down: with the primary
        up and without the message, no rule of the catalogue delivers that copy (a
        shadow promotes when its primary is unreachable, PR-1, or back on a new queue
        database, PR-2, which the settle has given it time to see)."""
        queues = [q for q in ("active", "shadow") if self.target.can(*_queue_call(q))]
        msg = self.messages[ref]
        if msg.via not in self.down and msg.via not in self.paused:
            queues = [q for q in queues if q != "shadow"]
        if not queues:
            return None
        for node in self.scenario.topology.nodes:
            if node in self.down or node in self.paused:
                continue
            for queue in queues:
                try:
                    answer = await self.target.control(node, "GET", QUEUE_PATHS[queue])
                except TargetError:
                    continue
                if any(msg.carried_in(e) for e in queue_entries(answer)):
                    return f"{node} ({queue} queue)"
        return None

    async def until_quiet(self, timeout: float) -> float | None:
        """Wait, ``timeout`` at most, until the cluster holds nothing: every node up, no
        send waiting for its reply, and every node's active and shadow queues empty, seen
        so twice a heartbeat apart. Returns the seconds it took, None if never quiet.

        A settled cluster changes no more by itself (Safety Net aside, which only a
        resubmission empties into a queue), so what a fixed wait would see after this it
        sees now; a cluster that is not settled gets the whole ``timeout``, as a fixed
        wait. After a resubmission was asked for, a request still running counts as held
        (it waits for a primary in no queue). A target whose queues (or requests) cannot
        be read, or a node down or frozen (its queue unseen), gets the whole ``timeout``."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + timeout
        readable = all(self.target.can(*_queue_call(q)) for q in ("active", "shadow"))
        if self.resubmitted:
            readable = readable and self.target.can("control_api", _REQUESTS)
        unseen = len(self.running()) < len(self.scenario.topology.nodes)
        if not readable or unseen:
            await asyncio.sleep(timeout)
            return None
        beats = self.scenario.setting_values("ShadowHeartbeatFrequency")
        hold = max([0.5, *(float(b) for b in beats if isinstance(b, int | float))])
        quiet_since: float | None = None
        while loop.time() < deadline:
            if await self._holds_nothing():
                quiet_since = loop.time() if quiet_since is None else quiet_since
                if loop.time() - quiet_since >= hold:
                    return loop.time() - start
            else:
                quiet_since = None
            await asyncio.sleep(min(0.25, max(0.0, deadline - loop.time())))
        return None

    async def _holds_nothing(self) -> bool:
        if any(m.task is not None and not m.task.done() for m in self.messages.values()):
            return False
        paths = [QUEUE_PATHS["active"], QUEUE_PATHS["shadow"]]
        for node in self.scenario.topology.nodes:
            for path in paths + ([_REQUESTS[1]] if self.resubmitted else []):
                try:
                    entries = queue_entries(await self.target.control(node, "GET", path))
                except TargetError:
                    return False
                if path == _REQUESTS[1]:
                    # a request still running may resubmit later (SN-5, SN-7)
                    entries = [e for e in entries if e.get("state") == "running"]
                if entries:
                    return False
        return True

    def copy_holders(self, ref: str) -> list[str]:
        """Nodes that held a copy: the primary, and every node the content was relayed to."""
        msg = self.messages[ref]
        holders = [msg.via]
        nodes = self.scenario.topology.nodes
        for event in self.history.events(kind="data"):
            if not event.link or not msg.carried_in(event.data):
                continue
            src, _, dst = event.link.partition("->")
            if src in nodes and dst in nodes and dst not in holders:
                holders.append(dst)
        return holders

    def copy_lost(self, node: str, since: float) -> str | None:
        """Why ``node`` lost its copy after ``since`` (wiped, or killed and not back), or None."""
        state = None
        for t, who, action in self.node_actions:
            if who != node or t < since:
                continue
            if action == "wipe":
                return "had its queue database wiped"
            if action == "kill":
                state = "was killed and not restarted"
            elif action == "power_cut":
                state = "lost power and was not restarted"
            elif action in ("restart",):
                state = None
        return state

    def register_message(
        self,
        ref: str,
        message_id: str,
        via: str,
        content: bytes = b"",
        mail_from: str | None = None,
        rcpt_to: list[str] | None = None,
    ) -> Message:
        """A message the scenario sends (a send step, or a session step's content)."""
        msg = Message(
            ref,
            message_id,
            via,
            self.history.now(),
            list(self.scenario.topology.nodes),
            content=content,
            mail_from=mail_from,
            rcpt_to=list(rcpt_to or []),
            trace=trace_value(ref, self.token),
        )
        self.messages[ref] = msg
        return msg

    # -- lifecycle ---------------------------------------------------------------

    async def setup(self) -> None:
        topo = self.scenario.topology
        for name in topo.sinks():
            sink = MailSink(name, self.history)
            await sink.start()
            self.sinks[name] = sink
        for link in topo.links():
            fixed = self.target.link_address(link, topo)
            if fixed is None:
                proxy = FaultProxy(link, self.history)
                await proxy.start()
            else:
                # an MTA the harness cannot re-route relays to a fixed address: be there
                proxy = FaultProxy(link, self.history, listen_host=fixed[0])
                try:
                    await proxy.start(fixed[1])
                except OSError as exc:
                    raise TargetError(
                        f"cannot listen on {fixed[0]}:{fixed[1]} for {link}, where "
                        f"{self.target.label} relays: {exc}"
                    ) from None
            self.proxies[link] = proxy
            dst = link.partition("->")[2]
            if dst in self.sinks:
                proxy.set_upstream(*self.sinks[dst].address)
        peers = {
            a: {b: _hp(self.proxies[f"{a}->{b}"].address) for b in topo.nodes if b != a}
            for a in topo.nodes
        }
        mx_addresses: dict[str, str] = {}
        if self.target.mx_routing:
            # an MTA routing by MX connects to port 25 of what DNS names: the same proxy
            # (same faults, same recording) listens there too, on an address of its own
            for link, proxy in self.proxies.items():
                if link.partition("->")[0] in topo.nodes:
                    host, _ = await proxy.listen_also(MX_PORT)
                    mx_addresses[_hp(proxy.address)] = host
        next_hops: dict[str, dict[str, Any]] = {}
        for node in topo.nodes:
            hops: dict[str, Any] = {}
            for domain, hop in topo.hops_of(node).items():
                if hop.node:
                    hops[domain] = {"node": hop.node}
                else:
                    address = _hp(self.proxies[f"{node}->{hop.sink}"].address)
                    hops[domain] = {"address": address, "kind": hop.kind}
            next_hops[node] = hops
        plan = ClusterPlan(
            topology=topo,
            settings=dict(self.scenario.settings),
            peers=peers,
            next_hops=next_hops,
            workdir=self.workdir,
            secret=self.peer_secret,
            node_settings={n: dict(v) for n, v in self.scenario.node_settings.items()},
            lazy_storage=needs_lazy_storage(self.scenario),
            mx_addresses=mx_addresses,
        )
        self.history.record(
            "step", text=f"start nodes {', '.join(topo.nodes)} ({self.target.name})"
        )
        handles = await asyncio.wait_for(self.target.start(plan), START_TIMEOUT)
        for node, handle in handles.items():
            self._attach(node, handle)
        self.history.record(
            "step",
            text="nodes running: " + ", ".join(f"{n}={_hp(h.smtp)}" for n, h in handles.items()),
        )

    def _attach(self, node: str, handle: NodeHandle) -> None:
        self.handles[node] = handle
        self._point_links(node, handle.smtp)

    def _detach(self, node: str) -> None:
        """The node goes down: its links refuse new connections until it is back. Left
        pointing at its old port, a connection made meanwhile reached whatever bound that
        port next - on a machine running scenarios side by side, another scenario's sink
        took a power-cut node's messages with a 250 (CI, session 45)"""
        self._point_links(node, None)

    def _point_links(self, node: str, address: tuple[str, int] | None) -> None:
        """Every link to ``node`` forwards to ``address`` (None: refuses)."""
        for link, proxy in self.proxies.items():
            if not link.endswith(f"->{node}"):
                continue
            if address is None:
                proxy.set_upstream(None)
            else:
                proxy.set_upstream(*address)

    async def teardown(self) -> None:
        for msg in self.messages.values():
            if msg.task is not None and not msg.task.done():
                msg.task.cancel()
        for node in self.scenario.topology.nodes:
            with contextlib.suppress(Exception):
                self.record_storage(node)
        with contextlib.suppress(Exception):
            await self.target.stop()
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                await proxy.stop()
        for sink in self.sinks.values():
            with contextlib.suppress(Exception):
                await sink.stop()

    # -- steps (each kind carried out by its handler in engine/steps.py) ------------

    async def do(self, step: Step, verdict: Verdict) -> None:
        """Carry out one action step: its event in the history, then its handler."""
        spec = ACTION_SPECS.get(step.kind)
        if spec is None or not isinstance(step.arg, spec):
            raise TypeError(
                f"step {step.kind} ({step.where}) has {type(step.arg).__name__} arguments, "
                f"not a {spec.__name__ if spec else 'known step kind'}"
            )
        self.history.record("step", text=step_label(step), line=step.where.line)
        await STEPS[step.kind](self, step.arg, step, verdict)

    def running(self, nodes: Sequence[str] = ()) -> list[str]:
        """The nodes (none named: every node) neither down nor frozen."""
        return [
            n
            for n in (nodes or list(self.scenario.topology.nodes))
            if n not in self.down and n not in self.paused
        ]

    async def kill(self, node: str) -> None:
        self._detach(node)
        await self.target.kill(node)
        self.down.add(node)
        self.missed_since.setdefault(node, len(self.changes))
        self.node_actions.append((self.history.now(), node, "kill"))

    async def pause(self, node: str) -> None:
        await self.target.pause(node)
        self.paused.add(node)
        self.missed_since.setdefault(node, len(self.changes))
        self.node_actions.append((self.history.now(), node, "pause"))

    async def resume(self, node: str) -> None:
        await self.target.resume(node)
        self.paused.discard(node)
        self.node_actions.append((self.history.now(), node, "resume"))
        if self.virtual_now is not None:
            # advances skipped the frozen node: bring its clock level with the others
            await self.target.control(node, "POST", "/clock", {"set": self.virtual_now})
        # so did configuration changes made while it was frozen
        await self._replay_changes(node, missed_since=self.missed_since.pop(node, None))

    async def power_cut(self, node: str) -> None:
        """The node loses power: dead at once, and what its disk had not made durable
        gone. Every sync its disk saw before, and what was lost, go into the history."""
        self._detach(node)
        await self.target.power_cut(node)
        self.down.add(node)
        self.missed_since.setdefault(node, len(self.changes))
        self.node_actions.append((self.history.now(), node, "power_cut"))
        self.record_storage(node)

    async def disk(self, node: str, mode: str | None, budget: int = 0) -> None:
        await self.target.disk(node, mode, budget)

    def record_storage(self, node: str) -> None:
        """What ``node``'s queue filesystem saw since the last look, into the history at
        the moments it happened there."""
        for event in self.target.storage_events(node):
            data = {k: v for k, v in event.items() if k not in ("kind", "t")}
            when, what = float(event["t"]), str(event["kind"])
            self.history.record_at(when, "storage", node=node, what=what, **data)

    async def bring_back(self, node: str, how: str) -> None:
        """Restart ``node`` on its queue database (``how`` restart) or a new, empty one
        (wipe): down at once, then back with the clock and configuration of the others."""
        self.node_actions.append((self.history.now(), node, "kill"))
        self._detach(node)
        handle = await (self.target.restart(node) if how == "restart" else self.target.wipe(node))
        self.node_actions.append((self.history.now(), node, how))
        self.down.discard(node)
        self.paused.discard(node)
        missed_since = self.missed_since.pop(node, None)
        self._attach(node, handle)
        # when the node is back (the step's own event marks when it went down)
        self.history.record(
            "step", text=f"{node} back after {how}, queue database {handle.queue_db_id or '?'}"
        )
        if self.virtual_now is not None:
            await self.target.control(node, "POST", "/clock", {"set": self.virtual_now})
        await self._replay_changes(node, missed_since, directory=True)

    async def _replay_changes(
        self, node: str, missed_since: int | None, directory: bool = False
    ) -> None:
        """Configuration changes a node that came back missed while it was away (from
        change number ``missed_since`` on), made on it now; with ``directory``, every
        directory change of the run too (a node reads the directory as it starts)."""
        for number, (nodes, change) in enumerate(self.changes):
            if nodes is not None and node not in nodes:
                continue
            missed = missed_since is not None and number >= missed_since
            if not missed and not (directory and change[0] == "directory"):
                continue
            if change[0] == "settings":
                answer = await self.target.set_settings(node, change[1])
                self.restarted_for_change(node, answer)
            elif change[0] == "next_hop":
                answer = await self.target.set_next_hop(node, change[1], change[2])
                self.restarted_for_change(node, answer)
            else:
                await self.target.control(node, *change[1:])

    def restarted_for_change(self, node: str, answer: Any) -> None:
        """A target without a reload restarted ``node`` to apply a change (its answer says
        so): recorded as the restart it is, and no PASS is claimed across it."""
        text = answer.get("restarted") if isinstance(answer, dict) else None
        if text:
            self.node_actions.append((self.history.now(), node, "restart"))
            self.history.record("step", text=str(text))
            self.caveats.append(str(text))


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run the scenario's event loop: uvloop (as the reference nodes do) unless
    SHADOWCHECK_LOOP=asyncio. The harness's proxies and sinks must outrun any MTA it
    tests; on uvloop its own sink takes about twice the messages per second
    (benchmarks/bench_harness.py --uvloop)."""
    if os.environ.get("SHADOWCHECK_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


#: the Safety Net resubmission requests a node coordinates, each with its "state"
_REQUESTS = ("GET", "/safetynet/requests")


def _queue_call(queue: str) -> tuple[str, tuple[str, str]]:
    return "control_api", ("GET", QUEUE_PATHS[queue])


def _hp(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


async def _run(run: Run, verdict: Verdict, hooks: Any) -> None:
    scenario = run.scenario
    if scenario.start_refused is not None:
        await _expect_start_refused(run, verdict, scenario.start_refused)
        return
    try:
        await run.setup()
    except (TargetError, OSError, TimeoutError) as exc:
        # the target never got to show any behaviour: not a verdict on the MTA
        verdict.inconclusive(f"the nodes did not start: {_first_line(exc)}", _evidence(run, exc))
        return
    if hooks is not None:
        hooks.shadowcheck_scenario_started(
            scenario=scenario, target=run.target, history=run.history
        )
    for step in scenario.steps:
        try:
            await run.do(step, verdict)
        except (TargetError, OSError, ScenarioError) as exc:
            verdict.inconclusive(
                f"step {step.kind} ({step.where}) could not be carried out: {_first_line(exc)}",
                _evidence(run, exc),
            )
            return
    for check in scenario.expect:
        verdict.add(await run_check(run, check))
    invariants = await no_loss_invariant(run) + integrity_invariant(run) + bounce_invariant(run)
    for result in premise_missing(run, invariants):
        verdict.add(result)


def _first_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0]


def _evidence(run: Run, exc: BaseException) -> str:
    """The target's own account of an error, once: what the exception carried beyond its
    first line (a target may put the log tail there), else the target's diagnostics."""
    rest = "\n".join(str(exc).splitlines()[1:]).strip()
    return rest or run.target.diagnostics()


async def _expect_start_refused(run: Run, verdict: Verdict, reason: str) -> None:
    """The nodes must refuse to start with the scenario's settings, saying why. A refusal
    for another reason proves nothing about the settings: INCONCLUSIVE."""
    expected = f"the nodes refuse to start, for a reason matching /{reason}/"
    try:
        await run.setup()
    except (TargetError, OSError, TimeoutError) as exc:
        said = f"{exc}\n{run.target.diagnostics()}"
        if re.search(reason, said):
            verdict.add(CheckResult("start refused", Status.PASS, expected, str(exc)))
        else:
            verdict.inconclusive(
                f"the nodes did not start, but not for the reason expected (/{reason}/): {exc}",
                run.target.diagnostics(),
            )
        return
    settings = settings_text(run.scenario.settings)
    verdict.add(
        CheckResult(
            "start refused",
            Status.FAIL,
            expected,
            f"every node started and accepted {settings}",
            excerpt=run.excerpt(run.history.now(), []),
        )
    )


#: how often a running scenario looks whether the session stopped (s)
STOP_POLL = 0.25
#: the reason of a verdict the session's stop cut short
STOPPED = "the session stopped (-x or --maxfail) before this scenario ended: nothing judged"


class _SessionStopped(Exception):
    pass


async def _unless_stopped(work: Coroutine[Any, Any, None], stop: threading.Event | None) -> None:
    """Run ``work`` to its end, or until ``stop`` is set (the session stops: -x,
    --maxfail): then it is cancelled, and :class:`_SessionStopped` raised."""
    task = asyncio.ensure_future(work)
    if stop is None:
        await task
        return

    async def stopped() -> None:
        while not stop.is_set():
            await asyncio.sleep(STOP_POLL)

    watcher = asyncio.ensure_future(stopped())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            raise _SessionStopped
        task.result()
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def run_scenario(
    scenario: Scenario,
    target: Target,
    *,
    workdir: Path,
    progress: Progress | None = None,
    hooks: Any = None,
    history_file: Path | None = None,
    verdict: Verdict | None = None,
    workload_scale: float = 1.0,
    workload_seed: int | None = None,
    timeline_writer: TimelineWriter | None = None,
    workload_selection: dict[str, Selection] | None = None,
    replay_command: str = "",
    stop: threading.Event | None = None,
) -> Verdict:
    """Run ``scenario`` on ``target`` (blocking) and return its verdict. Once ``stop`` is
    set (the session stops), a scenario not begun does not start and a running one is
    cut short: INCONCLUSIVE, nothing judged."""
    verdict = verdict or Verdict(
        scenario.name,
        scenario.behaviours,
        source=str(scenario.where),
        named_evidence=scenario.named_evidence,
    )
    history = History()
    run = Run(scenario, target, history, progress or Progress(scenario.name), workdir)
    run.workload_scale, run.workload_seed = workload_scale, workload_seed
    run.timeline_writer = timeline_writer
    run.workload_selection, run.replay_command = dict(workload_selection or {}), replay_command
    timeout = scenario.timeout
    if any(step.kind == "workload" for step in scenario.steps):
        # a scaled workload takes proportionally longer
        timeout *= max(1.0, workload_scale)

    async def main() -> None:
        try:
            # the nodes' pids as the target reports them (a restart attaches a new one)
            async with watching_lag(history, lambda: {n: h.pid for n, h in run.handles.items()}):
                await asyncio.wait_for(_unless_stopped(_run(run, verdict, hooks), stop), timeout)
        except _SessionStopped:
            verdict.inconclusive(STOPPED)
        except TimeoutError:
            # out of time while the machine made it wait (the harness's loop late, the
            # nodes waiting for a CPU: CI's durability workloads at load 8 on 2 cores)
            # is no verdict on the MTA either: a lane runs it again alone
            machine = history.lateness(0.0, history.now())
            late = overloaded(machine.total, timeout)
            while_ = f", while {said(machine)} (an overloaded machine)" if late else ""
            verdict.inconclusive(
                f"the scenario did not finish within its timeout ({timeout:g}s){while_}: "
                "the harness could not judge what was still to come",
                target.diagnostics(),
                harness_late=late,
            )
        except Exception as exc:  # a harness defect must not read as a verdict on the MTA
            verdict.inconclusive(
                "the harness failed: "
                + "".join(traceback.format_exception_only(exc)).strip()
                + "\n"
                + "".join(traceback.format_tb(exc.__traceback__)[-3:]),
            )
        finally:
            if hooks is not None:
                with contextlib.suppress(Exception):
                    hooks.shadowcheck_scenario_finished(
                        scenario=scenario, target=target, history=history, verdict=verdict
                    )
            verdict.caveats.extend(run.caveats)
            if verdict.status == Status.FAIL and not verdict.diagnostics:
                verdict.diagnostics = target.diagnostics()
            await run.teardown()

    if stop is not None and stop.is_set():
        verdict.inconclusive(STOPPED)
        return verdict
    run_loop(main())
    if history_file is not None:
        history.write_json(history_file)
    return verdict
