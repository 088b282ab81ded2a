"""Restarting dead workers (``on_worker_death="restart"``): the envs that did not fail stay
exact against SyncVectorEnv, the restarted ones come back truncated with fresh, reproducibly
seeded episodes, and no restart loop can spin."""

from __future__ import annotations

import functools
import os
import signal
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.conftest import start_methods
from tests.crash_envs import fault_fns
from tests.envs import diff_env_fns, make_group
from tests.test_differential import assert_same, sample_actions

N, W = 6, 3  # groups of 2: worker 1 hosts envs 2 and 3
VICTIM, VICTIM_ENVS = 1, [2, 3]
KEEP = [0, 1, 4, 5]


def _rows(out: tuple, rows: list[int]) -> tuple:
    obs, rewards, terms, truncs, _ = out
    return obs[rows], rewards[rows], terms[rows], truncs[rows]


def _kill(envs: vecenv.SubprocVectorEnv, worker: int) -> None:
    """SIGKILL a worker and wait until it is gone (a loaded machine may run it a while first)."""
    process = envs._pool.transport.processes[worker]
    assert process is not None and process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(30)
    assert process.exitcode == -signal.SIGKILL


@pytest.mark.timeout(90)
@start_methods("fork", "spawn")
@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
def test_other_envs_stay_exact_and_restarted_envs_are_truncated(start_method: str, mode: AutoresetMode) -> None:
    fns = diff_env_fns(N, obs_kind="box", act_kind="discrete")
    seed = 17
    sync = SyncVectorEnv(fns, autoreset_mode=mode)
    rng = np.random.default_rng(3)
    try:
        with vecenv.SubprocVectorEnv(
            fns, W, autoreset_mode=mode, context=start_method, on_worker_death="restart"
        ) as envs:
            assert_same(envs.reset(seed=seed), sync.reset(seed=seed))
            restarted_at = 25
            ended = np.zeros(N, dtype=np.bool_)  # under DISABLED: envs to reset before the next step
            for t in range(60):
                if mode is AutoresetMode.DISABLED:
                    if ended.any():
                        mask = ended.copy()
                        envs.reset(options={"reset_mask": mask})
                        sync.reset(options={"reset_mask": mask.copy()})
                actions = sample_actions(sync.single_action_space, N, rng)
                if t == restarted_at:
                    _kill(envs, VICTIM)
                got, want = envs.step(actions), sync.step(actions)
                ended = got[2] | got[3] | want[2] | want[3]  # the restarted envs differ from Sync's
                if t < restarted_at:
                    assert_same(got, want, f"step {t}")
                    continue
                assert_same(_rows(got, KEEP), _rows(want, KEEP), f"step {t}, envs that did not fail")
                if t == restarted_at:
                    obs, rewards, terms, truncs, infos = got
                    assert truncs[VICTIM_ENVS].all() and not terms[VICTIM_ENVS].any()
                    assert (rewards[VICTIM_ENVS] == 0).all()
                    assert infos["worker_restarted"][VICTIM_ENVS].all()
                    assert infos["_worker_restarted"].tolist() == [i in VICTIM_ENVS for i in range(N)]
                    # Fresh episodes, reseeded with seed + i + restarts * num_envs.
                    for i in VICTIM_ENVS:
                        fresh = fns[i]()
                        expected, _ = fresh.reset(seed=seed + i + 1 * N)
                        np.testing.assert_array_equal(obs[i], expected)
                        fresh.close()
            assert envs._pool.restarts == 1
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_a_call_that_saw_the_death_is_answered_by_the_new_envs() -> None:
    fns = diff_env_fns(4)
    with vecenv.SubprocVectorEnv(fns, 2, on_worker_death="restart", context="fork") as envs:
        envs.reset(seed=0)
        _kill(envs, 1)
        assert envs.get_attr("index") == (0, 1, 2, 3)
        _kill(envs, 0)
        obs, infos = envs.reset(seed=5)  # the reset it owed is sent again: the user's seeds
        sync = SyncVectorEnv(fns)
        assert_same(obs, sync.reset(seed=5)[0])
        sync.close()
        assert infos["worker_restarted"].tolist() == [True, True, False, False]
        assert envs._pool.restarts == 2


