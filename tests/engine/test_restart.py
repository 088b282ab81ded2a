"""Restarting dead workers (``on_worker_death="restart"``, ``vecenv.parent.restart``): the envs
that did not fail stay exact against SyncVectorEnv, the restarted ones come back truncated with
fresh, reproducibly seeded episodes, and no restart loop can spin.

The first part kills real worker processes; the last part tests the units without any process:
the budget's sliding window, a :class:`~vecenv.parent.restart.Restarter` on a fake pool, and the
pool and restarter together on :class:`~tests.helpers.fakes.FakeTransport`.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
import vecenv.parent.pool
import vecenv.parent.restart
from tests.conftest import start_methods
from tests.engine.test_differential import assert_same, sample_actions
from tests.engine.test_group import expected_masked_join, masked_group
from tests.helpers.envs import diff_env_fns, make_group
from tests.helpers.fakes import ACT_SPACE, OBS_SPACE, FakeClock, FakeTransport, Sent, hello, use_clock
from tests.helpers.faults import fault_fns, transport_of
from vecenv import VecEnvTimeoutError, WorkerDiedError
from vecenv.parent.pool import PoolPhase, WorkerPool
from vecenv.parent.records import OwedCall, WorkerRecord, WorkerStatus
from vecenv.parent.restart import (
    RESTART_INFO_KEY,
    LostAgain,
    RestartBudget,
    RestartedRollout,
    Restarter,
    RestartPolicy,
    mark_restarted,
    truncated_reply,
)
from vecenv.parent.state import SeedBook
from vecenv.transports.base import WorkerGone
from vecenv.wire.buffers import Buffers, BufferSpec
from vecenv.wire.protocol import Attach, CallArgs, Command, Flags, ResetArgs, Rows, StepReply

N, W = 6, 3  # groups of 2: worker 1 hosts envs 2 and 3
VICTIM, VICTIM_ENVS = 1, [2, 3]
KEEP = [0, 1, 4, 5]


def _rows(out: tuple, rows: list[int]) -> tuple:
    obs, rewards, terms, truncs, _ = out
    return obs[rows], rewards[rows], terms[rows], truncs[rows]


def _kill(envs: vecenv.SubprocVectorEnv, worker: int) -> None:
    """SIGKILL a worker and wait until it is gone (a loaded machine may run it a while first)."""
    process = transport_of(envs).processes[worker]
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
            assert envs.restart_count == 1
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
        assert envs.restart_count == 2


class _Counting(gym.Env):
    """Observes its step count in the episode; counts its resets."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    observation_space = gym.spaces.Box(0.0, 1e6, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.render_mode = "rgb_array"
        self.resets = 0
        self.label = "a"

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.resets = 0, self.resets + 1
        return np.array([self.t], np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1  # AttributeError if never reset
        return np.array([self.t], np.float32), 1.0, False, False, {}

    def render(self) -> np.ndarray:
        return np.zeros((2, 2, 3), np.uint8)

    def count(self) -> int:
        return self.t


@pytest.mark.timeout(60)
def test_a_masked_reset_that_saw_the_death_starts_every_env_of_the_group_afresh() -> None:
    """The envs the mask leaves alone are new as well: the rebuild resets them, and the reset's
    infos mark the whole group, so none of them is stepped before a reset."""
    zeros = np.zeros(4, np.int64)
    with vecenv.SubprocVectorEnv([_Counting] * 4, 2, on_worker_death="restart", context="fork") as envs:
        envs.reset(seed=0)
        for _ in range(3):
            envs.step(zeros)
        _kill(envs, 1)  # envs 2 and 3
        obs, infos = envs.reset(options={"reset_mask": np.array([True, False, True, False])})
        assert obs[:, 0].tolist() == [0, 3, 0, 0]
        assert infos["_worker_restarted"].tolist() == [False, False, True, True]
        assert envs.get_attr("resets") == (2, 1, 2, 1)  # env 2: the rebuild's reset and the user's
        obs, rewards, terminations, truncations, infos = envs.step(zeros)
        assert obs[:, 0].tolist() == [1, 4, 1, 1] and not truncations.any()
        assert "worker_restarted" not in infos  # reported once, by the reset


@pytest.mark.timeout(60)
@pytest.mark.parametrize("found_by", ["get_attr", "call", "set_attr", "render"])
def test_a_restart_found_by_a_call_is_reported_by_the_next_step(found_by: str) -> None:
    """A call steps nothing: the episodes that ended with the dead worker are truncated by the
    next step, as when the step itself finds the death."""
    zeros = np.zeros(4, np.int64)
    with vecenv.SubprocVectorEnv([_Counting] * 4, 2, on_worker_death="restart", context="fork") as envs:
        envs.reset(seed=0)
        for _ in range(3):
            envs.step(zeros)
        _kill(envs, 1)
        if found_by == "get_attr":
            assert envs.get_attr("t") == (3, 3, 0, 0)
        elif found_by == "call":
            assert envs.call("count") == (3, 3, 0, 0)
        elif found_by == "set_attr":
            envs.set_attr("label", "b")
        else:
            assert len(envs.render()) == 4
        obs, rewards, terminations, truncations, infos = envs.step(zeros)
        assert obs[:, 0].tolist() == [4, 4, 0, 0]  # the restarted envs: their fresh reset's
        assert truncations.tolist() == [False, False, True, True] and rewards.tolist() == [1, 1, 0, 0]
        assert infos["_worker_restarted"].tolist() == [False, False, True, True]
        obs = envs.step(zeros)[0]
        assert obs[:, 0].tolist() == [5, 5, 1, 1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("found_by", ["rollout", "get_attr"])
def test_a_rollout_reports_a_restart_the_same_whoever_found_it(found_by: str) -> None:
    """Row 0 of the restarted group is the restarted step: its observation the one the user
    last saw (not the replacement's reset, which a call that found the death has already
    written), truncated; row 1 starts the new episode."""
    zeros = np.zeros(4, np.int64)
    with vecenv.SubprocVectorEnv([_Counting] * 4, 2, on_worker_death="restart", context="fork") as envs:
        envs.reset(seed=0)
        for _ in range(3):
            last = envs.step(zeros)[0].copy()
        _kill(envs, 1)
        if found_by == "get_attr":
            envs.get_attr("t")
        got = envs.rollout(3, lambda obs: np.zeros(len(obs), np.int64))
        np.testing.assert_array_equal(got.observations[0], last)
        assert got.truncations[0].tolist() == [False, False, True, True]
        assert got.observations[1, :, 0].tolist() == [4, 4, 0, 0]
        assert got.episode_starts[1].tolist() == [False, False, True, True]


class _StuckIfMadeAfter(_Counting):
    """A `_Counting` that blocks in `step` when built after ``marker`` exists: the replacement
    of a worker killed once the marker was made hangs, the envs built before it do not."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.stuck = os.path.exists(marker)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.stuck:
            threading.Event().wait()  # never set: stuck in env code until the worker is ended
        return super().step(action)


@pytest.mark.timeout(60)
def test_a_rollout_that_times_out_in_a_replacement_names_the_callers_timeout(tmp_path: Any) -> None:
    """A restarted group's rollout is gathered in a second round; its timeout was reported as
    what was left of the caller's (``after 1.97 second(s)``), the time elapsed as that round's."""
    marker = str(tmp_path / "stuck")
    fns = [functools.partial(_StuckIfMadeAfter, marker)] * 4
    with vecenv.SubprocVectorEnv(fns, 2, on_worker_death="restart", context="fork") as envs:
        envs.reset(seed=0)
        open(marker, "w").close()
        _kill(envs, 1)
        with pytest.raises(VecEnvTimeoutError) as caught:
            envs.rollout(3, lambda obs: np.zeros(len(obs), np.int64), timeout=2.0)
    message = str(caught.value)
    assert "The call to `rollout_wait` has timed out after 2.0 second(s) (" in message, message
    elapsed = float(message.split("second(s) (")[1].split(" s elapsed")[0])
    assert elapsed >= 2.0, message
    assert "No reply yet from worker 1 (envs 2..3)" in message, message


@pytest.mark.timeout(60)
def test_a_replacement_process_that_cannot_start_breaks_the_vector_env_and_close_is_clean(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    envs = vecenv.SubprocVectorEnv([_Counting] * 4, 2, on_worker_death="restart", context="fork")
    try:
        envs.reset(seed=0)
        transport = transport_of(envs)

        def cannot_start(index: int, context: Any = None) -> None:
            raise OSError(24, "Too many open files")

        monkeypatch.setattr(transport, "_start", cannot_start)
        _kill(envs, 1)
        with pytest.raises(WorkerDiedError, match="its replacement could not be started: OSError: .*Too many open"):
            envs.step(np.zeros(4, np.int64))
    finally:
        envs.close()
    assert all(p is None for p in transport.processes[1:])
    assert not any(os.path.exists(f"/proc/{pid}") for pid in envs.worker_pids if pid is not None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["starting", "started"])
def test_an_interrupt_while_a_replacement_starts_breaks_the_vector_env_and_close_is_clean(
    when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl+C while the replacement process starts (none there yet), or once it runs but before
    it got its rows: the interrupt reaches the caller, every later call is a WorkerDiedError
    that says the restart was interrupted, and close() returns leaving no process."""
    envs = vecenv.SubprocVectorEnv([_Counting] * 4, 2, on_worker_death="restart", context="fork")
    try:
        envs.reset(seed=0)
        transport = transport_of(envs)
        start, relaunch = transport._start, transport.relaunch

        def interrupted_start(index: int, context: Any = None) -> None:
            raise KeyboardInterrupt

        def interrupted_after(worker: int) -> None:
            relaunch(worker)
            raise KeyboardInterrupt

        if when == "starting":
            monkeypatch.setattr(transport, "_start", interrupted_start)
        else:
            monkeypatch.setattr(transport, "relaunch", interrupted_after)
        _kill(envs, 1)
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.zeros(4, np.int64))
        monkeypatch.setattr(transport, "_start", start)
        for call in (lambda: envs.reset(seed=1), lambda: envs.step(np.zeros(4, np.int64))):
            with pytest.raises(WorkerDiedError, match="its restart was interrupted; the vector env is unusable"):
                call()
        pids = [pid for pid in envs.worker_pids if pid is not None]
    finally:
        envs.close()
    assert envs.closed
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)


