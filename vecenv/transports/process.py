"""The process transport: one worker process per group, a duplex pipe to each.

(A group hosted by the parent itself is :mod:`vecenv.transports.inline`, which wraps this
transport for the other groups.)

The parent polls the pipes *and* the process sentinels together, so a worker that dies is
reported within the wait, never waited on forever; a pipe that hangs up while its process lingers
(a non-daemon thread keeps it alive) is a dead worker too, so no wait can spin on it. A process
that env code forks (without exec) keeps copies of its worker's pipe and sentinel, so that
neither tells when the worker ends: on Linux the parent also polls a pidfd of each worker it
started itself (``fork``, ``spawn``), which does, whoever holds what. The shared
block reaches each worker as a file descriptor passed over its pipe (Linux memfd), or by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import math
import multiprocessing
import os
import select
import signal
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing import reduction, resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_objects
from multiprocessing.process import BaseProcess
from typing import Any

from vecenv.errors import ClosedEnvironmentError, DescriptorLimitError, InvalidStateError
from vecenv.interrupts import HeldInterrupt
from vecenv.machine import available_cpus, descriptor_usage, guard_main, own_start_method, pin_cores, pinned_core
from vecenv.transports import fork_server
from vecenv.transports.base import Death, DeathCause, Event, Reply, Transport, WorkerGone
from vecenv.transports.receiving import ReplyReader, bound_reads
from vecenv.transports.sending import (
    Progress,
    SendProgress,
    SendTimeout,
    bound_writes,
    send_handle_within,
    send_timeout,
    send_within,
)
from vecenv.wire import fastpath
from vecenv.wire.buffers import HAVE_MEMFD, Buffers
from vecenv.wire.fastpath import ControlBlock, SpinBudget, SpinMode, fence
from vecenv.wire.pipes import PARENT_ENDS, SPIN_SECONDS, Spin
from vecenv.wire.protocol import (
    WAKE_COMMAND,
    WAKE_REPLY,
    Attach,
    Command,
    PickledOnce,
    SpaceRule,
    WithFd,
    allow_word_reply,
    call_id_of,
    decode_reply,
    empty_reply,
    encode_for_pipe,
    is_bare_step,
)
from vecenv.worker.builders import pickle_group
from vecenv.worker.core import WorkerOptions
from vecenv.worker.loop import worker_main

__all__ = ["ProcessTransport", "KILL_GRACE", "START_DESCRIPTORS", "WORKER_DESCRIPTORS"]

#: After terminate(), how long to wait before SIGKILL.
KILL_GRACE = 1.0
#: Descriptors that starting one worker may hold open at once in this process (its pipe's two
#: ends, multiprocessing's two status pipes, the forkserver's socket or spawn's exec pipe, the
#: resource tracker's pipe the first time, its pidfd). They are checked free before each start, so that
#: the limit is never met half-way through one (CPython would leave a pipe open).
START_DESCRIPTORS = 10
#: Descriptors a running worker keeps open in this process at most (its pipe, multiprocessing's
#: two status pipes and, on Linux, a pidfd).
WORKER_DESCRIPTORS = 4
_INTERRUPTED = "was ended: an interrupt (Ctrl+C) cut a message on its pipe in two"
# A worker whose pipe hung up gets this long to exit on its own before it is killed.
_HANGUP_GRACE = 0.5
# The call id watched in the done word of a worker that owes nothing there (no call has it).
_NOTHING = -1
# A spinning parent checks the pipes and the process sentinels (a dead worker) every this many
# rounds of reading the words (a round reads a few words: well under a microsecond each).
_SENTINEL_ROUNDS = 16
# Replies found in the words are returned without a system call; the pipes are then checked
# too where a worker's replies word says it wrote one there, and at least every this many such
# returns (a large reply is counted in that word only once it is written whole), so that a
# wait for any one worker (``recv``'s) never leaves a reply on a pipe behind the words' replies.
_PIPE_CHECK_EVERY = 8

#: Every process transport of this process that has workers running: together with this
#: process set how they spin, from how many processes there are per core (see _rebalance).
_LIVE: weakref.WeakSet[ProcessTransport] = weakref.WeakSet()
# Vector envs may be made and closed by several threads. Re-entrant: the garbage collector
# may finalise an unclosed vector env (whose close rebalances) while this thread holds it.
_LIVE_LOCK = threading.RLock()


def _rebalance(new: ProcessTransport | None = None) -> None:
    """Set how every live transport's parent side and workers may spin, from all their worker
    processes and this process against the cores this process may use
    (:meth:`SpinMode.for_processes <vecenv.wire.fastpath.SpinMode.for_processes>`): a spinner
    on a core of its own reads the words flat out; one on a shared core yields it each round,
    so that it does not take the time its peer needs to answer; a vector env made or closed
    later changes the answer for the others too (the workers read it at each wait)."""
    with _LIVE_LOCK:
        if new is not None:
            _LIVE.add(new)
        live = [t for t in _LIVE if not t._stopped]
        mode = SpinMode.for_processes(sum(len(t.processes) for t in live) + 1, available_cpus())
        for transport in live:
            transport._allow_spin(mode)


def _forget_workers_in_forked_child() -> None:
    """In a child of ``os.fork()``: the workers are the parent's. The child inherits
    multiprocessing's record of them, whose exit hook would terminate the daemonic ones (the
    parent's!) when the child exits; so forget them, and the locks other threads may have held.
    The child's copies of the workers' pidfds are closed: the child never waits on those workers
    (its every call is refused and its ``close()`` leaves them alone), so nothing else would."""
    global _LIVE_LOCK
    _LIVE_LOCK = threading.RLock()
    children = getattr(multiprocessing.process, "_children", None)  # what that exit hook ends
    for transport in list(_LIVE):
        if children is not None:
            for process in transport.processes:
                children.discard(process)
        for worker in range(len(transport._pidfds)):
            transport._close_pidfd(worker, orphan=True)  # (closed, never killed: they are the parent's)
    _LIVE.clear()
    fork_server.forget_in_child()


os.register_at_fork(after_in_child=_forget_workers_in_forked_child)


def _stay() -> None:
    """A spin round on a core of its own gives nothing away."""


#: The exit code recorded for a worker whose exit status another ``waitpid`` took (never a
#: real one: codes are 0..255, signals -1..-64).
STATUS_LOST = -(2**16)


def _open_pidfd(pid: int | None) -> int | None:
    """A descriptor of process ``pid`` (a child of this process, or of its fork server) that is
    readable once it has exited, whoever holds copies of its pipes and sentinel (Linux 5.3+);
    ``None`` where there is none (no pidfds here, or no descriptor free): the sentinel alone
    then tells."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None or pid is None:
        return None
    try:
        return int(pidfd_open(pid))
    except OSError:
        return None


