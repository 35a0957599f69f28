"""The always-on integrity invariant: every delivered copy is the message the sender sent.

A copy that was altered on its way (a shadow copy dot-stuffed twice, a lost
recipient, a rewritten reverse-path) and then promoted and delivered is a loss
of its own kind: the no-loss invariant counts it delivered. This one compares
each delivery of a message the scenario sent with what the sender sent:

- the body, byte for byte;
- the header section: the sender's lines unchanged, as the last lines of the
  delivered header section; above them only trace fields the transport may
  prepend (``Received``, ``Return-Path``, what the target says its MTA adds -
  ``Target.added_headers`` - and what the scenario permits with
  ``permitted_headers``);
- the envelope sender (a null reverse-path stays null);
- the recipients: no recipient the sender did not name (a group named in the
  directory may expand), and a sink that got the message for a domain got it for
  every recipient of that domain (across its copies).

A mismatch FAILs with what differs, which copy, and which node delivered it; the
check evidences every behaviour of the scenario, like a loss. Nothing is checked
for a message whose content the harness did not compose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.events import deliveries, node_of
from pytest_shadowcheck.checks.integrity_workload import workload_copies
from pytest_shadowcheck.network.smtp_text import header_section
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView
    from pytest_shadowcheck.network.messages import Message
    from pytest_shadowcheck.network.sink import Delivery

__all__ = ["TRACE_HEADERS", "integrity_invariant", "refused_for_good"]

#: header fields a transport adds on its way (RFC 5321 section 4.4): permitted on top
TRACE_HEADERS = frozenset({"received", "return-path"})

INVARIANT = "integrity"


def _fields(header: bytes) -> list[bytes]:
    """Header fields (folded continuation lines kept with their field), CRLF-split."""
    fields: list[bytes] = []
    for line in header.split(b"\r\n"):
        if not line:
            continue
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] += b"\r\n" + line
        else:
            fields.append(line)
    return fields


def _name(field: bytes) -> str:
    return field.split(b":", 1)[0].decode("ascii", "replace").strip().lower()


def _split(raw: bytes) -> tuple[bytes, bytes]:
    head = header_section(raw)
    return head, raw[len(head) :]


def _show(data: bytes, limit: int = 120) -> str:
    text = repr(data)[2:-1]
    return text if len(text) <= limit else text[:limit] + "..."


def _line_difference(a: bytes, b: bytes) -> str:
    """Where two versions of one line part, shown around that octet: a long line cut
    or wrapped differs only near its end, past what a plain quote of its start shows."""
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    start = max(0, at - 30)
    lead = "..." if start else ""

    def around(line: bytes) -> str:
        shown = _show(line[start : at + 30], limit=90)
        return f"'{lead}{shown}'" + (" (the line ends there)" if len(line) <= at + 30 else "")

    sizes = f"sent {len(a)} octets, delivered {len(b)}" if len(a) != len(b) else f"{len(a)} octets"
    return f"{sizes}, first different at octet {at + 1}: sent {around(a)}, delivered {around(b)}"


def _first_difference(sent: bytes, got: bytes) -> str:
    sent_lines, got_lines = sent.split(b"\r\n"), got.split(b"\r\n")
    for n, (a, b) in enumerate(zip(sent_lines, got_lines, strict=False), start=1):
        if a != b:
            return f"body line {n}: " + _line_difference(a, b)
    return (
        f"the body was {len(sent)} bytes ({len(sent_lines)} lines), "
        f"delivered {len(got)} bytes ({len(got_lines)} lines)"
    )


def compare_copy(message: Message, delivery: Delivery, permitted: frozenset[str]) -> list[str]:
    """What differs between the sent message and one delivered copy (empty: nothing)."""
    problems: list[str] = []
    sent_head, sent_body = _split(message.content)
    got_head, got_body = _split(delivery.raw)
    if got_body != sent_body:
        problems.append(_first_difference(sent_body, got_body))
    sent_fields, got_fields = _fields(sent_head), _fields(got_head)
    tail = got_fields[len(got_fields) - len(sent_fields) :] if sent_fields else []
    if tail != sent_fields:
        missing = [f for f in sent_fields if f not in got_fields]
        changed = missing[0] if missing else sent_fields[0]
        problems.append(
            f"the sender's header field '{_show(changed)}' "
            + ("is missing or changed" if missing else "is no longer in its place")
        )
    else:
        added = got_fields[: len(got_fields) - len(sent_fields)]
        foreign = [f for f in added if _name(f) not in permitted]
        if foreign:
            problems.append(
                f"header field '{_show(foreign[0])}' was added (only trace fields may be: "
                f"{', '.join(sorted(permitted))})"
            )
    sent_from = (message.mail_from or "").strip("<>")
    got_from = delivery.mail_from.strip("<>")
    if got_from != sent_from:
        problems.append(f"envelope sender changed: sent <{sent_from}>, delivered with <{got_from}>")
    return problems


def _expandable(run: RunView) -> set[str]:
    """Addresses that may expand to others: the directory's groups, at start and
    as the scenario's directory steps change them."""
    groups = set((run.scenario.topology.directory or {}).get("groups", {}))
    for step in run.scenario.steps:
        group = getattr(step.arg, "group", None) if step.kind == "directory" else None
        if group is not None:
            groups.add(str(group))
    return {g.lower() for g in groups}


