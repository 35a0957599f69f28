"""The rule each behaviour states, in the catalogue's words: what a failure says first
(``Verdict.render(rules)``) and what the certification's opening sentences promise."""

from __future__ import annotations

from functools import cache
from typing import Any

from pytest_shadowcheck.scenario.loader import load_behaviours

__all__ = ["rule_sentence", "rule_sentences"]


def rule_sentence(entry: dict[str, Any]) -> str:
    """A catalogue entry's rule as one sentence: its full text (the one-line summary
    of some entries is cut, or states only the condition), without the Markdown
    emphasis; SMTP lines stay in backticks."""
    text = " ".join(str(entry.get("text") or entry.get("summary") or "").split())
    text = text.replace("*", "")
    return text if text.endswith((".", "!", "?")) else text + "."


@cache
def rule_sentences() -> dict[str, str]:
    """Behaviour ID -> its rule sentence, for the whole catalogue."""
    return {bid: rule_sentence(entry) for bid, entry in load_behaviours().items()}
