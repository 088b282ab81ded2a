"""``vecenv.worker.group``: EnvGroup (the one place autoreset lives) driven in this process, and
native vector env groups (VectorGroup) through worker processes.

``LocalVec`` wires EnvGroups to Buffers exactly as the parent and the workers do, but in one
process, and is compared with ``SyncVectorEnv`` step by step.
"""

from __future__ import annotations

import copy as copylib
import functools
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from tests.engine.test_buffers import attach
from tests.engine.test_differential import assert_same, sample_actions
from tests.helpers.envs import (
    AnyActionEnv,
    DiffEnv,
    NoDeepcopyInfoEnv,
    ReusedInfoEnv,
    any_action_group,
    diff_env_fns,
    fns,
    sync_group,
)
from vecenv import InvalidInfoError, InvalidObservationError, SubprocVectorEnv
from vecenv.errors import InvalidArgumentError
from vecenv.spaces import tree_assign, tree_slice
from vecenv.wire.buffers import Buffers, BufferSpec
from vecenv.worker.group import EnvGroup

NEXT, SAME, DISABLED = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED


class _Merger:
    """Gymnasium's own info batching, over ``num_envs`` rows."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


class LocalVec:
    """EnvGroups over contiguous row ranges of one Buffers, driven as the parent drives them."""

    def __init__(self, env_fns: list, bounds: list[int], mode: AutoresetMode, shared_memory: bool) -> None:
        envs = [fn() for fn in env_fns]
        self.n = len(envs)
        first = envs[0]
        self.spec = BufferSpec.plan(self.n, first.observation_space, first.action_space, shared_memory)
        self.parent = Buffers.create(self.spec)
        self.ranges = list(zip(bounds[:-1], bounds[1:]))
        self.groups = [EnvGroup(envs[a:b], mode, attach(self.parent, a, b)) for a, b in self.ranges]

    def reset(self, seeds: list, options: dict | None, mask: np.ndarray | None) -> tuple[Any, dict]:
        infos: dict = {}
        merger = _Merger(self.n)
        for (a, b), g in zip(self.ranges, self.groups):
            if mask is not None and not mask[a:b].any():
                continue
            entries = g.reset(seeds[a:b], options, None if mask is None else mask[a:b])
            self.parent.receive(a, b, g.buffers.payload())
            for j, info in entries:
                infos = merger._add_info(infos, info, a + j)
        return copylib.deepcopy(self.parent.batched_observations()), infos

    def step(self, actions: np.ndarray) -> tuple:
        infos: dict = {}
        merger = _Merger(self.n)
        if self.spec.shared_actions:
            tree_assign(self.parent.actions, actions)
        for (a, b), g in zip(self.ranges, self.groups):
            rows = g.buffers.actions if self.spec.shared_actions else tree_slice(actions, a, b)
            entries = g.step(rows)
            self.parent.receive(a, b, g.buffers.payload())
            for j, info in entries:
                infos = merger._add_info(infos, info, a + j)
        p = self.parent
        obs = copylib.deepcopy(p.batched_observations())
        return obs, p.rewards.copy(), p.terminations.copy(), p.truncations.copy(), infos

    def close(self) -> None:
        for g in self.groups:
            g.close()
        buffers = [g.buffers for g in self.groups]
        self.groups = []
        for b in buffers:
            b.close()
        self.parent.close()


def _drive(local: LocalVec, sync: SyncVectorEnv, mode: AutoresetMode, steps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    n = sync.num_envs
    seen = {"terms": 0, "truncs": 0, "final": 0}
    assert_same(local.reset([seed + i for i in range(n)], None, None), sync.reset(seed=seed))
    for t in range(steps):
        if t in (60, 130):
            mask = rng.uniform(size=n) < 0.5
            mask[rng.integers(n)] = True
            seeds = [int(s) if m and t == 60 else None for s, m in zip(rng.integers(0, 2**31, size=n), mask)]
            assert_same(
                local.reset(seeds, {"opt": t}, mask),
                sync.reset(seed=seeds, options={"reset_mask": mask.copy(), "opt": t}),
                f"reset at {t}",
            )
        actions = sample_actions(sync.single_action_space, n, rng)
        out = local.step(actions)
        assert_same(out, sync.step(actions), f"step {t}")
        seen["terms"] += int(out[2].sum())
        seen["truncs"] += int(out[3].sum())
        seen["final"] += int("final_obs" in out[4])
        if mode is DISABLED and (out[2] | out[3]).any():
            ended = out[2] | out[3]
            seeds = [None] * n
            assert_same(
                local.reset(seeds, {}, ended),  # the options left once "reset_mask" is taken out
                sync.reset(seed=seeds, options={"reset_mask": ended.copy()}),
                f"disabled reset at {t}",
            )
    return seen


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
@pytest.mark.parametrize("mode", [NEXT, SAME, DISABLED], ids=lambda m: m.value)
@pytest.mark.parametrize("obs_kind, act_kind", [("dict", "box"), ("tuple_text", "multidiscrete")])
def test_groups_match_sync(obs_kind: str, act_kind: str, mode: AutoresetMode, shared_memory: bool) -> None:
    fns = diff_env_fns(5, obs_kind=obs_kind, act_kind=act_kind)
    sync = SyncVectorEnv(fns, autoreset_mode=mode)
    local = LocalVec(fns, [0, 2, 5], mode, shared_memory)
    try:
        seen = _drive(local, sync, mode, 200, seed=len(obs_kind) + 3 * shared_memory)
    finally:
        local.close()
        sync.close()
    assert seen["terms"] > 0 and seen["truncs"] > 0
    assert (seen["final"] > 0) == (mode is SAME)


def test_group_same_step_final_info_is_a_snapshot() -> None:
    """An env that refills one info dict in place: final_info must hold the step's values."""
    fns = diff_env_fns(3, ReusedInfoEnv)
    sync = SyncVectorEnv(fns, autoreset_mode=SAME)
    local = LocalVec(fns, [0, 3], SAME, False)
    try:
        seen = _drive(local, sync, SAME, 100, seed=1)
    finally:
        local.close()
        sync.close()
    assert seen["final"] > 0


