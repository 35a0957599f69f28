"""Next hops that refuse some recipients: what the transport owes each of them
(scenarios/refusals.yaml) - the taken ones delivered once, the deferred ones retried, a
DSN naming only the refused ones."""

from __future__ import annotations

from typing import Any

from . import Variant


def _forgets_who_was_taken() -> None:
    """The fork is retried or bounced whole when the next hop took some recipients and
    refused others (the reference before the fix of its partial refusals)."""
    from reference_impl.delivery import _Session

    deliver = _Session.deliver

    async def whole(self: _Session, *args: Any) -> tuple[str, str]:
        outcome, detail = await deliver(self, *args)
        self.refused = None
        return outcome, detail

    _Session.deliver = whole  # type: ignore[method-assign]


def _bounces_temporary_refusals() -> None:
    """A 4xx of the next hop is taken for a 5xx: the recipient is bounced, not retried."""
    from reference_impl import delivery

    deliver = delivery._Session.deliver

    async def final(self: delivery._Session, *args: Any) -> tuple[str, str]:
        outcome, detail = await deliver(self, *args)
        if outcome == delivery.RETRY:
            return delivery.FINAL, detail or "refused"
        return outcome, detail

    delivery._Session.deliver = final  # type: ignore[method-assign]


def _drops_refused_mail_silently() -> None:
    """A recipient the next hop refused for good is marked reported, and no report is
    ever sent: the sender, told 250, never learns the message failed."""
    from reference_impl.delivery import Delivery

    def no_report(self: Delivery, message: Any, failed: dict[str, str]) -> None:
        for fork in self.node.db.forks_of(message.id):
            if fork.state == "failed":
                self.node.db.fork_done(
                    message.id, fork.domain, "failed-reported", self.node.clock.now(), "dropped"
                )

    Delivery._send_dsn = no_report  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="partial-refusal-retried-whole",
        breaks=(
            "when the next hop takes some recipients and refuses others, retries the "
            "message to all of them (a second copy for those it took) and names them all "
            "in the DSN"
        ),
        fails=("cr10_next_hop_refuses_some_recipients",),
        apply=_forgets_who_was_taken,
    ),
    Variant(
        name="temporary-refusal-bounced",
        breaks="bounces a recipient the next hop refused for now (4xx) instead of retrying",
        fails=(
            "cr10_next_hop_refuses_some_recipients",
            "cr10_next_hop_busy_then_hangs_up_after_the_dot",
        ),
        apply=_bounces_temporary_refusals,
    ),
    Variant(
        name="drops-refused-mail-silently",
        breaks=(
            "drops a message whose recipients the next hop refused for good without a "
            "non-delivery report: acknowledged, never delivered, the sender never told"
        ),
        fails=(
            "cr10_next_hop_refuses_some_recipients",
            "cr10_every_recipient_refused_for_good_is_reported",
        ),
        apply=_drops_refused_mail_silently,
    ),
]