@pytest.mark.timeout(60)
def test_async_batches_restart_the_same_way() -> None:
    fns = [functools.partial(gym.make, "CartPole-v1")] * 4
    with vecenv.SubprocVectorEnv(fns, 2, batch_size=2, on_worker_death="restart", context="fork") as envs:
        envs.async_reset(seed=0)
        seen_restart = False
        stepped: set[int] = set()  # groups recv has returned: what they owe since is a step
        t = 0
        # Until the restarted group is back: the other group may win many rounds in a row.
        while (not seen_restart or t < 30) and t < 2000:
            obs, rewards, terms, truncs, infos, ids = envs.recv(timeout=30)
            group = int(ids[0]) // 2
            if t == 10:
                _kill(envs, 1 - group)  # a group in flight, or whose reply is waiting to be read
            if "worker_restarted" in infos:
                seen_restart = True
                assert not terms.any()
                # What it owed when it died decides the reply, which only the batches seen so
                # far tell: on a busy machine it may not have answered async_reset yet.
                if group in stepped:  # the step it owed: truncated, reward 0, a fresh episode
                    assert truncs.all() and (rewards == 0).all()
                else:  # the reset it owed, sent again: a reset's rewards and flags
                    assert not truncs.any() and (rewards == 0).all()
            stepped.add(group)
            envs.send(np.zeros(len(ids), dtype=np.int64), ids)
            t += 1
        assert seen_restart, "no recv reported the restarted group"
        assert envs.restart_count == 1


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
        assert envs.restart_count == 2
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
        assert envs.restart_count == 3
    finally:
        envs.close()


