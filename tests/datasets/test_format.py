"""Tests of vecenv.datasets.format: reading the recorded space descriptions back, and the
Dict keys that cannot become file names."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from vecenv.datasets import UnsupportedSpaceError
from vecenv.datasets.format import space_from_description, space_leaves, space_nesting
from vecenv.spaces import describe_space

SPACES = [
    spaces.Box(np.array([0.0, -np.inf], np.float32), np.array([1.0, np.inf], np.float32)),
    spaces.Box(-3, 3, (2, 3), np.int16),
    spaces.Discrete(4, start=-1),
    spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [2, 3]]),
    spaces.MultiBinary([2, 3]),
    spaces.Dict({"b": spaces.Discrete(2), "a": spaces.Tuple([spaces.MultiBinary(3), spaces.Box(0, 1, (1,))])}),
    spaces.Box(0, 1, (2,), np.bool_),
]

#: Integer bounds that a float64 does not hold: the full int64 and uint64 ranges, and 2**53 + 1
#: (which ``Box.__eq__``, comparing bounds with ``np.allclose``, would not tell from 2**53).
WIDE_INTEGER_BOXES = [
    spaces.Box(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (2,), np.int64),
    spaces.Box(0, np.iinfo(np.uint64).max, (2,), np.uint64),
    spaces.Box(np.array([0, -(2**53) - 1]), np.array([2**53 + 1, 0]), dtype=np.int64),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda space: type(space).__name__)
def test_a_described_space_is_rebuilt_equal(space: spaces.Space) -> None:
    assert space_from_description(describe_space(space)) == space


@pytest.mark.parametrize("space", WIDE_INTEGER_BOXES, ids=["int64-range", "uint64-range", "beyond-2**53"])
def test_integer_box_bounds_are_rebuilt_exactly(space: spaces.Box) -> None:
    """The recorded bounds are exact ints; read back through a float64 they came back rounded,
    or overflowed (the int64 range's high became its low)."""
    rebuilt = space_from_description(describe_space(space))
    assert isinstance(rebuilt, spaces.Box)
    assert rebuilt.dtype == space.dtype
    for got, expected in ((rebuilt.low, space.low), (rebuilt.high, space.high)):
        assert got.dtype == expected.dtype
        assert got.tolist() == expected.tolist()


def test_an_int64_discrete_is_rebuilt_by_a_discrete_that_takes_no_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gymnasium 1.1 (setup.cfg's floor) has no ``dtype`` argument to Discrete: every int64
    Discrete, the only kind it makes, is rebuilt without one."""

    class DiscreteOfGymnasium11(spaces.Discrete):
        def __init__(self, n: int, seed: int | None = None, start: int = 0) -> None:
            super().__init__(n, seed=seed, start=start)

    description = describe_space(spaces.Dict({"a": spaces.Discrete(4, start=-1), "b": spaces.Discrete(2)}))
    monkeypatch.setattr(spaces, "Discrete", DiscreteOfGymnasium11)
    rebuilt = space_from_description(description)
    assert isinstance(rebuilt, spaces.Dict)
    assert [(type(s), s.n, s.start, s.dtype) for s in rebuilt.spaces.values()] == [
        (DiscreteOfGymnasium11, 4, -1, np.int64),
        (DiscreteOfGymnasium11, 2, 0, np.int64),
    ]


def test_rebuilt_dict_keys_keep_the_recorded_order() -> None:
    space = spaces.Dict([("z", spaces.Discrete(2)), ("a", spaces.Discrete(3))])  # not sorted
    assert list(space_from_description(describe_space(space)).spaces) == ["z", "a"]
    assert list(space_nesting(describe_space(space)).spaces) == ["z", "a"]


def test_the_nesting_of_a_leaf_type_it_cannot_rebuild_is_still_read() -> None:
    class Counter(spaces.Box):
        pass

    description = describe_space(spaces.Tuple([Counter(0, 1, (1,)), spaces.Discrete(2)]))
    with pytest.raises(
        ValueError, match="expected a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple, got 'Counter'"
    ):
        space_from_description(description)
    nesting = space_nesting(description)
    assert isinstance(nesting, spaces.Tuple) and len(nesting.spaces) == 2


def test_the_first_bad_dict_key_depth_first_is_reported() -> None:
    space = spaces.Dict({"a": spaces.Dict({"x.y": spaces.Discrete(2)}), "b/": spaces.Discrete(2)})
    with pytest.raises(UnsupportedSpaceError, match=r"^observations\.a: Dict keys must be .* got 'x\.y'$"):
        space_leaves(space, "observations")
