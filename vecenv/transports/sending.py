"""Bounded writes to a worker's pipe: a command that the worker stops taking raises instead of
blocking the parent forever.

A write to a pipe blocks while the pipe's buffer is full, which is what happens when a command
larger than the buffer (hundreds of KiB: actions that are not in shared memory, ``call``
arguments, options) goes to a worker stuck in env code, which reads nothing. The parent's end of
every pipe gets a kernel send timeout of :data:`SEND_SLICE` (``SO_SNDTIMEO``), so each write
returns within a slice, having written what fitted; :func:`send_within` writes the message a
slice at a time until it is whole, or until the worker has taken none of it for the send's
timeout. A worker that reads, however slowly, is never cut off; a write that fits (every
command to a worker that is reading) is one system call, as before.

Each write, and the process transport's read of the replies, runs under
:class:`~vecenv.interrupts.HeldInterrupt`, so a Ctrl+C (or a SIGTERM that has a Python handler)
arriving meanwhile waits until what moved is known and no message is cut in two; a message sent
in one write and the descriptor after it (a rollout block's) are one hold.

The bytes on the wire are ``multiprocessing.connection.Connection.send_bytes``'s, and a
descriptor follows as ``multiprocessing.reduction.send_handle`` sends it, so the worker reads
them with the usual ``recv_bytes`` and ``recv_handle``.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import enum
import os
import socket
import struct
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection

from vecenv.errors import VecEnvTimeoutError
from vecenv.interrupts import HeldInterrupt

__all__ = [
    "SEND_SLICE",
    "SEND_TIMEOUT",
    "SendTimeout",
    "Progress",
    "SendProgress",
    "bound_writes",
    "send_handle_within",
    "send_timeout",
    "send_within",
    "socket_of",
    "timeval",
]

#: Seconds a worker may take none of a command when its call has no ``timeout=`` of its own (the
#: ``*_async`` calls, ``send``, ``async_reset``, ``timeout=None``): one that took none of it by
#: then is busy with an earlier call (``VecEnvTimeoutError``); one that took part of it and then
#: nothing is ended (a dead worker, or a restart).
SEND_TIMEOUT = 60.0
#: Seconds one write to a worker's pipe may block before it returns what it wrote (how far past
#: a send's timeout the parent may notice it).
SEND_SLICE = 0.01
# Connection.send_bytes sends the header apart from messages larger than this.
_SPLIT = 16384
#: The least send buffer a worker's pipe gets: room for a message sent in one write (up to
#: ``_SPLIT`` bytes and its header) beside what a reader that took every earlier message may
#: still have left in it (wake-ups, the attach message).
MIN_SEND_BUFFER = 8 * _SPLIT


class Progress(enum.IntEnum):
    """How much of a message a send that an interrupt (Ctrl+C) cut short may have written."""

    #: No byte: the worker is as it was.
    NOTHING = 0
    #: All of it: the worker runs the command (nobody waits for its reply).
    WHOLE = 1
    #: Possibly a part: the worker's next read would take the rest for a header.
    PART = 2


@dataclasses.dataclass
class SendProgress:
    """What :func:`send_within` may have written so far, set before each write, for the caller
    of a send that an interrupt cut short."""

    state: Progress = Progress.NOTHING


class SendTimeout(VecEnvTimeoutError):
    """A worker took none of a command (or none of its rest) for the send's timeout.

    ``written``: part of it is in the pipe, so the worker can no longer be talked to (its next
    read would take the rest for a header); ``False``: nothing of it was sent.
    """

    def __init__(self, message: str, *, written: bool) -> None:
        super().__init__(message)
        self.written = written


def send_timeout(timeout: float | None = None) -> float:
    """``timeout``, or :data:`SEND_TIMEOUT` when the call gives none."""
    return SEND_TIMEOUT if timeout is None else timeout


@contextlib.contextmanager
def socket_of(conn: Connection) -> Iterator[socket.socket]:
    """``conn``'s socket, to set its options: the descriptor stays ``conn``'s, and blocking."""
    fd = conn.fileno()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
    try:
        yield sock
    finally:
        sock.detach()
        os.set_blocking(fd, True)  # a default timeout (socket.setdefaulttimeout) would have cleared it


def timeval(seconds: float) -> bytes:
    """``seconds`` as the ``struct timeval`` that ``SO_SNDTIMEO`` and ``SO_RCVTIMEO`` take."""
    whole = int(seconds)
    return struct.pack("@ll", whole, int(round((seconds - whole) * 1e6)))


def bound_writes(conn: Connection) -> None:
    """Give the parent's end of a worker pipe (a socket) the send timeout :data:`SEND_SLICE`.

    The descriptor stays blocking: a write waits at most a slice and returns what it wrote.
    """
    with socket_of(conn) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval(SEND_SLICE))
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < MIN_SEND_BUFFER:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MIN_SEND_BUFFER)


def send_within(
    conn: Connection,
    data: bytes | memoryview,
    fd: int | None,
    timeout: float | None,
    progress: SendProgress | None = None,
    room: bool = False,
) -> None:
    """Send ``data`` as ``conn.send_bytes`` would, then the descriptor ``fd`` (if any) as
    ``reduction.send_handle`` would, giving up once the reader has taken nothing for ``timeout``
    seconds (``None``: never).

    ``progress`` says, when an interrupt (Ctrl+C) cuts the send short, what it may have
    written. ``room``: the reader has taken every earlier message, so the pipe has room for a
    message sent in one write (see :data:`MIN_SEND_BUFFER`); that write cannot block, so no
    signal can cut it, and an interrupt raised at it comes once all of it is in the pipe
    (Python runs signal handlers between calls, never inside a write that does not block).

    Raises:
        SendTimeout: the reader stalled for ``timeout`` (``written`` says whether part of the
            message was sent).
        OSError: the pipe is broken (the worker is gone).
    """
    if progress is None:
        progress = SendProgress()
    handle = conn.fileno()
    n = len(data)
    written = 0
    if n > 0x7FFFFFFF:
        parts = [struct.pack("!i", -1) + struct.pack("!Q", n), data]
    elif n > _SPLIT:
        parts = [struct.pack("!i", n), data]
    else:
        whole = struct.pack("!i", n) + data
        with HeldInterrupt():
            # What a signal that is not held (see HeldInterrupt) finds if it comes as the write
            # returns; once in the block, a Ctrl+C finds the exact state set after it.
            progress.state = Progress.WHOLE if room and fd is None else Progress.PART
            try:
                first = os.write(handle, whole)  # the common case: one write that fits
            except BlockingIOError:
                first = 0
            progress.state = _progress(first, len(whole) - first, fd)
            if first == len(whole) and fd is not None:
                # Still held: a Ctrl+C as the write returned would otherwise leave the message
                # without its descriptor, and end a worker that a single Ctrl+C must not end.
                _send_handle(handle, fd, timeout, progress, held=True)
        if first == len(whole):
            return
        parts, written = [whole[first:]], first
    left = sum(len(part) for part in parts)
    moved = time.monotonic()  # when the reader last took something
    for part in parts:
        view = memoryview(part)
        while view:
            with HeldInterrupt():
                progress.state = Progress.PART  # as above
                try:
                    count = os.write(handle, view)
                except BlockingIOError:  # nothing fitted within the slice
                    count = 0
                written, left, view = written + count, left - count, view[count:]
                progress.state = _progress(written, left, fd)
            now = time.monotonic()
            if count:
                moved = now
            elif timeout is not None and now - moved >= timeout:
                raise SendTimeout(_late(written, len(data), timeout), written=written > 0)
    if fd is not None:
        _send_handle(handle, fd, timeout, progress)


def _progress(written: int, left: int, fd: int | None) -> Progress:
    """What a send has written: nothing, all of it (no descriptor to follow), or a part."""
    if not written:
        return Progress.NOTHING
    return Progress.WHOLE if not left and fd is None else Progress.PART


def send_handle_within(conn: Connection, fd: int, timeout: float | None) -> None:
    """Send the descriptor ``fd`` alone, as ``reduction.send_handle`` would, giving up once the
    reader has taken nothing for ``timeout`` seconds (:class:`SendTimeout`, ``written=True``:
    the reader expects it)."""
    _send_handle(conn.fileno(), fd, timeout, None)


def _send_handle(
    handle: int, fd: int, timeout: float | None, progress: SendProgress | None, held: bool = False
) -> None:
    """``reduction.sendfds`` of one descriptor, a slice at a time (Linux: no acknowledgement);
    ``progress`` (of the message it follows) is whole once it is sent. ``held``: the caller
    already holds Ctrl+C (:class:`HeldInterrupt`) around this send; a second hold inside would
    hold a second Ctrl+C too, which must cut the send."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=handle)
    try:
        sock.settimeout(None)  # blocking in Python's sense: the kernel's slice bounds each try
        start = time.monotonic()
        while True:
            try:
                with contextlib.nullcontext() if held else HeldInterrupt():
                    sock.sendmsg([b"\x01"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
                    if progress is not None:
                        progress.state = Progress.WHOLE
                return
            except BlockingIOError:
                if timeout is not None and time.monotonic() - start >= timeout:
                    raise SendTimeout(
                        f"took a command but not the descriptor after it for {timeout:g} s", written=True
                    ) from None
    finally:
        sock.detach()
        os.set_blocking(handle, True)


def _late(written: int, size: int, timeout: float) -> str:
    """What the worker did, for messages that name it first ("worker 0 took ...")."""
    if written:
        return f"took {written} bytes of a {size}-byte command and then nothing for {timeout:g} s"
    return f"took none of a {size}-byte command for {timeout:g} s"
