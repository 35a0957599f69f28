"""How the checks say things to a mail admin: event matchers, SMTP patterns, steps and
values in plain words, derived from their parts, never written per scenario.

A matcher ``{link: mbx1->mbx2, line: '^250', direction: s2c, message: m1}`` reads
"mbx2 accepted m1 from mbx1 (250 to its content)"; a regular expression that is a
verb or a reply code at the start of a line reads as that verb or code
(``^XSHADOW`` -> "XSHADOW", ``^5\\d\\d`` -> "a 5xx reply"), a plain text as that text
("mentions ReplayLagTime"); only a pattern no words can say is shown, and then as
"the pattern `...`". On a link ``a->b`` ``a`` is the SMTP client and ``b`` the
server; ``client`` is the sender the harness plays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.history import plain_text
from pytest_shadowcheck.scenario.steps import (
    AdvanceSpec,
    FaultSpec,
    HealSpec,
    NodeActionSpec,
    SendSpec,
    SettingsSpec,
    WaitSpec,
)

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView as Run
    from pytest_shadowcheck.history import Event
    from pytest_shadowcheck.scenario.model import Step

__all__ = [
    "Pattern",
    "Phrase",
    "code_words",
    "describe_event",
    "describe_matcher",
    "link_sides",
    "no",
    "parse_pattern",
    "pattern_tail",
    "pattern_words",
    "plain",
    "quoted",
    "reply_words",
    "session_fact",
    "settings_text",
    "step_words",
]

#: characters a regular expression may escape that then stand for themselves
_ESCAPABLE = set(".\\/[](){}*+?|^$-:<>@ #=!,;'\"&%~`_")
#: reply codes whose meaning every admin knows, said as an act of the server
_GREETING = "220"


@dataclass(frozen=True)
class Phrase:
    """One event in words: that it happened, that it never did, that it had not yet."""

    text: str
    never: str
    not_yet: str

    @classmethod
    def active(cls, subject: str, past: str, perfect: str | None = None) -> Phrase:
        """``subject`` did ``past`` (``perfect``: the participle phrase, when it differs)."""
        return cls(
            f"{subject} {past}",
            f"{subject} never {past}",
            f"{subject} had not {perfect or past}",
        )


# --------------------------------------------------------------------------- values


def plain(value: Any) -> str:
    """A value as an admin writes it: lists comma-separated, booleans true/false,
    durations (floats: every float the scenario format has is seconds) with ``s``,
    mappings as ``Name=value``; never a Python repr."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}s"
    if isinstance(value, dict):
        return settings_text(value)
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(plain(v) for v in value)
    return str(value)


def settings_text(settings: dict[str, Any]) -> str:
    """``{'ShadowResubmitTimeSpan': 3.0, 'X': True}`` -> ``ShadowResubmitTimeSpan=3s, X=true``."""
    return ", ".join(f"{name}={plain(value)}" for name, value in settings.items())


def quoted(text: str) -> str:
    """A word stays bare; anything with spaces or punctuation goes in backticks, as a
    line of SMTP would in a manual."""
    return text if re.fullmatch(r"[A-Za-z0-9_.-]+", text) else f"`{text}`"


# --------------------------------------------------------------------------- patterns


@dataclass(frozen=True)
class Pattern:
    """What a regular expression over an SMTP line or a log line asks for.

    ``code``: a reply code at the start ("250", "5xx"), then ``separator`` ("-", " ",
    "[- ]" or "") and the literal ``rest``; ``verb``: a command at the start (its
    literal ``rest`` after it); ``literal``: the whole pattern as plain text
    (``anchored``: at the start of the line). ``alternatives``: a pattern of the form
    ``^(a|b)``, each part parsed. All None: only the pattern itself can say it."""

    regex: str
    anchored: bool = False
    code: str | None = None
    separator: str = ""
    verb: str | None = None
    rest: str = ""
    literal: str | None = None
    alternatives: tuple[Pattern, ...] = ()

    @property
    def plain(self) -> bool:
        return bool(self.code or self.verb or self.literal is not None or self.alternatives)


