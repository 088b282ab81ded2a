"""The step's fast path: a step command and its completion published in shared words, beside
the pipes, so that a peer that is awake sees them by reading memory, with no system call.

Waking a process that sleeps on a pipe costs the writer tens of microseconds (on a virtual
machine, an interrupt to a halted core), as much as a small group's whole step. So the parent
posts a payload-free ``STEP`` (its actions are in the shared rows) as a word of a small shared
block, and the worker posts its empty reply (no infos, every row shared) as another; each side
spins on the other's word for a bounded, adaptive time (:class:`SpinBudget`), then sleeps on its
pipe. Where every process of the vector env has a core of its own the spin reads the words flat
out; where they outnumber the cores each round also yields the core (:class:`SpinMode`), so that
the peer it waits for runs. A ``ROLLOUT`` command goes through the pipe, but where it allows it
(:func:`~vecenv.wire.protocol.allow_word_reply`) its empty reply is posted in the done word
too, with the same wake-up, and the wait for it neither spins nor counts in the budget.
Everything else (infos, errors, calls, set-up, close) goes through the pipes as before, and so
does the wake-up of a peer that sleeps: a
:data:`~vecenv.wire.protocol.Command.WAKE` command or a wake reply, which
carries nothing (see :mod:`vecenv.wire.protocol`).

**The wake-up is never lost.** A sleeper and a waker follow the same two steps, in opposite
roles (Dekker's pattern)::

    sleeper:  store SLEEPING = 1;  fence();  load the request word;  unchanged -> block on the pipe
    waker:    store the request;   fence();  load SLEEPING;          1 -> write to the pipe

With a full fence between each side's store and its load, at least one of the two loads sees
the other side's store: either the sleeper sees the request and does not block, or the waker
sees SLEEPING and writes to the pipe (both may happen: the wake message is then a stale one,
read and dropped later, which costs nothing but that read). Without the fence a store may wait
in its core's store buffer while the following load runs, both loads miss, and the sleeper
sleeps on a request nobody will wake it for.

**The fence from Python.** Python has no memory fence. The words are read and written as
items of a ``memoryview`` cast to int64: CPython copies one item with a fixed-size 8-byte
``memcpy``, one plain move, and an aligned 8-byte move is atomic on x86-64 (no torn value).
x86-64 (total store order) reorders only a store with a later load, and no such reordering
crosses a locked instruction. :func:`fence` takes and releases a private ``threading.Lock``:
CPython does that with atomic compare-and-swaps (glibc's ``sem_trywait``/``sem_wait`` and
``sem_post`` up to 3.12, its own ``PyMutex`` from 3.13), ``lock``-prefixed instructions on
x86-64, hence a full barrier; being calls into C, they also keep the C compiler from moving the
word accesses across them. The rest needs no fence on x86-64: the worker's
rows are stored before its done word and the parent's actions before its command word, and
x86-64 keeps stores in order and loads in order, so a side that sees the word sees the rows.
On other architectures (ARM's loads and stores reorder freely, and a lock there is only an
acquire and a release, not a full fence) :data:`SUPPORTED` is false and the pipes carry every
step, as before. As a second line, neither side ever blocks longer than :data:`RECHECK_SECONDS`
before it reads the words again, so even a wake-up lost against this argument would cost a
bounded delay, never a hang; it also wakes a sleeping worker ten times a second at most, which
is no measurable CPU.

Both sides read the same clock, ``time.perf_counter_ns()`` (Linux's ``CLOCK_MONOTONIC``, one
for the whole machine), to stamp a post beside its word.

Layout of the block (int64 words): line 0 holds the parent's :data:`PARENT_SLEEPING`; worker
``w``'s slot starts at ``SLOT_BYTES * (w + 1)`` and holds the words the parent writes in its
first cache line and those the worker writes in its second (no false sharing between them).
"""

from __future__ import annotations

import enum
import platform
import threading
from typing import NamedTuple

from vecenv.wire.buffers import HAVE_MEMFD, SharedBlock

__all__ = [
    "SUPPORTED",
    "RECHECK_SECONDS",
    "SPIN_LIMIT",
    "YIELD_PROCESSES_PER_CORE",
    "SpinMode",
    "ControlBlock",
    "Slot",
    "SpinBudget",
    "fence",
]

