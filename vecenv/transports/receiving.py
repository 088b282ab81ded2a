"""Bounded reads of a worker's replies: a reply that stops arriving part-way never holds the
parent past its wait's timeout.

``Connection.recv_bytes`` reads a whole message, blocking until its last byte is there: a worker
stopped (SIGSTOP) while it wrote a large reply, or one that writes it slowly, held the parent's
``step(timeout=...)`` for as long as the worker stayed stopped. The parent's end of every pipe
gets a kernel receive timeout of :data:`RECEIVE_SLICE` (``SO_RCVTIMEO``), as its writes get a
send timeout (:mod:`vecenv.transports.sending`), and :class:`ReplyReader` reads a message a
piece at a time: what the pipe holds, then more until the message is whole or the caller's
deadline has come. What it has read is kept for the next wait, so a message comes out whole,
once, however many waits it took.

The bytes are ``Connection.send_bytes``'s: a 4-byte big-endian length (``-1`` and an 8-byte
one for messages of 2 GiB or more), then the message. A message that is there whole (every
small reply of a worker that is running) takes two reads, as ``recv_bytes`` takes.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from multiprocessing.connection import Connection

from vecenv.transports.sending import socket_of, timeval

__all__ = ["RECEIVE_SLICE", "ReplyReader", "bound_reads"]

#: Seconds one read of a worker's pipe may block before it gives up for now (how far past a
#: wait's timeout the parent may notice that a reply stopped arriving).
RECEIVE_SLICE = 0.01
# The most one read takes into a large message's buffer.
_CHUNK = 1 << 22
_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!Q")


def bound_reads(conn: Connection) -> None:
    """Give the parent's end of a worker pipe (a socket) the receive timeout :data:`RECEIVE_SLICE`.

    The descriptor stays blocking: a read with nothing to take waits at most a slice and raises
    ``BlockingIOError``; ``poll`` and ``select`` on it are unchanged.
    """
    with socket_of(conn) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval(RECEIVE_SLICE))


class ReplyReader:
    """The messages of one worker's pipe, read within deadlines; a message read in part is kept
    for the next :meth:`read`. One per pipe: a replaced worker's pipe gets a new one."""

    def __init__(self, conn: Connection) -> None:
        self._fd = conn.fileno()
        self._header = b""  # the length read so far (4 bytes, then 8 more for a long message)
        self._body: bytearray | None = None  # a message read in part
        self._got = 0

    def read(self, deadline: float | None) -> bytes | bytearray | None:
        """The next whole message, or ``None`` when it is not whole by ``deadline``
        (``time.monotonic()``; ``None``: no deadline, so it reads on, a slice at a time, until
        the message is whole). Call it when the pipe is readable. Raises ``EOFError`` when the
        worker's end closed (part-way through a message included) and ``OSError`` as a read
        raises it."""
        while True:
            try:
                if self._body is None:
                    message = self._read_header()
                    if message is not None:
                        return message
                    if self._body is None:  # the rest of the length is still to come
                        continue
                view = memoryview(self._body)[self._got :]
                got = os.readv(self._fd, [view[:_CHUNK]])
                if got == 0:
                    raise EOFError
                self._got += got
                if self._got == len(self._body):
                    body, self._body, self._got = self._body, None, 0
                    return body
            except BlockingIOError:  # nothing came for a slice
                pass
            if deadline is not None and time.monotonic() >= deadline:
                return None  # (a reply still arriving is late too: the wait is bounded)

    def _read_header(self) -> bytes | None:
        """Read the message's length (what of it is there); a short message that is there whole
        is returned at once, a longer one gets its buffer (``None`` is returned)."""
        want = (_SHORT.size if len(self._header) < _SHORT.size else _SHORT.size + _LONG.size) - len(self._header)
        chunk = os.read(self._fd, want)
        if not chunk:
            raise EOFError
        self._header += chunk
        if len(self._header) == _SHORT.size:
            (size,) = _SHORT.unpack(self._header)
            if size == -1:
                return None  # the 8-byte length follows
        elif len(self._header) == _SHORT.size + _LONG.size:
            (size,) = _LONG.unpack_from(self._header, _SHORT.size)
        else:
            return None
        self._header = b""
        if size == 0:
            return b""
        if size <= _CHUNK:
            # Usually there whole (a small reply is written with its length in one write).
            try:
                data = os.read(self._fd, size)
            except BlockingIOError:
                self._body, self._got = bytearray(size), 0
                raise
            if len(data) == size:
                return data
            if not data:
                raise EOFError
            self._body, self._got = bytearray(size), len(data)
            self._body[: len(data)] = data
            return None
        self._body, self._got = bytearray(size), 0
        return None
