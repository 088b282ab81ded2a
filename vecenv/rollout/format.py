"""The on-disk layout of a vecenv rollout dataset: field names, array layouts, and the
JSON description of the spaces stored in ``metadata.json``.

Writers (``writer.py``), readers (``dataset.py``) and exporters (``minari.py``) all take
the layout from here, and the leaf naming from ``vecenv.spaces.named_leaves``, so a field's
file name and its place in the space are decided in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from vecenv.rollout.errors import UnsupportedSpaceError
from vecenv.spaces import leaf_layout, named_leaves, shape_of

FORMAT_NAME = "vecenv-rollouts"
FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"

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
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            if not isinstance(key, str) or not key or any(c in key for c in "./\\"):
                raise UnsupportedSpaceError(
                    f"{prefix}: Dict keys must be non-empty strings without '.', '/' or "
                    f"'\\' (they become file names), got {key!r}"
                )
            _check_keys(sub, f"{prefix}.{key}")
    elif isinstance(space, spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            _check_keys(sub, f"{prefix}.{i}")


def dataset_fields(observation_space: spaces.Space, action_space: spaces.Space) -> list[Leaf]:
    """Every file of a dataset for these single-env spaces, in the order they are written."""
    return [
        *space_leaves(observation_space, "observations"),
        *space_leaves(observation_space, "next_observations"),
        *space_leaves(action_space, "actions"),
        *(Leaf(name, (), dtype) for name, dtype in SCALAR_FIELDS.items()),
    ]


def _json_number_array(values: np.ndarray) -> Any:
    """A JSON-safe form of a bounds array: one number if all equal, else a nested list.

    Non-finite values become the strings "inf", "-inf" and "nan" (strict JSON has none).
    """

    def safe(x: Any) -> Any:
        if isinstance(x, list):
            return [safe(item) for item in x]
        return x if not isinstance(x, float) or math.isfinite(x) else str(x)

    flat = values.reshape(-1)
    return safe(flat[0].item() if flat.size and np.all(flat == flat[0]) else values.tolist())


def describe_space(space: spaces.Space) -> dict[str, Any]:
    """A structured, JSON-serialisable description of a supported space.

    ``load`` uses it to rebuild Dict/Tuple nesting; people use it to know what the
    arrays mean without unpickling anything.
    """
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: describe_space(s) for k, s in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [describe_space(s) for s in space.spaces]}
    description: dict[str, Any] = {
        "type": type(space).__name__,
        "shape": list(shape_of(space)),
        "dtype": str(np.dtype(space.dtype)),
    }
    if isinstance(space, spaces.Box):
        description["low"] = _json_number_array(space.low)
        description["high"] = _json_number_array(space.high)
    elif isinstance(space, spaces.Discrete):
        description["n"] = int(space.n)
        description["start"] = int(space.start)
    elif isinstance(space, spaces.MultiDiscrete):
        description["nvec"] = space.nvec.tolist()
        description["start"] = space.start.tolist()
    return description


def _number(value: Any) -> Any:
    return float(value) if isinstance(value, str) else value


def space_from_description(description: dict[str, Any]) -> spaces.Space:
    """Rebuild the space that :func:`describe_space` described (used to export old
    datasets, whose metadata holds no pickled space)."""
    kind = description["type"]
    if kind == "Dict":
        return spaces.Dict({k: space_from_description(s) for k, s in description["spaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple([space_from_description(s) for s in description["spaces"]])
    dtype = np.dtype(description["dtype"])
    if kind == "Box":
        shape = tuple(description["shape"])
        low = np.array(_nested(description["low"]), dtype=np.float64)
        high = np.array(_nested(description["high"]), dtype=np.float64)
        return spaces.Box(
            np.broadcast_to(low, shape).astype(dtype),
            np.broadcast_to(high, shape).astype(dtype),
            shape=shape,
            dtype=dtype,
        )
    if kind == "Discrete":
        return spaces.Discrete(description["n"], start=description["start"], dtype=dtype)
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.array(description["nvec"]), dtype=dtype, start=np.array(description["start"]))
    if kind == "MultiBinary":
        shape = description["shape"]
        return spaces.MultiBinary(shape[0] if len(shape) == 1 else shape)
    raise ValueError(f"description: expected a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple, got {kind!r}")


def _nested(value: Any) -> Any:
    if isinstance(value, list):
        return [_nested(v) for v in value]
    return _number(value)
