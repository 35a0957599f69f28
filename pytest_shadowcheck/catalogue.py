"""Old command (until 0.1): ``python -m pytest_shadowcheck.catalogue`` is now
``python -m pytest_shadowcheck catalogue``. A thin shim for one release, because the docs
promised this command; removed in 0.2."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from pytest_shadowcheck.report.catalogue import main

    print(
        "note: python -m pytest_shadowcheck.catalogue is now "
        "python -m pytest_shadowcheck catalogue",
        file=sys.stderr,
    )
    sys.exit(main())
