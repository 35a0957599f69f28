"""A docker node's queue directory on a lazy filesystem (capabilities power_cut and
disk_faults).

For a scenario that cuts power or fills a disk, the host mounts a lazy filesystem
(:mod:`pytest_shadowcheck.storage`) at ``WORKDIR/NODE-queue`` over ``WORKDIR/.disk/NODE``,
and every container the node has gets that mount as a bind mount at the description's
``queue_dir``, instead of a named volume. The disk starts with what the image has at
``queue_dir``, as a new named volume would (owners, modes, FIFOs: Postfix checks its
spool's owners and modes): copied out of a container that is created, never started.

A power cut is the container killed (SIGKILL; its other processes die with its init),
then the filesystem's power cut; a restart binds the same mount into a new container.
Each mount's owner (the ``owner_label`` of the process that mounted it) is written
beside it, so that the reaper can detach what a crashed run left mounted.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.storage.mount import is_lazy, lazy_mounts, mount_table, unmount

__all__ = [
    "image_directory",
    "owner_file",
    "queue_mount_problem",
    "reap_mounts",
    "unpack",
]


def image_directory(client: Any, image: str, path: str, labels: dict[str, str]) -> bytes:
    """The tar archive of ``path`` as ``image`` has it (docker's archive: one top entry,
    the directory itself); an empty archive when the image has no such directory (a
    new named volume would be empty too)."""
    from docker.errors import NotFound

    container = client.containers.create(image, ["true"], network_mode="none", labels=labels)
    try:
        stream, _ = container.get_archive(path)
        return b"".join(stream)
    except NotFound:
        return b""
    finally:
        container.remove(force=True)


def _inside(name: str) -> str:
    """``name`` below the archive's top entry ("" for the top entry itself)."""
    parts = PurePosixPath(name).parts
    if not parts or parts[0] in ("/", "..") or ".." in parts:
        raise TargetError(f"the image's queue directory holds an odd path: {name!r}")
    return str(PurePosixPath(*parts[1:])) if len(parts) > 1 else ""


def unpack(archive: bytes, into: Path, *, sync: bool = False) -> None:
    """Put the directory ``archive`` holds into ``into`` with its numeric owners, modes
    (set-group-ID directories too) and special files. ``sync``: fsync every file and
    directory afterwards, as an installer does (``into`` is a lazy filesystem, where
    unsynced data would vanish at the next power cut as no installed file does)."""
    into.mkdir(parents=True, exist_ok=True)
    if not archive:
        return
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        top: tarfile.TarInfo | None = None
        members = []
        for member in tar.getmembers():
            name = _inside(member.name)
            if not name:
                top = member
                continue
            member.name = name
            if member.islnk():
                member.linkname = _inside(member.linkname)
            members.append(member)
        # the image's own files: owners, modes and special files exactly as they are
        tar.extraction_filter = getattr(tarfile, "fully_trusted_filter", None)
        tar.extractall(into, members=members, numeric_owner=True)
    if top is not None:
        with contextlib.suppress(PermissionError):  # not root: the files stay ours
            os.chown(into, top.uid, top.gid)
        os.chmod(into, top.mode)
    if sync:
        _sync_tree(into)


def _sync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(directory, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                _fsync(path, os.O_RDWR)
        _fsync(directory, os.O_RDONLY | os.O_DIRECTORY)


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def queue_mount_problem(container: Any, queue_dir: str) -> str | None:
    """What ``queue_dir`` is inside the running container when it is not the lazy
    filesystem (the engine did not see the host's mount: rootless Docker, another mount
    namespace), else None. Also None when the container cannot show its mount table
    (no ``cat`` in the image): then nothing is known."""
    from docker.errors import APIError

    try:
        result = container.exec_run(["cat", "/proc/self/mountinfo"])
    except APIError:
        return None
    if result.exit_code != 0:
        return None
    table = mount_table(result.output.decode(errors="replace"))
    found = [(kind, source) for point, kind, source in table if str(point) == queue_dir]
    if found and is_lazy(*found[-1]):
        return None
    what = f"{found[-1][0]} {found[-1][1]}" if found else "no mount of its own"
    return (
        f"{queue_dir} in the container is {what}, not the lazy filesystem mounted on the "
        "host: the Docker engine does not see this process's mounts (rootless Docker, or "
        "another mount namespace), and a power cut would cut nothing"
    )


def owner_file(mountpoint: Path) -> Path:
    """Where the owner of the mount at ``mountpoint`` is written."""
    return mountpoint.parent / f".{mountpoint.name}.lazyfs.owner"


def reap_mounts(alive: Callable[[str], bool]) -> list[str]:
    """Detach every lazy filesystem whose owner file names a process that is gone (a
    crashed or SIGKILLed run); return their mount points. A mount without an owner file
    (another target's, a test's) is not ours to judge."""
    removed = []
    for point in lazy_mounts():
        try:
            label = owner_file(point).read_text().strip()
        except OSError:
            continue
        if label and not alive(label) and unmount(point):
            removed.append(str(point))
    return removed
