"""Admin adapters of a docker description: commands run in a node's container that
give the harness what a real MTA has without the shadowcheck control API.

```yaml
admin:
  reload: [postfix, reload]        # after the files are rendered again: set_settings, routes
                                   # (or "restart": the MTA has no reload, restart it instead)
  check: [postfix, check]          # optional, before reload: non-zero = configuration rejected
  flush: [postqueue, -f]           # optional: deliver what waits now (after a route change)
  queue:                           # the node's mail queue, for GET /queues/active
    list: [postqueue, -j]
    format: postqueue-json         # or json-lines (neutral), exim-bp, sendmail-mailq
    headers: [postcat, -hq, "{id}"]   # a queued message's header section ({id}: its queue id);
                                      # optional with json-lines entries that carry message_id
```

The engine asks for these facts exactly where it would ask the control API for
them (a ``queue: {queue: active}`` check, the no-loss invariant's "still queued",
a ``route`` step, ``set_settings``); every answer comes from the MTA itself.
Nothing here invents a queue the MTA does not have: the listing answers only
for the active queue (what the node holds for delivery).

``reload: restart`` is for an MTA without a reload (OpenSMTPD): the target stops
the node's container (SIGTERM, as an admin would stop the daemon) and starts a
new one on the same queue volume with the files rendered again. That is a
restart, not a reload, and the engine records it as one: the history shows it,
and a behaviour the scenario would PASS is not claimed (:class:`pytest_shadowcheck.verdict.Verdict`
``caveats``), since a restart can do what the scenario credits to the MTA.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_shadowcheck.errors import SourceRef
from pytest_shadowcheck.network.smtp_text import TRACE_HEADER

__all__ = [
    "ACTIVE_QUEUE",
    "NEUTRAL_FORMAT",
    "QUEUE_FORMATS",
    "RELOAD_BY_RESTART",
    "ROUTES",
    "AdminAdapters",
    "QueueAdapter",
    "QueueFormatError",
    "message_id_of",
    "parse_admin",
]

#: the control API calls the adapters answer
ACTIVE_QUEUE = ("GET", "/queues/active")
ROUTES = ("PUT", "/topology/next_hops")
#: ``admin.reload`` for an MTA that has none: restart the node on its queue instead
RELOAD_BY_RESTART = "restart"

_MESSAGE_ID = re.compile(
    # postcat -h prints "Message-ID: <...>"; exim -Mvh prefixes each header with its
    # length and a flag ("049I Message-ID: <...>"); a sendmail qf file with "H" and its
    # conditions ("H??Message-ID: <...>")
    r"^(?:\d{3}[A-Za-z* ] |H\?[^?\n]*\?)?Message-ID:[ \t]*(<[^>\s]+>)",
    re.IGNORECASE | re.MULTILINE,
)
#: the harness's own trace header, in the same printed forms
_TRACE = re.compile(
    r"^(?:\d{3}[A-Za-z* ] |H\?[^?\n]*\?)?" + TRACE_HEADER + r":[ \t]*(\S+)",
    re.IGNORECASE | re.MULTILINE,
)


@dataclass(frozen=True)
class QueueAdapter:
    """How to list a node's mail queue and read a queued message's Message-ID."""

    list: tuple[str, ...]
    format: str
    #: empty: the listing carries each entry's ``message_id`` (``json-lines`` only)
    headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class AdminAdapters:
    reload: tuple[str, ...] = ()
    check: tuple[str, ...] = ()
    flush: tuple[str, ...] = ()
    queue: QueueAdapter | None = None
    #: no reload command: a changed configuration takes a restart of the node
    restarts: bool = False

    @property
    def reconfigures(self) -> bool:
        """Whether settings and routes can be changed (by reload or by restart)."""
        return bool(self.reload) or self.restarts

    @property
    def calls(self) -> frozenset[tuple[str, str]]:
        """The control API calls these adapters answer."""
        calls = set()
        if self.queue is not None:
            calls.add(ACTIVE_QUEUE)
        if self.reconfigures:
            calls.add(ROUTES)
        return frozenset(calls)


# --------------------------------------------------------------------------- queue formats
#
# Every format is read into the same entry shape, the neutral ``json-lines`` one
# (docs/targets.md, "Admin adapters"): ``id`` and ``recipients`` always, ``sender``,
# ``state``, ``received_at`` and ``message_id`` when the listing has them. A built-in
# converter never finds a Message-ID: the ``headers`` command reads it.


class QueueFormatError(ValueError):
    """A listing that does not read as its format: the message names the line."""


def _json_lines(text: str) -> list[dict[str, Any]]:
    """The neutral format: one JSON object per queued message and line. ``id`` (string)
    and ``recipients`` (list of addresses still to deliver) are required; ``sender``,
    ``state``, ``message_id`` (strings) and ``received_at`` (unix seconds) optional;
    other fields ignored; blank lines skipped."""
    entries: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise QueueFormatError(f"line {number} is not JSON ({exc.msg}): {line[:120]}") from None
        if not isinstance(item, dict):
            raise QueueFormatError(f"line {number} is not a JSON object: {line[:120]}")
        qid, recipients = item.get("id"), item.get("recipients")
        if not isinstance(qid, str) or not qid:
            raise QueueFormatError(f"line {number} has no id (a non-empty string): {line[:120]}")
        if not isinstance(recipients, list) or not all(isinstance(r, str) for r in recipients):
            raise QueueFormatError(
                f"line {number} (id {qid}) has no recipients (a list of addresses): {line[:120]}"
            )
        entry: dict[str, Any] = {"id": qid, "recipients": list(recipients)}
        for key in ("sender", "state", "message_id"):
            value = item.get(key)
            if value is not None and not isinstance(value, str):
                raise QueueFormatError(f"line {number} (id {qid}): {key} is not a string")
            if value is not None:
                entry[key] = value
        received = item.get("received_at")
        if received is not None:
            if isinstance(received, bool) or not isinstance(received, (int, float)):
                raise QueueFormatError(
                    f"line {number} (id {qid}): received_at is not a number (unix seconds)"
                )
            entry["received_at"] = received
        if entry.get("message_id"):
            # the header's value: the harness compares "<...>" as the MTA received it
            mid = entry["message_id"].strip()
            entry["message_id"] = mid if mid.startswith("<") else f"<{mid}>"
        else:
            entry.pop("message_id", None)
        entries.append(entry)
    return entries


def _postqueue_json(text: str) -> list[dict[str, Any]]:
    """``postqueue -j``: one JSON object per queued message (lines not starting with
    ``{`` skipped). Reads ``queue_id`` as id, ``sender``, ``recipients[].address`` (Postfix
    lists only the recipients still to deliver), ``queue_name`` as state (incoming, active,
    deferred, hold) and ``arrival_time`` as received_at."""
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        item = json.loads(line)
        entries.append(
            {
                "id": item.get("queue_id"),
                "sender": item.get("sender"),
                "recipients": [r.get("address") for r in item.get("recipients") or []],
                "state": item.get("queue_name"),
                "received_at": item.get("arrival_time"),
            }
        )
    return entries


_EXIM_HEAD = re.compile(
    r"^\s*\S+\s+\S+\s+(?P<id>[0-9A-Za-z]+-[0-9A-Za-z]+-[0-9A-Za-z]+)\s+<(?P<sender>[^>]*)>(?P<rest>.*)$"
)


def _exim_bp(text: str) -> list[dict[str, Any]]:
    """``exim -bp``: per message a line ``AGE SIZE ID <SENDER> [*** frozen ***]``, then its
    recipients indented (``D`` before one already delivered), then a blank line. Reads the
    id, the sender (``<>`` as ""), the recipients not marked ``D`` and the state
    (``frozen`` or ``queued``); the age is not a time and is left out."""
    entries: list[dict[str, Any]] = []
    for line in text.splitlines():
        head = _EXIM_HEAD.match(line)
        if head:
            frozen = "frozen" in head["rest"]
            entries.append(
                {
                    "id": head["id"],
                    "sender": head["sender"],
                    "recipients": [],
                    "state": "frozen" if frozen else "queued",
                }
            )
        elif line.strip() and entries:
            words = line.split()
            if words[0] != "D":  # still to be delivered
                entries[-1]["recipients"].append(words[-1])
    return entries


_MAILQ_HEAD = re.compile(
    r"^(?P<id>[0-9A-Za-z]{8,})(?P<flag>[*X-]?)\s+\d+\s+\w{3} \w{3}\s+\d+ \d\d:\d\d\s+"
    r"(?P<sender>\S*)"
)


def _sendmail_mailq(text: str) -> list[dict[str, Any]]:
    """sendmail's ``mailq``: per message a line ``ID[*] SIZE Q-TIME SENDER``, then an
    indented status in parentheses, then its recipients indented, one per line. The
    listing has a section per queue (MSP, MTA) that may repeat a message: once each.
    Reads the id, the sender (``<>`` as ""), the recipients and the state (``running`` for
    an id flagged ``*``, else ``queued``); Q-Time has no year and is left out."""
    entries: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        head = _MAILQ_HEAD.match(line)
        if head:
            current = None
            if head["id"] not in {entry["id"] for entry in entries}:
                current = {
                    "id": head["id"],
                    "sender": head["sender"].strip("<>"),
                    "recipients": [],
                    "state": "running" if head["flag"] == "*" else "queued",
                }
                entries.append(current)
            continue
        word = line.strip()
        # a recipient is one word; the status "(...)", "Total requests: N" and the
        # section lines are not
        if current is not None and line[:1].isspace() and word and " " not in word:
            if not word.startswith("("):
                current["recipients"].append(word.strip("<>"))
        elif not line[:1].isspace():
            current = None
    return entries


#: the neutral listing format; the others are converted to its entry shape
NEUTRAL_FORMAT = "json-lines"

QUEUE_FORMATS: dict[str, Callable[[str], list[dict[str, Any]]]] = {
    "json-lines": _json_lines,
    "postqueue-json": _postqueue_json,
    "exim-bp": _exim_bp,
    "sendmail-mailq": _sendmail_mailq,
}


def message_id_of(headers: str) -> str | None:
    """The Message-ID in a header section as ``postcat -h`` or ``exim -Mvh`` print it,
    or in a sendmail queue control file (qf)."""
    found = _MESSAGE_ID.search(headers)
    return found.group(1) if found else None


# --------------------------------------------------------------------------- loading


class AdminError(Exception):
    """A wrong ``admin`` entry: ``where`` names the description's line."""

    def __init__(self, message: str, where: SourceRef) -> None:
        super().__init__(message)
        self.where = where


def _command(raw: Any, what: str, where: SourceRef) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw or not all(isinstance(x, (str, int)) for x in raw):
        raise AdminError(f"{what} is a command: a non-empty list of strings", where)
    return tuple(str(x) for x in raw)


_QUEUE_KEYS = {"list", "format", "headers"}


def parse_admin(raw: Any, at: Callable[[str], SourceRef]) -> AdminAdapters:
    """Check an ``admin`` mapping; ``at("admin.KEY")`` gives a key's line."""
    known = {"reload", "check", "flush", "queue"}
    if not isinstance(raw, dict):
        raise AdminError("'admin' maps reload, check, flush, queue to commands", at("admin"))
    unknown = sorted(set(raw) - known)
    if unknown:
        raise AdminError(
            f"unknown admin adapter {unknown[0]!r} (known: {', '.join(sorted(known))})",
            at(f"admin.{unknown[0]}"),
        )
    restarts = raw.get("reload") == RELOAD_BY_RESTART
    commands = {
        key: _command(raw[key], f"admin.{key}", at(f"admin.{key}"))
        for key in ("reload", "check", "flush")
        if raw.get(key) is not None and not (key == "reload" and restarts)
    }
    if commands.get("check") and not (commands.get("reload") or restarts):
        raise AdminError("admin.check needs admin.reload: it vets what reload applies",
                         at("admin.check"))  # fmt: skip
    queue = None
    if raw.get("queue") is not None:
        where = at("admin.queue")
        spec = raw["queue"]
        if not isinstance(spec, dict) or not {"list", "format"} <= set(spec) <= _QUEUE_KEYS:
            raise AdminError(
                "admin.queue is {list: [command], format: "
                f"{' | '.join(QUEUE_FORMATS)}, headers: [command with {{id}}]}}"
                " (headers optional for json-lines)",
                where,
            )
        if spec["format"] not in QUEUE_FORMATS:
            raise AdminError(
                f"admin.queue.format {spec['format']!r} is not one of {', '.join(QUEUE_FORMATS)}",
                where,
            )
        headers: tuple[str, ...] = ()
        if spec.get("headers") is not None:
            headers = _command(spec["headers"], "admin.queue.headers", where)
            if not any("{id}" in item for item in headers):
                raise AdminError("admin.queue.headers must name the message: put {id} in it",
                                 where)  # fmt: skip
        elif spec["format"] != NEUTRAL_FORMAT:
            # the built-in converters never find a Message-ID in the listing
            raise AdminError(
                f"admin.queue.headers is needed with format {spec['format']}: its listing has"
                " no Message-ID (only json-lines entries can carry message_id)",
                where,
            )
        queue = QueueAdapter(
            _command(spec["list"], "admin.queue.list", where), str(spec["format"]), headers
        )
    return AdminAdapters(
        reload=commands.get("reload", ()),
        check=commands.get("check", ()),
        flush=commands.get("flush", ()),
        queue=queue,
        restarts=restarts,
    )


# --------------------------------------------------------------------------- running

#: an admin command that has not answered by then is a target error, not a verdict
EXEC_TIMEOUT = 30.0


def run_in(container: Any, command: list[str] | tuple[str, ...]) -> tuple[int, str]:
    """Run ``command`` in the (running) container: its exit code and output."""
    from docker.errors import APIError, NotFound

    try:
        result = container.exec_run(list(command))
    except (APIError, NotFound) as exc:
        return -1, f"docker exec failed: {exc.explanation if isinstance(exc, APIError) else exc}"
    return int(result.exit_code or 0), result.output.decode(errors="replace")


def list_queue(container: Any, adapter: QueueAdapter) -> list[dict[str, Any]]:
    """The node's mail queue as GET /queues/active answers it (``id``, ``message_id``,
    ``sender``, ``recipients``, ``state``); a failing command raises RuntimeError."""
    code, output = run_in(container, adapter.list)
    if code != 0:
        raise RuntimeError(f"{' '.join(adapter.list)} exited {code}: {output.strip()[-300:]}")
    try:
        entries = QUEUE_FORMATS[adapter.format](output)
    except (ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"cannot read {adapter.format} from {adapter.list[0]}: {exc}") from None
    failed: dict[str, str] = {}
    for entry in entries:
        if entry.get("message_id"):
            continue  # the listing said it (json-lines): no look at the message needed
        if not adapter.headers:
            # a queued message without a Message-ID would read as lost to every check
            raise RuntimeError(
                f"{' '.join(adapter.list)} lists {entry['id']} without message_id, and"
                " admin.queue has no headers command to read it"
            )
        command = [item.replace("{id}", str(entry["id"])) for item in adapter.headers]
        code, headers = run_in(container, command)
        entry["message_id"] = message_id_of(headers) if code == 0 else None
        # which message it is: the trace the harness added, when the header shows it
        if code == 0 and (trace := _TRACE.search(headers)):
            entry["trace"] = trace.group(1)
        if code != 0:
            failed[str(entry["id"])] = f"{' '.join(command)} exited {code}: {headers[-300:]}"
    if failed:
        # delivered between the listing and the look is fine; a headers command that
        # cannot read a message still queued would hide it from every check
        _, again = run_in(container, adapter.list)
        still = {str(e["id"]) for e in QUEUE_FORMATS[adapter.format](again)}
        stuck = [why for qid, why in failed.items() if qid in still]
        if stuck:
            raise RuntimeError(stuck[0])
    return [e for e in entries if str(e["id"]) not in failed]


def read_file(container: Any, path: str) -> str | None:
    """A file of the container (running, paused or stopped), or None when it is absent."""
    import io
    import tarfile

    from docker.errors import APIError, NotFound

    try:
        stream, _ = container.get_archive(path)
        data = b"".join(stream)
    except (APIError, NotFound):
        return None
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        member = next((m for m in archive.getmembers() if m.isfile()), None)
        extracted = archive.extractfile(member) if member else None
        return extracted.read().decode(errors="replace") if extracted else None