def _literal(text: str) -> str | None:
    """The text a regular expression matches literally (``\\.`` is a dot, a trailing
    ``\\b`` or ``$`` and an optional single character ``x?`` are dropped), or None when
    it has any other operator."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if char == "\\":
            if nxt == "b" and i + 2 == len(text):
                break
            if nxt in _ESCAPABLE and nxt:
                out.append(nxt)
                i += 2
                continue
            return None
        if char == "$" and i + 1 == len(text):
            break
        if nxt == "?" and char not in "\\.*+?()[]{}|^$":
            i += 2  # an optional character: the canonical line has it not
            continue
        if char in ".*+?()[]{}|^$":
            return None
        out.append(char)
        i += 1
    return "".join(out)


_CODE = re.compile(
    r"(?P<first>[2-5])(?P<more>\d\d|\\d\\d|\\d\{2\}|\[0-9\]\[0-9\]|\[0-9\]\{2\})?"
    r"(?P<sep>\[- \]|\[ -\]|-| |(?=$)|(?=\\b))"
)
_VERB = re.compile(r"(?P<verb>[A-Z][A-Z0-9]{2,})(?=$|[ :]|\\b|\\s)")


def parse_pattern(regex: str) -> Pattern:
    """Read ``regex`` as a reply code, a verb or a plain text when it is one."""
    anchored = regex.startswith("^")
    body = regex[1:] if anchored else regex
    group = re.fullmatch(r"\((?:\?:)?(.*)\)", body)
    if anchored and group and "(" not in group[1] and "|" in group[1]:
        parts = tuple(parse_pattern("^" + part) for part in group[1].split("|"))
        if all(p.plain for p in parts):
            return Pattern(regex, anchored, alternatives=parts)
    if anchored and (code := _CODE.match(body)):
        more = code["more"]
        number = code["first"] + (more if more and more.isdigit() else "xx")
        rest = _literal(body[code.end() :].removeprefix("\\b"))
        if rest is not None:
            separator = "[- ]" if code["sep"] in ("[- ]", "[ -]") else code["sep"]
            return Pattern(regex, True, code=number, separator=separator, rest=rest.strip())
    literal = _literal(body)
    if literal is None:
        return Pattern(regex, anchored)
    if anchored and (verb := _VERB.match(literal)):
        rest = literal[verb.end() :]
        return Pattern(regex, True, verb=verb["verb"], rest=rest.rstrip(), literal=literal)
    return Pattern(regex, anchored, literal=literal)


def code_words(code: str) -> str:
    """ "250" -> "250"; "5xx" -> "a 5xx reply"."""
    return f"a {code} reply" if code.endswith("xx") else code


def pattern_words(regex: str, what: str = "a line") -> str:
    """A pattern over lines in words: "a line starting `MAIL FROM:<>`", "a line
    mentioning ReplayLagTime", "a line starting 250", "a 5xx line" - or, when nothing
    else can say it, "a line matching the pattern `...`"."""
    p = parse_pattern(regex)
    if p.alternatives:
        return " or ".join(pattern_words(a.regex, what) for a in p.alternatives)
    if p.code and not p.rest and not p.code[1:].isdigit():
        return f"a {p.code} {what.removeprefix('a ')}"
    return f"{what} {pattern_tail(regex)}"


def pattern_tail(regex: str) -> str:
    """What a line matching ``regex`` does: "starting 250", "mentioning ReplayLagTime",
    "matching the pattern `...`" (after "a line", "none", "no header line")."""
    p = parse_pattern(regex)
    if p.alternatives:
        return " or ".join(pattern_tail(a.regex) for a in p.alternatives)
    if p.code:
        shown = p.code + ("" if not p.rest else " " if p.separator == "[- ]" else p.separator)
        return f"starting {quoted(shown + p.rest)}"
    if p.literal is not None:
        verb = "starting" if p.anchored else "mentioning"
        return f"{verb} {quoted(p.literal.strip())}"
    return f"matching the pattern `{regex}`"


def no(words: str) -> str:
    """ "a line starting 250" -> "no line starting 250"."""
    return "no " + words.removeprefix("a ").removeprefix("an ")


def reply_words(regex: str) -> str:
    """What a reply matching ``regex`` is: "250", "a 5xx reply", "235 or a 5xx reply",
    "a reply starting `250 0`"; the pattern itself when no words can say it."""
    p = parse_pattern(regex)
    if p.alternatives:
        return " or ".join(reply_words(a.regex) for a in p.alternatives)
    if p.code and not p.rest:
        return code_words(p.code)
    if p.code or p.literal is not None:
        return pattern_words(regex, "a reply")
    return f"a reply matching the pattern `{regex}`"


# --------------------------------------------------------------------------- who


def link_sides(link: str) -> tuple[str, str]:
    """(client, server) of a link; the harness's own client is "the sender"."""
    client, _, server = link.partition("->")
    return ("the sender" if client == "client" else client), server


