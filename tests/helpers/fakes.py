"""An in-memory :class:`~vecenv.transports.base.Transport` and a fake clock, for unit tests of
the pool and the restart code that start no process.

:class:`FakeTransport` answers every command at once from :meth:`FakeTransport.respond` (which a
test may replace), unless the worker is *held*: then the replies wait until the test releases
them. Replies arrive one per :meth:`~FakeTransport.poll` call, in the order they were made, so a
test controls which worker answers first. A poll that finds nothing advances the
:class:`FakeClock` by its whole timeout and returns ``[]``, as a real transport returns once the
time is up; the pool's deadlines are read from the same clock (``use_clock``), so a timeout
takes no time at all. A poll without a timeout and with nothing to deliver would block forever
on a real transport: here it fails the test.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from vecenv.errors import PackedException
from vecenv.transports.base import CannotRestart, Death, DeathCause, Event, Reply, Transport, WorkerGone
from vecenv.transports.sending import SendTimeout
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import Attach, Command, Hello, StepReply

__all__ = ["FakeClock", "Sent", "FakeTransport", "OBS_SPACE", "ACT_SPACE", "hello", "use_clock", "count_pickles"]

OBS_SPACE = spaces.Box(-1.0, 1.0, (2,), np.float32)
ACT_SPACE = spaces.Discrete(3)


def count_pickles(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[int]:
    """The pids of the processes that pickled an instance of ``cls`` (a plain class that pickles
    through ``object.__reduce_ex__``), one entry per pickling, from now to the test's end: how a
    test sees that something large is pickled once per vector env, not once per worker."""
    pickled: list[int] = []
    real = object.__reduce_ex__

    def counted(self: Any, protocol: Any) -> Any:
        pickled.append(os.getpid())
        return real(self, protocol)

    monkeypatch.setattr(cls, "__reduce_ex__", counted)
    return pickled


class FakeClock:
    """``monotonic()`` that moves only when told to."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, seconds
        self.now += seconds


def use_clock(monkeypatch: pytest.MonkeyPatch, clock: FakeClock, *modules: Any) -> None:
    """Make ``modules`` (e.g. ``vecenv.parent.pool``) read ``time.monotonic`` from ``clock``."""
    for module in modules:
        monkeypatch.setattr(module, "time", clock)


@dataclasses.dataclass(frozen=True)
class Sent:
    """One encoded command, as the fake transport encodes it (no bytes: the objects)."""

    command: Command
    call_id: int
    payload: Any


def hello(num_envs: int, **changes: Any) -> Hello:
    """The Hello of a group of ``num_envs`` envs with the fake spaces."""
    fields: dict[str, Any] = dict(
        num_envs=num_envs,
        observation_space=OBS_SPACE,
        action_space=ACT_SPACE,
        metadata={},
        render_mode=None,
        spec=None,
        mismatch=None,
        native_autoreset=None,
    )
    fields.update(changes)
    return Hello(**fields)


