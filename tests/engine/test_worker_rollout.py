"""``vecenv.worker.rollout`` and ``vecenv.wire.rollout_buffers`` without a process: a worker core
fed ``ROLLOUT_BLOCK`` and ``ROLLOUT`` as the parent encodes them, writing into a rollout block
made in this process, compared with ``SyncVectorEnv`` stepped with the recorded actions."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from tests.engine.test_differential import assert_same
from tests.engine.test_worker_core import Attached, _infos
from tests.helpers.envs import DiffEnv, diff_env_fns
from vecenv.errors import PackedException
from vecenv.policies import FunctionPolicy, RandomPolicy
from vecenv.wire.protocol import (
    Command,
    Pickled,
    ResetArgs,
    RolloutArgs,
    RolloutBlockArgs,
    RolloutReply,
    decode_command,
    encode_for_pipe,
    fd_follows,
)
from vecenv.wire.rollout_buffers import RolloutBuffers, RolloutRows, RolloutSpec

pytestmark = pytest.mark.timeout(30)

N, T, SEED = 3, 25, 4


@pytest.fixture
def cores() -> Iterator[Callable[..., Attached]]:
    """Worker cores attached to buffers made here (closed after the test)."""
    made: list[Attached] = []

    def make(*args: Any, **kwargs: Any) -> Attached:
        made.append(Attached(*args, **kwargs))
        return made[-1]

    yield make
    for core in made:
        core.close()


def _block(worker: Attached, steps: int, shared: bool, mode: AutoresetMode) -> RolloutBuffers:
    """The parent's rollout block, mapped by the core as ROLLOUT_BLOCK maps it."""
    spec = RolloutSpec.plan(steps, N, worker.hello.observation_space, worker.hello.action_space, shared, mode)
    parent = RolloutBuffers.create(spec)
    fd = os.dup(parent.block.fd) if parent.block is not None and parent.block.fd is not None else None
    message = encode_for_pipe(Command.ROLLOUT_BLOCK, 1, RolloutBlockArgs(spec, fd))
    data = message.data if hasattr(message, "data") else message
    assert fd_follows(data) is (fd is not None)
    command, _, load = decode_command(data)
    ok, result = worker.core.handle(command, load, fd)
    assert ok and result is None, result
    return parent


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "in the reply"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_a_rollout_is_the_group_stepped_with_its_actions(cores: Any, shared: bool, mode: AutoresetMode) -> None:
    worker = cores(lambda: [DiffEnv(index=i, act_kind="box") for i in range(N)], shared, mode)
    parent = _block(worker, T, shared, mode)
    ok, _ = worker.feed(Command.RESET, ResetArgs([SEED + i for i in range(N)], None, None))
    assert ok
    ok, reply = worker.feed(Command.ROLLOUT, RolloutArgs(T, 0, Pickled.of(RandomPolicy())))
    assert ok and isinstance(reply, RolloutReply)
    assert (reply.block is None) is shared
    parent.receive(0, N, reply.block)
    sync = SyncVectorEnv(diff_env_fns(N, act_kind="box"), autoreset_mode=mode)
    obs, _ = sync.reset(seed=SEED)
    ends = 0
    for t in range(T):
        np.testing.assert_array_equal(parent.observations[t], obs)
        obs, rewards, terms, truncs, infos = sync.step(parent.actions[t])
        np.testing.assert_array_equal(parent.rewards[t], rewards)
        np.testing.assert_array_equal(parent.terminations[t], terms)
        np.testing.assert_array_equal(parent.truncations[t], truncs)
        assert_same(_infos([(j, i) for s, j, i in reply.infos if s == t], N), infos, f"infos[{t}]")
        ended = terms | truncs
        ends += int(ended.sum())
        if mode is AutoresetMode.SAME_STEP and ended.any():
            np.testing.assert_array_equal(parent.final_observations[t][ended], np.stack(infos["final_obs"][ended]))
    assert ends > 2
    worker.parent.receive(0, N, reply.rows)
    np.testing.assert_array_equal(worker.parent.observations, obs)  # the step buffers hold the last rows
    sync.close()
    parent.close()


