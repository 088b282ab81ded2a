"""Space utilities: which spaces fit in fixed arrays, their layout, and batched-value checks.

A value of a *fixed* space (Box, Discrete, MultiDiscrete, MultiBinary and any Tuple/Dict nesting
of them) has the same shape and dtype every time, so a batch of them lives in preallocated arrays
("array trees": an ndarray, or a tuple/dict of trees mirroring the space). Values of other spaces
(Text, Sequence, Graph, OneOf, custom spaces) travel as Python objects instead.

Every operation is a ``functools.singledispatch`` function with one registration per space type,
as in ``gymnasium.vector.utils``; composite spaces recurse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import singledispatch
from typing import Any

import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Tuple
from gymnasium.spaces.utils import is_space_dtype_shape_equiv

from vecenv.errors import ArgumentTypeError, InvalidArgumentError, InvalidObservationError, describe

__all__ = [
    "is_fixed",
    "leaf_layout",
    "named_leaves",
    "leaf_values",
    "build_tree",
    "tree_leaves",
    "tree_map",
    "tree_slice",
    "tree_copy",
    "tree_containers",
    "tree_assign",
    "row_writer",
    "write_batch",
    "to_batch",
    "check_action_count",
    "batch_of_items",
    "empty_part",
    "is_array_batch",
    "describe_space",
    "named_dict_keys",
    "fits_layout",
    "exactly_equal",
]


@singledispatch
def _leaf_shape(space: Space) -> tuple[int, ...]:
    return shape_of(space)


@_leaf_shape.register(Discrete)
def _discrete_shape(space: Discrete) -> tuple[int, ...]:
    return ()


@_leaf_shape.register(MultiDiscrete)
def _multi_discrete_shape(space: MultiDiscrete) -> tuple[int, ...]:
    return tuple(space.nvec.shape)


def shape_of(space: Space) -> tuple[int, ...]:
    """The shape of a space that has one (every fixed space), for the type checker too."""
    shape = space.shape
    if shape is None:
        raise ArgumentTypeError(f"space {space} has no fixed shape")
    return tuple(shape)


@singledispatch
def is_fixed(space: Space) -> bool:
    """Whether every value of ``space`` fits one preallocated array slot."""
    return False


@is_fixed.register(Box)
@is_fixed.register(Discrete)
@is_fixed.register(MultiDiscrete)
@is_fixed.register(MultiBinary)
def _is_fixed_base(space: Space) -> bool:
    return True


@is_fixed.register(Tuple)
def _is_fixed_tuple(space: Tuple) -> bool:
    return all(is_fixed(s) for s in space.spaces)


@is_fixed.register(Dict)
def _is_fixed_dict(space: Dict) -> bool:
    return all(is_fixed(s) for s in space.spaces.values())


def leaf_layout(space: Space, n: int) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Shapes and dtypes of the arrays that hold ``n`` values of a fixed ``space``, in tree order.

    The dtypes are those ``gymnasium.vector.utils.create_empty_array`` chooses, so batches built
    here compare equal, dtype included, to ``SyncVectorEnv``'s.
    """
    return [((n, *_leaf_shape(leaf)), np.dtype(leaf.dtype)) for leaf in _leaves(space)]


@singledispatch
def _leaves(space: Space) -> Iterator[Space]:
    raise ArgumentTypeError(f"space {space} has no fixed shape; it cannot live in an array")


@_leaves.register(Box)
@_leaves.register(Discrete)
@_leaves.register(MultiDiscrete)
@_leaves.register(MultiBinary)
def _base_leaves(space: Space) -> Iterator[Space]:
    yield space


@_leaves.register(Tuple)
def _tuple_leaves(space: Tuple) -> Iterator[Space]:
    for sub in space.spaces:
        yield from _leaves(sub)


@_leaves.register(Dict)
def _dict_leaves(space: Dict) -> Iterator[Space]:
    for sub in space.spaces.values():
        yield from _leaves(sub)


@singledispatch
def named_leaves(space: Space, prefix: str = "") -> list[tuple[str, Space]]:
    """Every leaf of ``space`` with a dotted name, in :func:`leaf_layout` order.

    Names join ``prefix``, Dict keys and Tuple indices with dots (``obs.pos``, ``act.0``,
    ``obs.a.1``); a space that is not a Dict or Tuple is one leaf named ``prefix``. Leaves
    without a fixed shape are listed too, so a caller can name the one it cannot store.
    The rollout files are named this way, so array layout and file names share one walk.
    """
    return [(prefix, space)]


