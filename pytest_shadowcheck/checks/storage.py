"""What a node's disk did around a lost message: the evidence a power cut leaves.

A target that cuts power records each sync of a node's queue filesystem and what a power
cut threw away (``storage`` events, :mod:`pytest_shadowcheck.history`). For a message
acknowledged and then lost, this says, in an admin's words, when the power went, how long
after the 250, which files lost how many bytes, and whether the file that held the
message (found by the queue ID the 250 named, as Postfix and sendmail give it) was ever
fsynced before the 250.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.history import Event

if TYPE_CHECKING:
    from pytest_shadowcheck.history import History

__all__ = ["power_cut_evidence", "queue_id"]

#: how a 250 names the queue ID ("queued as 364E72F", "Ok: queued as ...", "id=...")
_QUEUE_ID = re.compile(r"queued as ([A-Za-z0-9]+)|\bid=([A-Za-z0-9-]+)", re.I)
LISTED = 4


def queue_id(reply_text: str) -> str | None:
    """The queue ID a 250 reply names, or None."""
    found = _QUEUE_ID.search(reply_text or "")
    return (found.group(1) or found.group(2)) if found else None


def power_cut_evidence(
    history: History, nodes: list[str], acked_t: float, reply_text: str, ref: str
) -> str:
    """Sentences on the first power cut of each of ``nodes`` after the message ``ref``
    was acknowledged at ``acked_t`` (history time): the one that could lose it; "" when
    none of them lost power."""
    first: dict[str, Event] = {}
    for e in history.events(kind="storage"):
        node = str(e.data.get("node"))
        if e.data.get("what") == "power_cut" and node in nodes and e.t >= acked_t:
            first.setdefault(node, e)
    cuts = sorted(first.values(), key=lambda e: e.t)
    if not cuts:
        return ""
    qid = queue_id(reply_text)
    sentences = []
    for cut in cuts:
        node = str(cut.data.get("node"))
        lost: list[dict[str, Any]] = list(cut.data.get("lost") or [])
        total = sum(int(f.get("bytes", 0)) for f in lost)
        when = f"{node} lost power at +{cut.t:.3f}s, {cut.t - acked_t:.3f}s after the 250 for {ref}"
        if not lost:
            sentences.append(f"{when}; its disk had made everything durable (nothing lost)")
            continue
        holding = [f for f in lost if _named_in(str(f.get("file", "")), qid, reply_text)]
        qid = qid or _named_id(holding, reply_text)
        if holding:
            files = ", ".join(f"{f['file']} ({int(f['bytes']):,} bytes)" for f in holding)
            synced = _synced_before(history, node, qid or "", acked_t)
            sentences.append(
                f"{when}; the queue file holding {ref} (queue ID {qid}) lost what was never "
                f"fsynced: {files}; "
                + (
                    f"it had been fsynced before the 250 ({synced}), but not all of it"
                    if synced
                    else "no fsync of it preceded the 250"
                )
            )
        else:
            shown = ", ".join(
                f"{f['file']} ({int(f['bytes']):,} bytes)" for f in lost[:LISTED]
            ) + (f" and {len(lost) - LISTED} more" if len(lost) > LISTED else "")
            sentences.append(
                f"{when}; {total:,} bytes its disk had not made durable were lost: {shown}"
            )
    return "; ".join(sentences)


def _named_in(path: str, qid: str | None, reply_text: str) -> bool:
    """Whether the file at ``path`` holds the message: it carries the queue ID the 250
    named, or a directory or file name of it appears in the 250 (OpenSMTPD answers
    ``250 2.0.0 98b30d05 Message accepted`` and queues it under ``queue/98/98b30d05/``)."""
    if qid:
        return qid in path
    return any(len(part) >= 6 and part in reply_text for part in path.split("/"))


def _named_id(files: list[dict[str, Any]], reply_text: str) -> str | None:
    for f in files:
        for part in str(f.get("file", "")).split("/"):
            if len(part) >= 6 and part in reply_text:
                return part
    return None


def _synced_before(history: History, node: str, needle: str, until: float) -> str:
    syncs: list[Event] = [
        e
        for e in history.events(kind="storage")
        if e.data.get("what") == "sync"
        and e.data.get("node") == node
        and needle in str(e.data.get("file", ""))
        and e.t <= until
    ]
    return ", ".join(f"{e.data['file']} at +{e.t:.3f}s" for e in syncs)
