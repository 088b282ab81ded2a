"""The worker pool: what the parent knows of each worker, independent of how it talks to it.

A pool owns a list of :class:`Worker` records and a :class:`Transport`. The transport moves
commands and replies (pipes to processes in :mod:`vecenv.process_pool`; Ray actors in
:mod:`vecenv.ray_transport`); the pool does everything else, the same way for every transport:
call ids, the status of each worker, waiting with deadlines, dropping the late replies of calls
that timed out, raising env errors with their remote traceback, and breaking (a dead worker)
and shutting down. The API layers (:mod:`vecenv.coordinator`, :mod:`vecenv.batches`) are
written against this class only.

Each worker has exactly one :class:`WorkerStatus`, changed only by the transition methods of
:class:`Worker`::

    STARTING --hello--> READY --take--> IDLE --send--> BUSY --reply--> READY --take--> IDLE
                                          ^              | timeout (abandon)
                                          |              v
                                          '--reply-- LATE  (its reply is dropped on arrival)
    any --death--> DEAD
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import numpy as np

from vecenv.buffers import Buffers, BufferSpec
from vecenv.errors import PackedException, VecEnvTimeoutError, WorkerDiedError
from vecenv.protocol import Attach, Command

__all__ = [
    "State",
    "WorkerStatus",
    "Worker",
    "Reply",
    "Death",
    "Transport",
    "WorkerPool",
    "RestartPolicy",
    "RESTART_INFO_KEY",
]


class State(Enum):
    """What the parent is waiting for; the values name the call, as Gymnasium's ``AsyncState``."""

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"
    POOL = "recv"  # envs in flight through async_reset/send, collected by recv
    BROKEN = "broken"
    CLOSED = "closed"


class WorkerStatus(Enum):
    """Where one worker stands, as the parent sees it."""

    STARTING = "starting"  # launched; its Hello is owed
    IDLE = "idle"  # owes nothing
    BUSY = "busy"  # owes the reply to the call it was last sent
    READY = "ready"  # that reply has arrived and waits to be taken
    LATE = "late"  # owes only replies to calls that timed out; they are dropped on arrival
    DEAD = "dead"


@dataclasses.dataclass
class _Owed:
    call_id: int
    call: str
    wanted: bool = True
    command: Command | None = None  # None: the handshake
    message: Any = None  # as sent, to send again to a restarted worker


class Worker:
    """The pool's record of one worker: its env range ``[start, stop)`` and its status."""

    __slots__ = ("index", "start", "stop", "status", "reply", "ready_at", "restarted_reset", "_owed")

    def __init__(self, index: int) -> None:
        self.index = index
        self.start = 0
        self.stop = 0
        self.status = WorkerStatus.STARTING
        self.reply: tuple[bool, Any] | None = None
        self.ready_at = 0  # arrival order of the held reply: recv hands out the earliest first
        self.restarted_reset: int | None = None  # a reset sent again after a restart: mark its infos
        self._owed: deque[_Owed] = deque([_Owed(0, "__init__")])

    @property
    def envs(self) -> range:
        return range(self.start, self.stop)

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def in_flight(self) -> bool:
        """Busy with a call, or holding its reply untaken."""
        return self.status is WorkerStatus.BUSY or self.status is WorkerStatus.READY

    # -- transitions: the only places that change ``status`` --------------------------------

    def sent(self, call_id: int, call: str, command: Command | None = None, message: Any = None) -> None:
        assert self.status in (WorkerStatus.IDLE, WorkerStatus.LATE), f"worker {self.index} is {self.status}"
        self._owed.append(_Owed(call_id, call, True, command, message))
        self.status = WorkerStatus.BUSY

    def answered(self, call_id: int, ok: bool, result: Any, order: int) -> None:
        """A reply arrived: keep it if its call is still wanted, else drop it."""
        for owed in self._owed:
            if owed.call_id == call_id:
                self._owed.remove(owed)
                break
        else:
            return  # not a call of ours (cannot happen with an ordered transport)
        if owed.wanted:
            self.reply, self.ready_at = (ok, result), order
            self.status = WorkerStatus.READY
        elif self.status is WorkerStatus.LATE and not self._owed:
            self.status = WorkerStatus.IDLE

    def take(self) -> tuple[bool, Any]:
        assert self.status is WorkerStatus.READY and self.reply is not None
        reply, self.reply = self.reply, None
        self.status = WorkerStatus.IDLE
        return reply

    def abandon(self) -> None:
        """The caller stops waiting (a timeout, or a new async reset): drop what is owed."""
        for owed in self._owed:
            owed.wanted = False
        if self.status is WorkerStatus.READY:
            self.reply = None
            self.status = WorkerStatus.IDLE
        elif self.status is WorkerStatus.BUSY or self.status is WorkerStatus.STARTING:
            self.status = WorkerStatus.LATE

    def died(self) -> None:
        self._owed.clear()
        self.reply = None
        self.status = WorkerStatus.DEAD

    def relaunched(self) -> _Owed | None:
        """A new process replaces this one: its Hello is owed. Returns the call that was still
        wanted from the old one, if any (everything else it owed is gone with it)."""
        wanted = next((owed for owed in self._owed if owed.wanted), None)
        self._owed = deque([_Owed(0, "__init__")])
        self.reply = None
        self.status = WorkerStatus.STARTING
        return wanted

    @property
    def owes(self) -> bool:
        """Some reply is still to arrive (wanted or not)."""
        return bool(self._owed)


