"""Held writes read back, and apply, exactly like the same changes made to a real file."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_shadowcheck.storage.held import HeldWrites, apply

ops = st.lists(
    st.one_of(
        st.tuples(st.just("w"), st.integers(0, 64), st.binary(min_size=1, max_size=24)),
        st.tuples(st.just("t"), st.integers(0, 80), st.just(b"")),
    ),
    max_size=12,
)


def model(synced: bytes, changes: list[tuple[str, int, bytes]]) -> bytes:
    data = bytearray(synced)
    for kind, at, chunk in changes:
        if kind == "t":
            data = data[:at] + bytearray(max(0, at - len(data)))
        else:
            if len(data) < at:
                data += bytearray(at - len(data))
            data[at : at + len(chunk)] = chunk
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(
    synced=st.binary(max_size=48),
    changes=ops,
    offset=st.integers(0, 90),
    length=st.integers(0, 90),
)
def test_reads_see_the_held_changes_in_order(
    synced: bytes, changes: list[tuple[str, int, bytes]], offset: int, length: int
) -> None:
    held = HeldWrites()
    for kind, at, chunk in changes:
        if kind == "w":
            held.write(7, at, chunk, 0.0)
        else:
            held.truncate(7, at, 0.0)
    expected = model(synced, changes)
    entry = held.held(7)
    if entry is None:
        return
    assert entry.size(len(synced)) == len(expected)
    got = entry.read(offset, length, len(synced), lambda o, n: synced[o : o + n])
    assert got == expected[offset : offset + length]


@settings(max_examples=100, deadline=None)
@given(synced=st.binary(max_size=48), changes=ops)
def test_applying_the_held_changes_gives_the_file_programs_saw(
    synced: bytes, changes: list[tuple[str, int, bytes]]
) -> None:
    held = HeldWrites()
    for kind, at, chunk in changes:
        if kind == "w":
            held.write(1, at, chunk, 0.0)
        else:
            held.truncate(1, at, 0.0)
    entry = held.take(1)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"held-{os.getpid()}"
    path.write_bytes(synced)
    try:
        if entry is not None:
            fd = os.open(path, os.O_WRONLY)
            try:
                apply(fd, entry)
            finally:
                os.close(fd)
        assert path.read_bytes() == model(synced, changes)
    finally:
        path.unlink()