@named_leaves.register(Tuple)
def _tuple_named_leaves(space: Tuple, prefix: str = "") -> list[tuple[str, Space]]:
    return [leaf for i, sub in enumerate(space.spaces) for leaf in named_leaves(sub, f"{prefix}.{i}")]


@named_leaves.register(Dict)
def _dict_named_leaves(space: Dict, prefix: str = "") -> list[tuple[str, Space]]:
    return [leaf for key, sub in space.spaces.items() for leaf in named_leaves(sub, f"{prefix}.{key}")]


@singledispatch
def leaf_values(space: Space, value: Any) -> list[Any]:
    """The leaves of a value (single or batched) of ``space``, in :func:`named_leaves` order.

    Unlike :func:`tree_leaves` the order follows the space, not the value, so a dict whose keys
    come in another order still lines up with the space's leaves.
    """
    return [value]


@leaf_values.register(Tuple)
def _tuple_leaf_values(space: Tuple, value: Any) -> list[Any]:
    return [v for i, sub in enumerate(space.spaces) for v in leaf_values(sub, value[i])]


@leaf_values.register(Dict)
def _dict_leaf_values(space: Dict, value: Any) -> list[Any]:
    return [v for key, sub in space.spaces.items() for v in leaf_values(sub, value[key])]


@singledispatch
def build_tree(space: Space, arrays: Iterator[np.ndarray]) -> Any:
    """Arrange flat leaf arrays (in :func:`leaf_layout` order) into the nesting of ``space``."""
    return next(arrays)


@build_tree.register(Tuple)
def _tuple_tree(space: Tuple, arrays: Iterator[np.ndarray]) -> Any:
    return tuple(build_tree(s, arrays) for s in space.spaces)


@build_tree.register(Dict)
def _dict_tree(space: Dict, arrays: Iterator[np.ndarray]) -> Any:
    return {k: build_tree(s, arrays) for k, s in space.spaces.items()}


def tree_leaves(tree: Any) -> list[np.ndarray]:
    """The arrays of a tree, in :func:`leaf_layout` order."""
    if isinstance(tree, tuple):
        return [a for t in tree for a in tree_leaves(t)]
    if isinstance(tree, dict):
        return [a for t in tree.values() for a in tree_leaves(t)]
    return [tree]


def tree_map(fn: Callable[[np.ndarray], Any], tree: Any) -> Any:
    """A tree of the same shape (tuples and dicts) with ``fn`` applied to each array."""
    if isinstance(tree, tuple):
        return tuple(tree_map(fn, t) for t in tree)
    if isinstance(tree, dict):
        return {k: tree_map(fn, t) for k, t in tree.items()}
    return fn(tree)


def tree_slice(tree: Any, start: int, stop: int) -> Any:
    """Views of rows ``[start, stop)`` of every array of a tree."""
    return tree_map(lambda a: a[start:stop], tree)


def tree_copy(tree: Any) -> Any:
    """A deep copy of a tree of arrays."""
    return tree_map(np.copy, tree)


def tree_containers(tree: Any) -> Any:
    """``tree`` in new dicts and tuples, with the same leaves (no array is copied); other
    containers (a ``GraphInstance``, say) are leaves."""
    if type(tree) is dict:
        return {key: tree_containers(value) for key, value in tree.items()}
    if type(tree) is tuple:
        return tuple(tree_containers(value) for value in tree)
    return tree


def tree_assign(dst: Any, src: Any) -> None:
    """Copy every array of ``src`` into the matching array of ``dst`` (same nesting)."""
    for d, s in zip(tree_leaves(dst), tree_leaves(src), strict=True):
        np.copyto(d, s, casting="unsafe")


Writer = Callable[[int, Any], None]


@singledispatch
def row_writer(space: Space, tree: Any) -> Writer:
    """A fast ``write(row, value)`` that stores one value of a fixed ``space`` into ``tree``.

    A value that does not fit the space's shape, or whose dtype does not cast to the space's
    within its kind, raises :class:`~vecenv.errors.InvalidObservationError` instead of being
    broadcast or truncated into the row (``SyncVectorEnv`` raises on these too). A Tuple's value
    may be any sequence and a Dict's any mapping; items and keys beyond the space's are not
    read, as ``SyncVectorEnv`` batches them. The common case, an array (or scalar) of exactly
    the row's shape and dtype, costs one comparison.
    """
    raise ArgumentTypeError(f"space {space} has no fixed shape; it cannot live in an array")


