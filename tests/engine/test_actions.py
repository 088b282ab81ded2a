"""``vecenv.parent.action_rows``: actions are taken as SyncVectorEnv takes them and reach each env
as SyncVectorEnv hands them over (through worker processes, compared with SyncVectorEnv)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from tests.engine.test_differential import assert_same, same_steps
from tests.helpers.envs import ActionRecorderEnv, ActionReprEnv, PayEnv, fns
from vecenv import SubprocVectorEnv


@pytest.mark.timeout(60)
def test_scalar_action_for_discrete_batch_is_a_type_error() -> None:
    envs = SubprocVectorEnv(fns(PayEnv, 2), num_workers=2)
    sync = SyncVectorEnv(fns(PayEnv, 2))
    try:
        assert_same(envs.reset(seed=0), sync.reset(seed=0))
        with pytest.raises(TypeError):
            sync.step(0)
        with pytest.raises(TypeError):
            envs.step(0)
        assert_same(envs.step(np.array([1, 0])), sync.step(np.array([1, 0])))
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_action_batch_for_box1_reaches_envs_as_in_sync(dtype: Any) -> None:
    make = fns(ActionRecorderEnv, 3)
    envs = SubprocVectorEnv(make, num_workers=2)
    sync = SyncVectorEnv(make)
    try:
        actions = np.array([0.1, -0.2, 0.3], dtype)  # shape (n,), not (n, 1)
        same_steps(envs, sync, 0, [actions, actions * 2])
        assert_same(envs.call("last_action"), sync.call("last_action"))
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_float_actions_for_discrete_reach_envs_as_in_sync(num_workers: int) -> None:
    """SyncVectorEnv hands each env its float row; an env that takes ``int(action)`` works."""
    make = fns(ActionReprEnv, 3)
    envs = SubprocVectorEnv(make, num_workers=num_workers)
    sync = SyncVectorEnv(make)
    try:
        batches = [np.array([1.0, 2.0, 0.0]), np.array([2, 0, 1], np.float32), np.array([0, 1, 2])]
        same_steps(envs, sync, 0, batches)
        assert envs.step(np.array([1.0, 2.0, 0.0]))[4]["action"][0] == repr(np.float64(1.0))
    finally:
        envs.close()
        sync.close()
