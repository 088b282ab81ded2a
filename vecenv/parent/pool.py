"""The worker pool: what the parent knows of each worker, independent of how it talks to it.

A pool owns a list of :class:`~vecenv.parent.records.WorkerRecord` and a
:class:`~vecenv.transports.base.Transport`. The transport moves commands and replies (pipes to
processes, or Ray actors); the pool does everything else, the same way for every transport:
call ids, the status of each worker, waiting with deadlines, dropping the late replies of calls
that timed out, raising env errors with their remote traceback, breaking (a dead worker),
restarting (through a :class:`~vecenv.parent.restart.Restarter`) and shutting down. The API
layers reach it through one door, :class:`~vecenv.parent.calls.CallRunner`, never directly.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

from vecenv.errors import DeadWorker, PackedException, VecEnvError, VecEnvTimeoutError, WorkerDiedError
from vecenv.interrupts import HeldInterrupt
from vecenv.parent.records import OwedCall, WorkerRecord, WorkerStatus
from vecenv.parent.restart import LostAgain, Restarter, mark_restarted
from vecenv.transports.base import DeathCause, Event, Reply, Transport, WorkerGone
from vecenv.transports.sending import SendTimeout, send_timeout
from vecenv.wire.buffers import Buffers, BufferSpec
from vecenv.wire.protocol import Attach, Command, StepReply
from vecenv.worker.builders import GroupOfFns, unimportable_note, unregistered_note

__all__ = ["WorkerPool", "PoolPhase"]

READY, IDLE = WorkerStatus.READY, WorkerStatus.IDLE


class PoolPhase(Enum):
    """Where a pool is in its life, which decides what a worker's death means."""

    STARTING = "starting"  # hellos and attach: a death means the vector env is not made
    RUNNING = "running"  # calls: a death is restarted where the policy allows
    CLOSING = "closing"  # shutdown: the workers are closed and ended, none is restarted


