"""A small request/reply channel between a node's owner process and its SMTP-in workers.

Frames are a 4-byte length and a pickled ``(tag, seq, kind, args)`` over one
end of a ``socketpair`` made before the fork: both ends are the same program
and trust each other, so pickle carries settings, directory and routes as the
objects they are. A *note* is fire-and-forget and handled in order (a handed-
over message must reach delivery in the order it was queued); a *call* runs
its handler in a task of its own and gets a reply (or the handler's error).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import pickle
import socket
import struct
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

_LENGTH = struct.Struct("!I")
NOTE, CALL, REPLY, ERROR = "note", "call", "reply", "error"

Handler = Callable[..., Any]


class ChannelClosed(ConnectionError):
    """The other process is gone (or closed its end)."""


class Channel:
    def __init__(self, sock: socket.socket, handlers: Mapping[str, Handler]) -> None:
        self._sock = sock
        self._handlers = dict(handlers)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._seq = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = asyncio.Event()

    def on(self, kind: str, handler: Handler) -> None:
        self._handlers[kind] = handler

    async def open(self) -> None:
        self._sock.setblocking(False)
        self._reader, self._writer = await asyncio.open_unix_connection(sock=self._sock)

    def note(self, kind: str, *args: Any) -> None:
        self._send(NOTE, 0, kind, args)

    async def call(self, kind: str, *args: Any) -> Any:
        seq = next(self._seq)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[seq] = future
        try:
            self._send(CALL, seq, kind, args)
            return await future
        finally:
            self._pending.pop(seq, None)

    def _send(self, tag: str, seq: int, kind: str, args: Any) -> None:
        if self._writer is None or self.closed.is_set():
            raise ChannelClosed(f"channel closed ({kind})")
        data = pickle.dumps((tag, seq, kind, args), protocol=pickle.HIGHEST_PROTOCOL)
        self._writer.write(_LENGTH.pack(len(data)) + data)

    async def serve(self) -> None:
        """Read and dispatch frames until the other end closes."""
        assert self._reader is not None
        try:
            while True:
                head = await self._reader.readexactly(_LENGTH.size)
                body = await self._reader.readexactly(_LENGTH.unpack(head)[0])
                tag, seq, kind, args = pickle.loads(body)
                if tag == NOTE:
                    try:
                        self._handlers[kind](*args)
                    except Exception:
                        log.exception("note %s failed", kind)
                elif tag == CALL:
                    task = asyncio.ensure_future(self._answer(seq, kind, args))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                else:
                    future = self._pending.get(seq)
                    if future is not None and not future.done():
                        if tag == REPLY:
                            future.set_result(args)
                        else:
                            future.set_exception(RuntimeError(f"{kind} failed: {args}"))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.set()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ChannelClosed("the other process is gone"))

    async def _answer(self, seq: int, kind: str, args: Any) -> None:
        try:
            result = self._handlers[kind](*args)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            log.exception("call %s failed", kind)
            with contextlib.suppress(ChannelClosed):
                self._send(ERROR, seq, kind, repr(exc))
            return
        with contextlib.suppress(ChannelClosed):
            self._send(REPLY, seq, kind, result)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        for task in list(self._tasks):
            task.cancel()