#: Whether the fast path may run here: x86-64 (where :func:`fence` is a full barrier) and memfds.
SUPPORTED = HAVE_MEMFD and platform.machine().lower() in ("x86_64", "amd64")
#: A side that sleeps reads the words again after at most this long (see the module docstring).
RECHECK_SECONDS = 0.1
#: The longest a wait spins on the words before it sleeps (its budget adapts below it): about a
#: group's step of cheap envs (64 CartPoles take ~0.6 ms); a longer wait sleeps at once.
SPIN_LIMIT = 1e-3
#: Where a vector env's processes outnumber the cores, they still spin, but each round of a
#: spin gives the core away (``sched_yield``) to a peer that has work, up to this many processes
#: per core; past that nobody spins. On 2 cores, 2 workers and the parent stepping CartPole at
#: N=8 went from 0.3x to 0.7-0.8x Sync; 4 workers (5 processes) from 21,000 to 68,000 env-steps/s.
YIELD_PROCESSES_PER_CORE = 3

SLOT_BYTES = 128
_WORD = 8
# Word indices. Line 0: the parent's.
PARENT_SLEEPING = 0
# In a slot, written by the parent (first line) ...
COMMAND = 0  # call id of the last payload-free STEP posted in the word
PIPE_SENT = 1  # messages the parent wrote to the pipe: a hint for a spinning worker
SPIN_NS = 2  # the longest the worker may spin, in nanoseconds (0: never)
POSTED_AT = 3  # time.perf_counter_ns() when COMMAND was last stored
SPIN_YIELDS = 4  # 1: the worker's spin gives its core away each round (processes > cores)
# ... and by the worker (second line).
DONE = 8  # call id of the last word command answered in the word (an empty reply)
REPLIES = 9  # replies the worker wrote to the pipe: a hint for the spinning parent
SLEEPING = 10  # 1 while the worker is blocked on its pipe, or about to be
DONE_AT = 11  # time.perf_counter_ns() when DONE was last stored

_FENCE = threading.Lock()


class Slot(NamedTuple):
    """Where one worker's words are: their items in :attr:`ControlBlock.words` (computed once,
    read on every step)."""

    command: int
    pipe_sent: int
    spin_ns: int
    posted_at: int
    spin_yields: int
    done: int
    replies: int
    sleeping: int
    done_at: int


def fence() -> None:
    """A full memory barrier on x86-64: a lock taken and released (a locked compare-and-swap).
    See the module docstring for why that is one, and where it is not.

    Taken with ``with``, never ``acquire()`` then ``release()``: Ctrl+C raised between those two
    calls would leave the lock held, and the next fence of the process would wait forever. The
    ``with`` releases it whatever is raised once it is taken (no signal is handled in between).
    """
    with _FENCE:
        pass


class ControlBlock:
    """The shared words of one vector env's workers: a sealed memfd, one slot per worker."""

    def __init__(self, block: SharedBlock, workers: int) -> None:
        self.block = block
        self.workers = workers
        # A memoryview of int64s: one item read or written is one aligned 8-byte access.
        self.words: memoryview | None = memoryview(block.buf).cast("q")
        words = (COMMAND, PIPE_SENT, SPIN_NS, POSTED_AT, SPIN_YIELDS, DONE, REPLIES, SLEEPING, DONE_AT)
        #: Each worker's :class:`Slot`.
        self.slots = [Slot(*(self.index(w, word) for word in words)) for w in range(workers)]

    @staticmethod
    def size(workers: int) -> int:
        return SLOT_BYTES * (workers + 1)

    @classmethod
    def create(cls, workers: int) -> ControlBlock:
        """The parent's block for ``workers`` slots; its descriptor is kept to send to each
        worker (and to a restarted one) until :meth:`release_fd` or :meth:`close`."""
        return cls(SharedBlock.create(cls.size(workers), None, "the fast path's control block"), workers)

    @classmethod
    def attach(cls, fd: int, workers: int) -> ControlBlock:
        """A worker's mapping of the block, from the descriptor the parent sent (taken over)."""
        return cls(SharedBlock.attach(cls.size(workers), None, fd), workers)

    @property
    def fd(self) -> int | None:
        return self.block.fd

    def index(self, worker: int, word: int) -> int:
        """The item of ``words`` that holds ``word`` of ``worker``'s slot."""
        return (SLOT_BYTES * (worker + 1)) // _WORD + word

    def reset(self, worker: int) -> None:
        """Zero a slot (before its worker starts, or starts again), keeping its spin limit and mode."""
        words = self.words
        assert words is not None
        for word in (COMMAND, PIPE_SENT, POSTED_AT, DONE, REPLIES, SLEEPING, DONE_AT):
            words[self.index(worker, word)] = 0

    def release_fd(self) -> None:
        """Close the parent's descriptor once no worker will need it (the mapping stays)."""
        self.block.release_fd()

    def close(self) -> None:
        """Unmap the block and close the parent's descriptor. Safe to call twice."""
        if self.words is not None:
            self.words.release()
            self.words = None
        if self.block.buf is not None:
            self.block.close(unlink=False)


