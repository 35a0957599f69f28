"""Broken variants for creating the shadow copy (CR, XS-1)."""

from __future__ import annotations

from typing import Any

from . import Variant, force_settings


def _ack_before_copy() -> None:
    # The copy still happens, but in the background: the sender's 250 no
    # longer waits for the shadow's (CR-3).
    from reference_impl.shadowing import Shadowing

    original = Shadowing.make_copy

    async def make_copy(self: Shadowing, message: Any, next_hops: list[str], state: Any) -> Any:
        self.node.background(original(self, message, next_hops, state))
        plan = self.attempt_plan()
        return plan[0] if plan else "nobody"

    Shadowing.make_copy = make_copy  # type: ignore[method-assign]


def _claims_copy_on_failure() -> None:
    # When no copy can be made, pretend one was: never answers 451 4.4.0 (CR-4).
    from reference_impl.shadowing import Shadowing

    original = Shadowing.make_copy

    async def make_copy(self: Shadowing, message: Any, next_hops: list[str], state: Any) -> Any:
        return await original(self, message, next_hops, state) or "nobody"

    Shadowing.make_copy = make_copy  # type: ignore[method-assign]


def _always_rejects() -> None:
    force_settings(RejectMessageOnShadowFailure=True)


def _ignores_disabled() -> None:
    force_settings(ShadowRedundancyEnabled=True)


VARIANTS: list[Variant] = [
    Variant(
        name="ack-before-shadow-copy",
        breaks="sends the sender its 250 before the shadow has acknowledged the copy",
        fails=("cr3_shadow_ack_before_sender_ack",),
        apply=_ack_before_copy,
    ),
    Variant(
        name="never-rejects-unredundant",
        breaks="accepts a message no copy could be made of, even when told to reject it",
        fails=("cr4_single_node_rejects", "cr4_cut_link_rejects"),
        apply=_claims_copy_on_failure,
    ),
    Variant(
        name="always-rejects-unredundant",
        breaks="rejects a message no copy could be made of, although told to accept it",
        fails=("cr5_cut_link_accepts",),
        apply=_always_rejects,
    ),
    Variant(
        name="shadows-when-disabled",
        breaks="keeps advertising XSHADOW and making copies with ShadowRedundancyEnabled=false",
        fails=("cr6_disabled_no_xshadow",),
        apply=_ignores_disabled,
    ),
]
