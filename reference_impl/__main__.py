"""``python -m reference_impl``: see :mod:`reference_impl.cli`."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
