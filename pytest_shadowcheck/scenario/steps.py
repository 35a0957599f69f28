"""An action step's arguments as a typed spec, one frozen dataclass per kind.

:class:`~pytest_shadowcheck.scenario.validation.StepChecker` builds them when the
scenario loads, checked against the topology and with every default applied, so the
engine reads fields, never keys (the ``workload`` step's spec is in
:mod:`.workload_spec`). Expectations, and the one an inline ``check`` step wraps, stay
:class:`~pytest_shadowcheck.scenario.model.Step` s with their arguments as a mapping:
the checks read them.

Each spec says how the history shows the step (``describe``: what follows the kind in
the step's event; scenarios match those texts with ``step:`` regexes): the fields the
scenario gave, in the schema's order, those left at their defaults not shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from pytest_shadowcheck.errors import ScenarioError, SourceRef
from pytest_shadowcheck.scenario.capabilities import POINT_PLACES, POINT_VERBS
from pytest_shadowcheck.scenario.durations import Moment, format_duration
from pytest_shadowcheck.scenario.model import DURATION_SETTINGS, Step
from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec

__all__ = [
    "ACTION_SPECS",
    "DEFAULT_SENDER",
    "FAULT_DIRECTION",
    "REPLY_TIMEOUT",
    "SEND_TIMEOUT",
    "SINK_ANSWERS",
    "ActionSpec",
    "AdvanceSpec",
    "CheckSpec",
    "DirectorySpec",
    "DiskFullSpec",
    "FaultSpec",
    "HealSpec",
    "NodeActionSpec",
    "NoteSpec",
    "ResubmitSpec",
    "RouteSpec",
    "SayItem",
    "SendSpec",
    "SessionSpec",
    "SettingsSpec",
    "SinkRule",
    "SinkSpec",
    "SnapshotSpec",
    "WaitSpec",
    "default_body",
    "fault_point",
    "settings_text",
]

#: how long a send step waits for the reply to its message
SEND_TIMEOUT = 30.0
#: the envelope sender of a send step that names none
DEFAULT_SENDER = "sender@ext.test"
#: how long a session step waits for each reply: generous, since a server may answer a
#: refusal seconds late on purpose (tarpitting) and the catalogue sets it no deadline;
#: a reply that does not come in time ends the session (never read as a later line's)
REPLY_TIMEOUT = 30.0
#: the direction a fault acts in when the step names none (the other kinds have none)
FAULT_DIRECTION = {"delay": "both", "drop_after": "c2s"}

#: field metadata: the field is not part of the step's text in the history
_UNSHOWN = {"shown": False}


def _text(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple) else str(value)


def _keyed(spec: Any, hide: tuple[str, ...] = ()) -> str:
    """``key=value`` for each field not at its default, in the fields' (schema's) order."""
    parts = []
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.name in hide or not f.metadata.get("shown", True):
            continue
        if f.default is not MISSING and value == f.default:
            continue
        if f.default_factory is not MISSING and value == f.default_factory():
            continue
        parts.append(f"{f.metadata.get('key', f.name)}={_text(value)}")
    return " ".join(parts)


def settings_text(values: Mapping[str, Any]) -> str:
    """Settings as a user reads them: ``Name=value, Name=value``, durations as ``5s``."""
    shown = []
    for name, value in values.items():
        if name in DURATION_SETTINGS and isinstance(value, (int, float)):
            text = format_duration(float(value))
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = str(value)
        shown.append(f"{name}={text}")
    return ", ".join(shown)


def default_body(scenario: str, ref: str) -> str:
    """What a message says unless the scenario gives a body: lines that a transport
    must carry unchanged but easily mangles - dot-stuffing, a line near the 998-byte
    limit, 8-bit text - so that the integrity invariant catches a copy altered on its
    way."""
    return (
        f"scenario {scenario}, message {ref}\n"
        ".a line starting with a dot: the transport dot-stuffs it on every hop\n"
        "..and one starting with two\n"
        ".\n" + "L" * 990 + "\n"
        "8-bit, as UTF-8 with no transfer encoding: Grüße aus Zürich, naïve café, ½ €\n"
        "the end\n"
    )


@dataclass(frozen=True, kw_only=True)
class SendSpec:
    """``send``: one message through ``client->VIA``, registered as ``id``."""

    id: str
    via: str
    sender: str = field(default=DEFAULT_SENDER, metadata={"key": "from"})
    to: tuple[str, ...]
    #: None: ``<ID.TOKEN@shadowcheck.test>``, new in every run
    message_id: str | None = None
    subject: str = field(metadata=_UNSHOWN)
    body: str = field(metadata=_UNSHOWN)
    #: None: the body as it is; else padded to this many bytes
    size: int | None = None
    timeout: float = SEND_TIMEOUT
    #: do not wait for the reply before the next step
    background: bool = False

    def describe(self) -> str:
        return _keyed(self)


@dataclass(frozen=True, kw_only=True)
class FaultSpec:
    """``fault``: break a link's proxy in one way until the link is healed."""

    link: str
    kind: str
    #: delay, slow_accept, slow_greeting: seconds
    seconds: float = 0.0
    #: delay, drop_after: which way (c2s, s2c, both)
    direction: str = "both"
    #: drop_after: bytes let through
    bytes: int = 0
    #: cut_at, stall_at: where the session breaks, one of POINT_PLACES ...
    point: str = ""
    #: ... relative to this command (POINT_VERBS: EOD the final dot, CONNECT the greeting)
    verb: str = ""
    #: cut_at, stall_at: the Nth time the link reaches the point (counted from the step)
    occurrence: int = 1
    #: cut_at, stall_at: only on the link's connection number N (None: any)
    connection: int | None = None

    @classmethod
    def of(
        cls,
        link: str,
        kind: str,
        seconds: float = 0.0,
        direction: str | None = None,
        bytes: int = 0,
        *,
        point: tuple[str, str] = ("", ""),
        occurrence: int = 1,
        connection: int | None = None,
    ) -> FaultSpec:
        """The spec with the kind's own direction when none is given; ``point``: (place,
        verb) of a cut_at or stall_at."""
        way = direction or FAULT_DIRECTION.get(kind, "both")
        return cls(
            link=link, kind=kind, seconds=seconds, direction=way, bytes=bytes,
            point=point[0], verb=point[1], occurrence=occurrence, connection=connection,
        )  # fmt: skip

    def describe(self) -> str:
        own = self.direction == FAULT_DIRECTION.get(self.kind, "both")
        return _keyed(self, hide=("direction",) if own else ())