def _exit_signs(process: BaseProcess, pidfd: int | None) -> list[Any]:
    """What becomes readable when ``process`` exits: its sentinel, and its pidfd where it has one."""
    return [process.sentinel] if pidfd is None else [process.sentinel, pidfd]


def _wait_exit(process: BaseProcess, pidfd: int | None, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``process`` to exit, and take its status if it has."""
    wait_for_objects(_exit_signs(process, pidfd), timeout)  # at once for one that has exited
    _still_running(process, pidfd)


def _still_running(process: BaseProcess, pidfd: int | None = None) -> bool:
    """Whether ``process`` has not exited, by its sentinel (and ``pidfd``, its pidfd, where it
    has one: a process it forked may hold a copy of the sentinel) as well as its exit status.

    A parent that ignores SIGCHLD (inherited from a launcher), or runs a handler that reaps
    every child, loses its children's exit statuses: ``multiprocessing`` then takes them for
    running forever (``is_alive()``), refuses to ``close()`` them and keeps their descriptors,
    and a signal sent to one could reach a new process that got its pid. The sentinel still
    says a worker has ended; its status is then recorded as :data:`STATUS_LOST`, so it is
    released as any other.
    """
    if process.exitcode is not None:
        return False
    if not wait_for_objects(_exit_signs(process, pidfd), 0):
        return True
    # It has exited: take its status. A blocking join, as the sentinel is readable a moment
    # before the process is a zombie whose status waitpid can take; where another waitpid
    # took it, waitpid fails at once (ECHILD) and the join returns without one.
    process.join(_HANGUP_GRACE)
    if process.exitcode is None:
        # multiprocessing has no public way to record it: its Popen's returncode is the status.
        popen: Any = process._popen  # type: ignore[attr-defined]
        popen.returncode = STATUS_LOST
    return False


def _end(process: BaseProcess, pidfd: int | None = None) -> None:
    """Kill ``process`` if it still runs, and take its exit status (recorded as lost where
    another ``waitpid`` took it)."""
    if _still_running(process, pidfd):
        process.kill()
        process.join()
        _still_running(process, pidfd)


def _end_orphans(pidfds: Sequence[int], grace: float) -> None:
    """End the processes of ``pidfds`` (forkserver workers whose fork server died) and close
    ``pidfds``: each gets up to ``grace`` seconds to exit on its own (its pipe hung up), and is
    then killed; also when the wait is cut short (Ctrl+C). Such a worker's sentinel said it
    ended when the server died, so nothing else ends one that cannot read the hang-up (stopped
    by SIGSTOP, say); it is no child of this process, and the process that adopted it reaps it."""
    running = list(pidfds)
    try:
        deadline = time.monotonic() + grace
        running = [fd for fd in running if not wait_for_objects([fd], 0)]
        while running and (left := deadline - time.monotonic()) > 0:
            ended = wait_for_objects(running, left)
            running = [fd for fd in running if fd not in ended]
    finally:
        for fd in running:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        for fd in pidfds:
            os.close(fd)


def _describe_exit(code: int | None) -> str:
    if code == STATUS_LOST:
        return "exited (its exit status went to another waitpid: this process ignores SIGCHLD or reaps every child)"
    if code is not None and code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


#: The exit code multiprocessing gives a ``forkserver`` worker whose status it could not read
#: from the fork server (its status pipe closed: the server died).
_NO_STATUS = 255
# A start from the fork server fails with these when the server dies or is gone meanwhile: its
# connection refused or cut short, or its process already reaped by another waitpid.
_SERVER_GONE = (EOFError, ConnectionError, ChildProcessError)


def _start_from_fork_server(process: BaseProcess, number: int, total: int) -> int | None:
    """Start ``process`` from this process's fork server; returns the server's process id.

    The server is first made fit (:func:`vecenv.transports.fork_server.prepare`: a dead one is
    replaced, a lower descriptor limit raised); one that dies during the start anyway is
    replaced by a new one and the start tried once more. A start that still fails raises
    :class:`InvalidStateError` naming the server, never the bare ``EOFError`` of its pipe."""
    fork_server.prepare()
    try:
        process.start()
    except _SERVER_GONE as exc:
        pid = fork_server.server_pid()
        if not fork_server.lost(pid):
            raise _server_error(exc, number, total, pid, "ended the start without a process") from None
        try:
            process.start()  # from a new fork server (the failed start left the process unstarted)
        except _SERVER_GONE as again:
            raise _server_error(again, number, total, pid, "died while starting it, and so did a new one") from None
    return fork_server.server_pid()


def _server_error(exc: BaseException, number: int, total: int, pid: int | None, what: str) -> InvalidStateError:
    return InvalidStateError(
        f"cannot start worker {number} of {total}: the fork server (pid {pid}) that starts forkserver "
        f"workers {what} ({type(exc).__name__}: {exc}; its own error, if any, is on stderr). Start "
        "the workers with 'spawn' or 'fork' instead (context=...)"
    )


def _check_descriptors(number: int, total: int, auto: str | None = None) -> None:
    """Raise :class:`DescriptorLimitError` unless :data:`START_DESCRIPTORS` descriptors are free."""
    opened: list[int] = []
    try:
        for _ in range(START_DESCRIPTORS):
            opened.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    except OSError as exc:
        error: OSError = exc
    else:
        return
    finally:
        for fd in opened:
            os.close(fd)
    raise _limit_error(error, number, total, auto) from None


def _limit_error(exc: OSError, number: int, total: int, auto: str | None = None) -> OSError:
    """A clear error for running out of descriptors while starting worker ``number``; any other
    ``OSError`` is returned as it is. ``auto``: how ``num_workers="auto"`` chose ``total`` (the
    user chose no count, so "use fewer workers" would not say how), else ``None``."""
    if exc.errno not in (errno.EMFILE, errno.ENFILE):
        return exc
    soft, count = descriptor_usage()
    if auto is None:
        advice = "Raise the limit (ulimit -n, resource.setrlimit) or use fewer workers"
    else:
        advice = f"{auto}. Raise the limit (ulimit -n, resource.setrlimit), or pass a smaller num_workers explicitly"
    return DescriptorLimitError(
        exc.errno,
        f"cannot start worker {number} of {total}: this process may open {soft} file descriptors "
        f"(RLIMIT_NOFILE) and {count}; starting a worker needs {START_DESCRIPTORS} free and each "
        f"running worker keeps up to {WORKER_DESCRIPTORS} here. {advice}",
    )


class ProcessTransport(Transport):
    """Worker processes started from ``context``, each running :func:`vecenv.worker.loop.worker_main`."""

    shares_memory = True

    def __init__(
        self,
        context: Any,
        *,
        daemon: bool = True,
        pin_cpus: bool = False,
        nice: int = 0,
        observation_mode: Any = SpaceRule.SAME,
        threads: int | None = None,
        first_index: int = 0,
        method_chosen: bool = True,
        auto: str | None = None,
    ) -> None:
        self.context = context  # a multiprocessing context (their Process types differ)
        # How num_workers="auto" chose the count, in words, for a descriptor limit's message.
        self.auto = auto
        # Whether the user chose the start method; where vecenv chose fork, a replacement
        # worker of a process that has started threads since is not forked (see relaunch).
        self.method_chosen = method_chosen
        self.daemon = daemon
        self.pin_cpus = pin_cpus
        # The nice value the workers run at: this process's, plus nice (capped as the kernel
        # caps it), read once: a replacement worker runs at its predecessor's. Given with 0 too:
        # a fork server's child would otherwise keep the server's, from when it started.
        self._nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice)
        self.observation_mode = observation_mode
        self.threads = threads
        # The vector env's number of this transport's worker 0, for names, pinning and messages
        # (1 when the parent hosts the first group: see vecenv.transports.inline).
        self.first_index = first_index
        # Indexed by worker; None until the worker is started.
        self.processes: list[BaseProcess | None] = []
        self.conns: list[Connection | None] = []
        self._pids: list[int | None] = []  # kept after stop(), when a closed process has none
        # Each worker's pidfd (None: none, or a forkserver worker, whose sentinel is the fork
        # server's and tells its exit whatever the worker forked): see the module docstring.
        self._pidfds: list[int | None] = []
        # Each forkserver worker's pidfd, used only to end one that outlived the fork server that
        # started it (see _end_orphans), never to tell its exit.
        self._orphan_pidfds: list[int | None] = []
        self._causes: dict[int, str] = {}
        # The fork server that started each forkserver worker (its process id): a worker whose
        # server died lost its exit status with it (see cause_of_death).
        self._servers: dict[int, int | None] = {}
        self._aborted: str | None = None  # the reason close() from another thread gave (abort)
        self._group_bytes: list[bytes] = []
        # The cores pin_cpus deals out, read once: a replacement worker gets its predecessor's.
        self._cpus: list[int] = pin_cores() if pin_cpus else []
        self._pollers: dict[tuple[int, ...], tuple[dict[int, int], dict[int, int], Any]] = {}
        self._stopped = False
        # Poll before sleeping (parent and workers) only where every process has a core.
        self._awake = Spin(0.0)
        self._torn: set[int] = set()  # workers whose pipe an interrupt may have cut mid-message
        # The step's fast path (vecenv.wire.fastpath): the shared words, and per worker: the
        # replies it owes (a command goes in the word only when it owes none, so nothing on the
        # pipe can be overtaken), the call id of the command posted in its word (or of a ROLLOUT
        # whose empty reply may be posted there) and not yet answered, the messages written to
        # its pipe and the pipe replies seen so far.
        self._control: ControlBlock | None = None
        self._budget = SpinBudget(0.0)
        #: How this transport's waits spin now (set by _rebalance for every live transport).
        self.spin_mode = SpinMode.OFF
        self._owed: list[int] = []
        self._in_word: list[int | None] = []
        #: The command each worker's reply in the word answers (a STEP posted there, or a
        #: ROLLOUT whose empty reply may come there: see vecenv.wire.protocol.allow_word_reply).
        self._word_command: list[Command] = []
        self._pipe_sent: list[int] = []
        self._replies_seen: list[int] = []
        self._words_before_pipes = 0  # returns of replies in the words since the pipes were checked
        #: Each worker's last call id answered (a reply taken twice counts once).
        self._last_answered: list[int | None] = []
        #: Replies read whole when an interrupt (Ctrl+C) came, for the next poll: ``(worker, bytes)``.
        self._kept: list[tuple[int, bytes | bytearray]] = []
        #: Each worker pipe's reader, which keeps a reply read in part for the next wait.
        self.readers: list[ReplyReader | None] = []
        #: The buffer spec every attach message holds, and its pickled form (made at the first
        #: attach, reused for every worker and every replacement).
        self._spec_pickled: tuple[Any, PickledOnce] | None = None

    def launch(self, group_fns: Sequence[Callable[[], Any]]) -> None:
        if not HAVE_MEMFD:
            # Workers must share the parent's resource tracker: one they started themselves
            # would unlink the named block, as "leaked", when they exit.
            resource_tracker.ensure_running()
        workers = len(group_fns)
        self._group_bytes = [pickle_group(fn, self.first_index + i) for i, fn in enumerate(group_fns)]
        self.processes = [None] * workers
        self.conns = [None] * workers
        self._pids = [None] * workers
        self._pidfds = [None] * workers
        self._orphan_pidfds = [None] * workers
        self._owed, self._in_word = [0] * workers, [None] * workers
        self._word_command = [Command.STEP] * workers
        self._pipe_sent, self._replies_seen = [0] * workers, [0] * workers
        self._last_answered = [None] * workers
        self.readers = [None] * workers
        if fastpath.SUPPORTED and workers:
            try:
                with HeldInterrupt():  # made and recorded (closed by close()) as one
                    self._control = ControlBlock.create(workers)
            except OSError as exc:
                raise _limit_error(exc, self.first_index, self.first_index + workers, self.auto) from None
        # The workers and this process (which waits, or steps a group of its own) each a core.
        _rebalance(self)
        for index in range(workers):
            self._start(index)

    def core(self, index: int) -> int | None:
        """The core worker ``index`` is pinned to (``None``: no ``pin_cpus``); it is the vector
        env's worker ``first_index + index`` (:func:`vecenv.machine.pinned_core`)."""
        return pinned_core(self.first_index + index, self._cpus) if self._cpus else None

    def _allow_spin(self, mode: SpinMode) -> None:
        """Let this transport's waits (and its workers') spin on the shared words for up to
        :data:`~vecenv.wire.fastpath.SPIN_LIMIT`, yielding the core each round in
        ``YIELDING`` mode, or not at all; without the fast path, waits poll the pipes for up
        to :data:`~vecenv.wire.pipes.SPIN_SECONDS` only where every process has a core."""
        if not self.processes:
            mode = SpinMode.OFF
        self.spin_mode = mode
        self._awake.seconds = SPIN_SECONDS if mode is SpinMode.FULL else 0.0
        limit = fastpath.SPIN_LIMIT if mode is not SpinMode.OFF else 0.0
        self._budget.limit = limit
        control = self._control
        if control is not None and control.words is not None:
            yields = int(mode is SpinMode.YIELDING)
            for index in range(control.workers):
                control.words[control.slots[index].spin_yields] = yields
                control.words[control.slots[index].spin_ns] = int(limit * 1e9)

    def _start(self, index: int, context: Any = None) -> None:
        context = self.context if context is None else context
        number = self.first_index + index
        _check_descriptors(number, self.first_index + len(self.processes), self.auto)
        try:
            parent_conn, child_conn = context.Pipe(duplex=True)
        except OSError as exc:
            raise _limit_error(exc, number, self.first_index + len(self.processes), self.auto) from None
        PARENT_ENDS.add(parent_conn)
        bound_writes(parent_conn)
        bound_reads(parent_conn)
        self.readers[index] = ReplyReader(parent_conn)  # nothing read of the new pipe yet
        control = self._control
        if control is not None:
            control.reset(index)
        self._owed[index], self._in_word[index] = 1, None  # its Hello is owed
        self._pipe_sent[index] = self._replies_seen[index] = 0
        self._last_answered[index] = None
        self._kept = [(i, data) for i, data in self._kept if i != index]  # the old process's
        forkserver = context.get_start_method() == "forkserver"
        options = WorkerOptions(
            self.observation_mode,
            self.core(index),
            self.threads,
            self.spin,
            nice=self._nice,
            slot=None if control is None else index,
            slots=0 if control is None else control.workers,
            # The kernel's "parent died" signal follows the thread that forked the worker: ours
            # when it is the main thread (the process outlives none of its threads), not one that
            # may end while the vector env lives on; nor a fork server, which outlives us.
            death_signal=not forkserver and threading.current_thread() is threading.main_thread(),
            # A fork server's children inherit the environment it started with, not ours now.
            environ=dict(os.environ) if forkserver else None,
        )
        process = context.Process(
            target=worker_main,
            args=(number, child_conn, self._group_bytes[index], options),
            name=f"vecenv-worker-{number}",
            daemon=self.daemon,
        )
        self.conns[index] = parent_conn
        unset = multiprocessing.get_start_method(allow_none=True) is None
        total = self.first_index + len(self.processes)
        try:
            # Ctrl+C held from the start to the record: a fork runs Python's at-fork hooks, where
            # a KeyboardInterrupt is printed as "Exception ignored" and lost (the program runs
            # on) and can leave a hook's lock held (logging's: the next thread to log waits
            # forever); and a process started but not yet recorded would be left behind.
            with HeldInterrupt():
                if forkserver:
                    self._servers[index] = _start_from_fork_server(process, number, total)
                else:
                    process.start()
                self.processes[index] = process
                self._pids[index] = process.pid
                self._pidfds[index] = None if forkserver else _open_pidfd(process.pid)
                self._orphan_pidfds[index] = _open_pidfd(process.pid) if forkserver else None
        except OSError as exc:
            raise _limit_error(exc, number, total, self.auto) from None
        finally:
            child_conn.close()
            if unset:
                # Starting a forkserver records the default method as if the user had chosen it,
                # which would turn off check_context's threaded-parent rule for later vector envs.
                multiprocessing.set_start_method(None, force=True)

    def relaunch(self, worker: int) -> None:
        old, conn = self._process(worker), self._conn(worker)
        _end(old, self._pidfds[worker])
        old.close()
        conn.close()
        self._close_pidfd(worker)
        self._end_orphan([worker])
        # Forgotten before the new one starts: if it cannot (no descriptors, no current
        # directory), nothing closed is left for stop() to close again.
        self.processes[worker] = self.conns[worker] = None
        self._causes.pop(worker, None)
        self._torn.discard(worker)
        self._pollers.clear()
        self._start(worker, self._replacement_context())
        if self._aborted is not None:  # ended by close() from another thread meanwhile
            self._causes[worker] = self._aborted
            self._process(worker).kill()

    def _replacement_context(self) -> Any:
        """The context a replacement worker starts from: the workers', unless vecenv chose fork
        and this process has started other threads since, as a training script does (a
        TensorBoard writer, a tqdm bar): forking it now could copy a lock one of them holds, so
        the replacement starts as a threaded parent's workers would (``forkserver``). The method
        Python may have recorded since (a tqdm bar records ``fork``) is not the user's choice
        for this vector env, whose method vecenv chose: it is not asked again."""
        if self.method_chosen or self.context.get_start_method() != "fork":
            return self.context
        method = own_start_method()
        if method == "fork":
            return self.context
        return multiprocessing.get_context(guard_main(method, False, "a replacement worker", "context"))

    def attach(self, worker: int, attach: Attach, buffers: Buffers, timeout: float | None = None) -> None:
        conn = self._conn(worker)
        block_fd = None
        if Buffers.needs_fd(attach.buffers):
            assert buffers.block is not None and buffers.block.fd is not None
            block_fd = buffers.block.fd
        try:
            # What Connection.send writes, then the descriptors, each bounded by ``timeout``.
            send_within(conn, self._encode_attach(attach), block_fd, timeout)
            if self._control is not None:
                assert self._control.fd is not None
                send_handle_within(conn, self._control.fd, timeout)
        except SendTimeout as exc:  # a new worker that reads nothing cannot be attached
            self._tear(worker, f"was ended: it {exc} while being attached")
            raise WorkerGone from None
        except OSError:  # it died after its Hello
            self._process(worker).join(1.0)
            raise WorkerGone from None

    def _encode_attach(self, attach: Attach) -> memoryview:
        """``attach`` as ``Connection.send`` pickles it, with its buffer spec pickled only once
        for all workers (the worker unpickles the spec itself, as before). Not copied into a
        ``bytes``: with a large observation space the message is tens of MiB."""
        spec = attach.buffers
        if self._spec_pickled is None or self._spec_pickled[0] is not spec:
            self._spec_pickled = (spec, PickledOnce(spec))
        message = dataclasses.replace(attach, buffers=self._spec_pickled[1])
        return reduction.ForkingPickler.dumps(message)

    def release_fds(self) -> None:
        if self._control is not None:
            self._control.release_fd()

    def encode(self, command: Command, call_id: int, payload: Any) -> bytes | WithFd:
        return encode_for_pipe(command, call_id, payload)

    def send(self, worker: int, message: bytes | WithFd, timeout: float | None = None) -> None:
        if worker in self._torn:
            raise WorkerGone
        room = not self._owed[worker]  # it took every earlier command (see send_within)
        if self._control is not None and room:
            if self._budget.limit and is_bare_step(message):
                assert isinstance(message, bytes)
                self._post(worker, call_id_of(message))
                return
            flagged = allow_word_reply(message)
            if flagged is not None:  # its empty reply may come in the done word: watched there
                message = flagged
                self._in_word[worker] = call_id_of(flagged.data if isinstance(flagged, WithFd) else flagged)
                self._word_command[worker] = Command.ROLLOUT
        self._owed[worker] += 1  # before it is out: an interrupt may come once it is
        progress = SendProgress()
        try:
            self._write(worker, message, timeout, progress=progress, room=room)
        except SendTimeout:
            self._not_sent(worker)  # none of it went: the worker owes nothing for it
            raise
        except BaseException:
            if progress.state is Progress.NOTHING:  # Ctrl+C before any of it went
                self._not_sent(worker)
            raise

    def _not_sent(self, worker: int) -> None:
        """None of the command just meant for ``worker`` went: it owes nothing for it."""
        self._owed[worker] -= 1
        if not self._owed[worker]:
            self._in_word[worker] = None

    def _live_words(self) -> tuple[ControlBlock, memoryview]:
        """The control block and its words. The fast path's methods run only while it is set
        up; a call still running when :meth:`stop` unmapped it (``close()`` from another
        thread) ends with :class:`ClosedEnvironmentError`."""
        control = self._control
        words = None if control is None else control.words
        if control is None or words is None:
            raise ClosedEnvironmentError("the workers' shared control words are closed: close() was called")
        return control, words

    def _post(self, worker: int, call_id: int) -> None:
        """Post a payload-free STEP in ``worker``'s command word; wake the worker if it sleeps
        (the waker's side of the protocol in :mod:`vecenv.wire.fastpath`)."""
        control, words = self._live_words()
        slot = control.slots[worker]
        at = slot.command
        try:
            self._owed[worker] = 1
            self._in_word[worker], self._word_command[worker] = call_id, Command.STEP
            words[slot.posted_at] = time.perf_counter_ns()
            words[at] = call_id
            fence()
            asleep = words[slot.sleeping]
        except BaseException:
            # An interrupt between these lines: finish the post (storing it twice is harmless:
            # the worker takes a call id once) and wake the worker whatever it is doing.
            self._owed[worker], self._in_word[worker] = 1, call_id
            words[at] = call_id
            with contextlib.suppress(WorkerGone):
                self._wake(worker)
            raise
        if asleep:
            self._wake(worker)

    def _wake(self, worker: int) -> None:
        """Write a ``WAKE`` to ``worker``'s pipe. It carries nothing, and its few bytes go in
        one write, whole or not at all; the worker drops every ``WAKE`` it reads. So an
        interrupt (Ctrl+C) during this write cuts no message and must not end the worker: the
        ``WAKE`` is written once more (it may not have gone), and the interrupt goes on."""
        try:
            self._write(worker, WAKE_COMMAND, send_timeout(), cuttable=False)
        except (WorkerGone, SendTimeout):
            raise
        except BaseException:
            with contextlib.suppress(WorkerGone, SendTimeout):
                self._write(worker, WAKE_COMMAND, send_timeout(), cuttable=False)
            raise

    def _write(
        self,
        worker: int,
        message: bytes | WithFd,
        timeout: float | None = None,
        cuttable: bool = True,
        progress: SendProgress | None = None,
        room: bool = False,
    ) -> None:
        """Write one message to ``worker``'s pipe (and count it in the hint its spin reads); a
        worker that takes none of it for ``timeout`` seconds is stuck (see
        :mod:`vecenv.transports.sending`). An interrupt during the write ends the worker when
        part of the message may be in its pipe (``progress``, ``room``: see
        :func:`~vecenv.transports.sending.send_within`), unless ``cuttable`` is false: a
        message that one write sends whole or not at all."""
        if progress is None:
            progress = SendProgress()
        conn = self._conn(worker)
        data, fd = (message.data, message.fd) if isinstance(message, WithFd) else (message, None)
        try:
            send_within(conn, data, fd, timeout, progress, room)
        except SendTimeout as exc:
            if not exc.written:
                raise  # nothing of it is in the pipe: the worker is as it was
            # Half a command in its pipe: it can never be talked to again.
            self._tear(worker, f"was ended: it {exc} (busy with an earlier call: stuck in env code?)")
            raise WorkerGone from None
        except (OSError, EOFError):  # a broken or reset pipe: the worker is gone
            self._process(worker).join(1.0)
            raise WorkerGone from None
        except BaseException:
            if cuttable and progress.state is Progress.PART:
                self._tear(worker)  # KeyboardInterrupt may have left half the message in the pipe
            raise
        control = self._control
        if control is not None and control.words is not None:
            self._pipe_sent[worker] += 1
            control.words[control.slots[worker].pipe_sent] = self._pipe_sent[worker]

    def _tear(
        self, worker: int, cause: str = "was ended: an interrupt (Ctrl+C) cut a message on its pipe in two"
    ) -> None:
        """A signal (Ctrl+C) or a stalled send cut a read or write on ``worker``'s pipe short:
        half a message may be left in it, and the next read would take its tail for a header and
        wait forever. The worker can no longer be talked to, so it is ended now and reported dead
        at the next poll."""
        self._torn.add(worker)
        self._causes[worker] = cause
        process = self._process(worker)
        if _still_running(process, self._pidfds[worker]):
            process.kill()

    def poll(self, workers: Sequence[int], timeout: float | None) -> list[Event]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self._poll_processes(workers, timeout)
            if found:
                return found
            if deadline is not None:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    return []

    def _poll_processes(self, workers: Sequence[int], timeout: float | None) -> list[Event]:
        """One wait; it may wake for a descriptor that yields no event yet (``[]``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        torn = [i for i in workers if i in self._torn]
        if torn:
            for i in torn:
                self._process(i).join()
            return [Death(i) for i in torn]
        if self._kept:  # replies read whole when an interrupt came: before anything newer
            found = self._take_kept(workers)
            if found:
                return found
        pipes, sentinels, poller = self._poller(workers)
        events: list[Event] = []
        if self._control is None or (not self._budget.limit and not any(self._in_word[i] is not None for i in workers)):
            # A reply read while awake spares its writer the wake-up (see vecenv.worker.loop._serve).
            ready = self._awake.poll(poller, timeout)
            if not ready:
                ready = poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000)))
        else:
            events = self._word_replies(workers)
            if events:
                if not self._pipes_due(workers, len(events)):
                    return events
                ready = poller.poll(0)
            else:
                ready = self._wait_fast(workers, poller, timeout)
                # Read after the wait: a worker seen dead has made all its stores by then.
                events = self._word_replies(workers)
        hung_up: set[int] = set()
        # Pipes first: a reply may precede an exit. One message per readable pipe; the next
        # poll reports the pipe again while more is waiting. Each is kept as soon as it is
        # read whole, so an interrupt after that loses nothing: the next poll takes it.
        reading = [pipes[fd] for fd, _ in ready if fd in pipes]
        if reading:
            with HeldInterrupt():
                for worker in reading:
                    try:
                        data = self._reader(worker).read(deadline)
                    except (EOFError, OSError):
                        hung_up.add(worker)
                        continue
                    except BaseException:
                        # A second Ctrl+C, or another signal's handler, cut the read short.
                        self._tear(worker)
                        raise
                    if data is None:  # the rest of it did not come in time: read on at the next wait
                        continue
                    self._kept.append((worker, data))
            events.extend(self._take_kept(reading))
        # A worker's sentinel and pidfd may both be ready: one death each.
        for index in dict.fromkeys(sentinels[fd] for fd, _ in ready if fd in sentinels):
            if index not in hung_up and not self._conn(index).poll():
                self._process(index).join()
                events.append(Death(index))
        for index in hung_up:
            # The pipe is gone, so the worker can never answer, whether or not it has exited.
            process = self._process(index)
            _wait_exit(process, self._pidfds[index], _HANGUP_GRACE)
            if _still_running(process, self._pidfds[index]):
                process.kill()
                process.join()
                self._causes[index] = "closed its pipe but did not exit (killed)"
            events.append(Death(index))
        return events

    def _take_kept(self, workers: Sequence[int]) -> list[Event]:
        """The replies of ``workers`` kept across an interrupt, taken (each counts once)."""
        kept = [entry for entry in self._kept if entry[0] in workers]
        found: list[Event] = [reply for i, data in kept if (reply := self._reply(i, data)) is not None]
        self._kept = [entry for entry in self._kept if entry not in kept]
        return found

    def _reply(self, worker: int, data: bytes | bytearray) -> Reply | None:
        """The reply ``worker`` wrote (``None``: a wake-up's, whose reply is in the words),
        counted as answered. Taken again after an interrupt, it counts once."""
        if data == WAKE_REPLY:
            return None
        call_id, ok, result = decode_reply(data)
        self._answered(worker, call_id)
        return Reply(worker, call_id, ok, result)

    def _answered(self, worker: int, call_id: int) -> None:
        if self._last_answered[worker] == call_id:  # a kept reply taken again (see _reply)
            return
        self._last_answered[worker] = call_id
        self._owed[worker] = max(0, self._owed[worker] - 1)
        if self._in_word[worker] == call_id:
            self._in_word[worker] = None

    def _word_replies(self, workers: Sequence[int]) -> list[Event]:
        """The empty replies posted in the done words of ``workers`` (no system call)."""
        control, words = self._live_words()
        events: list[Event] = []
        slots = control.slots
        for index in workers:
            call_id = self._in_word[index]
            if call_id is not None and words[slots[index].done] == call_id:
                self._answered(index, call_id)
                events.append(Reply(index, call_id, True, empty_reply(self._word_command[index])))
        if len(events) > 1:  # in the order they were posted: "the first to finish" (recv's) is that
            events.sort(key=lambda reply: words[slots[reply.worker].done_at])
        return events

    def _pipes_due(self, workers: Sequence[int], answered: int) -> bool:
        """Whether the pipes of ``workers`` are to be read beside the ``answered`` replies found
        in their words: where some of them have not answered there, and one's replies word says
        it wrote to its pipe since the last look, or :data:`_PIPE_CHECK_EVERY` such returns went
        by without a look (no system call either way)."""
        if answered == len(workers):
            return False
        control, words = self._live_words()
        news = False
        for index in workers:  # each one's look taken, whatever the others say
            news = self._replied_on_pipe(index, words, control.slots[index].replies) or news
        if news or self._words_before_pipes >= _PIPE_CHECK_EVERY:
            self._words_before_pipes = 0
            return True
        self._words_before_pipes += 1
        return False

    def _news(self, watched: list[tuple[int, int, int, int]]) -> int:
        """What the words of the watched workers say: 1 a reply in a done word, 2 a reply
        written to a pipe, 0 nothing yet. ``watched``: (worker, done word, call id, replies word)."""
        words = self._live_words()[1]
        for index, done_at, call_id, replies_at in watched:
            if words[done_at] == call_id:
                return 1
            if self._replied_on_pipe(index, words, replies_at):
                return 2
        return 0

    def _replied_on_pipe(self, index: int, words: memoryview, replies_at: int) -> bool:
        """Whether worker ``index``'s replies word moved since the last look (it wrote a reply
        to its pipe), taking this look."""
        replies = words[replies_at]
        if replies == self._replies_seen[index]:
            return False
        self._replies_seen[index] = replies
        return True

    def _wait_fast(self, workers: Sequence[int], poller: Any, timeout: float | None) -> list[tuple[int, int]]:
        """Spin on the words of ``workers`` for the budget, checking the pipes and sentinels
        every few rounds, then sleep on them (the sleeper's side of the protocol in
        :mod:`vecenv.wire.fastpath`). Returns what the pipes and sentinels report ready; the
        caller reads the done words after it."""
        control, words = self._live_words()
        if timeout == 0:
            return poller.poll(0)
        watched: list[tuple[int, int, int, int]] = []
        # A rollout runs for many steps: its wait neither spins nor counts among the steps' waits.
        rollout = False
        for i in workers:
            call_id = self._in_word[i]
            slot = control.slots[i]
            watched.append((i, slot.done, _NOTHING if call_id is None else call_id, slot.replies))
            rollout = rollout or (call_id is not None and self._word_command[i] is Command.ROLLOUT)
        clock = time.perf_counter
        start, start_ns = clock(), time.perf_counter_ns()
        spin = 0.0 if rollout else self._budget.seconds(timeout)
        # Yielding, being descheduled is the point; else it says this core is not ours alone.
        preempted = math.inf if self.spin_mode is SpinMode.YIELDING else SpinBudget.PREEMPTED
        give_way = os.sched_yield if self.spin_mode is SpinMode.YIELDING else _stay
        rounds = 0
        caught = False
        ready: list[tuple[int, int]] = []
        try:
            before = start
            while spin:
                now = clock()
                # Out of budget, or descheduled where nothing asked for it: a miss.
                if now - start >= spin or now - before > preempted:
                    break
                before = now
                give_way()
                news = self._news(watched)
                if news:
                    caught = True
                    return poller.poll(0) if news == 2 else []
                rounds += 1
                if rounds % _SENTINEL_ROUNDS == 0:
                    ready = poller.poll(0)
                    if ready:
                        caught = True
                        return ready
            words[fastpath.PARENT_SLEEPING] = 1
            fence()
            try:
                if self._news(watched):
                    return poller.poll(0)
                limit = fastpath.RECHECK_SECONDS if timeout is None else min(timeout, fastpath.RECHECK_SECONDS)
                return poller.poll(max(0, math.ceil(limit * 1000)))
            finally:
                words[fastpath.PARENT_SLEEPING] = 0
        finally:
            if not rollout:
                # Up to when a worker posted its reply in the words (see SpinBudget.record).
                end = self._posted_at(watched) or time.perf_counter_ns()
                self._budget.record(max(0, end - start_ns) * 1e-9, bool(spin), caught)

    def _posted_at(self, watched: list[tuple[int, int, int, int]]) -> int:
        """When the first of the replies now in the done words was posted (0: none is)."""
        control, words = self._live_words()
        times = [words[control.slots[i].done_at] for i, done_at, call_id, _ in watched if words[done_at] == call_id]
        return min(times, default=0)

    @property
    def spin(self) -> float:
        """Seconds parent and workers may poll their pipes before sleeping, where the step's fast
        path does not run (0: more processes than cores, and then nobody spins on the shared
        words either)."""
        return self._awake.seconds

    def _poller(self, workers: Sequence[int]) -> tuple[dict[int, int], dict[int, int], Any]:
        """A poll object over the pipes and the exit signs (sentinels, pidfds) of ``workers``,
        kept for the next wait."""
        key = tuple(workers)
        cached = self._pollers.get(key)
        if cached is None:
            if len(self._pollers) > 64:
                self._pollers.clear()
            pipes = {self._conn(i).fileno(): i for i in workers}
            sentinels = {self._process(i).sentinel: i for i in workers}
            sentinels.update({fd: i for i in workers if (fd := self._pidfds[i]) is not None})
            poller = select.poll()
            for fd in itertools.chain(pipes, sentinels):
                poller.register(fd, select.POLLIN)
            cached = self._pollers[key] = (pipes, sentinels, poller)
        return cached

    def _reader(self, worker: int) -> ReplyReader:
        reader = self.readers[worker]
        assert reader is not None, f"worker {worker} has no pipe"
        return reader

    def _conn(self, worker: int) -> Connection:
        conn = self.conns[worker]
        assert conn is not None, f"worker {worker} has no pipe"
        return conn

    def _process(self, worker: int) -> BaseProcess:
        process = self.processes[worker]
        assert process is not None, f"worker {worker} has no process"
        return process

    def cause_of_death(self, worker: int) -> DeathCause:
        process = self._process(worker)
        _still_running(process, self._pidfds[worker])  # its status, if another waitpid took it
        code = process.exitcode
        server = self._servers.get(worker)
        if code == _NO_STATUS and server is not None and worker not in self._causes and fork_server.died(server):
            # multiprocessing's code for a status it could not read: the server held it.
            how = (
                f"lost its fork server: the forkserver process (pid {server}) that started it died, "
                "and the worker's exit status with it; new workers start from a new fork server"
            )
            return DeathCause(how, None)
        return DeathCause(self._causes.get(worker, _describe_exit(code)), None if code == STATUS_LOST else code)

    def ended(self, workers: Sequence[int]) -> list[int]:
        found = []
        for index in workers:
            process = self.processes[index]
            if process is not None and not _still_running(process, self._pidfds[index]):
                found.append(index)
        return found

    def kill(self) -> None:
        for process, pidfd in zip(self.processes, self._pidfds):
            if process is not None and _still_running(process, pidfd):
                process.kill()

    def abort(self, reason: str) -> None:
        # Set first: a worker relaunched while this runs is either in the list below or sees it.
        self._aborted = reason
        for index, process in enumerate(self.processes):
            if process is not None:  # (exitcode would reap it here, under the waiting thread)
                self._causes[index] = reason
                try:
                    process.kill()  # a signal: safe while another thread polls this process
                except ValueError:  # closed meanwhile by stop()
                    pass

    def stop(self, deadline: float, closing: Sequence[int] = ()) -> None:
        if self._stopped:
            return
        self._stopped = True
        # (The pidfds are read by index: a worker's is closed with it, at the end.)
        processes = [(i, p) for i, p in enumerate(self.processes) if p is not None]
        try:
            for index in closing:
                process = self.processes[index]
                if process is not None:
                    _wait_exit(process, self._pidfds[index], max(0.0, deadline - time.monotonic()))
            for index, process in processes:
                if _still_running(process, self._pidfds[index]):
                    process.terminate()
            kill_deadline = time.monotonic() + KILL_GRACE
            for index, process in processes:
                _wait_exit(process, self._pidfds[index], max(0.0, kill_deadline - time.monotonic()))
        finally:
            # Also after Ctrl+C in the waits above: the rest are killed at once, every worker
            # reaped and every descriptor closed before the interrupt goes on.
            for index, process in processes:
                _end(process, self._pidfds[index])
                process.close()
                self._close_pidfd(index)
            for conn in self.conns:
                if conn is not None:
                    conn.close()
            self._end_orphan([index for index, _ in processes])
            self._pollers.clear()
            if self._control is not None:
                self._control.close()
            _rebalance()

    def _close_pidfd(self, worker: int, orphan: bool = False) -> None:
        fd, self._pidfds[worker] = self._pidfds[worker], None
        if fd is not None:
            os.close(fd)
        if orphan:
            fd, self._orphan_pidfds[worker] = self._orphan_pidfds[worker], None
            if fd is not None:
                os.close(fd)

    def _end_orphan(self, workers: Sequence[int]) -> None:
        """End those of ``workers`` (stopped, their pipes closed) that outlived their fork server."""
        pidfds = []
        for worker in workers:
            fd, self._orphan_pidfds[worker] = self._orphan_pidfds[worker], None
            if fd is not None:
                pidfds.append(fd)
        if pidfds:
            _end_orphans(pidfds, _HANGUP_GRACE)

    @property
    def pids(self) -> list[int | None]:
        """Each worker's process id (``None`` before it is started), also after :meth:`stop`."""
        return list(self._pids)
