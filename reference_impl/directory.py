"""A small directory: which mailbox database holds a recipient, and group members.

Categorisation expands distribution groups here; because membership can
change through the control API, a Shadow Safety Net copy (which keeps the
original envelope recipients) is expanded afresh on resubmission (SN-10).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Directory:
    recipients: dict[str, str] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)

    def expand(self, addresses: list[str]) -> list[str]:
        """Envelope recipients with groups replaced by their members (nested, once each)."""
        seen: set[str] = set()
        out: list[str] = []
        pending = [a.lower() for a in addresses]
        while pending:
            address = pending.pop(0)
            if address in seen:
                continue
            seen.add(address)
            if address in self.groups:
                pending.extend(self.groups[address])
            else:
                out.append(address)
        return out

    def database(self, address: str) -> str | None:
        return self.recipients.get(address.lower())

    def set_group(self, group: str, members: list[str]) -> None:
        self.groups[group.lower()] = [m.lower() for m in members]

    def set_recipient(self, address: str, database: str | None) -> None:
        if database is None:
            self.recipients.pop(address.lower(), None)
        else:
            self.recipients[address.lower()] = database

    def as_dict(self) -> dict[str, object]:
        return {"recipients": dict(self.recipients), "groups": dict(self.groups)}