def fault_point(raw: Any, where: SourceRef) -> tuple[str, str]:
    """A ``point: {PLACE: VERB}`` of a cut_at or stall_at, checked: (place, VERB)."""
    places = ", ".join(POINT_PLACES)
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ScenarioError(
            "a protocol point is one place and one command",
            where,
            f"{{PLACE: VERB}}, PLACE one of {places}",
        )
    ((place, verb),) = raw.items()
    if place not in POINT_PLACES:
        raise ScenarioError(f"unknown protocol point {place!r}", where, f"one of {places}")
    verb = str(verb).upper()
    if verb not in POINT_VERBS:
        raise ScenarioError(
            f"a protocol point names no command {verb!r}", where, f"one of {', '.join(POINT_VERBS)}"
        )
    if place == "after" and verb == "CONNECT":
        raise ScenarioError(
            "nothing comes after CONNECT but the greeting",
            where,
            "{before_reply: CONNECT}, {inside_reply: CONNECT} or {after_reply: CONNECT}",
        )
    return str(place), verb


@dataclass(frozen=True)
class HealSpec:
    """``heal``: end the faults of one link, or (None) of every link."""

    link: str | None = None

    def describe(self) -> str:
        return self.link or "all"


@dataclass(frozen=True)
class NodeActionSpec:
    """``kill``, ``pause``, ``resume``, ``restart``, ``wipe``: the node acted on."""

    node: str

    def describe(self) -> str:
        return self.node


