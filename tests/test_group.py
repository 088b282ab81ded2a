"""Unit tests, in-process (no worker processes): EnvGroup, and the spaces / buffers utilities.

``LocalVec`` wires EnvGroups to Buffers exactly as the coordinator and workers do, but in one
process, and is compared with ``SyncVectorEnv`` step by step.
"""

from __future__ import annotations

import copy as copylib
import gc
import os
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array

from tests.envs import DiffEnv, ReusedInfoEnv, diff_env_fns, make_obs_space
from tests.test_differential import assert_same, sample_actions
from vecenv.spaces import build_tree, is_fixed, leaf_layout, row_writer, to_batch, tree_assign, tree_leaves, tree_slice
from vecenv.wire.buffers import HAVE_MEMFD, SHM_PREFIX, Buffers, BufferSpec
from vecenv.worker.group import EnvGroup

NEXT, SAME, DISABLED = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED


class _Merger:
    """Gymnasium's own info batching, over ``num_envs`` rows."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def attach(parent: Buffers, start: int, stop: int) -> Buffers:
    """A worker's rows of ``parent`` mapped in this process, as a worker maps them."""
    fd = os.dup(parent.block.fd) if Buffers.needs_fd(parent.spec) else None
    return Buffers.attach(parent.spec, start, stop, fd)


def block_id(spec: BufferSpec, parent: Buffers) -> str | int:
    """What identifies the parent's block outside Python: its name, or its memfd's inode."""
    if spec.shm_name is not None:
        return spec.shm_name
    assert parent.block is not None and parent.block.fd is not None
    return os.fstat(parent.block.fd).st_ino


def block_alive(ident: str | int) -> bool:
    """Whether the block still exists for this process: its name in /dev/shm, or its memfd still
    mapped (``/proc/self/maps``) or open (``/proc/self/fd``)."""
    if isinstance(ident, str):
        return os.path.exists(os.path.join("/dev/shm", ident))
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/memfd:vecenv") and int(fields[4]) == ident:
                return True
    for fd in os.listdir("/proc/self/fd"):
        try:
            if (
                os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:vecenv")
                and os.stat(f"/proc/self/fd/{fd}").st_ino == ident
            ):
                return True
        except OSError:
            pass
    return False


class LocalVec:
    """EnvGroups over contiguous row ranges of one Buffers, driven as the coordinator drives them."""

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


# -- spaces ----------------------------------------------------------------------------------

NESTED = spaces.Dict(
    {
        "a": spaces.Tuple((spaces.Discrete(3), spaces.Box(0, 1, (2, 3), np.float32))),
        "b": spaces.MultiBinary([2, 2]),
        "c": spaces.Dict({"d": spaces.MultiDiscrete([[2, 3], [4, 5]]), "e": spaces.Box(-1, 1, (), np.float64)}),
        "f": spaces.Discrete(5, start=-2),
    }
)