def refused_for_good(run: RunView) -> dict[str, set[str]]:
    """sink -> the recipients it refused for good (a scripted 5xx to their RCPT): a copy
    that never reaches them there is the next hop's doing, not the transport's."""
    out: dict[str, set[str]] = {}
    for event in run.history.events(kind="note"):
        data = event.data
        if data.get("stage") == "RCPT" and str(data.get("reply", "")).startswith("5"):
            out.setdefault(str(data.get("sink")), set()).add(str(data.get("rcpt_to")).lower())
    return out


def _recipient_problems(
    message: Message,
    copies: list[tuple[str, Delivery]],
    groups: set[str],
    refused: dict[str, set[str]] | None = None,
) -> list[str]:
    sent = [r.lower() for r in message.rcpt_to]
    expands = [r for r in sent if r in groups]
    problems = []
    if not expands:
        foreign = sorted({r.lower() for _, d in copies for r in d.rcpt_tos} - set(sent))
        if foreign:
            problems.append(f"delivered to {', '.join(foreign)}, which the sender never named")
    by_sink: dict[str, set[str]] = {}
    for sink, delivery in copies:
        by_sink.setdefault(sink, set()).update(r.lower() for r in delivery.rcpt_tos)
    for sink, got in sorted(by_sink.items()):
        domains = {r.rpartition("@")[2] for r in got}
        never = got | (refused or {}).get(sink, set())
        lost = [
            r
            for r in sent
            if r not in expands and r.rpartition("@")[2] in domains and r not in never
        ]
        if lost:
            problems.append(
                f"{sink} got the message for {', '.join(sorted(got))} but never for "
                f"{', '.join(lost)} (same domain)"
            )
    return problems


def integrity_invariant(run: RunView) -> list[CheckResult]:
    """One result per message the scenario composed and that was delivered."""
    permitted = TRACE_HEADERS | {h.lower() for h in run.scenario.permitted_headers}
    permitted |= {h.lower() for h in run.target.added_headers}
    groups = _expandable(run)
    refused = refused_for_good(run)
    # a copy that lost the harness's trace is matched by Message-ID, which a resending
    # sender reuses (CR-8): such a copy may be any of the messages carrying it
    same_id: dict[str, list[Message]] = {}
    for message in run.messages.values():
        if message.content:
            same_id.setdefault(message.message_id, []).append(message)
    results = []
    for ref, message in run.messages.items():
        if not message.content:
            continue
        copies = deliveries(run, ref, exact=True)
        if not copies:
            continue
        problems = []
        for sink, delivery in copies:
            alike = [message] if delivery.trace else same_id[message.message_id]
            found = [compare_copy(m, delivery, permitted) for m in alike]
            if all(found):
                by = node_of(delivery.helo)
                copy = f"the copy {by} delivered to {sink} at +{delivery.t:.2f}s"
                mine = found[alike.index(message)]
                problems += [f"{copy}: {p}" for p in mine]
        problems += _recipient_problems(message, copies, groups, refused)
        sender = (message.mail_from or "").strip("<>")
        expected = (
            f"every delivered copy of {ref} is what the sender sent: same body, same header "
            f"fields under any trace fields, envelope sender <{sender}>, "
            f"recipients {', '.join(message.rcpt_to)}"
        )
        name = f"integrity of {ref}"
        if not problems:
            results.append(
                CheckResult(
                    name,
                    Status.PASS,
                    expected,
                    f"{len(copies)} copy(ies) as sent",
                    behaviours=[INVARIANT],
                )
            )
            continue
        first = min(copies, key=lambda c: c[1].t)[1]
        results.append(
            CheckResult(
                name,
                Status.FAIL,
                expected,
                "; ".join(problems),
                excerpt=run.excerpt(first.t, message.links(all_nodes=True)),
            )
        )
    # the workloads' copies, against the digest of what was sent (issue 26)
    return results + workload_copies(run, permitted)


def envelope_of(items: list[dict[str, Any]], index: int) -> tuple[str | None, list[str]]:
    """The MAIL FROM and RCPT TO addresses a raw session gave before item ``index``."""
    sender: str | None = None
    recipients: list[str] = []
    for item in items[:index]:
        line = str(item.get("send", ""))
        upper = line.upper()
        if upper.startswith("MAIL FROM:"):
            sender = line[10:].strip().split(" ")[0].strip("<>")
            recipients = []
        elif upper.startswith("RCPT TO:"):
            recipients.append(line[8:].strip().split(" ")[0].strip("<>"))
    return sender, recipients