class _RaisesWhenRebuilt(_DiesWhenRebuilt):
    """Builds fine once; a later build (in a restarted worker) raises, as a simulator whose
    licence server went away does."""

    def __init__(self, marker: str) -> None:
        if os.path.exists(marker):
            raise ConnectionError("licence server down")
        super().__init__(marker)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inline", [False, True], ids=["workers", "inline-group"])
@pytest.mark.parametrize("found_by", ["step", "get_attr"])
def test_a_rebuild_that_raises_names_the_env_and_keeps_its_traceback(tmp_path, inline: bool, found_by: str) -> None:
    """The WorkerDiedError names the env whose constructor raised in the replacement, and has
    that exception (with the worker's traceback as its own cause) as its cause, as a start-up
    error has; every later call's error too. The vector env still closes when dropped, also
    when the death was found by sending a command down the dead worker's pipe (get_attr; a
    step's command takes the fast path), where the rebuild raises while that failure is
    handled."""
    fns = [functools.partial(_RaisesWhenRebuilt, str(tmp_path / f"built-{i}")) for i in range(4)]
    envs = vecenv.SubprocVectorEnv(fns, 2, on_worker_death="restart", context="fork", inline_group=inline)
    try:
        envs.reset(seed=0)
        _kill(envs, 1)
        with pytest.raises(vecenv.WorkerDiedError, match="rebuilding its envs raised ConnectionError") as info:
            if found_by == "step":
                envs.step(np.zeros(4, dtype=np.int64))
            else:
                envs.get_attr("observation_space")
        assert "raised by env_fns[2] (env 2)" in str(info.value), str(info.value)
        cause = info.value.__cause__
        assert isinstance(cause, ConnectionError) and cause.__traceback__ is None and cause.__context__ is None
        assert 'raise ConnectionError("licence server down")' in str(cause.__cause__)  # the worker's traceback
        with pytest.raises(vecenv.WorkerDiedError) as later:
            envs.step(np.zeros(4, dtype=np.int64))
        assert later.value.__cause__ is not None and later.value.__cause__.__cause__ is cause
    except BaseException:
        envs.close()
        raise
    del info, later, cause  # their tracebacks hold this frame, which holds envs
    dropped = weakref.ref(envs)
    del envs
    assert dropped() is None, "a cycle keeps the broken vector env alive"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"on_worker_death": "retry"}, "on_worker_death"),
        ({"on_worker_death": "restart", "max_restarts": 0}, "max_restarts"),
        ({"on_worker_death": "restart", "restart_window": -1}, "restart_window"),
        ({"restart_window": None}, r"`restart_window` must be a positive number of seconds, got None"),
        ({"restart_window": 0}, r"`restart_window` must be a positive number of seconds, got 0"),
        ({"restart_window": "60"}, r"`restart_window` must be a positive number of seconds, got '60'"),
    ],
    ids=["policy", "max_restarts", "window", "window-none", "window-zero", "window-str"],
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
        assert envs.restart_count == 1
    with pytest.raises(ValueError, match="on_worker_death"):
        vecenv.SubprocVectorEnv.from_groups(group_fns, on_worker_death="retry")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("found_by", ["step", "rollout"])
def test_a_restarted_native_group_keeps_the_info_keys_none_of_its_envs_carries(found_by: str) -> None:
    """The restarted group's reset reply, answered as the step it owed, kept its entries but
    not the keys that its native env masked out in every env."""
    make = [functools.partial(masked_group, "carried"), functools.partial(masked_group, "masked")]
    with vecenv.SubprocVectorEnv.from_groups(make, on_worker_death="restart", context="fork") as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(4, np.int64))
        _kill(envs, 1)
        infos = envs.step(np.zeros(4, np.int64))[4] if found_by == "step" else envs.rollout(2).infos[0]
        assert envs.restart_count == 1
    want = expected_masked_join(("carried", "masked"))
    want[RESTART_INFO_KEY] = np.array([False, False, True, True])
    want[f"_{RESTART_INFO_KEY}"] = want[RESTART_INFO_KEY].copy()
    assert_same(infos, want, found_by, ordered=False)


def _cartpole_batch(num_envs: int) -> gym.vector.VectorEnv:
    """CartPole's own vector env: its reset takes an int seed only, and ignores reset_mask."""
    return gym.make_vec("CartPole-v1", num_envs, vectorization_mode="vector_entry_point")


@pytest.mark.timeout(60)
def test_a_native_group_reset_through_a_mask_is_restarted_with_its_groups_seeds() -> None:
    """A masked reset with a seed hands a native group the seeds of all its envs (one int for
    its batch); its restart then reseeds the group from them, as an int it takes: the mix of
    the masked envs' new seeds and the others' old ones was a list that CartPole's vector env
    refused, and the restart broke the vector env."""
    group_fns = [functools.partial(_cartpole_batch, 2)] * 2
    with vecenv.SubprocVectorEnv.from_groups(group_fns, on_worker_death="restart", context="fork") as envs:
        envs.reset(seed=0)
        envs.reset(seed=50, options={"reset_mask": np.array([True, False, True, False])})
        _kill(envs, 1)
        obs, rewards, terms, truncs, infos = envs.step(np.zeros(4, np.int64))
        assert envs.restart_count == 1
        assert truncs.tolist() == [False, False, True, True] and infos["_worker_restarted"][2:].all()
    fresh = _cartpole_batch(2)
    want, _ = fresh.reset(seed=52 + 1 * 4)  # its first env's seed + restarts * num_envs
    fresh.close()
    np.testing.assert_array_equal(obs[2:], want)


