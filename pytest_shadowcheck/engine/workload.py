"""The ``workload`` step in a scenario: running it and judging it.

The loader has turned the step into a
:class:`~pytest_shadowcheck.scenario.workload_spec.WorkloadSpec`. :func:`run_workload`
plans the messages and the nemesis from the seed, drives the workload while the nemesis
plays, ends every fault, waits up to ``settle`` for the acknowledged messages, snapshots
the queues (when the target shows them), and adds the history checker's results to the
verdict with the figures recorded in the history.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.no_loss import scenario_given_unmet
from pytest_shadowcheck.checks.storage import power_cut_evidence
from pytest_shadowcheck.checks.workload import check_workload, results
from pytest_shadowcheck.engine.nemesis import plan_faults, run_nemesis, usable_kinds
from pytest_shadowcheck.engine.traffic import Planned, drive, plan_messages, traffic_note
from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec, nemesis_spec

if TYPE_CHECKING:
    from pytest_shadowcheck.engine.context import StepContext
    from pytest_shadowcheck.scenario.model import Step
    from pytest_shadowcheck.verdict import Verdict

__all__ = ["run_workload", "workload_label"]

#: faults planned ahead; a nemesis never gets near this many in one workload
MAX_FAULTS = 10_000
POLL = 0.1
_QUEUES = {"active": "/queues/active", "shadow": "/queues/shadow"}


async def run_workload(run: StepContext, step: Step, verdict: Verdict) -> None:
    """Carry out a workload step on ``run`` (the engine's Run) and judge it."""
    base: WorkloadSpec = step.arg
    scale = getattr(run, "workload_scale", 1.0)
    seed = getattr(run, "workload_seed", None)
    spec = _scaled(base, scale, base.seed if seed is None else seed)
    history = run.history
    since = history.now()
    planned = plan_messages(spec, run.token)
    proxies = {node: run.proxies[f"client->{node}"] for node in spec.via}
    addresses = {node: proxy.address for node, proxy in proxies.items()}
    numbering = {node: proxy.connection_number for node, proxy in proxies.items()}
    stop = asyncio.Event()
    nemesis_task = None
    if spec.nemesis:
        nspec = nemesis_spec(spec.nemesis, run.scenario.topology, spec.seed, step.where)
        kinds = usable_kinds(nspec, run.target.capabilities)
        if kinds:
            faults = plan_faults(nspec, kinds, run.scenario.topology, MAX_FAULTS)
            nemesis_task = asyncio.create_task(run_nemesis(run, faults, stop, verdict))
        else:
            history.record("note", text=f"nemesis: target {run.target.name} can do none of "
                           f"{', '.join(nspec.faults)}")  # fmt: skip
    run.progress.note(
        f"workload {spec.name}: {spec.messages} messages over {spec.sessions} sessions, "
        f"seed {spec.seed}"
    )
    try:
        accepted = await drive(spec, planned, history, addresses, run.scenario.name, numbering)
    finally:
        stop.set()
        if nemesis_task is not None:
            await nemesis_task
    await _settle(run, accepted, spec.settle)
    # what is still queued is not lost: the queues the target can show (the control
    # API, or a docker description's queue listing for the active queue)
    listable = any(run.target.can("control_api", ("GET", path)) for path in _QUEUES.values())
    if listable:
        await _snapshot(run, spec.name)
    report = check_workload(
        history, spec.name, spec.seed, since, frozenset(run.scenario.topology.nodes)
    )
    report.queues_seen = listable
    summary = report.summary()
    summary["traffic"] = traffic_note(history, spec.name)  # what was sent, in buckets
    history.record("note", text=f"workload {spec.name} summary", summary=summary)
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
    where = f"{step.where} (replay: --shadowcheck-workload-seed {spec.seed}){timeline}"
    # the given every behaviour of the scenario presupposes (a shadow copy made)
    unmet = scenario_given_unmet(run)
    retry = run.target.timers.get("TransientFailureRetryInterval")
    for result in results(
        report, behaviours, where, excerpt, outside, spec.all_delivered, evidence,
        settle=spec.settle, retry=retry, unmet=unmet,
    ):  # fmt: skip
        verdict.add(result)


def _scaled(spec: WorkloadSpec, scale: float, seed: int) -> WorkloadSpec:
    from dataclasses import replace

    return replace(spec, messages=max(1, round(spec.messages * scale)), seed=seed)


async def _settle(run: StepContext, accepted: list[Planned], settle: float) -> None:
    """Wait until every recipient of every accepted message was delivered, or ``settle``
    passed; reads only the deliveries new since the last look."""
    pending = {(p.message_id, r.lower()) for p in accepted for r in p.rcpt_tos}
    seen = dict.fromkeys(run.sinks, 0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settle
    run.progress.waiting(settle, f"for {len(accepted)} acknowledged workload messages")
    while pending and loop.time() < deadline:
        for name, sink in run.sinks.items():
            new = sink.deliveries[seen[name] :]
            seen[name] += len(new)
            for d in new:
                for rcpt in d.rcpt_tos:
                    pending.discard((d.message_id, rcpt.lower()))
        if pending:
            await asyncio.sleep(POLL)


async def _snapshot(run: StepContext, workload: str) -> None:
    for node in run.scenario.topology.nodes:
        if node in run.down or node in run.paused:
            continue
        for queue, path in _QUEUES.items():
            if not run.target.can("control_api", ("GET", path)):
                continue
            try:
                answer = await run.target.control(node, "GET", path)
            except TargetError:
                continue
            run.history.record("snapshot", node=node, queue=queue, answer=answer, workload=workload)


def workload_label(spec: WorkloadSpec) -> str:
    nemesis = ""
    if spec.nemesis:
        nemesis = f", nemesis {','.join(spec.nemesis.get('faults') or ['all'])}"
    return f"workload {spec.name}: {spec.messages} messages, {spec.sessions} sessions{nemesis}"