@dataclasses.dataclass(frozen=True)
class Reply:
    """A transport event: worker ``worker`` answered call ``call_id``."""

    worker: int
    call_id: int
    ok: bool
    result: Any


@dataclasses.dataclass(frozen=True)
class Death:
    """A transport event: worker ``worker`` is gone and will never answer."""

    worker: int


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """How a pool replaces workers that die (``on_worker_death="restart"``).

    Attributes:
        max_restarts: restarts allowed within ``window`` seconds; one more breaks the pool.
            A worker that dies while being rebuilt counts as another restart.
        window: the sliding window, in seconds.
        reseed: ``reseed(worker, restart_number)`` gives the reset payload for a rebuilt
            worker's envs (the coordinator derives the seeds from the last reset's).
        timeout: seconds a rebuilt worker may take to build its envs (``None``: no limit).
    """

    max_restarts: int
    window: float
    reseed: Callable[[Worker, int], Any]
    timeout: float | None = None


class _LostAgain(Exception):
    """A worker died while it was being restarted."""


#: The info key set for every env of a restarted worker, on the call that saw the death.
RESTART_INFO_KEY = "worker_restarted"


class WorkerGone(Exception):
    """Raised by :meth:`Transport.send` when the worker can no longer be reached."""


class Transport(abc.ABC):
    """How commands reach workers and replies come back; one implementation per backend.

    Workers are numbered ``0..k-1`` in the order of the group builders given to
    :meth:`launch`. Every worker first sends its ``Hello`` as the reply to call id 0.
    """

    #: Whether the buffers can be one shared block that workers write in place.
    shares_memory: bool = False

    @abc.abstractmethod
    def launch(self, group_fns: Sequence[Callable[[], Any]]) -> None:
        """Start one worker per group builder (which each calls in the worker)."""

    @abc.abstractmethod
    def attach(self, worker: int, attach: Attach, buffers: Buffers) -> None:
        """Send a worker its place (after its Hello): start index, autoreset mode, buffer spec.

        Raises:
            WorkerGone: the worker cannot be reached.
        """

    @abc.abstractmethod
    def encode(self, command: Command, call_id: int, payload: Any) -> Any:
        """The message for one command, made before anything is sent: a payload that cannot
        be serialised raises here, while no worker has been told anything."""

    @abc.abstractmethod
    def send(self, worker: int, message: Any) -> None:
        """Send one encoded command. Raises :class:`WorkerGone` when the worker cannot be reached."""

    @abc.abstractmethod
    def poll(self, workers: Sequence[int], timeout: float | None) -> list[Reply | Death]:
        """Block until one or more of ``workers`` has something to report, or ``timeout`` passes
        (``[]``). Never spins: every return either carries an event or means time is up."""

    @abc.abstractmethod
    def cause_of_death(self, worker: int) -> tuple[str, int | None]:
        """How a dead worker ended, in words ("was killed by signal SIGKILL"), and its exit code."""

    def where(self, worker: int) -> str:
        """Where the worker runs, for messages (" on node ..."), or ``""``."""
        return ""

    def relaunch(self, worker: int) -> None:
        """Replace a dead worker by a new one built from the same group builder; its Hello is
        owed as call id 0. Transports that cannot do this leave the pool broken instead."""
        raise NotImplementedError(f"{type(self).__name__} cannot restart workers")

    @abc.abstractmethod
    def kill(self) -> None:
        """End every worker now (the pool is broken)."""

    @abc.abstractmethod
    def stop(self, deadline: float, closing: Sequence[int] = ()) -> None:
        """Wait until ``deadline`` (``time.monotonic()``) for the workers in ``closing`` (those
        asked to close) to exit, end the rest at once; release every resource. Idempotent."""


