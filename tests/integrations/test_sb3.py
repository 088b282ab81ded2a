"""vecenv.sb3.SubprocVecEnv against Stable-Baselines3's own vector envs, array for array.

The references are SB3's ``DummyVecEnv`` (in-process, the definition of SB3's semantics) and,
where dtypes matter, SB3's own ``SubprocVecEnv``: same seeds and actions must give the same
observations, rewards, dones, infos (``terminal_observation``, ``TimeLimit.truncated`` and every
key the env sets, with the same Python types) and reset infos.

Skipped as a whole when SB3 (or torch) is not installed: install the ``sb3`` extra.
"""

from __future__ import annotations

import collections
import copy
import gc
import multiprocessing
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3", reason="needs the sb3 extra: pip install -e '.[sb3]'")

from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv  # noqa: E402
from stable_baselines3.common.vec_env import SubprocVecEnv as SB3SubprocVecEnv  # noqa: E402

import vecenv  # noqa: E402
from tests.conftest import start_methods  # noqa: E402
from tests.helpers.envs import InfoEnv, LooseEnv, Mark  # noqa: E402
from tests.helpers.faults import fault_fns, transport_of  # noqa: E402
from tests.helpers.threads import take_turns
from vecenv.sb3 import SubprocVecEnv  # noqa: E402

N_ENVS = 5


def info_fns(n: int = N_ENVS, **kwargs: Any) -> list:
    """Env constructors with different episode lengths, so envs end on different steps."""
    return [partial(InfoEnv, max_steps=4 + i % 3, **kwargs) for i in range(n)]


def assert_same(ours: Any, ref: Any, where: str, exact_types: bool = True) -> None:
    """Equal values, recursively; with ``exact_types`` the same types and dtypes too."""
    if exact_types:
        assert type(ours) is type(ref), f"{where}: type {type(ours)} != {type(ref)}"
    if isinstance(ref, dict):
        assert list(ours.keys()) == list(ref.keys()), f"{where}: keys {list(ours)} != {list(ref)}"
        for k in ref:
            assert_same(ours[k], ref[k], f"{where}[{k!r}]", exact_types)
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref), f"{where}: length {len(ours)} != {len(ref)}"
        for i, (a, b) in enumerate(zip(ours, ref)):
            assert_same(a, b, f"{where}[{i}]", exact_types)
    elif isinstance(ref, np.ndarray):
        if exact_types:
            assert ours.dtype == ref.dtype, f"{where}: dtype {ours.dtype} != {ref.dtype}"
        assert np.array_equal(ours, ref), f"{where}: {ours} != {ref}"
    else:
        assert ours == ref, f"{where}: {ours!r} != {ref!r}"


def assert_obs(ours: Any, ref: Any, where: str) -> None:
    """Observation batches: an array, or a dict of arrays (SB3's DummyVecEnv gives an OrderedDict)."""
    if isinstance(ref, dict):
        assert isinstance(ours, dict) and list(ours) == list(ref), where
        for k in ref:
            assert_same(ours[k], ref[k], f"{where}[{k!r}]")
    else:
        assert_same(ours, ref, where)


def run_differential(ours: VecEnv, ref: VecEnv, steps: int, seed: int | None, rewards_dtype_exact: bool) -> int:
    """Reset and step both with the same seeds and actions; returns the number of episode ends."""
    rng = np.random.default_rng(123)
    if seed is not None:
        assert ours.seed(seed) == ref.seed(seed)
    assert_obs(ours.reset(), ref.reset(), "reset obs")
    assert_same(list(ours.reset_infos), list(ref.reset_infos), "reset_infos")
    ends = 0
    for t in range(steps):
        actions = rng.integers(0, 3, size=ours.num_envs)
        obs, rewards, dones, infos = ours.step(actions)
        r_obs, r_rewards, r_dones, r_infos = ref.step(actions)
        where = f"step {t}"
        assert_obs(obs, r_obs, f"{where} obs")
        if rewards_dtype_exact:
            assert_same(rewards, r_rewards, f"{where} rewards")
        else:  # DummyVecEnv keeps rewards in float32, SB3's SubprocVecEnv (and we) in float64
            assert rewards.dtype == np.float64 and r_rewards.dtype == np.float32
            assert np.array_equal(rewards.astype(np.float32), r_rewards), f"{where} rewards"
        assert_same(dones, r_dones, f"{where} dones")
        assert isinstance(infos, list) and len(infos) == ours.num_envs
        assert_same(list(infos), list(r_infos), f"{where} infos")
        assert_same(list(ours.reset_infos), list(ref.reset_infos), f"{where} reset_infos")
        ends += int(dones.sum())
    return ends


@pytest.mark.timeout(120)
@start_methods("fork", "spawn")
@pytest.mark.parametrize("num_workers", [1, 2])
@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
def test_matches_dummy_vec_env(start_method: str, num_workers: int, dict_obs: bool) -> None:
    ours = SubprocVecEnv(info_fns(dict_obs=dict_obs), start_method=start_method, num_workers=num_workers)
    ref = DummyVecEnv(info_fns(dict_obs=dict_obs))
    try:
        assert ours.num_workers == num_workers
        assert ours.observation_space == ref.observation_space and ours.action_space == ref.action_space
        ends = run_differential(ours, ref, steps=40, seed=7, rewards_dtype_exact=False)
        assert ends >= 20  # both terminations and truncations happened many times
        # A second run without seeding continues both trajectories identically.
        ends = run_differential(ours, ref, steps=10, seed=None, rewards_dtype_exact=False)
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(60)
def test_nested_observation_spaces_come_batched_as_gymnasium_batches_them() -> None:
    """SB3's DummyVecEnv refuses a Dict or Tuple inside a Dict; the drop-in takes it, as SB3's
    SubprocVecEnv does, and gives Gymnasium's nested batch (docs/sb3.md says so)."""
    from gymnasium.vector.utils import concatenate, create_empty_array

    from tests.helpers.envs import DiffEnv

    fns = [partial(DiffEnv, i, obs_kind="dict") for i in range(3)]
    with pytest.raises(NotImplementedError, match="Nested observation spaces"):
        DummyVecEnv(fns)
    ours = SubprocVecEnv(fns, start_method="fork", num_workers=2)
    try:
        ours.seed(4)
        obs = ours.reset()
        envs = [fn() for fn in fns]
        space = envs[0].observation_space
        expected = concatenate(
            space, [env.reset(seed=4 + i)[0] for i, env in enumerate(envs)], create_empty_array(space, 3)
        )
        assert isinstance(obs["inner"], dict) and isinstance(obs["pair"], tuple)
        assert_same(obs, expected, "nested reset batch")
    finally:
        ours.close()


