"""Verdicts: what a scenario run proved, with the evidence.

``PASS``; ``FAIL`` (expected, observed and the history excerpt);
``UNTESTABLE`` (the target lacks a capability the scenario needs: never a
pass); ``OUTSIDE-GUARANTEE`` (a message was lost, but the scenario's own
faults put it outside what shadow redundancy promises, PR-4).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .statuses import RANK, Status

__all__ = ["CheckResult", "Status", "Verdict"]


@dataclass
class CheckResult:
    """The outcome of one expectation (or of the always-on invariant)."""

    name: str
    status: Status
    expected: str
    observed: str
    where: str = ""
    excerpt: str = ""

    def render(self) -> str:
        lines = [f"[{self.status}] {self.name}" + (f"  ({self.where})" if self.where else "")]
        lines.append(f"    expected: {self.expected}")
        lines.append(f"    observed: {self.observed}")
        if self.excerpt and self.status != Status.PASS:
            lines.append("    history around it:")
            lines.extend("    " + line for line in self.excerpt.splitlines())
        return "\n".join(lines)


@dataclass
class Verdict:
    """The verdict of one scenario run."""

    scenario: str
    behaviours: list[str]
    status: Status = Status.PASS
    reason: str = ""
    source: str = ""
    title: str = ""
    checks: list[CheckResult] = field(default_factory=list)

    def add(self, result: CheckResult) -> None:
        self.checks.append(result)
        if RANK[result.status] > RANK[self.status]:
            self.status = result.status
            self.reason = f"{result.name}: {result.observed}"

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == Status.FAIL]

    def render(self) -> str:
        """The failure text a mail admin reads: behaviour, expected, observed, history."""
        head = f"{self.status}: scenario {self.scenario!r} ({', '.join(self.behaviours)})" + (
            f" - {self.title}" if self.title and self.title != self.scenario else ""
        )
        lines = [head]
        if self.source:
            lines.append(f"defined at {self.source}")
        shown = [c for c in self.checks if c.status != Status.PASS] or self.checks
        for check in shown:
            lines.append(check.render())
        passed = [c for c in self.checks if c.status == Status.PASS]
        if passed and shown is not self.checks:
            lines.append(
                f"({len(passed)} other check(s) passed: {', '.join(c.name for c in passed)})"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = str(self.status)
        for check in data["checks"]:
            check["status"] = str(check["status"])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        checks = [
            CheckResult(**{**c, "status": Status(c["status"])}) for c in data.get("checks", [])
        ]
        return cls(
            scenario=data["scenario"],
            behaviours=list(data["behaviours"]),
            status=Status(data["status"]),
            reason=data.get("reason", ""),
            source=data.get("source", ""),
            title=data.get("title", ""),
            checks=checks,
        )
