"""Broken variants that lose nothing at once but leave a copy on a healthy node forever:
only a check that the copy is gone in time sees them."""

from __future__ import annotations

from . import Variant


def _acts_on_sixteen_discards_per_answer() -> None:
    # A fixed buffer of sixteen notifications per XQDISCARD answer: the rest of the page
    # is confirmed (ACK) without being acted on, so the primary forgets notifications
    # whose copies stay in the shadow queue.
    from reference_impl import peer_link

    original = peer_link.parse_discard_reply

    def parse_discard_reply(text: str) -> tuple[str | None, list[str]]:
        db_id, ids = original(text)
        return db_id, ids[:16]

    peer_link.parse_discard_reply = parse_discard_reply


VARIANTS = [
    Variant(
        "acts-on-sixteen-discards-per-answer",
        "acts on the first sixteen notifications of a discard answer and confirms them all",
        ("di4_every_copy_of_a_workload_released",),
        _acts_on_sixteen_discards_per_answer,
    ),
]
