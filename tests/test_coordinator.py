"""The coordinator's options beyond SyncVectorEnv's: native vectorized groups, CPU pinning,
``make("module:ID")``, and argument checks at construction."""

from __future__ import annotations

import functools
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.envs import DiffEnv, diff_env_fns
from tests.test_differential import assert_same
from vecenv import SubprocVectorEnv


def _sync_group(indices: list[int], mode: AutoresetMode) -> gym.vector.VectorEnv:
    """A native vectorized group: a SyncVectorEnv over DiffEnvs with global indices."""
    return SyncVectorEnv([functools.partial(DiffEnv, index=i) for i in indices], autoreset_mode=mode)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next", "same"])
def test_native_groups_match_one_sync_vector_env(mode: AutoresetMode) -> None:
    """Groups that are VectorEnvs give what one SyncVectorEnv over all envs gives, infos included."""
    groups = [functools.partial(_sync_group, [0, 1, 2], mode), functools.partial(_sync_group, [3, 4], mode)]
    sync = SyncVectorEnv(diff_env_fns(5), autoreset_mode=mode)
    rng = np.random.default_rng(7)
    try:
        with SubprocVectorEnv.from_groups(groups, autoreset_mode=mode, context="fork") as sub:
            assert sub.num_envs == 5 and sub.num_workers == 2
            assert_same(sub.reset(seed=11), sync.reset(seed=11))
            ended = 0
            for t in range(150):
                actions = rng.integers(0, sub.single_action_space.n, size=5)
                got, want = sub.step(actions), sync.step(actions)
                assert_same(got, want, f"step {t}")
                ended += int(np.sum(want[2] | want[3]))
            assert ended > 5, "episodes should end (and autoreset) during the run"
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_native_cartpole_groups_match_their_standalone_twins() -> None:
    make = functools.partial(gym.make_vec, "CartPole-v1", vectorization_mode="vector_entry_point")
    twins = [make(3), make(2)]
    try:
        with SubprocVectorEnv.from_groups([functools.partial(make, 3), functools.partial(make, 2)]) as sub:
            obs, _ = sub.reset(seed=5)
            # A native group is seeded with its first env's seed (the int form).
            expected = np.concatenate([twins[0].reset(seed=5)[0], twins[1].reset(seed=8)[0]])
            np.testing.assert_array_equal(obs, expected)
            for t in range(300):
                actions = np.full(5, t % 2, dtype=np.int64)
                got = sub.step(actions)
                parts = [twins[0].step(actions[:3]), twins[1].step(actions[3:])]
                for k in range(4):
                    want = np.concatenate([parts[0][k], parts[1][k]])
                    assert np.array_equal(got[k], want), (t, k)
                    # Rewards are float64 in every vecenv (CartPoleVectorEnv's are float32).
                    assert got[k].dtype == (np.float64 if k == 1 else want.dtype), (t, k)
    finally:
        for twin in twins:
            twin.close()


@pytest.mark.timeout(60)
def test_native_group_with_another_autoreset_mode_is_refused() -> None:
    group = functools.partial(_sync_group, [0, 1], AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match="autoreset_mode"):
        SubprocVectorEnv.from_groups([group], autoreset_mode=AutoresetMode.NEXT_STEP, context="fork")


class _AffinityEnv(DiffEnv):
    def cpus(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))


@pytest.mark.timeout(60)
def test_pin_cpus_pins_each_worker_to_one_core() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    fns = [functools.partial(_AffinityEnv, index=i) for i in range(4)]
    with SubprocVectorEnv(fns, 2, pin_cpus=True, context="fork") as sub:
        got = sub.call("cpus")
    expected = [[cpus[0]], [cpus[0]], [cpus[1 % len(cpus)]], [cpus[1 % len(cpus)]]]
    assert list(got) == expected
    with SubprocVectorEnv(fns, 2, context="fork") as sub:
        assert all(c == cpus for c in sub.call("cpus"))  # not pinned by default


@pytest.mark.timeout(60)
def test_make_module_id_imports_the_module_in_spawned_workers() -> None:
    """'module:ID' must reach the workers whole: a spawned worker imports the module itself."""
    with vecenv.make("tests.rollout_envs:RolloutCounter-v0", 2, 2, context="spawn") as envs:
        obs, _ = envs.reset(seed=0)
        assert envs.spec is not None and envs.spec.id == "RolloutCounter-v0"
        assert obs.shape[0] == 2


@pytest.mark.timeout(30)
def test_make_unknown_id_suggests_close_matches() -> None:
    with pytest.raises(gym.error.NameNotFound, match="CartPole-v1"):
        vecenv.make("CartPole-v2", 2)


