"""Old place of the target hooks (until 0.1): use ``from pytest_shadowcheck import hookimpl``.

A thin shim for one release, because docs/targets.md told plugin authors to import from
here; removed in 0.2.
"""

from __future__ import annotations

import warnings

from pytest_shadowcheck.targets.hookspecs import PROJECT, hookimpl, hookspec

__all__ = ["PROJECT", "hookimpl", "hookspec"]

warnings.warn(
    "pytest_shadowcheck.hookspecs moved: import hookimpl from pytest_shadowcheck",
    DeprecationWarning,
    stacklevel=2,
)
