"""The run history: every timestamped thing the harness saw during one scenario run.

One :class:`History` per scenario run. The fault proxies record the SMTP lines
they carry, the sinks record deliveries, the client records the replies it got,
and the engine records steps, faults and control-API snapshots. Checks then read
it, and a failing check quotes an :meth:`History.excerpt` so a mail admin can
read what happened on the wire around the failure.

Event kinds (``Event.kind``) and the keys their ``data`` carries:

============  ===============================================================
``connect``   a connection opened on ``link``; ``peer``, ``upstream``
``close``     a connection closed; ``reason`` ("client closed", "cut", ...)
``shutdown``  the client ended its side of a proxied connection (``c2s``) while the
              server may still answer; its ``close`` follows once the server does
``line``      one SMTP command (``c2s``) or reply (``s2c``) line; ``text``
              (decoded; credentials of AUTH exchanges masked)
``data``      a DATA body summary; ``size`` (bytes on the wire, dot-stuffed,
              without the final ``.\\r\\n``), ``message_id`` (normalised or None)
``fault``     a fault switched on or off; ``fault`` (name), ``on`` and its
              parameters (``seconds``, ``nbytes``, ``flow`` = "c2s"/"s2c"/"both")
``reply``     a reply the harness client received; ``command``, ``code``,
              ``enhanced`` ("4.4.0" or None), ``text``
``attempt``   a workload message was tried once (see pytest_shadowcheck.engine.traffic); ``ref``,
              ``message_id``, ``via``, ``rcpt_tos``, ``sent`` (when it began),
              ``command``/``code``/``text`` of the deciding reply, or ``error``
``delivery``  a sink accepted a message; ``sink``, ``message_id``, ``helo``, ...
``step``      the engine ran a scenario step
``snapshot``  the engine captured control-API state
``storage``   a node's queue filesystem (a lazy one, pytest_shadowcheck.storage):
              ``node``, ``what`` ("sync": ``file`` and ``bytes`` made durable;
              "power_cut": ``lost`` files with their bytes, names ``undone``;
              "disk": ``mode`` full/error/ok), stamped when it happened there
``note``      anything else worth showing (free-form ``text`` recommended)
``lag``       the harness's own event loop woke ``late`` seconds after it asked to
              (pytest_shadowcheck.engine.lag): the machine or the harness was
              overloaded, and everything it relayed, answered and stamped then ran
              late too; stamped when it woke; with ``over``, lateness gathered from
              several probes in the ``over`` seconds before the stamp
``wait``      a node's processes were ready to run but waited ``waited`` seconds
              for a CPU, waits that ended in the ``over`` seconds before the stamp
              (``node``; pytest_shadowcheck.engine.lag): an MTA starved by the
              machine is late by as much, whatever its design
============  ===============================================================

``t`` is seconds since the history was created, from a monotonic clock, so
ordering and differences are meaningful even if the wall clock jumps.
"""

from __future__ import annotations

import bisect
import json
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["EVENT_KINDS", "Event", "History", "Lateness", "plain_text", "plain_value"]

EVENT_KINDS = frozenset(
    {
        "connect",
        "close",
        "shutdown",
        "line",
        "data",
        "fault",
        "reply",
        "attempt",
        "delivery",
        "step",
        "snapshot",
        "note",
        "storage",
        "lag",
        "wait",
    }
)


@dataclass(frozen=True)
class Lateness:
    """The machine's share of a delay (:meth:`History.lateness`): what a timing check
    grants before it blames the MTA. ``waits``: (node, seconds its processes waited for
    a CPU), longest first."""

    harness: float
    waits: tuple[tuple[str, float], ...] = ()

    @property
    def node_wait(self) -> float:
        return sum(seconds for _, seconds in self.waits)

    @property
    def total(self) -> float:
        return self.harness + self.node_wait


@dataclass(frozen=True)
class Event:
    """One recorded event.

    ``t``: seconds since the run started (monotonic). ``kind``: one of
    :data:`EVENT_KINDS`. ``link``: the link it happened on ("client->mbx1",
    "mbx1->mbx2", "mbx1->corp.test") or None. ``conn``: the connection number on
    that link (1, 2, ...) or None. ``direction``: "c2s" (client to server) or
    "s2c" or None. ``data``: kind-specific details (see the module docstring).
    """

    t: float
    kind: str
    link: str | None = None
    conn: int | None = None
    direction: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_jsonable(self) -> dict[str, Any]:
        """A JSON-serialisable dict of this event (bytes in data become text)."""
        return {
            "t": round(self.t, 6),
            "kind": self.kind,
            "link": self.link,
            "conn": self.conn,
            "direction": self.direction,
            "data": _jsonable(self.data),
        }

    def describe(self) -> str:
        """A one-line, human-readable rendering (used by :meth:`History.excerpt`)."""
        where = self.link or "-"
        if self.conn is not None:
            where += f" #{self.conn}"
        return f"  +{self.t:.3f}s {where} {_describe_body(self)}"


