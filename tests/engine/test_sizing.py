"""``num_workers="auto"``: one probe env timed in the parent decides between the parent and workers.

The probe's time is real, so the envs here are far from the threshold on either side: CartPole
(about 10 µs a step, x4 = 40 µs against the 150 µs threshold) and an env that burns about 1 ms a
step in a Python loop (x8 = 8 ms). The probe takes the median step, so a busy machine's
interruptions do not move it; a machine 3x slower than this one keeps both on their side.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import resource
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import vecenv
from tests.engine.test_differential import assert_same
from tests.helpers.faults import open_fds, transport_of
from vecenv.bench.calibration import calibrate
from vecenv.bench.envs import BurnEnv, WaitEnv
from vecenv.parent import sizing
from vecenv.parent.sizing import (
    MAX_WORKERS_PER_CORE,
    PARALLEL_MIN_SECONDS,
    WAITING_MAX_CPU_SHARE,
    WorkerChoice,
    choose_num_workers,
)


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


@pytest.fixture(scope="module")
def slow_env() -> functools.partial:
    """An env of about 1 ms a step on this machine."""
    return functools.partial(BurnEnv, calibrate()["iters_1ms"])


class ProbeFails(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        raise RuntimeError("step is broken")


def test_few_cheap_envs_stay_in_the_parent() -> None:
    choice = choose_num_workers(cartpole, 4, cpus=2)
    assert choice.num_workers == 0 and not choice.inline_group
    assert 0 < choice.step_seconds * 4 < PARALLEL_MIN_SECONDS
    assert "in this process" in choice.reason and "4 envs" in choice.reason


def test_slow_envs_get_one_worker_per_core(slow_env: functools.partial) -> None:
    choice = choose_num_workers(slow_env, 8, cpus=2)
    assert choice.num_workers == 2 and choice.inline_group
    assert choice.step_seconds > 2e-4
    assert "2 groups on 2 cores, one stepped by this process and 1 by workers" in choice.reason
    assert choice.cpu_share > WAITING_MAX_CPU_SHARE  # it computes: its core is busy while it steps
    assert choose_num_workers(slow_env, 3, cpus=16).num_workers == 3  # never more workers than envs


def waiting_env() -> WaitEnv:
    """2 ms of waiting per step, a few µs of work: under 1% of a core."""
    return WaitEnv(2e-3)


def test_envs_that_wait_get_more_workers_than_cores_to_overlap_their_waits() -> None:
    choice = choose_num_workers(waiting_env, 8, cpus=2)
    assert choice.num_workers == 8 and not choice.inline_group  # one per env, none in the parent
    assert 0 <= choice.cpu_share < WAITING_MAX_CPU_SHARE and choice.step_seconds >= 2e-3
    assert "the envs wait, so 8 workers on 2 cores" in choice.reason
    # At most MAX_WORKERS_PER_CORE per core, and workers even on one core.
    assert choose_num_workers(waiting_env, 100, cpus=1).num_workers == MAX_WORKERS_PER_CORE
    assert choose_num_workers(waiting_env, 3, cpus=1).num_workers == 3


def _spin_on(core: int, stop: float) -> None:
    os.sched_setaffinity(0, {core})
    while time.monotonic() < stop:
        pass


@pytest.mark.timeout(60)
def test_envs_that_compute_on_a_busy_core_are_not_taken_for_envs_that_wait() -> None:
    """A step that computes for tens of ms on a core it shares with 6 busy processes runs a sixth
    of its time: the time it waited for the core is not time it waited for something else, and
    one worker per env (up to 16 per core) would only add processes to a busy machine."""
    core = min(os.sched_getaffinity(0))
    env_fn = functools.partial(BurnEnv, calibrate()["iters_1ms"] * 20)  # about 20 ms a step
    mask = os.sched_getaffinity(0)
    ctx = multiprocessing.get_context("fork")
    spinners = [ctx.Process(target=_spin_on, args=(core, time.monotonic() + 10.0), daemon=True) for _ in range(6)]
    for p in spinners:
        p.start()
    try:
        os.sched_setaffinity(0, {core})
        choice = choose_num_workers(env_fn, 32, cpus=2)
    finally:
        os.sched_setaffinity(0, mask)
        for p in spinners:
            p.terminate()
        for p in spinners:
            p.join()
    assert choice.cpu_share > WAITING_MAX_CPU_SHARE, choice
    assert choice.num_workers == 2 and choice.inline_group, choice


@pytest.mark.timeout(120)
def test_envs_that_wait_get_no_more_workers_than_the_descriptor_limit_lets_start() -> None:
    """Each worker keeps up to 4 descriptors in this process: under a limit that leaves room for
    about a dozen, 32 envs that wait get the workers that can start, not a DescriptorLimitError."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(open_fds()) + 60, hard))
    try:
        with vecenv.SubprocVectorEnv([waiting_env] * 32, "auto", context="fork") as envs:
            choice = envs.worker_choice
            assert choice is not None and 2 < choice.num_workers < 32, choice
            assert "RLIMIT_NOFILE" in choice.reason, choice.reason
            envs.reset(seed=0)
            assert envs.step(np.zeros(32, np.int64))[0].shape == (32, 4)
            assert envs.rollout(3).actions.shape == (3, 32)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_one_core_never_starts_workers(slow_env: functools.partial) -> None:
    choice = choose_num_workers(slow_env, 8, cpus=1)
    assert choice.num_workers == 0 and "one core" in choice.reason