def test_group_blame_on_step_error() -> None:
    envs = [DiffEnv(index=0), DiffEnv(index=1), DiffEnv(index=2, fail_step=3)]
    spec = BufferSpec.plan(3, envs[0].observation_space, envs[0].action_space, False)
    group = EnvGroup(envs, NEXT, Buffers.create(spec))
    group.reset([0, 1, 2], None, None)
    assert group.blame is None
    group.step(np.zeros(3, np.int64))
    group.step(np.zeros(3, np.int64))
    with pytest.raises(RuntimeError, match="env 2 fails at step 3"):
        group.step(np.zeros(3, np.int64))
    assert group.blame == 2
    group.blame = None  # as the worker does before each command
    with pytest.raises(TypeError):
        group.call("double", (), {})  # missing argument: raised by env 0
    assert group.blame == 0
    assert group.call("double", (1.0,), {"plus": 1.0}) == [3.0, 4.0, 5.0]
    group.blame = None
    assert group.call("index", (), {}) == [0, 1, 2]
    assert group.blame is None
    with pytest.raises(ValueError):
        group.set_attr("scale", [1.0, 2.0])  # one value short
    group.set_attr("scale", [1.0, 2.0, 3.0])
    assert [e.scale for e in envs] == [1.0, 2.0, 3.0]


def test_group_close_closes_every_env_and_reraises_first_error() -> None:
    envs = [DiffEnv(index=0), DiffEnv(index=1, fail_close=True), DiffEnv(index=2, fail_close=True)]
    spec = BufferSpec.plan(3, envs[0].observation_space, envs[0].action_space, False)
    group = EnvGroup(envs, NEXT, Buffers.create(spec))
    with pytest.raises(RuntimeError, match="env 1 fails to close"):
        group.close()
    assert group.blame == 1
    assert all(e.closed for e in envs)