# -- units, without a process: RestartBudget, Restarter on a fake pool, mark_restarted -------------


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The budget's and the pool's time on one fake clock."""
    fake = FakeClock()
    use_clock(monkeypatch, fake, vecenv.parent.restart, vecenv.parent.pool)
    return fake


def test_budget_counts_restarts_in_a_sliding_window() -> None:
    budget = RestartBudget(max_restarts=2, window=10.0)
    assert budget.spend(0.0) is None
    assert budget.spend(1.0) is None
    assert budget.spend(5.0) == "2 restarts within 10 s already (max_restarts=2)"
    assert budget.spend(10.0) is not None  # the restart at 0.0 is exactly 10 s old: still inside
    assert budget.spend(10.5) is None  # 0.0 has left the window; the refusals counted nothing
    assert budget.spend(11.0) == "2 restarts within 10 s already (max_restarts=2)"  # 1.0 and 10.5
    assert budget.spend(30.0) is None


def test_mark_restarted_merges_the_key_into_every_envs_info() -> None:
    infos = [(1, {"seed": 5})]
    marked = mark_restarted(infos, 3)
    assert marked == [
        (0, {RESTART_INFO_KEY: True}),
        (1, {"seed": 5, RESTART_INFO_KEY: True}),
        (2, {RESTART_INFO_KEY: True}),
    ]
    assert infos == [(1, {"seed": 5})]  # the reply's own dicts are left alone
    assert RESTART_INFO_KEY == "worker_restarted"


class FakeHost:
    """What a :class:`Restarter` needs of a pool (``RestartHost``), scripted and recorded.

    ``replies``: what each ``gather`` returns, in order (an exception instance is raised).
    """

    def __init__(self, transport: FakeTransport, spec: BufferSpec, replies: list[Any]) -> None:
        self.transport = transport
        self.spec = spec
        self.buffers: Buffers | None = Buffers.create(spec)
        self.replies = list(replies)
        self.restarter: Restarter | None = None
        self.ending = False
        self.sent: list[tuple[int, Command, Any, str]] = []
        self.gathers: list[tuple[list[int], float | None, str, bool, bool]] = []
        self.answers: list[tuple[int, int, bool, Any]] = []
        self.deaths: list[tuple[int, str]] = []
        self._ids = itertools.count(1000)
        self._owed: dict[int, int] = {}

    def attach_message(self, w: WorkerRecord) -> Attach:
        return Attach(w.start, w.size, AutoresetMode.NEXT_STEP, self.spec)

    def send(self, workers: Sequence[WorkerRecord], command: Command, payloads: Sequence[Any], call: str) -> None:
        for w, payload in zip(workers, payloads, strict=True):
            call_id = next(self._ids)
            w.sent(OwedCall(call_id, call, True, command, Sent(command, call_id, payload), payload))
            self._owed[w.index] = call_id
            self.sent.append((w.index, command, payload, call))

    def gather(
        self, workers: Sequence[WorkerRecord], timeout: float | None, call: str, fail_fast: bool = False
    ) -> list[Any]:
        active = self.restarter is not None and self.restarter.active
        self.gathers.append(([w.index for w in workers], timeout, call, fail_fast, active))
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        (w,) = workers
        w.answered(0 if w.status is WorkerStatus.STARTING else self._owed[w.index], True, reply, 0)
        w.take()
        return [reply]

    def answer(self, w: WorkerRecord, call_id: int, ok: bool, result: Any) -> None:
        self.answers.append((w.index, call_id, ok, result))
        w.answered(call_id, ok, result, 0)

    def died(self, w: WorkerRecord, call: str, deadline: float | None = None) -> None:
        self.deaths.append((w.index, call))

    def close(self) -> None:
        assert self.buffers is not None
        self.buffers.close()


def _seeds(*seeds: int | None) -> SeedBook:
    book = SeedBook(len(seeds))
    book.remember(list(seeds), None)
    return book


def _worker_owing(command: Command | None, payload: Any = None, call: str = "step") -> WorkerRecord:
    """Worker 1 of three groups of 2 (envs 2 and 3), idle after its handshake, then sent call 7."""
    w = WorkerRecord(1)
    w.start, w.stop = 2, 4
    w.answered(0, True, hello(2), 0)
    w.take()
    if command is not None:
        w.sent(OwedCall(7, call, True, command, Sent(command, 7, payload), payload))
    return w


def _restarter(host: FakeHost, max_restarts: int = 2, seeds: SeedBook | None = None) -> Restarter:
    seeds = seeds or _seeds(10, 11, 12, 13, 14, 15)
    restarter = Restarter(RestartPolicy(max_restarts, 60.0, seeds, timeout=5.0))
    host.restarter = restarter
    return restarter


def _host(clock: FakeClock, replies: list[Any], **transport_kwargs: Any) -> FakeHost:
    transport = FakeTransport(clock, **transport_kwargs)
    transport.launch([lambda: 2] * 3)
    transport.queue.clear()  # the first Hellos: the fake host does not poll
    return FakeHost(transport, BufferSpec.plan(6, OBS_SPACE, ACT_SPACE, False), replies)


def test_a_step_owed_is_answered_as_the_reseeded_reset_truncated_with_reward_0(clock: FakeClock) -> None:
    host = _host(clock, [hello(2), StepReply([(1, {"seed": 19})])])  # flags in shared memory
    restarter = _restarter(host)
    buffers = host.buffers
    assert buffers is not None
    buffers.rewards[:] = 5.0
    buffers.terminations[:] = True
    w = _worker_owing(Command.STEP)
    try:
        assert restarter.replace(host, w) is None
        assert host.transport.launches == [0, 1, 2, 1]  # worker 1 relaunched
        assert host.transport.attached == [(1, Attach(2, 2, AutoresetMode.NEXT_STEP, host.spec))]
        # Its envs reset with seed + i + 1 * num_envs: the 1st restart of a vector env of 6.
        assert host.sent == [(1, Command.RESET, ResetArgs([18, 19], None, None), "restart")]
        assert host.gathers == [([1], 5.0, "restart", True, True)] * 2  # a death now is LostAgain
        assert restarter.active is False and restarter.restarts == 1
        infos = [(0, {RESTART_INFO_KEY: True}), (1, {"seed": 19, RESTART_INFO_KEY: True})]
        assert host.answers == [(1, 7, True, StepReply(infos, None))]
        assert w.status is WorkerStatus.READY  # the waiting call takes it
        assert buffers.rewards.tolist() == [5.0, 5.0, 0.0, 0.0, 5.0, 5.0]
        assert buffers.terminations.tolist() == [True, True, False, False, True, True]
        assert buffers.truncations.tolist() == [False, False, True, True, False, False]
    finally:
        host.close()


def test_a_truncated_reply_with_its_flags_in_the_reply_gets_new_arrays(clock: FakeClock) -> None:
    host = _host(clock, [])
    w = _worker_owing(None)
    obs = np.zeros((2, 2), np.float32)
    sent_flags = Flags(np.array([3.0, 4.0]), np.array([True, False]), np.array([False, False]))
    sent_flags.rewards.flags.writeable = False  # as a transport's arrays may be
    try:
        reply = truncated_reply(host, w, StepReply([], Rows(obs, sent_flags)))
        assert reply.rows is not None and reply.rows.observations is obs and reply.rows.flags is not None
        flags = reply.rows.flags
        assert flags.rewards.tolist() == [0.0, 0.0] and flags.rewards.dtype == np.float64
        assert flags.terminations.tolist() == [False, False] and flags.truncations.tolist() == [True, True]
        assert reply.infos == [(0, {RESTART_INFO_KEY: True}), (1, {RESTART_INFO_KEY: True})]
        assert sent_flags.rewards.tolist() == [3.0, 4.0]  # the reply's arrays are not written
    finally:
        host.close()


def test_a_reset_owed_is_sent_again_and_not_reseeded(clock: FakeClock) -> None:
    host = _host(clock, [hello(2)])
    restarter = _restarter(host)
    args = ResetArgs([1, 2], {"x": 1}, None)
    w = _worker_owing(Command.RESET, args, "reset")
    try:
        assert restarter.replace(host, w) is None
        assert host.sent == [] and host.answers == []  # the user's own reset does it
        assert host.transport.sent == [(1, Sent(Command.RESET, 7, args))]  # with its call id
        assert w.restarted_reset == 7 and w.status is WorkerStatus.BUSY
    finally:
        host.close()


def test_another_call_owed_is_sent_again_after_the_reseeded_reset(clock: FakeClock) -> None:
    host = _host(clock, [hello(2), StepReply([])])
    restarter = _restarter(host, seeds=_seeds(10, 11, 12, None, 14, 15))
    args = CallArgs("get_index", (), {})
    w = _worker_owing(Command.CALL, args, "call")
    try:
        assert restarter.replace(host, w) is None
        assert host.sent == [(1, Command.RESET, ResetArgs([18, None], None, None), "restart")]  # unseeded stays so
        assert host.transport.sent == [(1, Sent(Command.CALL, 7, args))]
        assert w.restarted_reset is None and w.status is WorkerStatus.BUSY and host.answers == []
        assert w.unreported_restart == StepReply([])  # a call steps nothing: the next step reports it
    finally:
        host.close()


@pytest.mark.parametrize(
    ("mask", "rebuilt_reset"),
    [([True, False], True), ([False, True], True), ([True, True], False)],
    ids=["first", "second", "all"],
)
def test_a_masked_reset_owed_is_sent_again_after_the_reseeded_reset_unless_it_resets_the_group(
    clock: FakeClock, mask: list[bool], rebuilt_reset: bool
) -> None:
    host = _host(clock, [hello(2), StepReply([])] if rebuilt_reset else [hello(2)])
    restarter = _restarter(host)
    args = ResetArgs([1, 2], None, np.array(mask))
    w = _worker_owing(Command.RESET, args, "reset")
    try:
        assert restarter.replace(host, w) is None
        # The envs the mask leaves alone are new too: the rebuild resets them (reseeded) first.
        assert [c for _, c, _, _ in host.sent] == ([Command.RESET] if rebuilt_reset else [])
        assert host.transport.sent == [(1, Sent(Command.RESET, 7, args))]
        assert w.restarted_reset == 7 and w.unreported_restart is None  # its infos report it
    finally:
        host.close()


def test_a_worker_that_owed_nothing_is_rebuilt_and_left_idle(clock: FakeClock) -> None:
    host = _host(clock, [hello(2), StepReply([])])
    restarter = _restarter(host)
    w = _worker_owing(None)
    try:
        assert restarter.replace(host, w) is None
        assert [c for _, c, _, _ in host.sent] == [Command.RESET] and host.transport.sent == []
        assert w.status is WorkerStatus.IDLE and host.answers == []
        assert w.unreported_restart == StepReply([])  # for the next step or rollout to report
    finally:
        host.close()


@pytest.mark.parametrize(
    ("command", "answered"),
    [(Command.STEP, StepReply), (Command.ROLLOUT, RestartedRollout), (Command.RESET, None), (Command.CALL, None)],
)
def test_an_unreported_restart_answers_the_next_step_or_rollout(
    clock: FakeClock, command: Command, answered: type | None
) -> None:
    host = _host(clock, [hello(2), StepReply([(0, {"seed": 18})])])
    restarter = _restarter(host)
    w = _worker_owing(None)
    try:
        assert restarter.replace(host, w) is None
        reset = w.unreported_restart
        owed = OwedCall(9, "call", True, command, Sent(command, 9, None))
        assert restarter.report(host, w, owed) is (answered is not None)
        if answered is None:  # sent as usual; a reset makes the restart moot, a call leaves it
            assert host.answers == [] and w.status is WorkerStatus.IDLE
            assert w.unreported_restart is (None if command is Command.RESET else reset)
            return
        ((index, call_id, ok, result),) = host.answers
        assert (index, call_id, ok, type(result)) == (1, 9, True, answered)
        assert w.status is WorkerStatus.READY and w.unreported_restart is None
        if command is Command.ROLLOUT:
            assert result.reset is reset
        else:
            assert result.infos == [(0, {"seed": 18, RESTART_INFO_KEY: True}), (1, {RESTART_INFO_KEY: True})]
            assert host.buffers is not None and host.buffers.truncations[2:4].all()
    finally:
        host.close()


@pytest.mark.parametrize("mask", [None, [True, True], [True, False]], ids=["unmasked", "all", "partial"])
def test_an_unreported_restart_is_reported_by_a_reset_that_leaves_envs_alone(
    clock: FakeClock, mask: list[bool] | None
) -> None:
    host = _host(clock, [hello(2), StepReply([])])
    restarter = _restarter(host)
    w = _worker_owing(None)
    try:
        assert restarter.replace(host, w) is None
        args = ResetArgs([1, 2], None, None if mask is None else np.array(mask))
        owed = OwedCall(9, "reset", True, Command.RESET, Sent(Command.RESET, 9, args), args)
        assert restarter.report(host, w, owed) is False  # sent as usual
        assert w.unreported_restart is None
        assert w.restarted_reset == (9 if mask == [True, False] else None)
    finally:
        host.close()


def test_a_transport_that_cannot_relaunch_gives_its_refusal(clock: FakeClock) -> None:
    host = _host(clock, [], can_relaunch=False)
    restarter = _restarter(host)
    w = _worker_owing(Command.STEP)
    try:
        assert restarter.replace(host, w) == "FakeTransport cannot restart workers"
        assert host.sent == [] and host.gathers == [] and host.transport.launches == [0, 1, 2]
    finally:
        host.close()


def test_a_replacement_that_cannot_be_started_gives_why(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting the new process fails (no descriptors left, the current directory removed):
    the pool breaks with the reason, instead of that error escaping the call."""
    host = _host(clock, [])
    restarter = _restarter(host)
    w = _worker_owing(Command.STEP)

    def fails(worker: int) -> None:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(host.transport, "relaunch", fails)
    try:
        refusal = restarter.replace(host, w)
        assert refusal == "its replacement could not be started: FileNotFoundError: [Errno 2] No such file or directory"
    finally:
        host.close()


