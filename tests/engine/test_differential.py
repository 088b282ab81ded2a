"""Differential tests: SubprocVectorEnv must match gymnasium's SyncVectorEnv exactly.

Both vector envs are built from the same constructors, reset with the same seeds and stepped
with the same actions; every observation, reward, termination, truncation and info dict
(keys, ``_key`` masks, values and dtypes) must be identical, call after call.
"""

from __future__ import annotations

import copy as copylib
import dataclasses
import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError
from gymnasium.spaces import Box, Discrete, MultiDiscrete
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.conftest import start_methods
from tests.helpers.envs import (
    ClashingInfoEnv,
    DictActionEnv,
    DiffEnv,
    InfoShapeEnv,
    MappingInfoEnv,
    NotADictInfoEnv,
    OddValueEnv,
    OldApiEnv,
    OldApiVectorEnv,
    ReusedInfoEnv,
    ScalarObsEnv,
    SharedInfoEnv,
    SpacelessEnv,
    bare_env_at,
    diff_env_fns,
    fns,
    make_group,
)
from vecenv import SpaceMismatchError, SubprocVectorEnv
from vecenv.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidInfoError,
    InvalidObservationError,
    MissingMethodError,
    NeedsResetError,
    describe,
)

NEXT, SAME, DISABLED = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED
STEPS = 220


# -- comparison ------------------------------------------------------------------------------


def assert_same(a: Any, b: Any, path: str = "value", ordered: bool = True) -> None:
    """Recursive exact equality: types, dict keys (in order, unless ``ordered=False``), array
    dtypes/shapes/values.

    Float arrays and scalars compare NaN equal to NaN; object arrays compare element-wise.
    """
    if isinstance(a, dict) or isinstance(b, dict):
        assert isinstance(a, dict) and isinstance(b, dict), f"{path}: {type(a).__name__} vs {type(b).__name__}"
        if ordered:
            assert list(a.keys()) == list(b.keys()), f"{path}: keys {list(a.keys())} vs {list(b.keys())}"
        else:
            assert set(a) == set(b), f"{path}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]", ordered)
        return
    assert type(a) is type(b), f"{path}: type {type(a).__name__} vs {type(b).__name__} ({a!r} vs {b!r})"
    if isinstance(a, Mapping):  # one that is not a dict (a UserDict in an object array): by item
        assert_same(dict(a), dict(b), path, ordered)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]", ordered)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype, f"{path}: dtype {a.dtype} vs {b.dtype}"
        assert a.shape == b.shape, f"{path}: shape {a.shape} vs {b.shape}"
        if a.dtype == object:
            for idx in np.ndindex(a.shape):
                assert_same(a[idx], b[idx], f"{path}[{', '.join(map(str, idx))}]", ordered)
        else:
            equal_nan = a.dtype.kind in "fc"
            assert np.array_equal(a, b, equal_nan=equal_nan), f"{path}: arrays differ\n{a!r}\nvs\n{b!r}"
    elif isinstance(a, (float, np.floating)):
        assert a == b or (math.isnan(a) and math.isnan(b)), f"{path}: {a!r} vs {b!r}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def same_steps(sub: Any, sync: SyncVectorEnv, seed: int, actions: list[Any]) -> None:
    """Reset both with ``seed``, step both with each action batch: every result identical."""
    assert_same(sub.reset(seed=seed), sync.reset(seed=seed), "reset")
    for t, a in enumerate(actions):
        assert_same(sub.step(a), sync.step(a), f"step {t}")


def test_assert_same_catches_differences() -> None:
    """The comparison itself must fail on each kind of difference it is meant to catch."""
    base = {"a": np.zeros(2, np.float32), "b": (1, "x"), "_a": np.array([True, False])}
    assert_same(base, copylib.deepcopy(base))
    assert_same(np.array([np.nan]), np.array([np.nan]))
    bad = [
        {"a": np.zeros(2, np.float64), "b": (1, "x"), "_a": np.array([True, False])},  # dtype
        {"a": np.zeros(2, np.float32), "b": (1, "y"), "_a": np.array([True, False])},  # value
        {"b": (1, "x"), "a": np.zeros(2, np.float32), "_a": np.array([True, False])},  # key order
        {"a": np.zeros(2, np.float32), "b": [1, "x"], "_a": np.array([True, False])},  # tuple/list
        {"a": np.zeros(2, np.float32), "b": (1.0, "x"), "_a": np.array([True, False])},  # int/float
    ]
    for other in bad:
        with pytest.raises(AssertionError):
            assert_same(base, other)
    with pytest.raises(AssertionError):
        assert_same(np.array([1, None], dtype=object), np.array([1, 2], dtype=object))
    with pytest.raises(AssertionError):
        assert_same(np.float32(1.0), np.float64(1.0))


# -- driving both vector envs ----------------------------------------------------------------


def sample_actions(space: gym.Space, n: int, rng: np.random.Generator, dtype: Any = None) -> np.ndarray:
    """A batch of ``n`` actions of the single ``space``, from our own generator."""
    if isinstance(space, Discrete):
        return rng.integers(space.start, space.start + space.n, size=n).astype(dtype or space.dtype)
    if isinstance(space, MultiDiscrete):
        return rng.integers(0, space.nvec, size=(n, *space.nvec.shape)).astype(dtype or space.dtype)
    if isinstance(space, Box):
        values = rng.uniform(space.low, space.high, size=(n, *space.shape))
        return values.astype(dtype or space.dtype)
    raise AssertionError(f"no sampler for {space}")


@dataclasses.dataclass
class Stats:
    """What happened during a run, so tests can check the run exercised what it should."""

    steps: int = 0
    terminations: int = 0
    truncations: int = 0
    info_keys: set = dataclasses.field(default_factory=set)
    mixed_dtypes: set = dataclasses.field(default_factory=set)
    texts: set = dataclasses.field(default_factory=set)
    masked_resets: int = 0


def _texts(obs: Any) -> list[str]:
    if isinstance(obs, str):
        return [obs]
    if isinstance(obs, (tuple, list)):
        return [t for o in obs for t in _texts(o)]
    if isinstance(obs, dict):
        return [t for o in obs.values() for t in _texts(o)]
    if isinstance(obs, np.ndarray) and obs.dtype == object:
        return [t for o in obs.ravel() for t in _texts(o)]
    return []