@pytest.mark.parametrize(
    ("step_us", "share", "workers"),
    [
        (1000.0, 0.03, 8),  # waits ~970 µs a step: a worker each overlaps the waits
        (150.0, 0.2, 8),  # waits 120 µs: still more than waking a worker costs
        (40.0, 0.1, 2),  # waits 36 µs: less than a worker's wake-up, so one worker per core
        (15.0, 0.1, 0),  # and with 8 such envs all the work fits in this process
    ],
)
def test_only_waits_longer_than_a_workers_wake_up_get_a_worker_each(
    monkeypatch: pytest.MonkeyPatch, step_us: float, share: float, workers: int
) -> None:
    """The decision alone, on a given probe: a worker per env pays only where the time an env
    step waits is more than a worker's round trip costs; shorter waits are stepped as work."""
    monkeypatch.setattr(sizing, "_probe", lambda env_fn: sizing._Probe(step_us * 1e-6, share))
    choice = choose_num_workers(cartpole, 8, cpus=2)
    assert choice.num_workers == workers, choice.reason
    assert choice.cpu_share == share


def test_a_probe_that_raises_picks_workers_so_the_error_surfaces_from_them() -> None:
    choice = choose_num_workers(ProbeFails, 4, cpus=2)
    assert choice.num_workers == 2 and not choice.inline_group and np.isnan(choice.step_seconds)
    assert "RuntimeError" in choice.reason


@pytest.mark.timeout(60)
def test_auto_vector_env_matches_sync_and_says_what_it_chose(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="vecenv"):
        envs = vecenv.make("CartPole-v1", 8, "auto")
    sync = SyncVectorEnv([cartpole] * 8)
    with envs:
        assert isinstance(envs.worker_choice, WorkerChoice)
        chosen = envs.worker_choice.num_workers
        processes = [p for p in transport_of(envs).processes if p is not None]
        # 0: one group, stepped by the parent; more (envs slow enough on this machine): as many
        # groups, the parent stepping one of them.
        assert len(processes) == (chosen - 1 if envs.worker_choice.inline_group else chosen)
        assert envs.worker_choice.inline_group == (chosen > 0)
        assert f"num_workers='auto' chose {chosen}" in caplog.text
        assert_same(envs.reset(seed=3), sync.reset(seed=3), "reset")
        for t in range(30):
            actions = np.array([(t + i) % 2 for i in range(8)])
            assert_same(envs.step(actions), sync.step(actions), f"step {t}")
    sync.close()


@pytest.mark.timeout(60)
def test_auto_with_slow_envs_starts_workers(slow_env: functools.partial) -> None:
    with vecenv.SubprocVectorEnv([slow_env] * 4, "auto") as envs:
        if vecenv.machine.available_cpus() >= 2:
            assert envs.worker_choice is not None and envs.worker_choice.num_workers >= 2
            # One group in this process, the others in real processes; all of them poll.
            processes = transport_of(envs).processes
            assert processes[0] is None and all(p is not None for p in processes[1:])
            assert transport_of(envs).spin > 0
        envs.reset(seed=0)
        obs, *_ = envs.step(np.zeros(4, np.int64))
        assert obs.shape == (4, 4)


@pytest.mark.timeout(60)
def test_auto_with_waiting_envs_matches_sync() -> None:
    with vecenv.SubprocVectorEnv([waiting_env] * 5, "auto") as envs:
        assert envs.worker_choice is not None and envs.worker_choice.num_workers == 5
        assert len([p for p in transport_of(envs).processes if p is not None]) == 5
        sync = SyncVectorEnv([waiting_env] * 5)
        assert_same(envs.reset(seed=2), sync.reset(seed=2), "reset")
        for t in range(20):
            actions = np.array([(t * i) % 2 for i in range(5)])
            assert_same(envs.step(actions), sync.step(actions), f"step {t}")
        sync.close()


def test_explicit_counts_have_no_choice() -> None:
    with vecenv.make("CartPole-v1", 2, 1) as envs:
        assert envs.worker_choice is None


@pytest.mark.parametrize("bad", ["Auto", "all", 2.5, -1])
def test_bad_num_workers_names_auto(bad: object) -> None:
    with pytest.raises(ValueError, match=r"`num_workers` must be None, 'auto' or an int in \[0, 4\]"):
        vecenv.SubprocVectorEnv([cartpole] * 4, bad)  # type: ignore[arg-type]