@pytest.mark.timeout(60)
def test_async_batches_restart_the_same_way() -> None:
    fns = [functools.partial(gym.make, "CartPole-v1")] * 4
    with vecenv.SubprocVectorEnv(fns, 2, batch_size=2, on_worker_death="restart", context="fork") as envs:
        envs.async_reset(seed=0)
        seen_restart = False
        stepped: set[int] = set()  # groups recv has returned: what they owe since is a step
        victim_owed_step = False
        for t in range(30):
            obs, rewards, terms, truncs, infos, ids = envs.recv(timeout=30)
            if t == 10:
                victim = 0 if ids[0] != 0 else 1  # a group in flight or about to be
                # On a busy machine the other group may not have answered async_reset yet.
                victim_owed_step = victim in stepped
                _kill(envs, victim)
            if "worker_restarted" in infos:
                seen_restart = True
                assert not terms.any()
                if victim_owed_step:  # the step it owed: truncated, reward 0, a fresh episode
                    assert truncs.all() and (rewards == 0).all()
                else:  # the reset it owed, sent again: a reset's rewards and flags
                    assert not truncs.any() and (rewards == 0).all()
            stepped.add(int(ids[0]) // 2)
            envs.send(np.zeros(len(ids), dtype=np.int64), ids)
        assert seen_restart, "no recv reported the restarted group"
        assert envs._pool.restarts == 1


@pytest.mark.timeout(60)
def test_restarts_beyond_the_budget_break_the_vector_env() -> None:
    """Every rebuilt worker dies at its third step: the third death within the window is one
    too many for max_restarts=2, and nothing spins."""
    fns = fault_fns(4, "exit", "step", target=3, at=3)
    envs = vecenv.SubprocVectorEnv(fns, 2, on_worker_death="restart", max_restarts=2, context="fork")
    try:
        envs.reset(seed=0)
        actions = np.zeros((4, 2), dtype=np.float32)
        with pytest.raises(vecenv.WorkerDiedError, match="max_restarts=2") as excinfo:
            for _ in range(20):
                envs.step(actions)
        assert excinfo.value.worker == 1
        assert envs._pool.restarts == 2
        with pytest.raises(vecenv.WorkerDiedError):
            envs.step(actions)
    finally:
        envs.close()


class _DiesWhenRebuilt(gym.Env):
    """Builds fine once; any later build (in a restarted worker) exits at once."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, marker: str) -> None:
        if os.path.exists(marker):
            os._exit(5)
        with open(marker, "a"):
            pass

    def reset(self, *, seed: Any = None, options: Any = None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


@pytest.mark.timeout(60)
def test_a_worker_that_dies_while_rebuilt_counts_as_a_restart(tmp_path) -> None:
    fns = [functools.partial(_DiesWhenRebuilt, str(tmp_path / f"built-{i}")) for i in range(3)]
    envs = vecenv.SubprocVectorEnv(fns, 3, on_worker_death="restart", max_restarts=3, context="fork")
    try:
        envs.reset(seed=0)
        _kill(envs, 2)
        with pytest.raises(vecenv.WorkerDiedError, match="max_restarts=3"):
            envs.step(np.zeros(3, dtype=np.int64))
        assert envs._pool.restarts == 3
    finally:
        envs.close()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"on_worker_death": "retry"}, "on_worker_death"),
        ({"on_worker_death": "restart", "max_restarts": 0}, "max_restarts"),
        ({"on_worker_death": "restart", "restart_window": -1}, "restart_window"),
    ],
    ids=["policy", "max_restarts", "window"],
)
def test_bad_restart_arguments_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        vecenv.SubprocVectorEnv(diff_env_fns(2), 1, **kwargs)


@pytest.mark.timeout(60)
def test_from_groups_takes_the_restart_option() -> None:
    group_fns = [functools.partial(make_group, g) for g in ([0, 1], [2, 3])]
    with vecenv.SubprocVectorEnv.from_groups(group_fns, on_worker_death="restart", context="fork") as envs:
        envs.reset(seed=0)
        _kill(envs, 1)
        assert envs.get_attr("index") == (0, 1, 2, 3)
        assert envs._pool.restarts == 1
    with pytest.raises(ValueError, match="on_worker_death"):
        vecenv.SubprocVectorEnv.from_groups(group_fns, on_worker_death="retry")