@pytest.mark.timeout(120)
def test_matches_sb3_subproc_vec_env_dtypes() -> None:
    """Against SB3's own SubprocVecEnv: float64 rewards, same infos, same terminal observations."""
    ours = SubprocVecEnv(info_fns(dict_obs=True), start_method="fork", num_workers=2)
    ref = SB3SubprocVecEnv(info_fns(dict_obs=True), start_method="fork")
    try:
        run_differential(ours, ref, steps=25, seed=11, rewards_dtype_exact=True)
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(120)
def test_vec_normalize_follows_sb3s_subproc_vec_env_bit_for_bit_and_dummy_vec_env_to_float32() -> None:
    """InfoEnv's rewards are Python floats: SB3's SubprocVecEnv and we keep them whole,
    DummyVecEnv rounds them into float32. VecNormalize keeps its return statistics in float64,
    so over us they are SubprocVecEnv's to the bit, and DummyVecEnv's only up to that rounding."""
    from stable_baselines3.common.vec_env import VecNormalize

    ours = VecNormalize(SubprocVecEnv(info_fns(), start_method="fork", num_workers=2), gamma=0.9)
    ref = VecNormalize(SB3SubprocVecEnv(info_fns(), start_method="fork"), gamma=0.9)
    dummy = VecNormalize(DummyVecEnv(info_fns()), gamma=0.9)
    try:
        for v in (ours, ref, dummy):
            v.seed(3)
        assert_same(ours.reset(), ref.reset(), "reset obs")
        dummy.reset()
        rng = np.random.default_rng(0)
        for t in range(30):
            actions = rng.integers(0, 3, size=N_ENVS)
            obs, rewards, dones, _ = ours.step(actions)
            r_obs, r_rewards, r_dones, _ = ref.step(actions)
            dummy.step(actions)
            assert_same(obs, r_obs, f"step {t} obs")
            assert_same(rewards, r_rewards, f"step {t} normalized rewards")
            assert_same(dones, r_dones, f"step {t} dones")
            original = ours.get_original_reward()
            assert_same(original, ref.get_original_reward(), f"step {t} rewards")
            assert np.array_equal(original.astype(np.float32), dummy.get_original_reward()), f"step {t}"
        for name in ("ret_rms", "obs_rms"):
            mine, theirs = getattr(ours, name), getattr(ref, name)
            assert np.array_equal(mine.mean, theirs.mean) and np.array_equal(mine.var, theirs.var), name
        assert not np.array_equal(ours.ret_rms.var, dummy.ret_rms.var)  # the rounding shows
    finally:
        ours.close()
        ref.close()
        dummy.close()


@pytest.mark.timeout(120)
def test_constructors_sharing_an_object_give_each_env_its_own_copy_as_sb3s_processes_do() -> None:
    """``[lambda: env] * n``, one env instance behind every constructor: each of SB3's processes
    has a copy of its own, and so must each env of a worker, not one instance stepped once per
    env on every step."""
    env = InfoEnv(max_steps=50)
    fns = [lambda: env] * 4
    ours = SubprocVecEnv(fns, start_method="fork", num_workers=2)
    ref = SB3SubprocVecEnv(fns, start_method="fork")
    try:
        run_differential(ours, ref, steps=12, seed=5, rewards_dtype_exact=True)
        assert ours.get_attr("resets") == list(ref.get_attr("resets"))
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(60)
def test_terminal_observation_and_time_limit_truncated() -> None:
    """CartPole under a TimeLimit: truncation sets TimeLimit.truncated, termination does not."""
    fns = [lambda: gym.make("CartPole-v1", max_episode_steps=12) for _ in range(4)]
    ours = SubprocVecEnv(fns, start_method="fork", num_workers=2)
    ref = DummyVecEnv(fns)
    try:
        ours.seed(0)
        ref.seed(0)
        assert_obs(ours.reset(), ref.reset(), "reset")
        seen = set()
        for t in range(60):
            actions = np.full(4, t % 2 if t < 30 else 1)  # balance a while, then fall
            obs, rewards, dones, infos = ours.step(actions)
            r_obs, r_rewards, r_dones, r_infos = ref.step(actions)
            assert_obs(obs, r_obs, f"step {t}")
            assert_same(dones, r_dones, f"step {t} dones")
            assert_same(infos, r_infos, f"step {t} infos")
            for done, info in zip(dones, infos):
                assert ("terminal_observation" in info) == done
                if done:
                    seen.add(info["TimeLimit.truncated"])
        assert seen == {True, False}
    finally:
        ours.close()
        ref.close()


