"""Carrying out a scenario's action steps: ``STEPS`` maps each kind to its handler, as
``checks/evaluate.py``'s ``CHECKERS`` maps each expectation to its checker.

A handler gets the step's typed spec, built by the loader with every default applied
(:mod:`pytest_shadowcheck.scenario.steps`), and acts on the run through
:class:`~pytest_shadowcheck.engine.context.StepContext`: the run owns the state (the
proxies, sinks and nodes, which are down or frozen, the configuration changes a node
that comes back gets again); a handler says what the step does to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.evaluate import run_check
from pytest_shadowcheck.engine.session import run_session, session_label
from pytest_shadowcheck.engine.workload import run_workload, workload_label
from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.network.client import RecordingClient, SendResult, make_message
from pytest_shadowcheck.network.smtp_text import TRACE_HEADER, trace_value
from pytest_shadowcheck.scenario.capabilities import QUEUE_PATHS
from pytest_shadowcheck.scenario.steps import (
    AdvanceSpec,
    CheckSpec,
    DirectorySpec,
    DiskFullSpec,
    FaultSpec,
    HealSpec,
    NodeActionSpec,
    NoteSpec,
    ResubmitSpec,
    RouteSpec,
    SendSpec,
    SessionSpec,
    SettingsSpec,
    SinkSpec,
    SnapshotSpec,
    WaitSpec,
    settings_text,
)
from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec
from pytest_shadowcheck.verdict import CheckResult, Status, Verdict

if TYPE_CHECKING:
    from pytest_shadowcheck.engine.context import StepContext as Run
    from pytest_shadowcheck.network.proxy import FaultProxy
    from pytest_shadowcheck.scenario.model import Step

__all__ = ["STEPS", "StepHandler", "step_label"]

#: (the run, the step's spec, the step, the verdict its checks go to)
StepHandler = Callable[["Run", Any, "Step", Verdict], Awaitable[None]]


def step_label(step: Step) -> str:
    """The step as the history shows it (scenarios match it with ``step:`` regexes)."""
    if isinstance(step.arg, SessionSpec):
        return session_label(step.arg)
    if isinstance(step.arg, WorkloadSpec):
        return workload_label(step.arg)
    return f"{step.kind} {step.arg.describe()}"


async def send(run: Run, spec: SendSpec, step: Step, verdict: Verdict) -> None:
    ref, via = spec.id, spec.via
    message_id = spec.message_id or f"<{ref}.{run.token}@shadowcheck.test>"
    raw = make_message(
        message_id,
        subject=spec.subject,
        body=spec.body,
        size=spec.size,
        headers={TRACE_HEADER: trace_value(ref, run.token)},
        mail_from=spec.sender,
        to=", ".join(spec.to),
    )
    proxy = run.proxies[f"client->{via}"]
    client = RecordingClient(run.history, link=f"client->{via}", numbering=proxy.connection_number)
    msg = run.register_message(ref, message_id, via, raw, spec.sender, list(spec.to))
    coro = client.send(*proxy.address, spec.sender, list(spec.to), raw, timeout=spec.timeout)

    async def sent() -> SendResult:
        result = await coro
        msg.result = result
        return result

    msg.task = asyncio.create_task(sent())
    if not spec.background:
        await msg.task


#: fault kind -> what it does to the link's proxy
FAULTS: dict[str, Callable[[FaultProxy, FaultSpec], None]] = {
    "cut": lambda proxy, spec: proxy.cut(True),
    "blackhole": lambda proxy, spec: proxy.blackhole(True),
    "delay": lambda proxy, spec: proxy.delay(spec.direction, spec.seconds),
    "reset": lambda proxy, spec: proxy.reset(),
    "slow_accept": lambda proxy, spec: proxy.slow_accept(spec.seconds),
    "slow_greeting": lambda proxy, spec: proxy.slow_greeting(spec.seconds),
    "drop_after": lambda proxy, spec: proxy.drop_after(spec.bytes, spec.direction),
    "stall_after_data": lambda proxy, spec: proxy.stall_after_data(True),
    "cut_at": lambda proxy, spec: proxy.cut_at(
        spec.point, spec.verb, spec.occurrence, spec.connection
    ),
    "stall_at": lambda proxy, spec: proxy.stall_at(
        spec.point, spec.verb, spec.occurrence, spec.connection
    ),
}


async def fault(run: Run, spec: FaultSpec, step: Step, verdict: Verdict) -> None:
    FAULTS[spec.kind](run.proxies[spec.link], spec)


async def heal(run: Run, spec: HealSpec, step: Step, verdict: Verdict) -> None:
    for link, proxy in run.proxies.items():
        if spec.link in (None, link):
            proxy.heal()


async def kill(run: Run, spec: NodeActionSpec, step: Step, verdict: Verdict) -> None:
    await run.kill(spec.node)


async def pause(run: Run, spec: NodeActionSpec, step: Step, verdict: Verdict) -> None:
    await run.pause(spec.node)


async def resume(run: Run, spec: NodeActionSpec, step: Step, verdict: Verdict) -> None:
    await run.resume(spec.node)


async def restart(run: Run, spec: NodeActionSpec, step: Step, verdict: Verdict) -> None:
    await run.bring_back(spec.node, "restart")


async def wipe(run: Run, spec: NodeActionSpec, step: Step, verdict: Verdict) -> None:
    await run.bring_back(spec.node, "wipe")


async def power_cut(run: Run, spec: NodeActionSpec, step: Step, verdict: Verdict) -> None:
    await run.power_cut(spec.node)


async def disk_full(run: Run, spec: DiskFullSpec, step: Step, verdict: Verdict) -> None:
    await run.disk(spec.node, "full", spec.after)


async def disk_error(run: Run, spec: NodeActionSpec, step: Step, verdict: Verdict) -> None:
    await run.disk(spec.node, "error")


async def disk_ok(run: Run, spec: NodeActionSpec, step: Step, verdict: Verdict) -> None:
    await run.disk(spec.node, None)


async def wait(run: Run, spec: WaitSpec, step: Step, verdict: Verdict) -> None:
    timeout = spec.timeout
    if spec.reply is not None:
        await run.settled_message(spec.reply, timeout)
        return
    if spec.until == "quiet":
        run.progress.waiting(timeout, "for the cluster to hold nothing")
        took = await run.until_quiet(timeout)
        if took is not None:
            run.history.record("note", text=f"wait: the cluster held nothing after {took:.1f}s")
        return
    if spec.delivered is None:
        run.progress.waiting(timeout, "(wait step)")
        await asyncio.sleep(timeout)
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    ref, sink = spec.delivered, spec.to
    run.progress.waiting(timeout, f"for {ref} to be delivered")
    wanted = run.messages[ref].message_id
    while loop.time() < deadline:
        if any(s.count(wanted) for n, s in run.sinks.items() if sink in (None, n)):
            return
        await asyncio.sleep(0.05)
    run.history.record("note", text=f"wait: {ref} not delivered within {timeout:g}s")


async def advance(run: Run, spec: AdvanceSpec, step: Step, verdict: Verdict) -> None:
    run.progress.note(f"advancing the virtual clock of every node by {spec.seconds:g}s")
    for node in run.running():
        answer = await run.target.advance_clock(node, spec.seconds)
        if isinstance(answer, dict) and isinstance(answer.get("now"), (int, float)):
            run.virtual_now = float(answer["now"])


async def set_settings(run: Run, spec: SettingsSpec, step: Step, verdict: Verdict) -> None:
    want = spec.result
    rejected = False
    for node in run.running(spec.nodes):
        try:
            answer = await run.target.set_settings(node, spec.values)
            # the node's answer: its settings now (a control API's), or a target's account
            shown = settings_text(answer) if isinstance(answer, dict) else str(answer)
            outcome, detail = "accepted", shown
            run.restarted_for_change(node, answer)
        except TargetError as exc:
            if want is None:
                raise
            outcome, detail = "rejected", str(exc)
            rejected = True
        if want is not None:
            verdict.add(
                CheckResult(
                    f"settings on {node} {outcome}",
                    Status.PASS if outcome == want else Status.FAIL,
                    f"{node} {want} {settings_text(spec.values)}",
                    f"{outcome}: {detail}",
                    where=str(step.where),
                )
            )
    if not rejected:
        run.changes.append((list(spec.nodes) or None, ("settings", spec.values)))


async def resubmit(run: Run, spec: ResubmitSpec, step: Step, verdict: Verdict) -> None:
    run.resubmitted = True
    node = spec.node
    clock = await run.target.control(node, "GET", "/clock")
    now = float(clock["now"])
    body = {"database": spec.database, "start": spec.start.on(now), "end": spec.end.on(now)}
    answer = await run.target.control(node, "POST", "/safetynet/resubmit", body)
    run.history.record("step", text=f"resubmit requested on {node}: {body} -> {answer}")


async def directory(run: Run, spec: DirectorySpec, step: Step, verdict: Verdict) -> None:
    call: tuple[str, str, dict[str, Any]]
    if spec.group is not None:
        call = ("PUT", f"/directory/groups/{spec.group}", {"members": list(spec.members)})
    else:
        call = ("PUT", f"/directory/recipients/{spec.recipient}", {"database": spec.database})
    run.changes.append((None, ("directory", *call)))
    for node in run.running():
        await run.target.control(node, *call)


async def route(run: Run, spec: RouteSpec, step: Step, verdict: Verdict) -> None:
    for node in spec.nodes or list(run.scenario.topology.nodes):
        hop: dict[str, Any]
        if spec.sink is not None:
            address = _hp(run.proxies[f"{node}->{spec.sink}"].address)
            hop = {"address": address, "kind": spec.kind}
        else:
            hop = {"node": spec.node}
        run.changes.append(([node], ("next_hop", spec.domain, hop)))
        if node in run.running():
            answer = await run.target.set_next_hop(node, spec.domain, hop)
            run.restarted_for_change(node, answer)


async def snapshot(run: Run, spec: SnapshotSpec, step: Step, verdict: Verdict) -> None:
    answer = await run.target.control(spec.node, "GET", QUEUE_PATHS[spec.queue])
    run.history.record("snapshot", node=spec.node, queue=spec.queue, answer=answer)


async def sink(run: Run, spec: SinkSpec, step: Step, verdict: Verdict) -> None:
    mail_sink = run.sinks[spec.name]
    mail_sink.clear_script()
    if spec.reply is not None and spec.reply != "accept":
        mail_sink.script("DATA", spec.reply)
    for rule in spec.rules:
        mail_sink.script(rule.stage, rule.reply, rule.times, match=rule.match, delay=rule.delay)


async def check(run: Run, spec: CheckSpec, step: Step, verdict: Verdict) -> None:
    verdict.add(await run_check(run, spec.expectation))


async def note(run: Run, spec: NoteSpec, step: Step, verdict: Verdict) -> None:
    run.history.record("note", text=spec.text)


async def session(run: Run, spec: SessionSpec, step: Step, verdict: Verdict) -> None:
    await run_session(run, step, verdict)


async def workload(run: Run, spec: WorkloadSpec, step: Step, verdict: Verdict) -> None:
    await run_workload(run, step, verdict)


#: action step kind -> its handler
STEPS: dict[str, StepHandler] = {
    "send": send,
    "fault": fault,
    "heal": heal,
    "kill": kill,
    "pause": pause,
    "resume": resume,
    "restart": restart,
    "wipe": wipe,
    "power_cut": power_cut,
    "disk_full": disk_full,
    "disk_error": disk_error,
    "disk_ok": disk_ok,
    "wait": wait,
    "advance": advance,
    "set_settings": set_settings,
    "resubmit": resubmit,
    "directory": directory,
    "route": route,
    "snapshot": snapshot,
    "sink": sink,
    "check": check,
    "note": note,
    "session": session,
    "workload": workload,
}


def _hp(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"
