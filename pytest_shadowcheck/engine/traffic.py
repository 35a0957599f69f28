"""The ``workload`` step: N messages over C concurrent sessions, every attempt recorded.

The messages (sender, recipients and so next hops, size, the node they are sent to) are
drawn from a seeded distribution before the first is sent, so a seed names the whole
workload. Each message is attempted once: a sender that retried would make its own
duplicates, and the history checker must be able to blame every duplicate on the
transport. Every attempt becomes one ``attempt`` event (what was sent, when, the
deciding reply or the error); deliveries are recorded by the sinks as ever.

The step itself (:mod:`pytest_shadowcheck.engine.workload`) drives it with a nemesis
alongside (:mod:`pytest_shadowcheck.engine.nemesis`), waits for the acknowledged
messages, and hands the history to :mod:`pytest_shadowcheck.checks.workload`.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.network.client import make_message
from pytest_shadowcheck.network.smtp_text import TRACE_HEADER, trace_value
from pytest_shadowcheck.network.workload_client import SessionError, WorkloadSession
from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pytest_shadowcheck.history import History

__all__ = ["Planned", "drive", "plan_messages"]

DEFAULT_SENDER = "sender@ext.test"


@dataclass(frozen=True)
class Planned:
    """One message of the workload, drawn before anything is sent."""

    index: int
    ref: str
    message_id: str
    #: the harness's identity of the message (its trace header): the accounting's key
    trace: str
    via: str
    mail_from: str
    rcpt_tos: tuple[str, ...]
    size: int


def plan_messages(spec: WorkloadSpec, token: str) -> list[Planned]:
    """The workload's messages, the same for the same spec and seed (``token`` only makes
    the Message-IDs unique to the run)."""
    rng = random.Random(f"workload:{spec.seed}:{spec.name}")
    low, high = math.log(spec.sizes[0] or 1), math.log(max(spec.sizes[1], spec.sizes[0], 1))
    out = []
    for i in range(spec.messages):
        ref = f"{spec.name}-{i:05d}"
        count = 1
        if min(spec.max_recipients, len(spec.to)) > 1 and rng.random() < spec.multi_recipient:
            count = rng.randint(2, min(spec.max_recipients, len(spec.to)))
        out.append(
            Planned(
                index=i,
                ref=ref,
                message_id=f"<{ref}.{token}@shadowcheck.test>",
                trace=trace_value(ref, token),
                via=rng.choice(spec.via),
                mail_from="" if rng.random() < spec.null_sender else DEFAULT_SENDER,
                rcpt_tos=tuple(rng.sample(spec.to, count)),
                size=int(math.exp(rng.uniform(low, high))),
            )
        )
    return out


def render(planned: Planned, scenario: str) -> bytes:
    return make_message(
        planned.message_id,
        subject=f"shadowcheck {scenario} {planned.ref}",
        body=f"workload message {planned.ref}\n",
        size=planned.size,
        headers={TRACE_HEADER: planned.trace},
        mail_from=planned.mail_from or "mailer-daemon@ext.test",
        to=", ".join(planned.rcpt_tos),
    )


async def drive(
    spec: WorkloadSpec,
    planned: list[Planned],
    history: History,
    addresses: dict[str, tuple[str, int]],
    scenario: str = "workload",
    numbering: Mapping[str, Callable[[Any], int | None]] | None = None,
) -> list[Planned]:
    """Send every planned message once over ``spec.sessions`` concurrent workers; return
    the messages the target acknowledged (250 after the content).

    ``addresses``: where to send for each node (its client proxy, or a sink in the
    benchmark); ``numbering``: per node, the proxy's connection number for a local
    address, so the history's workload lines name the proxy's connection. A worker
    keeps one session per node and opens a new one after an error or ``per_session``
    transactions; after a connection failure it pauses briefly, as a sender would,
    instead of burning the rest of the workload against a dead node."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    queue = iter(planned)
    conns: dict[str, int] = {}
    accepted: list[Planned] = []

    async def worker() -> None:
        sessions: dict[str, WorkloadSession] = {}
        try:
            for message in queue:
                if spec.rate > 0:
                    due = start + message.index / spec.rate
                    if (wait := due - loop.time()) > 0:
                        await asyncio.sleep(wait)
                await _attempt(message, sessions)
        finally:
            for session in sessions.values():
                await session.quit()

    async def _attempt(message: Planned, sessions: dict[str, WorkloadSession]) -> None:
        link = f"client->{message.via}"
        sent = history.now()
        session = sessions.get(message.via)
        if session is not None and (not session.open or session.transactions >= spec.per_session):
            await session.quit()
            session = None
        if session is None:
            conns[link] = conns.get(link, 0) + 1
            session = WorkloadSession(
                history, link, conns[link], *addresses[message.via], timeout=spec.timeout,
                numbering=(numbering or {}).get(message.via),
            )  # fmt: skip
            try:
                await session.connect()
            except SessionError as exc:
                _record(
                    history, spec, message, link, session.conn, sent, "CONNECT", None, "", str(exc)
                )  # fmt: skip
                await asyncio.sleep(0.2)
                return
            sessions[message.via] = session
        outcome = await session.transaction(
            message.mail_from, list(message.rcpt_tos), render(message, scenario)
        )
        _record(
            history, spec, message, link, session.conn, sent,
            outcome.command, outcome.code, outcome.text, outcome.error,
        )  # fmt: skip
        if outcome.accepted:
            accepted.append(message)
        elif outcome.error:
            sessions.pop(message.via, None)
            await asyncio.sleep(0.2)

    await asyncio.gather(*(worker() for _ in range(max(1, spec.sessions))))
    return accepted


def _record(
    history: History,
    spec: WorkloadSpec,
    message: Planned,
    link: str,
    conn: int,
    sent: float,
    command: str,
    code: int | None,
    text: str,
    error: str | None,
) -> None:
    history.record(
        "attempt",
        link,
        conn,
        workload=spec.name,
        ref=message.ref,
        message_id=message.message_id,
        trace=message.trace,
        via=message.via,
        mail_from=message.mail_from,
        rcpt_tos=list(message.rcpt_tos),
        size=message.size,
        sent=round(sent, 6),
        command=command,
        code=code,
        text=text,
        error=error,
    )