def _possessive(who: str) -> str:
    return f"{who}'" if who.endswith("s") else f"{who}'s"


# --------------------------------------------------------------------------- matchers


def describe_matcher(matcher: dict[str, Any], run: Run | None = None) -> Phrase:
    """A matcher (docs/scenario-format.md, "event matcher") as an event in words."""
    for group, which in (("any_of", ""), ("last_of", ", whichever was later")):
        if group in matcher:
            members = matcher[group]
            shared = _shared_last_before(members) if group == "last_of" else None
            if shared is not None:
                # "X or Y, whichever was later, each for the last time before E": E said
                # once, and "each" tells it from a member taken at its first line
                inner = [{k: v for k, v in m.items() if k != "last_before"} for m in members]
                parts = [describe_matcher(each, run) for each in inner]
                event = describe_matcher(shared, run).text
                return Phrase(
                    " or ".join(p.text for p in parts) + which
                    + f", each for the last time before {event}",
                    " and ".join(p.never for p in parts) + f" before {event}",
                    " and ".join(p.not_yet for p in parts) + f" before {event}",
                )
            parts = [describe_matcher(each, run) for each in members]
            return Phrase(
                " or ".join(p.text for p in parts) + which,
                "; ".join(p.never for p in parts),
                "; ".join(p.not_yet for p in parts),
            )
    if "reply" in matcher:
        ref = matcher["reply"]
        via = _via(run, ref)
        if via:
            return Phrase.active(
                via, f"gave the sender its reply to {ref}", f"given the sender its reply to {ref}"
            )
        return Phrase.active("the sender", f"got its reply to {ref}")
    if "delivered" in matcher:
        ref, sink = matcher["delivered"], matcher.get("to")
        where = f" to {sink}" if sink else ""
        return Phrase(
            f"{ref} was delivered{where}",
            f"{ref} was never delivered{where}",
            f"{ref} had not been delivered{where}",
        )
    if "step" in matcher:
        return _step_matcher(matcher["step"], run)
    link = matcher["link"]
    client, server = link_sides(link)
    ref = matcher.get("message")
    if matcher.get("opened"):
        return Phrase.active(client, f"opened an SMTP session to {server}")
    if "closed" in matcher:
        session = f"the session in which {client} sent {ref}" if ref else ""
        by = matcher["closed"]
        if by == "server":
            what = f"{session} to {server}" if ref else f"{_possessive(client)} session"
            return Phrase.active(server, f"closed {what}")
        if by == "client":
            what = f"{session} to {server}" if ref else f"its session to {server}"
            return Phrase.active(client, f"closed {what}")
        subject = session + f" to {server}" if ref else f"the session from {client} to {server}"
        return Phrase.active(subject, "ended", "ended")
    line = _line_phrase(
        parse_pattern(matcher.get("line", ".*")), matcher.get("direction"), client, server, ref
    )
    if "first_after" in matcher and "last_before" in matcher:
        # a line between two events: a node heard from again before it acted
        between = (
            f"after {describe_matcher(matcher['first_after'], run).text} "
            f"and before {describe_matcher(matcher['last_before'], run).text}"
        )
        return Phrase(
            f"{line.text} {between}", f"{line.never} {between}", f"{line.not_yet} {between}"
        )
    if "first_after" in matcher:
        after = describe_matcher(matcher["first_after"], run)
        return Phrase(
            f"{line.text} for the first time after {after.text}",
            f"{line.never} after {after.text}",
            f"{line.not_yet} after {after.text}",
        )
    if "last_before" not in matcher:
        return line
    before = describe_matcher(matcher["last_before"], run)
    return Phrase(
        f"{line.text} for the last time before {before.text}",
        f"{line.never} before {before.text}",
        f"{line.not_yet} before {before.text}",
    )


