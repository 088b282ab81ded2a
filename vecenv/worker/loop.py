"""The worker process: :func:`worker_main` runs a :class:`~vecenv.worker.core.WorkerCore` behind
one end of a duplex pipe, until ``CLOSE`` or until the parent is gone.

Pipe bytes in, pipe bytes out: one reply per command, tagged with the command's call id. The
process ignores SIGINT (Ctrl+C belongs to the parent, which closes the workers itself) and
leaves at once when its parent process ends, however it ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import threading
import time
from multiprocessing import parent_process, reduction
from multiprocessing.connection import Connection, wait
from typing import Any

from vecenv.errors import PackedException
from vecenv.wire import fastpath
from vecenv.wire.buffers import Buffers, drop_inherited_mappings
from vecenv.wire.fastpath import ControlBlock, SpinBudget, fence
from vecenv.wire.memory import close_inherited
from vecenv.wire.pipes import PARENT_ENDS, Spin
from vecenv.wire.protocol import (
    WAKE_REPLY,
    Attach,
    Command,
    RolloutReply,
    StepReply,
    decode_command,
    encode_reply,
    fd_follows,
    no_payload,
    word_reply_allowed,
)
from vecenv.worker.core import WorkerCore, WorkerOptions, unpicklable_failure
from vecenv.worker.policy import seed_process_generators

__all__ = ["worker_main"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _exit_with_parent(death_signal: bool) -> None:
    """Leave at once when the parent process ends, however it ended (no orphans).

    With ``death_signal`` (Linux), the kernel kills the worker when the thread that started it
    ends, which needs nothing of the worker (env code in a long native call may hold the GIL).
    When that thread is the parent's main thread, which lives as long as the process, that is
    all it takes: no thread is started, so a worker runs none but its own (env code that forks
    does not fork a threaded process, which Python 3.12+ warns of, and a vector env made inside
    a worker may fork its own workers). A parent that died before the request is seen at once:
    this process has another parent by then, and leaves.

    Elsewhere a thread waits on the parent's end, which costs nothing while the parent lives.
    Pipe EOF alone is not enough: other processes may hold copies of a pipe's ends, the
    sentinel's included (a process the parent forks later inherits the end whose closing the
    sentinel reports). So the thread also waits on a pidfd of the parent (Linux), readable when
    it has exited, whoever holds what.
    """
    signalled = death_signal and _kill_me_with_my_starter()
    parent = parent_process()
    if parent is None:
        return
    if signalled:
        if os.getppid() != parent.pid:  # the parent died before the request: the kernel will not tell
            os._exit(1)
        return
    ends: list[int] = [parent.sentinel]
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None and parent.pid is not None:
        try:
            ends.append(pidfd_open(parent.pid))
        except ProcessLookupError:  # gone already
            os._exit(1)
        except OSError:  # a kernel without pidfds: the sentinel alone
            pass

    def watch() -> None:
        wait(ends)
        os._exit(1)

    threading.Thread(target=watch, name="vecenv-parent-watch", daemon=True).start()


def _kill_me_with_my_starter() -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills this process when the thread that
    forked it ends. Linux only; whether the kernel took the request (elsewhere, or where it
    fails, the watch thread alone remains)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _set_nice(nice: int) -> None:
    """Run every thread of this process at ``nice``. Linux keeps a nice value per thread, and a
    spawned or fork-server worker has threads before it gets here (a BLAS pool started when
    numpy was imported), which would keep the one they started with; threads started later take
    the one of the thread that starts them. A value the process may not take (lower than its
    own, without privileges) is left as it is."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: one value for the process
        threads = [0]
    for tid in threads:
        with contextlib.suppress(OSError):  # not allowed, or the thread has ended meanwhile
            if os.getpriority(os.PRIO_PROCESS, tid) != nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)