class History:
    """Append-only, time-ordered list of :class:`Event` for one scenario run.

    Safe to share between the coroutines of one asyncio loop and helper threads
    (appends take a lock). Events are never modified or removed.
    """

    def __init__(self) -> None:
        self._origin = time.monotonic()
        self.started_at = time.time()
        """Wall-clock time (Unix epoch) at which ``t == 0``, for reports."""
        self._events: list[Event] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        """Current time on this history's clock (seconds since the run started)."""
        return time.monotonic() - self._origin

    def record(
        self,
        kind: str,
        link: str | None = None,
        conn: int | None = None,
        direction: str | None = None,
        **data: Any,
    ) -> Event:
        """Append an event stamped with :meth:`now` and return it.

        Raises ValueError for an unknown kind or direction: a typo there would
        silently make checks miss events.
        """
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}; expected one of {sorted(EVENT_KINDS)}")
        if direction not in (None, "c2s", "s2c"):
            raise ValueError(f"direction must be 'c2s', 's2c' or None, not {direction!r}")
        with self._lock:
            event = Event(self.now(), kind, link, conn, direction, data)
            self._events.append(event)
        return event

    def record_at(
        self,
        monotonic: float,
        kind: str,
        link: str | None = None,
        conn: int | None = None,
        direction: str | None = None,
        **data: Any,
    ) -> Event:
        """Append an event that happened at ``monotonic`` (a ``time.monotonic()`` reading,
        as another process on this machine reports it), in time order among the others."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}; expected one of {sorted(EVENT_KINDS)}")
        if direction not in (None, "c2s", "s2c"):
            raise ValueError(f"direction must be 'c2s', 's2c' or None, not {direction!r}")
        with self._lock:
            event = Event(monotonic - self._origin, kind, link, conn, direction, data)
            at = bisect.bisect_right(self._events, event.t, key=lambda e: e.t)
            self._events.insert(at, event)
        return event

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Any:
        return iter(self.events())

    def events(
        self,
        kind: str | None = None,
        link: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[Event]:
        """Events matching every given filter, in recording order.

        ``since``/``until`` are inclusive bounds on ``t``.
        """
        with self._lock:
            snapshot = list(self._events)
        return [
            event
            for event in snapshot
            if (kind is None or event.kind == kind)
            and (link is None or event.link == link)
            and (since is None or event.t >= since)
            and (until is None or event.t <= until)
        ]

    def lag(self, since: float, until: float) -> float:
        """Seconds within ``[since, until]`` in which the harness's own event loop ran
        late (``lag`` events): a delay the harness caused, not the MTA. A lateness
        gathered over several probes (``over``) counts for the part of its interval in
        the window, as a node's wait does."""
        total = 0.0
        for event in self.events(kind="lag", since=since):
            late = float(event.data.get("late", 0.0))
            span = max(float(event.data.get("over", 0.0)), late)
            start = event.t - span
            if span <= 0 or start > until:
                continue
            inside = max(0.0, min(event.t, until) - max(start, since))
            total += late * inside / span
        return total

    def node_waits(self, since: float, until: float) -> dict[str, float]:
        """Seconds each node's processes waited for a CPU within ``[since, until]``
        (``wait`` events), longest first; nodes that did not wait are left out."""
        per_node: dict[str, float] = {}
        for event in self.events(kind="wait", since=since):
            # the kernel adds a wait to its total when the wait ends: a reading holds the
            # waits that ended in its interval, so one may reach back before the interval
            waited = float(event.data["waited"])
            span = max(float(event.data.get("over", 0.0)), waited)
            start = event.t - span
            if span <= 0 or start > until:
                continue
            share = (min(event.t, until) - max(start, since)) / span
            node = str(event.data.get("node"))
            per_node[node] = per_node.get(node, 0.0) + waited * share
        return dict(sorted(per_node.items(), key=lambda item: -item[1]))

    def lateness(self, since: float, until: float, waiters: int | None = None) -> Lateness:
        """How late the machine made what was observed within ``[since, until]``: the
        harness's own lateness and the waits of every node for a CPU. The nodes' waits
        add up: an exchange between two nodes waits for the one, then for the other
        (a timing check grants what the machine *could* explain). ``waiters``: only the
        waits of that many nodes, the longest first (None: every node's)."""
        waits = tuple(self.node_waits(since, until).items())[:waiters]
        return Lateness(self.lag(since, until), waits)

    def excerpt(
        self,
        around: float,
        links: list[str] | None = None,
        before: float = 2.0,
        after: float = 2.0,
        limit: int = 60,
    ) -> str:
        """Human-readable lines for the events within ``[around-before, around+after]``.

        ``links`` restricts to those links; events without a link (steps, notes)
        are always kept because they explain what the harness was doing. When more
        than ``limit`` events match, the ones closest to ``around`` are kept and
        the cut is stated. Returns "  (no events)" when nothing matches.
        """
        # the machine's lateness is no event on the wire: the checks say it in words
        window = [
            e
            for e in self.events(since=around - before, until=around + after)
            if e.kind not in ("lag", "wait")
        ]
        wanted = set(links) if links is not None else None
        chosen = [e for e in window if wanted is None or e.link is None or e.link in wanted]
        omitted = 0
        if len(chosen) > limit:
            closest = sorted(chosen, key=lambda e: abs(e.t - around))[:limit]
            keep = {id(e) for e in closest}
            omitted = len(chosen) - limit
            chosen = [e for e in chosen if id(e) in keep]
        if not chosen:
            return "  (no events)"
        lines = [e.describe() for e in chosen]
        if omitted:
            lines.append(f"  ... {omitted} more event(s) in the window not shown")
        return "\n".join(lines)

    def to_jsonable(self) -> dict[str, Any]:
        """The whole history as JSON-serialisable data."""
        return {
            "started_at": self.started_at,
            "events": [event.to_jsonable() for event in self.events()],
        }

    def write_json(self, path: str | Path) -> Path:
        """Write :meth:`to_jsonable` to ``path`` (parents created); return the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.to_jsonable(), indent=1), encoding="utf-8")
        return target

    @classmethod
    def read_json(cls, path: str | Path) -> History:
        """A history :meth:`write_json` wrote (``--shadowcheck-history``), to measure
        afterwards: its events as written (bytes come back as text). Its clock is not
        the run's: :meth:`now` counts from the reading."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        history = cls()
        history.started_at = data["started_at"]
        history._events = [
            Event(e["t"], e["kind"], e["link"], e["conn"], e["direction"], e["data"])
            for e in data["events"]
        ]
        return history