def _note_infos(stats: Stats, infos: dict) -> None:
    stats.info_keys.update(k for k in infos if not k.startswith("_"))
    if "mixed" in infos:
        stats.mixed_dtypes.add(infos["mixed"].dtype)


def assert_same_attributes(sync: SyncVectorEnv, sub: SubprocVectorEnv) -> None:
    assert sub.num_envs == sync.num_envs
    assert sub.single_observation_space == sync.single_observation_space
    assert sub.observation_space == sync.observation_space
    assert sub.single_action_space == sync.single_action_space
    assert sub.action_space == sync.action_space
    assert sub.metadata == sync.metadata
    assert sub.metadata["autoreset_mode"] is sync.autoreset_mode
    assert sub.render_mode == sync.render_mode
    assert sub.autoreset_mode is sync.autoreset_mode


def run_differential(
    env_fns: list[Callable[[], gym.Env]],
    make_sub: Callable[[], SubprocVectorEnv],
    *,
    mode: AutoresetMode = NEXT,
    copy: bool = True,
    steps: int = STEPS,
    seed: int = 0,
    action_dtype: Any = None,
    use_async: bool = False,
    reset_options: dict | None = None,
) -> Stats:
    """Drive a SyncVectorEnv and a SubprocVectorEnv in lockstep and compare every result.

    Besides plain steps: a partial reset with ``reset_mask`` (with a seed list and options) at
    step 70, a full reseed at step 120, another partial reset (no seeds) at step 160; under
    ``DISABLED`` every finished env is reset right after the step that ended it.
    """
    rng = np.random.default_rng(seed + 12345)
    stats = Stats()
    sync = SyncVectorEnv(env_fns, copy=copy, autoreset_mode=mode)
    try:
        with make_sub() as sub:
            assert_same_attributes(sync, sub)
            n = sync.num_envs
            single_action_space = sync.single_action_space
            prev: tuple[Any, Any] | None = None  # (obs returned by sub, a snapshot of it)

            def check_prev_untouched() -> None:
                # With copy=True, what a call returned must not change under later calls.
                if copy and prev is not None:
                    assert_same(prev[0], prev[1], "earlier observation after a later call")

            def reset(seed_arg: Any, options: dict | None) -> None:
                nonlocal prev
                # Separate option dicts: SyncVectorEnv pops "reset_mask" from the dict it gets.
                sync_out = sync.reset(seed=seed_arg, options=copylib.deepcopy(options))
                sub_options = copylib.deepcopy(options)
                if use_async:
                    sub.reset_async(seed=seed_arg, options=sub_options)
                    sub_out = sub.reset_wait()
                else:
                    sub_out = sub.reset(seed=seed_arg, options=sub_options)
                assert_same(sub_out, sync_out, "reset")
                check_prev_untouched()
                _note_infos(stats, sub_out[1])
                stats.texts.update(_texts(sub_out[0]))
                if options is not None and "reset_mask" in options:
                    stats.masked_resets += 1
                prev = (sub_out[0], copylib.deepcopy(sub_out[0]))

            def random_mask() -> np.ndarray:
                mask = rng.uniform(size=n) < 0.5
                mask[rng.integers(n)] = True
                return mask

            reset(seed, reset_options)
            for t in range(steps):
                if t == 70:
                    mask = random_mask()
                    seeds = [int(s) if m else None for s, m in zip(rng.integers(0, 2**31, size=n), mask)]
                    reset(seeds, {"reset_mask": mask, **(reset_options or {"level": 2})})
                elif t == 120:
                    reset(seed + 1000, reset_options)
                elif t == 160:
                    reset(None, {"reset_mask": random_mask()})
                actions = sample_actions(single_action_space, n, rng, action_dtype)
                sync_out = sync.step(actions)
                if use_async:
                    sub.step_async(actions)
                    sub_out = sub.step_wait()
                else:
                    sub_out = sub.step(actions)
                assert_same(sub_out, sync_out, f"step {t}")
                check_prev_untouched()
                obs, _, terms, truncs, infos = sub_out
                stats.steps += 1
                stats.terminations += int(terms.sum())
                stats.truncations += int(truncs.sum())
                _note_infos(stats, infos)
                stats.texts.update(_texts(obs))
                if "final_obs" in infos:
                    stats.texts.update(_texts(infos["final_obs"]))
                prev = (obs, copylib.deepcopy(obs))
                if mode is DISABLED:
                    ended = terms | truncs
                    if ended.any():
                        seeds = [
                            int(s) if e and rng.uniform() < 0.5 else None
                            for s, e in zip(rng.integers(0, 2**31, size=n), ended)
                        ]
                        reset(seeds, {"reset_mask": ended})
    finally:
        sync.close()
    return stats


# -- the scenario matrix ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Scenario:
    env: str  # "cartpole", or "<obs kind>/<act kind>" of a DiffEnv
    num_envs: int
    num_workers: int | None
    mode: AutoresetMode
    copy: bool = True
    shared_memory: bool = True
    context: str | None = None
    action_dtype: Any = None
    use_async: bool = False
    cls: type = DiffEnv
    inline: bool = False  # the parent hosts the first group (inline_group=True)

    @property
    def id(self) -> str:
        parts = [self.env.replace("/", "-"), f"n{self.num_envs}w{self.num_workers}", self.mode.value]
        if self.cls is not DiffEnv:
            parts.insert(0, self.cls.__name__)
        if self.action_dtype is not None:
            parts.append(f"act{np.dtype(self.action_dtype).name}")
        if not self.copy:
            parts.append("nocopy")
        if not self.shared_memory:
            parts.append("noshm")
        if self.context:
            parts.append(self.context)
        if self.use_async:
            parts.append("async")
        if self.inline:
            parts.append("inline")
        return "-".join(parts)

    def env_fns(self) -> list[Callable[[], gym.Env]]:
        if self.env == "cartpole":
            return [functools.partial(gym.make, "CartPole-v1")] * self.num_envs
        obs_kind, act_kind = self.env.split("/")
        return diff_env_fns(self.num_envs, self.cls, obs_kind=obs_kind, act_kind=act_kind)