def test_the_budget_refuses_restarts_past_max_restarts_until_the_window_moves(clock: FakeClock) -> None:
    host = _host(clock, [hello(2), StepReply([])] * 2)
    restarter = _restarter(host, max_restarts=1)
    try:
        assert restarter.replace(host, _worker_owing(None)) is None
        clock.advance(59.0)
        assert restarter.replace(host, _worker_owing(None)) == "1 restarts within 60 s already (max_restarts=1)"
        clock.advance(2.0)
        assert restarter.replace(host, _worker_owing(None)) is None
        assert restarter.restarts == 2
    finally:
        host.close()


@pytest.mark.parametrize("lost", [LostAgain(), WorkerGone(1)], ids=["died-again", "gone"])
def test_a_worker_lost_while_rebuilt_is_rebuilt_again_and_counts(clock: FakeClock, lost: Exception) -> None:
    host = _host(clock, [lost, hello(2), StepReply([])])
    restarter = _restarter(host, max_restarts=2)
    w = _worker_owing(Command.STEP)
    try:
        assert restarter.replace(host, w) is None
        assert host.transport.launches == [0, 1, 2, 1, 1] and restarter.restarts == 2
        assert [call_id for _, call_id, _, _ in host.answers] == [7]  # the step owed before the first death
    finally:
        host.close()


