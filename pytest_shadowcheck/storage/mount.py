"""A lazy filesystem mounted for a node: start it, cut its power, fill its disk, stop it.

The filesystem runs in a process of its own (:mod:`.lazyfs`); this is its controller,
used by the targets. Events come back with ``time.monotonic()`` stamps, the clock the
run's history counts from.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_shadowcheck.errors import TargetError

__all__ = [
    "FSNAME",
    "LazyMount",
    "fuse_unavailable",
    "is_lazy",
    "lazy_mounts",
    "mount_table",
    "mounted_at",
    "sweep_stale_controls",
    "unmount",
]

START_TIMEOUT = 15.0
#: the prefix of a controller's socket directory (in the system's temporary directory)
CONTROL_PREFIX = "shadowcheck-lazyfs-"
#: a socket directory this old whose socket nobody answers is a dead run's: removed
STALE_AFTER = 600.0
#: the source column of every lazy filesystem in the mount table
FSNAME = "shadowcheck-lazyfs"
MOUNTINFO = Path("/proc/self/mountinfo")


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


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash come as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mount_table(mountinfo: Path = MOUNTINFO) -> list[tuple[Path, str, str]]:
    """(mount point, type, source) of every mount this process sees."""
    try:
        return mount_table(mountinfo.read_text())
    except OSError:
        return []


def mount_table(text: str) -> list[tuple[Path, str, str]]:
    """(mount point, type, source) of each line of a ``/proc/PID/mountinfo``."""
    table = []
    for line in text.splitlines():
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) >= 5 and len(rest) >= 2:
            table.append((Path(_unescape(fields[4])), rest[0], _unescape(rest[1])))
    return table


def mounted_at(path: Path) -> tuple[str, str] | None:
    """(type, source) of the topmost mount at ``path``, or None. Unlike
    ``os.path.ismount`` this sees a FUSE mount whose process is gone ("Transport
    endpoint is not connected"), which a crashed run leaves behind."""
    where = Path(os.path.abspath(path))
    found = [(kind, source) for point, kind, source in _mount_table() if point == where]
    return found[-1] if found else None


def lazy_mounts() -> list[Path]:
    """Mount points of every lazy filesystem this process sees, live or dead."""
    return [point for point, kind, source in _mount_table() if is_lazy(kind, source)]


def is_lazy(kind: str, source: str) -> bool:
    """Whether a mount of this type and source is a lazy filesystem."""
    return kind.split(".")[0] in ("fuse", "fuseblk") and source == FSNAME


def unmount(path: Path) -> bool:
    """Detach the lazy filesystem at ``path`` at once (``fusermount3 -u -z``: also when
    its process is gone or a file on it is still open); its process, if alive, then
    exits. False when ``fusermount3`` refused."""
    result = subprocess.run(
        ["fusermount3", "-u", "-z", str(path)], capture_output=True, check=False
    )
    return result.returncode == 0


def sweep_stale_controls(root: Path, older_than: float = STALE_AFTER) -> list[Path]:
    """Remove the socket directories that runs killed before they could stop their
    filesystem left in ``root`` (about one a day of the project's tests): older than
    ``older_than`` seconds, with a socket no process answers. A live filesystem answers;
    one that is starting is younger. Returns what was removed."""
    removed = []
    now = time.time()
    for entry in root.glob(f"{CONTROL_PREFIX}*"):
        with contextlib.suppress(OSError):
            if not entry.is_dir() or now - entry.stat().st_mtime < older_than:
                continue
            if not _answered(entry / "control.sock"):
                shutil.rmtree(entry)
                removed.append(entry)
    return removed


def _answered(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return False
        except OSError:
            return True  # e.g. a backlog full or a timeout: someone is there
    return True


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
        #: the controller's socket, made by start() in a short directory of its own: a Unix
        #: socket's path takes 107 bytes at most, and pytest's basetemp runs deeper
        self._control_dir: Path | None = None
        self.control = Path("/nonexistent")
        self.process: subprocess.Popen[bytes] | None = None
        self.log = mountpoint.parent / f".{mountpoint.name}.lazyfs.log"

    def start(self) -> None:
        why = fuse_unavailable()
        if why:
            raise TargetError(f"no lazy filesystem: {why}")
        self._clear_leftover()
        sweep_stale_controls(Path(tempfile.gettempdir()))
        self._control_dir = Path(tempfile.mkdtemp(prefix=CONTROL_PREFIX))
        self.control = self._control_dir / "control.sock"
        try:
            self._launch()
        except BaseException:
            self.stop()  # the control directory too: nothing of a failed start stays
            raise

    def _launch(self) -> None:
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
        raise TargetError(f"the lazy filesystem did not mount within {START_TIMEOUT:g}s")

    def _clear_leftover(self) -> None:
        """A lazy filesystem still mounted here (a run that crashed or was killed before
        it unmounted, its process perhaps gone) is detached first; anything else mounted
        here is not ours to remove."""
        found = mounted_at(self.mountpoint)
        if found is None:
            return
        if not is_lazy(*found) or not unmount(self.mountpoint):
            raise TargetError(
                f"{self.mountpoint} is already a mount point ({found[0]} {found[1]}): "
                "cannot mount a lazy filesystem there"
            )

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
        """Unmount (also when the filesystem's process died) and end the process."""
        if mounted_at(self.mountpoint) is not None:
            unmount(self.mountpoint)
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self._control_dir is not None:
            shutil.rmtree(self._control_dir, ignore_errors=True)
            self._control_dir = None
