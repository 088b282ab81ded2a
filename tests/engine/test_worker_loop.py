"""``vecenv.worker.loop``: what a worker process does around its core, through real processes.

Its first reply, the Hello, is cloudpickled (an env spec may hold lambdas); a command whose
payload cannot be unpickled in the worker is that call's error and the worker carries on; and a
forked worker first gives up what it inherited from the parent: other vector envs' blocks and
pipe ends.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv
from gymnasium.wrappers import TransformObservation, TransformReward

from tests.conftest import start_methods
from tests.engine.test_buffers import fd_inodes, linux_only, memfd_mappings
from tests.engine.test_differential import same_steps
from tests.helpers.envs import UnloadableArg, UnloadableArgError
from tests.helpers.faults import healthy_fns, transport_of
from vecenv import SubprocVectorEnv
from vecenv.errors import RemoteTraceback


def _lambda_wrapped_cartpole() -> gym.Env:
    """CleanRL's pattern: Gymnasium's function wrappers with lambdas (their spec holds them)."""
    env = gym.make("CartPole-v1")
    env = TransformObservation(env, lambda o: o * 2.0, env.observation_space)
    return TransformReward(env, lambda r: r + 1.0)


@pytest.mark.timeout(60)
@start_methods("fork", "spawn")
def test_unloadable_argument_is_that_calls_error(start_method: str) -> None:
    envs = SubprocVectorEnv(healthy_fns(4), num_workers=2, context=start_method)
    sync = SyncVectorEnv(healthy_fns(4))
    try:
        envs.reset(seed=1)
        with pytest.raises(UnloadableArgError) as info:
            envs.call("reset", options={"x": UnloadableArg("notebook")})
        assert isinstance(info.value.__cause__, RemoteTraceback)
        assert "UnloadableArgError" in str(info.value.__cause__)
        # The vector env is still usable, and right.
        actions = [np.full((4, 2), 0.1 * k, np.float32) for k in range(4)]
        same_steps(envs, sync, 5, actions)
        assert envs.call("ping") == sync.call("ping")
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
def test_wrappers_holding_lambdas_build_and_match_sync() -> None:
    envs = SubprocVectorEnv([_lambda_wrapped_cartpole] * 3, num_workers=2)
    sync = SyncVectorEnv([_lambda_wrapped_cartpole] * 3)
    try:
        assert envs.single_observation_space == sync.single_observation_space
        same_steps(envs, sync, 3, [np.array([0, 1, 1])] * 5)
    finally:
        envs.close()
        sync.close()


def _two_forked_envs(check: Any) -> None:
    """Build env A, then env B (both fork); ``check(pid, a_blocks, a_sockets)`` each B worker."""
    mapped_before = memfd_mappings("self")
    a = SubprocVectorEnv(healthy_fns(2), num_workers=2, context="fork")
    b = None
    try:
        a_blocks = memfd_mappings("self") - mapped_before
        assert a_blocks, "A's block should be a vecenv memfd mapped in the parent"
        a_sockets = {os.fstat(c.fileno()).st_ino for c in transport_of(a).conns}
        b = SubprocVectorEnv(healthy_fns(2), num_workers=2, context="fork")
        for pid in b.worker_pids:
            check(pid, a_blocks, a_sockets)
    finally:
        if b is not None:
            b.close()
        a.close()


@linux_only
@pytest.mark.timeout(60)
def test_second_env_workers_do_not_map_first_block() -> None:
    def check(pid: int, a_blocks: set[int], a_sockets: set[int]) -> None:
        assert not (memfd_mappings(pid) & a_blocks), f"B's worker {pid} maps A's block"

    _two_forked_envs(check)


@linux_only
@pytest.mark.timeout(60)
def test_second_env_workers_hold_no_pipe_end_of_first() -> None:
    def check(pid: int, a_blocks: set[int], a_sockets: set[int]) -> None:
        held = sorted(k for k, ino in fd_inodes(pid).items() if "socket:" in k and ino in a_sockets)
        assert not held, f"B's worker {pid} holds A's pipe ends: {held}"

    _two_forked_envs(check)


@linux_only
@pytest.mark.timeout(60)
def test_second_env_workers_hold_no_memfd_of_first() -> None:
    def check(pid: int, a_blocks: set[int], a_sockets: set[int]) -> None:
        held = sorted(k for k, ino in fd_inodes(pid).items() if "/memfd:" in k and ino in a_blocks)
        assert not held, f"B's worker {pid} holds A's memfd: {held}"

    _two_forked_envs(check)
