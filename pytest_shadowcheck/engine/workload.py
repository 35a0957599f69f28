"""The ``workload`` step in a scenario: running it and judging it.

The loader has turned the step into a
:class:`~pytest_shadowcheck.scenario.workload_spec.WorkloadSpec`. :func:`run_workload`
plans the messages and the nemesis from the seed, drives the workload while the nemesis
plays, ends every fault, waits up to ``settle`` for the acknowledged messages, snapshots
the queues (when the target shows them), and adds the history checker's results to the
verdict with the figures recorded in the history.

With a selection (``--shadowcheck-replay``, :mod:`pytest_shadowcheck.scenario.replay`)
only the kept messages are sent and only the kept faults played, each at its planned
moment. Each workload's summary carries what a shrinker needs to choose the next
selection (``replay``: how many messages were planned, the faults played, the messages
that failed and the faults that met them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.no_loss import scenario_given_unmet
from pytest_shadowcheck.checks.storage import power_cut_evidence
from pytest_shadowcheck.checks.wire import SEND_TIMEOUT
from pytest_shadowcheck.checks.workload import Settled, check_workload, results
from pytest_shadowcheck.engine.nemesis import Fault, iter_faults, run_nemesis, usable_kinds
from pytest_shadowcheck.engine.traffic import Planned, drive, plan_messages, traffic_note
from pytest_shadowcheck.errors import ScenarioError, TargetError
from pytest_shadowcheck.scenario.replay import Selection, format_indices
from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec, nemesis_spec

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.workload import WorkloadReport
    from pytest_shadowcheck.engine.context import StepContext
    from pytest_shadowcheck.errors import SourceRef
    from pytest_shadowcheck.scenario.model import Step
    from pytest_shadowcheck.verdict import Verdict

__all__ = ["kept_faults", "replay_args", "run_workload", "workload_label"]

#: the nemesis starts no fault once this many times the planned sending time (messages
#: over rate) has passed: a paused node stalls the sessions sending to it, so on a
#: loaded machine sending ran long, which bought more pauses, which made it longer (93 s
#: and 15 pauses for durability_pause's 7.5 s of sending, past its 90 s timeout); on a
#: quiet machine every workload's last fault starts within 2.3 times it
NEMESIS_HORIZON = 2.5
POLL = 0.1
#: seconds before a queue listing that failed is asked again
LISTING_RETRY = 1.0
_QUEUES = {"active": "/queues/active", "shadow": "/queues/shadow"}


def _horizon(spec: WorkloadSpec) -> float | None:
    """Seconds into the workload after which the nemesis starts no fault (None: a
    workload without a rate sends as fast as the target takes it, and has no plan)."""
    return NEMESIS_HORIZON * spec.messages / spec.rate if spec.rate > 0 else None


async def run_workload(run: StepContext, step: Step, verdict: Verdict) -> None:
    """Carry out a workload step on ``run`` (the engine's Run) and judge it."""
    base: WorkloadSpec = step.arg
    scale = getattr(run, "workload_scale", 1.0)
    seed = getattr(run, "workload_seed", None)
    spec = _scaled(base, scale, base.seed if seed is None else seed)
    selection: Selection | None = (getattr(run, "workload_selection", None) or {}).get(spec.name)
    history = run.history
    since = history.now()
    planned = plan_messages(spec, run.token)
    if selection is not None:
        planned = _kept_messages(planned, selection, step.where)
    proxies = {node: run.proxies[f"client->{node}"] for node in spec.via}
    addresses = {node: proxy.address for node, proxy in proxies.items()}
    numbering = {node: proxy.connection_number for node, proxy in proxies.items()}
    stop = asyncio.Event()
    nemesis_task = None
    # a selection of faults is played whole: the workload waits for its last fault
    whole = selection is not None and selection.faults is not None
    if spec.nemesis:
        nspec = nemesis_spec(spec.nemesis, run.scenario.topology, spec.seed, step.where)
        kinds = usable_kinds(nspec, run.target.capabilities)
        if kinds:
            faults: Iterable[Fault] = iter_faults(nspec, kinds, run.scenario.topology)
            if selection is not None and selection.faults is not None:
                faults = kept_faults(faults, selection.faults)
            never = asyncio.Event()
            nemesis_task = asyncio.create_task(
                run_nemesis(
                    run, faults, never if whole else stop, verdict, horizon=_horizon(spec)
                )
            )
        else:
            history.record("note", text=f"nemesis: target {run.target.name} can do none of "
                           f"{', '.join(nspec.faults)}")  # fmt: skip
    kept = f" ({selection.describe()} of the plan)" if selection is not None else ""
    run.progress.note(
        f"workload {spec.name}: {spec.messages} messages over {spec.sessions} sessions, "
        f"seed {spec.seed}{kept}"
    )
    try:
        accepted = await drive(spec, planned, history, addresses, run.scenario.name, numbering)
    finally:
        stop.set()
        if nemesis_task is not None:
            await nemesis_task
    settled = await _settle(run, accepted, spec.settle)
    # what is still queued is not lost: the queues the target can show (the control
    # API, or a docker description's queue listing for the active queue)
    listable = any(run.target.can("control_api", ("GET", path)) for path in _QUEUES.values())
    if listable:
        await _snapshot(run, spec.name)
    scenario = run.scenario
    timeouts = {
        node: float(value)
        for node in scenario.topology.nodes
        if (value := scenario.node_setting(node, SEND_TIMEOUT)) is not None
    }
    report = check_workload(
        history, spec.name, spec.seed, since, frozenset(scenario.topology.nodes), timeouts
    )
    report.queues_seen = listable
    summary = report.summary()
    summary["traffic"] = traffic_note(history, spec.name)  # what was sent, in buckets
    history.record("note", text=f"workload {spec.name} summary", summary=summary)
    args = replay_args(spec.seed, scale, selection)
    prefix = getattr(run, "replay_command", "")
    summary["replay"] = _replay_facts(report, planned, spec, args, prefix)
    verdict.workloads.append(summary)
    timeline = ""
    if run.timeline_writer is not None:
        timeline = f" (timeline: {run.timeline_writer(history, report, run.scenario.name)})"
    lost = report.of("lost") or report.of("lost-outside")
    excerpt = evidence = ""
    first = lost[0] if lost else None
    if first is not None and first.acked_t is not None:
        excerpt = run.excerpt(first.acked_t, [f"client->{first.via}", f"{first.via}->*"])
        said = next(
            (str(e.data.get("text", "")) for e in history.events(kind="attempt")
             if e.data.get("ref") == first.ref),
            "",
        )  # fmt: skip
        holders = [first.via, *sorted(first.copied_to)]
        evidence = power_cut_evidence(history, holders, first.acked_t, said, first.ref)
    behaviours = list(spec.behaviours)
    outside = "PR-4" if "PR-4" in run.scenario.behaviours else None
    where = f"{step.where} (replay: {summary['replay']['command']}){timeline}"
    # the given every behaviour of the scenario presupposes (a shadow copy made)
    unmet = scenario_given_unmet(run)
    retry = run.target.timers.get("TransientFailureRetryInterval")
    for result in results(
        report, behaviours, where, excerpt, outside, spec.all_delivered, evidence,
        settle=spec.settle, retry=retry, unmet=unmet, settled=settled,
    ):  # fmt: skip
        verdict.add(result)


def _scaled(spec: WorkloadSpec, scale: float, seed: int) -> WorkloadSpec:
    return dataclasses.replace(spec, messages=max(1, round(spec.messages * scale)), seed=seed)


def _kept_messages(planned: list[Planned], selection: Selection, where: SourceRef) -> list[Planned]:
    """The planned messages the selection keeps (each still sent at its planned moment:
    the driver paces by the message's number in the plan)."""
    if selection.messages is None:
        return planned
    beyond = sorted(i for i in selection.messages if i >= len(planned))
    if beyond:
        raise ScenarioError(
            f"--shadowcheck-replay keeps message {beyond[0]} of workload {selection.workload}, "
            f"which plans only {len(planned)} (numbered 0 to {len(planned) - 1})",
            where,
            "the --shadowcheck-workload-scale of the run that printed the selection",
        )
    return [p for p in planned if p.index in selection.messages]


def kept_faults(faults: Iterable[Fault], keep: frozenset[int]) -> list[Fault]:
    """The kept faults of a planned schedule, each starting when it was planned to: the
    quiet time and the length of every dropped fault before it are added to its own quiet
    time, as if the dropped fault had happened (a restart has no length: it is over once
    the node is back). What a dropped fault's actions themselves took (a node's restart)
    is not waited out, so a kept fault may land that much earlier."""
    out: list[Fault] = []
    carried = 0.0
    for fault in itertools.islice(faults, max(keep, default=-1) + 1):
        if fault.index in keep:
            out.append(dataclasses.replace(fault, gap=fault.gap + carried))
            carried = 0.0
        else:
            carried += fault.gap + (0.0 if fault.kind == "restart" else fault.duration)
    return out


def replay_args(seed: int, scale: float, selection: Selection | None) -> list[str]:
    """The options that replay a workload: its seed, the scale, the selection."""
    args = ["--shadowcheck-workload-seed", str(seed)]
    if scale != 1.0:
        args += ["--shadowcheck-workload-scale", f"{scale:g}"]
    if selection is not None:
        args += ["--shadowcheck-replay", selection.text()]
    return args


def _replay_facts(
    report: WorkloadReport, planned: list[Planned], spec: WorkloadSpec, args: list[str],
    prefix: str,
) -> dict[str, Any]:  # fmt: skip
    """What a shrinker reads of one run of the workload: the messages planned and the
    faults played (by number in the plan), which messages failed (lost, still queued or
    on a node whose queues could not be listed, or duplicated with no fault to explain
    it) and which faults met them (a fault of a node that held the message, between its
    sending and its last delivery)."""
    number = {p.ref: p.index for p in planned}
    failing = [
        f for f in report.fates.values()
        if f.fate in ("lost", "queued", "unlisted")
        or (f.fate == "duplicated" and "with no fault" in f.cause)
    ]  # fmt: skip
    met: set[int] = set()
    for fate in failing:
        until = max((t for t, _, _ in fate.deliveries), default=float("inf"))
        holders = {fate.via, *fate.copied_to}
        met |= {
            w.index for w in report.windows
            if w.meets(fate.sent, until) and any(w.touches(n) for n in holders)
        }  # fmt: skip
    return {
        "planned_messages": spec.messages,
        "messages": format_indices({p.index for p in planned}),
        "faults": format_indices({w.index for w in report.windows}),
        "failing_messages": format_indices({number[f.ref] for f in failing if f.ref in number}),
        "failing_faults": format_indices(met),
        "args": args,
        "command": shlex.join(args) if not prefix else f"{prefix} {shlex.join(args)}",
    }


async def _settle(run: StepContext, accepted: list[Planned], settle: float) -> Settled:
    """Wait until every recipient of every accepted message was delivered, or ``settle``
    passed; reads only the deliveries new since the last look. The machine's lateness
    meanwhile (the harness's loop, the nodes waiting for a CPU) lengthens the wait by as
    much, up to another ``settle``: a drain the machine slowed is not the MTA's.

    It ends early, too, when the cluster holds nothing (``until_quiet``: no queue of any
    node, seen so a heartbeat apart): what is undelivered then is in no queue a rule
    could still deliver it from, and the rest of the settle would only be waited out (a
    loss cost the whole settle at every attempt of a shrink)."""
    pending = {(p.trace, r.lower()) for p in accepted for r in p.rcpt_tos}
    seen = dict.fromkeys(run.sinks, 0)
    loop = asyncio.get_running_loop()
    began, start = run.history.now(), loop.time()
    run.progress.waiting(settle, f"for {len(accepted)} acknowledged workload messages")
    quiet = asyncio.ensure_future(run.until_quiet(settle)) if pending else None
    try:
        granted = await _drain(run, pending, seen, settle, start, began, quiet)
    finally:
        if quiet is not None:
            quiet.cancel()
    if granted:
        run.history.record(
            "note", text=f"settle lengthened by {granted:.3f}s: the machine ran late",
            settle_granted=granted,
        )  # fmt: skip
    return Settled(granted, run.history.lateness(began, run.history.now()))


async def _drain(
    run: StepContext,
    pending: set[tuple[str, str]],
    seen: dict[str, int],
    settle: float,
    start: float,
    began: float,
    quiet: asyncio.Future[float | None] | None,
) -> float:
    """The settle's loop: reads the sinks until nothing is ``pending`` or the wait ends;
    returns the seconds granted for the machine's lateness."""
    loop = asyncio.get_running_loop()
    granted = 0.0
    while pending:
        if loop.time() >= start + settle + granted:
            # read only when the wait would end (it scans the history), once the
            # watchers (engine/lag.py, a period each) have recorded a stall just ended
            await asyncio.sleep(POLL)
            late = run.history.lateness(began, run.history.now()).total
            if min(late, settle) <= granted:
                break
            granted = min(late, settle)
        for name, sink in run.sinks.items():
            new = sink.deliveries[seen[name] :]
            seen[name] += len(new)
            for d in new:
                for rcpt in d.rcpt_tos:
                    pending.discard((d.trace, rcpt.lower()))
        if pending and quiet is not None and quiet.done() and quiet.result() is not None:
            run.history.record(
                "note", text=f"settle ended after {loop.time() - start:.1f}s: the cluster "
                f"holds nothing, and {len(pending)} acknowledged recipients are undelivered",
            )  # fmt: skip
            break
        if pending:
            await asyncio.sleep(POLL)
    return granted


async def _snapshot(run: StepContext, workload: str) -> None:
    """Each node's queues as the target lists them. A queue that could not be listed (its
    node down, paused or not answering) is recorded with the reason: the checker must not
    read it as an empty queue, or every message it holds would count as lost."""
    for node in run.scenario.topology.nodes:
        for queue, path in _QUEUES.items():
            if not run.target.can("control_api", ("GET", path)):
                continue
            if node in run.down or node in run.paused:
                state = "down" if node in run.down else "paused"
                run.history.record(
                    "snapshot", node=node, queue=queue, workload=workload,
                    unlisted=f"{node} was {state} when the harness listed the queues",
                )  # fmt: skip
                continue
            try:
                answer = await _listing(run, node, path)
            except TargetError as exc:
                run.history.record(
                    "snapshot", node=node, queue=queue, workload=workload,
                    unlisted=f"{node} did not list its {queue} queue: {exc}",
                )  # fmt: skip
                continue
            run.history.record("snapshot", node=node, queue=queue, answer=answer, workload=workload)


async def _listing(run: StepContext, node: str, path: str) -> Any:
    """GET ``path`` on ``node``, asked a second time after a failure: a node that has
    just come back, or a loaded machine, may miss one request."""
    try:
        return await run.target.control(node, "GET", path)
    except TargetError:
        await asyncio.sleep(LISTING_RETRY)
        return await run.target.control(node, "GET", path)


def workload_label(spec: WorkloadSpec) -> str:
    nemesis = ""
    if spec.nemesis:
        nemesis = f", nemesis {','.join(spec.nemesis.get('faults') or ['all'])}"
    return f"workload {spec.name}: {spec.messages} messages, {spec.sessions} sessions{nemesis}"
