"""``num_workers="auto"``: time one env here, then pick how many worker processes pay off.

A worker process costs a fixed amount on every vector step (a command out, a wake-up, a reply,
per worker) and saves at most the share of the env work it takes off the other cores. With a few
cheap envs (CartPole at N=8: about 10 µs of work per env step) that fixed cost is larger than
all the work, and stepping every env in the parent is fastest; with more or slower envs, one
worker per core is. ``auto`` builds one extra env from the first constructor, steps it with
random actions for a few milliseconds, closes it, and decides from the time one step took and
the share of a core it used meanwhile:

    a step uses under WAITING_MAX_CPU_SHARE of a core
      and waits at least WAIT_MIN_SECONDS               ->  more workers than cores (see below)
    num_envs x step time < PARALLEL_MIN_SECONDS  or one core  ->  0 workers (all in the parent)
    otherwise   ->  min(num_envs, cores) groups, the parent stepping one of them (``inline_group``)

An env whose step mostly waits (on a simulator in another process, a socket, a sleep) leaves its
core idle: one worker per core would step its envs' waits one after the other, where more
workers overlap them, as ``AsyncVectorEnv``'s process per env does. Such envs get
``cores / share`` workers (enough to keep the cores busy), at most one per env and
``MAX_WORKERS_PER_CORE`` per core, none in the parent, and no more than the descriptor limit
(``RLIMIT_NOFILE``) lets start: each worker keeps a few descriptors open in the parent.

With the parent stepping a group, the processes of the vector env are no more than the cores,
so parent and workers may spin briefly on each other's step words instead of sleeping (the
step's fast path, :mod:`vecenv.wire.fastpath`): on 2 cores that is the fastest layout from about 16 CartPole
envs up (measured: N=128 1.67x Sync against 1.27x for two worker processes).

Envs stepped in the parent are the same envs with the same results, but a crash or a hang in
one of them is the parent's (no worker to lose, no timeout that can interrupt it): pass an
explicit count to keep envs out of the training process.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vecenv.machine import available_cpus, free_descriptors
from vecenv.transports.process import START_DESCRIPTORS, WORKER_DESCRIPTORS

__all__ = [
    "MAX_WORKERS_PER_CORE",
    "PARALLEL_MIN_SECONDS",
    "WAITING_MAX_CPU_SHARE",
    "WAIT_MIN_SECONDS",
    "WorkerChoice",
    "choose_num_workers",
]

logger = logging.getLogger("vecenv")

#: Env work per vector step (all envs) below which a worker costs more than it saves. Measured
#: on 2 cores (the parent and one polling worker): CartPole at N=8 (80 µs of work) ran 0.75x
#: Sync against 0.83x all in the parent, at N=32 (340 µs) 1.27x against 0.95x.
PARALLEL_MIN_SECONDS = 0.15e-3
#: A step that keeps its core busy for less than this share of its time waits for something else.
WAITING_MAX_CPU_SHARE = 0.25
#: ... and waits at least this long (seconds) per step: a worker per env costs a wake-up on every
#: step (a pipe write to a sleeping worker: 67-95 µs of the parent's time measured on a 2-core
#: VM), which a shorter wait does not pay for; such steps count as work.
WAIT_MIN_SECONDS = 0.1e-3
#: The CPU clock must tell this apart (seconds) for the probe to judge whether envs wait.
CPU_CLOCK_RESOLUTION = 1e-6
#: Waiting envs get at most this many worker processes per core (each worker is an interpreter
#: of its own: tens of MB).
MAX_WORKERS_PER_CORE = 16
#: The probe steps the env for about this long (fewer steps if one step is slower).
PROBE_SECONDS = 0.02
#: ... and at most this many steps.
PROBE_STEPS = 200


@dataclass(frozen=True)
class WorkerChoice:
    """What ``num_workers="auto"`` chose, and why (also logged at INFO on the ``vecenv`` logger)."""

    num_workers: int
    #: Seconds one env step took in the probe (``nan`` if the probe failed).
    step_seconds: float
    reason: str
    #: The parent steps the first group itself (``num_workers - 1`` worker processes).
    inline_group: bool = False
    #: The share of a core the probe's fastest steps used (the CPU time of the thread that
    #: stepped them over their wall time, less the time it waited for a core where Linux says;
    #: ``nan`` if the probe failed or the CPU clock is too coarse): well under 1 for envs that wait.
    cpu_share: float = float("nan")


@dataclass(frozen=True)
class _Probe:
    step_seconds: float  # the median step
    cpu_share: float  # the fastest steps' CPU time (this thread's) over their wall time off the run queue


#: Linux's scheduler statistics of the calling thread: CPU time, time runnable but waiting for a
#: core, and time slices (ns, ns, count).
_SCHEDSTAT = "/proc/thread-self/schedstat"


class _RunDelay:
    """Seconds the calling thread has spent runnable but waiting for a core (the second field of
    :data:`_SCHEDSTAT`); always 0 where the kernel does not tell (another OS, no descriptor)."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open(_SCHEDSTAT, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.fd = None
        if self.fd is not None and self() is None:
            self.close()

    def __call__(self) -> float | None:
        if self.fd is None:
            return 0.0
        try:
            return int(os.pread(self.fd, 128, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _probe(env_fn: Callable[[], Any]) -> _Probe:
    """How a fresh env from ``env_fn`` steps with random actions, each step timed alone: the
    median step (so that a busy machine's interruptions do not count), and the share of a core
    its fastest half of the steps used: their CPU time over their wall time. A step that
    computes uses its core all the time it is not interrupted, and the fastest steps are the
    ones not interrupted; one that waits leaves it idle however fast it goes. The CPU time is
    the calling thread's: the process's would count the threads that BLAS, OpenMP or torch
    leave spinning after their last call (measured: a share of 0.99 for an env that sleeps),
    and an env whose step waits for a thread of its own does leave this one idle. The wall
    time leaves out the time the thread waited for a core (Linux's run delay): on a busy
    machine a step longer than a time slice is interrupted however fast it goes, and an env
    that computes 20 ms a step on a core shared with 6 busy processes used a sixth of its wall
    time (measured: 0.07), yet waited for nothing but the core. ``nan`` where the thread's CPU
    clock is too coarse to tell."""
    env = env_fn()
    run_delay = _RunDelay()
    try:
        space = copy.deepcopy(env.action_space)  # another env may share the env's space object
        space.seed(0)
        env.reset(seed=0)
        actions = [space.sample() for _ in range(PROBE_STEPS)]
        steps: list[tuple[float, float, float]] = []  # (wall, CPU, run delay) seconds of each step
        clock, cpu_clock = time.perf_counter, time.thread_time
        end = clock() + PROBE_SECONDS
        for action in actions:
            delay_start = run_delay()  # read outside the wall time: a read costs a few µs
            start, cpu_start = clock(), cpu_clock()
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
            cpu = cpu_clock() - cpu_start
            now = clock()
            delay_end = run_delay()
            delay = 0.0 if delay_start is None or delay_end is None else delay_end - delay_start
            steps.append((now - start, cpu, delay))
            if now >= end:
                break
        step = statistics.median(wall for wall, _, _ in steps)
        fastest = sorted(steps)[: max(1, len(steps) // 2)]
        # The time each step had a core or left it idle: the run delay brackets the wall time,
        # so it may come out a little larger; never less than the CPU time used.
        wall = sum(max(w - d, c) for w, c, d in fastest)
        share = float("nan")
        if time.get_clock_info("thread_time").resolution <= CPU_CLOCK_RESOLUTION and wall > 0:
            share = min(sum(c for _, c, _ in fastest) / wall, 1.0)
        return _Probe(step, share)
    finally:
        run_delay.close()
        env.close()


def _descriptor_room() -> int | None:
    """How many workers this process's descriptor limit lets start, each keeping
    ``WORKER_DESCRIPTORS`` open here, with ``START_DESCRIPTORS`` left free for the start of the
    last one and then for the blocks made after the start (``None``: no limit)."""
    free = free_descriptors()
    return None if free is None else (free - START_DESCRIPTORS) // WORKER_DESCRIPTORS


def choose_num_workers(env_fn: Callable[[], Any], num_envs: int, cpus: int | None = None) -> WorkerChoice:
    """The worker count for ``num_envs`` envs like ``env_fn()`` on ``cpus`` cores (default: this
    process's). A probe that raises chooses worker processes, so that the env's error surfaces
    where it would with an explicit count, from a worker that names the env."""
    cpus = available_cpus() if cpus is None else cpus
    parallel = min(num_envs, cpus)
    try:
        probe = _probe(env_fn)
    except Exception as exc:  # the real envs will raise it again, in their workers
        choice = WorkerChoice(parallel, float("nan"), f"the probe env raised {type(exc).__name__}; {parallel} workers")
    else:
        step, share = probe.step_seconds, probe.cpu_share
        work = num_envs * step
        # False for nan (a coarse clock cannot tell) and for waits too short to pay a wake-up.
        waits = share < WAITING_MAX_CPU_SHARE and step * (1 - share) >= WAIT_MIN_SECONDS
        waiting = min(num_envs, MAX_WORKERS_PER_CORE * cpus, math.ceil(cpus / max(share, 1e-6))) if waits else 0
        room = _descriptor_room()
        capped = room is not None and waiting > room
        if room is not None and capped:
            waiting = max(room, 0)
        if waiting > parallel:
            reason = (
                f"a step took {step * 1e6:.1f} µs and kept a core busy {share:.0%} of it: the envs wait, "
                f"so {waiting} workers on {cpus} cores overlap their waits"
            )
            if capped:
                reason += f" (as many as RLIMIT_NOFILE leaves descriptors for, {WORKER_DESCRIPTORS} each)"
            choice = WorkerChoice(waiting, step, reason, cpu_share=share)
        elif cpus < 2:
            reason = f"one core: the {num_envs} envs run in this process"
            choice = WorkerChoice(0, step, reason, cpu_share=share)
        elif work < PARALLEL_MIN_SECONDS:
            reason = (
                f"{num_envs} envs x {step * 1e6:.1f} µs per step = {work * 1e6:.0f} µs of work per vector step, "
                f"under {PARALLEL_MIN_SECONDS * 1e6:.0f} µs: the envs run in this process"
            )
            choice = WorkerChoice(0, step, reason, cpu_share=share)
        else:
            reason = (
                f"{num_envs} envs x {step * 1e6:.1f} µs per step = {work * 1e6:.0f} µs of work per vector step: "
                f"{parallel} groups on {cpus} cores, one stepped by this process and {parallel - 1} by workers"
            )
            choice = WorkerChoice(parallel, step, reason, inline_group=True, cpu_share=share)
    logger.info("num_workers='auto' chose %d: %s", choice.num_workers, choice.reason)
    return choice
