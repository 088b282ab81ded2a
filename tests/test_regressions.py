"""Regression tests for issue 9: one test (or more) per defect 1-15, each failing on the engine
before the fix (commit b484bd9) and passing after it.

Each test names its defect (``test_dNN_...``). Where a test reads pool internals (pipes, pids) it
goes through :func:`_conns` / :func:`_pids`, which also know the pre-fix layout, so that on the old
engine a test fails for the defect it guards, not for a missing attribute. Nothing here sleeps to
synchronise: waits are on pipes (``Connection.poll``) or on the vector env's own calls.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import TransformObservation, TransformReward

import vecenv
from tests.conftest import start_methods
from tests.crash_envs import fault_fns, healthy_fns
from tests.regression_envs import (
    ActionRecorderEnv,
    BadObsEnv,
    BoundsEnv,
    HangupEnv,
    MarkerEnv,
    NoDeepcopyInfoEnv,
    PayEnv,
    UnloadableArg,
    UnloadableArgError,
    fns,
)
from tests.test_differential import assert_same
from vecenv import SubprocVectorEnv, VecEnvTimeoutError, WorkerDiedError
from vecenv.errors import RemoteTraceback

# -- helpers -------------------------------------------------------------------------------------


def _conns(envs: Any) -> list[Any]:
    """The parent's pipe ends, one per worker (the pool's, or the pre-fix ``_workers``')."""
    pool = getattr(envs, "_pool", None)
    if pool is not None:
        return list(pool.transport.conns)
    return [w.conn for w in envs._workers]


def _pids(envs: Any) -> list[int]:
    pool = getattr(envs, "_pool", None)
    if pool is not None:
        return list(pool.transport.pids)
    return [w.process.pid for w in envs._workers]


def _full_message(exc: BaseException) -> str:
    """The message and notes of an exception (the env index travels in a note)."""
    return "\n".join([str(exc), *getattr(exc, "__notes__", [])])


def _same_steps(sub: Any, sync: SyncVectorEnv, seed: int, actions: list[Any]) -> None:
    """Reset both with ``seed``, step both with each action batch: every result identical."""
    assert_same(sub.reset(seed=seed), sync.reset(seed=seed), "reset")
    for t, a in enumerate(actions):
        assert_same(sub.step(a), sync.step(a), f"step {t}")


def _lambda_wrapped_cartpole() -> gym.Env:
    """CleanRL's pattern: Gymnasium's function wrappers with lambdas (their spec holds them)."""
    env = gym.make("CartPole-v1")
    env = TransformObservation(env, lambda o: o * 2.0, env.observation_space)
    return TransformReward(env, lambda r: r + 1.0)


# -- 1. async batches with uneven groups ----------------------------------------------------------


@pytest.mark.timeout(60)
def test_d01_default_batch_is_every_env_with_uneven_groups() -> None:
    envs = vecenv.make("CartPole-v1", num_envs=10, num_workers=3)  # groups 4/3/3
    sync = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 10)
    try:
        envs.async_reset(seed=0)
        obs, rewards, terms, truncs, infos, ids = envs.recv(timeout=30)
        assert obs.shape == (10, 4) and rewards.shape == (10,) and len(ids) == 10
        assert sorted(ids.tolist()) == list(range(10))
        sync_obs, _ = sync.reset(seed=0)
        np.testing.assert_array_equal(obs, sync_obs[ids])
        actions = np.ones(10, np.int64)
        envs.send(actions[ids], ids)
        obs, rewards, terms, truncs, infos, ids = envs.recv(timeout=30)
        assert len(ids) == 10
        sync_obs, sync_rewards, *_ = sync.step(actions)
        np.testing.assert_array_equal(obs, sync_obs[ids])
        np.testing.assert_array_equal(rewards, sync_rewards[ids])
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
def test_d01_batch_size_that_groups_cannot_add_up_to_is_refused(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"batch_size.*\[4, 3, 3\]") as info:
        vecenv.make("CartPole-v1", num_envs=10, num_workers=3, batch_size=7)
    assert "7" in str(info.value)
    # At construction, before any env is built (each FaultEnv writes its pid file when built).
    with pytest.raises(ValueError, match=r"\[4, 3, 3\]"):
        SubprocVectorEnv(healthy_fns(10, pid_dir=str(tmp_path)), num_workers=3, batch_size=7)
    assert os.listdir(tmp_path) == []
    assert multiprocessing.active_children() == []