@pytest.mark.timeout(60)
def test_env_fns_may_be_any_iterable() -> None:
    with SubprocVectorEnv((fn for fn in diff_env_fns(3)), 2, context="fork") as sub:
        assert sub.num_envs == 3


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"autoreset_mode": "Sometimes"}, "autoreset_mode"),
        ({"context": "teleport"}, "context"),
        ({"batch_size": 3}, "batch_size"),
    ],
    ids=["autoreset_mode", "context", "batch_size"],
)
@pytest.mark.timeout(60)
def test_bad_constructor_arguments_name_themselves(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=f"`{argument}`") as excinfo:
        SubprocVectorEnv(diff_env_fns(4), 2, **kwargs)
    assert repr(list(kwargs.values())[0]) in str(excinfo.value)  # the received value


@pytest.mark.timeout(60)
def test_disabled_autoreset_refuses_to_step_ended_envs_and_names_them() -> None:
    fns = [functools.partial(DiffEnv, index=i, p_term=1.0 if i else 0.0, p_trunc=0.0) for i in range(3)]
    sync = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
    actions = np.zeros(3, dtype=np.int64)
    try:
        with SubprocVectorEnv(fns, 2, autoreset_mode=AutoresetMode.DISABLED, context="fork") as sub:
            assert_same(sub.reset(seed=3), sync.reset(seed=3))
            first = sub.step(actions)
            assert_same(first, sync.step(actions))
            assert first[2].tolist() == [False, True, True]
            with pytest.raises(vecenv.NeedsResetError, match=r"envs \[1, 2\]"):
                sub.step(actions)
            mask = np.array([False, True, False])
            options = {"reset_mask": mask}
            assert_same(sub.reset(seed=9, options=dict(options)), sync.reset(seed=9, options=dict(options)))
            with pytest.raises(vecenv.NeedsResetError, match=r"envs \[2\]"):
                sub.step(actions)
            options = {"reset_mask": np.array([False, False, True])}
            assert_same(sub.reset(options=dict(options)), sync.reset(options=dict(options)))
            assert_same(sub.step(actions), sync.step(actions))  # nothing was lost on the way
    finally:
        sync.close()


# -- the parent's own group (inline_group, num_workers=0) ----------------------------------------


@pytest.mark.timeout(60)
def test_num_workers_zero_starts_no_process() -> None:
    import multiprocessing

    fns = diff_env_fns(4)
    sync = SyncVectorEnv(fns)
    try:
        with SubprocVectorEnv(fns, 0) as sub:
            assert multiprocessing.active_children() == []
            assert sub.num_workers == 1 and sub._pool.transport.pids == [None]
            assert_same(sub.reset(seed=3), sync.reset(seed=3))
            actions = np.zeros(4, dtype=np.int64)
            assert_same(sub.step(actions), sync.step(actions))
    finally:
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("target", [0, 3], ids=["inline-env", "worker-env"])
def test_inline_group_env_errors_surface_as_any_env_error(target: int) -> None:
    """An env of the parent's group raising in step: its own type, the remote-style traceback as
    cause, a note naming the env; the vector env stays usable after a reset."""
    from tests.crash_envs import fault_fns

    fns = fault_fns(4, "raise", "step", target, at=2)
    with SubprocVectorEnv(fns, 2, inline_group=True) as sub:
        assert sub._pool.transport.pids[0] is None and sub._pool.transport.pids[1] is not None
        sub.reset(seed=0)
        actions = np.zeros((4, 2), dtype=np.float32)
        sub.step(actions)
        with pytest.raises(ValueError, match=f"env {target}") as excinfo:
            sub.step(actions)
        assert isinstance(excinfo.value.__cause__, vecenv.errors.RemoteTraceback)
        assert any(f"env {target} (worker {target // 2})" in note for note in excinfo.value.__notes__)
        with pytest.raises(vecenv.NeedsResetError):
            sub.step(actions)
        sub.reset(seed=1)
        sub.step(actions)  # usable again (the fault fires once)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_threads_per_worker_limits_workers_only(start_method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.envs import ThreadVarsEnv

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with SubprocVectorEnv([ThreadVarsEnv] * 2, 2, context=start_method) as sub:
        assert sub.call("thread_vars") == (("1", "1"), ("1", "1"))  # one thread by default
    with SubprocVectorEnv([ThreadVarsEnv] * 2, 2, context=start_method, threads_per_worker=None) as sub:
        assert sub.call("thread_vars") == ((None, None), (None, None))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's setting wins
    with SubprocVectorEnv([ThreadVarsEnv] * 2, 2, context=start_method, threads_per_worker=2) as sub:
        assert sub.call("thread_vars") == (("3", "2"), ("3", "2"))
    assert os.environ.get("OPENBLAS_NUM_THREADS") is None  # the parent is never changed
    with pytest.raises(ValueError, match="threads_per_worker"):
        SubprocVectorEnv([ThreadVarsEnv] * 2, 2, threads_per_worker=0)
