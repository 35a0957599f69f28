"""Broken variants for the discard scenarios (see the package docstring)."""

from __future__ import annotations

from . import Variant

VARIANTS: list[Variant] = []
