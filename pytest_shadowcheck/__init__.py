"""pytest-shadowcheck: conformance harness for shadow redundancy and Safety Net."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