def test_group_next_step_autoreset_and_render() -> None:
    envs = [DiffEnv(index=i, p_term=1.0, render_mode="rgb_array") for i in range(2)]
    spec = BufferSpec.plan(2, envs[0].observation_space, envs[0].action_space, False)
    buffers = Buffers.create(spec)
    group = EnvGroup(envs, NEXT, buffers)
    group.reset([0, 1], None, None)
    group.step(np.zeros(2, np.int64))
    assert buffers.terminations.tolist() == [True, True]
    entries = group.step(np.zeros(2, np.int64))  # the autoreset step: a reset, no step
    assert buffers.terminations.tolist() == [False, False]
    assert buffers.rewards.tolist() == [0.0, 0.0]
    assert [info["episode"] for _, info in entries] == [2, 2]
    frames = group.render()
    assert len(frames) == 2 and frames[0].dtype == np.uint8


# -- through worker processes: SAME_STEP final infos, native vector env groups ------------------


@pytest.mark.timeout(60)
def test_same_step_final_info_without_deepcopy() -> None:
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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next", "same"])
def test_native_groups_match_one_sync_vector_env(mode: AutoresetMode) -> None:
    """Groups that are VectorEnvs give what one SyncVectorEnv over all envs gives, infos included."""
    groups = [functools.partial(sync_group, [0, 1, 2], mode), functools.partial(sync_group, [3, 4], mode)]
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


TEXT_AND_DISCRETE = gym.spaces.Dict({"t": gym.spaces.Text(3), "b": gym.spaces.Discrete(2)})
SEQUENCE_AND_DISCRETE = gym.spaces.Tuple((gym.spaces.Sequence(gym.spaces.Discrete(3)), gym.spaces.Discrete(2)))
BOX_AND_DISCRETE = gym.spaces.Tuple((gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(2)))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("space", "batches"),
    [
        (TEXT_AND_DISCRETE, [{"t": ("a", "bb", "c", "ab", "b"), "b": np.array([0, 1, 1, 0, 1])}]),
        (SEQUENCE_AND_DISCRETE, [(((0,), (1, 2), (), (2,), (0, 0)), np.array([1, 0, 0, 1, 1]))]),
        (BOX_AND_DISCRETE, [[np.linspace(0, 1, 10, dtype=np.float32).reshape(5, 2), [1, 0, 1, 1, 0]]]),
        (TEXT_AND_DISCRETE, [{"t": ["a", "bb", "c", "ab", "b"], "b": [0, 1, 1, 0, 1]}]),
    ],
    ids=["dict-with-text", "tuple-with-sequence", "tuple-as-a-list", "dict-of-lists"],
)
def test_native_groups_get_their_rows_of_an_unshared_dict_or_tuple_batch(space: gym.Space, batches: list) -> None:
    """A Dict or Tuple batch that travels as one action per env (a part of no fixed shape, or
    lists) reaches a native group as a batch of its rows, as one SyncVectorEnv over all the envs
    hands them out; the group was given the list of its envs' actions, which its own batch
    reading took apart by position (wrong actions for a Tuple) or could not read (a Dict)."""
    groups = [functools.partial(any_action_group, [0, 1, 2], space), functools.partial(any_action_group, [3, 4], space)]
    sync = SyncVectorEnv(fns(AnyActionEnv, 5, action_space=space))
    try:
        with SubprocVectorEnv.from_groups(groups, context="fork") as sub:
            assert_same(sub.reset(seed=3), sync.reset(seed=3))
            for t, actions in enumerate(batches):
                assert_same(sub.step(actions), sync.step(actions), f"step {t}")
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
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shared", "unshared"])
def test_a_native_env_that_ignores_reset_mask_reports_the_observations_it_reset(
    start_method: str, shared_memory: bool
) -> None:
    """CartPole's native env takes no ``reset_mask``: it resets all its envs. The observations
    returned must be the ones it reset to (what it returns stepped alone), not the rows the mask
    left out as they were, which the next step would contradict."""
    make = functools.partial(gym.make_vec, "CartPole-v1", vectorization_mode="vector_entry_point")
    twin = make(2)
    try:
        group = [functools.partial(make, 2)]
        with SubprocVectorEnv.from_groups(group, context=start_method, shared_memory=shared_memory) as sub:
            np.testing.assert_array_equal(sub.reset(seed=0)[0], twin.reset(seed=0)[0])
            actions = np.array([0, 1])
            for _ in range(3):
                np.testing.assert_array_equal(sub.step(actions)[0], twin.step(actions)[0])
            mask = np.array([True, False])
            got = sub.reset(options={"reset_mask": mask.copy()})[0]
            want = twin.reset(options={"reset_mask": mask.copy()})[0]
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(sub.step(actions)[0], twin.step(actions)[0])
    finally:
        twin.close()


