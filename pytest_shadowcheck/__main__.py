"""``python -m pytest_shadowcheck COMMAND``: the harness's tools outside pytest.

    images     build the local images of the docker target (``images build [RECIPE]``)
    catalogue  the behaviour table in README.md, and the scenarios' coverage
    matrix     the certification matrix of several targets

Each command's ``--help`` says more; the modules behind them can also be run directly.
"""

from __future__ import annotations

import importlib
import sys

#: command -> the module whose main(argv) carries it out
COMMANDS = {
    "images": "pytest_shadowcheck.targets.docker.images.__main__",
    "catalogue": "pytest_shadowcheck.report.catalogue",
    "matrix": "pytest_shadowcheck.report.matrix",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[args[0]])
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