class WorkerPool:
    """Workers behind a transport, with one status each; see the module docstring."""

    def __init__(
        self, transport: Transport, group_fns: Sequence[Callable[[], Any]], restarter: Restarter | None = None
    ) -> None:
        self.transport = transport
        self.workers = [WorkerRecord(i) for i in range(len(group_fns))]
        #: The envs each worker is to build, where its builder says (named if it dies starting).
        self._planned = [fn.envs if isinstance(fn, GroupOfFns) else None for fn in group_fns]
        #: Each worker's group builder, to name the constructor a worker could not load.
        self._group_fns = list(group_fns)
        self.buffers: Buffers | None = None
        #: Other blocks the workers map (the rollout block, weights): released at shutdown, as ``buffers``.
        self.blocks: list[Any] = []
        self.broken: WorkerDiedError | None = None
        self.restarter = restarter
        self._spec: BufferSpec | None = None
        self._autoreset_mode: Any = None
        self.phase = PoolPhase.STARTING
        self.ending = False  # close() from another thread is ending the workers: no restarts
        self._call_ids = itertools.count(1)
        self._arrivals = itertools.count()
        transport.launch(group_fns)

    @property
    def restarts(self) -> int:
        """Every restart of this pool so far."""
        return 0 if self.restarter is None else self.restarter.restarts

    def in_flight(self) -> bool:
        """Some worker is busy with a call or holds a reply not yet taken."""
        return any(w.in_flight for w in self.workers)

    # -- start-up ----------------------------------------------------------------------------

    def hellos(self, timeout: float | None) -> list[Any]:
        """Every worker's Hello; the first error is raised at once (nothing is kept on start).

        Raises:
            VecEnvTimeoutError: ``timeout`` (``start_timeout``) ran out; it names the workers
                still building and their envs, as one stuck constructor among many workers
                is otherwise found only by bisecting.
        """
        try:
            return self.gather(self.workers, timeout, "__init__", fail_fast=True)
        except VecEnvTimeoutError:
            slow = [w for w in self.workers if w.owes]  # those that answered owe nothing
            if not slow:
                raise
            named = ", ".join(self._named(w) for w in slow)
            still = "was still building its envs" if len(slow) == 1 else "were still building their envs"
            raise VecEnvTimeoutError(
                f"The call to `__init__` has timed out after {timeout} second(s) (start_timeout): {named} {still}"
            ) from None

    def attach(self, sizes: Sequence[int], spec: BufferSpec, autoreset_mode: Any) -> Buffers:
        """Give each worker its index range and map the buffers; returns the parent's buffers."""
        start = 0
        for w, size in zip(self.workers, sizes, strict=True):
            w.start, w.stop = start, start + size
            start = w.stop
        with HeldInterrupt():  # made and recorded (closed at shutdown) as one
            self.buffers = Buffers.create(spec)
        self._spec, self._autoreset_mode = spec, autoreset_mode
        for w in self.workers:
            try:
                self.transport.attach(w.index, self.attach_message(w), self.buffers, send_timeout())
            except WorkerGone:
                self.died(w, "__init__")
        if self.restarter is None:
            # A restarted worker needs the block's descriptor; without restarts nothing does.
            self.buffers.release_fd()
            self.transport.release_fds()
        self.phase = PoolPhase.RUNNING
        return self.buffers

    def attach_message(self, w: WorkerRecord) -> Attach:
        """Where worker ``w``'s envs sit and how to talk to it (after its Hello)."""
        assert self._spec is not None, "attach() assigns the rows first"
        return Attach(w.start, w.size, self._autoreset_mode, self._spec)

    # -- calls -------------------------------------------------------------------------------

    def send(
        self,
        workers: Sequence[WorkerRecord],
        command: Command,
        payloads: Sequence[Any],
        call: str,
        timeout: float | None = None,
    ) -> None:
        """Send each worker its command (``timeout``: see :meth:`deliver`); they become BUSY.

        Every message is encoded and every status checked first: a payload that cannot be
        serialised raises before any worker is sent anything or changes status. A worker is
        marked BUSY only once its message is out, so an interrupt (Ctrl+C) between the two
        leaves at worst a reply to a call the record never knew, which is dropped on arrival;
        the caller abandons what was sent (:meth:`abandon`).
        """
        self.deliver(workers, self.prepare(workers, command, payloads, call), timeout)

    def prepare(
        self,
        workers: Sequence[WorkerRecord],
        command: Command,
        payloads: Sequence[Any],
        call: str,
        wanted: bool = True,
    ) -> list[OwedCall]:
        """Check that every worker may be sent a command and encode each; sends nothing.

        Each call's record is made here, once: the worker's record keeps it when it is sent.
        ``wanted=False``: nobody will wait for the replies (they are dropped on arrival).
        """
        for w in workers:
            w.check_sendable(call)
        encode = self.transport.encode
        call_ids = self._call_ids
        owed = []
        for w, payload, call_id in zip(workers, payloads, call_ids):
            try:
                message = encode(command, call_id, payload)
            except Exception as exc:
                if isinstance(exc, VecEnvError):  # vecenv's own (a limit): it says what it is
                    raise
                # Pickling's error names only the object (a lock, a generator), not the call.
                exc.add_note(
                    f"raised while pickling what `{call}` sends to worker {w.index}: each worker gets a copy of "
                    "what a call passes (its arguments, reset options, attribute values), so it must be picklable"
                )
                raise
            owed.append(OwedCall(call_id, call, wanted, command, message, payload))
        return owed

    def deliver(
        self,
        workers: Sequence[WorkerRecord],
        outgoing: Sequence[OwedCall],
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> None:
        """Send what :meth:`prepare` made, one message per worker; each becomes BUSY once sent.

        A worker that takes none of its message for ``timeout`` seconds (default:
        :data:`~vecenv.transports.sending.SEND_TIMEOUT`) is stuck: if it took none of it,
        ``VecEnvTimeoutError`` is raised (the workers sent to before it are BUSY: the caller
        abandons them); if it took a part, the transport ended it and it is a dead worker,
        whose restart (if any) must be done by ``deadline``, the end of the call's ``timeout=``.
        """
        send = self.transport.send
        timeout = send_timeout(timeout)
        restarter = self.restarter
        for w, owed in zip(workers, outgoing, strict=True):
            if w.unreported_restart is not None and restarter is not None and restarter.report(self, w, owed):
                continue
            try:
                send(w.index, owed.message, timeout)
            except SendTimeout as exc:
                raise VecEnvTimeoutError(
                    f"`{owed.call}` could not send its command: {self._named(w)} "
                    f"{exc}; it is busy with an earlier call (stuck in env code?). Nothing was sent to it"
                ) from None
            except WorkerGone:
                w.sent(owed)  # what a restart sends again
                self.died(w, owed.call, deadline)
                continue
            w.sent(owed)

    def abandon(self, workers: Sequence[WorkerRecord]) -> None:
        """Stop waiting for what ``workers`` owe (a call interrupted while it was being sent):
        their replies are dropped when they arrive."""
        for w in workers:
            w.abandon()

    def answer(self, w: WorkerRecord, call_id: int, ok: bool, result: Any) -> None:
        """Record a reply to ``w``'s call ``call_id`` (from the transport, or made by a restart)."""
        w.answered(call_id, ok, result, next(self._arrivals))

    def wait(
        self, workers: Sequence[WorkerRecord], deadline: float | None, call: str, timeout: float | None
    ) -> list[WorkerRecord]:
        """Block until one or more of ``workers`` is READY; return those (in worker order).

        Replies of LATE workers among them are read and dropped on the way.

        Raises:
            WorkerDiedError: a worker died before answering; the pool is broken.
            VecEnvTimeoutError: ``deadline`` passed first. Nothing is abandoned: the caller
                decides whether the calls still count.
        """
        # Plain loops, not comprehensions: this runs on every step, where each frame counts.
        while True:
            ready = []
            listening = []
            for w in workers:
                if w.status is READY:
                    ready.append(w)
                elif w.owes:
                    listening.append(w.index)
            if ready:
                return ready
            assert listening, f"`{call}` waits on workers that owe nothing"
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = self.transport.poll(listening, remaining)
            if not events and deadline is not None and time.monotonic() >= deadline:
                raise VecEnvTimeoutError(self._timeout_message(call, timeout, listening, deadline))
            self._apply(events, call, deadline)

    def _timeout_message(self, call: str, timeout: float | None, silent: Sequence[int], deadline: float) -> str:
        """Gymnasium's timeout message with the seconds that went by since the call began
        (``deadline - timeout``: more than ``timeout`` where a group this process hosts ran past
        it, which nothing can cut short), then the workers that had not replied and their envs:
        the one stuck env among many is otherwise found only by bisecting."""
        named = ", ".join(self._named(self.workers[i]) for i in silent)
        elapsed = time.monotonic() - (deadline - (timeout or 0.0))
        return (
            f"The call to `{call}` has timed out after {timeout} second(s) ({elapsed:.3g} s elapsed). "
            f"No reply yet from {named}."
        )

    def _apply(self, events: list[Event], call: str, deadline: float | None = None) -> None:
        deaths = False
        for event in events:
            if isinstance(event, Reply):
                w = self.workers[event.worker]
                result = event.result
                if w.marks_restart(event.call_id) and event.ok:
                    reply: StepReply = result
                    result = dataclasses.replace(reply, infos=mark_restarted(reply.infos, w.size))
                w.answered(event.call_id, event.ok, result, next(self._arrivals))
            else:
                deaths = True
        # Deaths after every reply: a reply that came before its worker's death is recorded
        # first; a restart then answers that call again (see WorkerRecord.relaunched).
        if deaths:
            # In worker order, not in the order the transport noticed them (a closed pipe or a
            # sentinel, whichever woke first): each restart's number picks the reseed of the
            # envs it rebuilds, so a rerun with the same crash must number them the same way.
            for index in sorted({event.worker for event in events if not isinstance(event, Reply)}):
                if self.workers[index].status is not WorkerStatus.DEAD:
                    self.died(self.workers[index], call, deadline)

    def gather(
        self,
        workers: Sequence[WorkerRecord],
        timeout: float | None,
        call: str,
        fail_fast: bool = False,
        *,
        deadline: float | None = None,
    ) -> list[Any]:
        """The reply each of ``workers`` owes, in worker order.

        ``deadline``: where the call began before this gather (a call that gathers in rounds),
        the end of its ``timeout``, which a timeout's message then names as the caller gave it.

        An error reply is raised (the first by worker order; of a rollout's, the earliest step
        first) only once every worker has answered, so no reply is left behind to be mistaken
        for a later one. On a timeout (or an
        interrupt) the unanswered workers are abandoned: they become LATE and their replies are
        dropped.
        ``fail_fast`` raises the first error at once (start-up, where nothing is kept).
        """
        if deadline is None and timeout is not None:
            deadline = time.monotonic() + timeout
        results: dict[int, Any] = {}
        failures: list[tuple[WorkerRecord, PackedException]] = []
        waiting: Sequence[WorkerRecord] = workers
        try:
            while waiting:
                ready = self.wait(waiting, deadline, call, timeout)
                for w in ready:
                    ok, result = w.take()
                    if ok:
                        results[w.index] = result
                    elif fail_fast:
                        self.raise_remote(w, result, call)
                    else:
                        failures.append((w, result))
                waiting = [w for w in waiting if w.status is not IDLE] if len(ready) < len(waiting) else ()
        except BaseException:  # a timeout, or Ctrl+C anywhere in here: the next call must not wait for these
            for w in workers:
                w.abandon()  # (nothing to drop for those already taken)
            raise
        if failures:
            # By step, then worker order, not arrival: which error is raised must not depend on
            # timing, and a rollout raises what stepping the same envs one step at a time would.
            self.raise_remote(*min(failures, key=_failure_order), call)
        if len(workers) == 1:
            return [results[workers[0].index]]
        return [results[w.index] for w in workers]

    def drain(self) -> None:
        """Read every reply that has already arrived, without waiting (late ones become IDLE)."""
        owing = [w.index for w in self.workers if w.owes and w.status is not WorkerStatus.DEAD]
        while owing:
            events = self.transport.poll(owing, 0.0)
            if not events:
                return
            for event in events:
                w = self.workers[event.worker]
                if isinstance(event, Reply):
                    self.answer(w, event.call_id, event.ok, event.result)
                else:
                    w.died()  # nothing to answer any more; close ends it
            owing = [i for i in owing if self.workers[i].owes and self.workers[i].status is not WorkerStatus.DEAD]

    # -- failures ----------------------------------------------------------------------------

    def raise_remote(self, w: WorkerRecord, packed: PackedException, call: str) -> None:
        """Raise an env's exception in the parent with a note naming the env, worker and call."""
        raise self.remote_error(w, packed, call)

    def remote_error(self, w: WorkerRecord, packed: PackedException, call: str) -> BaseException:
        """An env's exception rebuilt in the parent, with a note naming the env, worker and call."""
        if packed.env_index is not None:
            where = f"env {w.start + packed.env_index}"
        elif w.size:
            where = f"envs {w.start}..{w.stop - 1}"
        else:
            where = "its env group"
        detail = f", {packed.detail}" if packed.detail else ""
        where_call = f"raised in {where} (worker {w.index}{self.transport.where(w.index)}) during `{call}`"
        exc = packed.rebuild(where_call + detail)
        if self.phase is PoolPhase.STARTING and isinstance(exc, ImportError) and isinstance(exc.name, str):
            # Loading the group builder failed on a module it refers to: name whose it was.
            note = unimportable_note(self._group_fns[w.index], w.index, exc.name)
            if note is not None:
                exc.add_note(note)
        if self.phase is PoolPhase.STARTING:
            # A constructor's gym.make(id) of an id registered here only, in a worker not forked.
            note = unregistered_note(exc, w.index)
            if note is not None:
                exc.add_note(note)
        return exc

    def died(self, w: WorkerRecord, call: str, deadline: float | None = None) -> None:
        """A worker died: restart it when the policy allows, else end the others (their
        peers' envs are gone) and raise. ``deadline``: the end of the waiting call's timeout,
        which bounds a restart's rebuild too."""
        restarter = self.restarter
        if restarter is not None and restarter.active:
            raise LostAgain
        cause = self.transport.cause_of_death(w.index)
        envs = self._envs_of(w)
        what = f"{self._named(w)} {cause.how} during `{call}`"
        rebuild_error: BaseException | None = None
        if restarter is not None and self.phase is PoolPhase.RUNNING and not self.ending:
            try:
                refusal = restarter.replace(self, w, deadline)
            except BaseException:
                # Ctrl+C (or a handler's SystemExit) while the replacement starts leaves it half
                # made (no process yet, or one still waiting for its rows): nothing can use it.
                if self.broken is None:
                    self._break(w, f"{what}; its restart was interrupted", envs, cause)
                raise
            if refusal is None:
                return
            what += f"; {refusal}"
            rebuild_error = restarter.cause  # the env's error that stopped the rebuild, if any
        broken = self._break(w, what, envs, cause)
        broken.__cause__ = rebuild_error
        raise broken.copy()

    def _envs_of(self, w: WorkerRecord) -> range | None:
        """``w``'s envs: its rows once assigned, else those its builder says it builds."""
        return w.envs if w.size else self._planned[w.index]

    def _named(self, w: WorkerRecord, pid: int | None = None) -> str:
        """``w`` in words for a message about it: its index, then in brackets its pid (where
        given), its envs (those its builder builds, before the handshake) and where it runs."""
        envs = self._envs_of(w)
        span = f"envs {envs.start}..{envs.stop - 1}" if envs else "envs not yet assigned"
        shown_pid = "" if pid is None else f"pid {pid}, "
        return f"worker {w.index} ({shown_pid}{span}{self.transport.where(w.index)})"

    def _break(self, w: WorkerRecord, what: str, envs: range | None, cause: DeathCause) -> WorkerDiedError:
        """The pool cannot go on after ``w``'s death: record why (``broken``, raised by every
        later call; returned) and end every worker. Every other worker already dead (killed
        together, an env that exits in every worker at one step) is named too, found without
        waiting, before the rest are ended."""
        w.died()
        deaths = [self._dead_worker(w, envs, cause)]
        alive = [other.index for other in self.workers if other.status is not WorkerStatus.DEAD]
        for index in self.transport.ended(alive):
            other = self.workers[index]
            deaths.append(self._dead_worker(other, self._envs_of(other), self.transport.cause_of_death(index)))
        if len(deaths) > 1:
            named = ", and ".join(f"{self._named(self.workers[d.worker], d.pid)}, which {d.how}" for d in deaths)
            what += f"; {len(deaths)} workers were found dead: {named}"
        # Kept, never raised itself: a raised exception's traceback holds the frames it passed,
        # and through them the vector env, a cycle that would outlive `del envs`.
        if self.phase is PoolPhase.STARTING:
            after = "the vector env was not made (its other workers are ended)"
        elif self.ending:
            after = "the vector env is being closed"
        else:
            after = "the vector env is unusable, close it and make a new one"
        broken = self.broken = WorkerDiedError(
            f"{what}; {after}", worker=w.index, envs=envs or w.envs, exitcode=cause.exitcode, deaths=tuple(deaths)
        )
        self.transport.kill()
        for other in self.workers:
            other.died()
        return broken

    def _dead_worker(self, w: WorkerRecord, envs: range | None, cause: DeathCause) -> DeadWorker:
        pids = self.transport.pids
        pid = pids[w.index] if w.index < len(pids) else None
        return DeadWorker(w.index, pid, envs or w.envs, cause.exitcode, cause.how)

    # -- shutdown ----------------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        """From another thread than the one waiting on the workers: end them (no restarts), so
        that the waiting call raises ``WorkerDiedError`` with ``reason`` as the cause."""
        self.ending = True
        self.transport.abort(reason)

    def shutdown(self, timeout: float, wait_late: bool) -> BaseException | None:
        """Close the envs politely within ``timeout`` seconds, then end every worker.

        Workers still owing the reply to a call that timed out get the polite close only when
        ``wait_late`` (they may be stuck); replies that already arrived are read first, so a
        worker that is idle again is closed politely. Returns the first error an env's
        ``close()`` raised, for the caller to raise once everything is released.
        """
        self.phase = PoolPhase.CLOSING
        deadline = time.monotonic() + timeout
        error: BaseException | None = None
        closing: list[WorkerRecord] = []
        self.transport.drop_queued()  # a step only sent to the parent's own group never runs
        if self.broken is None and timeout > 0:
            try:
                self.drain()
                closing = [
                    w
                    for w in self.workers
                    if w.status in (WorkerStatus.IDLE, WorkerStatus.READY, WorkerStatus.BUSY)
                    or (w.status is WorkerStatus.LATE and wait_late)
                ]
                self.abandon(closing)
                self.send(closing, Command.CLOSE, [None] * len(closing), "close", max(0.0, deadline - time.monotonic()))
                error = self._close_errors(closing, deadline)
            except (WorkerDiedError, VecEnvTimeoutError):  # the workers are ended below
                pass
            except Exception as exc:
                error = exc
            except BaseException:
                # Ctrl+C in the polite close: the vector env counts as closed from here on,
                # so nothing may stay behind; every worker is ended now, not politely.
                self._release(time.monotonic(), [])
                raise
        self._release(deadline, [w.index for w in closing])
        return error

    def _release(self, deadline: float, closing: list[int]) -> None:
        """End every worker (``closing`` may close its envs until ``deadline``) and unmap the
        blocks, also when Ctrl+C cuts the wait for the workers short."""
        try:
            self.transport.stop(deadline, closing)
        finally:
            if self.buffers is not None:
                self.buffers.close()
            for block in self.blocks:
                block.close()
            self.blocks = []

    def _close_errors(self, closing: list[WorkerRecord], deadline: float) -> BaseException | None:
        """Collect the close replies until ``deadline``; the first env error (by worker order)
        among those that answered, even when another worker's close hangs past it."""
        failures: dict[int, BaseException] = {}
        waiting = closing
        while waiting:
            try:
                ready = self.wait(waiting, deadline, "close", None)
            except (VecEnvTimeoutError, WorkerDiedError):
                break
            for w in ready:
                ok, result = w.take()
                if not ok:
                    failures[w.index] = self.remote_error(w, result, "close")
            waiting = [w for w in waiting if w.status is not WorkerStatus.IDLE]
        return failures[min(failures)] if failures else None


def _failure_order(failure: tuple[WorkerRecord, PackedException]) -> tuple[tuple[int, int], int]:
    """Which of several workers' errors a call raises: the earliest step of a rollout (a
    worker of an older vecenv sends none: first), then the lowest worker."""
    w, packed = failure
    return getattr(packed, "order", (0, 0)), w.index
