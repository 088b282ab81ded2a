"""Replacing workers that die (``on_worker_death="restart"``).

:class:`RestartPolicy` is what the user asked for (how many restarts in what window) and where
the seeds come from; :class:`RestartBudget` counts restarts in the sliding window;
:class:`Restarter` does a restart through the pool it is given (relaunch, handshake, reset) and
answers the call the dead worker still owed. What a restarted step looks like (every env
truncated, reward 0, ``info["worker_restarted"]``) is written here, once, by
:func:`truncated_reply` and :func:`mark_restarted`.

The pool calls in; nothing here imports the pool: :class:`RestartHost` names what a restart
needs of it, so the unit tests drive a :class:`Restarter` with a fake.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from vecenv.errors import VecEnvTimeoutError
from vecenv.parent.records import OwedCall, WorkerRecord
from vecenv.parent.state import SeedBook
from vecenv.spaces import is_fixed, tree_map
from vecenv.transports.base import CannotRestart, Transport, WorkerGone
from vecenv.transports.sending import send_timeout
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import Attach, Command, Flags, InfoEntries, ResetArgs, Rows, StepReply

__all__ = [
    "RESTART_INFO_KEY",
    "RestartPolicy",
    "RestartBudget",
    "RestartHost",
    "Restarter",
    "LostAgain",
    "RestartedRollout",
    "mark_restarted",
    "truncated_reply",
]

#: The info key set for every env of a restarted worker, on the call that saw the death.
RESTART_INFO_KEY = "worker_restarted"


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """How a pool replaces workers that die.

    Attributes:
        max_restarts: restarts allowed within ``window`` seconds; one more breaks the pool.
            A worker that dies while being rebuilt counts as another restart.
        window: the sliding window, in seconds.
        seeds: each env's last reset seed; a rebuilt worker's envs are reset with
            :meth:`SeedBook.reseeded` of them.
        timeout: seconds a rebuilt worker may take to build its envs (``None``: no limit).
    """

    max_restarts: int
    window: float
    seeds: SeedBook
    timeout: float | None = None

    def reseed(self, worker: WorkerRecord, restart: int) -> ResetArgs:
        """The reset of a rebuilt worker's envs at the vector env's ``restart``-th restart."""
        return ResetArgs(self.seeds.reseeded(worker.start, worker.stop, restart), None, None)


class RestartBudget:
    """Restarts within a sliding window: :meth:`spend` refuses the one past ``max_restarts``."""

    def __init__(self, max_restarts: int, window: float) -> None:
        self.max_restarts = max_restarts
        self.window = window
        self._times: deque[float] = deque()

    def spend(self, now: float) -> str | None:
        """Count a restart at ``now``; ``None`` when allowed, else why not (nothing counted)."""
        while self._times and now - self._times[0] > self.window:
            self._times.popleft()
        if len(self._times) >= self.max_restarts:
            return f"{len(self._times)} restarts within {self.window:g} s already (max_restarts={self.max_restarts})"
        self._times.append(now)
        return None


class LostAgain(Exception):
    """A worker died while it was being restarted."""


class RestartHost(Protocol):
    """What a restart needs of the pool (:class:`~vecenv.parent.pool.WorkerPool` is one)."""

    transport: Transport
    buffers: Buffers | None
    #: close() from another thread is ending the workers: nothing is restarted any more
    ending: bool

    def attach_message(self, w: WorkerRecord) -> Attach: ...

    def send(self, workers: Sequence[WorkerRecord], command: Command, payloads: Sequence[Any], call: str) -> None: ...

    def gather(
        self, workers: Sequence[WorkerRecord], timeout: float | None, call: str, fail_fast: bool = False
    ) -> list[Any]: ...

    def answer(self, w: WorkerRecord, call_id: int, ok: bool, result: Any) -> None: ...

    def died(self, w: WorkerRecord, call: str) -> None: ...


class Restarter:
    """Restarts dead workers under a :class:`RestartPolicy`."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.budget = RestartBudget(policy.max_restarts, policy.window)
        self.restarts = 0  # every restart so far (the reseed count)
        self.active = False  # a restart is under way: a death now is LostAgain
        #: What the last refused restart's rebuild raised (the env's exception, its worker
        #: traceback as its cause), for the ``WorkerDiedError`` to keep as its cause; else ``None``.
        self.cause: BaseException | None = None

    def replace(self, pool: RestartHost, w: WorkerRecord, deadline: float | None = None) -> str | None:
        """Replace dead worker ``w`` and answer the call it still owed; ``None`` when done,
        else why the pool must break instead. ``deadline``: the end of the timeout of the call
        that found the death, which bounds the rebuild as the policy's ``timeout`` does.

        The new worker builds the same envs, attaches to the same rows and resets them with the
        policy's seeds. A step it owed is answered as that reset, with every env truncated,
        reward 0 and ``info["worker_restarted"] = True``; a rollout it owed is answered with a
        :class:`RestartedRollout` (the rollout layer runs the rest again), and so is a read of
        the policy's state (its envs start afresh; the restart stays for :meth:`report`); a
        reset, call, attribute or render is sent again and answered by the new envs. A reset
        reports the restart in every env's info (with a ``reset_mask``, the envs it leaves alone
        were reset by the rebuild); after a call, attribute or render, as with no call owed
        (the death was found by a message nobody waits for: a rollout block), the rebuild's
        reset is kept on the record until :meth:`report` gives it to the next step or rollout.
        A reply that arrived with the death and was not taken yet counts as owed.
        """
        lost, first = None, True
        self.cause = None
        while True:
            if pool.ending:  # killed by close() from another thread: it must not come back
                return "the vector env was closed from another thread meanwhile"
            refusal = self.budget.spend(time.monotonic())
            if refusal is not None:
                return refusal
            self.restarts += 1
            try:
                pool.transport.relaunch(w.index)
            except CannotRestart as exc:
                return str(exc)
            except Exception as exc:  # no descriptors left, no current directory, ...
                return f"its replacement could not be started: {type(exc).__name__}: {exc}"
            owed = w.relaunched()
            if first:
                lost, first = owed, False
                before = _group_observations(pool, w)  # before the rebuild's reset rewrites them
            self.active = True
            try:
                reply = self._rebuild(pool, w, _resets_group(lost), deadline)
                break
            except (LostAgain, WorkerGone):
                continue
            except VecEnvTimeoutError:
                pool.transport.kill()
                return f"its replacement took longer than {self._rebuild_timeout(deadline)[1]} to start"
            except _WrongSize as exc:
                return str(exc)
            except Exception as exc:
                # Kept without its traceback nor the exception it interrupted (a WorkerGone of
                # the send that found the death): their frames lead back to the vector env,
                # which keeps the error, a cycle that would outlive `del envs`.
                self.cause = exc.with_traceback(None)
                exc.__context__ = None
                notes = getattr(exc, "__notes__", None)  # which env, for an env's own error
                where = f" ({'; '.join(notes)})" if notes else ""
                return f"rebuilding its envs raised {type(exc).__name__}: {exc}{where}"
            finally:
                self.active = False
        if lost is None:
            w.restart_unreported(reply, before)
            return None
        w.sent(lost)
        if lost.command is Command.STEP:
            assert reply is not None
            pool.answer(w, lost.call_id, True, truncated_reply(pool, w, reply))
            return None
        if lost.command is Command.ROLLOUT:
            # The new worker lacks the policy and the block: the rollout layer runs it again.
            assert reply is not None
            pool.answer(w, lost.call_id, True, RestartedRollout(reply))
            return None
        if lost.command is Command.POLICY_STATE:
            # A state read steps nothing, so it cannot report the restart: the envs start afresh
            # (their state is the initial one), and the next step or rollout reports it.
            assert reply is not None
            w.restart_unreported(reply, before)
            pool.answer(w, lost.call_id, True, RestartedRollout(reply))
            return None
        # Sent again, with its call id: the new worker's reply answers the waiting call.
        if lost.command is Command.RESET:
            # Its infos mark every env of the group: those outside a reset_mask started afresh
            # too (the rebuild reset them), and their observation is their new episode's first.
            w.mark_restart_in(lost.call_id)
        else:
            # A call, attribute or render steps nothing: the next step or rollout reports the
            # restart, as when no call was owed.
            assert reply is not None
            w.restart_unreported(reply, before)
        try:
            pool.transport.send(w.index, lost.message, send_timeout())
        except WorkerGone:
            pool.died(w, lost.call)
        return None

    def report(self, pool: RestartHost, w: WorkerRecord, owed: OwedCall) -> bool:
        """Answer ``owed`` (about to be sent to ``w``) as the restart nobody has reported yet,
        instead of sending it: a step as the restarted step, a rollout as a restarted one, a
        read of the policy's state as a fresh state (the restart stays unreported: nothing
        stepped). ``False``: send it (a reset of the whole group makes the restart moot, one
        with a ``reset_mask`` reports it in its infos; other calls leave it pending)."""
        reset = w.unreported_restart
        if owed.command is Command.RESET:
            w.restart_reported()
            if not _resets_group(owed):  # the envs it leaves alone started afresh: say so
                w.mark_restart_in(owed.call_id)
            return False
        if owed.command is Command.STEP:
            result: Any = truncated_reply(pool, w, reset)
        elif owed.command is Command.ROLLOUT or owed.command is Command.POLICY_STATE:
            result = RestartedRollout(reset, w.restart_observations)
        else:
            return False
        if owed.command is not Command.POLICY_STATE:
            w.restart_reported()
        w.sent(owed)
        pool.answer(w, owed.call_id, True, result)
        return True

    def _rebuild_timeout(self, deadline: float | None) -> tuple[float | None, str]:
        """The seconds a rebuild may take, and what bounds it, in words: ``start_timeout``, or
        what is left of the timeout of the call that found the death, whichever ends first."""
        timeout = self.policy.timeout
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            if timeout is None or left < timeout:
                return left, "what was left of the call's timeout"
        return timeout, f"start_timeout ({timeout} s)"

    def _rebuild(
        self, pool: RestartHost, w: WorkerRecord, resets_itself: bool, deadline: float | None
    ) -> StepReply | None:
        """Handshake with the relaunched worker and reset its envs (unless the call it owed
        was a reset, which is sent again instead), each within ``start_timeout`` and all
        before the call's ``deadline``. Returns that reset's reply."""
        hello = pool.gather([w], self._rebuild_timeout(deadline)[0], "restart", fail_fast=True)[0]
        if hello.num_envs != w.size:
            raise _WrongSize(f"its rebuilt group has {hello.num_envs} envs instead of {w.size}")
        pool.transport.attach(w.index, pool.attach_message(w), _buffers(pool), send_timeout())
        if resets_itself:
            return None
        pool.send([w], Command.RESET, [self.policy.reseed(w, self.restarts)], "restart")
        reply: StepReply = pool.gather([w], self._rebuild_timeout(deadline)[0], "restart", fail_fast=True)[0]
        return reply