@row_writer.register(Box)
@row_writer.register(Discrete)
@row_writer.register(MultiDiscrete)
@row_writer.register(MultiBinary)
def _leaf_writer(space: Space, array: np.ndarray) -> Writer:
    shape, dtype = array.shape[1:], array.dtype
    ndarray = np.ndarray

    def check(value: Any) -> Any:
        try:
            item = np.asarray(value)
        except Exception:
            item = None
        if item is None or item.shape != shape or not np.can_cast(item.dtype, dtype, casting="same_kind"):
            got = "not array-like" if item is None else f"shape {item.shape}, dtype {item.dtype}"
            raise InvalidObservationError(
                f"the observation does not fit {space} (shape {shape}, dtype {dtype}): got {describe(value)} ({got})"
            )
        return item

    if shape == ():
        # Scalars (Discrete, or a shape-() Box) arrive as Python or numpy scalars. The Python
        # types stored without a check are those SyncVectorEnv's np.stack casts to the dtype
        # whatever their value (a Python int or float is no bool; an int becomes an int64, which
        # casts to no unsigned dtype within its kind, and one beyond int64 to no dtype at all).
        kind = dtype.kind
        fast = {dtype.type, bool} if kind == "b" else {dtype.type, int} if kind == "i" else {dtype.type, float}
        if kind == "u":
            fast = {dtype.type}
        # A Python int out of a signed dtype's range: SyncVectorEnv makes it an array first and
        # casts that (wrapping, as C does), or fails on one that no dtype holds. Stored directly,
        # numpy 2 raises OverflowError and numpy 1.24-1.26 a DeprecationWarning (an error under
        # ``-W error``, in the worker that stores it), so such an int is stored as check's array.
        low, high = (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)) if kind == "i" else (0, -1)

        def write_scalar(row: int, value: Any) -> None:
            if type(value) not in fast or (type(value) is int and not low <= value <= high):
                value = check(value)
            array[row] = value

        return write_scalar

    def write(row: int, value: Any) -> None:
        if type(value) is not ndarray or value.shape != shape or value.dtype != dtype:
            value = check(value)
        array[row] = value

    return write


@row_writer.register(Tuple)
def _tuple_writer(space: Tuple, tree: tuple) -> Writer:
    parts = [row_writer(s, t) for s, t in zip(space.spaces, tree, strict=True)]

    def write(row: int, value: Any) -> None:
        # As SyncVectorEnv batches it: item ``i`` of any sequence (a list too), extra items unread.
        if type(value) is not tuple or len(value) != len(parts):
            indexable = isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes))
            if not indexable or len(value) < len(parts):
                raise InvalidObservationError(
                    f"the observation does not fit {space}: expected a tuple of {len(parts)} values, "
                    f"got {describe(value)}"
                )
        for part, item in zip(parts, value):
            part(row, item)

    return write


@row_writer.register(Dict)
def _dict_writer(space: Dict, tree: dict) -> Writer:
    keyed = {k: row_writer(s, tree[k]) for k, s in space.spaces.items()}

    def write(row: int, value: Any) -> None:
        # As SyncVectorEnv batches it: the space's keys of any mapping, other keys unread.
        if not isinstance(value, Mapping) or not keyed.keys() <= value.keys():
            got = f"keys {sorted(value, key=str)}" if isinstance(value, Mapping) else describe(value)
            raise InvalidObservationError(
                f"the observation does not fit {space}: expected a dict with keys {sorted(keyed)}, got {got}"
            )
        for key, part in keyed.items():
            part(row, value[key])

    return write


