"""The worker process: :func:`worker_main` runs a :class:`~vecenv.worker.core.WorkerCore` behind
one end of a duplex pipe, until ``CLOSE`` or until the parent is gone.

Pipe bytes in, pipe bytes out: one reply per command, tagged with the command's call id. The
process ignores SIGINT (Ctrl+C belongs to the parent, which closes the workers itself) and
leaves at once when its parent process ends, however it ended.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from multiprocessing import parent_process, reduction
from multiprocessing.connection import Connection, wait

import cloudpickle

from vecenv.errors import PackedException
from vecenv.wire.buffers import Buffers, drop_inherited_mappings
from vecenv.wire.pipes import PARENT_ENDS, Spin
from vecenv.wire.protocol import Attach, Command, decode_command, encode_reply, fd_follows
from vecenv.worker.core import WorkerCore, WorkerOptions, unpicklable_part

__all__ = ["worker_main"]


def _exit_with_parent() -> None:
    """Leave at once when the parent process ends, however it ended (no orphans).

    A thread blocked on the parent's sentinel costs nothing while the parent lives; pipe EOF alone
    is not enough because other processes may hold copies of our pipe's ends.
    """
    parent = parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="vecenv-parent-watch", daemon=True).start()


def _setup_process(options: WorkerOptions) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # fork: give up what belongs to the parent (other vector envs' blocks, parent pipe ends).
    drop_inherited_mappings()
    for conn in list(PARENT_ENDS):
        conn.close()
    if options.cpu is not None:
        os.sched_setaffinity(0, {options.cpu})
    if options.threads is not None:
        from vecenv.worker.threads import limit_threads

        limit_threads(options.threads)
    _exit_with_parent()


def worker_main(index: int, conn: Connection, group_fn_bytes: bytes, options: WorkerOptions) -> None:
    """Entry point of worker process ``index``; ``group_fn_bytes`` is a cloudpickled group builder.

    The builder returns the list of envs this worker hosts, one native ``VectorEnv``, or the
    copies of a multi-agent env (a :class:`vecenv.multiagent.copies.AgentCopies`).
    SIGINT is ignored: Ctrl+C belongs to the parent, which closes the workers itself.
    """
    _setup_process(options)
    core = WorkerCore(index, options)
    try:
        try:
            # cloudpickle: an env spec may hold lambdas (wrappers built with them).
            message = encode_reply(0, True, core.build(group_fn_bytes), cloudpickle.dumps)
        except BaseException as exc:
            conn.send_bytes(encode_reply(0, False, PackedException(exc, None)))
            return
        conn.send_bytes(message)
        attach: Attach = conn.recv()
        fd = reduction.recv_handle(conn) if Buffers.needs_fd(attach.buffers) else None
        buffers = Buffers.attach(attach.buffers, attach.start, attach.start + attach.num_envs, fd)
        try:
            core.attach(attach, buffers)
            _serve(core, conn, options.spin)
        finally:
            core.detach()
            buffers.close()  # the group and its views are gone by now
    except (EOFError, ConnectionError, KeyboardInterrupt):
        # The parent went away: EOF, EPIPE on a write, or ECONNRESET on a read when it died with
        # replies unread in its end. Nothing is left to answer, and nobody to tell.
        pass
    finally:
        conn.close()


def _serve(core: WorkerCore, conn: Connection, spin: float = 0.0) -> None:
    """Answer commands until CLOSE. One reply per command, tagged with the command's call id.

    Waking a process that sleeps on a pipe costs the writer tens of microseconds (on a virtual
    machine, an interrupt to a halted core), as much as a CartPole group's whole step. So where
    the worker has a core of its own (``spin > 0``), it polls for up to ``spin`` seconds after
    each reply before it sleeps on the pipe. A poll that catches nothing (a learner busy between
    steps) makes it sleep at once for the next :data:`~vecenv.wire.pipes.SPIN_BACKOFF` commands, so that a vector
    env used with pauses between steps spends almost no CPU waiting.
    """
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    awake = Spin(spin)
    while True:
        awake.poll(poller)
        data = conn.recv_bytes()
        command, call_id, load = decode_command(data)
        fd = reduction.recv_handle(conn) if fd_follows(data) else None
        ok, result = core.handle(command, load, fd)
        try:
            reply = encode_reply(call_id, ok, result)
        except BaseException as exc:
            # A result that cannot be pickled is the caller's error to see, not a reason to die;
            # it names the env whose part of the result failed.
            reply = encode_reply(call_id, False, PackedException(exc, unpicklable_part(result)))
        conn.send_bytes(reply)
        if command is Command.CLOSE:
            return
