"""The harness's version, a leaf every layer may read (JUnit properties, reports)."""

from __future__ import annotations

__version__ = "0.1.0"
