"""pytest-shadowcheck: conformance harness for shadow redundancy and Safety Net.

The public API for target authors (docs/targets.md), importable from here and loaded
only when first used, so that ``import pytest_shadowcheck`` costs nothing::

    from pytest_shadowcheck import ClusterPlan, NodeHandle, Target, TargetError, hookimpl

Everything else is internal; its place in the package follows the data flow
scenario -> engine -> history -> checks -> verdicts -> report (docs/contracts.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.version import __version__

if TYPE_CHECKING:
    from pytest_shadowcheck.errors import TargetError
    from pytest_shadowcheck.targets.base import ClusterPlan, NodeHandle, Target
    from pytest_shadowcheck.targets.hookspecs import hookimpl

__all__ = ["ClusterPlan", "NodeHandle", "Target", "TargetError", "__version__", "hookimpl"]

#: public name -> the module that defines it
_PUBLIC = {
    "ClusterPlan": "pytest_shadowcheck.targets.base",
    "NodeHandle": "pytest_shadowcheck.targets.base",
    "Target": "pytest_shadowcheck.targets.base",
    "TargetError": "pytest_shadowcheck.errors",
    "hookimpl": "pytest_shadowcheck.targets.hookspecs",
}


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'pytest_shadowcheck' has no attribute {name!r}")
