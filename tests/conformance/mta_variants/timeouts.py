"""Broken variants for the timeouts scenarios (see the package docstring)."""

from __future__ import annotations

from . import Variant

VARIANTS: list[Variant] = []
