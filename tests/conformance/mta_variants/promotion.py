"""Broken variants for promotion after an outage (PR)."""

from __future__ import annotations

from typing import Any

from . import Variant


def _shadow_drops_copies() -> None:
    # Acknowledges XSHADOWCOPY like a good shadow, keeps nothing.
    from reference_impl.shadowing import REPLY_COPY_STORED, Shadowing

    def store_copy(self: Shadowing, primary: str, copy: dict[str, Any], *args: Any) -> str:
        return REPLY_COPY_STORED

    Shadowing.store_copy = store_copy  # type: ignore[method-assign,assignment]


VARIANTS: list[Variant] = [
    Variant(
        name="shadow-drops-copies",
        breaks="the shadow acknowledges every copy but stores none of them",
        fails=("pr1_shadow_promotes_after_primary_killed", "pr4_primary_and_shadow_fail_together"),
        apply=_shadow_drops_copies,
    ),
]