class FakeTransport(Transport):
    """Workers that live in lists; see the module docstring.

    Each group builder given to :meth:`launch` is called here and returns the worker's env
    count (its Hello says so), or raises (its Hello is then that error).
    """

    shares_memory = False

    def __init__(self, clock: FakeClock, *, can_relaunch: bool = True) -> None:
        self.clock = clock
        self.can_relaunch = can_relaunch
        self.group_fns: list[Callable[[], Any]] = []
        self.queue: list[Event] = []  # made, not yet delivered, in arrival order
        self.held: dict[int, list[Event]] = {}  # held workers: their replies, kept back
        self.dead: set[int] = set()
        self.sent: list[tuple[int, Sent]] = []  # every send, in order
        self.send_timeouts: list[float | None] = []  # the bound each send was given
        self.full: set[int] = set()  # workers whose pipe takes nothing (stuck, pipe full)
        self.attached: list[tuple[int, Attach]] = []
        self.launches: list[int] = []  # the worker of every (re)launch
        self.polls: list[tuple[list[int], float | None]] = []
        self.killed = 0
        self.stopped: list[tuple[float, list[int]]] = []
        #: What a worker answers: ``(ok, result)`` for one command; replace to script a test.
        self.respond: Callable[[int, Sent], tuple[bool, Any]] = self.default_respond
        #: ``poll`` hands over every queued event of the workers polled at once, as one wait
        #: that finds a reply and its worker's death together does (else one event a poll).
        self.batches = False

    # -- scripting ---------------------------------------------------------------------------

    @staticmethod
    def default_respond(worker: int, sent: Sent) -> tuple[bool, Any]:
        """A reset or step is answered with an empty StepReply, anything else with None."""
        if sent.command in (Command.RESET, Command.STEP):
            return True, StepReply([])
        return True, None

    def hold(self, worker: int) -> None:
        """Keep ``worker``'s replies back until :meth:`release` (a slow or stuck worker)."""
        self.held.setdefault(worker, [])

    def release(self, worker: int) -> None:
        """Deliver what ``worker`` answered while held, and answer at once from now on."""
        self.queue.extend(self.held.pop(worker))

    def die(self, worker: int) -> None:
        """``worker`` dies now: its death follows what it already answered; held replies are lost."""
        self.dead.add(worker)
        self.held.pop(worker, None)
        self._emit(worker, Death(worker))

    def _emit(self, worker: int, event: Event) -> None:
        if worker in self.held and not isinstance(event, Death):
            self.held[worker].append(event)
        else:
            self.queue.append(event)

    def _hello(self, worker: int) -> None:
        try:
            reply = Reply(worker, 0, True, hello(self.group_fns[worker]()))
        except Exception as exc:
            reply = Reply(worker, 0, False, PackedException(exc, None))
        self._emit(worker, reply)

    # -- the Transport interface ------------------------------------------------------------

    def launch(self, group_fns: Sequence[Callable[[], Any]]) -> None:
        self.group_fns = list(group_fns)
        for worker in range(len(group_fns)):
            self.launches.append(worker)
            self._hello(worker)

    def attach(self, worker: int, attach: Attach, buffers: Buffers, timeout: float | None = None) -> None:
        if worker in self.dead:
            raise WorkerGone(worker)
        self.attached.append((worker, attach))

    def encode(self, command: Command, call_id: int, payload: Any) -> Sent:
        pickle.dumps(payload)  # what cannot be serialised raises here, as on a real transport
        return Sent(command, call_id, payload)

    def send(self, worker: int, message: Any, timeout: float | None = None) -> None:
        self.send_timeouts.append(timeout)
        if worker in self.dead:
            raise WorkerGone(worker)
        if worker in self.full:
            raise SendTimeout(f"took none of a command for {timeout:g} s", written=False)
        self.sent.append((worker, message))
        ok, result = self.respond(worker, message)
        self._emit(worker, Reply(worker, message.call_id, ok, result))

    def poll(self, workers: Sequence[int], timeout: float | None) -> list[Event]:
        self.polls.append((list(workers), timeout))
        if self.batches:
            found = [event for event in self.queue if event.worker in workers]
            if found:
                self.queue = [event for event in self.queue if event.worker not in workers]
                return found
        for event in self.queue:
            if event.worker in workers:
                self.queue.remove(event)
                return [event]
        if timeout is None:
            raise AssertionError(f"poll({list(workers)}, None) would block forever: nothing to deliver")
        self.clock.advance(timeout)
        return []

    def cause_of_death(self, worker: int) -> DeathCause:
        return DeathCause("was killed by signal SIGKILL", -9)

    def where(self, worker: int) -> str:
        return " on the fake node"

    def relaunch(self, worker: int) -> None:
        if not self.can_relaunch:
            raise CannotRestart("FakeTransport cannot restart workers")
        self.dead.discard(worker)
        self.queue = [e for e in self.queue if e.worker != worker]  # the old process's are gone
        self.held.pop(worker, None)
        self.launches.append(worker)
        self._hello(worker)

    def kill(self) -> None:
        self.killed += 1
        self.dead.update(range(len(self.group_fns)))

    def stop(self, deadline: float, closing: Sequence[int] = ()) -> None:
        self.stopped.append((deadline, list(closing)))

    # -- reading ------------------------------------------------------------------------------

    def commands(self, worker: int | None = None) -> list[Command]:
        """The commands sent (to ``worker``), in order."""
        return [s.command for w, s in self.sent if worker is None or w == worker]
