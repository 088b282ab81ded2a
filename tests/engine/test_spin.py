"""Polling before sleeping: only where every process of the vector env has a core, never idle.

Parent and workers poll their pipes for up to ``SPIN_SECONDS`` before they sleep, which spares
the wake-up of a sleeping process on every step, but only when the vector env's processes (its
workers and the parent) are no more than the cores this process may use; and a poll that
catches nothing makes the next waits sleep at once, so an idle vector env costs no CPU.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import vecenv
from tests.helpers.faults import transport_of
from vecenv.bench.procfs import cpu_seconds
from vecenv.transports import process as process_transport
from vecenv.wire.pipes import SPIN_BACKOFF, SPIN_SECONDS, Spin


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
    monkeypatch.setattr(process_transport, "available_cpus", lambda: cpus)
    with vecenv.make("CartPole-v1", 4, groups, inline_group=inline) as envs:
        if groups == 1 and inline:
            assert transport_of(envs).spin == 0.0
            return
        assert transport_of(envs).spin == (SPIN_SECONDS if spins else 0.0)
        envs.reset(seed=0)
        envs.step(np.zeros(4, np.int64))


@pytest.mark.timeout(60)
def test_an_idle_vector_env_costs_no_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spinning workers stepped in a tight loop, then left alone (a learner busy elsewhere): in
    that pause they use next to no CPU, a poll of at most SPIN_SECONDS each."""
    monkeypatch.setattr(process_transport, "available_cpus", lambda: 4)
    with vecenv.make("CartPole-v1", 4, 2) as envs:
        assert transport_of(envs).spin > 0
        envs.reset(seed=0)
        for _ in range(200):
            envs.step(np.zeros(4, np.int64))
        pids = [p for p in envs.worker_pids if p is not None]
        # CPU time is read in 10 ms ticks, and on a loaded host one pause has been charged
        # 0.11 s (a second test run sharing the cores). A worker that kept spinning would burn
        # ~0.5 s in every pause, so the quietest of up to three pauses is what is bounded.
        pauses = []
        for _ in range(3):
            before = [cpu_seconds(pid) for pid in pids]
            time.sleep(0.5)  # the pause measured, not a synchronisation
            pauses.append(max(cpu_seconds(pid) - b for pid, b in zip(pids, before)))
            if pauses[-1] < 0.1:
                break
        assert min(pauses) < 0.1, f"the busiest worker used {pauses} CPU-seconds in 0.5 s pauses"
        envs.step(np.zeros(4, np.int64))  # and they still answer


class _CountingPoller:
    def __init__(self, ready: list[tuple[int, int]]) -> None:
        self.ready = ready
        self.calls = 0

    def poll(self, timeout: int) -> list[tuple[int, int]]:
        assert timeout == 0  # a spin never sleeps
        self.calls += 1
        return self.ready


def test_spin_returns_what_is_ready_and_backs_off_after_a_miss() -> None:
    assert Spin(SPIN_SECONDS).poll(_CountingPoller([(3, 1)])) == [(3, 1)]
    idle = _CountingPoller([])
    spin = Spin(SPIN_SECONDS)
    assert spin.poll(idle) == [] and idle.calls > 1  # polled until the deadline
    idle.calls = 0
    for _ in range(SPIN_BACKOFF):
        assert spin.poll(idle) == []
    assert idle.calls == 0  # backing off: straight to sleep
    spin.poll(idle)
    assert idle.calls > 0  # then it tries again
    idle.calls = 0
    assert Spin(0.0).poll(idle) == [] and Spin(SPIN_SECONDS).poll(idle, limit=0) == [] and idle.calls == 0


@pytest.mark.timeout(60)
def test_a_vector_env_finalised_while_the_spin_modes_are_set_does_not_deadlock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The garbage collector may finalise an unclosed vector env (its close sets every live
    vector env's spin mode again) in the middle of setting them, in the same thread."""
    first = vecenv.make("CartPole-v1", 2, num_workers=1)
    first.reset(seed=0)
    real = process_transport.SpinMode.for_processes
    collected: list[bool] = []

    def finalise_one(*args: object) -> object:
        if not collected:
            collected.append(True)
            first.close()  # as a finaliser run by the garbage collector here would
        return real(*args)

    monkeypatch.setattr(process_transport.SpinMode, "for_processes", staticmethod(finalise_one))
    with vecenv.make("CartPole-v1", 2, num_workers=1) as second:
        second.reset(seed=0)
    assert collected and first.closed
