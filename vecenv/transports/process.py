"""The process transport: one worker process per group, a duplex pipe to each.

(A group hosted by the parent itself is :mod:`vecenv.transports.inline`, which wraps this
transport for the other groups.)

The parent polls the pipes *and* the process sentinels together, so a worker that dies is
reported within the wait, never waited on forever; a pipe that hangs up while its process lingers
(a non-daemon thread keeps it alive) is a dead worker too, so no wait can spin on it. The shared
block reaches each worker as a file descriptor passed over its pipe (Linux memfd), or by name.
"""

from __future__ import annotations

import errno
import itertools
import math
import multiprocessing
import os
import resource
import select
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing import reduction, resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import cloudpickle

from vecenv.errors import DescriptorLimitError
from vecenv.machine import available_cpus
from vecenv.transports.base import Death, Event, Reply, Transport, WorkerGone
from vecenv.wire.buffers import HAVE_MEMFD, Buffers
from vecenv.wire.pipes import PARENT_ENDS, SPIN_SECONDS, Spin
from vecenv.wire.protocol import Attach, Command, WithFd, decode_reply, encode_for_pipe
from vecenv.worker.core import WorkerOptions
from vecenv.worker.loop import worker_main

__all__ = ["ProcessTransport", "KILL_GRACE", "START_DESCRIPTORS"]

#: After terminate(), how long to wait before SIGKILL.
KILL_GRACE = 1.0
#: Descriptors that starting one worker may hold open at once in this process (its pipe's two
#: ends, multiprocessing's two status pipes, the forkserver's socket or spawn's exec pipe, the
#: resource tracker's pipe the first time). They are checked free before each start, so that
#: the limit is never met half-way through one (CPython would leave a pipe open).
START_DESCRIPTORS = 10
# A worker whose pipe hung up gets this long to exit on its own before it is killed.
_HANGUP_GRACE = 0.5


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _check_descriptors(number: int, total: int) -> None:
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
    raise _limit_error(error, number, total) from None


