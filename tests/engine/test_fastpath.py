"""The step's fast path (vecenv.wire.fastpath): steps posted in shared words beside the pipes.

It runs only where every process of the vector env has a core, so these tests pretend the
machine has 8 (``available_cpus``); the workers are forked, so a patch made here before the vector
env starts holds in them too. Results must be Sync's whichever way each reply travels (a step with
infos goes through the pipe), whether the peers are caught spinning or must be woken, and the
guarantees of the pipes (a dead worker noticed, timeouts, restarts) must hold while they spin.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from tests.helpers.envs import diff_env_fns
from tests.helpers.faults import fault_fns, healthy_fns
from vecenv.errors import VecEnvTimeoutError, WorkerDiedError
from vecenv.transports import process as process_transport
from vecenv.wire import fastpath
from vecenv.wire.fastpath import ControlBlock, SpinBudget, SpinMode
from vecenv.wire.protocol import WAKE_COMMAND, WAKE_REPLY, Command, decode_command, encode_command, is_bare_step
from vecenv.worker import loop as worker_loop

pytestmark = pytest.mark.skipif(not fastpath.SUPPORTED, reason="the fast path runs on x86-64 Linux only")

N = 6
STEPS = 300


class SomeInfos(gym.Wrapper):
    """Infos only on every ``every``-th step of the env (else ``{}``): with ``every=0`` never,
    so that its steps are answered in the words, and the others on the pipe."""

    def __init__(self, env: gym.Env, every: int) -> None:
        super().__init__(env)
        self.every, self.count = every, 0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.count += 1
        return obs, reward, terminated, truncated, info if self.every and self.count % self.every == 0 else {}


def _build(fn: Any, every: int) -> gym.Env:
    return SomeInfos(fn(), every)


def quiet(fns: list, every: int = 0) -> list:
    """``fns`` whose envs have infos on every ``every``-th step only (never with 0)."""
    return [functools.partial(_build, fn, every) for fn in fns]


@pytest.fixture
def cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_transport, "available_cpus", lambda: 8)


def _words(envs: vecenv.SubprocVectorEnv, word: int) -> list[int]:
    control = envs._pool.transport._control
    assert control is not None and control.words is not None
    return [control.words[control.index(i, word)] for i in range(control.workers)]


def _same_as_sync(envs: gym.vector.VectorEnv, fns: list, steps: int) -> None:
    sync = gym.vector.SyncVectorEnv(fns)
    try:
        rng = np.random.default_rng(0)
        got, want = envs.reset(seed=3), sync.reset(seed=3)
        np.testing.assert_array_equal(got[0], want[0])
        for _ in range(steps):
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
            actions = rng.integers(0, 2, envs.num_envs) if actions.dtype.kind == "i" else actions
            got, want = envs.step(actions), sync.step(actions)
            for a, b in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(a, b)
            assert got[4].keys() == want[4].keys()
    finally:
        sync.close()


def test_wake_messages_are_named_and_only_a_bare_step_takes_the_words() -> None:
    command, call_id, load = decode_command(WAKE_COMMAND)
    assert (command, call_id, load()) == (Command.WAKE, 0, None)
    assert WAKE_REPLY != WAKE_COMMAND
    assert is_bare_step(encode_command(Command.STEP, 7, None))
    assert not is_bare_step(encode_command(Command.STEP, 7, [1, 2]))  # actions in the message
    assert not is_bare_step(encode_command(Command.CLOSE, 7, None))
    assert not is_bare_step(bytearray(encode_command(Command.STEP, 7, None)))


def test_a_control_block_maps_the_same_words_in_two_places() -> None:
    block = ControlBlock.create(3)
    try:
        assert block.fd is not None
        other = ControlBlock.attach(os.dup(block.fd), 3)
        try:
            assert block.words is not None and other.words is not None
            at = block.index(2, fastpath.DONE)
            other.words[at] = 41
            assert block.words[at] == 41
            # The parent's words and the worker's sit in different cache lines.
            assert block.index(0, fastpath.DONE) * 8 // 64 != block.index(0, fastpath.COMMAND) * 8 // 64
            block.words[block.index(2, fastpath.SPIN_NS)] = 5
            block.reset(2)
            assert (block.words[at], block.words[block.index(2, fastpath.SPIN_NS)]) == (0, 5)
            # Each worker's slot names the items of its words, no two alike across the block.
            assert block.slots[2].done == at and other.slots[2] == block.slots[2]
            assert block.slots[1].sleeping == block.index(1, fastpath.SLEEPING)
            items = [item for slot in block.slots for item in slot]
            assert len(set(items)) == len(items) and fastpath.PARENT_SLEEPING not in items
        finally:
            other.close()
    finally:
        block.close()
    block.close()  # twice is fine


def test_the_spin_budget_follows_the_waits_and_stops_after_misses() -> None:
    budget = SpinBudget(1e-3)
    assert budget.seconds() == SpinBudget.FLOOR
    for _ in range(20):
        budget.record(100e-6, spun=True, caught=True)
    assert 150e-6 < budget.seconds() < 250e-6  # about twice the typical wait
    assert budget.seconds(limit=50e-6) == 50e-6  # never past the wait's own limit
    for _ in range(20):
        budget.record(50e-3)  # a learner thinking 50 ms between steps
    assert budget.seconds() == 0.0  # spinning would catch nothing
    budget = SpinBudget(1e-3)
    budget.record(10e-6, spun=True, caught=False)  # a miss: the next wait sleeps at once
    assert budget.seconds() == 0.0 and budget.seconds() > 0
    budget.record(10e-6, spun=True, caught=False)  # another: the next two
    assert budget.seconds() == budget.seconds() == 0.0 and budget.seconds() > 0
    budget.record(10e-6, spun=True, caught=True)  # a catch ends the backing off
    assert budget.backoff == 0
    assert SpinBudget(0.0).seconds() == 0.0


@pytest.mark.timeout(120)
def test_steps_with_and_without_infos_match_sync(cores: None) -> None:
    fns = quiet(diff_env_fns(N), every=7)
    with vecenv.SubprocVectorEnv(fns, 2, context="fork") as envs:
        assert envs._pool.transport.spin > 0
        _same_as_sync(envs, fns, STEPS)
        done, replies = _words(envs, fastpath.DONE), _words(envs, fastpath.REPLIES)
        assert all(d > 0 for d in done), f"no step answered in the words: {done}"
        assert all(r > 0 for r in replies), f"no step with infos answered on the pipe: {replies}"


@pytest.mark.timeout(120)
def test_every_wake_up_arrives_when_both_sides_always_sleep(cores: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No spin at all: every step goes through the sleeping side of the protocol on both ends.
    The safety recheck is pushed past the test's timeout, so one lost wake-up fails the test."""
    monkeypatch.setattr(SpinBudget, "seconds", lambda self, limit=None: 0.0)
    monkeypatch.setattr(fastpath, "RECHECK_SECONDS", 600.0)
    fns = quiet(healthy_fns(4))
    with vecenv.SubprocVectorEnv(fns, 2, context="fork") as envs:
        _same_as_sync(envs, fns, 1000)
        assert min(_words(envs, fastpath.DONE)) > 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("written", [False, True], ids=["before-the-write", "after-the-write"])