@pytest.mark.parametrize(
    "space, fixed",
    [
        (spaces.Box(0, 1, (3,)), True),
        (spaces.Discrete(4), True),
        (spaces.MultiDiscrete([2, 3]), True),
        (spaces.MultiBinary(4), True),
        (NESTED, True),
        (make_obs_space("dict"), True),
        (make_obs_space("tuple"), True),
        (spaces.Text(5), False),
        (make_obs_space("tuple_text"), False),
        (spaces.Dict({"x": spaces.Discrete(2), "y": spaces.Sequence(spaces.Discrete(2))}), False),
        (spaces.Graph(spaces.Box(0, 1, (2,)), None), False),
        (spaces.OneOf([spaces.Discrete(2), spaces.Box(0, 1, (2,))]), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, gym.Space) else str(v),
)
def test_is_fixed(space: gym.Space, fixed: bool) -> None:
    assert is_fixed(space) is fixed


@pytest.mark.parametrize(
    "space",
    [
        NESTED,
        make_obs_space("dict"),
        make_obs_space("tuple"),
        spaces.Box(0, 255, (2, 2), np.uint8),
        spaces.MultiBinary(3),
    ],
    ids=["nested", "dict", "tuple", "box-uint8", "multibinary"],
)
def test_leaf_layout_matches_gymnasium_batches(space: gym.Space) -> None:
    n = 4
    expected = tree_leaves(create_empty_array(space, n, np.zeros))
    layout = leaf_layout(space, n)
    assert [(shape, dtype) for shape, dtype in layout] == [(a.shape, a.dtype) for a in expected]
    tree = build_tree(space, (np.zeros(s, d) for s, d in layout))
    assert_same(tree, create_empty_array(space, n, np.zeros))
    # row_writer places one sample per row, as gymnasium's concatenate does.
    space.seed(0)
    items = [space.sample() for _ in range(n)]
    write = row_writer(space, tree)
    for i, item in enumerate(items):
        write(i, item)
    assert_same(tree, concatenate(space, items, create_empty_array(space, n, np.zeros)))


def test_leaf_layout_rejects_unfixed_space() -> None:
    with pytest.raises(TypeError, match="no fixed shape"):
        leaf_layout(spaces.Text(4), 2)
    with pytest.raises(TypeError):
        leaf_layout(make_obs_space("tuple_text"), 2)


def test_to_batch_accepts_and_keeps_dtype() -> None:
    box = spaces.Box(-1, 1, (2,), np.float32)
    for dtype in (np.float32, np.float64):
        out = to_batch(box, np.zeros((3, 2), dtype), 3, "actions")
        assert out.dtype == dtype and out.shape == (3, 2)
    out = to_batch(spaces.Discrete(3), [0, 1, 2], 3, "actions")
    assert isinstance(out, np.ndarray) and out.shape == (3,)
    tup = spaces.Tuple((spaces.Discrete(2), spaces.Dict({"x": box})))
    out = to_batch(tup, (np.zeros(3, np.int64), {"x": np.zeros((3, 2), np.float32)}), 3, "actions")
    assert isinstance(out, tuple) and out[1]["x"].shape == (3, 2)


@pytest.mark.parametrize(
    "space, value, error, match",
    [
        (spaces.Box(-1, 1, (2,), np.float32), np.zeros((3, 3), np.float32), ValueError, r"shape \(3, 2\)"),
        (spaces.Box(-1, 1, (2,), np.float32), np.zeros((2, 2), np.float32), ValueError, "num_envs=3"),
        (spaces.Discrete(3), np.zeros(3, np.float64), TypeError, "dtype"),
        (spaces.Discrete(3), None, TypeError, "actions"),
        (spaces.Discrete(3), "012", TypeError, "actions"),
        (spaces.Box(-1, 1, (2,), np.float32), np.zeros((3, 2), np.complex64), TypeError, "dtype"),
        (spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))), (np.zeros(3, np.int64),), TypeError, "tuple of 2"),
        (spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))), np.zeros((2, 3), np.int64), TypeError, "tuple"),
        (spaces.Dict({"a": spaces.Discrete(2)}), {"b": np.zeros(3, np.int64)}, TypeError, "keys"),
        (spaces.Dict({"a": spaces.Discrete(2)}), {"a": np.zeros(4, np.int64)}, ValueError, r"actions\['a'\]"),
    ],
    ids=[
        "bad-shape",
        "bad-count",
        "float-to-int",
        "none",
        "str",
        "complex-to-float",
        "tuple-len",
        "tuple-not-tuple",
        "dict-keys",
        "dict-leaf-shape",
    ],
)
def test_to_batch_errors(space: gym.Space, value: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        to_batch(space, value, 3, "actions")


# -- buffers ---------------------------------------------------------------------------------


def test_buffer_spec_plan() -> None:
    obs, act = make_obs_space("dict"), spaces.Box(-1, 1, (2,), np.float32)
    spec = BufferSpec.plan(4, obs, act, True)
    if HAVE_MEMFD:
        assert spec.shm_name is None and Buffers.needs_fd(spec)  # an anonymous block
    else:
        assert spec.shm_name.startswith(SHM_PREFIX)
    assert spec.shared_observations and spec.shared_actions and spec.shared_flags
    fields = [f for f, _, _ in spec.layout()]
    assert fields == ["observations"] * len(leaf_layout(obs, 4)) + ["actions", "rewards", "terminations", "truncations"]
    assert spec.layout()[-3:] == [
        ("rewards", (4,), np.dtype(np.float64)),
        ("terminations", (4,), np.dtype(np.bool_)),
        ("truncations", (4,), np.dtype(np.bool_)),
    ]
    text = BufferSpec.plan(4, make_obs_space("tuple_text"), act, True)
    assert not text.shared_observations and text.shared_actions and text.shared_flags
    off = BufferSpec.plan(4, obs, act, False)
    assert off.shm_name is None and off.layout() == [] and not Buffers.needs_fd(off)
    if not HAVE_MEMFD:
        assert BufferSpec.plan(4, obs, act, True).shm_name != spec.shm_name


def test_buffers_create_attach_round_trip_and_close() -> None:
    obs_space, act_space = make_obs_space("tuple"), spaces.MultiDiscrete([3, 5])
    spec = BufferSpec.plan(5, obs_space, act_space, True)
    parent = Buffers.create(spec)
    ident = block_id(spec, parent)
    assert block_alive(ident)
    left, right = attach(parent, 0, 2), attach(parent, 2, 5)
    try:
        assert right.rewards.shape == (3,) and parent.rewards.shape == (5,)
        # A worker's writes show in the parent's rows...
        obs_space.seed(3)
        samples = [obs_space.sample() for _ in range(3)]
        write = right.observation_writer()
        for j, s in enumerate(samples):
            write(j, s)
        right.rewards[:] = [1.5, -2.0, 3.25]
        right.terminations[1] = True
        right.truncations[2] = True
        assert_same(tree_slice(parent.observations, 2, 5), tree_slice(right.observations, 0, 3))
        assert parent.rewards.tolist() == [0.0, 0.0, 1.5, -2.0, 3.25]
        assert parent.terminations.tolist() == [False, False, False, True, False]
        assert parent.truncations.tolist() == [False, False, False, False, True]
        # ... and the parent's action rows show in each worker's.
        parent.actions[:] = np.arange(10).reshape(5, 2) % 3
        assert_same(left.actions, parent.actions[:2])
        assert_same(right.actions, parent.actions[2:])
        assert left.payload() is None and right.payload() is None  # everything is shared
        del write  # it holds views of right's rows, which would keep that mapping alive
    finally:
        right.close()
        left.close()
        right.close()  # twice is safe
        assert block_alive(ident)  # only the owner releases the block
        parent.close()
        parent.close()
    assert not block_alive(ident)


def test_buffers_payload_and_receive_without_shared_memory() -> None:
    obs_space = make_obs_space("dict")
    spec = BufferSpec.plan(4, obs_space, spaces.Discrete(2), False)
    parent = Buffers.create(spec)
    worker = attach(parent, 1, 4)
    obs_space.seed(1)
    samples = [obs_space.sample() for _ in range(3)]
    write = worker.observation_writer()
    for j, s in enumerate(samples):
        write(j, s)
    worker.rewards[:] = [1.0, 2.0, 3.0]
    worker.truncations[:] = [True, False, True]
    parent.receive(1, 4, worker.payload())
    expected = concatenate(obs_space, samples, create_empty_array(obs_space, 3, np.zeros))
    assert_same(tree_slice(parent.observations, 1, 4), expected)
    assert parent.rewards.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert parent.truncations.tolist() == [False, True, False, True]
    parent.close()
    worker.close()


def test_buffers_text_observations_travel_as_objects() -> None:
    space = make_obs_space("tuple_text")
    spec = BufferSpec.plan(3, space, spaces.Discrete(2), True)
    parent = Buffers.create(spec)
    ident = block_id(spec, parent)
    worker = attach(parent, 0, 3)
    try:
        assert not parent.fixed_observations
        items = [
            ("ab", np.array([1, 2], np.float32), 1),
            ("c", np.array([3, 4], np.float32), 2),
            ("dddd", np.array([5, 6], np.float32), 3),
        ]
        write = worker.observation_writer()
        for j, item in enumerate(items):
            write(j, item)
        rows = worker.payload()
        assert rows is not None and rows.flags is None  # the flags are shared
        parent.receive(0, 3, rows)
        expected = concatenate(space, items, create_empty_array(space, 3))
        assert_same(parent.batched_observations(), expected)
        assert parent.batched_observations()[0] == ("ab", "c", "dddd")
    finally:
        worker.close()
        parent.close()
    assert not block_alive(ident)


def test_buffers_close_with_a_live_view_still_unlinks() -> None:
    spec = BufferSpec.plan(2, spaces.Box(0, 1, (3,), np.float32), spaces.Discrete(2), True)
    parent = Buffers.create(spec)
    ident = block_id(spec, parent)
    view = parent.observations  # as copy=False hands out
    view[:] = 0.5
    parent.close()
    if spec.shm_name is not None:
        assert not block_alive(ident)  # the name is gone at once
    else:
        assert block_alive(ident)  # a memfd stays mapped while the view lives...
    assert view.sum() == 3.0  # the view is still readable: the mapping was not pulled from under it
    del view
    gc.collect()
    assert not block_alive(ident)  # ... and goes with its last view
