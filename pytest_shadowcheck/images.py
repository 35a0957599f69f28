"""Old command (until 0.1): ``python -m pytest_shadowcheck.images`` is now
``python -m pytest_shadowcheck images``. A thin shim for one release, because the docs
promised this command; removed in 0.2."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from pytest_shadowcheck.targets.docker.images.__main__ import main

    print(
        "note: python -m pytest_shadowcheck.images is now "
        "python -m pytest_shadowcheck images",
        file=sys.stderr,
    )
    sys.exit(main())