def test_lost_again_past_the_budget_is_refused(clock: FakeClock) -> None:
    host = _host(clock, [LostAgain(), LostAgain()])
    restarter = _restarter(host, max_restarts=2)
    try:
        assert restarter.replace(host, _worker_owing(Command.STEP)) == "2 restarts within 60 s already (max_restarts=2)"
        assert restarter.restarts == 2 and restarter.active is False
    finally:
        host.close()


@pytest.mark.parametrize("left, bound", [(1.5, 1.5), (9.0, 5.0), (None, 5.0)], ids=["call", "start", "no-call-limit"])
def test_a_rebuild_is_bounded_by_the_calls_timeout_too(clock: FakeClock, left: float | None, bound: float) -> None:
    """The call that found the death waits at most its own timeout: the rebuild gets what is
    left of it when that ends before start_timeout (5 s here), and says which bound it hit."""
    host = _host(clock, [hello(2), StepReply([])])
    restarter = _restarter(host)
    try:
        deadline = None if left is None else clock.monotonic() + left
        assert restarter.replace(host, _worker_owing(Command.STEP), deadline) is None
        assert [g[1] for g in host.gathers] == [bound, bound]  # the handshake and the reset
    finally:
        host.close()
    host = _host(clock, [VecEnvTimeoutError("late")])
    restarter = _restarter(host)
    try:
        deadline = None if left is None else clock.monotonic() + left
        refusal = restarter.replace(host, _worker_owing(Command.STEP), deadline)
        why = "what was left of the call's timeout" if bound == left else "start_timeout (5.0 s)"
        assert refusal == f"its replacement took longer than {why} to start"
    finally:
        host.close()


