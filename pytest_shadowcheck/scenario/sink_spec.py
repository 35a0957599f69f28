"""The ``sink`` step's arguments as a :class:`~.steps.SinkSpec`: which answers a next hop
gives, per stage and recipient, checked when the scenario loads (file:line errors).

The schema has checked the shapes; here each reply is checked to be a refusal (4xx/5xx)
or one of the words ``accept``, ``hang``, ``close``, and each duration parsed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pytest_shadowcheck.errors import ScenarioError, SourceRef
from pytest_shadowcheck.scenario.steps import SINK_ANSWERS, SinkRule, SinkSpec

__all__ = ["build_sink_spec"]

#: a scripted refusal: a 4xx or 5xx code, then text (an enhanced code is usual)
_REFUSAL = re.compile(r"[45][0-9][0-9]( .*)?")
#: the ``reply`` of old: the answer to the end of DATA, any 3-digit reply
_ANY_REPLY = re.compile(r"[2-5][0-9][0-9]( .*)?")

At = Callable[[list[Any]], SourceRef]
Duration = Callable[[Any, list[Any]], float]


def build_sink_spec(arg: dict[str, Any], name: str, at: At, duration: Duration) -> SinkSpec:
    """The spec of one ``sink`` step (``name`` already checked against the topology)."""
    reply = arg.get("reply")
    if reply is not None and reply not in ("accept", "hang") and not _ANY_REPLY.fullmatch(reply):
        raise ScenarioError(
            f"sink reply {reply!r} is not an SMTP reply",
            at(["reply"]),
            'accept, hang, or a reply such as "451 4.3.0 busy"',
        )
    if reply is not None and ("data" in arg or "close_after_dot" in arg):
        key = "data" if "data" in arg else "close_after_dot"
        raise ScenarioError(
            f"reply and {key} both say how the end of DATA is answered",
            at([key]),
            "one of reply, data, close_after_dot",
        )
    if "data" in arg and "close_after_dot" in arg:
        raise ScenarioError(
            "data and close_after_dot both say how the end of DATA is answered",
            at(["close_after_dot"]),
            "one of them (data: {reply: close, times: N} is close_after_dot: N)",
        )
    rules: list[SinkRule] = []
    if "mail" in arg:
        rules.append(_rule("MAIL", None, arg["mail"], ["mail"], at, duration))
    for address, answer in (arg.get("rcpt") or {}).items():
        rules.append(_rule("RCPT", str(address), answer, ["rcpt", address], at, duration))
    if "data" in arg:
        rules.append(_rule("DATA", None, arg["data"], ["data"], at, duration))
    close = arg.get("close_after_dot")
    if close is not None and close is not False:
        times = None if close is True else int(close)
        rules.append(SinkRule(stage="DATA", reply="close", times=times))
    if reply is None and not rules:
        raise ScenarioError(
            "a sink step that scripts nothing",
            at([]),
            "reply, or one of mail, rcpt, data, close_after_dot",
        )
    return SinkSpec(name=name, reply=reply, rules=tuple(rules))


def _rule(
    stage: str, match: str | None, answer: Any, path: list[Any], at: At, duration: Duration
) -> SinkRule:
    spec = answer if isinstance(answer, dict) else {"reply": answer}
    sub = path + (["reply"] if isinstance(answer, dict) else [])
    reply = str(spec["reply"])
    if reply not in SINK_ANSWERS and not _REFUSAL.fullmatch(reply):
        raise ScenarioError(
            f"{stage} answer {reply!r} is neither a refusal nor accept, hang or close",
            at(sub),
            'a 4xx or 5xx reply such as "550 5.1.1 no such user", or accept, hang, close',
        )
    if match is not None and "@" not in match:
        raise ScenarioError(
            f"rcpt key {match!r} is not an address",
            at(path),
            "a recipient address (bob@corp.test) or a pattern (*@corp.test)",
        )
    delay = duration(spec["delay"], [*path, "delay"]) if "delay" in spec else 0.0
    return SinkRule(stage=stage, reply=reply, match=match, times=spec.get("times"), delay=delay)
