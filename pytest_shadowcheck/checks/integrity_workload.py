"""The integrity invariant for workload copies: every delivered copy is what was sent.

A scenario's own messages are kept whole (:mod:`pytest_shadowcheck.checks.integrity`
compares them byte for byte). A workload sends hundreds, some of several MB, so its
``attempt`` events keep only a digest of each realistic message (:func:`digest`): the
body's SHA-256 and its shape in figures, and every header field's name and hash. Each
delivered copy of a workload message is compared with it:

- the body: same hash (when not, its shape in figures - bytes, lines, longest line,
  lines starting with a dot - says how it differs);
- the sender's header fields, unchanged and in order, as the last of the copy's header
  section; above them only fields the transport may add (trace fields and the like);
- the envelope sender (a null reverse-path stays null);
- no recipient the sender did not name. A recipient never delivered is the workload
  checker's (a loss), not counted twice here.

One result per workload; a copy is found by the harness's trace value when the sink
records it, else by Message-ID when no other message of the workload shares it.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.events import node_of
from pytest_shadowcheck.checks.workload import PROMOTIONS
from pytest_shadowcheck.network.smtp_text import header_section
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView
    from pytest_shadowcheck.network.sink import Delivery

__all__ = ["body_shape", "digest", "workload_copies"]

#: copies a failure lists before it says "and N more"
LISTED = 5


def _fields(head: bytes) -> list[bytes]:
    fields: list[bytes] = []
    for line in head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] += b"\r\n" + line
        elif line:
            fields.append(line)
    return fields


def _field_key(field: bytes) -> list[str]:
    """[name, hash of the field, hash of it unfolded with its white space runs as one
    space]: a relay may re-fold a field (sendmail folds address lists at its own
    column), which changes the first hash and not the second."""
    raw_name, _, value = field.partition(b":")
    name = raw_name.decode("ascii", "replace").strip()
    unfolded = name.lower().encode() + b":" + b" ".join(value.split())
    return [
        name,
        hashlib.sha256(field).hexdigest()[:16],
        hashlib.sha256(unfolded).hexdigest()[:16],
    ]


def _same(sent: list[str], got: list[str]) -> bool:
    """The same field, byte for byte or but for its folding (a digest recorded before
    the second hash compares byte for byte)."""
    return sent[1] == got[1] or (len(sent) > 2 and sent[2:] == got[2:])


def body_shape(body: bytes) -> list[int]:
    """[bytes, lines, longest line, lines starting with a dot]."""
    lines = body.split(b"\r\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [
        len(body),
        len(lines),
        max((len(line) for line in lines), default=0),
        sum(1 for line in lines if line.startswith(b".")),
    ]


def digest(raw: bytes) -> dict[str, Any]:
    """What the check needs of a sent message, a few hundred bytes whatever its size."""
    head = header_section(raw)
    body = raw[len(head) :]
    return {
        "body_sha256": hashlib.sha256(body).hexdigest(),
        "body_shape": body_shape(body),
        "header_fields": [_field_key(f) for f in _fields(head)],
    }


def _said(shape: list[int]) -> str:
    size, lines, longest, dots = shape
    return (
        f"{size} bytes in {lines} lines (longest {longest} octets, "
        f"{dots} starting with a dot)"
    )


def _without_one(fields: list[list[str]], name: str) -> list[list[str]]:
    """``fields`` less the last field called ``name`` (the one an MTA added)."""
    for i in range(len(fields) - 1, -1, -1):
        if fields[i][0].lower() == name:
            return fields[:i] + fields[i + 1 :]
    return fields


def compare_digest(
    sent: dict[str, Any], delivery: Delivery, permitted: frozenset[str]
) -> list[str]:
    """What differs between the digest of what was sent and one delivered copy."""
    problems = []
    head = header_section(delivery.raw)
    body = delivery.raw[len(head) :]
    if hashlib.sha256(body).hexdigest() != sent["body_sha256"]:
        problems.append(
            f"the body differs: sent {_said(sent['body_shape'])}, "
            f"delivered {_said(body_shape(body))}"
        )
    want = [list(f) for f in sent["header_fields"]]
    got = [_field_key(f) for f in _fields(head)]
    if not any(f[0].lower() == "message-id" for f in want):
        # a message sent without one may be given a Message-ID on its way (RFC 5322
        # 3.6.4; Postfix's cleanup appends it below the sender's fields, sendmail puts
        # it above them): not a change
        got = _without_one(got, "message-id")
    tail = got[len(got) - len(want) :] if want else []
    if len(tail) != len(want) or not all(map(_same, want, tail)):
        changed = next((w[0] for w in want if not any(_same(w, g) for g in got)), None)
        problems.append(
            f"the sender's {changed} header field is missing or changed"
            if changed
            else "the sender's header fields are no longer in their order"
        )
    else:
        foreign = [f[0] for f in got[: len(got) - len(want)] if f[0].lower() not in permitted]
        if foreign:
            problems.append(
                f"a {foreign[0]} header field was added (only trace fields may be: "
                f"{', '.join(sorted(permitted))})"
            )
    sent_from, got_from = str(sent["mail_from"]).strip("<>"), delivery.mail_from.strip("<>")
    if got_from != sent_from:
        problems.append(f"envelope sender changed: sent <{sent_from}>, delivered with <{got_from}>")
    named = {str(r).lower() for r in sent["rcpt_tos"]}
    foreign_rcpts = sorted({r.lower() for r in delivery.rcpt_tos} - named)
    if foreign_rcpts:
        problems.append(f"delivered to {', '.join(foreign_rcpts)}, which the sender never named")
    return problems


def workload_copies(run: RunView, permitted: frozenset[str]) -> list[CheckResult]:
    """One result per workload that sent realistic messages (those with a digest)."""
    attempts: dict[str, list[dict[str, Any]]] = {}
    for event in run.history.events(kind="attempt"):
        if "body_sha256" in event.data:
            attempts.setdefault(str(event.data["workload"]), []).append(
                {**event.data, "_t": event.t}
            )
    deliveries = [(name, d) for name, sink in run.sinks.items() for d in sink.deliveries]
    by_trace: dict[str, list[tuple[str, Delivery]]] = {}
    by_id: dict[str, list[tuple[str, Delivery]]] = {}
    for name, d in deliveries:
        trace = d.trace
        if trace:
            by_trace.setdefault(str(trace), []).append((name, d))
        if d.message_id:
            by_id.setdefault(d.message_id, []).append((name, d))
    faults = _fault_windows(run)
    results = []
    for workload, sent in attempts.items():
        ids = [a.get("message_id") for a in sent]
        problems: list[tuple[float, str, str, bool]] = []
        copies = messages = 0
        for attempt in sent:
            if attempt.get("trace"):
                found = by_trace.get(str(attempt["trace"]), [])
            elif attempt.get("message_id") and ids.count(attempt["message_id"]) == 1:
                found = by_id.get(str(attempt["message_id"]), [])
            else:
                continue  # no way to tell its copies from another message's
            messages += bool(found)
            for sink, d in found:
                copies += 1
                node = node_of(d.helo)
                domains = ", ".join(sorted({r.rpartition("@")[2] for r in d.rcpt_tos}))
                copy = (
                    f"the copy of {attempt['ref']} that {node} delivered to {sink} "
                    f"for {domains} at +{d.t:.2f}s"
                )
                crossed = any(a <= d.t and attempt["_t"] <= b for a, b in faults)
                problems += [
                    (d.t, node, f"{copy}: {p}", crossed)
                    for p in compare_digest(attempt, d, permitted)
                ]
        if not copies:
            continue
        name = f"integrity of the copies of workload {workload}"
        expected = (
            f"every delivered copy of workload {workload}'s messages is what the sender sent: "
            "same body, same header fields under any trace fields, same envelope sender, "
            "no recipient the sender did not name"
        )
        if not problems:
            said = f"{copies} copies of {messages} messages as sent"
            results.append(CheckResult(name, Status.PASS, expected, said, behaviours=["integrity"]))
            continue
        problems.sort()
        more = f"; and {len(problems) - LISTED} more" if len(problems) > LISTED else ""
        said = (
            f"{len(problems)} difference(s) in {copies} copies: "
            + "; ".join(p for _, _, p, _ in problems[:LISTED])
            + more
        )
        excerpt = run.excerpt(problems[0][0], [f"{problems[0][1]}->*"])
        results.append(
            CheckResult(
                name, Status.FAIL, expected, said, excerpt=excerpt,
                behaviours=(
                    _blamed(run, {str(a.get("trace")) for a in sent})
                    if all(crossed for *_, crossed in problems)
                    # copies no fault came near are damaged too: how the MTA handles
                    # every message, a FAIL of the invariant and of no fault's behaviour
                    else ["integrity"]
                ),
            )
        )  # fmt: skip
    return results


def _fault_windows(run: RunView) -> list[tuple[float, float]]:
    """When the nemesis's faults began and ended (one still on at the end: until then)."""
    began: dict[Any, float] = {}
    windows = []
    for event in run.history.events(kind="note"):
        mark = event.data.get("nemesis")
        if mark == "start":
            began[event.data.get("index")] = event.t
        elif mark == "end" and event.data.get("index") in began:
            windows.append((began.pop(event.data.get("index")), event.t))
    return windows + [(t, run.history.now()) for t in began.values()]


def _blamed(run: RunView, traces: set[str]) -> list[str]:
    """The behaviours a damaged copy evidences: the scenario's, but no promotion when no
    message of the workload was copied to another node (nothing was there to promote,
    as the workload checker's PROMOTIONS rule says); [] (all of them) otherwise."""
    nodes = set(run.scenario.topology.nodes)
    for event in run.history.events(kind="data"):
        src, _, dst = (event.link or "").partition("->")
        if src in nodes and dst in nodes and event.data.get("trace") in traces:
            return []
    kept = [b for b in run.scenario.behaviours if b not in PROMOTIONS]
    return kept if len(kept) < len(run.scenario.behaviours) else []