def write_batch(space: Space, tree: Any, batch: Any, rows: Any) -> None:
    """Store a native vector env's batch of a fixed ``space`` into ``rows`` of ``tree`` (arrays
    of ``len(tree)`` rows each, as :func:`build_tree` lays them out).

    As :func:`row_writer` stores one env's value, for a whole batch: a Dict's values are found by
    key in any mapping (other keys unread), a Tuple's by position in any sequence, and each
    leaf must be an array of the batch's shape whose dtype casts to the space's within its kind.
    Anything else raises :class:`~vecenv.errors.InvalidObservationError` rather than being
    broadcast into the rows or stored under another key.
    """
    if isinstance(space, Dict):
        if not isinstance(batch, Mapping) or not space.spaces.keys() <= batch.keys():
            got = f"keys {sorted(batch, key=str)}" if isinstance(batch, Mapping) else describe(batch)
            raise InvalidObservationError(
                f"the batch of observations does not fit {space}: expected a dict with keys {sorted(space.spaces)}, "
                f"got {got}"
            )
        for key, sub in space.spaces.items():
            write_batch(sub, tree[key], batch[key], rows)
        return
    if isinstance(space, Tuple):
        indexable = isinstance(batch, (Sequence, np.ndarray)) and not isinstance(batch, (str, bytes))
        if not indexable or len(batch) < len(space.spaces):
            raise InvalidObservationError(
                f"the batch of observations does not fit {space}: expected a tuple of {len(space.spaces)} batches, "
                f"got {describe(batch)}"
            )
        for sub, part, item in zip(space.spaces, tree, batch):
            write_batch(sub, part, item, rows)
        return
    array = batch if isinstance(batch, np.ndarray) else np.asarray(batch)
    if array.shape != tree.shape or not np.can_cast(array.dtype, tree.dtype, casting="same_kind"):
        raise InvalidObservationError(
            f"the batch of observations does not fit {space} for {len(tree)} envs (shape {tree.shape}, "
            f"dtype {tree.dtype}): got shape {array.shape}, dtype {array.dtype}"
        )
    tree[rows] = array[rows]


@singledispatch
def nests_as(space: Space, value: Any) -> bool:
    """Whether ``value`` nests as a batch of ``space`` does: a tuple of the same length for each
    Tuple, a mapping with the same keys for each Dict, anything else for the other spaces."""
    return not isinstance(value, (tuple, Mapping))


@nests_as.register(Tuple)
def _tuple_nests_as(space: Tuple, value: Any) -> bool:
    return (
        type(value) is tuple
        and len(value) == len(space.spaces)
        and all(nests_as(sub, part) for sub, part in zip(space.spaces, value, strict=True))
    )


@nests_as.register(Dict)
def _dict_nests_as(space: Dict, value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and value.keys() == space.spaces.keys()
        and all(nests_as(sub, value[key]) for key, sub in space.spaces.items())
    )


@singledispatch
def is_array_batch(space: Space, value: Any) -> bool:
    """Whether a batch of a fixed ``space`` is given as ndarrays (not lists or scalars) that the
    shared rows can hold as they are. A ``numpy.ma.MaskedArray`` with masked entries is not: the
    rows would keep the data under the mask and lose the mask, while ``SyncVectorEnv`` hands each
    env its item (``numpy.ma.masked``, or a row with masked entries); as items, each env gets
    exactly that. With nothing masked its data are the values, and the rows hold them."""
    return isinstance(value, np.ndarray) and not np.ma.is_masked(value)


@is_array_batch.register(Tuple)
def _tuple_is_array_batch(space: Tuple, value: Any) -> bool:
    return isinstance(value, tuple) and all(is_array_batch(s, v) for s, v in zip(space.spaces, value))


@is_array_batch.register(Dict)
def _dict_is_array_batch(space: Dict, value: Any) -> bool:
    return isinstance(value, dict) and all(is_array_batch(s, value[k]) for k, s in space.spaces.items())