def _setup_process(options: WorkerOptions) -> None:
    if options.environ is not None:  # before anything reads it (the thread limits below)
        os.environ.clear()
        os.environ.update(options.environ)
    # Ctrl+C belongs to the parent; SIGTERM (how the parent ends a worker) ends it at once, not
    # through a handler a forked worker inherited from its parent (vecenv-collect's, say).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # A parent's ignored SIGCHLD (a launcher's, inherited) or reaping handler would take the
    # exit statuses of the env code's own subprocesses (subprocess.run would report 0).
    if hasattr(signal, "SIGCHLD"):  # (POSIX)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # fork: give up what belongs to the parent (other vector envs' blocks, parent pipe ends).
    drop_inherited_mappings()
    for conn in list(PARENT_ENDS):
        conn.close()
    close_inherited()
    # fork and forkserver: numpy's and torch's global generators are copies of the parent's (or
    # the server's), so every worker's env code would draw the same numbers from them. Fresh
    # entropy here, before the envs are built: a constructor that seeds them keeps its seed.
    seed_process_generators(None)
    if options.cpu is not None:
        os.sched_setaffinity(0, {options.cpu})
    if options.nice is not None:
        _set_nice(options.nice)
    if options.threads is not None:
        from vecenv.worker.threads import limit_threads

        limit_threads(options.threads)
    _exit_with_parent(options.death_signal)


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
            # (cloudpickled where its env spec holds lambdas: wrappers built with them)
            message = encode_reply(0, True, core.build(group_fn_bytes))
        except BaseException as exc:
            conn.send_bytes(encode_reply(0, False, PackedException(exc, None)))
            return
        conn.send_bytes(message)
        attach: Attach = conn.recv()
        fd = reduction.recv_handle(conn) if Buffers.needs_fd(attach.buffers) else None
        buffers = Buffers.attach(attach.buffers, attach.start, attach.start + attach.num_envs, fd)
        control = None
        try:
            if options.slot is not None:
                control = ControlBlock.attach(reduction.recv_handle(conn), options.slots)
            core.attach(attach, buffers)
            if control is None:
                _serve(core, conn, options.spin)
            else:
                assert options.slot is not None
                _serve_fast(core, conn, control, options.slot)
        finally:
            core.detach()
            buffers.close()  # the group and its views are gone by now
            if control is not None:
                control.close()
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
    env used with pauses between steps spends almost no CPU waiting. (Where the step's fast
    path runs, :func:`_serve_fast` serves instead: see :mod:`vecenv.wire.fastpath`.)
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
        conn.send_bytes(_reply(call_id, ok, result))
        if command is Command.CLOSE:
            return


def _reply(call_id: int, ok: bool, result: Any) -> bytes:
    """The bytes answering call ``call_id``. A result that cannot be pickled is the caller's
    error to see, not a reason to die: the reply is then that error, naming the env whose part
    of the result failed (and the info value, see :func:`unpicklable_failure`)."""
    try:
        return encode_reply(call_id, ok, result)
    except BaseException as exc:
        return encode_reply(call_id, False, unpicklable_failure(exc, result))


#: The replies that may be posted in the done word when empty: a word STEP's, and a ROLLOUT's
#: whose command allowed it (see vecenv.wire.protocol.allow_word_reply).
_WORD_REPLIES = (StepReply, RolloutReply)

#: What :meth:`_Waiter.next` returns when the next command is on the pipe.
_PIPE = -1
_PREEMPTED_NS = int(SpinBudget.PREEMPTED * 1e9)
_NEVER = 1 << 62


