"""The target registry: built-in targets, entry points and named modules, as pluggy plugins."""

from __future__ import annotations

import importlib

import pluggy
import pytest

from .. import hookspecs
from .base import Target, TargetError

__all__ = ["TARGET_ENTRY_POINT_GROUP", "known_targets", "make_target", "target_manager"]

TARGET_ENTRY_POINT_GROUP = "shadowcheck.targets"


def target_manager(config: pytest.Config) -> pluggy.PluginManager:
    """The ``shadowcheck`` plugin manager: built-in targets, entry points, named modules."""
    from . import docker, external, reference

    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(reference, "shadowcheck-reference")
    manager.register(external, "shadowcheck-external")
    manager.register(docker, "shadowcheck-docker")
    manager.load_setuptools_entrypoints(TARGET_ENTRY_POINT_GROUP)
    modules = list(config.getini("shadowcheck_target_plugins"))
    modules += config.getoption("shadowcheck_target_plugin") or []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise pytest.UsageError(f"--shadowcheck-target-plugin {name}: {exc}") from None
        if manager.get_plugin(name) is None:
            manager.register(module, name)
    return manager


def known_targets(manager: pluggy.PluginManager) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for result in manager.hook.shadowcheck_describe_targets():
        out.extend(result or [])
    return sorted(out)


def make_target(manager: pluggy.PluginManager, spec: str, run_id: str) -> Target:
    name, _, argument = spec.partition(":")
    try:
        target = manager.hook.shadowcheck_make_target(
            name=name, argument=argument or None, options={"run_id": run_id}
        )
    except TargetError as exc:
        raise pytest.UsageError(f"--shadowcheck-target {spec}: {exc}") from None
    if target is None:
        listing = "\n".join(f"  {n:<10} {d}" for n, d in known_targets(manager))
        raise pytest.UsageError(f"unknown shadowcheck target {spec!r}; known targets:\n{listing}")
    assert isinstance(target, Target)
    return target
