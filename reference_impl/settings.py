"""Transport settings under their Exchange names, with the catalogue's defaults.

Timers are seconds. A node validates every change as a whole, so an invalid
combination (TO-3) is refused before it takes effect, and configurations that
risk data loss without being invalid (SN-6) are reported as warnings.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

MINUTE = 60.0
HOUR = 60 * MINUTE
DAY = 24 * HOUR

PREFERENCES = ("PreferRemote", "LocalOnly", "RemoteOnly")
PROFILES = ("2013", "2010")


class SettingsError(ValueError):
    """A setting is unknown, of the wrong type, or inconsistent with another."""


@dataclass(frozen=True)
class Settings:
    """Every parameter the reference MTA honours (BEHAVIOURS.md, Parameters)."""

    ShadowRedundancyEnabled: bool = True
    RejectMessageOnShadowFailure: bool = False
    ShadowMessagePreferenceSetting: str = "PreferRemote"
    MaxRetriesForRemoteSiteShadow: int = 4
    MaxRetriesForLocalSiteShadow: int = 2
    ShadowHeartbeatFrequency: float = 2 * MINUTE
    ShadowResubmitTimeSpan: float = 3 * HOUR
    ShadowMessageAutoDiscardInterval: float = 2 * DAY
    SafetyNetHoldTime: float = 2 * DAY
    MessageExpirationTimeout: float = 2 * DAY
    ReplayLagTime: float | None = None
    ReceiveConnectionInactivityTimeout: float = 5 * MINUTE
    ReceiveConnectionTimeout: float = 10 * MINUTE
    SendConnectionInactivityTimeout: float = 10 * MINUTE
    MaxAcknowledgementDelay: float = 30.0
    ShadowHeartbeatTimeoutInterval: float = 300.0
    ShadowHeartbeatRetryCount: int = 3
    # The catalogue's "Primary Safety Net unavailability before shadow broadcast" (SN-7).
    PrimarySafetyNetUnavailableTimeout: float = 12 * HOUR
    # Not in the catalogue, but every transport has them: how often a queued
    # message is retried after a 4xx or a failed connection, and the DATA limit.
    TransientFailureRetryInterval: float = 5 * MINUTE
    MaxMessageSize: int = 10 * 1024 * 1024
    # Exchange's Receive connector limit on simultaneous inbound connections. Above
    # it a client is answered 421; the last tenth (2 to 64) is kept for peers of the
    # boundary, and the node lowers it to what its descriptor limit allows.
    MaxInboundConnection: int = 5000
    # Not Exchange's either: how many processes of a node accept SMTP (workers.py).
    # 1: the node process itself; N >= 2: N forked workers, the node process
    # keeping delivery, timers and the control API. Read at start only. 1 by
    # default: on two shared cores, workers made a shadowing node slower (more
    # CPU per message than the second core gave back); see docs/protocol.md.
    SmtpInProcesses: int = 1

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None, base: Settings | None = None) -> Settings:
        """Build settings from Exchange names, starting from ``base`` (or the defaults)."""
        start = base or cls()
        changes: dict[str, Any] = {}
        known = {f.name: f for f in dataclasses.fields(cls)}
        for name, raw in (values or {}).items():
            if name not in known:
                raise SettingsError(f"unknown setting {name!r}; known: {', '.join(sorted(known))}")
            changes[name] = _coerce(name, raw, getattr(cls(), name))
        result = dataclasses.replace(start, **changes)
        result.validate()
        return result

    def validate(self) -> None:
        if self.ShadowMessagePreferenceSetting not in PREFERENCES:
            raise SettingsError(
                f"ShadowMessagePreferenceSetting must be one of {', '.join(PREFERENCES)}, "
                f"not {self.ShadowMessagePreferenceSetting!r}"
            )
        # TO-3: an idle limit at or above the absolute limit can never fire.
        if self.ReceiveConnectionInactivityTimeout >= self.ReceiveConnectionTimeout:
            raise SettingsError(
                "ReceiveConnectionInactivityTimeout "
                f"({self.ReceiveConnectionInactivityTimeout:g}s) must be less than "
                f"ReceiveConnectionTimeout ({self.ReceiveConnectionTimeout:g}s)"
            )
        for name in self.names():
            value = getattr(self, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise SettingsError(f"{name} must not be negative (got {value})")
        if self.ShadowHeartbeatFrequency <= 0:
            raise SettingsError("ShadowHeartbeatFrequency must be positive")
        if self.MaxInboundConnection < 3:
            raise SettingsError(
                f"MaxInboundConnection must be at least 3 (got {self.MaxInboundConnection})"
            )
        if not 1 <= self.SmtpInProcesses <= 64:
            raise SettingsError(f"SmtpInProcesses must be 1 to 64 (got {self.SmtpInProcesses})")

    def warnings(self) -> list[dict[str, str]]:
        """Configurations that are accepted but put a guarantee at risk."""
        found = []
        # SN-6: a lagged copy older than the Safety Net cannot be made whole.
        if self.ReplayLagTime is not None and self.ReplayLagTime > self.SafetyNetHoldTime:
            found.append(
                {
                    "code": "SN-6",
                    "message": (
                        f"ReplayLagTime ({self.ReplayLagTime:g}s) exceeds SafetyNetHoldTime "
                        f"({self.SafetyNetHoldTime:g}s): resubmission after a lagged-copy "
                        "activation can lose messages"
                    ),
                }
            )
        return found

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}


def _coerce(name: str, raw: Any, default: Any) -> Any:
    if name == "ReplayLagTime":
        return None if raw is None else _number(name, raw)
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise SettingsError(f"{name} must be true or false, not {raw!r}")
    if isinstance(default, int):
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise SettingsError(f"{name} must be a whole number, not {raw!r}")
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a whole number, not {raw!r}") from None
    if isinstance(default, float):
        return _number(name, raw)
    if not isinstance(raw, str):
        raise SettingsError(f"{name} must be text, not {raw!r}")
    return raw


def _number(name: str, raw: Any) -> float:
    if isinstance(raw, bool):
        raise SettingsError(f"{name} must be a number of seconds, not {raw!r}")
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise SettingsError(f"{name} must be a number of seconds, not {raw!r}") from None