class WorkerPool:
    """Workers behind a transport, with one status each; see the module docstring."""

    def __init__(
        self, transport: Transport, group_fns: Sequence[Callable[[], Any]], restart: RestartPolicy | None = None
    ) -> None:
        self.transport = transport
        self.workers = [Worker(i) for i in range(len(group_fns))]
        self.buffers: Buffers | None = None
        self.broken: WorkerDiedError | None = None
        self.restart = restart
        self.restarts = 0  # every restart of this pool so far (the reseed count)
        self._restart_times: deque[float] = deque()
        self._restarting = False
        self._spec: BufferSpec | None = None
        self._autoreset_mode: Any = None
        self._call_ids = itertools.count(1)
        self._arrivals = itertools.count()
        transport.launch(group_fns)

    # -- start-up ----------------------------------------------------------------------------

    def hellos(self, timeout: float | None) -> list[Any]:
        """Every worker's Hello; the first error is raised at once (nothing is kept on start)."""
        return self.gather(self.workers, timeout, "__init__", fail_fast=True)

    def attach(self, sizes: Sequence[int], spec: BufferSpec, autoreset_mode: Any) -> Buffers:
        """Give each worker its index range and map the buffers; returns the parent's buffers."""
        start = 0
        for w, size in zip(self.workers, sizes, strict=True):
            w.start, w.stop = start, start + size
            start = w.stop
        self.buffers = Buffers.create(spec)
        self._spec, self._autoreset_mode = spec, autoreset_mode
        for w in self.workers:
            try:
                self.transport.attach(w.index, Attach(w.start, w.size, autoreset_mode, spec), self.buffers)
            except WorkerGone:
                self._died(w, "__init__")
        if self.restart is None:
            # A restarted worker needs the block's descriptor; without restarts nothing does.
            self.buffers.release_fd()
        return self.buffers

    # -- calls -------------------------------------------------------------------------------

    def send(self, workers: Sequence[Worker], command: Command, payloads: Sequence[Any], call: str) -> None:
        """Send each worker its command; they become BUSY.

        Every message is encoded first: a payload that cannot be serialised raises before any
        worker is sent anything or changes status.
        """
        transport = self.transport
        ids = [next(self._call_ids) for _ in workers]
        messages = [transport.encode(command, i, p) for i, p in zip(ids, payloads, strict=True)]
        for w, call_id, message in zip(workers, ids, messages):
            w.sent(call_id, call, command, message)
            try:
                transport.send(w.index, message)
            except WorkerGone:
                self._died(w, call)

    def wait(self, workers: Sequence[Worker], deadline: float | None, call: str, timeout: float | None) -> list[Worker]:
        """Block until one or more of ``workers`` is READY; return those (in worker order).

        Replies of LATE workers among them are read and dropped on the way.

        Raises:
            WorkerDiedError: a worker died before answering; the pool is broken.
            VecEnvTimeoutError: ``deadline`` passed first. Nothing is abandoned: the caller
                decides whether the calls still count.
        """
        while True:
            ready = [w for w in workers if w.status is WorkerStatus.READY]
            if ready:
                return ready
            listening = [w.index for w in workers if w.owes]
            assert listening, f"`{call}` waits on workers that owe nothing"
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = self.transport.poll(listening, remaining)
            if not events and deadline is not None and time.monotonic() >= deadline:
                raise VecEnvTimeoutError(f"The call to `{call}` has timed out after {timeout} second(s).")
            self._apply(events, call)

    def _apply(self, events: list[Reply | Death], call: str) -> None:
        for event in events:
            w = self.workers[event.worker]
            if isinstance(event, Reply):
                result = event.result
                if event.call_id == w.restarted_reset:
                    w.restarted_reset = None
                    if event.ok:
                        result = (_restart_infos(result[0], w.size), result[1])
                w.answered(event.call_id, event.ok, result, next(self._arrivals))
        for event in events:
            if isinstance(event, Death) and self.workers[event.worker].status is not WorkerStatus.DEAD:
                self._died(self.workers[event.worker], call)

    def gather(self, workers: Sequence[Worker], timeout: float | None, call: str, fail_fast: bool = False) -> list[Any]:
        """The reply each of ``workers`` owes, in worker order.

        An error reply is raised (the first, by worker order) only once every worker has
        answered, so no reply is left behind to be mistaken for a later one. On a timeout (or an
        interrupt) the unanswered workers are abandoned: they become LATE and their replies are
        dropped.
        ``fail_fast`` raises the first error at once (start-up, where nothing is kept).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        results: dict[int, Any] = {}
        failures: list[tuple[Worker, PackedException]] = []
        waiting = list(workers)
        while waiting:
            try:
                ready = self.wait(waiting, deadline, call, timeout)
            except BaseException:  # a timeout, or Ctrl+C: the next call must not wait for these
                for w in waiting:
                    w.abandon()
                raise
            for w in ready:
                ok, result = w.take()
                if ok:
                    results[w.index] = result
                elif fail_fast:
                    self.raise_remote(w, result, call)
                else:
                    failures.append((w, result))
            waiting = [w for w in waiting if w.status is not WorkerStatus.IDLE]
        if failures:
            self.raise_remote(*failures[0], call)
        return [results[w.index] for w in workers]

    def drain(self) -> None:
        """Read every reply that has already arrived, without waiting (late ones become IDLE)."""
        owing = [w.index for w in self.workers if w.owes and w.status is not WorkerStatus.DEAD]
        while owing:
            events = self.transport.poll(owing, 0.0)
            if not events:
                return
            for event in events:
                if isinstance(event, Reply):
                    self.workers[event.worker].answered(event.call_id, event.ok, event.result, next(self._arrivals))
                else:
                    self.workers[event.worker].died()  # nothing to answer any more; close ends it
            owing = [i for i in owing if self.workers[i].owes and self.workers[i].status is not WorkerStatus.DEAD]

    # -- failures ----------------------------------------------------------------------------

    def raise_remote(self, w: Worker, packed: PackedException, call: str) -> None:
        """Raise an env's exception in the parent with a note naming the env, worker and call."""
        if packed.env_index is not None:
            where = f"env {w.start + packed.env_index}"
        elif w.size:
            where = f"envs {w.start}..{w.stop - 1}"
        else:
            where = "its env group"
        raise packed.rebuild(f"raised in {where} (worker {w.index}{self.transport.where(w.index)}) during `{call}`")

    def _died(self, w: Worker, call: str) -> None:
        """A worker died: restart it when the policy allows, else end the others (their
        peers' envs are gone) and raise."""
        if self._restarting:
            raise _LostAgain
        how, exitcode = self.transport.cause_of_death(w.index)
        span = f"envs {w.start}..{w.stop - 1}" if w.size else "envs not yet assigned"
        what = f"worker {w.index} ({span}{self.transport.where(w.index)}) {how} during `{call}`"
        if self.restart is not None and call not in ("__init__", "close"):
            refusal = self._restart(w)
            if refusal is None:
                return
            what += f"; {refusal}"
        w.died()
        self.broken = WorkerDiedError(
            f"{what}; the vector env is unusable, close it and make a new one",
            worker=w.index,
            envs=w.envs,
            exitcode=exitcode,
        )
        self.transport.kill()
        for other in self.workers:
            other.died()
        raise self.broken

    # -- restarts ----------------------------------------------------------------------------

    def _restart(self, w: Worker) -> str | None:
        """Replace dead worker ``w`` and answer the call it still owed; ``None`` when done,
        else why the pool must break instead.

        The new worker builds the same envs, attaches to the same rows and resets them with
        :attr:`RestartPolicy.reseed`'s seeds. A step it owed is answered as that reset, with
        every env truncated, reward 0 and ``info["worker_restarted"] = True``; a reset, call,
        attribute or render is sent again and answered by the new envs.
        """
        policy = self.restart
        assert policy is not None and self._spec is not None and self.buffers is not None
        lost: _Owed | None = None
        first = True
        while True:
            now = time.monotonic()
            while self._restart_times and now - self._restart_times[0] > policy.window:
                self._restart_times.popleft()
            if len(self._restart_times) >= policy.max_restarts:
                return (
                    f"{len(self._restart_times)} restarts within {policy.window:g} s already "
                    f"(max_restarts={policy.max_restarts})"
                )
            self._restart_times.append(now)
            self.restarts += 1
            try:
                self.transport.relaunch(w.index)
            except NotImplementedError as exc:
                return str(exc)
            owed = w.relaunched()
            if first:
                lost, first = owed, False
            self._restarting = True
            try:
                hello = self.gather([w], policy.timeout, "restart", fail_fast=True)[0]
                if hello.num_envs != w.size:
                    return f"its rebuilt group has {hello.num_envs} envs instead of {w.size}"
                attach = Attach(w.start, w.size, self._autoreset_mode, self._spec)
                self.transport.attach(w.index, attach, self.buffers)
                if lost is not None and lost.command is Command.RESET:
                    break  # the reset it owed is sent again below: no reset of our own first
                self.send([w], Command.RESET, [policy.reseed(w, self.restarts)], "restart")
                entries, payload = self.gather([w], policy.timeout, "restart", fail_fast=True)[0]
                break
            except (_LostAgain, WorkerGone):
                continue
            except VecEnvTimeoutError:
                self.transport.kill()
                return f"its replacement took longer than {policy.timeout} s to start"
            except Exception as exc:
                return f"rebuilding its envs raised {type(exc).__name__}: {exc}"
            finally:
                self._restarting = False
        if lost is None:
            return None
        if lost.command is Command.STEP:
            w.sent(lost.call_id, lost.call, lost.command, lost.message)
            w.answered(
                lost.call_id,
                True,
                (_restart_infos(entries, w.size), self._as_truncated(w, payload)),
                next(self._arrivals),
            )
            return None
        # Sent again, with its call id: the new worker's reply answers the waiting call.
        w.sent(lost.call_id, lost.call, lost.command, lost.message)
        if lost.command is Command.RESET:
            w.restarted_reset = lost.call_id
        try:
            self.transport.send(w.index, lost.message)
        except WorkerGone:
            self._died(w, lost.call)
        return None

    def _as_truncated(self, w: Worker, payload: Any) -> Any:
        """The rows of a restarted worker after its reset, reported as a truncating step:
        reward 0, not terminated, truncated. Returns the reply payload to hand on."""
        assert self.buffers is not None
        if payload is None or payload[1] is None:  # flags in shared memory
            rows = slice(w.start, w.stop)
            self.buffers.rewards[rows] = 0.0
            self.buffers.terminations[rows] = False
            self.buffers.truncations[rows] = True
            return payload
        # Flags in the reply: new arrays (the transport's may be read-only).
        n = w.size
        return payload[0], (np.zeros(n, np.float64), np.zeros(n, np.bool_), np.ones(n, np.bool_))

    # -- shutdown ----------------------------------------------------------------------------

    def shutdown(self, timeout: float, wait_late: bool) -> BaseException | None:
        """Close the envs politely within ``timeout`` seconds, then end every worker.

        Workers still owing the reply to a call that timed out get the polite close only when
        ``wait_late`` (they may be stuck); replies that already arrived are read first, so a
        worker that is idle again is closed politely. Returns the first error an env's
        ``close()`` raised, for the caller to raise once everything is released.
        """
        deadline = time.monotonic() + timeout
        error: BaseException | None = None
        closing: list[Worker] = []
        if self.broken is None and timeout > 0:
            try:
                self.drain()
                closing = [
                    w
                    for w in self.workers
                    if w.status in (WorkerStatus.IDLE, WorkerStatus.READY, WorkerStatus.BUSY)
                    or (w.status is WorkerStatus.LATE and wait_late)
                ]
                for w in closing:
                    w.abandon()
                self.send(closing, Command.CLOSE, [None] * len(closing), "close")
                self.gather(closing, max(0.0, deadline - time.monotonic()), "close")
            except (VecEnvTimeoutError, WorkerDiedError):
                pass
            except Exception as exc:
                error = exc
        self.transport.stop(deadline, [w.index for w in closing])
        if self.buffers is not None:
            self.buffers.close()
        return error


def _restart_infos(entries: list[tuple[int, dict[str, Any]]], size: int) -> list[tuple[int, dict[str, Any]]]:
    """Every env of a restarted group gets ``worker_restarted``, merged into its reset info."""
    by_env = {j: info for j, info in entries}
    return [(j, {**by_env.get(j, {}), RESTART_INFO_KEY: True}) for j in range(size)]
