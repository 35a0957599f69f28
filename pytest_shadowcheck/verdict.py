"""Verdicts: what a scenario run proved, behaviour by behaviour, with the evidence.

Every :class:`CheckResult` evidences named behaviours (by default all the
scenario's). A behaviour's status in the scenario combines only the checks
that evidence it (``statuses.strongest``): a FAIL of a CR-1 check never makes
XS-3 fail. A behaviour no check evidenced is NOT-APPLICABLE. When the target
or the harness broke (a node that never started, a step the target could not
do) the behaviours not already failed are INCONCLUSIVE; when the scenario
could not run at all on this target they are UNTESTABLE. The scenario's own
status (its pytest outcome) is the strongest over its behaviours. The words
are defined in :mod:`.statuses`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_shadowcheck.statuses import Status, strongest

__all__ = ["CheckResult", "Status", "Verdict", "is_history_excerpt", "merge_excerpts"]


@dataclass
class CheckResult:
    """The outcome of one expectation (or of the always-on invariant)."""

    name: str
    status: Status
    expected: str
    observed: str
    where: str = ""
    excerpt: str = ""
    #: behaviour IDs this check evidences; empty: every behaviour of the scenario
    behaviours: list[str] = field(default_factory=list)
    #: how often each behaviour's rules decided something (the model check): coverage a
    #: dashboard tracks across runs
    counts: dict[str, int] = field(default_factory=dict)
    #: INCONCLUSIVE only because the harness itself ran late (engine/lag.py): another
    #: run on a quieter machine can judge it
    harness_late: bool = False

    def render(self, excerpt: bool = True, rule: str = "") -> str:
        """The check as a mail admin reads it: the rule it tested (``rule``, the
        catalogue's sentence, given by the caller), what was expected and what was
        observed, then (``excerpt``, not for a pass) the history around it."""
        lines = [f"[{self.status}] {self.name}" + (f"  ({self.where})" if self.where else "")]
        if self.behaviours:
            lines[0] += f"  evidence for {', '.join(self.behaviours)}"
        if rule:
            lines.append(f"    rule tested: {rule}")
        lines.append(f"    expected: {self.expected}")
        lines.append(f"    observed: {self.observed}")
        if excerpt and self.excerpt and self.status != Status.PASS:
            if is_history_excerpt(self.excerpt):
                lines.append("    history around it:")
            # other evidence (a node's log tail) says what it is in its first line
            lines.extend("    " + line for line in self.excerpt.splitlines())
        return "\n".join(lines)


#: a line of :meth:`History.excerpt`: "  +1.234s link #1 ..."
_TIMED = re.compile(r"^\s*\+(\d+(?:\.\d+)?)s ")
_OMITTED = re.compile(r"^\s*\.\.\. \d+ more event")


def is_history_excerpt(text: str) -> bool:
    """Whether ``text`` is a history excerpt (timed event lines), which one scenario's
    checks share, rather than evidence of its own (a node's log tail)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and all(
        _TIMED.match(line) or _OMITTED.match(line) or line.strip() == "(no events)"
        for line in lines
    )


def merge_excerpts(texts: list[str]) -> str:
    """Several history excerpts as one: every event line once, in time order."""
    seen: dict[str, float] = {}
    omitted = False
    for text in texts:
        for line in text.splitlines():
            timed = _TIMED.match(line)
            if timed:
                seen.setdefault(line, float(timed[1]))
            elif _OMITTED.match(line):
                omitted = True
    merged = sorted(seen, key=seen.__getitem__)
    if omitted:
        merged.append("  ... more events in these windows not shown")
    return "\n".join(merged)


@dataclass
class Verdict:
    """The verdict of one scenario run."""

    scenario: str
    behaviours: list[str]
    reason: str = ""
    source: str = ""
    title: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    #: UNTESTABLE or INCONCLUSIVE for the whole scenario (it could not run, or broke)
    overall: Status | None = None
    #: the target's evidence of its own state (node log tails), shown once
    diagnostics: str = ""
    #: the figures of each workload step (HistoryReport.summary()): JUnit, certification
    workloads: list[dict[str, Any]] = field(default_factory=list)
    #: why a PASS would claim more than the run shows (a node restarted where the
    #: scenario reloads it): such a behaviour is UNTESTABLE, a FAIL still stands
    caveats: list[str] = field(default_factory=list)
    #: an explored scenario's shrunk reproduction (plugin/exploration.py): its file,
    #: operations and replay command
    explored: dict[str, Any] | None = None
    #: why this verdict is a second run's: the first one's summary (plugin/lanes.py)
    retried: str = ""
    #: the whole scenario INCONCLUSIVE because the machine was overloaded (it ran out
    #: of time while its nodes waited for a CPU), not because it broke
    overloaded: bool = False
    #: a behaviour is evidenced only by the checks that name it (an explored scenario,
    #: which lists every behaviour its model may judge): a check that names none of the
    #: scenario's (an invariant, a step's replies) decides the scenario's outcome, not a
    #: behaviour's verdict
    named_evidence: bool = False

    def add(self, result: CheckResult) -> None:
        self.checks.append(result)

    @property
    def harness_late(self) -> bool:
        """INCONCLUSIVE only because the harness ran late: every INCONCLUSIVE check says
        so, and the run itself did not break."""
        late = [c for c in self.checks if c.status == Status.INCONCLUSIVE]
        return (
            (self.overall is None or (self.overall == Status.INCONCLUSIVE and self.overloaded))
            and self.status == Status.INCONCLUSIVE
            and all(c.harness_late for c in late)
        )

    def untestable(self, reason: str) -> None:
        self.overall, self.reason = Status.UNTESTABLE, reason

    def inconclusive(self, reason: str, diagnostics: str = "", harness_late: bool = False) -> None:
        """The whole scenario INCONCLUSIVE; ``harness_late``: only because the machine
        was overloaded (a run again alone may judge it: :attr:`harness_late`)."""
        if self.overall != Status.INCONCLUSIVE:
            self.overall, self.reason = Status.INCONCLUSIVE, reason
            self.overloaded = harness_late
        if diagnostics and not self.diagnostics:
            self.diagnostics = diagnostics

    def evidence(self, behaviour: str) -> list[CheckResult]:
        """The checks that evidence ``behaviour``."""
        return [
            c
            for c in self.checks
            if behaviour in c.behaviours or not (c.behaviours or self.named_evidence)
        ]

    def _unnamed(self) -> list[CheckResult]:
        """The checks that evidence none of the scenario's behaviours but still decide its
        outcome when they do not pass: with :attr:`named_evidence`, every such check; in
        any scenario, an invariant's FAIL that it blames on no behaviour of the scenario
        (a damaged copy no fault came near is a defect of the MTA, not of its recovery)."""

        def decides(c: CheckResult) -> bool:
            if set(c.behaviours) & set(self.behaviours):
                return False  # judged with the behaviours it names
            if self.named_evidence:
                return c.status in (Status.FAIL, Status.INCONCLUSIVE, Status.OUTSIDE_GUARANTEE)
            # unnamed checks evidence every behaviour already
            return bool(c.behaviours) and c.status == Status.FAIL

        return [c for c in self.checks if decides(c)]

    def behaviour_status(self, behaviour: str) -> Status:
        checks = [c.status for c in self.evidence(behaviour)]
        if self.overall is not None:
            # a FAIL seen before the run broke is still a FAIL
            return strongest([*checks, self.overall]) if Status.FAIL in checks else self.overall
        status = strongest(checks, default=Status.NOT_APPLICABLE)
        return Status.UNTESTABLE if status == Status.PASS and self.caveats else status

    def behaviour_reason(self, behaviour: str) -> str:
        status = self.behaviour_status(behaviour)
        checks = [c.status for c in self.evidence(behaviour)]
        if self.caveats and self.overall is None and strongest(checks) == Status.PASS:
            return f"its checks passed, but no PASS is claimed: {self.caveats[0]}"
        for check in self.evidence(behaviour):
            if check.status == status and status != Status.PASS:
                return f"{check.name}: {check.observed}"
        if status == self.overall:
            return self.reason
        if status == Status.NOT_APPLICABLE and not self.evidence(behaviour):
            return "no check of this scenario evidences it"
        return ""

    @property
    def by_behaviour(self) -> dict[str, Status]:
        """Each behaviour's status; with :attr:`named_evidence`, only the behaviours a
        check named (or all, when the run broke): the others were listed because the
        model might judge them, and it did not - no verdict of this scenario, not even a
        NOT-APPLICABLE that would hide another scenario's UNTESTABLE."""
        return {
            bid: self.behaviour_status(bid)
            for bid in self.behaviours
            if not self.named_evidence or self.overall is not None or self.evidence(bid)
        }

    @property
    def status(self) -> Status:
        """The scenario's outcome: the strongest of its behaviours' statuses (and of the
        checks that name none of them, in an explored scenario)."""
        return strongest(
            [*self.by_behaviour.values(), *(c.status for c in self._unnamed())],
            default=Status.NOT_APPLICABLE,
        )

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == Status.FAIL]

    def summary(self) -> str:
        """One line: the scenario's status and why, then each behaviour that differs."""
        status = self.status
        if self.overall is not None and status == self.overall:
            why = self.reason
        else:
            why = next(
                (self.behaviour_reason(b) for b, s in self.by_behaviour.items() if s == status),
                "",
            ) or next(
                (f"{c.name}: {c.observed}" for c in self._unnamed() if c.status == status), ""
            )
        text = why
        others = [f"{b} {s}" for b, s in self.by_behaviour.items() if s != status]
        if others and len(self.behaviours) > 1:
            text += f" [{'; '.join(others)}]"
        return text

    def rule_tested(self, check: CheckResult, rules: Mapping[str, str], stated: set[str]) -> str:
        """The rule(s) ``check`` tested, in the catalogue's words (``rules``: behaviour ID
        -> sentence); a rule already in ``stated`` is only named, and is added to it."""
        named = check.behaviours or ([] if self.named_evidence else self.behaviours)
        ids = [b for b in named if b in rules]
        fresh = [b for b in ids if b not in stated]
        parts = [f"{b} - {rules[b]}" for b in fresh]
        if len(fresh) < len(ids):
            parts.append(", ".join(b for b in ids if b not in fresh) + " (stated above)")
        stated.update(fresh)
        return "\n                 ".join(parts)

    def check_texts(self, rules: Mapping[str, str] | None = None) -> list[tuple[CheckResult, str]]:
        """Every check that is not a pass, rendered: the rule it tested, expected and
        observed, and its own evidence (a log tail); the history excerpts, which the
        checks of one scenario share, are left for :meth:`history_excerpt`."""
        stated: set[str] = set()
        out = []
        for check in self.checks:
            if check.status == Status.PASS:
                continue
            rule = self.rule_tested(check, rules or {}, stated)
            own = bool(check.excerpt) and not is_history_excerpt(check.excerpt)
            out.append((check, check.render(excerpt=own, rule=rule)))
        return out

    def history_excerpt(self) -> str:
        """The history around the checks that are not a pass, once for the scenario."""
        return merge_excerpts(
            [
                c.excerpt
                for c in self.checks
                if c.status != Status.PASS and c.excerpt and is_history_excerpt(c.excerpt)
            ]
        )

    def render(self, rules: Mapping[str, str] | None = None) -> str:
        """The text a mail admin reads: per behaviour its status; per check that is not a
        pass the rule it tested (the catalogue's sentence, ``rules``: behaviour ID ->
        sentence, supplied by the caller), expected, observed; then the history once."""
        head = f"{self.status}: scenario {self.scenario} ({', '.join(self.behaviours)})" + (
            f" - {self.title}" if self.title and self.title != self.scenario else ""
        )
        lines = [head]
        if self.source:
            lines.append(f"defined at {self.source}")
        for bid, status in self.by_behaviour.items():
            why = self.behaviour_reason(bid)
            if why == self.reason and self.overall is not None:
                why = ""  # said once, below
            lines.append(f"  {bid}: {status}" + (f" - {why}" if why and status != "PASS" else ""))
        if self.overall is not None:
            lines.append(f"{self.overall}: {self.reason}")
        lines.extend(text for _, text in self.check_texts(rules))
        history = self.history_excerpt()
        if history:
            lines.append("history around it (once for the scenario):")
            lines.extend("    " + line for line in history.splitlines())
        passed = [c for c in self.checks if c.status == Status.PASS]
        if passed:
            lines.append(f"({len(passed)} check(s) passed: {', '.join(c.name for c in passed)})")
        if self.diagnostics:
            lines.append("target diagnostics:")
            lines.extend("    " + line for line in self.diagnostics.splitlines())
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = str(self.status)
        data["overall"] = str(self.overall) if self.overall else None
        data["by_behaviour"] = {
            bid: {"status": str(s), "reason": self.behaviour_reason(bid)}
            for bid, s in self.by_behaviour.items()
        }
        for check in data["checks"]:
            check["status"] = str(check["status"])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        checks = [
            CheckResult(**{**c, "status": Status(c["status"])}) for c in data.get("checks", [])
        ]
        overall = data.get("overall")
        return cls(
            scenario=data["scenario"],
            behaviours=list(data["behaviours"]),
            reason=data.get("reason", ""),
            source=data.get("source", ""),
            title=data.get("title", ""),
            checks=checks,
            overall=Status(overall) if overall else None,
            diagnostics=data.get("diagnostics", ""),
            workloads=list(data.get("workloads", [])),
            caveats=list(data.get("caveats", [])),
            retried=data.get("retried", ""),
            named_evidence=bool(data.get("named_evidence", False)),
        )
