"""The one door to the pool: how every call starts and ends, with the call state right whatever
interrupts it.

:class:`CallRunner` is the only object the API layers reach the pool through:
``reset``/``step``/``call``/``render`` (:mod:`vecenv.parent.vector_env`), the asynchronous
batches (:mod:`vecenv.parent.envpool_api`), the rollouts (:mod:`vecenv.parent.rollouts`) and
closing (:mod:`vecenv.parent.closing`). It owns sending, waiting, the failure bookkeeping (what
a timeout, an env error or an interrupt leaves: ``NeedsResetError`` until a reset) and the
late-reply rules (a reply nobody waits for any more is dropped on arrival); the pool
(:mod:`vecenv.parent.pool`) keeps each worker's record, the call state
(:class:`~vecenv.parent.state.CallState`) what is pending.

A ``KeyboardInterrupt`` (Ctrl+C) may land between any two statements; at every point the outcome
is one of two: the call is pending and its replies will be gathered, or nothing is pending and
every reply already on its way is dropped when it arrives. When envs may have acted on an
interrupted call, steps are refused until a reset, whose data is then exactly ``SyncVectorEnv``'s.
A pipe that the interrupt cut in the middle of a message ends that worker
(:mod:`vecenv.transports.process`): the next call reports it dead, or restarts it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from vecenv.errors import PackedException, WorkerDiedError
from vecenv.parent.pool import WorkerPool
from vecenv.parent.records import WorkerRecord, WorkerStatus
from vecenv.parent.state import CallState, State
from vecenv.wire.protocol import Command, no_payload

__all__ = ["CallRunner", "Collect"]

#: Gathers the replies of a pending call: ``collect(workers, timeout)``, in worker order.
Collect = Callable[[list[WorkerRecord], "float | None"], list[Any]]

#: Commands whose envs may have acted when the call was cut short: steps are refused until a reset.
_ACTING = (Command.RESET, Command.STEP, Command.ROLLOUT)
_ACTING_STATES = (State.WAITING_RESET, State.WAITING_STEP, State.WAITING_ROLLOUT)


class CallRunner:
    """Starts and finishes calls on ``pool``, keeping ``calls`` (the call state) in step."""

    def __init__(self, pool: WorkerPool, calls: CallState) -> None:
        self.pool = pool
        self.calls = calls
        #: The workers, in worker order (their env ranges and statuses are read, never written).
        self.workers = pool.workers
        #: Every env in this process (``num_workers=0``): the group's core, which :meth:`step`
        #: runs directly.
        self._sole_core = pool.transport.sole_core()
        #: The running call's ``timeout=``, which bounds its sends too (``None``: the default
        #: bound, :data:`~vecenv.transports.sending.SEND_TIMEOUT`).
        self.timeout: float | None = None
        #: The end of that ``timeout=`` (``time.monotonic()``), counted from the call's start: it
        #: bounds the rebuild of a worker that died as it was sent its command, as a wait's
        #: deadline bounds the rebuild of one found dead while waiting.
        self.deadline: float | None = None
        #: Why ``close()`` from another thread ended the workers (:meth:`abort`), once it has.
        self.aborted: str | None = None

    @contextlib.contextmanager
    def within(self, timeout: float | None) -> Iterator[None]:
        """The sends made inside give up on a worker that takes none of its command for
        ``timeout`` seconds (a call with a ``timeout=`` of its own, such as ``step``, bounds
        its send by it too). Nested: the outermost call's timeout holds."""
        if timeout is None or self.timeout is not None:
            yield
            return
        self.timeout, self.deadline = timeout, time.monotonic() + timeout
        try:
            yield
        finally:
            self.timeout = self.deadline = None

    @property
    def restarts_workers(self) -> bool:
        """Whether a dead worker is replaced (``on_worker_death="restart"``)."""
        return self.pool.restarter is not None

    # -- sending -----------------------------------------------------------------------------

    def send(
        self,
        workers: Sequence[WorkerRecord],
        command: Command,
        payloads: Sequence[Any],
        call: str,
        state: State | None,
        mask: np.ndarray | None = None,
        wanted: bool = True,
        started: Callable[[], None] | None = None,
    ) -> None:
        """Send ``command`` to ``workers`` and, unless ``state`` is ``None`` (sent outside a
        pending call: a batch of ``send``, a restarted rollout group), record the call as
        pending in that state. ``wanted=False``: nobody waits for the replies, which are
        dropped on arrival (a failure shows in the call that follows). ``started``: what
        records the call instead of a ``state`` (``async_reset``'s batches), run where an
        interrupt is handled as one during the send.

        A worker that takes none of its message for :attr:`timeout` (see :meth:`within`) raises
        ``VecEnvTimeoutError`` (or is a dead worker, when its pipe holds part of it).
        Nothing is sent when a payload cannot be encoded. An interrupt after that leaves
        nothing pending: what was sent is abandoned (its replies dropped) and, for a reset, a
        step or a rollout (whose envs may have acted on it), steps are refused until a reset.
        """
        pool = self.pool
        outgoing = pool.prepare(workers, command, payloads, call, wanted)
        try:
            pool.deliver(workers, outgoing, self.timeout, self.deadline)
            if state is not None:
                self.calls.begin(state, workers, mask)
            elif started is not None:
                started()
        except WorkerDiedError:
            raise
        except BaseException as exc:
            pool.abandon(workers)
            self.calls.interrupted(call, exc, poisons=command in _ACTING)
            raise

    def abandon(self, workers: Sequence[WorkerRecord]) -> None:
        """Stop waiting for what ``workers`` owe: their replies are dropped on arrival."""
        self.pool.abandon(workers)

    def round_trip(
        self,
        workers: Sequence[WorkerRecord],
        command: Command,
        payloads: Sequence[Any],
        call: str,
        timeout: float | None,
    ) -> list[Any]:
        """Send ``command`` outside a pending call and gather the replies, in worker order;
        whatever cuts it short (Ctrl+C, also between the send and the wait) abandons them."""
        try:
            self.send(workers, command, payloads, call, None)
            return self.gather(workers, timeout, call)
        except BaseException:
            self.pool.abandon(workers)
            raise

    # -- waiting -----------------------------------------------------------------------------

    def finish(
        self, call: str, timeout: float | None, poisons: bool, collect: Collect | None = None
    ) -> tuple[list[WorkerRecord], list[Any]]:
        """Gather the pending call's replies and return to ``DEFAULT`` whatever happens;
        returns the workers that answered, in worker order, and their replies.

        ``poisons``: a timeout, env error or interrupt leaves some envs stepped and others
        not, so the next step must be refused until a full reset. ``collect`` gathers the
        replies when a call needs more than one exchange (a rollout with restarted groups).
        """
        calls = self.calls
        workers = calls.pending
        try:
            if collect is None:
                return workers, self.pool.gather(workers, timeout, call)
            return workers, collect(workers, timeout)
        except WorkerDiedError:
            raise
        except BaseException as exc:
            self.pool.abandon(workers)  # what is not taken yet is dropped on arrival
            if poisons:
                calls.poison(f"`{call}` failed ({type(exc).__name__})")
            raise
        finally:
            calls.finish()

    def step(
        self, workers: list[WorkerRecord], payloads: list[Any], timeout: float | None
    ) -> tuple[list[WorkerRecord], list[Any]]:
        """``step``: :meth:`send` then :meth:`finish`, the same call state after it.

        With every env in this process and the actions in the shared rows (no payload), the
        group steps right here: the call completes within this frame, so there is no message
        to encode or queue, no status to move and no reply to wait for; an env error is raised
        and poisons the envs exactly as :meth:`finish` does.
        """
        core = self._sole_core
        if core is None or payloads[0] is not None or workers[0].owes:
            try:
                with self.within(timeout):
                    self.send(workers, Command.STEP, payloads, "step_async", State.WAITING_STEP)
                return self.finish("step_wait", timeout, poisons=True)
            except BaseException as exc:
                self.settle(State.DEFAULT, "step", exc)
                raise
        try:
            ok, result = core.handle(Command.STEP, no_payload)
            if not ok:
                raise self.pool.remote_error(workers[0], result, "step_wait")
        except BaseException as exc:
            self.calls.poison(f"`step_wait` failed ({type(exc).__name__})")
            raise
        return workers, [result]

    @contextlib.contextmanager
    def whole(self, call: str) -> Iterator[None]:
        """Around a call made of a send and its wait in one method (``reset``, ``call``,
        ``get_attr``, ``set_attr``, ``render``, ``rollout``): whatever it raises, it leaves
        no call of its own pending (see :meth:`settle`)."""
        before = self.calls.waiting
        try:
            yield
        except BaseException as exc:
            self.settle(before, call, exc)
            raise

    def settle(self, before: State, call: str, exc: BaseException) -> None:
        """``call``, a send and its wait in one method (``step``, or one under :meth:`whole`),
        raised ``exc`` while the call state was ``before`` when it began. Each half leaves the
        state right when it fails itself; an interrupt between them (after the send, before the
        wait took over) would leave the call pending, with nobody to wait for it: it is
        abandoned here as an interrupted send is (its replies dropped on arrival, and steps
        refused until a reset when its envs may have acted)."""
        waiting = self.calls.waiting
        if waiting is before or waiting is State.DEFAULT or waiting is State.CLOSED:
            return
        self.pool.abandon(self.calls.pending)
        self.calls.interrupted(call, exc, poisons=waiting in _ACTING_STATES)

    def gather(
        self, workers: Sequence[WorkerRecord], timeout: float | None, call: str, *, deadline: float | None = None
    ) -> list[Any]:
        """The replies of a call sent outside a pending one, in worker order (late ones are
        abandoned on a timeout or an interrupt); ``deadline`` as for :meth:`WorkerPool.gather`."""
        return self.pool.gather(workers, timeout, call, deadline=deadline)

    def wait(
        self, workers: Sequence[WorkerRecord], deadline: float | None, call: str, timeout: float | None
    ) -> list[WorkerRecord]:
        """Block until one or more of ``workers`` holds its reply; nothing is abandoned on a
        timeout (``recv``: the envs stay in flight)."""
        return self.pool.wait(workers, deadline, call, timeout)

    def take(self, workers: Sequence[WorkerRecord], call: str, how: str) -> list[Any]:
        """The replies ``workers`` hold (each is READY); an env error among them (the first,
        by worker order) is raised once all are taken, and steps are refused until a reset
        (``how``: the call that resets, named by the error a later step raises). A reply that
        stands for a Ctrl+C already raised (it cut the parent's own group) is that refusal at
        once (:class:`~vecenv.errors.NeedsResetError`), not the same Ctrl+C a second time."""
        replies = [w.take() for w in workers]
        for ok, result in replies:
            if not ok and isinstance(result, PackedException) and result.raised:
                self.calls.poison(f"`{call}` was interrupted ({result.type_name.rpartition('.')[2]})")
                self.calls.check_steppable(call, how)
        for w, (ok, result) in zip(workers, replies):
            if not ok:
                self.calls.poison(f"an env raised during `{call}`")
                self.pool.raise_remote(w, result, call)
        return [result for _, result in replies]

    def ready(self) -> list[WorkerRecord]:
        """The workers holding a reply not yet taken, earliest arrival first."""
        return sorted((w for w in self.workers if w.status is WorkerStatus.READY), key=lambda w: w.ready_at)

    # -- blocks and closing ------------------------------------------------------------------

    def keep_block(self, block: Any) -> None:
        """Another block the workers map (the rollout block, the weights slot, large pickled
        weights' shared copy): closed
        at shutdown."""
        self.pool.blocks.append(block)

    def drop_block(self, block: Any) -> None:
        """Release a block kept by :meth:`keep_block` now."""
        self.pool.blocks.remove(block)
        block.close()

    def abort(self, reason: str) -> None:
        """End the workers from another thread (see :meth:`WorkerPool.abort`)."""
        self.aborted = reason
        self.pool.abort(reason)

    def shutdown(self, timeout: float, wait_late: bool) -> BaseException | None:
        """Close the envs politely, end every worker (see :meth:`WorkerPool.shutdown`)."""
        return self.pool.shutdown(timeout, wait_late)