def _describe_body(event: Event) -> str:
    data = event.data
    kind = event.kind
    if kind == "line":
        side = "C:" if event.direction == "c2s" else "S:"
        return f"{side} {data.get('text', '')}"
    if kind == "data":
        side = "C:" if event.direction in (None, "c2s") else "S:"
        return (
            f"{side} <message content: {data.get('size')} bytes, "
            f"Message-ID {data.get('message_id') or '(none)'}>"
        )
    if kind == "reply":
        text = str(data.get("text", "")).replace("\n", " | ")
        return f"client got {data.get('code')} {text} (to {data.get('command')})"
    if kind == "fault":
        state = "ON" if data.get("on") else "off"
        params = _params(data, skip=("fault", "on"))
        return f"FAULT {data.get('fault')} {state}{params}"
    if kind == "attempt":
        outcome = data.get("error") or f"{data.get('code')} {data.get('text', '')}".strip()
        sent = data.get("sent")
        when = f" sent +{sent:.3f}s" if isinstance(sent, float | int) else ""
        return (
            f"ATTEMPT {data.get('ref')} {data.get('message_id')} "
            f"rcpt={plain_value(data.get('rcpt_tos'))}{when}: {outcome} "
            f"(to {data.get('command')})"
        )
    if kind == "delivery":
        return (
            f"DELIVERED to {data.get('sink')} {data.get('message_id') or '(no Message-ID)'}"
            f" from helo={data.get('helo')} rcpt={plain_value(data.get('rcpt_tos'))}"
        )
    if kind == "close":
        return f"closed ({data.get('reason', 'unknown')})"
    if kind == "shutdown":
        return "client ended its side"
    if kind == "connect":
        return f"connected{_params(data)}"
    if kind in ("step", "note") and "text" in data:
        return f"{kind.upper()} {plain_text(str(data['text']))}{_params(data, skip=('text',))}"
    return f"{kind.upper()}{_params(data)}"