class ReusedInfoEnv(gym.Env):
    """Returns one info dict of its own on every step, as some envs do: SB3 writes its keys
    into that dict, so an episode's ``"terminal_observation"`` is still in it on later steps.
    Even lengths end by truncation, odd ones by termination."""

    observation_space = gym.spaces.Box(-1e3, 1e3, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, length: int = 3) -> None:
        self.length = length
        self.t = 0
        self.info: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self.info["t"] = self.t
        ended = self.t >= self.length
        return self._obs(), float(action), ended and self.length % 2 == 1, ended and self.length % 2 == 0, self.info

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.np_random.uniform()], np.float32)


@pytest.mark.timeout(60)
def test_an_env_returning_one_info_dict_gets_sb3s_keys_written_into_it() -> None:
    """SB3's vector envs write ``"TimeLimit.truncated"`` and ``"terminal_observation"`` into the
    dict the env returned: an env that returns the same dict every step gives the last episode's
    terminal observation again on its next steps, under both of SB3's classes; so under ours."""
    fns = [partial(ReusedInfoEnv, 3), partial(ReusedInfoEnv, 4)]
    ours = SubprocVecEnv(fns, start_method="fork", num_workers=2)
    ref = DummyVecEnv(fns)
    stale = 0
    try:
        for vec in (ours, ref):
            vec.seed(2)
        assert_obs(ours.reset(), ref.reset(), "reset")
        for t in range(10):
            actions = np.array([t % 3, 2])
            obs, rewards, dones, infos = ours.step(actions)
            r_obs, r_rewards, r_dones, r_infos = ref.step(actions)
            assert_obs(obs, r_obs, f"step {t} obs")
            assert_same(dones, r_dones, f"step {t} dones")
            assert_same(infos, r_infos, f"step {t} infos")
            stale += sum("terminal_observation" in info and not done for info, done in zip(infos, dones))
        assert stale >= 4  # the kept keys were seen, after both a termination and a truncation
    finally:
        ours.close()
        ref.close()


