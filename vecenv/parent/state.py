"""The parent's call state, with one owner: :class:`CallState`.

What the vector env is waiting for (a :class:`State`), which workers owe the pending call, why
the next step would give wrong data (``needs_reset``), which envs have ended, and whether the
vector env is closed: all of it is written here and only here. The API layers
(:mod:`vecenv.parent.vector_env`, :mod:`vecenv.parent.envpool_api`, :mod:`vecenv.parent.rollouts`)
ask it to check a call; the call runner (:mod:`vecenv.parent.calls`) and they move it from one
state to the next through its methods; none writes a field of it.

The checks are pure: they raise or return, never change anything. Their messages are
Gymnasium's (``AsyncVectorEnv``'s), since user code matches on them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from enum import Enum
from typing import Any, Protocol

import numpy as np

from vecenv.checks import seed_list
from vecenv.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    InvalidArgumentError,
    InvalidStateError,
    NeedsResetError,
    NoAsyncCallError,
    WorkerDiedError,
)
from vecenv.parent.records import WorkerRecord
from vecenv.seeding import SeedPolicy, restart_seed

__all__ = ["State", "CallState", "PoolView", "SeedBook", "already_pending"]


class State(Enum):
    """What the parent is waiting for; the values name the call, as Gymnasium's ``AsyncState``.

    Read it as ``envs.state``; each member says which calls the vector env accepts in it.
    """

    DEFAULT = "default"
    """Nothing pending: any call may start (``reset``, ``step``, ``rollout``, a ``*_async`` call,
    ``async_reset``, ``call``, ``get_attr``, ``close``...)."""
    WAITING_RESET = "reset"
    """``reset_async`` was sent: only ``reset_wait`` (which collects it) and ``close`` (which
    warns) may be called; any other call raises."""
    WAITING_STEP = "step"
    """``step_async`` was sent: only ``step_wait`` (which collects it) and ``close`` (which
    warns) may be called; any other call raises."""
    WAITING_CALL = "call"
    """``call_async`` was sent: only ``call_wait`` (which collects it) and ``close`` (which
    warns) may be called; any other call raises."""
    WAITING_ROLLOUT = "rollout"
    """``rollout_async`` was sent: only ``rollout_wait`` (which collects it) and ``close`` (which
    warns) may be called; any other call raises."""
    WAITING_RECV = "recv"  # envs in flight through async_reset/send, collected by recv
    """``async_reset`` put the envs in flight (EnvPool mode): ``recv``, ``send``, ``async_reset``
    (starting over) and ``close``; with no env in flight (between a ``recv`` and its ``send``),
    any call, ``call``, ``get_attr`` and ``set_attr`` keeping the batches going."""
    POOL = "recv"  # the same member under its earlier name (EnvPool mode)
    """The earlier name of ``WAITING_RECV``: the same member."""
    BROKEN = "broken"
    """A worker died and was not replaced: every call raises ``WorkerDiedError``; only ``close``
    remains."""
    CLOSED = "closed"
    """``close`` ran: every other call raises ``ClosedEnvironmentError``; ``close`` again does
    nothing."""


class PoolView(Protocol):
    """What the checks read of the pool (:class:`~vecenv.parent.pool.WorkerPool` is one)."""

    broken: WorkerDiedError | None

    def in_flight(self) -> bool: ...


def already_pending(call: str, state: State) -> AlreadyPendingCallError:
    """Gymnasium's error for ``call`` started while a call is pending in ``state``."""
    return AlreadyPendingCallError(
        f"Calling `{call}` while waiting for a pending call to `{state.value}` to complete.", state.value
    )


