"""A lazy filesystem (after Jepsen's LazyFS): a FUSE passthrough to a real directory that
holds back every file's data until the program fsyncs it, so that a power cut can lose
exactly what a real disk would.

Semantics (docs/targets.md, "Power cut and disk full"):

* **File data** written since the file's last ``fsync``/``fdatasync`` is held in this
  process (:mod:`.held`); reads see it; ``fsync`` makes it durable (writes it to the
  backing directory); a power cut drops it. ``O_SYNC``/``O_DSYNC`` writes are durable
  when the write returns. Like the Linux page cache, held data older than
  ``--writeback`` seconds (30 by default, 0: never) is written back anyway: never
  stricter than a real filesystem by default.
* **Names** (create, rename, unlink, link, mkdir) reach the backing directory at once,
  as in LazyFS. With ``--hold-names`` they are journalled per directory instead and
  undone at a power cut unless the directory was fsynced since (what POSIX promises,
  and what ext4 may do with a rename that no directory fsync followed).
* **Owners, times and inode numbers** are the backing directory's: an entry a process creates is
  that process's (uid, gid; a set-group-ID directory's group), as on a disk, though the
  filesystem runs as root; programs that check their spool's owners (Postfix) or
  schedule by mtime (Postfix's deferred queue) see what they would on a disk.
* **Disk full and a failing disk**: on command, writes fail with ``ENOSPC`` (at once,
  or once a byte budget is used up) or ``EIO`` (writes and fsyncs), until lifted.

A controller speaks JSON lines over a Unix socket (:mod:`.mount` is its client):
``events`` (syncs since the last call), ``power_cut``, ``disk`` and ``ping``.

    python -m pytest_shadowcheck.storage.lazyfs BACKING MOUNTPOINT --control SOCKET
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import socket
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mfusepy

from pytest_shadowcheck.storage.held import HeldWrites, apply
from pytest_shadowcheck.storage.mount import FSNAME
from pytest_shadowcheck.storage.names import NameJournal

__all__ = ["LazyFS", "main"]

_SYNC_FLAGS = os.O_SYNC | os.O_DSYNC
_STAT_KEYS = (
    "st_gid", "st_mode", "st_nlink", "st_size", "st_uid", "st_ino", "st_blocks", "st_rdev",
)  # fmt: skip
#: with ``use_ns`` mfusepy reads the times as nanoseconds under their plain names
_TIME_KEYS = {"st_atime": "st_atime_ns", "st_mtime": "st_mtime_ns", "st_ctime": "st_ctime_ns"}
#: utimensat's "now" and "leave it", as libfuse passes them (tv_sec 0, tv_nsec the flag)
_UTIME_NOW = (1 << 30) - 1
_UTIME_OMIT = (1 << 30) - 2


@dataclass
class Handle:
    fd: int
    key: int
    sync: bool
    append: bool
    #: opened for writing: its backing descriptor can take the held writes at a sync
    writable: bool = True


class LazyFS(mfusepy.Operations):
    use_ns = True

    def __init__(self, root: Path, writeback: float = 30.0, hold_names: bool = False) -> None:
        self.root = root
        self.writeback = writeback
        self.held = HeldWrites()
        self.names = NameJournal(root) if hold_names else None
        self.mutex = threading.RLock()
        self.handles: dict[int, Handle] = {}
        self.next_fh = 1
        #: the last backing path of every file with held data (for write-back)
        self.paths: dict[int, str] = {}
        self.events: list[dict[str, Any]] = []
        #: None: writes succeed; "full": ENOSPC once ``budget`` bytes are used; "error": EIO
        self.disk: str | None = None
        self.budget = 0

    # -- helpers -----------------------------------------------------------------

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _relative(self, full: str) -> str:
        return os.path.relpath(full, self.root)

    def _name_of(self, key: int) -> str:
        return self._relative(self.paths[key]) if key in self.paths else f"inode {key}"

    def _event(self, kind: str, **data: Any) -> None:
        self.events.append({"kind": kind, "t": time.monotonic(), **data})

    def _own(self, full: str) -> None:
        """Give a new entry to the process that made it, as a disk would: this process
        (root) created it in the backing directory. A set-group-ID directory's group
        stays, as the kernel gave it."""
        if os.geteuid() != 0:
            return  # a user's mount: everything is the user's anyway
        uid, gid, _ = mfusepy.fuse_get_context()
        with contextlib.suppress(OSError):
            if os.stat(os.path.dirname(full)).st_mode & stat.S_ISGID:
                gid = -1
            os.lchown(full, uid, gid)

    def _check_disk(self, size: int) -> None:
        if self.disk == "error":
            raise mfusepy.FuseOSError(errno.EIO)
        if self.disk == "full":
            if size > self.budget:
                raise mfusepy.FuseOSError(errno.ENOSPC)
            self.budget -= size

    def _sync(self, key: int, fd: int | None, why: str) -> None:
        """Make ``key``'s held data durable (apply it to the backing file)."""
        entry = self.held.take(key)
        if entry is None:
            return
        path = self.paths.get(key, "")
        own = fd is None
        if own:
            try:
                fd = os.open(path, os.O_WRONLY)
            except OSError:
                return  # the file is gone: nothing to make durable
        assert fd is not None
        try:
            written = apply(fd, entry)
        finally:
            if own:
                os.close(fd)
        self._event("sync", file=self._relative(path), bytes=written, why=why)

    # -- files -------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        full = self._full(path)
        # The stat and the held data are read under one lock: a sync between them
        # would report the backing file's old, shorter size, and the kernel, trusting
        # it, would cut another process's reads short (SQLite: SQLITE_IOERR_SHORT_READ).
        with self.mutex:
            try:
                st = os.lstat(full)
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno) from None
            entry = self.held.held(st.st_ino)
            size = entry.size(st.st_size) if entry is not None else st.st_size
        attrs = {key: getattr(st, key) for key in _STAT_KEYS}
        attrs.update({key: getattr(st, ns) for key, ns in _TIME_KEYS.items()})
        attrs["st_size"] = size
        return attrs

    def open(self, path: str, flags: int) -> int:
        return self._open(path, flags, None)

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        return self._open(path, os.O_CREAT | int(flags), mode)

    def _open(self, path: str, flags: int, mode: int | None) -> int:
        full = self._full(path)
        writing = flags & (os.O_WRONLY | os.O_RDWR)
        base = os.O_RDWR if writing else os.O_RDONLY
        extra = flags & (os.O_CREAT | os.O_EXCL)
        with self.mutex:
            existed = os.path.lexists(full)
            try:
                fd = os.open(full, base | extra, mode if mode is not None else 0o644)
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno) from None
            key = os.fstat(fd).st_ino
            if not existed:
                self._own(full)
                if self.names is not None:
                    self.names.created(full)
            if flags & os.O_TRUNC and writing:
                self.held.truncate(key, 0, time.monotonic())
                self.paths[key] = full
            fh = self.next_fh
            self.next_fh += 1
            self.handles[fh] = Handle(
                fd, key, bool(flags & _SYNC_FLAGS), bool(flags & os.O_APPEND), bool(writing)
            )
            if self.held.held(key) is not None:
                self.paths[key] = full
            return fh

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self.mutex:
            handle = self.handles[fh]
            entry = self.held.held(handle.key)
            if entry is None:
                return os.pread(handle.fd, size, offset)
            synced = os.fstat(handle.fd).st_size
            return entry.read(offset, size, synced, lambda o, n: os.pread(handle.fd, n, o))

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self.mutex:
            handle = self.handles[fh]
            self._check_disk(len(data))
            if handle.append:
                entry = self.held.held(handle.key)
                synced = os.fstat(handle.fd).st_size
                offset = entry.size(synced) if entry else synced
            self.paths[handle.key] = self._full(path)
            self.held.write(handle.key, offset, data, time.monotonic())
            if handle.sync:
                self._sync(handle.key, handle.fd, "O_SYNC write")
            return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self.mutex:
            if fh is not None and fh in self.handles:
                key = self.handles[fh].key
            else:
                try:
                    key = os.lstat(self._full(path)).st_ino
                except OSError as exc:
                    raise mfusepy.FuseOSError(exc.errno) from None
            self.paths[key] = self._full(path)
            self.held.truncate(key, length, time.monotonic())
            return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            if self.disk == "error":
                raise mfusepy.FuseOSError(errno.EIO)
            handle = self.handles.get(fh)
            if handle is not None:
                # a read-only descriptor may fsync the file too (SQLite's WAL syncer does)
                fd = handle.fd if handle.writable else None
                self._sync(handle.key, fd, "fdatasync" if datasync else "fsync")
            return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # closing a file makes nothing durable

    def release(self, path: str, fh: int) -> int:
        with self.mutex:
            handle = self.handles.pop(fh, None)
            if handle is not None:
                os.close(handle.fd)
            return 0

    # -- names ---------------------------------------------------------------------

    def unlink(self, path: str) -> int:
        full = self._full(path)
        with self.mutex:
            try:
                st = os.lstat(full)
                if self.names is not None:
                    self.names.unlinked(full)
                else:
                    os.unlink(full)
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno) from None
            if st.st_nlink <= 1 and self.names is None:
                self.held.forget(st.st_ino)
            return 0

    def rename(self, old: str, new: str) -> int:
        src, dst = self._full(old), self._full(new)
        with self.mutex:
            try:
                replaced = os.lstat(dst) if os.path.lexists(dst) else None
                if self.names is not None:
                    self.names.renamed(src, dst)
                else:
                    os.rename(src, dst)
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno) from None
            if replaced is not None and replaced.st_nlink <= 1 and self.names is None:
                self.held.forget(replaced.st_ino)
            key = os.lstat(dst).st_ino
            if key in self.paths:
                self.paths[key] = dst
            # a directory moved its files with it (OpenSMTPD commits a message by moving
            # its incoming directory into the queue): their held data keeps their names
            below = src.rstrip("/") + "/"
            for held, path in list(self.paths.items()):
                if path.startswith(below):
                    self.paths[held] = dst.rstrip("/") + "/" + path[len(below) :]
            return 0

    def link(self, target: str, source: str) -> int:
        with self.mutex:
            try:
                os.link(self._full(source), self._full(target))
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno) from None
            if self.names is not None:
                self.names.created(self._full(target))
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self.mutex:
            try:
                os.mkdir(self._full(path), mode)
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno) from None
            self._own(self._full(path))
            if self.names is not None:
                self.names.created(self._full(path))
            return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            if self.names is not None:
                committed = self.names.commit(self._full(path))
                if committed:
                    self._event("syncdir", file=self._relative(self._full(path)), names=committed)
            return 0

    # -- passthrough ------------------------------------------------------------------

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno) from None

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._full(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._call(os.chmod, self._full(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._call(os.lchown, self._full(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        full = self._full(path)
        if times is None:
            self._call(lambda: os.utime(full, follow_symlinks=False))
            return 0
        st = self._call(os.lstat, full)
        now = time.time_ns()
        atime, mtime = (
            now if t == _UTIME_NOW else old if t == _UTIME_OMIT else t
            for t, old in zip(times, (st.st_atime_ns, st.st_mtime_ns), strict=True)
        )
        self._call(lambda: os.utime(full, ns=(atime, mtime), follow_symlinks=False))
        return 0

    def readlink(self, path: str) -> str:
        return str(self._call(os.readlink, self._full(path)))

    def symlink(self, target: str, source: str) -> int:
        self._call(os.symlink, source, self._full(target))
        self._own(self._full(target))
        return 0

    def mknod(self, path: str, mode: int, dev: int) -> int:
        self._call(os.mknod, self._full(path), mode, dev)
        self._own(self._full(path))
        return 0

    def rmdir(self, path: str) -> int:
        self._call(os.rmdir, self._full(path))
        return 0

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        """Each entry with its inode number (with ``use_ino`` an entry without one reads as
        inode 0, which readdir(3) skips) and its type."""
        hidden = self.names.hidden() if self.names is not None else set()
        full = self._full(path).rstrip("/") or "/"
        entries = []
        for name, where in ((".", full), ("..", os.path.dirname(full))):
            st = self._call(os.lstat, where)
            entries.append((name, {"st_ino": st.st_ino, "st_mode": st.st_mode}, 0))
        with self._call(os.scandir, full) as found:
            for entry in found:
                if entry.path in hidden:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone since the listing
                entries.append((entry.name, {"st_ino": st.st_ino, "st_mode": st.st_mode}, 0))
        return entries

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._full(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
        out = {key: getattr(st, key) for key in keys}
        out.update(f_flag=st.f_flag, f_frsize=st.f_frsize, f_namemax=st.f_namemax)
        if self.disk == "full":
            out.update(f_bavail=self.budget // max(1, st.f_bsize), f_bfree=0)
        return out

    # -- the controller's commands -------------------------------------------------

    def power_cut(self) -> dict[str, Any]:
        """Every held change is lost; names not made durable are undone."""
        with self.mutex:
            lost = self.held.drop_all()
            files = [
                {"file": self._name_of(key), "bytes": entry.held_bytes}
                for key, entry in lost.items()
            ]
            undone = self.names.undo() if self.names is not None else []
            self.paths = {k: v for k, v in self.paths.items() if k not in lost}
            self._event("power_cut", lost=files, undone=undone)
            return {"lost": files, "undone": undone}

    def write_back(self) -> None:
        """The kernel's write-back: held data older than ``writeback`` becomes durable."""
        if self.writeback <= 0:
            return
        with self.mutex:
            for key in self.held.older_than(time.monotonic() - self.writeback):
                self._sync(key, None, f"write-back after {self.writeback:g}s")

    def command(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request.get("cmd")
        if cmd == "ping":
            return {"ok": True}
        if cmd == "events":
            with self.mutex:
                events, self.events = self.events, []
            return {"events": events}
        if cmd == "power_cut":
            return self.power_cut()
        if cmd == "disk":
            with self.mutex:
                mode = request.get("mode")
                self.disk = mode if mode in ("full", "error") else None
                self.budget = int(request.get("budget") or 0)
                self._event("disk", mode=mode or "ok", budget=self.budget)
            return {"ok": True}
        return {"error": f"unknown command {cmd!r}"}


def _listen(control: Path) -> socket.socket:
    """The controller's socket, bound before the mount so that a failure (a path longer
    than a Unix socket takes) ends the process with the reason instead of a silent mount."""
    with contextlib.suppress(FileNotFoundError):
        control.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(control))
    server.listen(8)
    return server


def _serve(fs: LazyFS, server: socket.socket) -> None:
    def one(conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                answer = fs.command(json.loads(line))
                stream.write(json.dumps(answer).encode() + b"\n")
                stream.flush()

    while True:
        conn, _ = server.accept()
        threading.Thread(target=one, args=(conn,), daemon=True).start()


def _write_back_loop(fs: LazyFS) -> None:
    while True:
        time.sleep(1.0)
        fs.write_back()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_shadowcheck.storage.lazyfs")
    parser.add_argument("backing", type=Path, help="the real directory (the disk)")
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--control", type=Path, required=True, help="Unix socket for commands")
    parser.add_argument("--writeback", type=float, default=30.0, help="seconds (0: never)")
    parser.add_argument("--hold-names", action="store_true", help="names wait for fsyncdir")
    args = parser.parse_args(argv)
    # modes arrive with the caller's umask applied: ours must not take more away
    os.umask(0)
    fs = LazyFS(args.backing.resolve(), args.writeback, args.hold_names)
    try:
        server = _listen(args.control)
    except OSError as exc:
        print(f"lazyfs: cannot listen on {args.control}: {exc}", file=sys.stderr)
        return 2
    threading.Thread(target=_serve, args=(fs, server), daemon=True).start()
    threading.Thread(target=_write_back_loop, args=(fs,), daemon=True).start()
    mfusepy.FUSE(
        fs,
        str(args.mountpoint),
        foreground=True,
        allow_other=True,
        # every stat and lookup asks us: a power cut changes sizes and names under the kernel
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
        # the disk's inode numbers, not libfuse's node ids (new ones whenever the kernel
        # forgets an inode): Postfix names each queue file after its inode and renames
        # any whose number changed when it starts
        use_ino=True,
        fsname=FSNAME,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