class OneDictInfoEnv(InfoEnv):
    """An InfoEnv that returns its infos in one dict object, refilled by every step and reset
    (with ``shared``, one dict for every instance in the process, a class attribute)."""

    shared_info: dict[str, Any] = {}

    def __init__(self, shared: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.one_info = OneDictInfoEnv.shared_info if shared else {}

    def _refill(self, info: dict[str, Any]) -> dict[str, Any]:
        self.one_info.clear()
        self.one_info.update(info)
        return self.one_info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = super().reset(seed=seed, options=options)
        return obs, self._refill(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, self._refill(info)


class FreshInfos(gym.Wrapper):
    """Hands on each info as a dict of its own, taken when the env returns it."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        return obs, dict(info)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, dict(info)


def fresh_infos(env_fn: Any) -> gym.Env:
    """``env_fn``'s env in :class:`FreshInfos`: the infos SB3 reports for it, were its dicts its own."""
    return FreshInfos(env_fn())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shared", [False, True], ids=["one-dict-per-env", "one-dict-per-process"])
def test_an_env_refilling_one_info_dict_reports_each_calls_own_info(shared: bool) -> None:
    """An env that refills one info dict at every step and reset, or whose envs of a process
    share one: each env's info and reset info are those its own call returned, as for an env
    that returns fresh dicts, with every env in one worker. The step that ends an episode keeps
    its info and terminal observation though the autoreset refills the dict before the worker
    replies (SB3's own classes report the reset's info there, with no terminal observation)."""
    fns = [partial(OneDictInfoEnv, shared=shared, max_steps=3 + i) for i in range(3)]
    ours = SubprocVecEnv(fns, start_method="fork", num_workers=1)
    ref = DummyVecEnv([partial(fresh_infos, fn) for fn in fns])
    try:
        assert run_differential(ours, ref, steps=30, seed=5, rewards_dtype_exact=False) >= 6
    finally:
        ours.close()
        ref.close()


class InPlaceInfoEnv(InfoEnv):
    """An InfoEnv whose infos also hold one array of its own, which it updates in place (in an
    ``OrderedDict``, whose type SB3 keeps)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history = np.zeros(2)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        self.history[:] = (self.steps, int(action))
        return obs, reward, terminated, truncated, collections.OrderedDict(info, history=self.history)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_infos_keep_their_values_when_the_env_changes_what_they_hold_later(num_workers: int) -> None:
    """Each step's infos keep the values (and types) the env returned after the env changed an
    array they hold in place at its next steps, as SB3's classes keep them; with every env in
    this process (``num_workers=0``) too, where no pipe copies them."""
    fns = [partial(InPlaceInfoEnv, max_steps=4 + i) for i in range(3)]
    ours = SubprocVecEnv(fns, start_method="fork", num_workers=num_workers)
    ref = DummyVecEnv(fns)
    try:
        for vec in (ours, ref):
            vec.seed(3)
        assert_obs(ours.reset(), ref.reset(), "reset")
        kept, r_kept = [], []
        for t in range(12):
            actions = np.array([t % 3, 1, 2])
            kept.append(ours.step(actions)[3])
            r_kept.append(ref.step(actions)[3])
        assert_same(kept, r_kept, "the infos of every step, after the last step")
    finally:
        ours.close()
        ref.close()


@pytest.fixture
def pair():
    """Our vec env (3 envs, 2 workers) and a DummyVecEnv over the same constructors."""
    fns = [lambda: Monitor(InfoEnv()), lambda: InfoEnv(), lambda: Mark(InfoEnv())]
    ours = SubprocVecEnv(fns, start_method="fork", num_workers=2)
    ref = DummyVecEnv(fns)
    try:
        yield ours, ref
    finally:
        ours.close()
        ref.close()


INDICES = [None, 0, 2, -1, [0, 2], [2, 0], [-1, 0], [1, 1, 1], [2, 1, 2], [], range(3), (1, 2)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("indices", INDICES, ids=repr)
def test_indices_select_like_sb3(pair, indices: Any) -> None:
    ours, ref = pair
    ours.seed(3)
    ref.seed(3)
    ours.reset()
    ref.reset()
    actions = np.array([0, 1, 2])
    for _ in range(2):
        ours.step(actions)
        ref.step(actions)
    assert ours.env_method("scaled", 1.5, indices=indices, factor=2.0) == ref.env_method(
        "scaled", 1.5, indices=indices, factor=2.0
    )
    assert ours.get_attr("steps", indices=indices) == ref.get_attr("steps", indices=indices)
    assert ours.set_attr("label", "set", indices=indices) is None
    ref.set_attr("label", "set", indices=indices)
    assert ours.has_attr("label") == ref.has_attr("label")
    for i in range(3):  # set on the selected envs only, readable through get_wrapper_attr
        labels = []
        for vec in (ours, ref):
            try:
                labels.append(vec.get_attr("label", indices=i))
            except AttributeError:
                labels.append(None)
        assert labels[0] == labels[1], i
    assert ours.env_is_wrapped(Monitor, indices=indices) == ref.env_is_wrapped(Monitor, indices=indices)
    assert ours.env_is_wrapped(Mark, indices=indices) == ref.env_is_wrapped(Mark, indices=indices)


@pytest.mark.timeout(60)
def test_attributes_and_methods(pair) -> None:
    ours, ref = pair
    assert ours.env_is_wrapped(Monitor) == [True, False, False]
    assert ours.env_is_wrapped(Mark) == [False, False, True]
    assert not ours.has_attr("nope")
    ours.set_attr("nope", [1, 2], indices=[0, 1])
    assert not ours.has_attr("nope")
    ours.set_attr("nope", [1, 2], indices=2)
    assert ours.has_attr("nope")
    values = ours.get_attr("nope")
    assert values == [[1, 2]] * 3
    # Each env got its own copy, as with SB3's one-process-per-env pickling.
    ours.env_method("get_wrapper_attr", "nope", indices=0)[0].append(3)
    assert ours.get_attr("nope") == [[1, 2]] * 3
    # get_attr returns attributes, it does not call them (SB3 semantics)
    scaled = ours.get_attr("scaled", indices=1)[0]
    assert callable(scaled) and scaled(1.0) == 1.0
    # Unknown attributes raise AttributeError; bad indices raise like a list would
    with pytest.raises(AttributeError):
        ours.get_attr("missing")
    with pytest.raises(IndexError, match="out of range"):
        ours.get_attr("steps", indices=3)
    with pytest.raises(IndexError, match="out of range"):
        ours.env_method("scaled", 1.0, indices=[-4])
    with pytest.raises(TypeError, match="must be ints"):
        ours.get_attr("steps", indices=["0"])
    # The vec env still works after those errors.
    ours.reset()
    assert len(ours.step(np.zeros(3, dtype=np.int64))[3]) == 3


@pytest.mark.timeout(60)
def test_seed_and_options_apply_at_next_reset_once() -> None:
    ours = SubprocVecEnv(info_fns(3), start_method="fork", num_workers=2)
    ref = DummyVecEnv(info_fns(3))
    try:
        for vec in (ours, ref):
            assert vec.seed(5) == [5, 6, 7]
            vec.set_options({"level": 1})
        first = ours.reset()
        assert_obs(first, ref.reset(), "seeded reset")
        assert_same(ours.reset_infos, ref.reset_infos, "reset_infos with options")
        assert ours.get_attr("last_options") == [{"level": 1}] * 3
        # Used once: the next reset has neither seed nor options.
        second = ours.reset()
        ref.reset()
        assert not np.array_equal(first, second)
        assert ours.get_attr("last_options") == [None] * 3
        assert_same(ours.reset_infos, ref.reset_infos, "reset_infos without options")
        # Per-env options, one of them empty (SB3 then passes no options at all).
        options = [{"level": 2}, {}, {"level": 3, "mode": "hard"}]
        ours.set_options(options)
        ref.set_options(options)
        ours.seed(5)
        ref.seed(5)
        assert_obs(ours.reset(), ref.reset(), "reset with per-env options")
        assert ours.get_attr("last_options") == [{"level": 2}, None, {"level": 3, "mode": "hard"}]
        assert_same(ours.reset_infos, ref.reset_infos, "reset_infos per-env options")
        # Autoresets during steps never see options.
        run_differential(ours, ref, steps=12, seed=None, rewards_dtype_exact=False)
        assert ours.get_attr("last_options") == [None] * 3
        # More options than envs: SB3 reads env i's entry and no others.
        longer = [{"level": i} for i in range(5)]
        ours.set_options(longer)
        ref.set_options(longer)
        ours.seed(6)
        ref.seed(6)
        assert_obs(ours.reset(), ref.reset(), "reset with more options than envs")
        assert ours.get_attr("last_options") == longer[:3]
        assert_same(ours.reset_infos, ref.reset_infos, "reset_infos with more options than envs")
        # Fewer: SB3 raises IndexError; so does the drop-in, naming the counts.
        with pytest.raises(IndexError, match="an entry for each of the 3 envs, got 3 seeds and 1 options"):
            ours.set_options([{}])
            ours.reset()
    finally:
        ours.close()
        ref.close()


def loose_fns() -> list[Any]:
    """Four envs whose observation and action spaces differ from env 0's in bounds only."""
    return [partial(LooseEnv, i) for i in range(4)]


def run_loose_differential(ours: VecEnv) -> None:
    """``ours`` (on :func:`loose_fns`) against ``DummyVecEnv``: env 0's spaces, the same batches,
    each env handed its own action row (even one beyond env 0's bounds)."""
    ref = DummyVecEnv(loose_fns())
    try:
        assert ours.observation_space == ref.observation_space == LooseEnv(0).observation_space
        assert ours.action_space == ref.action_space == LooseEnv(0).action_space
        assert_obs(ours.reset(), ref.reset(), "reset obs")
        for t in range(3):
            actions = np.array([[0.5], [-1.5], [2.5], [-3.5]], np.float32) * (t + 1)
            obs, rewards, dones, infos = ours.step(actions)
            r_obs, r_rewards, r_dones, r_infos = ref.step(actions)
            assert_obs(obs, r_obs, f"step {t} obs")
            assert np.array_equal(rewards.astype(np.float32), r_rewards), f"step {t}: {rewards} != {r_rewards}"
            assert_same(dones, r_dones, f"step {t} dones")
            assert_same(list(infos), list(r_infos), f"step {t} infos")
        assert ours.get_attr("observation_space", [3]) == [LooseEnv(3).observation_space]
    finally:
        ref.close()


@pytest.mark.timeout(90)
@start_methods("fork", "spawn")
def test_spaces_whose_bounds_differ_from_env_0s_are_taken_as_sb3_takes_them(start_method: str) -> None:
    """SB3's vector envs take env 0's spaces and accept envs whose spaces differ in bounds only;
    so does the drop-in, with the same batches as ``DummyVecEnv``."""
    ours = SubprocVecEnv(loose_fns(), start_method=start_method, num_workers=2)
    try:
        run_loose_differential(ours)
    finally:
        ours.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("which", ["observation", "action"])
def test_spaces_of_another_shape_than_env_0s_are_refused_in_the_drop_ins_terms(which: str) -> None:
    """Observations and actions live in shared arrays of env 0's shape: an env whose space has
    another shape is refused at start, naming the env and both spaces, without advice to pass
    an option the drop-in does not take (SB3 would fail at the first step)."""

    def odd(index: int) -> gym.Env:
        env = LooseEnv(index, size=3 if index == 1 else 2)
        if which == "action":
            env = LooseEnv(index)
            env.action_space = gym.spaces.Box(-1.0, 1.0, (1 + (index == 1),), np.float32)
        return env

    fns = [partial(odd, i) for i in range(4)]
    with pytest.raises(vecenv.errors.SpaceMismatchError) as raised:
        SubprocVecEnv(fns, start_method="fork", num_workers=2)
    message = str(raised.value)
    expected = f"SubprocVecEnv needs every env's {which} space of the shape and dtype of env 0's"
    assert message.startswith(expected), message
    received = getattr(odd(1), f"{which}_space")
    assert f"env 1 has {received}" in message and "observation_mode" not in message


@pytest.mark.timeout(60)
def test_render_and_get_images() -> None:
    fns = info_fns(4, render_mode="rgb_array")
    ours = SubprocVecEnv(fns, start_method="fork", num_workers=2)
    ref = DummyVecEnv(fns)
    try:
        assert ours.render_mode == "rgb_array"
        ours.seed(1)
        ref.seed(1)
        ours.reset()
        ref.reset()
        for vec in (ours, ref):
            vec.step(np.ones(4, dtype=np.int64))
        assert_same(list(ours.get_images()), list(ref.get_images()), "images")
        assert_same(ours.render(), ref.render(), "tiled image")
        assert_same(ours.render(mode="rgb_array"), ref.render(mode="rgb_array"), "tiled image")
        with pytest.warns(UserWarning):
            assert ours.render(mode="something_else") is None
    finally:
        ours.close()
        ref.close()
    no_render = SubprocVecEnv(info_fns(2), start_method="fork", num_workers=1)
    try:
        with pytest.warns(UserWarning, match="render mode is None"):
            assert no_render.get_images() == [None, None]
    finally:
        no_render.close()


@pytest.mark.timeout(60)
def test_vec_video_recorder_takes_the_envs_frame_rate_as_over_sb3s_classes(monkeypatch, tmp_path) -> None:
    """SB3's VecVideoRecorder reads `render_fps` from SB3's own classes with `get_attr`, and from
    any other VecEnv from its `metadata`: the drop-in's holds env 0's keys beside SB3's own."""
    import types

    from stable_baselines3.common.vec_env import VecVideoRecorder

    # The recorder only checks that moviepy imports before anything is written; no video is made here.
    monkeypatch.setitem(sys.modules, "moviepy", sys.modules.get("moviepy") or types.ModuleType("moviepy"))
    fns = [partial(gym.make, "CartPole-v1", render_mode="rgb_array")] * 2
    ours = SubprocVecEnv(fns, start_method="fork", num_workers=1)
    ref = SB3SubprocVecEnv(fns, start_method="fork")
    try:
        assert ours.metadata["render_modes"] == ref.metadata["render_modes"] == ["human", "rgb_array"]
        assert ours.metadata["render_fps"] == 50
        rates = [
            VecVideoRecorder(vec, str(tmp_path / str(i)), lambda step: False).frames_per_sec
            for i, vec in enumerate((ours, ref))
        ]
        assert rates == [50, 50]
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(60)
def test_async_steps_close_and_errors() -> None:
    with pytest.raises(ValueError, match="cannot find context for 'illegal_method'"):
        SubprocVecEnv(info_fns(2), start_method="illegal_method")
    vec = SubprocVecEnv(info_fns(4), start_method="fork", num_workers=2)
    try:
        vec.reset()
        vec.step_async(np.zeros(4, dtype=np.int64))
        assert vec.waiting
        obs, rewards, dones, infos = vec.step_wait()
        assert not vec.waiting and obs.shape == (4, 3) and rewards.dtype == np.float64 and dones.dtype == bool
        vec.step_async(np.zeros(4, dtype=np.int64))  # closing with a step in flight is fine
    finally:
        vec.close()
    assert vec.closed
    vec.close()  # idempotent


@pytest.mark.timeout(60)
def test_close_with_a_step_in_flight_on_a_hung_env_returns() -> None:
    """SB3 collects the step in flight before closing, and waits forever for a hung env; the
    drop-in waits DEFAULT_CLOSE_TIMEOUT at most, then ends the worker stuck in it."""
    vec = SubprocVecEnv(fault_fns(4, "sleep", "step", 3, at=1, duration=120), start_method="fork", num_workers=2)
    vec.reset()
    vec.step_async(np.zeros((4, 2), dtype=np.float32))
    start = time.monotonic()
    vec.close()
    assert time.monotonic() - start < vecenv.DEFAULT_CLOSE_TIMEOUT + 5.0
    assert vec.closed and multiprocessing.active_children() == []


@pytest.mark.timeout(60)
def test_close_while_another_thread_waits_on_a_hung_env_returns() -> None:
    """close() from another thread while step_wait waits on a hung env (no timeout): it does
    not queue behind that wait; the vector env's close gives it the grace, then ends it."""

    vec = SubprocVecEnv(fault_fns(4, "hang", "step", 3), start_method="fork", num_workers=2)
    vec.reset()
    vec.step_async(np.zeros((4, 2), dtype=np.float32))
    outcome: list[BaseException | None] = []

    def waiter() -> None:
        try:
            vec.step_wait()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    lock, deadline = vec.vector_env.call_lock, time.monotonic() + 10
    while lock.holder() == "a call" and time.monotonic() < deadline:  # until step_wait holds it
        time.sleep(0.01)
    assert lock.holder() != "a call", "step_wait did not start in its thread"
    start = time.monotonic()
    vec.close()
    took = time.monotonic() - start
    thread.join(10)
    assert not thread.is_alive() and took < vecenv.DEFAULT_CLOSE_TIMEOUT + 5.0, took
    assert len(outcome) == 1 and isinstance(outcome[0], vecenv.WorkerDiedError), outcome
    assert vec.closed and multiprocessing.active_children() == []


@pytest.mark.timeout(90)
def test_threads_stepping_it_take_turns() -> None:
    """Two threads stepping the drop-in (SB3's ``step``: ``step_async`` then ``step_wait``) and
    one resetting it take turns, as over the core vector env: another thread's call between
    the two halves of a step used to be refused as a call already pending."""
    steps = 100
    vec = SubprocVecEnv(fault_fns(4, None, "step", 0, horizon=10 * steps), start_method="fork", num_workers=2)
    try:
        vec.reset()
        take_turns([lambda: vec.step(np.zeros((4, 2), np.float32))] * 2 + [vec.reset], steps)
        assert not vec.waiting
    finally:
        vec.close()


@pytest.mark.timeout(60)
def test_close_in_the_thread_of_a_running_step_closes_once_the_step_is_over() -> None:
    """close() while step() waits in the same thread (as from a signal handler): the step
    returns its results, and the close runs once it is over, as the core vector env's does."""
    vec = SubprocVecEnv(info_fns(4), start_method="fork", num_workers=2)
    vec.reset()
    transport = transport_of(vec.vector_env)
    wait = transport.poll

    def wait_then_close(*args: Any, **kwargs: Any) -> Any:
        del transport.poll  # once
        vec.close()  # inside step_wait's wait: the workers must stay until the step is over
        assert all(process is not None and process.is_alive() for process in transport.processes)
        return wait(*args, **kwargs)

    transport.poll = wait_then_close
    obs, rewards, dones, infos = vec.step(np.zeros(4, dtype=np.int64))
    assert obs.shape == (4, 3) and len(infos) == 4
    assert vec.closed and vec.vector_env.closed and multiprocessing.active_children() == []


class _DiesInResetWithOptions(InfoEnv):
    """Dies (SIGKILL) in a reset given options if it is the one that removes the marker file."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        if options:
            try:
                os.unlink(self.marker)  # one env of one worker takes it, whichever comes first
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().reset(seed=seed, options=options)


@pytest.mark.timeout(60)
def test_a_worker_restarted_in_a_reset_gives_its_new_envs_the_options_set(tmp_path: Any) -> None:
    """set_options, seed, then a reset during which a worker dies: its rebuilt envs are reset
    with their options and seeds too, as every other env, and say they were restarted."""
    marker = tmp_path / "die"
    fns = [partial(_DiesInResetWithOptions, str(marker))] * 4
    vec = SubprocVecEnv(fns, start_method="fork", num_workers=2, on_worker_death="restart")
    try:
        vec.reset()
        marker.touch()
        vec.set_options([{"level": j} for j in range(4)])
        vec.seed(100)
        vec.reset()
        assert not marker.exists() and vec.vector_env.restart_count == 1
        assert [info.get("options") for info in vec.reset_infos] == [{"level": j} for j in range(4)]
        assert [bool(info.get("worker_restarted")) for info in vec.reset_infos].count(True) == 2
        reference = DummyVecEnv([partial(InfoEnv)] * 4)
        reference.set_options([{"level": j} for j in range(4)])
        reference.seed(100)
        np.testing.assert_array_equal(vec.vector_env.reset(seed=[100, 101, 102, 103])[0], reference.reset())
    finally:
        vec.close()


@pytest.mark.timeout(60)
@start_methods("forkserver")
def test_default_start_method_is_sb3s(start_method: str) -> None:
    """Like SB3, the default is forkserver where available (fork is unsafe with torch threads)."""
    vec = SubprocVecEnv(info_fns(2), num_workers=1)
    try:
        assert vec.vector_env.start_method == start_method
        assert vec.reset().shape == (2, 3)
    finally:
        vec.close()


def test_import_vecenv_does_not_import_sb3() -> None:
    code = "import sys, vecenv; bad = {'stable_baselines3', 'torch'} & set(sys.modules); assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_copies_are_refused_by_name_and_the_original_goes_on(how: str) -> None:
    """A copy would share the workers (and close them when collected): NotCopyableError."""
    copier = {"pickle": pickle.dumps, "copy": copy.copy, "deepcopy": copy.deepcopy}[how]
    vec = SubprocVecEnv([lambda: gym.make("CartPole-v1")] * 2, start_method="fork", num_workers=2)
    try:
        with pytest.raises(vecenv.errors.NotCopyableError, match="a SubprocVecEnv cannot be"):
            copier(vec)
        gc.collect()
        assert vec.reset().shape == (2, 4)
    finally:
        vec.close()


def test_missing_sb3_gives_one_line_install_hint() -> None:
    code = (
        "import sys; sys.modules['stable_baselines3'] = None\n"
        "try:\n    import vecenv.sb3\nexcept ImportError as e:\n    print(e)\nelse:\n    raise SystemExit('imported')"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True, text=True).stdout
    assert out.count("\n") == 1 and "pip install 'vecenv[sb3]'" in out


@pytest.mark.timeout(120)
def test_ppo_smoke() -> None:
    """PPO takes our class as its env and runs a few updates."""
    from stable_baselines3 import PPO

    vec = SubprocVecEnv([lambda: gym.make("CartPole-v1") for _ in range(4)], start_method="fork", num_workers=2)
    try:
        model = PPO("MlpPolicy", vec, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
        model.learn(total_timesteps=256)
        assert model.num_timesteps == 256
    finally:
        vec.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ppo_learns_cartpole() -> None:
    """PPO (RL Zoo's CartPole-v1 hyperparameters) solves CartPole-v1 through our class.

    Learns in chunks of 10,240 steps and stops once a deterministic evaluation over 16 episodes
    averages 475 or more (the solved threshold); fails if that takes more than 150k steps.
    One torch thread: on a small, busy machine more threads only contend with the workers.
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    def make() -> gym.Env:
        return Monitor(gym.make("CartPole-v1"))

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    vec = SubprocVecEnv([make] * 8, start_method="fork", num_workers=2)
    eval_vec = SubprocVecEnv([make] * 4, start_method="fork", num_workers=1)
    try:
        model = PPO(
            "MlpPolicy",
            vec,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=1e-3,
            clip_range=0.2,
            seed=0,
            device="cpu",
        )
        means = []
        while model.num_timesteps < 150_000:
            model.learn(total_timesteps=10_240, reset_num_timesteps=False)
            mean, _ = evaluate_policy(model, eval_vec, n_eval_episodes=16, deterministic=True)
            means.append(round(float(mean), 1))
            if mean >= 475:
                break
        assert means[-1] >= 475, f"not solved after {model.num_timesteps} steps; evaluations: {means}"
    finally:
        vec.close()
        eval_vec.close()
        torch.set_num_threads(threads)


FAKE_SB3_TEST = """
import gymnasium as gym
from stable_baselines3.common.vec_env import SubprocVecEnv

import vecenv.sb3


def test_the_name_sb3_tests_import_is_ours():
    assert issubclass(SubprocVecEnv, vecenv.sb3.SubprocVecEnv)
    vec = SubprocVecEnv([lambda: gym.make("CartPole-v1")] * 3, start_method="fork")  # SB3's signature
    try:
        assert vec.num_workers == 1  # from --workers 1
        assert vec.reset().shape == (3, 4)
    finally:
        vec.close()
"""


@pytest.mark.timeout(180)
def test_sb3_suite_script_swaps_the_class_sb3_tests_import(tmp_path) -> None:
    """scripts/sb3_suite.py (which runs SB3's own tests against our class) on a stand-in suite."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "sb3_suite.py"
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_vec_envs.py").write_text(FAKE_SB3_TEST)
    cmd = [sys.executable, str(script), str(tmp_path), "--workers", "1", "--", "tests", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout

    (tmp_path / "stable_baselines3").mkdir()  # a source copy of SB3 would shadow the installed one
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "would shadow the installed SB3" in proc.stderr


# -- vecenv's options: restarts, pinning, threads, seeds, and the backend -----------------------


def restart_differential(ours: VecEnv, steps: int, victim_env: int, group: list[int]) -> None:
    """Step ``ours`` and a DummyVecEnv in lockstep; kill the process hosting ``victim_env``
    halfway: the envs of ``group`` (its worker's) are reported done with ``worker_restarted``,
    the others stay exact, and stepping carries on."""
    ref = DummyVecEnv(info_fns())
    rng = np.random.default_rng(5)
    keep = [i for i in range(ours.num_envs) if i not in group]
    try:
        assert ours.seed(3) == ref.seed(3)
        assert_obs(ours.reset(), ref.reset(), "reset obs")
        for t in range(steps):
            if t == steps // 2:
                pid = ours.env_method("process_info", indices=[victim_env])[0][0]
                os.kill(pid, signal.SIGKILL)
            actions = rng.integers(0, 3, size=ours.num_envs)
            obs, rewards, dones, infos = ours.step(actions)
            r_obs, r_rewards, r_dones, r_infos = ref.step(actions)
            assert_same(obs[keep], r_obs[keep], f"step {t} obs")
            assert_same(dones[keep], r_dones[keep], f"step {t} dones")
            assert_same([infos[i] for i in keep], [r_infos[i] for i in keep], f"step {t} infos")
            if t == steps // 2:
                assert dones[group].all() and (rewards[group] == 0).all()
                for i in group:
                    assert infos[i] == {"TimeLimit.truncated": True, "worker_restarted": True}
                    assert ours.reset_infos[i]["seeded"] is True, "the rebuilt env was reseeded"
        assert ours.env_method("process_info", indices=[victim_env])[0][0] != pid, "a new worker"
        assert ours.vector_env.state is vecenv.State.DEFAULT
    finally:
        ref.close()


@pytest.mark.timeout(90)
def test_restart_reports_the_restarted_envs_done_and_the_others_stay_exact() -> None:
    ours = SubprocVecEnv(info_fns(), start_method="fork", num_workers=2, on_worker_death="restart", max_restarts=2)
    try:
        restart_differential(ours, 20, victim_env=4, group=[3, 4])  # worker 1 hosts envs 3 and 4
    finally:
        ours.close()


@pytest.mark.timeout(60)
def test_pinning_threads_and_priority_reach_the_workers() -> None:
    cores = sorted(os.sched_getaffinity(0))
    own = os.getpriority(os.PRIO_PROCESS, 0)
    ours = SubprocVecEnv(
        info_fns(4), start_method="fork", num_workers=2, pin_cpus=True, threads_per_worker=2, worker_nice=2
    )
    try:
        info = ours.env_method("process_info")
        assert [threads for _, threads, _ in info] == ["2"] * 4
        assert [affinity for _, _, affinity in info] == [[cores[0]]] * 2 + [[cores[1 % len(cores)]]] * 2
        assert len({pid for pid, _, _ in info}) == 2
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid, _, _ in info] == [min(19, own + 2)] * 4
    finally:
        ours.close()


def test_options_of_the_other_backend_are_refused_before_anything_starts() -> None:
    cases = [
        ({"backend": "dask"}, "`backend` must be one of 'process', 'ray', got 'dask'"),
        ({"address": "auto"}, "`address` is for backend='ray' only, got address='auto'"),
        ({"actor_options": {"num_cpus": 1}}, "`actor_options` is for backend='ray' only"),
        ({"backend": "ray", "start_method": "fork"}, "`start_method` is for backend='process' only"),
        ({"backend": "ray", "pin_cpus": True}, "`pin_cpus` is for backend='process' only, got pin_cpus=True"),
        ({"backend": "ray", "worker_nice": 5}, "`worker_nice` is for backend='process' only, got worker_nice=5"),
        ({"seed_policy": "random"}, "`seed_policy` must be one of 'sequential', 'spawn', got 'random'"),
        ({"on_worker_death": "retry"}, "`on_worker_death` must be 'raise' or 'restart', got 'retry'"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            SubprocVecEnv(info_fns(2), **kwargs)


def test_env_instances_in_place_of_constructors_are_refused_before_any_worker_starts() -> None:
    # Each constructor is wrapped in an adapter (a callable) for the workers: an env instance
    # was only found out by a worker calling it, after every worker had started.
    env = gym.make("CartPole-v1")
    cases = [
        ([env] * 2, vecenv.errors.ArgumentTypeError, "`env_fns[0]` must be callable (returning a gymnasium.Env), got"),
        ("CartPole-v1", vecenv.errors.ArgumentTypeError, "`env_fns` must be an iterable of env constructors, got"),
        ([], vecenv.errors.InvalidArgumentError, "`env_fns` must hold at least one env constructor"),
    ]
    try:
        for env_fns, error, message in cases:
            with pytest.raises(error, match=re.escape(message)):
                SubprocVecEnv(env_fns, start_method="fork", num_workers=1)
    finally:
        env.close()
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(60)
def test_a_numpy_integer_seed_gives_each_env_the_seed_its_int_would() -> None:
    """SB3's ``seed + i`` in the seed's own NumPy type wrapped: an int8 127 made env 1's seed
    -128 (refused by reset, naming a seed never given), a uint64 made it 0 (silently)."""
    ours = SubprocVecEnv(info_fns(), start_method="fork", num_workers=2)
    try:
        for seed in (np.int8(127), np.uint64(2**64 - 1), np.int64(5)):
            seeds = ours.seed(seed)
            assert seeds == [int(seed) + i for i in range(N_ENVS)], (seed, seeds)
            assert all(type(s) is int for s in seeds)
            obs = ours.reset()
            ours.seed(int(seed))
            assert_same(obs, ours.reset(), f"seed {seed!r}")
    finally:
        ours.close()


@pytest.mark.timeout(60)
def test_seed_policy_spawn_seeds_each_env_from_a_seed_sequence() -> None:
    from vecenv import spawn_seeds

    ours = SubprocVecEnv(info_fns(), start_method="fork", num_workers=2, seed_policy="spawn")
    try:
        assert ours.seed(3) == spawn_seeds(3, N_ENVS)
        obs = ours.reset()
        for i, fn in enumerate(info_fns()):
            env = fn()
            assert_same(obs[i], env.reset(seed=spawn_seeds(3, N_ENVS)[i])[0], f"env {i}")
            env.close()
        assert ours.vector_env.seed_policy == "spawn"
        seeds = ours.seed(None)  # a random base, spawned as well: not consecutive
        assert len(set(seeds)) == N_ENVS and [b - a for a, b in zip(seeds, seeds[1:])] != [1] * (N_ENVS - 1)
    finally:
        ours.close()


@pytest.mark.timeout(60)
def test_errors_after_close_name_the_drop_in() -> None:
    """The caller built an SB3 SubprocVecEnv, not vecenv's SubprocVectorEnv underneath: the
    closed-env error names the former."""
    venv = SubprocVecEnv([lambda: gym.make("CartPole-v1")] * 2, start_method="fork")
    venv.close()
    with pytest.raises(vecenv.errors.ClosedEnvironmentError) as raised:
        venv.reset()
    assert str(raised.value) == "Trying to operate on `SubprocVecEnv`, after a call to `close()`."
