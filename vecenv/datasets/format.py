"""The on-disk layout of a vecenv rollout dataset: field names, array layouts, and reading
back the JSON description of the spaces stored in ``metadata.json``.

Writers (``writer.py``), readers (``dataset.py``) and exporters (``minari.py``) all take
the layout from here, and the leaf naming from ``vecenv.spaces.named_leaves``, so a field's
file name and its place in the space are decided in one place. The description itself is
written by ``vecenv.spaces.describe_space``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from vecenv.datasets.errors import UnsupportedSpaceError
from vecenv.errors import InvalidArgumentError
from vecenv.spaces import leaf_layout, named_dict_keys, named_leaves

FORMAT_NAME = "vecenv-rollouts"
FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"
#: The hidden folder inside a dataset where ``episodes=N`` runs spill open episodes (removed at
#: the end; a run killed outright leaves it).
SPILL_DIR = ".spill"

#: The per-transition columns after the observation, next-observation and action leaves.
SCALAR_FIELDS: dict[str, np.dtype] = {
    "rewards": np.dtype(np.float64),
    "terminations": np.dtype(np.bool_),
    "truncations": np.dtype(np.bool_),
    "env_ids": np.dtype(np.int64),
    "episode_ids": np.dtype(np.int64),
}

_LEAF_TYPES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


@dataclass(frozen=True)
class Leaf:
    """A fixed-shape leaf of a (possibly nested) space: its file name and array layout."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of this field."""
        return self.dtype.itemsize * math.prod(self.shape)


def space_leaves(space: spaces.Space, prefix: str) -> list[Leaf]:
    """The leaves of ``space`` as files named ``prefix[.key|.index...]``, in space order.

    Raises UnsupportedSpaceError for a leaf without a fixed shape and dtype, and for Dict
    keys that cannot be part of a file name.
    """
    _check_keys(space, prefix)
    result = []
    for name, leaf in named_leaves(space, prefix):
        if not isinstance(leaf, _LEAF_TYPES):
            raise UnsupportedSpaceError(
                f"{name}: expected a fixed-shape space (Box, Discrete, MultiDiscrete, "
                f"MultiBinary, or Dict/Tuple of them), got {leaf}"
            )
        ((_, *shape), dtype) = leaf_layout(leaf, 0)[0]
        result.append(Leaf(name, tuple(shape), dtype))
    return result


def _check_keys(space: spaces.Space, prefix: str) -> None:
    for where, key in named_dict_keys(space, prefix):
        if not isinstance(key, str) or not key or any(c in key for c in "./\\"):
            raise UnsupportedSpaceError(
                f"{where}: Dict keys must be non-empty strings without '.', '/' or "
                f"'\\' (they become file names), got {key!r}"
            )


def dataset_fields(observation_space: spaces.Space, action_space: spaces.Space) -> list[Leaf]:
    """Every file of a dataset for these single-env spaces, in the order they are written."""
    return [
        *space_leaves(observation_space, "observations"),
        *space_leaves(observation_space, "next_observations"),
        *space_leaves(action_space, "actions"),
        *(Leaf(name, (), dtype) for name, dtype in SCALAR_FIELDS.items()),
    ]


def space_from_description(description: dict[str, Any]) -> spaces.Space:
    """Rebuild the space that ``vecenv.spaces.describe_space`` described (used to export
    datasets, whose metadata holds no pickled space). Raises ValueError for a type it does
    not know."""
    return _rebuild(description, _leaf_space)


def space_nesting(description: dict[str, Any]) -> spaces.Space:
    """The Dict/Tuple nesting of a described space, each leaf a bare ``Space``: all that
    ``load`` needs to nest the leaf arrays, whatever leaf types were recorded."""
    return _rebuild(description, lambda _: spaces.Space())


def _rebuild(description: dict[str, Any], leaf: Callable[[dict[str, Any]], spaces.Space]) -> spaces.Space:
    """The described space, Dict keys in the recorded order, its leaves made by ``leaf``."""
    kind = description["type"]
    if kind == "Dict":
        return spaces.Dict([(k, _rebuild(s, leaf)) for k, s in description["spaces"].items()])
    if kind == "Tuple":
        return spaces.Tuple([_rebuild(s, leaf) for s in description["spaces"]])
    return leaf(description)


def _leaf_space(description: dict[str, Any]) -> spaces.Space:
    dtype = np.dtype(description["dtype"])
    reader = _LEAF_READERS.get(description["type"])
    if reader is None:
        raise InvalidArgumentError(
            "description: expected a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple, "
            f"got {description['type']!r}"
        )
    return reader(description, dtype)


def _box(description: dict[str, Any], dtype: np.dtype) -> spaces.Space:
    shape = tuple(description["shape"])
    # Integer and bool bounds are recorded as exact ints, which are read in the Box's own dtype:
    # a float64 rounds ints beyond 2**53 and overflows on the int64 and uint64 ranges' ends.
    # Float bounds may be "inf" or "nan" strings, read as float64 and then cast.
    read_as = dtype if dtype.kind in "biu" else np.dtype(np.float64)
    low = np.array(_nested(description["low"]), dtype=read_as)
    high = np.array(_nested(description["high"]), dtype=read_as)
    return spaces.Box(
        np.broadcast_to(low, shape).astype(dtype), np.broadcast_to(high, shape).astype(dtype), shape=shape, dtype=dtype
    )


def _discrete(description: dict[str, Any], dtype: np.dtype) -> spaces.Space:
    if dtype == np.int64:
        # Gymnasium 1.1's Discrete takes no dtype (it is always int64); later ones default to int64.
        return spaces.Discrete(description["n"], start=description["start"])
    return spaces.Discrete(description["n"], start=description["start"], dtype=dtype)


def _multi_discrete(description: dict[str, Any], dtype: np.dtype) -> spaces.Space:
    return spaces.MultiDiscrete(np.array(description["nvec"]), dtype=dtype, start=np.array(description["start"]))


def _multi_binary(description: dict[str, Any], dtype: np.dtype) -> spaces.Space:
    shape = description["shape"]
    return spaces.MultiBinary(shape[0] if len(shape) == 1 else shape)


#: One reader per leaf type that ``describe_space`` describes, by the recorded type name.
_LEAF_READERS: dict[str, Callable[[dict[str, Any], np.dtype], spaces.Space]] = {
    "Box": _box,
    "Discrete": _discrete,
    "MultiDiscrete": _multi_discrete,
    "MultiBinary": _multi_binary,
}


def _nested(value: Any) -> Any:
    """Bounds as ``describe_space`` recorded them, with "inf", "-inf" and "nan" numbers again."""
    if isinstance(value, list):
        return [_nested(v) for v in value]
    return float(value) if isinstance(value, str) else value


def json_default(value: Any) -> Any:
    """What ``json`` cannot write itself (its ``default=``): NumPy scalars and arrays, sets."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