def test_an_interrupt_while_waking_a_worker_leaves_it_running(
    cores: None, monkeypatch: pytest.MonkeyPatch, written: bool
) -> None:
    """Ctrl+C while the parent writes a ``WAKE`` (a few bytes, sent whole or not at all, with
    no content) cuts no message: the step is interrupted, but the worker is not ended, so the
    reset after it is answered by the same process and the steps after it match Sync. Nobody
    spins and the safety recheck is pushed past the test's timeout: a wake-up lost to the
    interrupt would hang the test."""
    monkeypatch.setattr(SpinBudget, "seconds", lambda self, limit=None: 0.0)
    monkeypatch.setattr(fastpath, "RECHECK_SECONDS", 600.0)
    real = process_transport.send_within
    fired = []

    def interrupted(conn: Any, data: bytes, fd: int | None, timeout: float | None, *more: Any) -> None:
        if data == WAKE_COMMAND and not fired:
            fired.append(conn)
            if written:
                real(conn, data, fd, timeout, *more)
            raise KeyboardInterrupt
        real(conn, data, fd, timeout, *more)

    fns = healthy_fns(4)
    with vecenv.SubprocVectorEnv(fns, 2, context="fork") as envs:
        pids = envs.worker_pids
        envs.reset(seed=0)
        monkeypatch.setattr(process_transport, "send_within", interrupted)
        with pytest.raises(KeyboardInterrupt):
            for _ in range(1000):  # a worker asleep when its step is posted gets a WAKE
                envs.step(np.zeros((4, 2), np.float32))
        assert fired, "no WAKE was written"
        with pytest.raises(vecenv.NeedsResetError):
            envs.step(np.zeros((4, 2), np.float32))
        _same_as_sync(envs, fns, 50)
        assert envs.worker_pids == pids and envs.restart_count == 0