# -- 2. an argument the worker cannot unpickle ---------------------------------------------------


@pytest.mark.timeout(60)
@start_methods("fork", "spawn")
def test_d02_unloadable_argument_is_that_calls_error(start_method: str) -> None:
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
        _same_steps(envs, sync, 5, actions)
        assert envs.call("ping") == sync.call("ping")
    finally:
        envs.close()
        sync.close()


# -- 3. a wait on a hung-up pipe whose process lingers -------------------------------------------


@pytest.mark.timeout(60)
@start_methods("fork", "spawn")
def test_d03_hung_up_pipe_does_not_spin_or_overrun(start_method: str) -> None:
    envs = SubprocVectorEnv(fns(HangupEnv, 1), num_workers=1, context=start_method)
    try:
        envs.reset(seed=0)
        envs.call_async("hangup", 6.0)  # the process lingers 6 s after closing its pipe
        conn = _conns(envs)[0]
        assert conn.poll(20), "the worker never hung up"  # EOF is readable: the hang-up happened
        wall, cpu = time.monotonic(), time.process_time()
        with pytest.raises(WorkerDiedError):
            envs.call_wait(timeout=0.3)
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        # The worker can never answer: a death, reported quickly (a short grace to exit, then
        # killed), never a busy loop until the lingering thread ends.
        assert wall < 3.0, f"call_wait(timeout=0.3) took {wall:.2f} s"
        assert cpu < 0.5, f"the wait burned {cpu:.2f} s of CPU"
    finally:
        envs.close()


# -- 4. stale rewards after async_reset ----------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_d04_async_reset_reports_zero_rewards_and_clear_flags(mode: AutoresetMode) -> None:
    envs = SubprocVectorEnv(fns(PayEnv, 4, horizon=2), num_workers=2, autoreset_mode=mode)
    try:
        envs.async_reset(seed=0)
        *_, ids = envs.recv(timeout=30)
        for _ in range(2):
            envs.send(np.zeros(len(ids), np.int64), ids)
            _, rewards, terms, truncs, _, ids = envs.recv(timeout=30)
            assert (rewards == 7.0).all()
        assert truncs.all()  # the episodes ended on that step
        envs.async_reset(seed=1)
        _, rewards, terms, truncs, _, ids = envs.recv(timeout=30)
        assert sorted(ids.tolist()) == [0, 1, 2, 3]
        np.testing.assert_array_equal(rewards, np.zeros(4))
        assert not terms.any() and not truncs.any()
    finally:
        envs.close()


# -- 5. envs whose spec cannot be pickled --------------------------------------------------------


@pytest.mark.timeout(60)
def test_d05_wrappers_holding_lambdas_build_and_match_sync() -> None:
    envs = SubprocVectorEnv([_lambda_wrapped_cartpole] * 3, num_workers=2)
    sync = SyncVectorEnv([_lambda_wrapped_cartpole] * 3)
    try:
        assert envs.single_observation_space == sync.single_observation_space
        _same_steps(envs, sync, 3, [np.array([0, 1, 1])] * 5)
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
def test_d05_make_with_lambda_wrappers_sets_spec() -> None:
    def wrappers() -> list[Any]:
        return [
            lambda env: TransformReward(env, lambda r: 2.0 * r),
            lambda env: TransformObservation(env, lambda o: o + 1.0, env.observation_space),
        ]

    envs = vecenv.make("CartPole-v1", num_envs=3, num_workers=2, wrappers=wrappers())
    sync = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync", wrappers=wrappers())
    try:
        assert envs.spec is not None and envs.spec.id == "CartPole-v1"
        assert len(envs.spec.kwargs["wrappers"]) == 2
        _same_steps(envs, sync, 4, [np.array([1, 0, 1])] * 5)
    finally:
        envs.close()
        sync.close()