class SpinMode(enum.IntEnum):
    """How the waits of a vector env's processes may spin, from how many there are per core."""

    #: Nobody spins: every wait sleeps on its pipe at once.
    OFF = 0
    #: Every process has a core: a spin reads the words as fast as it can.
    FULL = 1
    #: More processes than cores: each round of a spin reads the words and then yields its core
    #: (``os.sched_yield``) to any process that has work, so the peer a spinner waits for runs on
    #: the spinner's core instead of waiting behind it; being descheduled is then no miss.
    YIELDING = 2

    @classmethod
    def for_processes(cls, processes: int, cpus: int) -> SpinMode:
        """The mode for ``processes`` processes (the workers and the parent) on ``cpus`` cores."""
        if processes <= 1:
            return cls.OFF  # nobody to wait for
        if processes <= cpus:
            return cls.FULL
        if processes <= YIELD_PROCESSES_PER_CORE * cpus:
            return cls.YIELDING
        return cls.OFF


class SpinBudget:
    """How long one wait spins before it sleeps: about as long as waits have lately taken, and
    only while spinning has lately paid.

    The budget is twice the recent typical wait (an average weighted to the last few) plus a
    floor, never more than ``limit``; when the typical wait is longer than ``limit`` (a learner
    that thinks for milliseconds between steps, envs that step for milliseconds) the spin would
    catch nothing and the budget is 0: the wait sleeps at once. Every wait is measured, asleep
    or not, so the budget comes back when waits become short again. ``limit`` 0 never spins.

    The cores actually free: a spin that catches nothing in its budget, or finds itself
    descheduled (two reads of the clock :data:`PREEMPTED` apart) while it meant to keep its
    core, is a miss, and the next 1, 2, 4, ... up to :data:`MAX_SKIP` waits (doubling while
    misses go on) sleep at once; a catch ends that. On a machine whose cores are busy with other
    work, the peer a spinner waits for often cannot run until the spinner gives its core up, so
    the spins miss and stop, and the vector env then costs nobody else their time. Where its own
    processes outnumber the cores the spin yields its core every round (:class:`SpinMode`), so
    being descheduled is expected and only a spin that catches nothing is a miss; past
    :data:`YIELD_PROCESSES_PER_CORE` processes a core ``limit`` is 0 from the start.
    """

    FLOOR = 20e-6
    WEIGHT = 0.25  # of the latest wait in the average
    PREEMPTED = 50e-6
    MAX_SKIP = 1024

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.typical = 0.0
        self.skip = 0  # waits left that sleep at once
        self.backoff = 0  # waits skipped after the latest miss

    def seconds(self, limit: float | None = None) -> float:
        """The spin of the next wait (``limit``: this wait's own cap, such as its timeout)."""
        cap = self.limit if limit is None else min(self.limit, limit)
        if cap <= 0 or self.typical > self.limit:
            return 0.0
        if self.skip:
            self.skip -= 1
            return 0.0
        return min(cap, 2 * self.typical + self.FLOOR)

    def record(self, waited: float, spun: bool = False, caught: bool = False) -> None:
        """A wait ended after ``waited`` seconds; ``spun``: it spun first; ``caught``: what
        it waited for came during the spin. ``waited`` is counted to when the other side
        posted (the time it stores beside its word), not to when this side woke: a sleeper's
        own wake-up, slow on a busy machine, would otherwise make every wait look too long to
        spin for, and the spins would never come back."""
        self.typical += self.WEIGHT * (waited - self.typical)
        if caught:
            self.backoff = 0
        elif spun:
            self.backoff = min(self.MAX_SKIP, 2 * self.backoff or 1)
            self.skip = self.backoff
