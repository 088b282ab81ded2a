"""Tests of the per-space walks in vecenv.spaces that the rollout datasets use."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from vecenv.spaces import describe_space, named_dict_keys


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