# -- 6. malformed observations -------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["reset", "step"])
@pytest.mark.parametrize("kind", ["box", "discrete"])
def test_d06_observation_that_does_not_fit_the_space_raises(kind: str, when: str) -> None:
    make = fns(BadObsEnv, 4, bad=3, kind=kind, when=when)
    expected = getattr(vecenv, "InvalidObservationError", (ValueError, TypeError))
    envs = SubprocVectorEnv(make, num_workers=2)
    sync = SyncVectorEnv(make)
    try:

        def run(v: Any) -> None:
            v.reset(seed=0)
            v.step(np.zeros(4, np.int64))

        with pytest.raises(expected) as info:
            run(envs)
        assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
        message = _full_message(info.value)
        assert "env 3" in message
        assert str(envs.single_observation_space) in message
        assert ("0.5" if kind == "box" else "1.5") in message
        with pytest.raises((ValueError, TypeError)):  # SyncVectorEnv refuses it too
            run(sync)
    finally:
        envs.close()
        sync.close()


# -- 7. bad input changes nothing ----------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "bad",
    [
        {"seed": -1},
        {"seed": [0, 1]},  # not one seed per env
        {"options": "x"},
        {"options": {"reset_mask": np.ones(4, np.bool_)}},  # async_reset resets every env
    ],
    ids=["seed=-1", "seed-count", "options-str", "reset_mask"],
)
def test_d07_bad_async_reset_keeps_the_envs_in_flight(bad: dict[str, Any]) -> None:
    envs = SubprocVectorEnv(healthy_fns(4), num_workers=2)
    sync = SyncVectorEnv(healthy_fns(4))
    try:
        envs.async_reset(seed=0)
        obs, *_, ids = envs.recv(timeout=30)
        sync_obs, _ = sync.reset(seed=0)
        np.testing.assert_array_equal(obs, sync_obs[ids])
        actions = np.full((4, 2), 0.5, np.float32)
        envs.send(actions[ids], ids)
        with pytest.raises((ValueError, TypeError)):
            envs.async_reset(**bad)
        obs, rewards, terms, truncs, _, ids = envs.recv(timeout=30)
        sync_obs, sync_rewards, sync_terms, sync_truncs, _ = sync.step(actions)
        assert sorted(ids.tolist()) == [0, 1, 2, 3]
        np.testing.assert_array_equal(obs, sync_obs[ids])
        np.testing.assert_array_equal(rewards, sync_rewards[ids])
        np.testing.assert_array_equal(terms, sync_terms[ids])
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("misuse", ["send_unknown_ids", "step_wrong_count", "reset_bad_mask"])
def test_d07_refused_input_leaves_state_as_it_was(misuse: str) -> None:
    """Guards for the rest of defect 7 (these already held before the fix; see the report)."""
    envs = SubprocVectorEnv(healthy_fns(4), num_workers=2)
    sync = SyncVectorEnv(healthy_fns(4))
    actions = np.full((4, 2), 0.25, np.float32)
    try:
        if misuse == "send_unknown_ids":
            envs.async_reset(seed=2)
            *_, ids = envs.recv(timeout=30)
            with pytest.raises(ValueError):
                envs.send(actions[:2], [0, 99])
            envs.send(actions[ids], ids)
            obs, rewards, *_, ids = envs.recv(timeout=30)
            sync.reset(seed=2)
            sync_obs, sync_rewards, *_ = sync.step(actions)
            np.testing.assert_array_equal(obs, sync_obs[ids])
            np.testing.assert_array_equal(rewards, sync_rewards[ids])
        elif misuse == "step_wrong_count":
            assert_same(envs.reset(seed=2), sync.reset(seed=2))
            with pytest.raises((ValueError, TypeError)):
                envs.step_async(actions[:3])
            assert_same(envs.step(actions), sync.step(actions))
        else:
            assert_same(envs.reset(seed=2), sync.reset(seed=2))
            with pytest.raises((ValueError, TypeError)):
                envs.reset(options={"reset_mask": np.array([True, False])})
            assert_same(envs.step(actions), sync.step(actions))
            mask = np.array([True, False, True, False])
            assert_same(
                envs.reset(seed=[3, None, 4, None], options={"reset_mask": mask}),
                sync.reset(seed=[3, None, 4, None], options={"reset_mask": mask}),
            )
    finally:
        envs.close()
        sync.close()


