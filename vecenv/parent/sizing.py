"""``num_workers="auto"``: time one env here, then pick how many worker processes pay off.

A worker process costs a fixed amount on every vector step (a command out, a wake-up, a reply,
per worker) and saves at most the share of the env work it takes off the other cores. With a few
cheap envs (CartPole at N=8: about 10 µs of work per env step) that fixed cost is larger than
all the work, and stepping every env in the parent is fastest; with more or slower envs, one
worker per core is. ``auto`` builds one extra env from the first constructor, steps it with
random actions for a few milliseconds, closes it, and decides from the time one step took:

    num_envs x step time < PARALLEL_MIN_SECONDS  or one core  ->  0 workers (all in the parent)
    otherwise   ->  min(num_envs, cores) groups, the parent stepping one of them (``inline_group``)

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
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vecenv.machine import available_cpus

__all__ = ["PARALLEL_MIN_SECONDS", "WorkerChoice", "choose_num_workers"]

logger = logging.getLogger("vecenv")

#: Env work per vector step (all envs) below which a worker costs more than it saves. Measured
#: on 2 cores (the parent and one polling worker): CartPole at N=8 (80 µs of work) ran 0.75x
#: Sync against 0.83x all in the parent, at N=32 (340 µs) 1.27x against 0.95x.
PARALLEL_MIN_SECONDS = 0.15e-3
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


def _probe(env_fn: Callable[[], Any]) -> float:
    """Seconds per step of a fresh env from ``env_fn`` with random actions: the median of the
    steps timed one by one, so that a busy machine's interruptions do not count."""
    env = env_fn()
    try:
        space = copy.deepcopy(env.action_space)  # another env may share the env's space object
        space.seed(0)
        env.reset(seed=0)
        actions = [space.sample() for _ in range(PROBE_STEPS)]
        times = []
        clock = time.perf_counter
        end = clock() + PROBE_SECONDS
        for action in actions:
            start = clock()
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
            now = clock()
            times.append(now - start)
            if now >= end:
                break
        return statistics.median(times)
    finally:
        env.close()


def choose_num_workers(env_fn: Callable[[], Any], num_envs: int, cpus: int | None = None) -> WorkerChoice:
    """The worker count for ``num_envs`` envs like ``env_fn()`` on ``cpus`` cores (default: this
    process's). A probe that raises chooses worker processes, so that the env's error surfaces
    where it would with an explicit count, from a worker that names the env."""
    cpus = available_cpus() if cpus is None else cpus
    parallel = min(num_envs, cpus)
    try:
        step = _probe(env_fn)
    except Exception as exc:  # the real envs will raise it again, in their workers
        choice = WorkerChoice(parallel, float("nan"), f"the probe env raised {type(exc).__name__}; {parallel} workers")
    else:
        work = num_envs * step
        if cpus < 2:
            reason = f"one core: the {num_envs} envs run in this process"
            choice = WorkerChoice(0, step, reason)
        elif work < PARALLEL_MIN_SECONDS:
            reason = (
                f"{num_envs} envs x {step * 1e6:.1f} µs per step = {work * 1e6:.0f} µs of work per vector step, "
                f"under {PARALLEL_MIN_SECONDS * 1e6:.0f} µs: the envs run in this process"
            )
            choice = WorkerChoice(0, step, reason)
        else:
            reason = (
                f"{num_envs} envs x {step * 1e6:.1f} µs per step = {work * 1e6:.0f} µs of work per vector step: "
                f"{parallel} groups on {cpus} cores, one stepped by this process and {parallel - 1} by workers"
            )
            choice = WorkerChoice(parallel, step, reason, inline_group=True)
    logger.info("num_workers='auto' chose %d: %s", choice.num_workers, choice.reason)
    return choice