@dataclass(frozen=True)
class DiskFullSpec:
    """``disk_full``: the node's queue disk refuses writes with ENOSPC once ``after``
    more bytes are written (0: at once)."""

    node: str
    after: int = 0

    def describe(self) -> str:
        return f"{self.node} after={self.after}" if self.after else self.node


@dataclass(frozen=True, kw_only=True)
class WaitSpec:
    """``wait``: ``timeout`` seconds; or, with ``delivered`` or ``reply``, until that
    message is delivered (to the sink ``to``, or any) or answered; or, with
    ``until: quiet``, until the cluster holds nothing any more; ``timeout`` at most."""

    delivered: str | None = None
    reply: str | None = None
    to: str | None = None
    #: "quiet": every node up with empty active and shadow queues, no sender waiting
    until: str | None = None
    timeout: float

    def describe(self) -> str:
        if self.delivered is None and self.reply is None and self.until is None:
            return str(self.timeout)
        return _keyed(self)


@dataclass(frozen=True)
class AdvanceSpec:
    """``advance``: every running node's virtual clock moves this many seconds."""

    seconds: float

    def describe(self) -> str:
        return str(self.seconds)


@dataclass(frozen=True, kw_only=True)
class SettingsSpec:
    """``set_settings``: new values (durations in seconds) for some nodes, or (none
    named) every node; with ``result``, the nodes must accept or reject them."""

    values: dict[str, Any]
    nodes: tuple[str, ...] = ()
    #: accepted | rejected; None: not judged (a rejection makes the step fail)
    result: str | None = None

    def describe(self) -> str:
        rest = _keyed(self, hide=("values",))
        return settings_text(self.values) + (f" {rest}" if rest else "")


@dataclass(frozen=True, kw_only=True)
class ResubmitSpec:
    """``resubmit``: ask ``node`` to resubmit from a Safety Net database, for messages
    of a window on the node's clock."""

    node: str
    database: str
    start: Moment
    end: Moment

    def describe(self) -> str:
        return _keyed(self)


@dataclass(frozen=True, kw_only=True)
class DirectorySpec:
    """``directory``: set one group's members, or one recipient's database, on every
    running node; exactly one of ``group`` and ``recipient`` is given."""

    group: str | None = None
    members: tuple[str, ...] = ()
    recipient: str | None = None
    #: None: the recipient has no mailbox database
    database: str | None = None

    def describe(self) -> str:
        return _keyed(self)


@dataclass(frozen=True, kw_only=True)
class RouteSpec:
    """``route``: from now on the nodes (none named: every node) send mail for
    ``domain`` to a sink (through their ``NODE->SINK`` link) or to another node;
    exactly one of ``sink`` and ``node`` is given."""

    domain: str
    sink: str | None = None
    #: of a route to a sink: mailbox or boundary
    kind: str = "mailbox"
    node: str | None = None
    nodes: tuple[str, ...] = ()

    def describe(self) -> str:
        return _keyed(self)


@dataclass(frozen=True, kw_only=True)
class SnapshotSpec:
    """``snapshot``: record what a node's queue holds (control API) in the history."""

    node: str
    queue: str

    def describe(self) -> str:
        return _keyed(self)


#: the answers a sink rule may give beyond a 4xx/5xx reply
SINK_ANSWERS = ("accept", "hang", "close")


@dataclass(frozen=True, kw_only=True)
class SinkRule:
    """One scripted answer of a sink: at ``stage`` (MAIL, RCPT, DATA), to the address
    ``match`` names (RCPT: the recipient; an address or a pattern with ``*``), the
    ``reply`` (a 4xx/5xx reply, ``hang``, ``close``: end the session with no reply,
    ``accept``: the usual answer), for ``times`` uses (None: until the next ``sink``
    step), ``delay`` seconds late."""

    stage: str
    reply: str
    match: str | None = None
    times: int | None = None
    delay: float = 0.0

    def describe(self) -> str:
        what = self.stage.lower() + (f" {self.match}" if self.match else "")
        more = f" x{self.times}" if self.times is not None else ""
        more += f" after {format_duration(self.delay)}" if self.delay else ""
        return f"{what}={self.reply}{more}"


