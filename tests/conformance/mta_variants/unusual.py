"""Correct but unusual MTAs: each does something the catalogue allows and the four tuned
MTAs do not, so no scenario may FAIL it (``fails`` is empty). A false FAIL on one of them
is the harness's defect (test_unusual_but_correct.py)."""

from __future__ import annotations

from typing import Any

from . import Variant, force_settings

#: what the MTA says when it has had enough of a client (as Exim and others say it)
TOO_MANY_ERRORS = "421 4.5.0 Too many errors, bye"
ERRORS_PER_SESSION = 3


def _closes_after_three_errors() -> None:
    # Every 4xx/5xx it answers counts; at the third it says 421 instead and hangs up: a
    # stronger refusal than the 5xx a stranger's XSHADOW gets elsewhere, and a deliberate one.
    from reference_impl.smtp_in import NodeSMTP

    push = NodeSMTP.push

    async def counting_push(self: NodeSMTP, status: Any) -> None:
        text = status.decode() if isinstance(status, bytes) else str(status)
        if text[:1] in "45" and text[3:4] != "-" and not text.startswith("421"):
            errors = getattr(self, "_variant_errors", 0) + 1
            self._variant_errors = errors  # type: ignore[attr-defined]
            if errors >= ERRORS_PER_SESSION:
                self._close_with(TOO_MANY_ERRORS)
                return
        await push(self, status)

    NodeSMTP.push = counting_push  # type: ignore[method-assign]


def _retries_every_minute() -> None:
    # The retry interval is compiled in: 60 s whatever TransientFailureRetryInterval says.
    force_settings(TransientFailureRetryInterval=60.0)


def _retries_every_two_seconds() -> None:
    # The same, at a value short enough for the windows to stretch to it in a test.
    force_settings(TransientFailureRetryInterval=2.0)


VARIANTS = [
    Variant(
        name="closes-with-421-after-three-errors",
        breaks="nothing: at its third 4xx/5xx in a session it answers 421 and closes it",
        fails=(),
        apply=_closes_after_three_errors,
    ),
    Variant(
        name="retries-every-minute",
        breaks="nothing: its retry interval is compiled in at 60 s, ignoring the setting "
        "(declared, as a description's timers would declare it)",
        fails=(),
        apply=_retries_every_minute,
        timers={"TransientFailureRetryInterval": (60.0, 60.0)},
    ),
    Variant(
        name="retries-every-two-seconds",
        breaks="nothing: its retry interval is compiled in at 2 s (declared): the scenarios "
        "whose windows count on it run stretched to it",
        fails=(),
        apply=_retries_every_two_seconds,
        timers={"TransientFailureRetryInterval": (2.0, 2.0)},
    ),
]
