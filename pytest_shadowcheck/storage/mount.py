"""A lazy filesystem mounted for a node: start it, cut its power, fill its disk, stop it.

The filesystem runs in a process of its own (:mod:`.lazyfs`); this is its controller,
used by the targets. Events come back with ``time.monotonic()`` stamps, the clock the
run's history counts from.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pytest_shadowcheck.errors import TargetError

__all__ = ["LazyMount", "fuse_unavailable"]

START_TIMEOUT = 15.0


def fuse_unavailable() -> str | None:
    """Why no lazy filesystem can be mounted here, or None when one can."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (a container without --device /dev/fuse?)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian: apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"the FUSE binding does not load (pip install mfusepy; libfuse3): {exc}"
    return None


class LazyMount:
    """``mountpoint`` shows ``backing`` through a lazy filesystem."""

    def __init__(
        self,
        backing: Path,
        mountpoint: Path,
        *,
        writeback: float = 30.0,
        hold_names: bool = False,
    ) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.writeback = writeback
        self.hold_names = hold_names
        self.control = mountpoint.parent / f".{mountpoint.name}.lazyfs.sock"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = mountpoint.parent / f".{mountpoint.name}.lazyfs.log"

    def start(self) -> None:
        why = fuse_unavailable()
        if why:
            raise TargetError(f"no lazy filesystem: {why}")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-m", "pytest_shadowcheck.storage.lazyfs",
            str(self.backing), str(self.mountpoint), "--control", str(self.control),
            "--writeback", str(self.writeback),
            *(["--hold-names"] if self.hold_names else []),
        ]  # fmt: skip
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TargetError(f"the lazy filesystem exited at start: {self._log_tail()}")
            if os.path.ismount(self.mountpoint) and self._answers():
                return
            time.sleep(0.05)
        self.stop()
        raise TargetError(f"the lazy filesystem did not mount within {START_TIMEOUT:g}s")

    def _answers(self) -> bool:
        try:
            return bool(self.call({"cmd": "ping"}).get("ok"))
        except OSError:
            return False

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-2000:].strip()
        return ""

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(self.control))
            with sock.makefile("rwb") as stream:
                stream.write(json.dumps(request).encode() + b"\n")
                stream.flush()
                answer: dict[str, Any] = json.loads(stream.readline())
        if "error" in answer:
            raise TargetError(f"lazy filesystem: {answer['error']}")
        return answer

    def power_cut(self) -> dict[str, Any]:
        """Drop what was not made durable; the files the node left are as a reboot finds
        them. The node's processes must be dead first (the caller kills them)."""
        return self.call({"cmd": "power_cut"})

    def events(self) -> list[dict[str, Any]]:
        """Syncs, power cuts and disk changes since the last call."""
        return list(self.call({"cmd": "events"})["events"])

    def disk(self, mode: str | None, budget: int = 0) -> None:
        """``full`` (ENOSPC once ``budget`` more bytes are written), ``error`` (EIO), or
        None: the disk works again."""
        self.call({"cmd": "disk", "mode": mode, "budget": budget})

    def stop(self) -> None:
        if os.path.ismount(self.mountpoint):
            subprocess.run(
                ["fusermount3", "-u", "-z", str(self.mountpoint)],
                capture_output=True,
                check=False,
            )
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        with contextlib.suppress(OSError):
            self.control.unlink()
