"""The ``workload`` step: N messages over C concurrent sessions, every attempt recorded.

The messages (sender, recipients and so next hops, size, the node they are sent to) are
drawn from a seeded distribution before the first is sent, so a seed names the whole
workload. Each message is attempted once: a sender that retried would make its own
duplicates, and the history checker must be able to blame every duplicate on the
transport. Every attempt becomes one ``attempt`` event (what was sent, when, the
deciding reply or the error); deliveries are recorded by the sinks as ever.

With ``traffic: realistic`` each message also draws a
:class:`~pytest_shadowcheck.engine.traffic_model.Shape` (size up to MB, 8-bit and UTF-8
text, dot-leading and 998-octet lines, MIME attachments, 1-50 recipients, RSET, BDAT,
shared and missing Message-IDs, bursts); its content is rendered for what the server
advertised, and its attempt event carries a digest of what was sent, which the integrity
check compares every delivered copy with. A histogram of what was sent is recorded as a
``note`` (``traffic``) after the workload.

The step itself (:mod:`pytest_shadowcheck.engine.workload`) drives it with a nemesis
alongside (:mod:`pytest_shadowcheck.engine.nemesis`), waits for the acknowledged
messages, and hands the history to :mod:`pytest_shadowcheck.checks.workload`.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.integrity_workload import digest
from pytest_shadowcheck.engine import traffic_model
from pytest_shadowcheck.engine.traffic_model import Shape
from pytest_shadowcheck.network.client import make_message
from pytest_shadowcheck.network.smtp_text import TRACE_HEADER, trace_value
from pytest_shadowcheck.network.workload_client import Outcome, SessionError, WorkloadSession
from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pytest_shadowcheck.history import History

__all__ = ["Planned", "drive", "plan_messages", "traffic_note"]

DEFAULT_SENDER = "sender@ext.test"


@dataclass(frozen=True)
class Planned:
    """One message of the workload, drawn before anything is sent."""

    index: int
    ref: str
    message_id: str
    via: str
    mail_from: str
    rcpt_tos: tuple[str, ...]
    size: int
    #: realistic traffic's shape (None: a tidy message)
    shape: Shape | None = None
    #: what the Message-ID header field says (None: there is none); ``message_id``
    #: unless the shape shares an earlier message's or has none
    header_id: str | None = ""
    #: the harness's identity of the message (its X-Shadowcheck-Trace header): the
    #: accounting's key, as a Message-ID may be shared or missing
    trace: str = ""

    @property
    def sent_id(self) -> str | None:
        return self.message_id if self.header_id == "" else self.header_id


def plan_messages(spec: WorkloadSpec, token: str) -> list[Planned]:
    """The workload's messages, the same for the same spec and seed (``token`` only makes
    the Message-IDs unique to the run)."""
    if spec.traffic.realistic:
        return _plan_realistic(spec, token)
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
                via=rng.choice(spec.via),
                mail_from="" if rng.random() < spec.null_sender else DEFAULT_SENDER,
                rcpt_tos=tuple(rng.sample(spec.to, count)),
                size=int(math.exp(rng.uniform(low, high))),
                trace=trace_value(ref, token),
            )
        )
    return out


def _plan_realistic(spec: WorkloadSpec, token: str) -> list[Planned]:
    traffic = spec.traffic
    rng = random.Random(f"traffic:{spec.seed}:{spec.name}")
    dues = traffic_model.burst_dues(rng, traffic, spec.messages, spec.rate)
    out: list[Planned] = []
    for i in range(spec.messages):
        ref = f"{spec.name}-{i:05d}"
        shape = traffic_model.draw_shape(rng, traffic, dues[i], first=i == 0)
        header_id: str | None = ""
        if shape.id_kind == "none":
            header_id = None
        elif shape.id_kind == "shared":
            header_id = out[rng.randrange(len(out))].message_id
        out.append(
            Planned(
                index=i,
                ref=ref,
                message_id=f"<{ref}.{token}@shadowcheck.test>",
                via=rng.choice(spec.via),
                mail_from="" if rng.random() < spec.null_sender else DEFAULT_SENDER,
                rcpt_tos=tuple(traffic_model.draw_recipients(rng, traffic, spec.to)),
                size=traffic_model.draw_size(rng, traffic),
                shape=shape,
                header_id=header_id,
                trace=trace_value(ref, token),
            )
        )
    return out


def render_for(
    planned: Planned, scenario: str, seed: int, caps: frozenset[str]
) -> traffic_model.Rendered:
    """The message as sent to a server advertising ``caps``: a tidy one as ever, a
    realistic one from its shape."""
    if planned.shape is None:
        return traffic_model.Rendered(render(planned, scenario), (), "7bit")
    header = {
        "From": planned.mail_from or "mailer-daemon@ext.test",
        "To": ", ".join(planned.rcpt_tos),
        "Subject": f"shadowcheck {scenario} {planned.ref}",
    }
    if planned.sent_id is not None:
        header["Message-ID"] = planned.sent_id
    header[TRACE_HEADER] = planned.trace
    return traffic_model.render_shaped(
        planned.shape, f"content:{seed}:{planned.ref}", planned.size, header, caps
    )


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
    keeps one session per node and opens a new one after an error, after ``per_session``
    transactions or where a realistic message's shape says so; after a connection failure
    it pauses briefly, as a sender would, instead of burning the rest of the workload
    against a dead node. A histogram of what was sent is recorded as a ``traffic`` note."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    queue = iter(planned)
    conns: dict[str, int] = {}
    accepted: list[Planned] = []
    rows: list[dict[str, Any]] = []

    async def worker() -> None:
        sessions: dict[str, WorkloadSession] = {}
        try:
            for message in queue:
                if spec.rate > 0:
                    offset = message.shape.due if message.shape else message.index / spec.rate
                    if (wait := start + offset - loop.time()) > 0:
                        await asyncio.sleep(wait)
                await _attempt(message, sessions)
        finally:
            for session in sessions.values():
                await session.quit()

    async def _attempt(message: Planned, sessions: dict[str, WorkloadSession]) -> None:
        link = f"client->{message.via}"
        sent = history.now()
        shape = message.shape
        session = sessions.get(message.via)
        if session is not None and (
            not session.open
            or session.transactions >= spec.per_session
            or (shape is not None and shape.new_session and session.transactions)
        ):
            await session.quit()
            session = None
        rset = False
        if session is not None and shape is not None and shape.rset_before:
            rset = await session.rset()
            if not rset:
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
                _record(history, spec, message, link, session.conn, sent,
                        Outcome("CONNECT", None, "", str(exc)))  # fmt: skip
                await asyncio.sleep(0.2)
                return
            sessions[message.via] = session
        content = render_for(message, scenario, spec.seed, session.extensions)
        outcome = await session.transaction(
            message.mail_from, list(message.rcpt_tos), content.raw, content.params,
            bdat=shape is not None and shape.bdat,
        )  # fmt: skip
        _record(history, spec, message, link, session.conn, sent, outcome,
                digest(content.raw) if shape is not None else None)  # fmt: skip
        rows.append(_row(message, content, outcome, (link, session.conn),
                         session.transactions, rset, sent))  # fmt: skip
        if outcome.accepted:
            # acknowledged for the recipients the server took at RCPT, not the others
            taken = tuple(r for r in message.rcpt_tos if r not in outcome.refused_rcpts)
            accepted.append(replace(message, rcpt_tos=taken))
        elif outcome.error:
            sessions.pop(message.via, None)
            await asyncio.sleep(0.2)

    await asyncio.gather(*(worker() for _ in range(max(1, spec.sessions))))
    history.record(
        "note", text=f"workload {spec.name} traffic", workload=spec.name,
        traffic=traffic_model.histogram(rows),
    )  # fmt: skip
    return accepted


def traffic_note(history: History, workload: str) -> dict[str, Any] | None:
    """The histogram :func:`drive` recorded for ``workload`` (the last one)."""
    for event in reversed(history.events(kind="note")):
        if event.data.get("workload") == workload and "traffic" in event.data:
            return dict(event.data["traffic"])
    return None


def _row(
    message: Planned,
    content: traffic_model.Rendered,
    outcome: Outcome,
    session: tuple[str, int],
    tx: int,
    rset: bool,
    sent: float,
) -> dict[str, Any]:
    """What the histogram counts of one attempt."""
    shape = message.shape or Shape()
    return {
        "size": len(content.raw),
        "rcpts": len(message.rcpt_tos),
        "body": content.body,
        "utf8_subject": shape.utf8_subject,
        "mime": shape.mime,
        "dot_lines": bool(shape.dot_lines),
        "long_lines": bool(shape.long_lines),
        "session": session,
        "tx": tx,
        "rset": rset,
        "bdat": outcome.bdat,
        "pipelined": outcome.pipelined,
        "id_kind": "none" if message.sent_id is None else
                   "shared" if message.sent_id != message.message_id else "unique",
        "null": not message.mail_from,
        "sent": sent,
    }  # fmt: skip


def _record(
    history: History,
    spec: WorkloadSpec,
    message: Planned,
    link: str,
    conn: int,
    sent: float,
    outcome: Outcome,
    digest: dict[str, Any] | None = None,
) -> None:
    """One ``attempt`` event; a realistic message's also says what was sent (its
    ``digest``: body hash and shape, header field hashes) and how (``mail_params``,
    ``bdat``, ``pipelined``). ``trace`` is the message's identity; ``message_id`` what
    its header said (shared with another message, or None)."""
    extra: dict[str, Any] = {"trace": message.trace}
    if outcome.refused_rcpts:
        extra["refused_rcpts"] = list(outcome.refused_rcpts)
    if digest is not None:
        extra.update(digest, bdat=outcome.bdat, pipelined=outcome.pipelined)
    history.record(
        "attempt",
        link,
        conn,
        workload=spec.name,
        ref=message.ref,
        message_id=message.sent_id,
        via=message.via,
        mail_from=message.mail_from,
        rcpt_tos=list(message.rcpt_tos),
        size=message.size,
        sent=round(sent, 6),
        command=outcome.command,
        code=outcome.code,
        text=outcome.text,
        error=outcome.error,
        **extra,
    )
