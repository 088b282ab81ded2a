"""``worker_pids`` and ``restart_count``: what a user monitoring the workers (and a test ending
one on purpose) reads, instead of the vector env's private pool."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import vecenv
from tests.helpers.envs import diff_env_fns
from tests.helpers.faults import transport_of
from tests.helpers.multiagent import ToyParallelEnv


@pytest.mark.timeout(60)
def test_worker_pids_are_the_worker_processes_and_survive_close() -> None:
    envs = vecenv.SubprocVectorEnv(diff_env_fns(4), 2, context="fork")
    with envs:
        pids = envs.worker_pids
        assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids
        assert pids == [p.pid for p in transport_of(envs).processes]
        assert envs.restart_count == 0
    assert envs.worker_pids == pids  # still known after close(), when the processes are gone


@pytest.mark.timeout(60)
def test_a_group_the_parent_hosts_has_no_pid() -> None:
    with vecenv.SubprocVectorEnv(diff_env_fns(2), 0) as envs:
        assert envs.worker_pids == [None]
    with vecenv.SubprocVectorEnv(diff_env_fns(4), 2, inline_group=True, context="fork") as envs:
        first, second = envs.worker_pids
        assert first is None and isinstance(second, int) and second != os.getpid()


@pytest.mark.timeout(90)
def test_restart_count_counts_replaced_workers_and_the_pid_changes() -> None:
    with vecenv.make("CartPole-v1", 4, 2, context="fork", on_worker_death="restart") as envs:
        envs.reset(seed=0)
        old = envs.worker_pids
        os.kill(old[1], signal.SIGKILL)
        envs.step(np.zeros(4, np.int64))  # sees the death, restarts worker 1
        assert envs.restart_count == 1
        new = envs.worker_pids
        assert new[0] == old[0] and new[1] not in (None, old[1])


@pytest.mark.timeout(60)
def test_multi_agent_vector_env_reports_its_workers() -> None:
    with vecenv.MultiAgentVectorEnv([ToyParallelEnv] * 4, 2, context="fork") as envs:
        pids = envs.worker_pids
        assert len(pids) == 2 and all(isinstance(p, int) for p in pids)
        assert pids == envs.rows.worker_pids and envs.restart_count == 0