def test_payload_rows_cover_the_steps_run_and_land_in_their_columns() -> None:
    from gymnasium import spaces

    spec = RolloutSpec.plan(6, 5, spaces.Box(0, 1, (2,)), spaces.Discrete(3), False, AutoresetMode.DISABLED)
    worker = RolloutBuffers.attach(spec, 2, 4)
    worker.rewards[:] = np.arange(12).reshape(6, 2)
    worker.stepped[:] = True
    rows = worker.payload(1, 4)
    assert isinstance(rows, RolloutRows) and rows.rewards.shape == (3, 2) and rows.first_step == 1
    parent = RolloutBuffers.create(spec)
    parent.receive(2, 4, rows)
    np.testing.assert_array_equal(parent.rewards[1:4, 2:4], np.arange(12).reshape(6, 2)[1:4])
    assert (parent.rewards[0] == 0).all() and (parent.rewards[:, [0, 1, 4]] == 0).all()
    assert parent.stepped[1:4, 2:4].all() and parent.final_observations is None
    parent.close()
    parent.close()  # idempotent


def test_env_error_names_the_step_and_policy_error_says_it_is_the_policy(cores: Any) -> None:
    worker = cores(lambda: [DiffEnv(index=i, fail_step=6 if i == 1 else None) for i in range(N)])
    parent = _block(worker, 10, True, AutoresetMode.NEXT_STEP)
    worker.feed(Command.RESET, ResetArgs([0, 1, 2], None, None))
    ok, packed = worker.feed(
        Command.ROLLOUT, RolloutArgs(10, 0, Pickled.of(FunctionPolicy(lambda obs: np.zeros(len(obs), np.int64))))
    )
    assert not ok and isinstance(packed, PackedException)
    assert packed.env_index == 1 and re.fullmatch(r"at step [5-9] of the rollout \(steps 0\.\.9\)", packed.detail)
    policy = FunctionPolicy(lambda obs: 1 / 0, name="divides")
    ok, packed = worker.feed(Command.ROLLOUT, RolloutArgs(10, 0, Pickled.of(policy)))
    assert not ok and packed.env_index is None
    assert packed.detail == "in the worker's policy, at step 0 of the rollout (steps 0..9); the policy is divides"
    ok, packed = worker.feed(Command.ROLLOUT, RolloutArgs(11))
    assert not ok and "a rollout of 11 steps in a block of 10" in packed.message
    parent.close()


def test_an_unreadable_block_command_closes_the_descriptor_it_came_with(cores: Any) -> None:
    worker = cores(lambda: [DiffEnv(index=0)])
    read, write = os.pipe()
    os.close(write)

    def load() -> Any:
        raise ValueError("cannot rebuild the payload")

    ok, packed = worker.core.handle(Command.ROLLOUT_BLOCK, load, read)
    assert not ok and "cannot rebuild" in packed.message
    with pytest.raises(OSError):
        os.fstat(read)


def test_a_block_that_cannot_be_mapped_drops_the_old_one_and_fails_the_next_rollout_with_why(cores: Any) -> None:
    """Nobody waits for ROLLOUT_BLOCK's reply: its error comes back with the next rollout, and the
    old block is gone (rows written into it would land where the parent no longer reads)."""
    worker = cores(lambda: [DiffEnv(index=i) for i in range(N)], True, AutoresetMode.NEXT_STEP)
    old = _block(worker, 10, True, AutoresetMode.NEXT_STEP)
    spec = RolloutSpec.plan(
        20, N, worker.hello.observation_space, worker.hello.action_space, True, AutoresetMode.NEXT_STEP
    )
    read, write = os.pipe()  # not a memory block: mapping it fails
    os.close(write)
    ok, packed = worker.core.handle(Command.ROLLOUT_BLOCK, lambda: RolloutBlockArgs(spec, None), read)
    assert not ok
    assert worker.core.rollouts is not None and worker.core.rollouts.block is None
    ok, packed = worker.feed(Command.ROLLOUT, RolloutArgs(5, 0, Pickled.of(RandomPolicy())))
    assert not ok and isinstance(packed, PackedException)
    assert "could not map the rollout block" in packed.message
    old.close()