@singledispatch
def to_batch(space: Space, value: Any, n: int, name: str, *, same_kind: bool = True) -> Any:
    """Check a batch of ``n`` values of a fixed ``space`` and return it as a tree of arrays.

    The arrays keep the caller's dtype (so an env receives exactly what ``SyncVectorEnv``
    would hand it) once it is known to cast safely-in-kind to the space's dtype; with
    ``same_kind=False`` any bool, int or float dtype is kept (a step hands float actions for a
    ``Discrete`` space to the envs as ``SyncVectorEnv`` does, through the pipes), and complex
    numbers, strings and objects are refused.

    Raises:
        TypeError: a value that is not array-like, or whose dtype cannot be cast.
        ValueError: a batch of the wrong length or shape.
    """
    if value is None or isinstance(value, (str, bytes)):
        raise ArgumentTypeError(f"`{name}` must be an array of {n} values of {space}, got {describe(value)}")
    try:
        array = np.asarray(value)
    except Exception as exc:
        # The reason is in the message: the value's repr is cut short (a tensor's
        # `requires_grad=True`, or its device, comes last) and the cause may not be shown.
        reason = " ".join(str(exc).split())
        raise ArgumentTypeError(
            f"`{name}` must be array-like, got {describe(value)} (numpy.asarray raised {type(exc).__name__}: {reason})"
        ) from exc
    expected = (n, *_leaf_shape(space))
    if array.ndim == 0:
        raise ArgumentTypeError(
            f"`{name}` must be a batch of {n} values of {space}, got the single value {describe(value)}"
        )
    # SyncVectorEnv hands env i the row ``array[i]``: a batch of (n,) for a space of shape (1,)
    # is iterable that way, and the rows then travel as they are.
    if array.shape != expected and not (array.shape[0] == n and array.size == int(np.prod(expected))):
        raise InvalidArgumentError(
            f"`{name}` must have shape {expected} (a row for each of the {n} envs, single space {space}), "
            f"got shape {array.shape}"
        )
    target = np.dtype(space.dtype)
    if not same_kind and array.dtype.kind not in "biuf":
        raise ArgumentTypeError(
            f"`{name}` must hold real numbers for {space} (dtype {target}, or any int, float or bool), "
            f"got {array.dtype}"
        )
    if same_kind and not np.can_cast(array.dtype, target, casting="same_kind"):
        raise ArgumentTypeError(f"`{name}` must have a dtype that casts to {target} for {space}, got {array.dtype}")
    return array


@to_batch.register(Tuple)
def _tuple_to_batch(space: Tuple, value: Any, n: int, name: str, *, same_kind: bool = True) -> Any:
    # Items beyond the space's are not read, as SyncVectorEnv's iterate does not read them.
    if not isinstance(value, (tuple, list)) or len(value) < len(space.spaces):
        raise ArgumentTypeError(
            f"`{name}` must be a tuple of {len(space.spaces)} batches for {space}, got {describe(value)}"
        )
    return tuple(
        to_batch(s, v, n, f"{name}[{i}]", same_kind=same_kind) for i, (s, v) in enumerate(zip(space.spaces, value))
    )


@to_batch.register(Dict)
def _dict_to_batch(space: Dict, value: Any, n: int, name: str, *, same_kind: bool = True) -> Any:
    # As SyncVectorEnv iterates it: the space's keys are read, any others are left unread.
    if not isinstance(value, Mapping) or not set(space.spaces) <= set(value):
        got = f"keys {sorted(value, key=str)}" if isinstance(value, Mapping) else describe(value)
        raise ArgumentTypeError(f"`{name}` must be a dict with the keys {sorted(space.spaces, key=str)}, got {got}")
    return {k: to_batch(s, value[k], n, f"{name}[{k!r}]", same_kind=same_kind) for k, s in space.spaces.items()}


@singledispatch
def check_action_count(space: Space, value: Any, n: int, name: str) -> None:
    """Check that every part of a batch of ``n`` actions of a space with no fixed shape holds
    ``n`` actions, before the batch is split into one action per env for the pipes.

    Such a batch is a Python object per env at its leaves (a tuple of ``n`` strings for a
    ``Text``) and arrays at its fixed parts, which ``SyncVectorEnv`` zips together strictly: a
    part of another length raises there only after the envs the zip reached have stepped, and
    as a bare ``ValueError`` from ``zip``. Here it is refused first, with the part named
    (``actions['t']``, ``actions[1]``). A part whose length cannot be known (an iterator) is
    left to Gymnasium's ``iterate``, which reads it as ``SyncVectorEnv`` does.

    Raises:
        InvalidArgumentError: a part holds another number of actions than ``n``.
        ArgumentTypeError: a Dict's batch lacks one of the space's keys, or a Tuple's batch
            has fewer parts than the space.
    """
    try:
        count = len(value)
    except TypeError:
        return
    if count != n:
        raise InvalidArgumentError(f"`{name}` must hold {n} actions (one per env), got {count}")


