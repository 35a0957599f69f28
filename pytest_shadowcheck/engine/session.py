"""The ``session`` step: a raw SMTP conversation the harness itself holds with a node.

Used to play a stranger (XS-3: an anonymous or unauthorised client trying the
shadow verbs) or any client that must say exact lines. The session goes
through the ``client->NODE`` proxy, so its lines are in the history like any
other. Each item is sent as given (CRLF added) and one reply is read; an item
with ``reply`` adds a check that the reply matches that regular expression. A
reply that does not come within ``timeout`` ends the session (a late one would
be read as the next line's): that line is judged as unanswered, the lines never
sent are NOT-APPLICABLE.
An item ``{message: ID}`` sends a generated message's content and the final
dot, and registers ``ID`` as a message of the scenario, so every expectation
(reply, delivered, queue...) and the no-loss invariant apply to it. An item
``{auth_as: NODE}`` authenticates as that node of the topology, with the
password the cluster plan's secret gives it (docs/protocol.md section 3): a
peer of another boundary trying what only the boundary's own peers may.

With ``idle`` the session then stays open up to that long, waiting for the
node to close it (TO-1: ConnectionInactivityTimeout); with ``keepalive`` it
sends NOOP that often meanwhile, so it is never idle and only the absolute
ConnectionTimeout can end it. The node's close is a ``close`` event on
``client->NODE``: match it with ``{link: client->NODE, closed: server}``.

With ``control`` (verb -> stand-in verb) the harness holds a second session,
the same lines with those verbs replaced by verbs nobody implements, and
checks that the node treats both alike: the same reply code at each line and
the session ending at the same line. That is how XS-3 asks "can a stranger
tell the shadow verbs from unknown ones?" of any MTA, whatever its own limit
of unknown verbs per session.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.events import find_event, matcher_phrase
from pytest_shadowcheck.checks.integrity import envelope_of
from pytest_shadowcheck.checks.prose import reply_words
from pytest_shadowcheck.network.client import (
    RawReply,
    RecordingClient,
    Reply,
    SendResult,
    make_message,
)
from pytest_shadowcheck.network.smtp_text import (
    TRACE_HEADER,
    dot_stuff,
    mask_auth_line,
    parse_enhanced_code,
    peer_auth_line,
    trace_value,
)
from pytest_shadowcheck.verdict import CheckResult, Status, Verdict

if TYPE_CHECKING:
    from pytest_shadowcheck.engine.context import StepContext as Run
    from pytest_shadowcheck.scenario.model import Step
    from pytest_shadowcheck.scenario.steps import SayItem, SessionSpec

__all__ = ["run_session", "session_label"]


#: what a line that was never sent got, when the node had ended the session
NOT_SENT = "nothing: the session ended before this line was sent"


def _describe(reply: RawReply | None, ended: str = NOT_SENT) -> str:
    """What one line got; ``ended``: what a line never sent got (see :func:`_ended`)."""
    if reply is None:
        return ended
    if reply.outcome == "reply":
        return " | ".join(reply.lines)
    partial = f" (partial: {' | '.join(reply.lines)})" if reply.lines else ""
    if reply.outcome == "timeout":
        # the client hung up rather than read on: a late reply is never paired with
        # a later line (a tarpitting server answers refusals seconds late on purpose)
        return (
            f"no reply within {reply.waited:g} s{partial}; the harness then ended the "
            "session (raise the step's timeout for a node that answers this slowly)"
        )
    return f"no reply: {reply.outcome}{partial}"


def _ended(replies: list[RawReply]) -> str:
    """What the lines after a session's last reply got: never sent, and why."""
    last = replies[-1] if replies else None
    if last is not None and last.outcome == "timeout":
        what = f"the reply to {last.command}" if last.sent is not None else "the greeting"
        return (
            f"not sent: the harness had ended the session after waiting "
            f"{last.waited:g} s in vain for {what}"
        )
    return NOT_SENT


def _reply_text(reply: RawReply) -> str:
    """The reply as the regular expressions see it: its lines, joined by newlines."""
    return "\n".join(reply.lines)


def session_label(spec: SessionSpec) -> str:
    """The step as the history shows it: where to, and what is said (credentials masked)."""
    return f"session via={spec.via}: " + " / ".join(_shown(item) for item in spec.say)


def _shown(item: SayItem) -> str:
    if item.message is not None:
        return f"message {item.message}"
    if item.auth_as is not None:
        return f"AUTH PLAIN as {item.auth_as}"
    return mask_auth_line(item.send or "")


