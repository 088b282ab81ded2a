"""The parent's record of one worker: its env range and its one status.

Each worker has exactly one :class:`WorkerStatus`, changed only by the transition methods of
:class:`WorkerRecord`::

    STARTING --hello--> READY --take--> IDLE --send--> BUSY --reply--> READY --take--> IDLE
                                          ^              | timeout (abandon)
                                          |              v
                                          '--reply-- LATE  (its reply is dropped on arrival)
    any --death--> DEAD

("Worker" alone names the process or actor; this is what the parent knows of it.)
"""

from __future__ import annotations

import dataclasses
from collections import deque
from enum import Enum
from typing import Any

from vecenv.errors import VecEnvError
from vecenv.wire.protocol import Command, Outcome

__all__ = ["WorkerStatus", "OwedCall", "WorkerRecord"]


class WorkerStatus(Enum):
    """Where one worker stands, as the parent sees it."""

    STARTING = "starting"  # launched; its Hello is owed
    IDLE = "idle"  # owes nothing
    BUSY = "busy"  # owes the reply to the call it was last sent
    READY = "ready"  # that reply has arrived and waits to be taken
    LATE = "late"  # owes only replies to calls that timed out; they are dropped on arrival
    DEAD = "dead"


@dataclasses.dataclass(slots=True)
class OwedCall:
    """A call whose reply a worker still owes: made once, when the call is prepared, and kept
    by the worker's record until the reply arrives (``wanted=False``: dropped on arrival)."""

    call_id: int
    call: str
    wanted: bool = True
    command: Command | None = None  # None: the handshake
    message: Any = None  # as sent, to send again to a restarted worker
    payload: Any = None  # before it was encoded (a restart reads a reset's mask)


class WorkerRecord:
    """The pool's record of one worker: its env range ``[start, stop)`` and its status."""

    __slots__ = (
        "index",
        "start",
        "stop",
        "status",
        "reply",
        "ready_at",
        "restarted_reset",
        "unreported_restart",
        "restart_observations",
        "launches",
        "held_call",
        "_owed",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.start = 0
        self.stop = 0
        self.status = WorkerStatus.STARTING
        self.reply: Outcome | None = None
        self.ready_at = 0  # arrival order of the held reply: recv hands out the earliest first
        self.restarted_reset: int | None = None  # a reset sent again after a restart: mark its infos
        #: The reset of a replacement that no call has reported yet (the death was found by a
        #: message nobody waits for): the next step or rollout sent to it reports it instead.
        self.unreported_restart: Any = None
        #: The group's observations before that reset rewrote them (row 0 of the next rollout).
        self.restart_observations: Any = None
        self.launches = 1  # processes (or actors) started for it so far: what a new one lacks
        self.held_call: OwedCall | None = None  # the call whose reply is held (READY)
        self._owed: deque[OwedCall] = deque([OwedCall(0, "__init__")])

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

    @property
    def owes(self) -> bool:
        """Some reply is still to arrive (wanted or not)."""
        return bool(self._owed)

    # -- transitions: the only places that change ``status`` --------------------------------

    def check_sendable(self, call: str) -> None:
        """Raise unless a command may be sent now (the pool checks before it writes anything)."""
        if self.status not in (WorkerStatus.IDLE, WorkerStatus.LATE):
            raise StatusError(f"`{call}` sent to worker {self.index} while it is {self.status.value}")

    def sent(self, owed: OwedCall) -> None:
        """``owed`` is out (its status was checked when it was prepared): the worker owes its
        reply and is BUSY, or, for a reply nobody waits for, LATE until it arrives."""
        self._owed.append(owed)
        if owed.wanted:
            self.status = WorkerStatus.BUSY
        elif self.status is not WorkerStatus.BUSY:
            self.status = WorkerStatus.LATE

    def answered(self, call_id: int, ok: bool, result: Any, order: int) -> None:
        """A reply arrived: keep it if its call is still wanted, else drop it."""
        owed_calls = self._owed
        if owed_calls and owed_calls[0].call_id == call_id:  # replies come in order
            owed = owed_calls.popleft()
        else:
            for owed in owed_calls:
                if owed.call_id == call_id:
                    owed_calls.remove(owed)
                    break
            else:
                return  # not a call of ours (cannot happen with an ordered transport)
        if owed.wanted:
            self.reply, self.ready_at, self.held_call = Outcome(ok, result), order, owed
            self.status = WorkerStatus.READY
        elif self.status is WorkerStatus.LATE and not self._owed:
            self.status = WorkerStatus.IDLE

    def take(self) -> Outcome:
        if self.status is not WorkerStatus.READY or self.reply is None:
            raise StatusError(f"worker {self.index} has no reply to take: it is {self.status.value}")
        reply, self.reply, self.held_call = self.reply, None, None
        self.status = WorkerStatus.IDLE
        return reply

    def abandon(self) -> None:
        """The caller stops waiting (a timeout, or a new async reset): drop what is owed."""
        for owed in self._owed:
            owed.wanted = False
        if self.status is WorkerStatus.READY:
            self.reply = self.held_call = None
            self.status = WorkerStatus.IDLE
        elif self.status is WorkerStatus.BUSY or self.status is WorkerStatus.STARTING:
            self.status = WorkerStatus.LATE

    def died(self) -> None:
        self._owed.clear()
        self.reply = self.held_call = None
        self.status = WorkerStatus.DEAD

    def relaunched(self) -> OwedCall | None:
        """A new process replaces this one: its Hello is owed. Returns the call that was still
        wanted from the old one, if any (everything else it owed is gone with it).

        A reply held but not yet taken (it arrived in the same wait that found the death)
        counts as not answered: the envs it speaks of are gone, and the replacement's reset
        rewrites their rows before anybody reads them.
        """
        if self.status is WorkerStatus.READY:
            wanted = self.held_call
        else:
            wanted = next((owed for owed in self._owed if owed.wanted), None)
        self.launches += 1
        self.restart_reported()
        self._owed = deque([OwedCall(0, "__init__")])
        self.reply = self.held_call = None
        self.status = WorkerStatus.STARTING
        return wanted

    # -- a restart's report: the Restarter sets it, the pool reads it ------------------------

    def restart_unreported(self, reset: Any, observations: Any) -> None:
        """The replacement's ``reset`` reply is for the next step or rollout to report, with
        the group's ``observations`` from before that reset."""
        self.unreported_restart, self.restart_observations = reset, observations

    def restart_reported(self) -> None:
        """A call reported the restart, or made it moot (a reset of the whole group)."""
        self.unreported_restart = self.restart_observations = None

    def mark_restart_in(self, call_id: int) -> None:
        """The reply to reset ``call_id`` reports the restart: its infos mark every env of the group."""
        self.restarted_reset = call_id

    def marks_restart(self, call_id: int) -> bool:
        """Whether the reply to ``call_id`` is the reset that reports the restart (once: the
        mark is used up)."""
        if call_id != self.restarted_reset:
            return False
        self.restarted_reset = None
        return True


class StatusError(VecEnvError, RuntimeError):
    """A transition the record's status does not allow: a defect of the caller's, never an
    env's (the API layers check the call state before they reach the pool)."""