def test_nothing_is_restarted_once_close_from_another_thread_ends_the_workers(clock: FakeClock) -> None:
    host = _host(clock, [hello(2), StepReply([])])
    restarter = _restarter(host)
    host.ending = True
    try:
        assert restarter.replace(host, _worker_owing(Command.STEP)) == (
            "the vector env was closed from another thread meanwhile"
        )
        assert restarter.restarts == 0 and host.gathers == []
    finally:
        host.close()


@pytest.mark.parametrize(
    "replies, refusal",
    [
        ([hello(3)], "its rebuilt group has 3 envs instead of 2"),
        ([VecEnvTimeoutError("late")], "its replacement took longer than start_timeout (5.0 s) to start"),
        ([hello(2), ValueError("reset broke")], "rebuilding its envs raised ValueError: reset broke"),
    ],
    ids=["wrong-size", "timeout", "raises"],
)
def test_a_rebuild_that_fails_gives_why(clock: FakeClock, replies: list[Any], refusal: str) -> None:
    host = _host(clock, replies)
    restarter = _restarter(host)
    try:
        assert restarter.replace(host, _worker_owing(Command.STEP)) == refusal
        assert host.transport.killed == (1 if "longer" in refusal else 0)  # a stuck start is ended
        assert restarter.active is False
    finally:
        host.close()


def test_a_worker_gone_before_its_call_is_sent_again_is_reported_dead(clock: FakeClock) -> None:
    host = _host(clock, [hello(2), StepReply([])])
    restarter = _restarter(host)

    def gone(worker: int, message: Any, timeout: float | None = None) -> None:
        raise WorkerGone(worker)

    host.transport.send = gone  # type: ignore[method-assign]
    try:
        assert restarter.replace(host, _worker_owing(Command.CALL, CallArgs("x", (), {}), "call")) is None
        assert host.deaths == [(1, "call")]
    finally:
        host.close()


# -- the pool and the restarter together, on the fake transport -----------------------------------


def _restarting_pool(clock: FakeClock, max_restarts: int = 2, **kwargs: Any) -> tuple[WorkerPool, FakeTransport]:
    transport = FakeTransport(clock, **kwargs)
    restarter = Restarter(RestartPolicy(max_restarts, 60.0, _seeds(10, 11, 12, 13), timeout=5.0))
    pool = WorkerPool(transport, [lambda: 2, lambda: 2], restarter)
    pool.attach(
        [h.num_envs for h in pool.hellos(None)],
        BufferSpec.plan(4, OBS_SPACE, ACT_SPACE, False),
        AutoresetMode.NEXT_STEP,
    )
    return pool, transport


def test_pool_answers_a_step_that_saw_the_death_with_the_restarted_envs(clock: FakeClock) -> None:
    pool, transport = _restarting_pool(clock)
    try:
        transport.hold(1)
        pool.send(pool.workers, Command.STEP, [None, None], "step")
        transport.die(1)
        replies = pool.gather(pool.workers, None, "step")
        assert replies == [StepReply([]), StepReply([(0, {RESTART_INFO_KEY: True}), (1, {RESTART_INFO_KEY: True})])]
        assert pool.broken is None and pool.restarts == 1 and transport.launches == [0, 1, 1]
        assert transport.commands(1) == [Command.STEP, Command.RESET]
        assert transport.sent[-1] == (1, Sent(Command.RESET, 3, ResetArgs([16, 17], None, None)))
        assert pool.buffers is not None and pool.buffers.truncations.tolist() == [False, False, True, True]
        assert [w.status for w in pool.workers] == [WorkerStatus.IDLE] * 2
    finally:
        pool.shutdown(0.0, wait_late=False)


@pytest.mark.parametrize("workers", [2, 3])
def test_pool_answers_a_step_whose_reply_came_with_the_death_as_the_restarted_step(
    clock: FakeClock, workers: int
) -> None:
    """The last worker answers its step, then dies, and one wait finds both: its envs are gone
    and the replacement's reset rewrote their rows, so the step reports them restarted (the
    reply was lost in the restart: one reply too few, or an internal KeyError)."""
    transport = FakeTransport(clock)
    transport.batches = True
    restarter = Restarter(RestartPolicy(2, 60.0, _seeds(*range(10, 10 + 2 * workers)), timeout=5.0))
    pool = WorkerPool(transport, [lambda: 2] * workers, restarter)
    try:
        pool.attach(
            [h.num_envs for h in pool.hellos(None)],
            BufferSpec.plan(2 * workers, OBS_SPACE, ACT_SPACE, False),
            AutoresetMode.NEXT_STEP,
        )
        pool.send(pool.workers, Command.STEP, [None] * workers, "step")
        last = workers - 1
        transport.die(last)  # after its reply, in the same poll
        replies = pool.gather(pool.workers, None, "step")
        restarted = StepReply([(0, {RESTART_INFO_KEY: True}), (1, {RESTART_INFO_KEY: True})])
        assert replies == [StepReply([])] * last + [restarted]
        assert pool.broken is None and pool.restarts == 1
        assert pool.buffers is not None
        assert pool.buffers.truncations.tolist() == [False] * 2 * last + [True, True]
        assert [w.status for w in pool.workers] == [WorkerStatus.IDLE] * workers
        assert pool.workers[last].unreported_restart is None  # reported now, not at the next step
    finally:
        pool.shutdown(0.0, wait_late=False)