# -- 8. close() after a timed-out step whose reply has since arrived -----------------------------


@pytest.mark.timeout(60)
def test_d08_close_after_late_reply_closes_the_envs(tmp_path: Any) -> None:
    envs = SubprocVectorEnv(fns(MarkerEnv, 4, marker_dir=str(tmp_path), delay=0.5), num_workers=2)
    try:
        envs.reset(seed=0)
        envs.step_async(np.zeros(4, np.int64))
        with pytest.raises(VecEnvTimeoutError):
            envs.step_wait(timeout=0.1)  # every step sleeps 0.5 s
        for conn in _conns(envs):
            assert conn.poll(20), "the late reply never arrived"
    finally:
        envs.close()
    assert sorted(os.listdir(tmp_path)) == [f"closed-{i}" for i in range(4)]


# -- 9. every blocking call has a bound ----------------------------------------------------------


@pytest.mark.timeout(60)
@start_methods("fork", "spawn")
def test_d09_start_timeout_on_a_hanging_constructor(start_method: str) -> None:
    # Worker 0 hangs in its constructor; worker 1 is healthy.
    make = fault_fns(2, "hang", "init", target=0)
    start = time.monotonic()
    with pytest.raises(VecEnvTimeoutError):
        SubprocVectorEnv(make, num_workers=2, context=start_method, start_timeout=0.5)
    elapsed = time.monotonic() - start
    assert elapsed < 0.5 + 4.0, f"start_timeout=0.5 took {elapsed:.2f} s"
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["get_attr", "set_attr", "render", "step", "reset"])
def test_d09_blocking_calls_take_a_timeout(method: str) -> None:
    envs = SubprocVectorEnv(fault_fns(2, "hang", "call", target=0), num_workers=2)
    try:
        envs.reset(seed=0)
        if method != "get_attr":  # worker 0 is then stuck in `boom` for good
            envs.call_async("boom")
            with pytest.raises(VecEnvTimeoutError):
                envs.call_wait(timeout=0.1)
        calls = {
            "get_attr": lambda: envs.get_attr("boom", timeout=0.3),  # hangs in env 0
            "set_attr": lambda: envs.set_attr("scale", 2.0, timeout=0.3),
            "render": lambda: envs.render(timeout=0.3),
            "step": lambda: envs.step(np.zeros((2, 2), np.float32), timeout=0.3),
            "reset": lambda: envs.reset(seed=1, timeout=0.3),
        }
        start = time.monotonic()
        with pytest.raises(VecEnvTimeoutError):
            calls[method]()
        elapsed = time.monotonic() - start
        assert elapsed < 0.3 + 3.0, f"{method}(timeout=0.3) took {elapsed:.2f} s"
    finally:
        envs.close(terminate=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", [-1, "x"], ids=["negative", "str"])
def test_d09_bad_timeout_is_a_value_error_naming_it(bad: Any) -> None:
    with pytest.raises(ValueError, match="start_timeout"):
        SubprocVectorEnv(healthy_fns(2), num_workers=1, start_timeout=bad)
    envs = SubprocVectorEnv(healthy_fns(2), num_workers=2)
    try:
        envs.reset(seed=0)
        calls = [
            lambda: envs.get_attr("index", timeout=bad),
            lambda: envs.set_attr("index", 5, timeout=bad),
            lambda: envs.render(timeout=bad),
            lambda: envs.step(np.zeros((2, 2), np.float32), timeout=bad),
            lambda: envs.reset(seed=0, timeout=bad),
            lambda: envs.call_wait(timeout=bad),
            lambda: envs.step_wait(timeout=bad),
            lambda: envs.reset_wait(timeout=bad),
        ]
        for call in calls:
            with pytest.raises(ValueError, match="`timeout`"):
                call()
        assert envs.get_attr("index") == (0, 1)  # nothing was sent or changed
    finally:
        envs.close()


# -- 10. under fork, a second env's workers hold nothing of the first -----------------------------


def _memfd_mappings(pid: int | str) -> set[int]:
    """Inodes of the vecenv memfd blocks mapped in process ``pid``."""
    inodes = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/memfd:vecenv"):
                inodes.add(int(parts[4]))
    return inodes


def _fd_inodes(pid: int | str) -> dict[str, int]:
    """Every open descriptor of ``pid``: its link target -> inode (sockets and memfds)."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{fd}"
        try:
            link = os.readlink(path)
            found[f"{fd} -> {link}"] = os.stat(path).st_ino
        except OSError:
            pass
    return found


def _memfd_fds(pid: int | str) -> list[str]:
    return [k for k in _fd_inodes(pid) if "/memfd:vecenv" in k]


linux_only = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")


_MMAP_DUP = (
    "bug: Python's mmap.mmap(fd, size) keeps its own dup() of the memfd, so release_fd() closing "
    "the original leaves the parent holding a /memfd:vecenv descriptor (SharedBlock.create, "
    "vecenv/buffers.py), which a later fork hands to every worker of the next vector env"
)


@linux_only
@pytest.mark.timeout(60)
def test_d10_parent_holds_no_memfd_after_construction() -> None:
    before = _memfd_fds("self")
    envs = SubprocVectorEnv(healthy_fns(2), num_workers=2, context="fork")
    try:
        assert _memfd_mappings("self"), "the block should be a vecenv memfd mapped in the parent"
        assert _memfd_fds("self") == before
    finally:
        envs.close()


def _two_forked_envs(check: Any) -> None:
    """Build env A, then env B (both fork); ``check(pid, a_blocks, a_sockets)`` each B worker."""
    mapped_before = _memfd_mappings("self")
    a = SubprocVectorEnv(healthy_fns(2), num_workers=2, context="fork")
    b = None
    try:
        a_blocks = _memfd_mappings("self") - mapped_before
        assert a_blocks, "A's block should be a vecenv memfd mapped in the parent"
        a_sockets = {os.fstat(c.fileno()).st_ino for c in _conns(a)}
        b = SubprocVectorEnv(healthy_fns(2), num_workers=2, context="fork")
        for pid in _pids(b):
            check(pid, a_blocks, a_sockets)
    finally:
        if b is not None:
            b.close()
        a.close()


@linux_only
@pytest.mark.timeout(60)
def test_d10_second_env_workers_do_not_map_first_block() -> None:
    def check(pid: int, a_blocks: set[int], a_sockets: set[int]) -> None:
        assert not (_memfd_mappings(pid) & a_blocks), f"B's worker {pid} maps A's block"

    _two_forked_envs(check)


@linux_only
@pytest.mark.timeout(60)
def test_d10_second_env_workers_hold_no_pipe_end_of_first() -> None:
    def check(pid: int, a_blocks: set[int], a_sockets: set[int]) -> None:
        held = sorted(k for k, ino in _fd_inodes(pid).items() if "socket:" in k and ino in a_sockets)
        assert not held, f"B's worker {pid} holds A's pipe ends: {held}"

    _two_forked_envs(check)


@linux_only
@pytest.mark.timeout(60)
def test_d10_second_env_workers_hold_no_memfd_of_first() -> None:
    def check(pid: int, a_blocks: set[int], a_sockets: set[int]) -> None:
        held = sorted(k for k, ino in _fd_inodes(pid).items() if "/memfd:" in k and ino in a_blocks)
        assert not held, f"B's worker {pid} holds A's memfd: {held}"

    _two_forked_envs(check)


# -- 11. default num_workers follows the affinity mask -------------------------------------------


@pytest.mark.timeout(60)
def test_d11_default_num_workers_follows_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no sched_getaffinity here")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    envs = SubprocVectorEnv(healthy_fns(4))
    try:
        assert envs.num_workers == 1
    finally:
        envs.close()


# -- 12. SAME_STEP final_info with values that cannot be deep-copied ----------------------------


@pytest.mark.timeout(60)
def test_d12_same_step_final_info_without_deepcopy() -> None:
    make = fns(NoDeepcopyInfoEnv, 3)
    envs = SubprocVectorEnv(make, num_workers=2, autoreset_mode=AutoresetMode.SAME_STEP)
    sync = SyncVectorEnv(make, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        assert_same(envs.reset(seed=0), sync.reset(seed=0))
        seen = 0
        for t in range(7):
            a = np.zeros(3, np.int64)
            got, want = envs.step(a), sync.step(a)
            assert_same(got, want, f"step {t}")
            seen += int("final_info" in want[4])
        assert seen >= 3  # final infos holding the value were compared
    finally:
        envs.close()
        sync.close()


# -- 13. observation_mode ------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_d13_observation_mode_different_and_custom_match_sync() -> None:
    make = fns(BoundsEnv, 4)
    single = gym.spaces.Box(-5e6, 5e6, (2,), np.float32)
    custom = (gym.vector.utils.batch_space(single, 4), single)
    for mode in ("different", custom):
        envs = SubprocVectorEnv(make, num_workers=2, observation_mode=mode)
        sync = SyncVectorEnv(make, observation_mode=mode)
        try:
            assert envs.observation_space == sync.observation_space
            assert envs.single_observation_space == sync.single_observation_space
            _same_steps(envs, sync, 0, [np.ones(4, np.int64)] * 3)
        finally:
            envs.close()
            sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("explicit", [True, False], ids=["same", "default"])
def test_d13_same_mode_mismatch_points_to_different(explicit: bool) -> None:
    kwargs = {"observation_mode": "same"} if explicit else {}
    with pytest.raises(RuntimeError) as info:
        SubprocVectorEnv(fns(BoundsEnv, 4), num_workers=2, **kwargs)
    assert "observation_mode='different'" in str(info.value)
    with pytest.raises(RuntimeError, match="observation_mode='different'"):
        SyncVectorEnv(fns(BoundsEnv, 4), **kwargs)
    assert multiprocessing.active_children() == []


# -- 14. actions as Sync takes them --------------------------------------------------------------


@pytest.mark.timeout(60)
def test_d14_scalar_action_for_discrete_batch_is_a_type_error() -> None:
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
def test_d14_flat_action_batch_for_box1_reaches_envs_as_in_sync(dtype: Any) -> None:
    make = fns(ActionRecorderEnv, 3)
    envs = SubprocVectorEnv(make, num_workers=2)
    sync = SyncVectorEnv(make)
    try:
        actions = np.array([0.1, -0.2, 0.3], dtype)  # shape (n,), not (n, 1)
        _same_steps(envs, sync, 0, [actions, actions * 2])
        assert_same(envs.call("last_action"), sync.call("last_action"))
    finally:
        envs.close()
        sync.close()


# -- 15. close() with a call pending warns --------------------------------------------------------


@pytest.mark.timeout(60)
def test_d15_close_with_step_pending_warns() -> None:
    envs = SubprocVectorEnv(fns(PayEnv, 2), num_workers=2)
    envs.reset(seed=0)
    envs.step_async(np.zeros(2, np.int64))
    message = "Calling `close` while waiting for a pending call to `step` to complete."
    with pytest.warns(UserWarning, match=re.escape(message)):
        envs.close()
    assert envs.closed
