"""Target plugin ``broken:VARIANT``: the reference target running a broken variant.

Registered with ``--shadowcheck-target-plugin broken_target`` (this directory
on PYTHONPATH); every node runs ``broken_mta.py VARIANT node ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mta_variants import by_name

from pytest_shadowcheck.targets.base import Target, TargetError
from pytest_shadowcheck.targets.hookspecs import hookimpl
from pytest_shadowcheck.targets.reference import ReferenceTarget

LAUNCHER = Path(__file__).with_name("broken_mta.py")


@hookimpl
def shadowcheck_describe_targets() -> list[tuple[str, str]]:
    return [("broken", "a deliberately broken reference MTA (tests/conformance)")]


@hookimpl
def shadowcheck_make_target(
    name: str, argument: str | None, options: dict[str, Any]
) -> Target | None:
    if name != "broken":
        return None
    if not argument:
        raise TargetError("say which variant: broken:NAME")
    try:
        variant = by_name(argument)
    except KeyError as exc:
        raise TargetError(str(exc.args[0])) from None
    target = ReferenceTarget(launcher=[str(LAUNCHER), argument])
    target.name = f"broken:{argument}"
    target.timers = dict(variant.timers)
    return target