@dataclasses.dataclass(frozen=True)
class RestartedRollout:
    """The answer to a rollout (or a read of the policy's state) whose worker died and was
    replaced: none of its rows were made, and the replacement holds no policy yet; ``reset`` is
    the replacement's reset of the group's envs (see :mod:`vecenv.parent.rollouts`, which
    reports the rollout's first step as the restarted step and runs the rest again, and gives
    a state read the initial state). ``observations``: the group's rows as they were before
    that reset, where it rewrote them before this rollout began (a restart found by another
    call): row 0's observations (``None``: the rollout's own start)."""

    reset: StepReply
    observations: Any = None


class _WrongSize(Exception):
    pass


def _resets_group(owed: OwedCall | None) -> bool:
    """Whether ``owed`` is a reset of every env of its worker (no ``reset_mask``, or one that
    marks them all): sent again to a replacement, it resets the new envs itself."""
    if owed is None or owed.command is not Command.RESET or not isinstance(owed.payload, ResetArgs):
        return False
    mask = owed.payload.mask
    return mask is None or bool(np.all(mask))


def _group_observations(pool: RestartHost, w: WorkerRecord) -> Any:
    """A copy of ``w``'s rows of the observations (fixed spaces, the only ones rollouts take),
    or ``None`` before the handshake or for other spaces."""
    buffers = pool.buffers
    if buffers is None or not is_fixed(buffers.spec.observation_space):
        return None
    return tree_map(lambda rows: rows[w.start : w.stop].copy(), buffers.observations)


