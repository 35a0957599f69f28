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
]