@check_action_count.register(Tuple)
def _tuple_action_count(space: Tuple, value: Any, n: int, name: str) -> None:
    # SyncVectorEnv reads part ``i`` as ``value[i]``; parts beyond the space's are not read.
    if not isinstance(value, (Sequence, np.ndarray)) or isinstance(value, (str, bytes)):
        return
    if len(value) < len(space.spaces):
        raise ArgumentTypeError(
            f"`{name}` must be a tuple of {len(space.spaces)} batches for {space}, got {describe(value)}"
        )
    for i, sub in enumerate(space.spaces):
        check_action_count(sub, value[i], n, f"{name}[{i}]")


@check_action_count.register(Dict)
def _dict_action_count(space: Dict, value: Any, n: int, name: str) -> None:
    # SyncVectorEnv reads the space's keys; other keys are not read.
    if not isinstance(value, Mapping):
        return
    if not space.spaces.keys() <= value.keys():
        raise ArgumentTypeError(
            f"`{name}` must be a dict with the keys {sorted(space.spaces, key=str)}, got keys {sorted(value, key=str)}"
        )
    for key, sub in space.spaces.items():
        check_action_count(sub, value[key], n, f"{name}[{key!r}]")


@singledispatch
def batch_of_items(space: Space, items: list[Any]) -> Any:
    """A batch of ``space`` made of one value per env, each left as it is: a Dict's batch is a
    dict and a Tuple's a tuple of part batches, and each leaf's batch the list of its values.

    Gymnasium's ``iterate`` over this batch yields ``items`` again, value for value, so a native
    vector env stepped with it hands each env what ``SyncVectorEnv`` over all the envs would.
    (A list of the items themselves is read as a batch only for a space that is not a Dict or
    Tuple: for a Tuple, ``iterate`` takes item ``i`` as the batch of part ``i``.)
    """
    return list(items)


@batch_of_items.register(Tuple)
def _tuple_batch_of_items(space: Tuple, items: list[Any]) -> Any:
    return tuple(batch_of_items(sub, [item[i] for item in items]) for i, sub in enumerate(space.spaces))


@batch_of_items.register(Dict)
def _dict_batch_of_items(space: Dict, items: list[Any]) -> Any:
    return {key: batch_of_items(sub, [item[key] for item in items]) for key, sub in space.spaces.items()}


@singledispatch
def empty_part(space: Space, prefix: str) -> str | None:
    """The dotted name (``prefix`` and the Dict keys and Tuple indices below it, as
    :func:`named_leaves` joins them) of the first Dict or Tuple in ``space`` that holds no
    subspace, or ``None`` when there is none.

    Gymnasium's ``iterate`` splits a batch of such a space into no items at all (an empty
    Tuple) or fails on it (an empty Dict), so ``SyncVectorEnv`` cannot step an action space
    that holds one anywhere: the caller can refuse it, named, before anything is sent.
    """
    return None


@empty_part.register(Tuple)
def _tuple_empty_part(space: Tuple, prefix: str) -> str | None:
    if not space.spaces:
        return prefix
    return next((found for i, sub in enumerate(space.spaces) if (found := empty_part(sub, f"{prefix}.{i}"))), None)


@empty_part.register(Dict)
def _dict_empty_part(space: Dict, prefix: str) -> str | None:
    if not space.spaces:
        return prefix
    return next((found for key, sub in space.spaces.items() if (found := empty_part(sub, f"{prefix}.{key}"))), None)


@singledispatch
def describe_space(space: Space) -> dict[str, Any]:
    """A JSON-serialisable description of a fixed ``space``: its type, shape and dtype, and what
    rebuilds it (Box bounds, Discrete ``n`` and ``start``, MultiDiscrete ``nvec`` and ``start``);
    a Dict or Tuple describes its subspaces.

    The rollout datasets record it in ``metadata.json`` and ``vecenv.datasets.format`` reads it
    back, so a change here is a change of their format.
    """
    return _leaf_description(space)


def _leaf_description(space: Space) -> dict[str, Any]:
    return {"type": type(space).__name__, "shape": list(shape_of(space)), "dtype": str(np.dtype(space.dtype))}


@describe_space.register(Box)
def _describe_box(space: Box) -> dict[str, Any]:
    return {**_leaf_description(space), "low": _json_numbers(space.low), "high": _json_numbers(space.high)}


@describe_space.register(Discrete)
def _describe_discrete(space: Discrete) -> dict[str, Any]:
    return {**_leaf_description(space), "n": int(space.n), "start": int(space.start)}