def test_workers_found_dead_together_are_restarted_in_worker_order(clock: FakeClock) -> None:
    """Workers 0 and 2 die together and one wait finds both, worker 2's death first (its
    sentinel woke before worker 0's pipe closed): the restarts are numbered by worker, not by
    which death the transport noticed first, so each group's reseed is the same on every rerun
    of that crash (worker 2 was restarted first, and worker 0 got the 2nd restart's seeds)."""
    transport = FakeTransport(clock)
    transport.batches = True
    restarter = Restarter(RestartPolicy(3, 60.0, _seeds(*range(10, 16)), timeout=5.0))
    pool = WorkerPool(transport, [lambda: 2] * 3, restarter)
    try:
        pool.attach(
            [h.num_envs for h in pool.hellos(None)],
            BufferSpec.plan(6, OBS_SPACE, ACT_SPACE, False),
            AutoresetMode.NEXT_STEP,
        )
        transport.hold(0)
        transport.hold(2)
        pool.send(pool.workers, Command.STEP, [None] * 3, "step")
        transport.die(2)
        transport.die(0)  # in the same poll, after worker 2's death
        pool.gather(pool.workers, None, "step")
        assert pool.broken is None and pool.restarts == 2
        assert transport.launches == [0, 1, 2, 0, 2]
        resets = [(w, sent.payload) for w, sent in transport.sent if sent.command is Command.RESET]
        # seed + restart * num_envs: worker 0's envs at the 1st restart, worker 2's at the 2nd
        assert resets == [(0, ResetArgs([16, 17], None, None)), (2, ResetArgs([26, 27], None, None))]
    finally:
        pool.shutdown(0.0, wait_late=False)


def test_pool_marks_the_reply_to_a_reset_sent_again(clock: FakeClock) -> None:
    pool, transport = _restarting_pool(clock)
    try:
        transport.respond = lambda w, s: (True, StepReply([(1, {"seed": s.payload.seeds[1]})]))
        transport.hold(1)
        args = [ResetArgs([5, 6], None, None), ResetArgs([7, 8], None, None)]
        pool.send(pool.workers, Command.RESET, args, "reset")
        transport.die(1)
        replies = pool.gather(pool.workers, None, "reset")
        assert replies[0] == StepReply([(1, {"seed": 6})])  # not restarted: not marked
        assert replies[1] == StepReply([(0, {RESTART_INFO_KEY: True}), (1, {"seed": 8, RESTART_INFO_KEY: True})])
        assert transport.sent[-1] == (1, Sent(Command.RESET, 2, args[1]))  # the same call, sent again
        assert pool.workers[1].restarted_reset is None
    finally:
        pool.shutdown(0.0, wait_late=False)


def test_pool_breaks_once_the_budget_is_spent(clock: FakeClock) -> None:
    pool, transport = _restarting_pool(clock, max_restarts=1)
    try:
        for attempt in range(2):
            transport.hold(1)
            pool.send(pool.workers, Command.STEP, [None, None], "step")
            transport.die(1)
            if attempt == 0:
                pool.gather(pool.workers, None, "step")
        with pytest.raises(WorkerDiedError) as excinfo:
            pool.gather(pool.workers, None, "step")
        assert str(excinfo.value) == (
            "worker 1 (envs 2..3 on the fake node) was killed by signal SIGKILL during `step`; "
            "1 restarts within 60 s already (max_restarts=1); the vector env is unusable, close it and make a new one"
        )
        assert pool.restarts == 1 and transport.killed == 1
    finally:
        pool.shutdown(0.0, wait_late=False)


def test_pool_breaks_with_the_transports_refusal(clock: FakeClock) -> None:
    pool, transport = _restarting_pool(clock, can_relaunch=False)
    try:
        transport.hold(0)
        pool.send(pool.workers, Command.STEP, [None, None], "step")
        transport.die(0)
        with pytest.raises(WorkerDiedError, match="during `step`; FakeTransport cannot restart workers; the vector"):
            pool.gather(pool.workers, None, "step")
    finally:
        pool.shutdown(0.0, wait_late=False)


def test_pool_never_restarts_a_worker_that_dies_while_it_is_shut_down(clock: FakeClock) -> None:
    pool, transport = _restarting_pool(clock)
    assert pool.phase is PoolPhase.RUNNING
    transport.dead.add(1)  # gone without a word: the polite close's send finds out
    assert pool.shutdown(5.0, wait_late=False) is None
    assert pool.phase is PoolPhase.CLOSING
    assert transport.launches == [0, 1] and pool.restarts == 0
    assert pool.broken is not None and "worker 1" in str(pool.broken)
    assert transport.commands(0) == [Command.CLOSE] and transport.commands(1) == []


def test_pool_never_restarts_a_worker_that_dies_starting(clock: FakeClock) -> None:
    transport = FakeTransport(clock)
    restarter = Restarter(RestartPolicy(2, 60.0, _seeds(1, 2), timeout=5.0))
    pool = WorkerPool(transport, [lambda: 1, lambda: 1], restarter)
    transport.queue.clear()
    transport.die(1)
    with pytest.raises(WorkerDiedError, match="during `__init__`; the vector env was not made"):
        pool.hellos(None)
    assert transport.launches == [0, 1] and pool.restarts == 0
    assert pool.phase is PoolPhase.STARTING