SCENARIOS = [
    # CartPole, each autoreset mode.
    Scenario("cartpole", 4, 2, NEXT),
    Scenario("cartpole", 7, 3, SAME),
    Scenario("cartpole", 3, 1, DISABLED),
    # Box observations, Discrete actions; uneven groups (7 over 3 = 3+2+2).
    Scenario("box/discrete", 7, 3, NEXT),
    Scenario("box/discrete", 5, 2, SAME),
    Scenario("box/discrete", 7, 3, DISABLED),
    Scenario("box/discrete", 4, None, NEXT, use_async=True),
    # Nested Dict / Tuple observations; Box (float32 and float64 arrays) and MultiDiscrete actions.
    Scenario("dict/multidiscrete", 4, 2, NEXT),
    Scenario("dict/box", 7, 3, SAME, action_dtype=np.float64),
    Scenario("dict/box", 5, 2, NEXT, action_dtype=np.float32),
    Scenario("tuple/box", 5, 2, DISABLED, action_dtype=np.float32),
    Scenario("tuple/box", 4, 3, NEXT, action_dtype=np.float64),
    Scenario("discrete/multidiscrete", 3, 3, SAME),
    # Integer action arrays of another dtype than the space's (they must reach the envs as is).
    Scenario("box/discrete", 5, 2, SAME, action_dtype=np.int32),
    Scenario("tuple/multidiscrete", 4, 2, NEXT, action_dtype=np.int32),
    # One env, one worker.
    Scenario("dict/discrete", 1, 1, SAME),
    # Text observations (no fixed shape: they travel through the pipes).
    Scenario("text/discrete", 4, 2, NEXT),
    Scenario("tuple_text/multidiscrete", 7, 3, SAME),
    Scenario("text/box", 3, 1, DISABLED, action_dtype=np.float64),
    # copy=False: compared right after each call.
    Scenario("box/box", 3, 2, NEXT, copy=False, action_dtype=np.float64),
    Scenario("dict/discrete", 7, 3, SAME, copy=False),
    Scenario("tuple_text/discrete", 3, 2, DISABLED, copy=False),
    # shared_memory=False: every array travels through the pipes.
    Scenario("box/box", 5, 2, SAME, shared_memory=False),
    Scenario("dict/multidiscrete", 7, 3, DISABLED, shared_memory=False),
    Scenario("tuple/discrete", 4, 2, NEXT, shared_memory=False, copy=False),
    # Start methods other than the default.
    Scenario("box/discrete", 4, 2, NEXT, context="forkserver"),
    Scenario("tuple_text/box", 3, 2, SAME, context="forkserver", action_dtype=np.float64),
    Scenario("dict/multidiscrete", 3, 2, DISABLED, context="spawn"),
    Scenario("cartpole", 2, 2, SAME, context="fork"),
    # The parent hosts the first group (inline_group), or every env (num_workers=0).
    Scenario("box/discrete", 7, 3, NEXT, inline=True),
    Scenario("dict/box", 5, 2, SAME, inline=True, action_dtype=np.float64),
    Scenario("tuple_text/discrete", 4, 2, DISABLED, inline=True, copy=False),
    Scenario("dict/multidiscrete", 4, 2, NEXT, inline=True, context="spawn"),
    Scenario("box/discrete", 5, 0, SAME),
    Scenario("cartpole", 4, 0, NEXT, shared_memory=False),
    Scenario("tuple/box", 3, 0, DISABLED, action_dtype=np.float32, use_async=True),
    # An env that refills one info dict in place (reset right after step under SAME_STEP).
    Scenario("box/discrete", 4, 2, NEXT, cls=ReusedInfoEnv),
    Scenario("box/discrete", 4, 2, SAME, cls=ReusedInfoEnv),
    # One info dict shared by every env of a process: each env's values are those of its call.
    Scenario("box/discrete", 5, 2, NEXT, cls=SharedInfoEnv),
    Scenario("box/discrete", 4, 0, SAME, cls=SharedInfoEnv),
    Scenario("box/discrete", 4, 2, SAME, cls=SharedInfoEnv, context="forkserver"),
]

DIFF_INFO_KEYS = {
    "i_int",
    "f_float",
    "b_bool",
    "np_f32",
    "np_i16",
    "np_bool",
    "arr",
    "s",
    "nested",
    "mixed",
    "nan",
    "lst",
    "none",
    "act",
    "episode",
    "seed",
    "options",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sc", SCENARIOS, ids=[sc.id for sc in SCENARIOS])
def test_matches_sync(sc: Scenario) -> None:
    fns = sc.env_fns()
    stats = run_differential(
        fns,
        lambda: SubprocVectorEnv(
            fns,
            sc.num_workers,
            autoreset_mode=sc.mode,
            copy=sc.copy,
            context=sc.context,
            shared_memory=sc.shared_memory,
            inline_group=sc.inline,
        ),
        mode=sc.mode,
        copy=sc.copy,
        seed=sum(map(ord, sc.id)),
        action_dtype=sc.action_dtype,
        use_async=sc.use_async,
    )
    # The run must have exercised what it claims to.
    assert stats.steps == STEPS
    assert stats.masked_resets >= 2
    assert stats.terminations > 0
    if sc.mode is SAME:
        assert {"final_obs", "final_info"} <= stats.info_keys
    if sc.env == "cartpole":
        return
    assert stats.truncations > 0
    assert DIFF_INFO_KEYS <= stats.info_keys, DIFF_INFO_KEYS - stats.info_keys
    if sc.num_envs > 1:
        # Int in even envs, float in odd ones: over the run, both were the first to report it.
        assert stats.mixed_dtypes == {np.dtype(np.int64), np.dtype(np.float64)}
    if "text" in sc.env:
        assert len(stats.texts) > 50, "Text observations must change over time"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [NEXT, SAME], ids=lambda m: m.value)
def test_from_groups_uneven(mode: AutoresetMode) -> None:
    groups = [[0], [1, 2, 3], [4, 5]]
    kwargs = {"obs_kind": "dict", "act_kind": "multidiscrete"}
    fns = diff_env_fns(6, **kwargs)
    group_fns = [functools.partial(make_group, g, **kwargs) for g in groups]
    stats = run_differential(
        fns, lambda: SubprocVectorEnv.from_groups(group_fns, autoreset_mode=mode), mode=mode, seed=7
    )
    assert stats.terminations > 0 and stats.truncations > 0


@pytest.mark.timeout(60)
def test_from_groups_reports_group_sizes() -> None:
    group_fns = [functools.partial(make_group, g) for g in ([0, 1, 2, 3], [4])]
    with SubprocVectorEnv.from_groups(group_fns) as envs:
        assert envs.num_envs == 5
        assert envs.get_attr("index") == (0, 1, 2, 3, 4)