def _shared_last_before(members: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The event every member of a ``last_of`` is the last line before, if they share one."""
    befores = [m.get("last_before") for m in members]
    first = befores[0]
    return first if first is not None and all(b == first for b in befores) else None


def _line_phrase(
    p: Pattern, direction: str | None, client: str, server: str, ref: str | None
) -> Phrase:
    """A line on a link in words, by what its pattern is and who says it."""
    after = f" after {ref}'s content" if ref else ""
    if p.regex in (".", ".*", "") and direction in ("s2c", "c2s"):
        # any line at all: that one side spoke to the other
        if direction == "s2c":
            return Phrase.active(server, f"answered {client}{after}")
        return Phrase.active(client, f"spoke to {server}{after}", f"spoken to {server}{after}")
    if direction == "s2c" or (direction is None and p.code and not p.verb):
        if p.code and not p.rest:
            code = code_words(p.code)
            if ref:
                act = {"2": "accepted", "4": "deferred", "5": "refused"}[p.code[0]]
                return Phrase.active(server, f"{act} {ref} from {client} ({p.code} to its content)")
            if p.code == _GREETING:
                return Phrase.active(server, f"greeted {client} with 220")
            return Phrase.active(server, f"answered {client} with {code}")
        keyword = re.fullmatch(r"[A-Z][A-Z0-9-]*", p.rest or "")
        if p.code == "250" and p.separator == "[- ]" and keyword:
            return Phrase.active(server, f"advertised {p.rest} to {client} in its EHLO reply")
        return Phrase.active(server, f"answered {client}{after} with {pattern_words(p.regex)}")
    if direction == "c2s" or (direction is None and p.verb):
        if p.verb:
            command = quoted(p.verb + p.rest)
            return Phrase.active(client, f"sent {command} to {server}{after}")
        return Phrase.active(client, f"sent {server} {pattern_words(p.regex)}{after}")
    if p.regex in (".*", ""):
        return Phrase.active(client, f"said anything to {server}{after}")
    return Phrase.active(f"{client} and {server}", f"exchanged {pattern_words(p.regex)}{after}")


def _via(run: Run | None, ref: str) -> str | None:
    """The node a message was sent to, from the run or from the scenario's steps."""
    if run is None:
        return None
    message = run.messages.get(ref)
    if message is not None:
        return message.via
    for step in run.scenario.steps:
        arg = step.arg if isinstance(step.arg, dict) else {}
        if step.kind == "send" and arg.get("id") == ref:
            return str(arg.get("via"))
        if step.kind == "session" and any(i.get("message") == ref for i in arg.get("say", [])):
            return str(arg.get("via"))
    return None


_NODE_ACTS = {
    "kill": ("killed", "killed"),
    "pause": ("paused", "paused"),
    "resume": ("resumed", "resumed"),
    "restart": ("restarted", "restarted"),
    "wipe": ("wiped the queue database of", "wiped the queue database of"),
    "power_cut": ("cut the power of", "cut the power of"),
    "disk_error": ("failed the queue disk of", "failed the queue disk of"),
    "disk_ok": ("freed the queue disk of", "freed the queue disk of"),
}


def _step_matcher(regex: str, run: Run | None) -> Phrase:
    """A ``{step: REGEX}`` matcher: the step its plain text names, in words."""
    p = parse_pattern(regex)
    text = p.literal
    if text is None:
        what = f"a step matching the pattern `{regex}`"
        return Phrase.active("the harness", f"ran {what}", f"run {what}")
    words = text.split()
    kind = words[0] if words else ""
    args = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    bare = [w for w in words[1:] if "=" not in w]
    if kind == "send" and "id" in args:
        ref = args["id"]
        via = args.get("via") or _via(run, ref)
        return Phrase.active("the sender", f"sent {ref}" + (f" to {via}" if via else ""))
    if kind in _NODE_ACTS and bare:
        past, perfect = _NODE_ACTS[kind]
        return Phrase.active("the harness", f"{past} {bare[0]}", f"{perfect} {bare[0]}")
    if len(words) >= 4 and words[1:3] == ["back", "after"]:
        what = f"back after its {words[3].rstrip(',')}"
        return Phrase.active(words[0], f"came {what}", f"come {what}")
    if kind == "heal" and bare:
        return Phrase.active("the harness", f"healed {bare[0]}")
    if kind == "fault" and "link" in args:
        what = f" ({args['kind']})" if "kind" in args else ""
        broken = f"{args['link']}{what}"
        return Phrase.active("the harness", f"broke {broken}", f"broken {broken}")
    if kind == "sink" and "name" in args and "reply" in args:
        return Phrase.active("the harness", f"set {args['name']} to {args['reply']}")
    if kind == "route" and not args:
        return Phrase.active("the harness", "changed a route")
    what = f"the step {quoted(text)}"
    return Phrase.active("the harness", f"ran {what}", f"run {what}")


# --------------------------------------------------------------------------- steps


def step_words(step: Step) -> str:
    """A scenario step as what the harness did: "the sender sent m2 to mbx1 for
    alice@corp.test", "the harness killed mbx1"."""
    kind, arg = step.kind, step.arg
    if isinstance(arg, SendSpec):
        to = f" for {plain(list(arg.to))}" if arg.to else ""
        return f"the sender sent {arg.id} to {arg.via}{to}"
    if isinstance(arg, NodeActionSpec) and kind in _NODE_ACTS:
        return f"the harness {_NODE_ACTS[kind][0]} {arg.node}"
    if isinstance(arg, HealSpec):
        return f"the harness healed {arg.describe()}"
    if isinstance(arg, FaultSpec):
        shown = ", ".join(
            [arg.kind]
            + ([plain(arg.seconds)] if arg.seconds else [])
            + ([f"{arg.bytes} bytes"] if arg.bytes else [])
        )
        return f"the harness broke {arg.link} ({shown})"
    if isinstance(arg, SettingsSpec):
        on = f" on {plain(list(arg.nodes))}" if arg.nodes else ""
        return f"the harness set {settings_text(arg.values)}{on}"
    if isinstance(arg, WaitSpec) and arg.until == "quiet":
        return f"the harness waited, {plain(arg.timeout)} at most, for the cluster to hold nothing"
    if isinstance(arg, WaitSpec) and arg.delivered is None and arg.reply is None:
        return f"the harness waited {plain(arg.timeout)}"
    if isinstance(arg, AdvanceSpec):
        return f"the harness moved every node's clock {plain(arg.seconds)} forward"
    describe = getattr(arg, "describe", None)
    return f"the harness ran {kind} " + (describe() if callable(describe) else plain(arg))


# --------------------------------------------------------------------------- events


def describe_event(run: Run, event: Event) -> str:
    """A history event as a sentence: "mbx2 answered mbx1 `250 2.0.0 Ok`"."""
    link = event.link or ""
    client, server = link_sides(link) if link else ("", "")
    text = str(event.data.get("text", ""))
    if event.kind == "line":
        if event.direction == "c2s":
            return f"{client} sent `{text}` to {server}"
        if text.startswith(_GREETING):
            return f"{server} greeted {client} with `{text}`"
        return f"{server} answered {client} `{text}`"
    if event.kind == "connect":
        return f"{client} opened SMTP session #{event.conn} to {server}"
    if event.kind == "close":
        return f"session #{event.conn} from {client} to {server} ended ({event.data.get('reason')})"
    if event.kind == "shutdown":
        return f"{client} closed its end of session #{event.conn} to {server}"
    if event.kind == "step":
        line = event.data.get("line")
        for step in run.scenario.steps:
            if line is not None and step.where.line == line:
                return step_words(step)
        return f"the harness: {plain_text(text)}"
    return f"{event.kind} {plain_text(text)}".strip()


def session_fact(run: Run, link: str, direction: str | None = None) -> str:
    """What a link saw, counted: "mbx1 never opened an SMTP session to mbx2", "mbx1
    opened 2 SMTP sessions to mbx2; mbx2 sent 14 lines"."""
    client, server = link_sides(link)
    opened = len(run.history.events(kind="connect", link=link))
    if not opened:
        return f"{client} never opened an SMTP session to {server}"
    sessions = f"{opened} SMTP session{'s' if opened != 1 else ''}"
    lines = [
        e for e in run.history.events(kind="line", link=link)
        if not direction or e.direction == direction
    ]  # fmt: skip
    who = {"c2s": client, "s2c": server}.get(direction or "", "")
    count = f"{len(lines)} line{'s' if len(lines) != 1 else ''}"
    said = f"{who} sent {count}" if who else f"{count} passed"
    return f"{client} opened {sessions} to {server}, in which {said}"
