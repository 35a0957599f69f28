"""Deliberately broken variants of the reference MTA.

Each :class:`Variant` breaks one behaviour by monkeypatching ``reference_impl``
inside the node process before it starts (see ``broken_mta.py``), and names
the scenarios of the conformance suite that must FAIL against it. Together
they prove every scenario can fail: ``test_broken_variants.py`` checks that
each variant fails its scenarios, that the unbroken reference passes them
all, and that no scenario is left without a variant able to fail it.

Variants live in one module per behaviour family; add yours to the family's
``VARIANTS`` list.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Variant", "all_variants", "by_name", "force_settings"]


@dataclass(frozen=True)
class Variant:
    #: short kebab-case name, used as ``--shadowcheck-target broken:NAME``
    name: str
    #: the defect, in one sentence ("acknowledges before the shadow copy is made")
    breaks: str
    #: scenario names (as in scenarios/*.yaml) that must fail against this variant;
    #: empty for a correct but unusual MTA (it has a test of its own)
    fails: tuple[str, ...]
    #: patches reference_impl in the node process; called before the node starts
    apply: Callable[[], None]
    #: timers compiled into the variant, as a docker description's ``timers`` declares
    #: them (setting -> (shortest, longest) seconds): the target reports them
    timers: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)


#: the families, one module each, in the order their variants are listed
FAMILIES = (
    "creation",
    "discard",
    "durability",
    "identity",
    "liveness",
    "needle",
    "promotion",
    "protocol_points",
    "refusals",
    "safetynet",
    "security",
    "timeouts",
    "tarpit",
    "traffic",
    "unusual",
)


def all_variants() -> list[Variant]:
    found: list[Variant] = []
    for family in FAMILIES:
        found.extend(importlib.import_module(f"{__name__}.{family}").VARIANTS)
    return found


def by_name(name: str) -> Variant:
    for variant in all_variants():
        if variant.name == name:
            return variant
    known = ", ".join(v.name for v in all_variants())
    raise KeyError(f"no broken variant {name!r}; known: {known}")


def force_settings(**values: Any) -> None:
    """Make the node ignore the configured value of these settings (a broken variant's patch)."""
    from reference_impl.settings import Settings

    original = Settings.from_mapping.__func__  # type: ignore[attr-defined]

    def from_mapping(
        cls: type[Settings], given: dict[str, Any] | None, base: Settings | None = None
    ) -> Settings:
        return dataclasses.replace(original(cls, given, base), **values)

    Settings.from_mapping = classmethod(from_mapping)  # type: ignore[method-assign,assignment]
