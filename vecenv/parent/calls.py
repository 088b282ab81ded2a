"""How one call starts and ends over the pool, with the call state right whatever interrupts it.

:class:`CallRunner` is what both API layers (:mod:`vecenv.parent.vector_env`,
:mod:`vecenv.parent.envpool_api`) use to send a call and to gather its replies. A
``KeyboardInterrupt`` (Ctrl+C) may land between any two statements; at every point the outcome
is one of two: the call is pending and its replies will be gathered, or nothing is pending and
every reply already on its way is dropped when it arrives. When envs may have acted on an
interrupted call, steps are refused until a reset, whose data is then exactly ``SyncVectorEnv``'s.
A pipe that the interrupt cut in the middle of a message ends that worker
(:mod:`vecenv.transports.process`): the next call reports it dead, or restarts it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from vecenv.errors import WorkerDiedError
from vecenv.parent.pool import WorkerPool
from vecenv.parent.records import WorkerRecord
from vecenv.parent.state import CallState, State
from vecenv.wire.protocol import Command

__all__ = ["CallRunner"]


class CallRunner:
    """Starts and finishes calls on ``pool``, keeping ``calls`` (the call state) in step."""

    def __init__(self, pool: WorkerPool, calls: CallState) -> None:
        self.pool = pool
        self.calls = calls
        #: The running call's ``timeout=``, which bounds its sends too (``None``: the default
        #: bound, :data:`~vecenv.transports.sending.SEND_TIMEOUT`).
        self.timeout: float | None = None

    @contextlib.contextmanager
    def within(self, timeout: float | None) -> Iterator[None]:
        """The sends made inside give up on a worker that takes none of its command for
        ``timeout`` seconds (a call with a ``timeout=`` of its own, such as ``step``, bounds
        its send by it too). Nested: the outermost call's timeout holds."""
        if timeout is None or self.timeout is not None:
            yield
            return
        self.timeout = timeout
        try:
            yield
        finally:
            self.timeout = None

    def send(
        self,
        workers: Sequence[WorkerRecord],
        command: Command,
        payloads: Sequence[Any],
        call: str,
        state: State | None,
        mask: np.ndarray | None = None,
    ) -> None:
        """Send ``command`` to ``workers`` and, unless ``state`` is ``None`` (a batch sent by
        ``send``), record the call as pending in that state.

        A worker that takes none of its message for :attr:`timeout` (see :meth:`within`) raises
        ``VecEnvTimeoutError`` (or is a dead worker, when its pipe holds part of it).
        Nothing is sent when a payload cannot be encoded. An interrupt after that leaves
        nothing pending: what was sent is abandoned (its replies dropped) and, for a reset, a
        step or a rollout (whose envs may have acted on it), steps are refused until a reset.
        """
        pool = self.pool
        outgoing = pool.prepare(workers, command, payloads, call)
        try:
            pool.deliver(workers, outgoing, self.timeout)
            if state is not None:
                self.calls.begin(state, workers, mask)
        except WorkerDiedError:
            raise
        except BaseException as exc:
            pool.abandon(workers)
            self.calls.interrupted(call, exc, poisons=command in (Command.RESET, Command.STEP, Command.ROLLOUT))
            raise

    def finish(self, call: str, timeout: float | None, poisons: bool) -> list[Any]:
        """Gather the pending call's replies and return to ``DEFAULT`` whatever happens.

        ``poisons``: a timeout, env error or interrupt leaves some envs stepped and others
        not, so the next step must be refused until a full reset.
        """
        calls = self.calls
        try:
            return self.pool.gather(calls.pending, timeout, call)
        except WorkerDiedError:
            raise
        except BaseException as exc:
            if poisons:
                calls.poison(f"`{call}` failed ({type(exc).__name__})")
            raise
        finally:
            calls.finish()