def _params(data: dict[str, Any], skip: Iterable[str] = ()) -> str:
    shown = [f"{k}={plain_value(v)}" for k, v in data.items() if k not in skip]
    return (" " + " ".join(shown)) if shown else ""


def plain_value(value: Any) -> str:
    """A value as a mail admin writes it, never a Python repr: a list comma-separated, a
    mapping as ``Name=value, ...`` in parentheses, a boolean true/false, a float (the
    scenario format's only floats are seconds) with ``s``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}s"
    if isinstance(value, dict):
        return "(" + ", ".join(f"{k}={plain_value(v)}" for k, v in value.items()) + ")"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(plain_value(v) for v in value) if value else "(none)"
    return str(value)


_LITERAL = re.compile(r"\[[^\[\]]*\]|\{[^{}]*\}")
#: the tokens of a Python list or dict literal of strings, numbers, booleans and None
_TOKEN = re.compile(
    r"""\s*(?:(?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|(?P<word>True|False|None)"
    r"|(?P<mark>[\[\]{}(),:]))"
)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")
_ESCAPED = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}
_WORDS = {"True": True, "False": False, "None": None}


def _literal(text: str) -> Any:
    """The value of a Python list or dict literal as ``repr`` writes one, or ValueError.

    Not ``ast.literal_eval``: the lanes run scenarios in threads, and CPython 3.11's AST
    constructor keeps one recursion counter per interpreter, so two threads parsing at
    once can fail with "SystemError: AST constructor recursion depth mismatch"
    (CPython gh-106905; a scenario was INCONCLUSIVE for it at 16 lanes)."""
    tokens: list[tuple[str, str]] = []
    at = 0
    while at < len(text.rstrip()):
        found = _TOKEN.match(text, at)
        if found is None or found.lastgroup is None:
            raise ValueError(f"not a literal at {at}")
        tokens.append((found.lastgroup, found[found.lastgroup]))
        at = found.end()
    value, used = _value(tokens, 0)
    if used != len(tokens):
        raise ValueError("text after the literal")
    return value


#: how deep a literal may nest (a label's arguments nest two or three levels)
_DEEPEST = 20


def _value(tokens: list[tuple[str, str]], at: int, depth: int = 0) -> tuple[Any, int]:
    if at >= len(tokens):
        raise ValueError("the literal ends too soon")
    if depth > _DEEPEST:
        raise ValueError("a literal nested too deep")
    kind, text = tokens[at]
    if kind == "string":
        return _ESCAPE.sub(_unescape, text[1:-1]), at + 1
    if kind == "number":
        return (float(text) if "." in text or "e" in text.lower() else int(text)), at + 1
    if kind == "word":
        return _WORDS[text], at + 1
    closing = {"[": "]", "(": ")", "{": "}"}.get(text)
    if closing is None:
        raise ValueError(f"unexpected {text}")
    items: list[Any] = []
    pairs: dict[Any, Any] = {}
    at += 1
    while tokens[at:at + 1] != [("mark", closing)]:
        item, at = _value(tokens, at, depth + 1)
        if text == "{":
            if tokens[at:at + 1] != [("mark", ":")]:
                raise ValueError("a mapping's key without a value")
            if isinstance(item, list | dict):
                raise ValueError("a mapping's key that is a list or a mapping")
            pairs[item], at = _value(tokens, at + 1, depth + 1)
        else:
            items.append(item)
        if tokens[at:at + 1] == [("mark", ",")]:
            at += 1
        elif tokens[at:at + 1] != [("mark", closing)]:
            raise ValueError(f"expected , or {closing}")
    return (pairs if text == "{" else tuple(items) if text == "(" else items), at + 1


def _unescape(escape: re.Match[str]) -> str:
    code = escape[1]
    if code[0] in "xuU" and len(code) > 1:
        return chr(int(code[1:], 16))
    return _ESCAPED.get(code, code)


def plain_text(text: str) -> str:
    """``text`` with every Python list or mapping literal in it (labels built from a
    step's arguments carry them) written as :func:`plain_value` does."""

    def plain_literal(match: re.Match[str]) -> str:
        try:
            value = _literal(match[0])
        except (ValueError, KeyError, IndexError, TypeError):
            return match[0]
        return plain_value(value) if isinstance(value, list | dict) else match[0]

    return _LITERAL.sub(plain_literal, text)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
