"""Broken variants that only a fault at a protocol point reveals (fault kinds cut_at,
stall_at): the defect lies in what a node does when a session breaks at one exact
point, which a cut at a random byte rarely hits."""

from __future__ import annotations

from typing import Any

from . import Variant


def _copy_counted_when_reply_lost() -> None:
    # The session to the shadow drops while the primary waits for the reply to the
    # copy's content: the primary assumes the shadow stored what it was sent (CR-3).
    import aiosmtplib

    from reference_impl.peer_link import PeerLink

    original = PeerLink.send_copy

    async def send_copy(self: PeerLink, *args: Any, **kwargs: Any) -> None:
        smtp = self.smtp
        data = smtp.data

        async def data_assumed(message: Any, *a: Any, **kw: Any) -> Any:
            try:
                return await data(message, *a, **kw)
            except aiosmtplib.SMTPServerDisconnected:
                return aiosmtplib.SMTPResponse(250, "assumed stored")

        smtp.data = data_assumed  # type: ignore[method-assign]
        try:
            await original(self, *args, **kwargs)
        finally:
            del smtp.data

    PeerLink.send_copy = send_copy  # type: ignore[method-assign]


VARIANTS = [
    Variant(
        name="copy-counted-when-reply-lost",
        breaks="counts a shadow copy as made when the session to the shadow drops before "
        "the shadow's reply to the copy's final dot",
        fails=("cr3_reply_to_the_copys_final_dot_lost",),
        apply=_copy_counted_when_reply_lost,
    ),
]