@pytest.mark.timeout(60)
def test_make_with_env_kwargs() -> None:
    env_kwargs = {"max_episode_steps": 15, "sutton_barto_reward": True}
    fns = [functools.partial(gym.make, "CartPole-v1", **env_kwargs)] * 5
    made: list[SubprocVectorEnv] = []

    def make_sub() -> SubprocVectorEnv:
        made.append(vecenv.make("CartPole-v1", 5, 2, env_kwargs=env_kwargs, autoreset_mode=SAME))
        return made[-1]

    stats = run_differential(fns, make_sub, mode=SAME, seed=3)
    envs = made[0]
    assert envs.closed
    assert envs.num_envs == 5
    assert envs.spec is not None and envs.spec.id == "CartPole-v1"
    assert envs.spec.max_episode_steps == 15
    assert stats.truncations > 0  # max_episode_steps reached the envs


# -- calls, attributes, render ---------------------------------------------------------------


@pytest.mark.timeout(60)
def test_call_get_set_attr_render() -> None:
    fns = diff_env_fns(5, obs_kind="box", act_kind="discrete", render_mode="rgb_array")
    sync = SyncVectorEnv(fns)
    rng = np.random.default_rng(0)
    try:
        with SubprocVectorEnv(fns, 2) as sub:
            assert_same_attributes(sync, sub)
            assert sub.render_mode == "rgb_array"
            assert_same(sub.reset(seed=11), sync.reset(seed=11))
            for _ in range(5):
                a = sample_actions(sync.single_action_space, 5, rng)
                assert_same(sub.step(a), sync.step(a))
            assert_same(sub.call("double", 3.0, plus=1.5), sync.call("double", 3.0, plus=1.5))
            assert sub.call("double", 3.0, plus=1.5) == (7.5, 8.5, 9.5, 10.5, 11.5)
            for name in ("t", "index", "np_random_seed", "render_mode", "metadata"):
                assert_same(sub.get_attr(name), sync.get_attr(name), name)
            assert_same(sub.np_random_seed, sync.np_random_seed)
            assert sub.np_random_seed == tuple(range(11, 16))
            # One value for every env.
            sub.set_attr("scale", 2.5)
            sync.set_attr("scale", 2.5)
            assert sub.get_attr("scale") == (2.5,) * 5
            # One value per env, as a list and as a tuple.
            sub.set_attr("scale", [1.0, -1.0, 3.0, 0.5, 7.0])
            sync.set_attr("scale", [1.0, -1.0, 3.0, 0.5, 7.0])
            assert sub.get_attr("scale") == (1.0, -1.0, 3.0, 0.5, 7.0)
            sub.set_attr("p_term", (0.0, 0.1, 0.2, 0.3, 0.4))
            sync.set_attr("p_term", (0.0, 0.1, 0.2, 0.3, 0.4))
            assert_same(sub.get_attr("p_term"), sync.get_attr("p_term"))
            # An array is one value, given whole to every env (it is not a list or tuple).
            sub.set_attr("marker", np.arange(5))
            sync.set_attr("marker", np.arange(5))
            assert_same(sub.get_attr("marker"), sync.get_attr("marker"))
            with pytest.raises(ValueError, match="Values must be a list or tuple"):
                sub.set_attr("scale", [1.0, 2.0])
            with pytest.raises(AttributeError):
                sync.get_attr("no_such_attribute")
            with pytest.raises(AttributeError):
                sub.get_attr("no_such_attribute")
            # The attributes set reach the envs' dynamics.
            for _ in range(30):
                a = sample_actions(sync.single_action_space, 5, rng)
                assert_same(sub.step(a), sync.step(a))
            frames = sub.render()
            assert_same(frames, sync.render())
            assert len(frames) == 5 and frames[0].shape == (4, 5, 3)
            assert len({f[0, 0, 0] for f in frames}) > 1
    finally:
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_an_attribute_name_that_is_not_a_str_is_refused_in_the_parent(workers: int) -> None:
    """``SyncVectorEnv`` raises ``TypeError`` for a name that is not a str in ``call``,
    ``get_attr`` and ``set_attr``; vecenv raises its ``ArgumentTypeError`` naming ``name`` in all
    three, before a worker is asked (``set_attr`` once sent it on, and env 0 raised)."""
    fns = diff_env_fns(3, obs_kind="box", act_kind="discrete")
    sync = SyncVectorEnv(fns)
    calls: dict[str, Callable[[Any], Any]] = {
        "call": lambda envs: envs.call(123),
        "get_attr": lambda envs: envs.get_attr(123),
        "set_attr": lambda envs: envs.set_attr(123, 1.0),
    }
    try:
        with SubprocVectorEnv(fns, workers) as sub:
            sub.reset(seed=0)
            for method, run in calls.items():
                with pytest.raises(TypeError):
                    run(sync)
                with pytest.raises(ArgumentTypeError, match=r"^`name` must be a str, got 123"):
                    run(sub)
                assert sub.state is vecenv.State.DEFAULT, method
            sub.set_attr("scale", 2.0)
            assert sub.get_attr("scale") == (2.0,) * 3
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_render_cartpole_rgb_array() -> None:
    pytest.importorskip("pygame")
    fns = [functools.partial(gym.make, "CartPole-v1", render_mode="rgb_array")] * 3
    sync = SyncVectorEnv(fns)
    try:
        with vecenv.make("CartPole-v1", 3, 2, env_kwargs={"render_mode": "rgb_array"}) as sub:
            assert_same_attributes(sync, sub)
            assert sub.render_mode == "rgb_array"
            assert_same(sub.reset(seed=5), sync.reset(seed=5))
            for _ in range(4):
                a = np.array([0, 1, 1])
                assert_same(sub.step(a), sync.step(a))
            frames = sub.render()
            assert_same(frames, sync.render())
            assert frames[0].dtype == np.uint8 and frames[0].ndim == 3
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_step_async_wait_and_reset_async_wait() -> None:
    fns = diff_env_fns(5, obs_kind="tuple", act_kind="multidiscrete")
    sync = SyncVectorEnv(fns)
    rng = np.random.default_rng(1)
    try:
        with SubprocVectorEnv(fns, 2) as sub:
            sub.reset_async(seed=[3, 30, 5, 6, 7], options={"k": 1})
            assert_same(sub.reset_wait(), sync.reset(seed=[3, 30, 5, 6, 7], options={"k": 1}))
            for _ in range(30):
                a = sample_actions(sync.single_action_space, 5, rng)
                sub.step_async(a)
                assert_same(sub.step_wait(), sync.step(a))
            mask = np.array([False, True, False, False, True])
            sub.reset_async(seed=9, options={"reset_mask": mask.copy()})
            assert_same(sub.reset_wait(), sync.reset(seed=9, options={"reset_mask": mask.copy()}))
            # Already-seeded envs given None keep drawing from their own generators.
            sub.reset_async(seed=[None, 1, None, None, 2])
            assert_same(sub.reset_wait(), sync.reset(seed=[None, 1, None, None, 2]))
            a = sample_actions(sync.single_action_space, 5, rng)
            sub.step_async(a)
            assert_same(sub.step_wait(timeout=30), sync.step(a))
    finally:
        sync.close()