def _limit_error(exc: OSError, number: int, total: int) -> OSError:
    """A clear error for running out of descriptors while starting worker ``number``; any other
    ``OSError`` is returned as it is."""
    if exc.errno not in (errno.EMFILE, errno.ENFILE):
        return exc
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        count = f"{len(os.listdir('/proc/self/fd')) - 1} are open"
    except OSError:
        count = "all are in use"
    return DescriptorLimitError(
        exc.errno,
        f"cannot start worker {number} of {total}: this process may open {soft} file descriptors "
        f"(RLIMIT_NOFILE) and {count}; starting a worker needs {START_DESCRIPTORS} free and each "
        "running worker keeps 3 here. Raise the limit (ulimit -n, resource.setrlimit) or use fewer workers",
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
        observation_mode: Any = "same",
        threads: int | None = None,
        first_index: int = 0,
    ) -> None:
        self.context = context  # a multiprocessing context (their Process types differ)
        self.daemon = daemon
        self.pin_cpus = pin_cpus
        self.observation_mode = observation_mode
        self.threads = threads
        # The vector env's number of this transport's worker 0, for names, pinning and messages
        # (1 when the parent hosts the first group: see vecenv.transports.inline).
        self.first_index = first_index
        # Indexed by worker; None until the worker is started.
        self.processes: list[BaseProcess | None] = []
        self.conns: list[Connection | None] = []
        self._pids: list[int | None] = []  # kept after stop(), when a closed process has none
        self._causes: dict[int, str] = {}
        self._group_bytes: list[bytes] = []
        self._cpus: list[int] = []
        self._pollers: dict[tuple[int, ...], tuple[dict[int, int], dict[int, int], Any]] = {}
        self._stopped = False
        # Poll before sleeping (parent and workers) only where every process has a core.
        self._awake = Spin(0.0)
        self._torn: set[int] = set()  # workers whose pipe an interrupt may have cut mid-message

    def launch(self, group_fns: Sequence[Callable[[], Any]]) -> None:
        if not HAVE_MEMFD:
            # Workers must share the parent's resource tracker: one they started themselves
            # would unlink the named block, as "leaked", when they exit.
            resource_tracker.ensure_running()
        self._cpus = sorted(os.sched_getaffinity(0)) if self.pin_cpus else []
        # The workers and this process (which waits, or steps a group of its own) each a core.
        workers = len(group_fns)
        self._awake = Spin(SPIN_SECONDS if 0 < workers and workers + 1 <= available_cpus() else 0.0)
        self._group_bytes = [cloudpickle.dumps(group_fn) for group_fn in group_fns]
        self.processes = [None] * workers
        self.conns = [None] * workers
        self._pids = [None] * workers
        for index in range(workers):
            self._start(index)

    def _start(self, index: int) -> None:
        number = self.first_index + index
        _check_descriptors(number, self.first_index + len(self.processes))
        try:
            parent_conn, child_conn = self.context.Pipe(duplex=True)
        except OSError as exc:
            raise _limit_error(exc, number, self.first_index + len(self.processes)) from None
        PARENT_ENDS.add(parent_conn)
        cpus = self._cpus
        options = WorkerOptions(
            self.observation_mode, cpus[number % len(cpus)] if cpus else None, self.threads, self.spin
        )
        process = self.context.Process(
            target=worker_main,
            args=(number, child_conn, self._group_bytes[index], options),
            name=f"vecenv-worker-{number}",
            daemon=self.daemon,
        )
        self.conns[index] = parent_conn
        unset = multiprocessing.get_start_method(allow_none=True) is None
        try:
            process.start()
        except OSError as exc:
            raise _limit_error(exc, number, self.first_index + len(self.processes)) from None
        finally:
            child_conn.close()
            if unset:
                # Starting a forkserver records the default method as if the user had chosen it,
                # which would turn off check_context's threaded-parent rule for later vector envs.
                multiprocessing.set_start_method(None, force=True)
        self.processes[index] = process
        self._pids[index] = process.pid

    def relaunch(self, worker: int) -> None:
        old, conn = self._process(worker), self._conn(worker)
        if old.is_alive():
            old.kill()
        old.join()
        old.close()
        conn.close()
        self._causes.pop(worker, None)
        self._torn.discard(worker)
        self._pollers.clear()
        self._start(worker)

    def attach(self, worker: int, attach: Attach, buffers: Buffers) -> None:
        conn = self._conn(worker)
        try:
            conn.send(attach)
            if Buffers.needs_fd(attach.buffers):
                assert buffers.block is not None and buffers.block.fd is not None
                reduction.send_handle(conn, buffers.block.fd, self._process(worker).pid)
        except OSError:  # it died after its Hello
            self._process(worker).join(1.0)
            raise WorkerGone from None

    def encode(self, command: Command, call_id: int, payload: Any) -> bytes | WithFd:
        return encode_for_pipe(command, call_id, payload)

    def send(self, worker: int, message: bytes | WithFd) -> None:
        conn = self._conn(worker)
        if worker in self._torn:
            raise WorkerGone
        try:
            if isinstance(message, WithFd):
                conn.send_bytes(message.data)
                reduction.send_handle(conn, message.fd, self._process(worker).pid)
            else:
                conn.send_bytes(message)
        except (OSError, EOFError):  # a broken or reset pipe: the worker is gone
            self._process(worker).join(1.0)
            raise WorkerGone from None
        except BaseException:
            self._tear(worker)  # KeyboardInterrupt may have left half the message in the pipe
            raise

    def _tear(self, worker: int) -> None:
        """A signal (Ctrl+C) cut a read or write on ``worker``'s pipe short: half a message may be
        left in it, and the next read would take its tail for a header and wait forever. The
        worker can no longer be talked to, so it is ended now and reported dead at the next poll."""
        self._torn.add(worker)
        self._causes[worker] = "was ended: an interrupt (Ctrl+C) cut a message on its pipe in two"
        process = self._process(worker)
        if process.is_alive():
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
        torn = [i for i in workers if i in self._torn]
        if torn:
            for i in torn:
                self._process(i).join()
            return [Death(i) for i in torn]
        pipes, sentinels, poller = self._poller(workers)
        # A reply read while awake spares its writer the wake-up (see vecenv.worker.loop._serve).
        ready = self._awake.poll(poller, timeout)
        if not ready:
            ready = poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000)))
        events: list[Event] = []
        hung_up: set[int] = set()
        # Pipes first: a reply may precede an exit. One message per readable pipe; the next
        # poll reports the pipe again while more is waiting.
        for fd, _ in ready:
            index = pipes.get(fd)
            if index is None:
                continue
            try:
                events.append(Reply(index, *decode_reply(self._conn(index).recv_bytes())))
            except (EOFError, OSError):
                hung_up.add(index)
            except BaseException:
                self._tear(index)
                raise
        for fd, _ in ready:
            index = sentinels.get(fd)
            if index is not None and index not in hung_up and not self._conn(index).poll():
                self._process(index).join()
                events.append(Death(index))
        for index in hung_up:
            # The pipe is gone, so the worker can never answer, whether or not it has exited.
            process = self._process(index)
            process.join(_HANGUP_GRACE)
            if process.is_alive():
                process.kill()
                process.join()
                self._causes[index] = "closed its pipe but did not exit (killed)"
            events.append(Death(index))
        return events

    @property
    def spin(self) -> float:
        """Seconds parent and workers poll before sleeping (0: more processes than cores)."""
        return self._awake.seconds

    def _poller(self, workers: Sequence[int]) -> tuple[dict[int, int], dict[int, int], Any]:
        """A poll object over the pipes and sentinels of ``workers``, kept for the next wait."""
        key = tuple(workers)
        cached = self._pollers.get(key)
        if cached is None:
            if len(self._pollers) > 64:
                self._pollers.clear()
            pipes = {self._conn(i).fileno(): i for i in workers}
            sentinels = {self._process(i).sentinel: i for i in workers}
            poller = select.poll()
            for fd in itertools.chain(pipes, sentinels):
                poller.register(fd, select.POLLIN)
            cached = self._pollers[key] = (pipes, sentinels, poller)
        return cached

    def _conn(self, worker: int) -> Connection:
        conn = self.conns[worker]
        assert conn is not None, f"worker {worker} has no pipe"
        return conn

    def _process(self, worker: int) -> BaseProcess:
        process = self.processes[worker]
        assert process is not None, f"worker {worker} has no process"
        return process

    def cause_of_death(self, worker: int) -> tuple[str, int | None]:
        code = self._process(worker).exitcode
        return self._causes.get(worker, _describe_exit(code)), code

    def kill(self) -> None:
        for process in self.processes:
            if process is not None and process.is_alive():
                process.kill()

    def abort(self, reason: str) -> None:
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
        processes = [p for p in self.processes if p is not None]
        for index in closing:
            process = self.processes[index]
            if process is not None:
                process.join(max(0.0, deadline - time.monotonic()))
        for process in processes:
            if process.is_alive():
                process.terminate()
        kill_deadline = time.monotonic() + KILL_GRACE
        for process in processes:
            process.join(max(0.0, kill_deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
            process.close()
        for conn in self.conns:
            if conn is not None:
                conn.close()
        self._pollers.clear()

    @property
    def pids(self) -> list[int | None]:
        """Each worker's process id (``None`` before it is started), also after :meth:`stop`."""
        return list(self._pids)