class _Waiter:
    """The worker's side of the fast path: waits for the next command, in its slot's command
    word or on the pipe; spins (no system call) for the budget, then sleeps on the pipe.

    The sleep follows the protocol of :mod:`vecenv.wire.fastpath`: SLEEPING is stored and
    fenced before the command word is read a last time, so a STEP posted meanwhile either is
    seen here or makes the parent send a ``WAKE``.
    """

    def __init__(self, conn: Connection, control: ControlBlock, slot: int) -> None:
        self.conn = conn
        words = control.words
        assert words is not None
        self.words = words
        at = control.slots[slot]  # the items of this worker's words, kept as attributes here
        self.command, self.pipe_sent, self.spin_ns = at.command, at.pipe_sent, at.spin_ns
        self.spin_yields, self.posted_at, self.done_at = at.spin_yields, at.posted_at, at.done_at
        self.done, self.replies, self.sleeping = at.done, at.replies, at.sleeping
        self.parent_sleeping = fastpath.PARENT_SLEEPING
        # The last command taken from the word, and the pipe's count last seen: none yet. The
        # parent zeroed the slot before this process started, so a nonzero word is a command
        # posted to this process, possibly before it got here (a step right after start-up).
        self.last = 0
        self.pipe_seen = 0
        self.pipe_maybe = True  # the pipe may hold a message the hint has not announced
        self.replied = 0
        self.budget = SpinBudget(0.0)
        self.poller = select.poll()
        self.poller.register(conn.fileno(), select.POLLIN)

    def _check(self) -> int | None:
        """A command ready now: its call id (from the word), :data:`_PIPE`, or ``None``."""
        words = self.words
        posted = words[self.command]
        if posted != self.last:
            return posted
        sent = words[self.pipe_sent]
        if self.pipe_maybe or sent != self.pipe_seen:
            self.pipe_seen = sent
            if self.conn.poll(0):
                self.pipe_maybe = True  # more may follow the one about to be read
                # A command posted in the word before that message was written (the write is a
                # system call: the word is visible by then) goes first, as it was sent first: a
                # step abandoned by Ctrl+C must not run after the reset that followed it.
                posted = words[self.command]
                if posted != self.last:
                    return posted
                return _PIPE
            self.pipe_maybe = False
        return None

    def next(self) -> int:
        """The next command's call id if it came in the word, else :data:`_PIPE`."""
        words = self.words
        clock = time.perf_counter_ns
        start = clock()
        self.budget.limit = words[self.spin_ns] * 1e-9
        spin = int(self.budget.seconds() * 1e9)
        found = self._check()
        spun = caught = False
        if found is None and spin:
            spun, before = True, start
            # Yielding (more processes than cores), being descheduled is the point, no miss.
            yields = words[self.spin_yields]
            preempted = _NEVER if yields else _PREEMPTED_NS
            while True:
                now = clock()
                # Out of budget, or descheduled where nothing asked for it: a miss.
                if now - start >= spin or now - before > preempted:
                    break
                before = now
                if yields:
                    os.sched_yield()  # the core goes to a process with work, if there is one
                found = self._check()
                if found is not None:
                    caught = True
                    break
        if found is None:
            words[self.sleeping] = 1
            fence()
            try:
                found = self._check()
                while found is None:
                    # Bounded: see RECHECK_SECONDS. The parent's end is watched by a thread.
                    if self.poller.poll(int(fastpath.RECHECK_SECONDS * 1000)):
                        self.pipe_maybe = True
                    found = self._check()
            finally:
                words[self.sleeping] = 0
        # Up to when the parent posted (see SpinBudget.record), for a command in the word.
        end = words[self.posted_at] if found != _PIPE else clock()
        self.budget.record(max(0, end - start) * 1e-9, spun, caught)
        if found != _PIPE:
            self.last = found
        return found

    def answer_in_word(self, call_id: int) -> None:
        """Post the empty reply to word command ``call_id``; wake the parent if it sleeps."""
        words = self.words
        words[self.done_at] = time.perf_counter_ns()
        words[self.done] = call_id
        fence()
        if words[self.parent_sleeping]:
            self.conn.send_bytes(WAKE_REPLY)

    def answered_on_pipe(self) -> None:
        """A reply went through the pipe: tell a spinning parent so without a system call."""
        self.replied += 1
        self.words[self.replies] = self.replied


def _serve_fast(core: WorkerCore, conn: Connection, control: ControlBlock, slot: int) -> None:
    """:func:`_serve` with the step's fast path (see :mod:`vecenv.wire.fastpath`): a STEP
    posted in the slot's command word is answered in its done word when the reply is empty
    (no infos, every row shared), else on the pipe, and so is a ROLLOUT whose command allows
    it; everything else is as in :func:`_serve`.
    A ``WAKE`` on the pipe only ended a sleep: it is dropped unanswered."""
    waiter = _Waiter(conn, control, slot)
    while True:
        found = waiter.next()
        fd = None
        if found == _PIPE:
            data = conn.recv_bytes()
            command, call_id, load = decode_command(data)
            if command is Command.WAKE:
                continue
            fd = reduction.recv_handle(conn) if fd_follows(data) else None
            in_word = word_reply_allowed(data)
        else:
            command, call_id, load, in_word = Command.STEP, found, no_payload, True
        ok, result = core.handle(command, load, fd)
        if in_word and ok and type(result) in _WORD_REPLIES and result.empty:
            waiter.answer_in_word(call_id)
            continue
        conn.send_bytes(_reply(call_id, ok, result))
        waiter.answered_on_pipe()
        if command is Command.CLOSE:
            return
