"""``vecenv.spaces``: which spaces have a fixed layout, the leaf layout of shared arrays, the row
writers, the batch checks and the per-space walks the rollout datasets use, all in this process;
and an observation that does not fit its space, caught in a worker and named in the parent.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array

import vecenv
from tests.engine.test_differential import assert_same
from tests.helpers.envs import BadObsEnv, LooseStructEnv, fns, make_obs_space
from vecenv import SubprocVectorEnv
from vecenv.spaces import (
    build_tree,
    describe_space,
    is_fixed,
    leaf_layout,
    named_dict_keys,
    row_writer,
    to_batch,
    tree_leaves,
)

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
    # A Tuple batch with items beyond the space's: not read, as Sync's iterate reads none.
    pair = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2)))
    out = to_batch(pair, [np.zeros(3, np.int64), np.ones(3, np.int64), "extra"], 3, "actions")
    assert isinstance(out, tuple) and len(out) == 2 and out[1].tolist() == [1, 1, 1]


def test_an_action_batch_numpy_cannot_take_says_why() -> None:
    """A tensor that requires grad (a policy's output not detached) is refused by NumPy, as by
    SyncVectorEnv; its repr is cut short before ``requires_grad=True``, so the reason is told."""
    torch = pytest.importorskip("torch")
    box = spaces.Box(-1, 1, (2,), np.float32)
    actions = torch.zeros((64, 2), requires_grad=True)
    refused = r"^`actions` must be array-like, got tensor\(\[\["
    with pytest.raises(vecenv.errors.ArgumentTypeError, match=refused) as info:
        to_batch(box, actions, 64, "actions")
    assert "(numpy.asarray raised RuntimeError: Can't call numpy() on Tensor that requires grad" in str(info.value)
    assert "detach()" in str(info.value)
    assert to_batch(box, actions.detach(), 64, "actions").shape == (64, 2)


@pytest.mark.parametrize(
    ("space", "value"),
    [
        (spaces.Box(0, 5, (), np.uint8), 1),  # an int is an int64, which casts to no unsigned dtype
        (spaces.Box(0, 1, (), np.uint64), 300),
        (spaces.Box(-1, 1, (), np.float32), 2**100),  # beyond int64: an object array
        (spaces.Box(-1, 1, (), np.float16), 2**64),
    ],
)
def test_scalar_observations_that_sync_cannot_stack_raise(space: gym.Space, value: int) -> None:
    """A Python int that SyncVectorEnv's np.stack refuses for a scalar space is refused here too."""
    with pytest.raises(TypeError):
        SyncVectorEnv([lambda: ConstantObsEnv(space, value)]).reset(seed=0)
    write = row_writer(space, create_empty_array(space, 2))
    with pytest.raises(vecenv.InvalidObservationError, match="does not fit"):
        write(0, value)


@pytest.mark.parametrize(
    ("space", "value"),
    [
        (spaces.Box(0, 5, (), np.int8), 3),
        (spaces.Box(-1, 1, (), np.int16), 40_000),  # wraps, as np.stack casts it
        (spaces.Box(-1, 1, (), np.float32), 7),
        (spaces.Box(-1, 1, (), np.float16), 0.1),
        (spaces.Box(0, 1, (), np.uint8), np.uint8(200)),
        (spaces.Box(0, 1, (), np.bool_), True),
        (spaces.Box(-1, 1, (), np.int64), 2**63),  # a uint64, which wraps into an int64
    ],
)
def test_scalar_observations_are_stored_as_sync_stacks_them(space: gym.Space, value: Any) -> None:
    sync = SyncVectorEnv([lambda: ConstantObsEnv(space, value)])
    want = sync.reset(seed=0)[0]
    sync.close()
    tree = create_empty_array(space, 1)
    row_writer(space, tree)(0, value)
    assert tree.dtype == want.dtype and tree.tolist() == want.tolist()


class _Numpy1Ints(np.ndarray):
    """An array that stores a Python int out of its dtype's range as numpy 1.24-1.26 do: with a
    DeprecationWarning (an error under ``-W error``); numpy 2 raises OverflowError instead."""

    def __setitem__(self, key: Any, value: Any) -> None:
        info = np.iinfo(self.dtype) if self.dtype.kind in "iu" else None
        if info is not None and type(value) is int and not info.min <= value <= info.max:
            warnings.warn(f"out-of-bound Python integer {value} for {self.dtype}", DeprecationWarning, stacklevel=2)
        super().__setitem__(key, value)


@pytest.mark.parametrize(("dtype", "value"), [(np.int8, 1000), (np.int16, -40_000), (np.int32, 2**31)])
def test_scalar_observations_out_of_range_never_reach_numpy_as_python_ints(dtype: type, value: int) -> None:
    """Numpy 1.x warns on storing such an int (the worker's ``-W error`` makes it an error): the
    writer casts it as SyncVectorEnv's np.stack does, through an array, on every numpy."""
    space = spaces.Box(-1, 1, (), dtype)
    sync = SyncVectorEnv([lambda: ConstantObsEnv(space, value)])
    want = sync.reset(seed=0)[0]
    sync.close()
    tree = create_empty_array(space, 1).view(_Numpy1Ints)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row_writer(space, tree)(0, value)
    assert tree.tolist() == want.tolist()


class ConstantObsEnv(gym.Env):
    """Returns ``value`` as every observation of ``observation_space``."""

    def __init__(self, observation_space: gym.Space, value: Any) -> None:
        self.observation_space, self.action_space, self.value = observation_space, spaces.Discrete(2), value

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        return self.value, {}


@pytest.mark.parametrize(
    "space, value, error, match",
    [
        (spaces.Box(-1, 1, (2,), np.float32), np.zeros((3, 3), np.float32), ValueError, r"shape \(3, 2\)"),
        (spaces.Box(-1, 1, (2,), np.float32), np.zeros((2, 2), np.float32), ValueError, "a row for each of the 3 envs"),
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


# -- an observation that does not fit, from a worker ---------------------------------------------


def _full_message(exc: BaseException) -> str:
    """The message and notes of an exception (the env index travels in a note)."""
    return "\n".join([str(exc), *getattr(exc, "__notes__", [])])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", ["tuple-list", "tuple-extra", "dict-extra"])
def test_loose_structured_observations_batch_as_in_sync(kind: str, num_workers: int) -> None:
    """A Tuple observation given as a list, or with items (keys) beyond the space's: batched as
    SyncVectorEnv batches them, through episodes that end and autoreset."""
    make = fns(LooseStructEnv, 3, kind=kind)
    envs = SubprocVectorEnv(make, num_workers=num_workers)
    sync = SyncVectorEnv(make)
    try:
        assert_same(envs.reset(seed=0), sync.reset(seed=0), "reset")
        for t, actions in enumerate(np.random.default_rng(0).integers(0, 2, (12, 3))):
            assert_same(envs.step(actions), sync.step(actions), f"step {t}")
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
def test_structured_observation_missing_a_part_raises() -> None:
    """Fewer Tuple items, or a missing Dict key, than the space has: an error naming the space."""
    space = spaces.Dict({"a": spaces.Discrete(3), "b": spaces.Discrete(3)})
    write = row_writer(space, create_empty_array(space, 2))
    with pytest.raises(vecenv.InvalidObservationError, match=r"keys \['a', 'b'\], got keys \['a', 'c'\]"):
        write(0, {"a": 1, "c": 2})
    pair = spaces.Tuple((spaces.Discrete(3), spaces.Discrete(3)))
    write = row_writer(pair, create_empty_array(pair, 2))
    with pytest.raises(vecenv.InvalidObservationError, match="a tuple of 2 values"):
        write(0, [1])
    with pytest.raises(vecenv.InvalidObservationError, match="a tuple of 2 values"):
        write(0, "ab")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["reset", "step"])
@pytest.mark.parametrize("kind", ["box", "discrete"])
def test_observation_that_does_not_fit_the_space_raises(kind: str, when: str) -> None:
    make = fns(BadObsEnv, 4, bad=3, kind=kind, when=when)
    envs = SubprocVectorEnv(make, num_workers=2)
    sync = SyncVectorEnv(make)
    try:

        def run(v: Any) -> None:
            v.reset(seed=0)
            v.step(np.zeros(4, np.int64))

        with pytest.raises(vecenv.InvalidObservationError) as info:
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


def test_describe_space_records_each_type_and_what_rebuilds_it() -> None:
    space = spaces.Tuple(
        [
            spaces.Box(np.array([0.0, -np.inf], np.float32), np.array([1.0, np.inf], np.float32)),
            spaces.Dict({"d": spaces.Discrete(3, start=1), "m": spaces.MultiDiscrete([2, 4], start=[0, 1])}),
            spaces.MultiBinary(5),
            spaces.Box(-2, 2, (2, 2), np.int64),
        ]
    )
    assert describe_space(space) == {
        "type": "Tuple",
        "spaces": [
            {"type": "Box", "shape": [2], "dtype": "float32", "low": [0.0, "-inf"], "high": [1.0, "inf"]},
            {
                "type": "Dict",
                "spaces": {
                    "d": {"type": "Discrete", "shape": [], "dtype": "int64", "n": 3, "start": 1},
                    "m": {"type": "MultiDiscrete", "shape": [2], "dtype": "int64", "nvec": [2, 4], "start": [0, 1]},
                },
            },
            {"type": "MultiBinary", "shape": [5], "dtype": "int8"},
            {"type": "Box", "shape": [2, 2], "dtype": "int64", "low": -2, "high": 2},
        ],
    }


def test_named_dict_keys_lists_each_key_before_the_keys_below_it() -> None:
    space = spaces.Dict(
        {
            "a": spaces.Tuple([spaces.Discrete(2), spaces.Dict({"x": spaces.Discrete(2)})]),
            "b": spaces.Dict({"y": spaces.Discrete(2)}),
        }
    )
    assert named_dict_keys(space, "obs") == [("obs", "a"), ("obs.a.1", "x"), ("obs", "b"), ("obs.b", "y")]
    assert named_dict_keys(spaces.Box(0, 1, (2,)), "obs") == []


class _MyBox(gym.spaces.Box):
    """A Box subclass (it might define its own ``==``): never vouched for by the exact test."""


_IMAGE = gym.spaces.Box(0, 255, (4, 4, 3), np.uint8)


@pytest.mark.parametrize(
    ("expected", "received", "exact"),
    [
        pytest.param(_IMAGE, gym.spaces.Box(0, 255, (4, 4, 3), np.uint8), True, id="box-copy"),
        pytest.param(_IMAGE, gym.spaces.Box(0, 254, (4, 4, 3), np.uint8), False, id="box-bound"),
        pytest.param(_IMAGE, gym.spaces.Box(0, 255, (4, 4, 3), np.int16), False, id="box-dtype"),
        pytest.param(
            gym.spaces.Box(0.0, 1.0, (2,), np.float64),
            gym.spaces.Box(0.0, 1.0 + 1e-12, (2,), np.float64),
            False,
            id="box-within-tolerance",
        ),
        pytest.param(_IMAGE, _MyBox(0, 255, (4, 4, 3), np.uint8), False, id="box-subclass"),
        pytest.param(
            gym.spaces.Dict({"a": _IMAGE, "b": gym.spaces.Discrete(3)}),
            gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (4, 4, 3), np.uint8), "b": gym.spaces.Discrete(3)}),
            True,
            id="dict-copy",
        ),
        pytest.param(
            gym.spaces.Dict({"a": _IMAGE, "b": gym.spaces.Discrete(3)}),
            gym.spaces.Dict({"a": _IMAGE, "b": gym.spaces.Discrete(4)}),
            False,
            id="dict-leaf",
        ),
        pytest.param(
            gym.spaces.Tuple((_IMAGE, gym.spaces.Discrete(3))),
            gym.spaces.Tuple((gym.spaces.Box(0, 255, (4, 4, 3), np.uint8), gym.spaces.Discrete(3))),
            True,
            id="tuple-copy",
        ),
        pytest.param(gym.spaces.Discrete(3), gym.spaces.Discrete(3), False, id="discrete-not-tested"),
    ],
)
def test_exactly_equal_only_vouches_for_spaces_equal_by_gymnasium(
    expected: gym.Space, received: gym.Space, exact: bool
) -> None:
    """``exactly_equal`` is a fast path: ``True`` only where ``==`` says equal too, so the fit
    rules that ask it first give ``==``'s answers."""
    from gymnasium.spaces.utils import is_space_dtype_shape_equiv

    from vecenv.spaces import exactly_equal, fits_layout
    from vecenv.wire.protocol import SpaceKind, SpaceRule, space_fits

    assert exactly_equal(expected, received) is exact
    if exact:
        assert received == expected
    assert space_fits(SpaceRule.SAME, SpaceKind.OBSERVATION, expected, received) is bool(received == expected)
    loose = received == expected or is_space_dtype_shape_equiv(expected, received)
    assert fits_layout(expected, received) is bool(loose)


@pytest.mark.parametrize("mode", ["AS_ENV_0", "SAME", "DIFFERENT"])
def test_space_fits_asks_exactly_equal_once(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``AS_ENV_0`` the fit asked ``exactly_equal`` and then ``fits_layout``, which asks it
    again: the bounds of a space that is not an exact copy were compared twice per env."""
    import vecenv.spaces
    import vecenv.wire.protocol
    from vecenv.wire.protocol import SpaceKind, SpaceRule, space_fits

    asked: list[gym.Space] = []
    real = vecenv.spaces.exactly_equal

    def counted(expected: gym.Space, received: gym.Space) -> bool:
        asked.append(received)
        return real(expected, received)

    monkeypatch.setattr(vecenv.spaces, "exactly_equal", counted)
    monkeypatch.setattr(vecenv.wire.protocol, "exactly_equal", counted)
    # Other bounds: not exactly equal, so each rule goes on to its own comparison.
    other = gym.spaces.Box(0, 254, (4, 4, 3), np.uint8)
    assert space_fits(SpaceRule[mode], SpaceKind.OBSERVATION, _IMAGE, other) is (mode != "SAME")
    assert asked == [other]