class ShapedNative(VectorEnv):
    """A native vector env whose batches take the forms a hand-written one may give: a Dict
    batch in its own key order (``order``) or with a key the space lacks (``extra``), a Tuple
    batch as a list (``list``), one column short (``short``); infos of ``info``."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, n: int, kind: str, info: Any = None) -> None:
        self.num_envs, self.kind, self.info = n, kind, info if info is not None else {}
        box = gym.spaces.Box(-100, 100, (2,), np.float32)
        if kind == "list":
            self.single_observation_space: gym.Space = gym.spaces.Tuple((box, box))
        else:
            self.single_observation_space = gym.spaces.Dict({"velocity": box, "angle": box})  # sorted
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)
        self.t = 0

    def _obs(self) -> Any:
        n, t = self.num_envs, float(self.t)
        velocity = np.arange(2 * n, dtype=np.float32).reshape(n, 2) + t
        angle = -velocity
        if self.kind == "list":
            return [velocity, angle]
        if self.kind == "short":
            return {"velocity": velocity[:, :1], "angle": angle}
        obs = {"velocity": velocity, "angle": angle}  # the env's order, not the space's
        return {**obs, "debug": np.zeros(n)} if self.kind == "extra" else obs

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        return self._obs(), self.info

    def step(self, actions: Any) -> tuple[Any, ...]:
        self.t += 1
        n = self.num_envs
        return self._obs(), np.ones(n), np.zeros(n, bool), np.zeros(n, bool), self.info


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["order", "extra", "list"])
def test_native_groups_store_batches_by_key_and_position(kind: str) -> None:
    """A Dict batch in another key order than the space's lands under its own keys (not in the
    order the values came), a key the space lacks is not read, and a Tuple batch may be a list."""
    twin = ShapedNative(3, kind)
    make = [functools.partial(ShapedNative, 2, kind), functools.partial(ShapedNative, 1, kind)]
    with SubprocVectorEnv.from_groups(make, context="fork") as sub:
        for got, t in [(sub.reset(seed=0)[0], 0), (sub.step(np.zeros(3, np.int64))[0], 1)]:
            twin.t = t
            want = twin._obs()
            keys = ["velocity", "angle"] if kind != "list" else [0, 1]
            for key in keys:
                np.testing.assert_array_equal(got[key], np.concatenate([want[key][:2], want[key][:1]]), f"{key} at {t}")
            assert sub.observation_space.contains(got)


@pytest.mark.timeout(60)
def test_a_native_batch_of_the_wrong_shape_is_refused_not_broadcast() -> None:
    with SubprocVectorEnv.from_groups([functools.partial(ShapedNative, 2, "short")], context="fork") as sub:
        with pytest.raises(InvalidObservationError, match=r"does not fit Box.*shape \(2, 2\).*got shape \(2, 1\)"):
            sub.reset(seed=0)


class BadColumnNative(ShapedNative):
    """A native vector env whose step returns ``column`` (``rewards``, ``terminations`` or
    ``truncations``) as ``value`` (``None``: a well-formed column)."""

    def __init__(self, n: int, column: str, value: Any) -> None:
        super().__init__(n, "order")
        self.column, self.value = column, value

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, rewards, terms, truncs, info = super().step(actions)
        columns = {"rewards": rewards, "terminations": terms, "truncations": truncs, self.column: self.value}
        return obs, columns["rewards"], columns["terminations"], columns["truncations"], info


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "column, value, got",
    [
        ("rewards", 1.0, "1.0 of shape (), dtype float64"),
        ("rewards", np.ones(1), "array([1.]) of shape (1,), dtype float64"),
        ("rewards", np.ones((2, 1)), "array([[1.], [1.]]) of shape (2, 1), dtype float64"),
        ("rewards", np.array(["a", "b"]), "array(['a', 'b'], dtype='<U1') of shape (2,), dtype <U1"),
        ("terminations", None, "None of shape (), dtype object"),
        ("truncations", True, "True of shape (), dtype bool"),
    ],
    ids=["scalar", "one-of-two", "column", "strings", "none", "scalar-flag"],
)
def test_native_rewards_and_flags_of_the_wrong_shape_are_refused_not_broadcast(
    column: str, value: Any, got: str
) -> None:
    """Rewards and flags that are not one number per env (a scalar, one value for two envs, an
    (n, 1) column) were broadcast into the group's rows, or failed in NumPy naming nothing; they
    raise naming the native env, the column, the expected and the received value, and the note
    names the group."""
    make = [functools.partial(ShapedNative, 1, "order"), functools.partial(BadColumnNative, 2, column, value)]
    with SubprocVectorEnv.from_groups(make, context="fork") as sub:
        sub.reset(seed=0)
        expected = "expected an array of 2 numbers of shape (2,), one per env"
        message = f"BadColumnNative, a native vector env of 2 envs, returned {column} {got}: {expected}"
        with pytest.raises(InvalidArgumentError, match=re.escape(message)) as info:
            sub.step(np.zeros(3, np.int64))
        assert info.value.__notes__ == ["raised in envs 1..2 (worker 1) during `step_wait`"]
        obs, _ = sub.reset(seed=0)  # usable again, as after any env error
        assert obs["angle"].shape == (3, 2)


@pytest.mark.timeout(60)
def test_native_rewards_and_flags_of_any_number_dtype_are_stored_as_a_list_groups_are() -> None:
    make = [
        functools.partial(BadColumnNative, 2, "rewards", [0.5, 2]),
        functools.partial(BadColumnNative, 2, "terminations", np.array([0, 1])),
    ]
    with SubprocVectorEnv.from_groups(make, context="fork") as sub:
        sub.reset(seed=0)
        _, rewards, terms, truncs, _ = sub.step(np.zeros(4, np.int64))
    assert rewards.dtype == np.float64 and rewards.tolist() == [0.5, 2.0, 1.0, 1.0]
    assert terms.dtype == np.bool_ and terms.tolist() == [False, False, False, True]
    assert truncs.dtype == np.bool_ and not truncs.any()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "info, key",
    [({"step": 0}, "'step'"), ({"msg": "hi"}, "'msg'"), ({"x": np.arange(3)}, "'x'"), ({"d": {"y": 1.0}}, "'d.y'")],
    ids=["scalar", "string", "other-length", "nested"],
)
def test_native_infos_that_are_not_per_env_are_refused_by_key(info: dict[str, Any], key: str) -> None:
    """The parent joins every group's infos by env: a value that is not one per env (which would
    be cut to the group's envs, or a string split into characters) is refused, naming the key."""
    with SubprocVectorEnv.from_groups([functools.partial(ShapedNative, 2, "order", info)], context="fork") as sub:
        with pytest.raises(InvalidInfoError, match=rf"info {re.escape(key)} is .* not one value per env"):
            sub.reset(seed=0)


