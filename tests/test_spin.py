"""Polling before sleeping: only where every process of the vector env has a core, never idle.

Parent and workers poll their pipes for up to ``SPIN_SECONDS`` before they sleep, which spares
the wake-up of a sleeping process on every step, but only when the vector env's processes (its
workers and the parent) are no more than the cores this process may use; and a poll that
catches nothing makes the next waits sleep at once, so an idle vector env costs no CPU.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import vecenv
from vecenv import process_pool
from vecenv.worker import SPIN_SECONDS


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize(
    ("cpus", "groups", "inline", "spins"),
    [
        (2, 2, True, True),  # the parent and one worker: two processes, two cores
        (2, 2, False, False),  # two workers and the parent: three processes on two cores
        (4, 2, False, True),
        (1, 1, True, False),  # everything in the parent: nothing to wait for
        (1, 2, True, False),
    ],
)
@pytest.mark.timeout(60)
def test_spins_only_where_every_process_has_a_core(
    monkeypatch: pytest.MonkeyPatch, cpus: int, groups: int, inline: bool, spins: bool
) -> None:
    monkeypatch.setattr(process_pool, "available_cpus", lambda: cpus)
    with vecenv.make("CartPole-v1", 4, groups, inline_group=inline) as envs:
        if groups == 1 and inline:
            assert envs._pool.transport.spin == 0.0
            return
        assert envs._pool.transport.spin == (SPIN_SECONDS if spins else 0.0)
        envs.reset(seed=0)
        envs.step(np.zeros(4, np.int64))


@pytest.mark.timeout(60)
def test_an_idle_vector_env_costs_no_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spinning workers stepped in a tight loop, then left alone (a learner busy elsewhere): in
    that pause they use next to no CPU, a poll of at most SPIN_SECONDS each."""
    monkeypatch.setattr(process_pool, "available_cpus", lambda: 4)
    with vecenv.make("CartPole-v1", 4, 2) as envs:
        assert envs._pool.transport.spin > 0
        envs.reset(seed=0)
        for _ in range(200):
            envs.step(np.zeros(4, np.int64))
        pids = [p.pid for p in envs._pool.transport.processes if p is not None]
        before = [_cpu_seconds(pid) for pid in pids]
        time.sleep(0.5)  # the pause measured, not a synchronisation
        used = [_cpu_seconds(pid) - b for pid, b in zip(pids, before)]
        assert max(used) < 0.1, f"workers used {used} CPU-seconds in a 0.5 s pause"
        envs.step(np.zeros(4, np.int64))  # and they still answer