async def run_session(run: Run, step: Step, verdict: Verdict) -> None:
    spec: SessionSpec = step.arg
    via = spec.via
    link = f"client->{via}"
    items = spec.say
    payloads: list[bytes] = []
    for index, item in enumerate(items):
        if item.message is not None:
            ref = item.message
            message_id = f"<{ref}.{run.token}@shadowcheck.test>"
            raw = make_message(
                message_id,
                subject=f"shadowcheck {run.scenario.name} {ref} (raw session)",
                body=f"scenario {run.scenario.name}, message {ref}\n",
                headers={TRACE_HEADER: trace_value(ref, run.token)},
            )
            sender, recipients = envelope_of([{"send": i.send or ""} for i in items], index)
            run.register_message(ref, message_id, via, raw, sender, recipients)
            payloads.append(dot_stuff(raw) + b".\r\n")
        elif item.auth_as is not None:
            payloads.append(peer_auth_line(run.peer_secret, item.auth_as).encode() + b"\r\n")
        else:
            payloads.append((item.send or "").encode() + b"\r\n")
    answers, ended = await _converse(run, link, payloads, spec)
    # the scenario's given (e.g. "a shadow copy was made") governs these checks too
    given = run.scenario.given
    unmet = given is not None and find_event(run, given) is None
    if spec.control:
        # no control session when the given never happened: nothing would be judged
        stand_in = _with_stand_ins(items, payloads, spec.control)
        controls = None if unmet else await _converse(run, link, stand_in, spec)
        verdict.add(_compare_with_control(run, step, items, (answers, ended), controls))
    end, node_ended = _ended_at(items, answers)
    ended = node_ended or ended
    for index, (item, answer) in enumerate(zip(items, answers, strict=True)):
        shown = _shown(item)
        if index > end:
            answer = None  # after a 421 or a hang-up: not an answer of the MTA's
        if item.message is not None:
            _settle_message(run, item.message, answer, ended)
        if item.reply is None and not item.refused:
            continue
        if item.refused:
            ok = answer is not None and (
                answer.outcome == "closed" or (answer.code is not None and answer.code >= 400)
            )
            wanted = "a refusal (any 4xx or 5xx reply, or ending the session)"
        else:
            ok = (
                answer is not None
                and answer.outcome == "reply"
                and re.search(item.reply or "", _reply_text(answer)) is not None
            )
            wanted = reply_words(item.reply or "")
        around = answer.t if answer is not None else run.history.now()
        asked = f"the content of {item.message}" if item.message is not None else shown
        expected = f"{via} answers {asked} with {wanted}"
        if answer is None:
            # never sent (the node ended the session, or the harness did at an earlier
            # line's missing reply, judged at that line): nothing was answered to judge
            status, observed = Status.NOT_APPLICABLE, f"this line was never sent: {ended}"
        elif unmet and given is not None:
            status, observed = (
                Status.NOT_APPLICABLE,
                (
                    f"{matcher_phrase(given, run).not_yet}, so there was nothing to check "
                    f"(the reply was: {_describe(answer, ended)})"
                ),
            )
        else:
            said = _describe(answer, ended)
            if answer is not None and answer.outcome == "reply":
                said = f"{via} answered `{said}`"
            status, observed = (Status.PASS if ok else Status.FAIL), said
        verdict.add(
            CheckResult(
                f"session reply to {shown}",
                status,
                expected,
                observed,
                where=str(item.where),
                excerpt="" if unmet else run.excerpt(around, [link]),
                behaviours=list(spec.behaviours),
            )
        )


#: one answer per line (None: never sent), and what a line never sent got
Conversation = tuple[list[RawReply | None], str]


async def _converse(run: Run, link: str, payloads: list[bytes], spec: SessionSpec) -> Conversation:
    """Hold one raw session; one answer per payload, None for those never sent (the
    node hung up, or the harness did when a reply did not come in time)."""
    proxy = run.proxies[link]
    client = RecordingClient(run.history, link=link, numbering=proxy.connection_number)
    host, port = proxy.address
    replies = await client.raw_session(
        host,
        port,
        payloads,
        read_timeout=spec.timeout,
        linger=spec.idle,
        keepalive=spec.keepalive,
    )
    # replies[0] is the greeting; then one reply per item sent, fewer if the session ended;
    # what came while lingering is past the last payload
    answers: list[RawReply | None] = [*replies[1:], *[None] * len(payloads)]
    sent = min(len(replies), len(payloads) + 1)
    return answers[: len(payloads)], _ended(replies[:sent])


