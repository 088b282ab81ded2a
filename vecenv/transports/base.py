"""The interface a backend implements to carry commands to workers and replies back.

The pool (:mod:`vecenv.parent.pool`) is written against :class:`Transport` only; the process
transport (:mod:`vecenv.transports.process`) and the Ray transport (:mod:`vecenv.integrations.ray.transport`)
implement it. A transport reports what happened as events: a :class:`Reply` to a call, or the
:class:`Death` of a worker. It keeps no call state of its own beyond what it needs to deliver.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import Attach, Command

__all__ = ["Reply", "Death", "DeathCause", "Event", "WorkerGone", "CannotRestart", "Transport"]


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


Event = Reply | Death


@dataclasses.dataclass(frozen=True)
class DeathCause:
    """How a dead worker ended, in words ("was killed by signal SIGKILL"), and its exit code
    (``None`` where the transport has none, or its status was lost)."""

    how: str
    exitcode: int | None


class WorkerGone(Exception):
    """Raised by :meth:`Transport.send` when the worker can no longer be reached."""


class CannotRestart(Exception):
    """Raised by :meth:`Transport.relaunch` when this worker cannot be replaced (the transport
    cannot restart workers, the group is hosted by the parent, Ray was shut down); its message
    says why, and the restart code puts it in the :class:`~vecenv.errors.WorkerDiedError`."""


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
    def attach(self, worker: int, attach: Attach, buffers: Buffers, timeout: float | None = None) -> None:
        """Send a worker its place (after its Hello): start index, autoreset mode, buffer spec;
        ``timeout`` as for :meth:`send`.

        Raises:
            WorkerGone: the worker cannot be reached.
        """

    @abc.abstractmethod
    def encode(self, command: Command, call_id: int, payload: Any) -> Any:
        """The message for one command, made before anything is sent: a payload that cannot
        be serialised raises here, while no worker has been told anything."""

    @abc.abstractmethod
    def send(self, worker: int, message: Any, timeout: float | None = None) -> None:
        """Send one encoded command; a worker that takes none of it for ``timeout`` seconds
        (``None``: no limit) is stuck.

        Raises:
            WorkerGone: the worker cannot be reached (or was ended because a part of the
                command is stuck in its pipe).
            vecenv.transports.sending.SendTimeout: the worker took none of the command (it is
                busy); nothing was sent.
        """

    @abc.abstractmethod
    def poll(self, workers: Sequence[int], timeout: float | None) -> list[Event]:
        """Block until one or more of ``workers`` has something to report, or ``timeout`` passes
        (``[]``). Never spins: every return either carries an event or means time is up."""

    @abc.abstractmethod
    def cause_of_death(self, worker: int) -> DeathCause:
        """How a dead worker ended."""

    def ended(self, workers: Sequence[int]) -> list[int]:
        """Those of ``workers`` whose process has already ended, found without waiting (for a
        message naming every worker dead at once). A transport that cannot tell returns ``[]``."""
        return []

    def sole_core(self) -> Any:
        """The :class:`~vecenv.worker.core.WorkerCore` of the only worker, when it runs in this
        process (every env in the parent): a call can then run it directly, with nothing to
        encode, queue or wait for. ``None`` for every other layout."""
        return None

    def where(self, worker: int) -> str:
        """Where the worker runs, for messages (" on node ..."), or ``""``."""
        return ""

    def release_fds(self) -> None:
        """Every worker is attached and none will be restarted: close the descriptors kept only
        to attach a restarted worker (a process forked later would inherit them)."""
        return None

    def drop_queued(self) -> None:
        """Forget the commands sent but not started, before ``close()``: a worker hosted by the
        parent runs its commands only when their replies are waited for, and a step that was
        sent (``step_async``) and never waited for must not run inside ``close()``, where an env
        that hangs would hang it (as ``SyncVectorEnv``, which steps in ``step_wait``). A worker
        process starts its commands as they come: nothing to forget."""
        return None

    @property
    def pids(self) -> list[int | None]:
        """Each worker's process id, in worker order; ``None`` for a worker that is not a process
        of its own or not started. A transport without processes to name returns ``[]``."""
        return []

    def relaunch(self, worker: int) -> None:
        """Replace a dead worker by a new one built from the same group builder; its Hello is
        owed as call id 0. Transports that cannot do this raise :class:`CannotRestart`, and the
        pool is left broken instead."""
        raise CannotRestart(f"{type(self).__name__} cannot restart workers")

    @abc.abstractmethod
    def kill(self) -> None:
        """End every worker now (the pool is broken)."""

    def abort(self, reason: str) -> None:
        """End every worker from another thread than the one waiting on them, by signal only
        (no pipe touched, nothing reaped), so that the waiting thread sees the deaths and
        reports ``reason`` as their cause. A transport that cannot do this safely does nothing."""
        return None

    @abc.abstractmethod
    def stop(self, deadline: float, closing: Sequence[int] = ()) -> None:
        """Wait until ``deadline`` (``time.monotonic()``) for the workers in ``closing`` (those
        asked to close) to exit, end the rest at once; release every resource. Idempotent."""