@pytest.mark.timeout(60)
def test_native_infos_per_env_are_joined_by_their_masks() -> None:
    """Values of one entry per env, with or without a mask of bools (an array or a list), a
    tensor's rows, a key that is no string, a ``_key`` that is data (not bools), and a key that
    no env carries (an all-False mask). Rows masked out hold zeros, as ``_add_info`` leaves them."""
    torch = pytest.importorskip("torch")
    info = {
        "x": np.array([5, 6]),
        "names": ["a", "b"],
        "ok": np.array([True, False]),
        "y": np.array([7.0, 8.0]),
        "_y": np.array([False, True]),
        "z": [1, 2],
        "_z": [True, False],
        "t": torch.tensor([3, 4]),
        "p": np.array([0, 2]),
        "_p": np.array([9, 9]),
        0: np.array([1.5, 2.5]),
        "w": np.array([3.5, 4.5], np.float32),
        "_w": np.array([False, False]),
    }
    make = [functools.partial(ShapedNative, 2, "order", info), functools.partial(ShapedNative, 2, "order")]
    with SubprocVectorEnv.from_groups(make, context="fork") as sub:
        _, got = sub.reset(seed=0)
    np.testing.assert_array_equal(got["x"], [5, 6, 0, 0])
    np.testing.assert_array_equal(got["_x"], [True, True, False, False])
    assert list(got["names"][:2]) == ["a", "b"] and list(got["_names"]) == [True, True, False, False]
    assert got["ok"].dtype == np.bool_ and list(got["ok"]) == [True, False, False, False]
    np.testing.assert_array_equal(got["_y"], [False, True, False, False])
    assert got["y"][1] == 8.0 and got["y"][0] == 0.0
    np.testing.assert_array_equal(got["_z"], [True, False, False, False])
    assert got["z"][0] == 1 and got["z"][1] == 0
    assert [int(v) for v in got["t"][:2]] == [3, 4]
    np.testing.assert_array_equal(got["p"], [0, 2, 0, 0])
    np.testing.assert_array_equal(got[0], [1.5, 2.5, 0, 0])
    # Masked out in every env: kept with its mask, its rows empty (it vanished).
    assert got["w"].dtype == np.float32 and got["w"].tolist() == [0.0] * 4 and not got["_w"].any()