@describe_space.register(MultiDiscrete)
def _describe_multi_discrete(space: MultiDiscrete) -> dict[str, Any]:
    return {**_leaf_description(space), "nvec": space.nvec.tolist(), "start": space.start.tolist()}


@describe_space.register(Tuple)
def _describe_tuple(space: Tuple) -> dict[str, Any]:
    return {"type": "Tuple", "spaces": [describe_space(s) for s in space.spaces]}


@describe_space.register(Dict)
def _describe_dict(space: Dict) -> dict[str, Any]:
    return {"type": "Dict", "spaces": {k: describe_space(s) for k, s in space.spaces.items()}}


def _json_numbers(values: np.ndarray) -> Any:
    """A JSON-safe form of a bounds array: one number if all equal, else a nested list.

    Non-finite values become the strings "inf", "-inf" and "nan" (strict JSON has none).
    """

    def safe(x: Any) -> Any:
        if isinstance(x, list):
            return [safe(item) for item in x]
        return x if not isinstance(x, float) or math.isfinite(x) else str(x)

    flat = values.reshape(-1)
    return safe(flat[0].item() if flat.size and np.all(flat == flat[0]) else values.tolist())


@singledispatch
def named_dict_keys(space: Space, prefix: str = "") -> list[tuple[str, Any]]:
    """Every Dict key in ``space`` with the dotted name (as :func:`named_leaves` gives it) of the
    Dict that holds it, depth first: each key comes just before the keys below it."""
    return []


@named_dict_keys.register(Tuple)
def _tuple_dict_keys(space: Tuple, prefix: str = "") -> list[tuple[str, Any]]:
    return [pair for i, sub in enumerate(space.spaces) for pair in named_dict_keys(sub, f"{prefix}.{i}")]


@named_dict_keys.register(Dict)
def _dict_dict_keys(space: Dict, prefix: str = "") -> list[tuple[str, Any]]:
    return [
        pair for key, sub in space.spaces.items() for pair in [(prefix, key), *named_dict_keys(sub, f"{prefix}.{key}")]
    ]


@singledispatch
def exactly_equal(expected: Space, received: Space) -> bool:
    """Whether ``received`` is certainly equal to ``expected`` by a cheap exact test: the same
    class, shape and dtype and bit-equal bounds. ``False`` means "not known", never "unequal": the
    caller then asks ``==``. Why: a ``Box``'s ``==`` runs ``np.allclose`` over its bounds in
    floats, seconds for an image space compared once per env, while equal bounds (the common case:
    every env built by one constructor) compare in a few milliseconds. Exact equality implies
    Gymnasium's, so every answer is the one ``==`` gives. Only the exact classes below are tested
    (a subclass may define its own ``==``)."""
    return False


@exactly_equal.register(Box)
def _box_exactly_equal(expected: Box, received: Space) -> bool:
    return (
        type(expected) is Box
        and type(received) is Box
        and expected.shape == received.shape
        and expected.dtype == received.dtype
        and np.array_equal(expected.low, received.low)
        and np.array_equal(expected.high, received.high)
    )


@exactly_equal.register(Dict)
def _dict_exactly_equal(expected: Dict, received: Space) -> bool:
    if type(expected) is not Dict or type(received) is not Dict:
        return False
    mine, theirs = expected.spaces, received.spaces
    return list(mine) == list(theirs) and all(exactly_equal(mine[k], theirs[k]) or theirs[k] == mine[k] for k in mine)


@exactly_equal.register(Tuple)
def _tuple_exactly_equal(expected: Tuple, received: Space) -> bool:
    if type(expected) is not Tuple or type(received) is not Tuple or len(expected.spaces) != len(received.spaces):
        return False
    return all(exactly_equal(a, b) or b == a for a, b in zip(expected.spaces, received.spaces))


def fits_layout(expected: Space, received: Space) -> bool:
    """``received`` is ``expected``, or has its shape and dtype (bounds may differ), so its values
    fit the arrays of ``expected``; spaces Gymnasium cannot compare so (custom ones) must be equal."""
    if exactly_equal(expected, received) or received == expected:
        return True
    try:
        return bool(is_space_dtype_shape_equiv(expected, received))
    except (NotImplementedError, TypeError):
        return False