@dataclass(frozen=True, kw_only=True)
class SinkSpec:
    """``sink``: how a sink answers from now on (every earlier script of it dropped):
    ``reply`` to the end of DATA (``accept``, ``hang`` or that SMTP reply, as ever), and
    the scripted ``rules`` per stage and recipient, in the order they are tried."""

    name: str
    reply: str | None = None
    rules: tuple[SinkRule, ...] = ()

    def describe(self) -> str:
        parts = [f"name={self.name}"]
        if self.reply is not None:
            parts.append(f"reply={self.reply}")
        parts += [rule.describe() for rule in self.rules]
        return " ".join(parts)


@dataclass(frozen=True)
class CheckSpec:
    """``check``: one expectation, evaluated at this point of the steps."""

    #: the expectation as ``expect:`` would give it (its arguments read by the checks)
    expectation: Step

    def describe(self) -> str:
        arg = {"kind": self.expectation.kind, **self.expectation.arg}
        return " ".join(f"{k}={v}" for k, v in arg.items())


@dataclass(frozen=True)
class NoteSpec:
    """``note``: text into the history."""

    text: str

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True, kw_only=True)
class SayItem:
    """One item of a session: exactly one of a command line (``send``), AUTH PLAIN as a
    node (``auth_as``) or a new message's content and final dot (``message``)."""

    send: str | None = None
    auth_as: str | None = None
    message: str | None = None
    #: regular expression the reply must match (its lines joined by newlines)
    reply: str | None = None
    #: the line must be refused: any 4xx/5xx reply, or the node ending the session
    refused: bool = False
    #: the item in the scenario file (not part of what the item says: two files saying
    #: the same session hold equal items)
    where: SourceRef = field(compare=False)


@dataclass(frozen=True, kw_only=True)
class SessionSpec:
    """``session``: a raw SMTP session of the harness's own through ``client->VIA``
    (engine/session.py says what each field does)."""

    via: str
    say: tuple[SayItem, ...]
    #: per reply
    timeout: float = REPLY_TIMEOUT
    #: after the lines, how long to keep the session open for the node to close it
    idle: float = 0.0
    #: while idle, send NOOP this often; None: never
    keepalive: float | None = None
    #: verb -> stand-in verb of a control session; empty: no control session
    control: dict[str, str] = field(default_factory=dict)
    behaviours: tuple[str, ...] = ()


#: what an action step's arguments are, by kind
ActionSpec = (
    SendSpec
    | FaultSpec
    | HealSpec
    | NodeActionSpec
    | DiskFullSpec
    | WaitSpec
    | AdvanceSpec
    | SettingsSpec
    | ResubmitSpec
    | DirectorySpec
    | RouteSpec
    | SnapshotSpec
    | SinkSpec
    | CheckSpec
    | NoteSpec
    | SessionSpec
    | WorkloadSpec
)

#: the spec class of each action step kind
ACTION_SPECS: dict[str, type] = {
    "send": SendSpec,
    "fault": FaultSpec,
    "heal": HealSpec,
    "kill": NodeActionSpec,
    "pause": NodeActionSpec,
    "resume": NodeActionSpec,
    "restart": NodeActionSpec,
    "wipe": NodeActionSpec,
    "power_cut": NodeActionSpec,
    "disk_full": DiskFullSpec,
    "disk_error": NodeActionSpec,
    "disk_ok": NodeActionSpec,
    "wait": WaitSpec,
    "advance": AdvanceSpec,
    "set_settings": SettingsSpec,
    "resubmit": ResubmitSpec,
    "directory": DirectorySpec,
    "route": RouteSpec,
    "snapshot": SnapshotSpec,
    "sink": SinkSpec,
    "check": CheckSpec,
    "note": NoteSpec,
    "session": SessionSpec,
    "workload": WorkloadSpec,
}