def masked_out_info() -> dict[str, Any]:
    """A native group's info whose every key is masked out (an all-False ``_key``), in each form
    a value may take: numbers of a dtype, rows of a shape, objects, bools, a masked-out dict and
    a carried dict whose only key is masked out."""
    none = np.zeros(2, np.bool_)
    return {
        "k": np.array([7, 8]),
        "_k": none,
        "f": np.array([1.5, 2.5], np.float32),
        "_f": [False, False],
        "v": np.ones((2, 3), np.float32),
        "_v": none,
        "s": ["a", "b"],
        "_s": none,
        "b": np.array([True, True]),
        "_b": none,
        "d": {"x": np.array([1, 2]), "_x": none},
        "_d": none,
        "e": {"y": np.array([1.0, 2.0]), "_y": none},
    }


#: A native group that carries two of those keys for both its envs, with other dtypes.
CARRIED_INFO = {"k": np.array([3, 4]), "f": np.array([5.0, 6.0])}


def expected_masked_join(groups: tuple[str, ...]) -> dict[str, Any]:
    """The infos of native groups of 2 envs each, ``"masked"`` (:func:`masked_out_info`) or
    ``"carried"`` (:data:`CARRIED_INFO`): every key, masked out everywhere or not, with its
    mask; masked-out rows hold zeros (None for objects), as Gymnasium's ``_add_info`` fills
    the rows of envs that did not carry a key. A key no env carries has the dtype and row
    shape of the first group's masked-out values; one that an env carries, that env's."""
    n = 2 * len(groups)
    carried = np.repeat([g == "carried" for g in groups], 2)
    none = np.zeros(n, np.bool_)
    k = np.zeros(n, np.int64)
    k[carried] = np.tile([3, 4], int(carried.sum()) // 2)
    f = np.zeros(n, np.float64 if carried.any() else np.float32)
    f[carried] = np.tile([5.0, 6.0], int(carried.sum()) // 2)
    return {
        "k": k,
        "_k": carried.copy(),
        "f": f,
        "_f": carried.copy(),
        "v": np.zeros((n, 3), np.float32),
        "_v": none.copy(),
        "s": np.full(n, None, object),
        "_s": none.copy(),
        "b": np.zeros(n, np.bool_),
        "_b": none.copy(),
        "d": {"x": np.zeros(n, np.int64), "_x": none.copy()},
        "_d": none.copy(),
        "e": {"y": np.zeros(n), "_y": none.copy()},
        "_e": ~carried,
    }


def masked_group(kind: str) -> ShapedNative:
    return ShapedNative(2, "order", masked_out_info() if kind == "masked" else CARRIED_INFO)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "groups", [("masked",), ("masked", "masked"), ("masked", "carried"), ("carried", "masked")], ids="-".join
)
@pytest.mark.parametrize("host", ["fork", "inline"])
def test_native_info_keys_masked_out_in_every_env_are_kept(groups: tuple[str, ...], host: str) -> None:
    """A native group's info key whose ``_key`` mask is all False vanished from the joined
    infos (``{}`` where the native env alone returns the key and its mask), so code that reads
    it at every step failed with KeyError only here; it is kept, with its mask, in reset,
    step and step_async/step_wait, whether workers or the parent host the group."""
    make = [functools.partial(masked_group, kind) for kind in groups]
    want = expected_masked_join(groups)
    actions = np.zeros(2 * len(groups), np.int64)
    with SubprocVectorEnv.from_groups(make, context="fork", inline_group=host == "inline") as sub:
        assert_same(sub.reset(seed=0)[1], want, "reset", ordered=False)
        assert_same(sub.step(actions)[4], want, "step", ordered=False)
        sub.step_async(actions)
        assert_same(sub.step_wait()[4], want, "step_wait", ordered=False)
    if groups == ("masked",):  # every key the native env alone returns, with its masks
        native = masked_group("masked").reset()[1]
        assert set(want) == set(native) | {"_e"} and set(want["d"]) == set(native["d"])
        for key in ("_k", "_f", "_v", "_s", "_b", "_d"):
            np.testing.assert_array_equal(want[key], native[key])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_native_info_keys_masked_out_in_every_env_are_kept_by_every_start_method(start_method: str) -> None:
    make = [functools.partial(masked_group, "masked"), functools.partial(masked_group, "carried")]
    with SubprocVectorEnv.from_groups(make, context=start_method) as sub:
        assert_same(sub.reset(seed=0)[1], expected_masked_join(("masked", "carried")), ordered=False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("groups", [("masked",), ("masked", "carried")], ids="-".join)
@pytest.mark.parametrize("host", ["fork", "inline"])
def test_native_info_keys_masked_out_in_every_env_are_kept_in_rollouts(groups: tuple[str, ...], host: str) -> None:
    make = [functools.partial(masked_group, kind) for kind in groups]
    want = expected_masked_join(groups)
    with SubprocVectorEnv.from_groups(make, context="fork", inline_group=host == "inline") as sub:
        sub.reset(seed=0)
        rollout = sub.rollout(3)
    assert len(rollout.infos) == 3
    for t, infos in enumerate(rollout.infos):
        assert_same(infos, want, f"rollout.infos[{t}]", ordered=False)


@pytest.mark.timeout(60)
def test_native_info_keys_masked_out_in_every_env_are_kept_by_recv() -> None:
    make = [functools.partial(masked_group, "masked"), functools.partial(masked_group, "carried")]
    carried = {"k": np.array([3, 4]), "_k": np.ones(2, np.bool_), "f": np.array([5.0, 6.0]), "_f": np.ones(2, np.bool_)}
    seen: list[str] = []
    with SubprocVectorEnv.from_groups(make, context="fork", batch_size=2) as sub:
        sub.async_reset(seed=0)
        # Each group's batches, until both came back a few times: which group finishes first is
        # the scheduler's (under load one worker may run many steps before the other runs once).
        while min(seen.count("masked"), seen.count("carried")) < 3 and len(seen) < 2_000:
            *_, infos, ids = sub.recv(timeout=30)
            kind = "masked" if ids[0] == 0 else "carried"
            want = expected_masked_join((kind,)) if kind == "masked" else carried
            assert_same(infos, want, f"recv {len(seen)} ({kind})", ordered=False)
            seen.append(kind)
            sub.send(np.zeros(2, np.int64), ids)
    assert min(seen.count("masked"), seen.count("carried")) >= 3, f"one group's batches never came: {seen[:20]}"


class FinalInfoNative(ShapedNative):
    """A native env under SAME_STEP whose info always carries ``final_obs`` and ``final_info``,
    masked out in every env (no episode ends)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, n: int) -> None:
        none = np.zeros(n, np.bool_)
        info = {
            "final_obs": np.ones((n, 2), np.float32),
            "_final_obs": none,
            "final_info": {"x": np.arange(n), "_x": none},
            "_final_info": none,
        }
        super().__init__(n, "order", info)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("host", ["fork", "inline"])
def test_native_final_infos_masked_out_in_every_env_are_kept(host: str) -> None:
    """As any key: ``final_obs`` as ``_add_info`` starts it (an object column of None)."""
    none = np.zeros(4, np.bool_)
    want = {
        "final_obs": np.full(4, None, object),
        "_final_obs": none,
        "final_info": {"x": np.zeros(4, np.int64), "_x": none},
        "_final_info": none,
    }
    make = [functools.partial(FinalInfoNative, 2)] * 2
    with SubprocVectorEnv.from_groups(make, autoreset_mode=SAME, context="fork", inline_group=host == "inline") as sub:
        sub.reset(seed=0)
        assert_same(sub.step(np.zeros(4, np.int64))[4], want, "step", ordered=False)
        rollout = sub.rollout(2)
    assert len(rollout.infos) == 2
    for t, infos in enumerate(rollout.infos):
        assert_same(infos, want, f"rollout.infos[{t}]", ordered=False)


@pytest.mark.timeout(60)
def test_get_attr_on_a_native_env_without_call_says_so() -> None:
    make = functools.partial(gym.make_vec, "CartPole-v1", 2, vectorization_mode="vector_entry_point")
    with SubprocVectorEnv.from_groups([make], context="fork") as sub:
        with pytest.raises(AttributeError, match="CartPoleVectorEnv, a native vector env, has no `call` method"):
            sub.get_attr("np_random_seed")
        with pytest.raises(AttributeError, match="has no `set_attr` method"):
            sub.set_attr("gravity", 1.0)
        sub.reset(seed=0)  # the env is still usable


class WholeBatchNative(ShapedNative):
    """A native vector env whose ``call`` returns one value per env, or with ``whole`` one value
    for the whole batch (a string), and whose ``render`` returns one frame per env, or with
    ``whole`` one frame."""

    def __init__(self, n: int, whole: bool) -> None:
        super().__init__(n, "order")
        self.whole = whole

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return "abc" if self.whole else ("abc",) * self.num_envs

    def render(self) -> Any:
        frame = np.zeros((3, 4, 3), np.uint8)
        return frame if self.whole else (frame,) * self.num_envs


@pytest.mark.timeout(60)
def test_native_call_and_render_results_that_are_not_one_per_env_are_refused() -> None:
    """They were split into items taken for other envs' results: ``get_attr`` on 4 envs gave
    ``('abc', 'abc', 'a', 'b', 'c')``, ``render`` a row of the frame per 'env'."""
    make = [functools.partial(WholeBatchNative, 2, False), functools.partial(WholeBatchNative, 2, True)]
    expected = "expected one result per env, 2 in a tuple or list"
    with SubprocVectorEnv.from_groups(make, context="fork") as sub:
        sub.reset(seed=0)
        with pytest.raises(InvalidArgumentError, match=re.escape(f"returned 'abc' from call('name'): {expected}")):
            sub.get_attr("name")
        with pytest.raises(InvalidArgumentError, match=re.escape(f"(3 items) from render(): {expected}")) as info:
            sub.render()
        assert info.value.__notes__ == ["raised in envs 2..3 (worker 1) during `render`"]
        assert sub.step(np.zeros(4, np.int64))[1].tolist() == [1.0] * 4  # still usable


class Interrupted(Exception):
    """What a signal handler may raise in the parent while the parent's own group stores a step."""


class InterruptingReward(float):
    """A reward whose first conversion raises :class:`Interrupted`, as if a signal handler had
    raised while the group stored the step's rewards; it converts fine afterwards."""

    raised = False

    def __float__(self) -> float:
        if not InterruptingReward.raised:
            InterruptingReward.raised = True
            raise Interrupted("raised by a signal handler")
        return float(self.real)


class InterruptedStoreEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[Any, ...]:
        return np.zeros(1, np.float32), InterruptingReward(1.0), False, False, {}


@pytest.mark.timeout(60)
def test_an_exception_raised_while_the_group_stores_a_step_is_not_swallowed() -> None:
    """The row-by-row retry that finds which env's value does not fit must not swallow an
    exception that no value caused (a signal handler's, in a parent that hosts the group)."""
    InterruptingReward.raised = False
    with SubprocVectorEnv([InterruptedStoreEnv] * 2, num_workers=0) as envs:
        envs.reset(seed=0)
        with pytest.raises(Interrupted, match="raised by a signal handler"):
            envs.step(np.zeros(2, np.int64))
    assert InterruptingReward.raised