def _buffers(pool: RestartHost) -> Buffers:
    assert pool.buffers is not None, "workers are restarted only after the handshake"
    return pool.buffers


def mark_restarted(infos: InfoEntries, size: int) -> InfoEntries:
    """Every env of a restarted group gets ``worker_restarted``, merged into its reset info."""
    by_env = dict(infos)
    return [(j, {**by_env.get(j, {}), RESTART_INFO_KEY: True}) for j in range(size)]


def truncated_reply(pool: RestartHost, w: WorkerRecord, reset: StepReply) -> StepReply:
    """The reset of a restarted worker's envs, reported as the step it owed: reward 0, not
    terminated, truncated, ``worker_restarted`` in every env's info."""
    infos = mark_restarted(reset.infos, w.size)
    rows = reset.rows
    if rows is None or rows.flags is None:  # flags in shared memory
        buffers = _buffers(pool)
        span = slice(w.start, w.stop)
        buffers.rewards[span] = 0.0
        buffers.terminations[span] = False
        buffers.truncations[span] = True
        return StepReply(infos, rows, reset.masked)
    # Flags in the reply: new arrays (the transport's may be read-only).
    n = w.size
    flags = Flags(np.zeros(n, np.float64), np.zeros(n, np.bool_), np.ones(n, np.bool_))
    return StepReply(infos, Rows(rows.observations, flags), reset.masked)
