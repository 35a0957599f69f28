"""Which part of a workload's plan to play: ``--shadowcheck-replay``.

A workload step plans its messages and its nemesis's faults from its seed, each numbered
from 0 in the plan. A *selection* keeps some of them - what a shrunk reproduction of a
failing workload is (``--shadowcheck-shrink``) - and is written
``WORKLOAD:messages=3,17,40-42;faults=1``: the workload step's ``name``, then the message
numbers and the fault numbers to keep (a list of numbers and ranges, or ``none``). A part
left out keeps the whole plan. The engine sends only the kept messages, each at its
planned moment, and plays only the kept faults, each at its planned moment (a dropped
fault's quiet time and length are waited out as if it had happened, so the kept ones
land where they did), and with a selection every kept fault plays, even after the last
message was sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ReplayError",
    "Selection",
    "format_indices",
    "parse_indices",
    "parse_selection",
    "parse_selections",
]

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_PARTS = ("messages", "faults")
EXAMPLE = "WORKLOAD:messages=3,17,40-42;faults=1"


class ReplayError(ValueError):
    """A selection that cannot be read, in words for the command line."""


@dataclass(frozen=True)
class Selection:
    """The messages and faults of one workload to play (None: the whole plan)."""

    workload: str
    messages: frozenset[int] | None = None
    faults: frozenset[int] | None = None

    def keeps_message(self, index: int) -> bool:
        return self.messages is None or index in self.messages

    def keeps_fault(self, index: int) -> bool:
        return self.faults is None or index in self.faults

    def text(self) -> str:
        """The selection as ``--shadowcheck-replay`` takes it."""
        parts = [
            f"{name}={format_indices(kept)}"
            for name, kept in (("messages", self.messages), ("faults", self.faults))
            if kept is not None
        ]
        return f"{self.workload}:{';'.join(parts)}" if parts else self.workload

    def describe(self) -> str:
        """In words: "messages 3, 17; faults none"."""
        words = []
        for name, kept in (("messages", self.messages), ("faults", self.faults)):
            shown = "all planned" if kept is None else format_indices(kept).replace(",", ", ")
            words.append(f"{name} {shown}")
        return "; ".join(words)


def format_indices(indices: frozenset[int] | set[int]) -> str:
    """``{1, 2, 3, 7}`` as ``1-3,7``; the empty set as ``none``."""
    if not indices:
        return "none"
    ordered = sorted(indices)
    runs: list[tuple[int, int]] = []
    for i in ordered:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return ",".join(str(a) if a == b else f"{a}-{b}" if b > a + 1 else f"{a},{b}" for a, b in runs)


def parse_indices(text: str) -> frozenset[int]:
    """``1-3,7`` (what :func:`format_indices` writes) as ``{1, 2, 3, 7}``."""
    return _indices("indices", text, text)


def _indices(part: str, text: str, whole: str) -> frozenset[int]:
    text = text.strip()
    if text == "none":
        return frozenset()
    out: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        low, dash, high = item.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ReplayError(
                f"--shadowcheck-replay {whole!r}: {part}= takes numbers and ranges from the "
                f"plan (counted from 0) such as 3,17,40-42, or none; {item or 'nothing'!r} is "
                "neither"
            )
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ReplayError(
                f"--shadowcheck-replay {whole!r}: the range {item} in {part}= runs backwards"
            )
        out.update(range(first, last + 1))
    return frozenset(out)


def parse_selection(text: str) -> Selection:
    """``WORKLOAD:messages=...;faults=...`` as a :class:`Selection`."""
    name, colon, rest = text.strip().partition(":")
    if not colon or not _NAME.fullmatch(name):
        raise ReplayError(
            f"--shadowcheck-replay {text!r}: expected the workload step's name, a colon and "
            f"what to keep, as in {EXAMPLE}"
        )
    given: dict[str, frozenset[int]] = {}
    for raw in filter(None, (p.strip() for p in rest.split(";"))):
        key, eq, value = raw.partition("=")
        key = key.strip()
        if not eq or key not in _PARTS:
            raise ReplayError(
                f"--shadowcheck-replay {text!r}: {raw!r} is not messages=... or faults=... "
                f"(as in {EXAMPLE})"
            )
        if key in given:
            raise ReplayError(f"--shadowcheck-replay {text!r}: {key}= is given twice")
        given[key] = _indices(key, value, text)
    if not given:
        raise ReplayError(
            f"--shadowcheck-replay {text!r}: keeps the whole plan; name messages=... or "
            f"faults=... after the colon (as in {EXAMPLE}), or leave the option out"
        )
    return Selection(name, given.get("messages"), given.get("faults"))


def parse_selections(texts: list[str]) -> dict[str, Selection]:
    """Every ``--shadowcheck-replay`` given, by workload name (one each)."""
    out: dict[str, Selection] = {}
    for text in texts:
        selection = parse_selection(text)
        if selection.workload in out:
            raise ReplayError(
                f"--shadowcheck-replay names workload {selection.workload!r} twice; give one "
                "selection per workload"
            )
        out[selection.workload] = selection
    return out