def _with_stand_ins(
    items: tuple[SayItem, ...], payloads: list[bytes], control: dict[str, str]
) -> list[bytes]:
    """The session's payloads with each controlled verb replaced by its stand-in."""
    by_verb = {verb.upper(): stand_in for verb, stand_in in control.items()}
    replaced = []
    for item, payload in zip(items, payloads, strict=True):
        verb, space, rest = (item.send or "").partition(" ")
        if verb.upper() in by_verb:
            payload = f"{by_verb[verb.upper()]}{space}{rest}".encode() + b"\r\n"
        replaced.append(payload)
    return replaced


def _fate(answer: RawReply | None) -> str:
    """What a client can tell from one answer without reading its text."""
    if answer is None:
        return "nothing (the session had ended)"
    if answer.outcome == "timeout":
        return f"no reply within {answer.waited:g} s"
    if answer.outcome != "reply":
        return f"no reply ({answer.outcome})"
    enhanced = parse_enhanced_code("\n".join(line[4:] for line in answer.lines))
    return f"{answer.code} {enhanced}" if enhanced else str(answer.code)


def _compare_with_control(
    run: Run,
    step: Step,
    items: tuple[SayItem, ...],
    conversation: Conversation,
    controls: Conversation | None,
) -> CheckResult:
    """Compare the session with its control; ``controls`` None: the scenario's given
    never happened, so there was no control session."""
    spec: SessionSpec = step.arg
    control = spec.control
    verbs = ", ".join(control)
    stand_ins = ", ".join(control.values())
    expected = (
        f"{spec.via} treats {verbs} as it treats the unknown {stand_ins} in the same "
        "session: the same reply code at every line, the session ending at the same line"
    )
    name = f"{verbs} answered like unknown verbs"
    behaviours = list(spec.behaviours)
    if controls is None:
        return CheckResult(
            name,
            Status.NOT_APPLICABLE,
            expected,
            "the scenario's given had not happened, so there was nothing to compare",
            where=str(step.where),
            behaviours=behaviours,
        )
    answers, ended = conversation
    theirs_all, theirs_ended = controls
    for number, (item, ours, theirs) in enumerate(zip(items, answers, theirs_all, strict=True), 1):
        if _fate(ours) != _fate(theirs):
            shown = _shown(item)
            observed = (
                f"at line {number} ({shown}) {spec.via} answered "
                f"{_describe(ours, ended)}; with the stand-ins: "
                f"{_describe(theirs, theirs_ended)}; a stranger can tell them apart"
            )
            times = [answer.t for answer in (ours, theirs) if answer is not None]
            around = max(times, default=run.history.now())
            return CheckResult(
                name,
                Status.FAIL,
                expected,
                observed,
                where=str(step.where),
                excerpt=run.excerpt(around, [f"client->{spec.via}"], before=6.0),
                behaviours=behaviours,
            )
    fates = " / ".join(_fate(a) for a in answers)
    return CheckResult(
        name,
        Status.PASS,
        expected,
        f"both sessions: {fates}",
        where=str(step.where),
        behaviours=behaviours,
    )


def _ended_at(items: tuple[SayItem, ...], answers: list[RawReply | None]) -> tuple[int, str]:
    """Where and how the node ended the session early: the index of the line it ended it
    at (a 421, which closes the channel, or a hang-up), and in words; (last line, "")
    when it did not. What the harness sent after that line was never the MTA's to answer."""
    for index, (item, answer) in enumerate(zip(items, answers, strict=True)):
        if answer is None:
            return index - 1, ""
        if answer.outcome == "closed" or answer.code == 421:
            how = "closed it" if answer.outcome == "closed" else f"answered `{_describe(answer)}`"
            at = f"line {index + 1} ({_shown(item)})"
            return index, f"the node ended the session at {at}: it {how}"
    return len(items), ""


def _settle_message(run: Run, ref: str, answer: RawReply | None, ended: str) -> None:
    """Record what the sender was told about a message sent in a raw session; a message
    whose content was never sent (the session ended first) is marked unsent, so no check
    judges it."""
    message = run.messages[ref]
    if answer is None:
        message.unsent = ended
    if answer is None or answer.outcome != "reply" or answer.code is None:
        message.result = SendResult(
            accepted=False,
            code=None,
            enhanced=None,
            text="",
            replies=[],
            error=_describe(answer, ended),
            message_id=message.message_id,
            last_command="EOD",
        )
        return
    text = "\n".join(line[4:] for line in answer.lines)
    reply = Reply("EOD", answer.code, parse_enhanced_code(text), text, answer.t)
    message.result = SendResult(
        accepted=answer.code == 250,
        code=answer.code,
        enhanced=reply.enhanced,
        text=text,
        replies=[reply],
        error=None,
        message_id=message.message_id,
        last_command="EOD",
        deciding_reply=reply,
    )
