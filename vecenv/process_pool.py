"""The process transport: one worker process per group, a duplex pipe to each.

The parent polls the pipes *and* the process sentinels together, so a worker that dies is
reported within the wait, never waited on forever; a pipe that hangs up while its process lingers
(a non-daemon thread keeps it alive) is a dead worker too, so no wait can spin on it. The shared
block reaches each worker as a file descriptor passed over its pipe (Linux memfd), or by name.
"""

from __future__ import annotations

import itertools
import math
import os
import select
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing import reduction, resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

import cloudpickle

from vecenv.buffers import HAVE_MEMFD, Buffers
from vecenv.pool import Death, Reply, Transport, WorkerGone
from vecenv.protocol import Attach, Command, decode_reply, encode_command
from vecenv.worker import PARENT_ENDS, WorkerOptions, worker_main

__all__ = ["ProcessTransport", "KILL_GRACE"]

#: After terminate(), how long to wait before SIGKILL.
KILL_GRACE = 1.0
# A worker whose pipe hung up gets this long to exit on its own before it is killed.
_HANGUP_GRACE = 0.5


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class ProcessTransport(Transport):
    """Worker processes started from ``context``, each running :func:`vecenv.worker.worker_main`."""

    shares_memory = True

    def __init__(self, context: BaseContext, *, daemon: bool = True, pin_cpus: bool = False,
                 observation_mode: Any = "same", threads: int | None = None) -> None:
        self.context = context
        self.daemon = daemon
        self.pin_cpus = pin_cpus
        self.observation_mode = observation_mode
        self.threads = threads
        self.processes: list[BaseProcess] = []
        self.conns: list[Connection] = []
        self._causes: dict[int, str] = {}
        self._pollers: dict[tuple[int, ...], tuple[dict[int, int], dict[int, int], Any]] = {}
        self._stopped = False

    def launch(self, group_fns: Sequence[Callable[[], Any]]) -> None:
        if not HAVE_MEMFD:
            # Workers must share the parent's resource tracker: one they started themselves
            # would unlink the named block, as "leaked", when they exit.
            resource_tracker.ensure_running()
        cpus = sorted(os.sched_getaffinity(0)) if self.pin_cpus else []
        for index, group_fn in enumerate(group_fns):
            parent_conn, child_conn = self.context.Pipe(duplex=True)
            PARENT_ENDS.add(parent_conn)
            options = WorkerOptions(self.observation_mode, cpus[index % len(cpus)] if cpus else None, self.threads)
            process = self.context.Process(
                target=worker_main,
                args=(index, child_conn, cloudpickle.dumps(group_fn), options),
                name=f"vecenv-worker-{index}",
                daemon=self.daemon,
            )
            self.conns.append(parent_conn)
            try:
                process.start()
            finally:
                child_conn.close()
            self.processes.append(process)

    def attach(self, worker: int, attach: Attach, buffers: Buffers) -> None:
        conn = self.conns[worker]
        try:
            conn.send(attach)
            if Buffers.needs_fd(attach.buffers):
                assert buffers.block is not None and buffers.block.fd is not None
                reduction.send_handle(conn, buffers.block.fd, self.processes[worker].pid)
        except OSError:  # it died after its Hello
            self.processes[worker].join(1.0)
            raise WorkerGone from None

    def encode(self, command: Command, call_id: int, payload: Any) -> bytes:
        return encode_command(command, call_id, payload)

    def send(self, worker: int, message: bytes) -> None:
        try:
            self.conns[worker].send_bytes(message)
        except (OSError, EOFError):  # a broken or reset pipe: the worker is gone
            self.processes[worker].join(1.0)
            raise WorkerGone from None

    def poll(self, workers: Sequence[int], timeout: float | None) -> list[Reply | Death]:
        pipes, sentinels, poller = self._poller(workers)
        ready = poller.poll(None if timeout is None else math.ceil(timeout * 1000))
        events: list[Reply | Death] = []
        hung_up: set[int] = set()
        # Pipes first: a reply may precede an exit. One message per readable pipe; the next
        # poll reports the pipe again while more is waiting.
        for fd, _ in ready:
            index = pipes.get(fd)
            if index is None:
                continue
            try:
                events.append(Reply(index, *decode_reply(self.conns[index].recv_bytes())))
            except (EOFError, OSError):
                hung_up.add(index)
        for fd, _ in ready:
            index = sentinels.get(fd)
            if index is not None and index not in hung_up and not self.conns[index].poll():
                self.processes[index].join()
                events.append(Death(index))
        for index in hung_up:
            # The pipe is gone, so the worker can never answer, whether or not it has exited.
            process = self.processes[index]
            process.join(_HANGUP_GRACE)
            if process.is_alive():
                process.kill()
                process.join()
                self._causes[index] = "closed its pipe but did not exit (killed)"
            events.append(Death(index))
        return events

    def _poller(self, workers: Sequence[int]) -> tuple[dict[int, int], dict[int, int], Any]:
        """A poll object over the pipes and sentinels of ``workers``, kept for the next wait."""
        key = tuple(workers)
        cached = self._pollers.get(key)
        if cached is None:
            if len(self._pollers) > 64:
                self._pollers.clear()
            pipes = {self.conns[i].fileno(): i for i in workers}
            sentinels = {self.processes[i].sentinel: i for i in workers}
            poller = select.poll()
            for fd in itertools.chain(pipes, sentinels):
                poller.register(fd, select.POLLIN)
            cached = self._pollers[key] = (pipes, sentinels, poller)
        return cached

    def cause_of_death(self, worker: int) -> tuple[str, int | None]:
        code = self.processes[worker].exitcode
        return self._causes.get(worker, _describe_exit(code)), code

    def kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()

    def stop(self, deadline: float, closing: Sequence[int] = ()) -> None:
        if self._stopped:
            return
        self._stopped = True
        for index in closing:
            self.processes[index].join(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        kill_deadline = time.monotonic() + KILL_GRACE
        for process in self.processes:
            process.join(max(0.0, kill_deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
            process.close()
        for conn in self.conns:
            conn.close()
        self._pollers.clear()

    @property
    def pids(self) -> list[int | None]:
        return [p.pid for p in self.processes]

