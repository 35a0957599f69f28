"""The target registry: built-in targets, entry points and named modules, as pluggy plugins.

Errors are :class:`~pytest_shadowcheck.errors.TargetError` with the text a user needs;
the pytest plugin turns them into usage errors.
"""

from __future__ import annotations

import importlib

import pluggy

from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.targets import hookspecs
from pytest_shadowcheck.targets.base import Target

__all__ = ["TARGET_ENTRY_POINT_GROUP", "known_targets", "make_target", "target_manager"]

TARGET_ENTRY_POINT_GROUP = "shadowcheck.targets"


def target_manager(modules: list[str]) -> pluggy.PluginManager:
    """The ``shadowcheck`` plugin manager: built-in targets, entry points, and ``modules``
    (``--shadowcheck-target-plugin``, ``shadowcheck_target_plugins``)."""
    from pytest_shadowcheck.targets import external, reference
    from pytest_shadowcheck.targets.docker import target as docker

    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(reference, "shadowcheck-reference")
    manager.register(external, "shadowcheck-external")
    manager.register(docker, "shadowcheck-docker")
    manager.load_setuptools_entrypoints(TARGET_ENTRY_POINT_GROUP)
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise TargetError(f"--shadowcheck-target-plugin {name}: {exc}") from None
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
        raise TargetError(f"--shadowcheck-target {spec}: {exc}") from None
    if target is None:
        listing = "\n".join(f"  {n:<10} {d}" for n, d in known_targets(manager))
        raise TargetError(f"unknown shadowcheck target {spec!r}; known targets:\n{listing}")
    assert isinstance(target, Target)
    return target
