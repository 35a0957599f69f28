"""Broken variants only realistic traffic shows (issue 26): the workloads' tidy messages
of a few hundred bytes in short lines never reach these defects."""

from __future__ import annotations

from typing import Any

from . import Variant

#: the shadow store's line buffer, in octets (RFC 5321 allows 998 before the CRLF)
LINE_BUFFER = 512


def _shadow_truncates_long_lines() -> None:
    # The shadow stores its copy through a 512-octet line buffer: a longer line loses its
    # end. The primary's own copy is intact, so nothing shows until a shadow promotes.
    from reference_impl.shadowing import Shadowing

    original = Shadowing.store_copy

    def store_copy(self: Shadowing, primary: str, copy: dict[str, Any], sender: str,
                   recipients: list[str], content: bytes) -> str:  # fmt: skip
        lines = [line[:LINE_BUFFER] for line in content.split(b"\r\n")]
        return original(self, primary, copy, sender, recipients, b"\r\n".join(lines))

    Shadowing.store_copy = store_copy  # type: ignore[method-assign]


#: where the variant breaks a long line, as sendmail's SMTP mailer does (``L=990``)
WRAP_AT = 990


def _wraps_long_lines() -> None:
    # Every line longer than 990 octets goes to the next hop broken in two, the rest on
    # a continuation line, as sendmail's default SMTP mailer does: the message is altered
    # on every delivery, fault or not, so it is no defect of any recovery.
    import dataclasses

    from reference_impl.delivery import _Session

    original = _Session.deliver

    async def deliver(self: _Session, route: Any, message: Any, fork: Any) -> tuple[str, str]:
        lines = []
        for line in message.content.split(b"\r\n"):
            while len(line) > WRAP_AT:
                lines.append(line[:WRAP_AT])
                line = b" " + line[WRAP_AT:]
            lines.append(line)
        wrapped = dataclasses.replace(message, content=b"\r\n".join(lines))
        return await original(self, route, wrapped, fork)

    _Session.deliver = deliver  # type: ignore[method-assign]


VARIANTS = [
    Variant(
        name="shadow-truncates-long-lines",
        breaks=(
            "the shadow keeps its copy through a 512-octet line buffer: a promoted message "
            "with a longer line (RFC 5321 allows 998) is delivered with the line cut short"
        ),
        fails=("durability_backlog_promotion",),
        apply=_shadow_truncates_long_lines,
    ),
    Variant(
        name="wraps-long-lines",
        breaks="breaks every body line longer than 990 octets in two on its way to the next "
        "hop (sendmail's L=990), with or without a fault",
        fails=("durability_kill",),
        apply=_wraps_long_lines,
    ),
]
