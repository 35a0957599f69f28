"""``python node_guard.py FD ARGV...``: ``python ARGV...`` (a script, or ``-m MODULE``)
that dies with the harness that started it.

:class:`~pytest_shadowcheck.targets.node_process.ExecNode` runs this file by its path,
with whatever interpreter the target names, so it needs the standard library alone. FD
is the read end of a pipe whose write end only the harness holds, never writing to it:
the kernel closes it when the harness dies, whatever killed it, and the node's process
group (it leads one) is killed then - a node left running would go on delivering its
queue into ports a later run listens on. A forked node does the same
(``node_process._become``).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["die_with_owner", "run_as_main"]


def die_with_owner(until_closed: Callable[[], object]) -> None:
    """Kill this process's group once ``until_closed`` returns (or fails): it reads what
    only the harness holds open."""

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            until_closed()
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-owner", daemon=True).start()


def run_as_main(argv: list[str]) -> None:
    """Run ``ARGV`` (``SCRIPT ...`` or ``-m MODULE ...``) here as ``python ARGV`` would."""
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(argv[0])
        sys.argv = [script, *argv[1:]]
        sys.path.insert(0, os.path.dirname(script))
        runpy.run_path(script, run_name="__main__")


def _read_to_end(fd: int) -> None:
    while os.read(fd, 1):
        pass


def main() -> None:
    fd, argv = int(sys.argv[1]), sys.argv[2:]
    del sys.path[0]  # this file's directory, which is not the node's
    if argv[0] == "-m":
        sys.path.insert(0, os.getcwd())  # where ``python -m`` looks first
    die_with_owner(lambda: _read_to_end(fd))
    run_as_main(argv)


if __name__ == "__main__":
    main()