class CallState:
    """The state of one vector env's calls; see the module docstring.

    Args:
        class_name: the vector env's class name, for messages.
    """

    def __init__(self, class_name: str) -> None:
        self.class_name = class_name
        self.closed = False
        self.forked_from: int | None = None  # in a child forked from this pid (see mark_forked)
        self._waiting = State.DEFAULT
        self._after = State.DEFAULT  # what the pending call returns to (see begin)
        self._pending: list[WorkerRecord] = []
        self._needs_reset: str | None = None  # why the next step would give wrong data
        self._reset_mask: np.ndarray | None = None
        self._pool: PoolView | None = None
        self.ended = np.zeros(0, dtype=np.bool_)  # per env: terminated or truncated at the last step
        self._never_reset: np.ndarray | None = None  # per env, until every env has been reset once

    def bind(self, pool: PoolView, num_envs: int) -> None:
        """The pool whose breakage the checks report, and the env count (after the handshake)."""
        self._pool = pool
        self.ended = np.zeros(num_envs, dtype=np.bool_)
        self._never_reset = np.ones(num_envs, dtype=np.bool_)

    # -- reading -----------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """What the vector env is waiting for (``BROKEN`` once a worker died)."""
        if self.closed:
            return State.CLOSED
        if self._pool is not None and self._pool.broken is not None:
            return State.BROKEN
        return self._waiting

    @property
    def waiting(self) -> State:
        """The call being waited for, broken or not (what ``close()`` warns about)."""
        return self._waiting

    @property
    def pending(self) -> list[WorkerRecord]:
        """The workers that owe the pending call's reply, in worker order."""
        return self._pending

    @property
    def reset_mask(self) -> np.ndarray | None:
        """The mask of the pending reset (``None``: every env)."""
        return self._reset_mask

    # -- checks (pure) -----------------------------------------------------------------------

    def check_open(self, call: str) -> None:
        """Raise unless the vector env is open and no worker died."""
        if self.closed:
            if self.forked_from is not None:
                raise InvalidStateError(
                    f"`{call}` cannot run in process {os.getpid()}: this `{self.class_name}` belongs to "
                    f"process {self.forked_from}, which this process was forked from, and its workers "
                    "answer only there; build a vector env in this process instead"
                )
            raise ClosedEnvironmentError(f"Trying to operate on `{self.class_name}`, after a call to `close()`.")
        broken = None if self._pool is None else self._pool.broken
        if broken is not None:
            raise WorkerDiedError(
                f"`{call}` cannot run: {broken}",
                worker=broken.worker,
                envs=broken.envs,
                exitcode=broken.exitcode,
                deaths=broken.deaths,
            ) from broken

    @property
    def idle(self) -> bool:
        """Nothing pending: no call, and no env of an async batch in flight."""
        state = self._waiting
        if state is State.WAITING_RECV:
            return self._pool is not None and not self._pool.in_flight()
        return state is State.DEFAULT

    def check_can_start(self, call: str) -> None:
        """A new call may start: nothing pending (envs of a finished async batch count as idle)."""
        self.check_open(call)
        if not self.idle:
            raise already_pending(call, self._waiting)

    def check_can_reset(self, call: str, full: bool) -> bool:
        """:meth:`check_can_start` for a reset (``full``: of every env). After an env raised in
        an async batch (steps refused until a reset), a full reset may start while other envs are
        still in flight, as ``async_reset`` may: ``True`` then, and the caller drops what is in
        flight once its own checks have passed."""
        if full and self._waiting is State.WAITING_RECV and self._needs_reset is not None:
            self.check_open(call)
            return True
        self.check_can_start(call)
        return False

    def check_waiting(self, expected: State, call: str, starter: str) -> None:
        """Raise unless the pending call is ``expected`` (started by ``starter``)."""
        self.check_open(call)
        if self._waiting is not expected:
            message = f"Calling `{call}` without any prior call to `{starter}`."
            if self._waiting is not State.DEFAULT:  # (the words above are Gymnasium's; say what is pending)
                message += f" A `{self._waiting.value}` call is pending; complete it first."
            raise NoAsyncCallError(message, expected.value)

    def check_mask_reaches_unreset(self, call: str, mask: np.ndarray) -> None:
        """A reset with a ``reset_mask`` must include every env never reset yet: one left out
        would have no observation to return (``SyncVectorEnv`` fails to stack its ``None``)."""
        if self._never_reset is None:
            return
        left = np.flatnonzero(self._never_reset & ~mask)
        if left.size:
            raise InvalidArgumentError(
                f"`{call}` with `options['reset_mask']` must include every env not reset yet: env(s) "
                f"{left.tolist()} have never been reset, so they have no observation to return "
                f"(reset every env first: `reset()` without a reset_mask)"
            )

    def check_steppable(self, call: str, how: str) -> None:
        """Raise :class:`~vecenv.errors.NeedsResetError` while the envs' data is known to be wrong."""
        if self._needs_reset is not None:
            whole = " without a reset_mask (which envs it reached is not known)" if how == "reset()" else ""
            raise NeedsResetError(f"Calling `{call}` after {self._needs_reset}: call `{how}` first{whole}.")

    def check_step(self, call: str, disabled: bool) -> None:
        """A step may start (:meth:`check_can_start`, :meth:`check_steppable` and, under
        ``autoreset_mode=DISABLED``, :meth:`check_none_ended`), checked in that order."""
        if self.closed or self._waiting is not State.DEFAULT or self._needs_reset is not None or disabled:
            self.check_can_start(call)
            self.check_steppable(call, "reset()")
            if disabled:
                self.check_none_ended(call)
        elif self._pool is not None and self._pool.broken is not None:
            self.check_open(call)

    def check_none_ended(self, call: str) -> None:
        """``autoreset_mode=DISABLED``: no env may be stepped past its episode's end."""
        if self.ended.any():
            ended = np.flatnonzero(self.ended).tolist()
            raise NeedsResetError(
                f"Calling `{call}` with autoreset_mode=DISABLED while envs {ended} have terminated or "
                f"truncated: reset them first, e.g. reset(options={{'reset_mask': mask}})."
            )

    # -- transitions -------------------------------------------------------------------------

    def begin(self, state: State, pending: Sequence[WorkerRecord], reset_mask: np.ndarray | None = None) -> None:
        """A call was sent to ``pending``; ``state`` names what is now waited for.

        A call that steps nothing (``call``, ``get_attr``, ``set_attr``, ``render``), made
        between a ``recv`` and its ``send`` with no env in flight, returns to the async batches
        when it is over; a reset, step or rollout ends them (``async_reset`` starts them again).
        """
        keeps_batches = self._waiting is State.WAITING_RECV and state is State.WAITING_CALL
        self._after = State.WAITING_RECV if keeps_batches else State.DEFAULT
        self._waiting = state
        self._pending = pending if type(pending) is list else list(pending)  # the caller's, never changed
        self._reset_mask = reset_mask

    def finish(self) -> None:
        """The pending call is over (answered, failed or timed out)."""
        self._waiting, self._after = self._after, State.DEFAULT

    def interrupted(self, call: str, exc: BaseException, poisons: bool) -> None:
        """Sending ``call`` was cut short (Ctrl+C, or a failure part-way): nothing is pending,
        and when some envs may have acted on it (``poisons``) steps are refused until a reset."""
        if self._waiting is not State.WAITING_RECV:
            self._waiting = self._after
        self._after = State.DEFAULT
        if poisons:
            self._needs_reset = f"`{call}` was interrupted ({type(exc).__name__})"

    def interrupted_after_stepping(self, call: str, exc: BaseException) -> None:
        """``call`` raised ``exc`` while it assembled what every env had already stepped for.
        An error (an info that cannot be batched, say) leaves the envs usable, as in
        ``SyncVectorEnv``; an interrupt (Ctrl+C) loses the step the caller never sees, so steps
        are refused until a reset, as when the interrupt comes during the wait."""
        if not isinstance(exc, Exception):
            self._needs_reset = f"`{call}` was interrupted ({type(exc).__name__}) once the envs had stepped"

    def poison(self, reason: str) -> None:
        """Some envs stepped and others did not: refuse steps until a full reset."""
        self._needs_reset = reason

    def reset_done(self) -> None:
        """The pending reset was answered: its envs start new episodes."""
        if self._reset_mask is None:
            self._needs_reset = self._never_reset = None
            self.ended[:] = False
        else:
            self.ended[self._reset_mask] = False
            if self._never_reset is not None:
                self._never_reset[self._reset_mask] = False
                if not self._never_reset.any():
                    self._never_reset = None

    def step_done(self, terminations: np.ndarray, truncations: np.ndarray) -> None:
        """The pending step was answered: remember which envs ended."""
        np.logical_or(terminations, truncations, out=self.ended)

    def rollout_done(self, ended: np.ndarray) -> None:
        """The pending rollout was answered: ``ended`` marks the envs whose episode is over
        (at its last step; under DISABLED, at any step)."""
        self.ended[:] = ended

    def batches_started(self) -> None:
        """``async_reset`` put every env in flight: ``recv``/``send`` from now on."""
        self._needs_reset = self._never_reset = None
        self._waiting = State.WAITING_RECV
        self._pending = []
        self._reset_mask = None

    def mark_closed(self) -> None:
        """``close()`` ran (whatever it raised)."""
        self._waiting = State.CLOSED
        self.closed = True

    def mark_forked(self, owner: int) -> None:
        """This is a child forked from process ``owner``, whose workers these are: refuse every call."""
        self.forked_from = owner
        self.mark_closed()