@pytest.mark.timeout(60)
def test_a_step_posted_before_the_worker_waits_is_taken(cores: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step right after the constructor (before any reset) is posted in the word while the
    workers may still be setting up their wait: each must take it, not mistake it for one it
    has done (the step then never ran, and the parent waited forever). Gymnasium's envs refuse
    a step before reset, and that error comes back."""
    real = worker_loop._Waiter.__init__

    def late(self: Any, *args: Any) -> None:
        time.sleep(0.3)  # the parent posts meanwhile (the patch holds in the forked workers)
        real(self, *args)

    monkeypatch.setattr(worker_loop._Waiter, "__init__", late)
    with vecenv.make("CartPole-v1", 4, 2, context="fork") as envs:
        assert envs._pool.transport.spin_mode is SpinMode.FULL
        with pytest.raises(gym.error.ResetNeeded):
            envs.step(np.zeros(4, np.int64), timeout=20)


@pytest.mark.timeout(120)
def test_the_parent_hosted_group_and_one_spinning_worker_match_sync(cores: None) -> None:
    fns = quiet(diff_env_fns(N), every=7)
    with vecenv.SubprocVectorEnv(fns, 2, context="fork", inline_group=True) as envs:
        _same_as_sync(envs, fns, STEPS)
        assert envs._pool.transport.processes_transport._control.words is not None


@pytest.mark.timeout(60)
def test_a_worker_that_dies_while_the_parent_spins_is_reported(cores: None) -> None:
    with vecenv.SubprocVectorEnv(quiet(fault_fns(4, "exit", "step", 3, at=40)), 2, context="fork") as envs:
        envs.reset(seed=0)
        with pytest.raises(WorkerDiedError, match="worker 1"):
            for _ in range(100):
                envs.step(np.zeros((4, 2), np.float32))


@pytest.mark.timeout(60)
def test_a_step_that_hangs_times_out_and_the_next_reset_is_answered(cores: None) -> None:
    with vecenv.SubprocVectorEnv(
        quiet(fault_fns(4, "sleep", "step", 0, at=20, duration=1.5)), 2, context="fork"
    ) as envs:
        envs.reset(seed=0)
        actions = np.zeros((4, 2), np.float32)
        with pytest.raises(VecEnvTimeoutError):
            for _ in range(40):
                envs.step(actions, timeout=0.5)
        # The late worker's reply is dropped; the reset that follows goes through its pipe.
        obs, _ = envs.reset(seed=1)
        assert obs.shape == (4, 3)
        for _ in range(50):
            envs.step(actions)  # and steps take the words again
        assert min(_words(envs, fastpath.DONE)) > 0


@pytest.mark.timeout(120)
def test_a_restarted_worker_takes_steps_in_the_words_again(cores: None, tmp_path: os.PathLike) -> None:
    once = os.path.join(tmp_path, "once")
    fns = quiet(fault_fns(4, "exit", "step", 3, at=30, once=once))
    with vecenv.SubprocVectorEnv(fns, 2, context="fork", on_worker_death="restart") as envs:
        envs.reset(seed=0)
        actions = np.zeros((4, 2), np.float32)
        restarted = 0
        for _ in range(60):
            infos = envs.step(actions)[4]
            restarted += int(np.any(infos.get("worker_restarted", False)))
        assert restarted == 1 and envs._pool.restarts == 1
        before = _words(envs, fastpath.DONE)[1]
        for _ in range(20):
            envs.step(actions)
        assert _words(envs, fastpath.DONE)[1] > before


@pytest.mark.timeout(60)
def test_vector_envs_of_one_process_spin_flat_out_only_while_their_processes_fit_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_transport, "available_cpus", lambda: 4)
    with vecenv.SubprocVectorEnv(quiet(healthy_fns(2)), 2, context="fork") as first:
        assert first._pool.transport.spin_mode is SpinMode.FULL
        assert min(_words(first, fastpath.SPIN_NS)) > 0 and max(_words(first, fastpath.SPIN_YIELDS)) == 0
        with vecenv.SubprocVectorEnv(quiet(healthy_fns(2)), 2, context="fork") as second:
            # Four workers and this process: more than the four cores, so both yield as they spin.
            for envs in (first, second):
                assert envs._pool.transport.spin_mode is SpinMode.YIELDING
                assert envs._pool.transport.spin == 0  # no polling of the pipes
                assert min(_words(envs, fastpath.SPIN_NS)) > 0 and min(_words(envs, fastpath.SPIN_YIELDS)) == 1
            for envs in (first, second):
                _same_as_sync(envs, quiet(healthy_fns(2)), 50)
        assert first._pool.transport.spin_mode is SpinMode.FULL
        assert min(_words(first, fastpath.SPIN_NS)) > 0 and max(_words(first, fastpath.SPIN_YIELDS)) == 0


@pytest.mark.timeout(60)
def test_nobody_spins_past_three_processes_a_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_transport, "available_cpus", lambda: 1)
    with vecenv.SubprocVectorEnv(quiet(healthy_fns(3)), 3, context="fork") as envs:
        # Three workers and this process on one core.
        assert envs._pool.transport.spin_mode is SpinMode.OFF and max(_words(envs, fastpath.SPIN_NS)) == 0
        _same_as_sync(envs, quiet(healthy_fns(3)), 50)


def test_the_spin_mode_follows_processes_per_core() -> None:
    assert SpinMode.for_processes(1, 2) is SpinMode.OFF  # nobody to wait for
    assert SpinMode.for_processes(2, 2) is SpinMode.FULL
    assert SpinMode.for_processes(3, 2) is SpinMode.YIELDING  # the default on 2 cores
    assert SpinMode.for_processes(6, 2) is SpinMode.YIELDING
    assert SpinMode.for_processes(7, 2) is SpinMode.OFF


def test_a_step_posted_before_a_pipe_message_is_taken_first() -> None:
    """The parent posts a step in the word, is interrupted, then writes a reset to the pipe.
    A worker that read the word just before the post and finds the pipe readable just after
    the write must still take the step first, as it was sent first (else the abandoned step
    would run after the reset and overwrite its observations)."""
    block = ControlBlock.create(1)
    read_end, write_end = os.pipe()
    try:
        assert block.words is not None
        words, at = block.words, block.index(0, fastpath.COMMAND)

        class Racing:
            """A pipe end whose poll finds a message the parent wrote after posting step 7."""

            def fileno(self) -> int:
                return read_end

            def poll(self, timeout: float) -> bool:
                words[at] = 7  # posted between the waiter's read of the word and its poll
                return True

        waiter = worker_loop._Waiter(Racing(), block, 0)  # type: ignore[arg-type]
        assert waiter._check() == 7
    finally:
        os.close(read_end)
        os.close(write_end)
        block.close()