@pytest.mark.timeout(60)
@start_methods("fork", "forkserver", "spawn")
def test_context_manager_closes(start_method: str) -> None:
    fns = [functools.partial(gym.make, "CartPole-v1")] * 2
    sync = SyncVectorEnv(fns)
    try:
        with SubprocVectorEnv(fns, 2, context=start_method, daemon=start_method != "fork") as envs:
            assert isinstance(envs, SubprocVectorEnv)
            assert not envs.closed
            assert_same(envs.reset(seed=0), sync.reset(seed=0))
            for t in range(20):
                a = np.array([t % 2, (t // 3) % 2])
                assert_same(envs.step(a), sync.step(a))
    finally:
        sync.close()
    assert envs.closed
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.zeros(2, dtype=np.int64))
    envs.close()  # idempotent


CLOSED_CALLS: dict[str, Callable[[SubprocVectorEnv], object]] = {
    "step": lambda e: e.step(np.zeros(2, dtype=np.int64)),
    "reset": lambda e: e.reset(seed=0),
    "reset-mask": lambda e: e.reset(options={"reset_mask": np.array([True, False])}),
    "call": lambda e: e.call("render"),
    "get_attr": lambda e: e.get_attr("render_mode"),
    "set_attr": lambda e: e.set_attr("x", 1),
    "render": lambda e: e.render(),
    "step_async": lambda e: e.step_async(np.zeros(2, dtype=np.int64)),
    "reset_async": lambda e: e.reset_async(seed=0),
    "call_async": lambda e: e.call_async("render"),
    "np_random_seed": lambda e: e.np_random_seed,
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_call_after_close_raises_closed(num_workers: int) -> None:
    """The semantics page's "Closed means closed": where ``SyncVectorEnv`` passes calls on to its
    closed envs, every call that would reach ours raises ``ClosedEnvironmentError`` (as in
    ``AsyncVectorEnv``), on processes and in the parent alike, and ``close()`` stays idempotent."""
    fns = [functools.partial(gym.make, "CartPole-v1")] * 2
    envs = SubprocVectorEnv(fns, num_workers)
    envs.reset(seed=0)
    envs.close()
    raised = {}
    for name, call in CLOSED_CALLS.items():
        with pytest.raises(ClosedEnvironmentError) as info:
            call(envs)
        raised[name] = info.value
    assert all(isinstance(e, vecenv.errors.VecEnvError) for e in raised.values()), raised
    envs.close()
    assert envs.closed


#: Seeds SyncVectorEnv refuses (Gymnasium's ``Env.reset`` with ``gymnasium.error.Error``, or its
#: own ``len(seed)`` with ``TypeError``), after resetting the envs before the bad one; ours
#: refuses them before any env is reset, with the error each case expects.
BAD_SEEDS: dict[str, tuple[Any, type]] = {
    "negative": (-1, vecenv.errors.InvalidSeedError),
    "negative-in-list": ([0, -5], vecenv.errors.InvalidSeedError),
    "float": (1.5, vecenv.errors.SeedTypeError),
    "float-in-list": ([0, 2.0], vecenv.errors.SeedTypeError),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", list(BAD_SEEDS))
def test_a_seed_sync_refuses_is_refused_as_syncs_error_before_any_reset(num_workers: int, case: str) -> None:
    """Code that catches what Sync raises for a bad seed (``gymnasium.error.Error``, ``TypeError``)
    catches ours too; ours names the seed and resets nothing, so the envs carry on as they were."""
    seed, error = BAD_SEEDS[case]
    fns = [functools.partial(gym.make, "CartPole-v1")] * 2
    sync = SyncVectorEnv(fns)
    with pytest.raises(Exception) as sync_info:
        sync.reset(seed=seed)
    sync.close()
    with SubprocVectorEnv(fns, num_workers) as envs:
        first, _ = envs.reset(seed=3)
        with pytest.raises(type(sync_info.value), match=r"`seed(\[1\])?` must be") as info:
            envs.reset(seed=seed)
        assert type(info.value) is error and isinstance(info.value, vecenv.errors.InvalidArgumentError)
        stepped = envs.step(np.zeros(2, dtype=np.int64))[0]
    reference = SyncVectorEnv(fns)
    assert np.array_equal(reference.reset(seed=3)[0], first)
    np.testing.assert_array_equal(reference.step(np.zeros(2, dtype=np.int64))[0], stepped)
    reference.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("num_workers", "obs_kind"), [(0, "dict"), (2, "dict"), (0, "tuple"), (2, "tuple")])
def test_copy_false_gives_containers_of_its_own(num_workers: int, obs_kind: str) -> None:
    """With ``copy=False`` a caller that replaces a key of the dict it got (``obs["a"] = obs["a"]
    / 255``) still gets the envs' next observations, as from Sync: each call's dict is new."""

    def preprocess(obs: Any) -> None:
        for tree in [obs, *(obs if isinstance(obs, tuple) else ())]:
            if isinstance(tree, dict):
                for key in list(tree):  # the caller's own copies, in the dict it was given
                    tree[key] = copylib.deepcopy(tree[key])

    fns = diff_env_fns(3, obs_kind=obs_kind, act_kind="discrete")
    sync = SyncVectorEnv(fns, copy=False)
    envs = SubprocVectorEnv(fns, num_workers, copy=False, context="fork")
    try:
        want, got = sync.reset(seed=3), envs.reset(seed=3)
        assert_same(got, want)
        for t in range(12):
            preprocess(want[0]), preprocess(got[0])
            actions = np.array([(t + i) % 2 for i in range(3)])
            want, got = sync.step(actions), envs.step(actions)
            assert_same(got, want)
    finally:
        envs.close()
        sync.close()


# -- construction errors ---------------------------------------------------------------------


def _mismatch_fns(bad: int, which: str) -> list[Callable[[], gym.Env]]:
    fns = []
    for i in range(5):
        if i == bad and which == "observation_space":
            fns.append(functools.partial(DiffEnv, index=i, obs_shape=4))
        elif i == bad:
            fns.append(functools.partial(DiffEnv, index=i, act_kind="multidiscrete"))
        else:
            fns.append(functools.partial(DiffEnv, index=i))
    return fns


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "bad, which",
    [(1, "observation_space"), (3, "observation_space"), (4, "observation_space"), (4, "action_space")],
    ids=["env1-in-worker0", "env3-first-of-worker1", "env4-in-worker1", "env4-action"],
)
def test_space_mismatch_names_env(bad: int, which: str) -> None:
    # 5 envs over 2 workers: envs 0-2 in worker 0, envs 3-4 in worker 1.
    with pytest.raises(SpaceMismatchError, match=rf"\benv {bad}\b") as excinfo:
        SubprocVectorEnv(_mismatch_fns(bad, which), 2)
    assert which in str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [6, -1, 1.5, "2", True], ids=repr)
def test_bad_num_workers(num_workers: Any) -> None:
    with pytest.raises(ValueError, match="num_workers"):
        SubprocVectorEnv(diff_env_fns(5), num_workers)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "act_kind, actions",
    [
        ("discrete", [0, 3, 1, 2]),
        ("multidiscrete", [[0, 1], [2, 4], [1, 0], [0, 3]]),
        ("box", [[0.5, -0.5], [0.25, 0.0], [-1.0, 1.0], [0.0, 0.125]]),
    ],
    ids=["discrete", "multidiscrete", "box"],
)
def test_python_list_actions_reach_envs_as_in_sync(act_kind: str, actions: list) -> None:
    """A batch given as a Python list: each env must receive what SyncVectorEnv hands it."""
    fns = diff_env_fns(4, obs_kind="box", act_kind=act_kind)
    sync = SyncVectorEnv(fns)
    try:
        with SubprocVectorEnv(fns, 2) as sub:
            assert_same(sub.reset(seed=4), sync.reset(seed=4))
            sync_out = sync.step(copylib.deepcopy(actions))
            sub_out = sub.step(copylib.deepcopy(actions))
            # infos["act"] records the type and dtype of the action each env received.
            assert_same(sub_out[4]["act"], sync_out[4]["act"], "infos['act']")
            assert_same(sub_out, sync_out)
    finally:
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dict_action_batch_may_hold_keys_beyond_the_space(num_workers: int) -> None:
    """As SyncVectorEnv iterates a Dict batch: the space's keys are read, others are not; a
    missing key is refused with the keys the space needs."""
    env_fns = fns(DictActionEnv, 4)
    actions = {"move": np.array([0, 1, 2, 1]), "force": np.full((4, 2), 0.25, np.float32), "tag": np.zeros(4)}
    sync = SyncVectorEnv(env_fns)
    try:
        with SubprocVectorEnv(env_fns, num_workers) as sub:
            assert_same(sub.reset(seed=1), sync.reset(seed=1))
            out = sub.step(dict(actions))
            assert_same(out, sync.step(dict(actions)))
            assert list(out[4]["keys"]) == ["force,move"] * 4  # the envs got the space's keys only
            with pytest.raises(ArgumentTypeError, match=r"must be a dict with the keys \['force', 'move'\], got keys"):
                sub.step({"move": actions["move"], "tag": actions["tag"]})
            assert_same(sub.step(dict(actions)), sync.step(dict(actions)))  # nothing was sent
    finally:
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["reset", "step"])
@pytest.mark.parametrize("info", [None, []], ids=["None", "list"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_info_that_is_not_a_dict_raises_naming_the_env(num_workers: int, info: Any, when: str) -> None:
    """SyncVectorEnv fails on it when it batches the info; so does vecenv, with an error that
    names the env (and is a TypeError), instead of taking it for an empty info."""
    env_fns = fns(NotADictInfoEnv, 4, when=when, info=info)
    sync = SyncVectorEnv(env_fns)
    try:
        with pytest.raises(AttributeError):
            sync.reset(seed=0)
            sync.step(np.zeros(4, np.int64))
    finally:
        sync.close()
    with SubprocVectorEnv(env_fns, num_workers) as sub:
        with pytest.raises(InvalidInfoError, match=r"an env's info must be a dict or another mapping, got") as raised:
            sub.reset(seed=0)
            sub.step(np.zeros(4, np.int64))
        assert isinstance(raised.value, TypeError)
        assert "env 0" in " ".join(getattr(raised.value, "__notes__", [])), raised.value


_OLD_API = {
    # kind: (Sync's error, our error, what the message says was expected and received)
    "step-4": (ValueError, InvalidArgumentError, r"`step` must return 5 values .* got a tuple of 4 .*old Gym API"),
    "step-6": (ValueError, InvalidArgumentError, r"`step` must return 5 values .* got a tuple of 6"),
    "reset-obs": (AttributeError, ArgumentTypeError, r"`reset` must return 2 values .* got array\(.*old Gym API"),
    "reset-3": (ValueError, InvalidArgumentError, r"`reset` must return 2 values .* got a tuple of 3"),
    "reset-None": (TypeError, ArgumentTypeError, r"`reset` must return 2 values .* got None"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [NEXT, SAME], ids=["next", "same"])
@pytest.mark.parametrize("kind", list(_OLD_API))
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_step_or_reset_result_of_another_form_raises_naming_the_env(
    num_workers: int, kind: str, mode: AutoresetMode
) -> None:
    """SyncVectorEnv fails on it as it unpacks it (or, for an observation alone, when it batches
    the observation's second value as the info); vecenv raises an error naming the env, the
    method, what it must return and what it got, not the error of a value taken for another
    (an observation of 2 values read as (observation, info))."""
    sync_error, error, match = _OLD_API[kind]
    env_fns = fns(OldApiEnv, 4, kind=kind)
    sync = SyncVectorEnv(env_fns, autoreset_mode=mode)
    try:
        with pytest.raises(sync_error):
            sync.reset(seed=0)
            sync.step(np.zeros(4, np.int64))
    finally:
        sync.close()
    with SubprocVectorEnv(env_fns, num_workers, autoreset_mode=mode) as sub:
        with pytest.raises(error, match=match) as raised:
            sub.reset(seed=0)
            sub.step(np.zeros(4, np.int64))
        assert type(raised.value) is error
        assert "raised in env 1 " in " ".join(getattr(raised.value, "__notes__", [])), raised.value


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("column", "value", "error"),
    [
        ("reward", np.array([1.0, 2.0]), ValueError),
        ("reward", 1 + 2j, TypeError),
        ("truncated", np.array([True, False]), ValueError),
    ],
    ids=["reward-array", "reward-complex", "truncated-array"],
)
@pytest.mark.parametrize("mode", [NEXT, SAME], ids=["next", "same"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_reward_or_flag_no_row_holds_raises_naming_the_env_and_the_value(
    num_workers: int, column: str, value: Any, error: type, mode: AutoresetMode
) -> None:
    """SyncVectorEnv raises numpy's error as it stores the value in its row; so does vecenv, the
    same type, with a note naming the env and the value it returned in which column (numpy's
    message says neither: "setting an array element with a sequence")."""
    env_fns = fns(OddValueEnv, 4, column=column, value=value)
    sync = SyncVectorEnv(env_fns, autoreset_mode=mode)
    try:
        sync.reset(seed=0)
        with pytest.raises(error, match=re.escape(str(_store_error(column, value)))):
            sync.step(np.zeros(4, np.int64))
    finally:
        sync.close()
    with SubprocVectorEnv(env_fns, num_workers, autoreset_mode=mode) as sub:
        sub.reset(seed=0)
        with pytest.raises(error, match=re.escape(str(_store_error(column, value)))) as raised:
            sub.step(np.zeros(4, np.int64))
        notes = " ".join(getattr(raised.value, "__notes__", []))
        assert "raised in env 1 " in notes, notes
        assert f"`step` returned the {column} {describe(value)}" in notes, notes


def _store_error(column: str, value: Any) -> Exception:
    """numpy's error storing ``value`` in a row of ``column``'s array, as SyncVectorEnv stores it."""
    try:
        np.zeros(1, np.float64 if column == "reward" else np.bool_)[0] = value
    except Exception as exc:
        return exc
    raise AssertionError(f"{value!r} fits a row of {column}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_info_value_that_does_not_batch_names_the_env(num_workers: int) -> None:
    """Env 1's info array has another shape than env 0's: SyncVectorEnv raises numpy's error
    as it batches it, naming no env; vecenv raises the same, with a note naming env 1."""
    env_fns = fns(InfoShapeEnv, 3)
    sync = SyncVectorEnv(env_fns)
    try:
        sync.reset(seed=0)
        with pytest.raises(ValueError, match="could not broadcast"):
            sync.step(np.zeros(3, np.int64))
    finally:
        sync.close()
    with SubprocVectorEnv(env_fns, num_workers) as sub:
        sub.reset(seed=0)
        with pytest.raises(ValueError, match="could not broadcast") as raised:
            sub.step(np.zeros(3, np.int64))
        notes = " ".join(getattr(raised.value, "__notes__", []))
        assert "raised batching env 1's info['v'] = array([0., 0.])" in notes, notes


@pytest.mark.timeout(60)
@pytest.mark.parametrize("which", ["observation_space", "action_space"])
@pytest.mark.parametrize("bad", [0, -1], ids=["env-0", "every-env"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_env_0_whose_space_is_no_space_is_named(num_workers: int, bad: int, which: str) -> None:
    """SyncVectorEnv raises TypeError batching env 0's space when it is no Space (None here);
    vecenv raises a TypeError too, naming env 0 and the space, not a mismatch of env 1's (whose
    Box differs from None) nor Gymnasium's error without an env."""
    env_fns = fns(SpacelessEnv, 4, bad=bad, which=which)
    with pytest.raises(TypeError, match="is not a gymnasium Space instance"):
        SyncVectorEnv(env_fns)
    with pytest.raises(ArgumentTypeError, match=rf"env 0's `{which}` must be a gymnasium.spaces.Space, got None"):
        SubprocVectorEnv(env_fns, num_workers)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("kind", "match"),
    [
        ("step", r"`step` must return 5 values .* got a tuple of 4 values"),
        ("reset", r"`reset` must return 2 values .* got array\(.*old Gym API"),
    ],
)
def test_a_native_group_result_of_another_form_raises_naming_its_envs(kind: str, match: str) -> None:
    """As for one env's: a native vector env's step of 4 values, or reset of the observations
    alone, is named with what it must return; the note names the group's envs."""
    group_fns = [functools.partial(OldApiVectorEnv, [0, 1], kind=kind), functools.partial(OldApiVectorEnv, [2, 3])]
    with SubprocVectorEnv.from_groups(group_fns) as sub:
        with pytest.raises(InvalidArgumentError, match=match) as raised:
            sub.reset(seed=0)
            sub.step(np.zeros(4, np.int64))
        assert "raised in envs 0..1 (worker 0)" in " ".join(getattr(raised.value, "__notes__", [])), raised.value


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("num_workers", "inline"), [(0, False), (2, False), (2, True)], ids=["w0", "w2", "inline"])
def test_envs_after_env_0_need_no_metadata_render_mode_or_spec(num_workers: int, inline: bool) -> None:
    """SyncVectorEnv reads env 0's metadata and render_mode, and no env's spec: an env without
    them elsewhere (here env 2, the first of worker 1) steps as in SyncVectorEnv."""
    env_fns = fns(bare_env_at, 4, bad=2)
    sync = SyncVectorEnv(env_fns)
    try:
        with SubprocVectorEnv(env_fns, num_workers, inline_group=inline) as sub:
            assert sub.metadata == sync.metadata and sub.render_mode is sync.render_mode is None
            assert_same(sub.reset(seed=0), sync.reset(seed=0), "reset")
            for t in range(4):
                assert_same(sub.step(np.ones(4, np.int64)), sync.step(np.ones(4, np.int64)), f"step {t}")
    finally:
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_env_0_without_metadata_raises_naming_it(num_workers: int) -> None:
    """SyncVectorEnv takes env 0's metadata and render_mode, and raises AttributeError where it
    has none; vecenv raises an AttributeError too, that names env 0 and what it lacks."""
    env_fns = fns(bare_env_at, 3, bad=0)
    with pytest.raises(AttributeError):
        SyncVectorEnv(env_fns)
    with pytest.raises(MissingMethodError, match=r"env 0 \(BareEnv\) has no `metadata`"):
        SubprocVectorEnv(env_fns, num_workers)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "kind, mode",
    [("UserDict", NEXT), ("MappingProxyType", NEXT), ("UserDict", SAME), ("None", SAME)],
    ids=["UserDict-next", "MappingProxyType-next", "UserDict-same", "None-same"],
)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_info_that_is_a_mapping_or_a_final_info_of_any_kind_batches_as_in_sync(
    num_workers: int, kind: str, mode: AutoresetMode
) -> None:
    """SyncVectorEnv batches any info's items, so a mapping that is not a dict is an info like
    any; under SAME_STEP it keeps a final step's info that is not a dict (a UserDict, even
    None) as it is, as ``final_info``'s entry, and batches the reset's info beside it."""
    env_fns = fns(MappingInfoEnv, 3, kind=kind)
    sync = SyncVectorEnv(env_fns, autoreset_mode=mode)
    try:
        with SubprocVectorEnv(env_fns, num_workers, autoreset_mode=mode) as sub:
            assert_same(sub.reset(seed=0), sync.reset(seed=0), "reset")
            finals = 0
            for t in range(8):
                got = sub.step(np.zeros(3, np.int64))
                assert_same(got, sync.step(np.zeros(3, np.int64)), f"step {t}")
                finals += int(got[4].get("_final_info", np.zeros(3, bool)).sum())
            assert finals > 0 or mode is NEXT
    finally:
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2, "inline"])
def test_an_info_that_cannot_be_batched_raises_as_in_sync_naming_env_and_key(workers: int | str) -> None:
    """Env 1's ``"s"`` does not fit the int array env 0's ``1`` set up: SyncVectorEnv raises
    NumPy's ValueError; so does vecenv, with a note naming the env and the key."""
    env_fns = fns(ClashingInfoEnv, 4)
    sync = SyncVectorEnv(env_fns)
    try:
        sync.reset(seed=0)
        sync.step(np.zeros(4, np.int64))
        with pytest.raises(ValueError) as expected:
            sync.step(np.zeros(4, np.int64))
    finally:
        sync.close()
    inline = workers == "inline"
    with SubprocVectorEnv(env_fns, 2 if inline else workers, inline_group=inline) as sub:
        sub.reset(seed=0)
        sub.step(np.zeros(4, np.int64))
        with pytest.raises(ValueError) as got:
            sub.step(np.zeros(4, np.int64))
        assert type(got.value) is type(expected.value) and str(got.value) == str(expected.value)
        note = " ".join(got.value.__notes__)
        assert "env 1's info['m'] = 's' (str) into infos['m'], an array of int64s" in note, note


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2, "inline"])
def test_under_disabled_the_envs_a_failed_info_batch_ended_or_reset_are_known(workers: int | str) -> None:
    """The step (reset, rollout) ran in every env before the infos failed to batch: the envs
    it ended must be reset before the next step (NeedsResetError, not a step past their end),
    and the envs a reset restarted may step again."""
    inline = workers == "inline"
    env_fns = fns(ClashingInfoEnv, 4)
    with SubprocVectorEnv(
        env_fns, 2 if inline else workers, inline_group=inline, autoreset_mode=AutoresetMode.DISABLED
    ) as sub:
        sub.reset(seed=0)
        sub.step(np.zeros(4, np.int64))
        with pytest.raises(ValueError, match="invalid literal"):
            sub.step(np.zeros(4, np.int64))  # every env's episode ends here
        with pytest.raises(NeedsResetError, match=r"envs \[0, 1, 2, 3\]"):
            sub.step(np.zeros(4, np.int64))
        with pytest.raises(ValueError, match="invalid literal"):
            sub.reset(options={"reset_mask": np.ones(4, bool), "clash": True})
        obs, rewards, _, truncations, _ = sub.step(np.zeros(4, np.int64))
        assert obs[:, 1].tolist() == [1.0] * 4 and not truncations.any()  # the first step of new episodes
        with pytest.raises(ValueError, match="invalid literal"):
            sub.rollout(3)  # the episodes end at its first step
        with pytest.raises(NeedsResetError, match=r"envs \[0, 1, 2, 3\]"):
            sub.step(np.zeros(4, np.int64))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_scalar_observations_cast_as_in_sync(num_workers: int) -> None:
    """A shape-() Box takes a Python scalar as SyncVectorEnv's np.stack casts it: an int out of
    an int8's range wraps; an int or a float is no bool (refused)."""
    wraps = fns(ScalarObsEnv, 2, dtype=np.int8, value=1000)
    sync = SyncVectorEnv(wraps)
    try:
        with SubprocVectorEnv(wraps, num_workers) as sub:
            obs, infos = sub.reset(seed=0)
            assert_same((obs, infos), sync.reset(seed=0))
            assert obs.tolist() == [-24, -24]
            assert_same(sub.step(np.zeros(2, np.int64)), sync.step(np.zeros(2, np.int64)))
    finally:
        sync.close()
    for value in (1, 0.7):
        refused = fns(ScalarObsEnv, 2, dtype=np.bool_, value=value)
        sync = SyncVectorEnv(refused)
        try:
            with pytest.raises(TypeError):
                sync.reset(seed=0)
        finally:
            sync.close()
        with SubprocVectorEnv(refused, num_workers) as sub, pytest.raises(InvalidObservationError, match="bool"):
            sub.reset(seed=0)


@pytest.mark.timeout(60)
def test_unpicklable_call_result_is_an_error_not_a_dead_worker() -> None:
    """SyncVectorEnv returns any object; a result that cannot cross the pipe must raise a clear
    error in the parent and leave the workers alive, not kill the worker that produced it."""
    fns = diff_env_fns(3)
    sync = SyncVectorEnv(fns)
    try:
        results = sync.call("unpicklable")
        assert [list(g) for g in results] == [[0], [0, 1], [0, 1, 2]]
        with SubprocVectorEnv(fns, 2) as sub:
            sub.reset(seed=0)
            with pytest.raises(Exception) as excinfo:
                sub.call("unpicklable")
            assert not isinstance(excinfo.value, vecenv.WorkerDiedError), excinfo.value
            assert "pickle" in str(excinfo.value).lower()
            assert sub.get_attr("index") == (0, 1, 2)  # still usable
    finally:
        sync.close()