class SeedBook:
    """Each env's last reset seed, and the seed policy (:mod:`vecenv.seeding`): a restarted
    worker's envs derive their seeds from both."""

    def __init__(self, num_envs: int, policy: SeedPolicy = SeedPolicy.SEQUENTIAL) -> None:
        self.seeds: list[int | None] = [None] * num_envs
        self.policy = policy
        #: The env ranges ``(start, stop)`` of native vector env groups (see :meth:`remember`).
        self.native_groups: list[tuple[int, int]] = []

    def expand(self, seed: Any, num_envs: int) -> list[int | None]:
        """One seed per env for ``reset(seed=seed)`` under the policy (checked; see ``seed_list``)."""
        return seed_list(seed, num_envs, self.policy)

    def remember(self, seeds: Sequence[int | None], mask: np.ndarray | None) -> None:
        """Record the seeds of a reset (only the masked envs, when ``mask`` is given).

        A native vector env group that the mask reaches was handed the seeds of all its envs
        (one int for its batch where they are consecutive, which seeds every env it resets,
        whatever the mask): all of them are recorded, so that a restart reseeds the group with
        seeds it took before (consecutive ones stay consecutive), not a mix of old and new
        seeds that a native env taking only an int (CartPole's) refuses.
        """
        if mask is not None and self.native_groups:
            mask = np.array(mask, dtype=np.bool_)
            for start, stop in self.native_groups:
                if mask[start:stop].any():
                    mask[start:stop] = True
        for i, seed in enumerate(seeds):
            if seed is not None and (mask is None or mask[i]):
                self.seeds[i] = seed

    def reseeded(self, start: int, stop: int, restart: int) -> list[int | None]:
        """The seeds for envs ``[start, stop)`` rebuilt at the vector env's ``restart``-th
        restart: env ``i`` last reset with seed ``s`` gets ``s + restart * num_envs`` (under
        ``"spawn"``: :func:`~vecenv.seeding.restart_seed`), so a rerun with the same crash
        reproduces; an env never seeded stays unseeded."""
        n = len(self.seeds)
        return [None if s is None else restart_seed(self.policy, s, restart, n) for s in self.seeds[start:stop]]
