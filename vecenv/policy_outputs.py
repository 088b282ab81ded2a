"""What a policy in the workers gives beyond its actions: named extras, and recurrent state.

A learner needs more of its behaviour policy than the actions: PPO the log-probabilities of the
actions under the weights that chose them (they cannot be recomputed once the learner has
moved on), and a critic's values; a recurrent policy its state. A policy
(:mod:`vecenv.policies`) may therefore return

* ``actions``, or ``(actions, extras)`` where ``extras`` is a dict of named per-row arrays
  (``{"log_prob": (n,), "value": (n,), "logits": (n, k)}``), each of a fixed row shape and
  dtype: the rollout block (:mod:`vecenv.wire.rollout_buffers`) keeps a ``(T, num_envs, ...)``
  array per name, written in place at every step like the actions;
* when recurrent, ``(actions, extras, state)`` from ``policy(observations, state)``, where the
  state is any tree (tuples, lists, dicts) of arrays or tensors whose leading dimension is the
  number of rows, e.g. an LSTM's ``(h, c)`` as ``(n, hidden)`` arrays.

The layout of the extras is learned once per policy, in the parent, from one call of a copy of
the policy on the rows of the first worker (:func:`probe`), so that the block can be made
before the workers run; every later call must give the same names, shapes and dtypes
(:func:`store_extras` raises :class:`~vecenv.errors.PolicyOutputError` otherwise).

The state is kept in the worker as a tree of numpy arrays, with the tuples (named tuples of
their own class), lists and dicts the policy built it of, so that the policy is handed back the
structure it returned (a list it updates in place, ``state.h`` of a named tuple, say); the helpers here
reset the rows of the envs whose observation is the first of an episode to the policy's initial
state, and keep the rows of envs that were not stepped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from gymnasium import Space
from gymnasium.spaces import Tuple

from vecenv.errors import PolicyOutputError, describe
from vecenv.spaces import nests_as

__all__ = [
    "ExtrasLayout",
    "PolicyOutputs",
    "split_output",
    "extras_layout",
    "store_extras",
    "same_sequence",
    "as_state",
    "check_state",
    "check_containers",
    "check_initial_state",
    "reset_rows",
    "keep_rows",
    "state_rows",
    "repeat_first_row",
    "join_states",
    "copy_state",
    "probe",
    "process_generators_kept",
]

#: ``(name, row shape, dtype)`` of every extra, in the order the policy returned them.
ExtrasLayout = tuple[tuple[str, tuple[int, ...], np.dtype], ...]


@dataclasses.dataclass(frozen=True)
class PolicyOutputs:
    """What one policy gives beyond actions, as learned from its first call.

    Attributes:
        extras: the layout of its extras (empty: actions only).
        recurrent: it keeps per-env state (``initial_state`` and ``policy(obs, state)``).
        initial_state: its initial state for the probed rows, one row per env (recurrent only);
            every row of a fresh state equals the first (:func:`check_initial_state`).
        probe_error: the exception its first call raised (``"RuntimeError: ..."``), when it
            raised one: the layout is then only what was learned before it; empty otherwise.
    """

    extras: ExtrasLayout = ()
    recurrent: bool = False
    initial_state: Any = None
    probe_error: str = ""


def split_output(output: Any, action_space: Space) -> tuple[Any, Mapping[str, Any] | None]:
    """``(actions, extras)`` from what a non-recurrent policy returned: ``actions`` alone or
    the pair ``(actions, dict)``, as a tuple or a list (``[actions, extras]``, which a torch
    module's ``forward`` may return as well).

    For a Tuple action space of two parts whose second is a Dict, a batch of actions is itself
    a 2-tuple ending in a mapping: the output is the pair where its first item has the action
    space's shape (a tuple of its parts, nested as the space is), the actions where the whole
    output has it, and otherwise a pair where its first item is a tuple (so that the error for
    actions of the wrong shape names the actions)."""
    if type(output) in (tuple, list) and len(output) == 2 and isinstance(output[1], Mapping):
        if isinstance(action_space, Tuple) and not nests_as(action_space, output[0]):
            whole = type(output) is tuple and nests_as(action_space, output)
            if whole or not isinstance(output[0], tuple):
                return output, None
        return output[0], output[1]
    return output, None


def _as_array(value: Any, what: str) -> np.ndarray:
    """``value`` (an array, a torch tensor, a list) as a numpy array; ``what`` names the output
    in the error for one that numpy cannot hold (a bfloat16 tensor, a ragged list)."""
    try:
        if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
            value = value.detach().cpu().numpy()
        return np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise PolicyOutputError(
            f"the policy's {what} cannot be made a numpy array: {type(exc).__name__}: {exc}"
        ) from None


def extras_layout(extras: Mapping[str, Any] | None, n: int) -> ExtrasLayout:
    """The layout of one call's extras for ``n`` rows; each must be an array of ``n`` rows."""
    if extras is None:
        return ()
    layout = []
    for name, value in extras.items():
        if not isinstance(name, str):
            raise PolicyOutputError(f"the policy's extras must be named by strings, got the key {name!r}")
        array = _as_array(value, f"output extras[{name!r}]")
        if array.ndim == 0 or array.shape[0] != n or array.dtype == object:
            raise PolicyOutputError(
                f"the policy's output extras[{name!r}] must be an array of one row per env: expected shape "
                f"({n}, ...), received {describe(value, dtype=True)} of shape {array.shape}"
            )
        layout.append((name, tuple(int(s) for s in array.shape[1:]), array.dtype))
    return tuple(layout)


def store_extras(rows: Mapping[str, np.ndarray], extras: Mapping[str, Any] | None, layout: ExtrasLayout) -> None:
    """Write one step's extras into ``rows`` (name -> the ``(n, ...)`` row of its array),
    checked against ``layout``: the same names, and for each exactly its shape and dtype."""
    if extras is None:
        extras = {}
    if len(extras) != len(layout) or any(name not in extras for name, _, _ in layout):
        expected = [name for name, _, _ in layout]
        raise PolicyOutputError(
            f"the policy's output extras changed: expected the names {expected} (as at its first call), "
            f"received {list(extras)}"
        )
    for name, _, dtype in layout:
        dst = rows[name]
        array = _as_array(extras[name], f"output extras[{name!r}]")
        if array.shape != dst.shape or array.dtype != dtype:
            raise PolicyOutputError(
                f"the policy's output extras[{name!r}] changed: expected shape {dst.shape} dtype {dtype} "
                f"(as at its first call), received shape {array.shape} dtype {array.dtype}"
            )
        np.copyto(dst, array)


# -- recurrent state -------------------------------------------------------------------------


def same_sequence(like: tuple[Any, ...] | list[Any], items: list[Any]) -> tuple[Any, ...] | list[Any]:
    """``items`` in a sequence of the kind ``like`` is: a list, a tuple, or a named tuple of the
    same class (so that a policy's ``state.h`` still reads its state's ``h``)."""
    if isinstance(like, list):
        return items
    if hasattr(type(like), "_fields"):  # a named tuple: its fields are its arguments
        return type(like)(*items)
    return tuple(items)


def as_state(state: Any) -> Any:
    """The state as the worker keeps it: tuples (named ones of their class), lists, dicts and
    numpy arrays (tensors converted; the arrays may share memory with the policy's tensors)."""
    if isinstance(state, Mapping):
        return {k: as_state(v) for k, v in state.items()}
    if isinstance(state, (tuple, list)):
        return same_sequence(state, [as_state(v) for v in state])
    return _as_array(state, "state")


def _leaves(state: Any, path: str = "state") -> list[tuple[str, np.ndarray]]:
    """``(path, leaf)`` of every leaf; a dict's keys in a fixed order, whatever order the policy
    built it in (its entries are found by key)."""
    if isinstance(state, dict):
        items = sorted(state.items(), key=lambda item: repr(item[0]))
        return [leaf for k, v in items for leaf in _leaves(v, f"{path}[{k!r}]")]
    if isinstance(state, (tuple, list)):
        return [leaf for i, v in enumerate(state) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, state)]


def _map(fn: Callable[..., Any], state: Any, *others: Any) -> Any:
    if isinstance(state, dict):
        return {k: _map(fn, v, *(o[k] for o in others)) for k, v in state.items()}
    if isinstance(state, (tuple, list)):
        return same_sequence(state, [_map(fn, v, *(o[i] for o in others)) for i, v in enumerate(state)])
    return fn(state, *others)


def check_state(state: Any, n: int, reference: Any, where: str) -> None:
    """Every leaf of ``state`` has ``n`` rows and, given a ``reference`` state (the initial
    one), the same structure, shapes and dtypes. ``where`` says which output it was."""
    leaves = _leaves(state)
    for path, leaf in leaves:
        if leaf.ndim == 0 or leaf.shape[0] != n:
            raise PolicyOutputError(
                f"the policy's {path} ({where}) must have one row per env: expected leading dimension {n}, "
                f"received shape {leaf.shape}"
            )
    if reference is None:
        return
    expected = _leaves(reference)
    if [p for p, _ in leaves] != [p for p, _ in expected]:
        raise PolicyOutputError(
            f"the policy's state ({where}) changed its structure: expected the leaves "
            f"{[p for p, _ in expected]} (as its initial state), received {[p for p, _ in leaves]}"
        )
    for (path, leaf), (_, ref) in zip(leaves, expected):
        if leaf.shape[1:] != ref.shape[1:] or leaf.dtype != ref.dtype:
            raise PolicyOutputError(
                f"the policy's {path} ({where}) changed: expected shape {(n, *ref.shape[1:])} dtype {ref.dtype} "
                f"(as its initial state), received shape {leaf.shape} dtype {leaf.dtype}"
            )


def check_containers(state: Any, reference: Any, where: str) -> None:
    """``state`` nests the same containers as ``reference`` (the initial state): a tuple where
    it has a tuple (a named tuple of its class), a list where it has a list, a dict with its
    keys. The policy gets the state in these containers, so a list given for its tuple would
    reach it as a list (and a plain tuple for its named tuple without its fields)."""
    if _containers(state) != _containers(reference):
        raise PolicyOutputError(
            f"state ({where}): expected the containers of the policy's initial state, {_describe(reference)}, "
            f"received {_describe(state)}"
        )


def _containers(state: Any) -> Any:
    """A comparable outline of ``state``'s containers: each one's type and, within it, its
    items' outlines (a dict's by key, in a fixed order); every leaf is ``None``."""
    if isinstance(state, dict):
        return dict, sorted(((repr(k), _containers(v)) for k, v in state.items()), key=lambda item: item[0])
    if isinstance(state, (tuple, list)):
        return type(state), [_containers(v) for v in state]
    return None


def _describe(state: Any) -> str:
    """``state``'s containers for a message: ``tuple(array, dict{'count': array})``, a named
    tuple with its fields (``HiddenCell(h=array, c=array)``), ``list[...]``."""
    if isinstance(state, dict):
        items = sorted(state.items(), key=lambda item: repr(item[0]))
        return "dict{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in items) + "}"
    if isinstance(state, list):
        return "list[" + ", ".join(_describe(v) for v in state) + "]"
    if isinstance(state, tuple):
        fields = getattr(type(state), "_fields", None)
        names = [f"{f}=" for f in fields] if fields else [""] * len(state)
        return f"{type(state).__name__}(" + ", ".join(f"{n}{_describe(v)}" for n, v in zip(names, state)) + ")"
    return "array"


def check_initial_state(state: Any, n: int) -> None:
    """A fresh state from ``initial_state(n)``: every leaf has ``n`` rows, all equal to the
    first. An env's state is reset to its row at every episode start, so rows that differ
    would give an env another initial state for another grouping of the envs (its row in its
    worker's group), and a replacement worker's envs another one than the parent reports for
    them (the first row, repeated)."""
    check_state(state, n, None, "from initial_state")
    for path, leaf in _leaves(state):
        first = leaf[:1]
        equal = leaf == first if leaf.dtype.kind not in "fc" else (leaf == first) | (np.isnan(leaf) & np.isnan(first))
        rows = equal.reshape(n, -1).all(axis=1)
        if not rows.all():
            j = int(np.flatnonzero(~rows)[0])
            raise PolicyOutputError(
                f"the policy's {path} (from initial_state) must be the same for every env: expected {n} rows equal "
                f"to row 0 = {_short(leaf[0])}, received row {j} = {_short(leaf[j])}"
            )


def _short(row: np.ndarray) -> str:
    return np.array2string(row, threshold=6, edgeitems=2)


def reset_rows(state: Any, initial: Any, mask: np.ndarray) -> Any:
    """``state`` with the rows ``mask`` marks replaced by ``initial``'s (new arrays)."""

    def one(s: np.ndarray, i: np.ndarray) -> np.ndarray:
        out = np.array(s, copy=True)
        out[mask] = i[mask]
        return out

    return _map(one, state, initial)


def keep_rows(new: Any, old: Any, keep: np.ndarray) -> Any:
    """``new`` with the rows ``keep`` marks taken from ``old`` (envs that were not stepped)."""
    return reset_rows(new, old, keep)


def state_rows(state: Any, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of every leaf (views)."""
    return _map(lambda a: a[start:stop], state)


def repeat_first_row(state: Any, n: int) -> Any:
    """``n`` rows of every leaf's first row (the initial state of ``n`` envs, from any number)."""
    return _map(lambda a: np.repeat(a[:1], n, axis=0), state)


def copy_state(state: Any) -> Any:
    """A deep copy (arrays the caller may keep while the worker goes on)."""
    return None if state is None else _map(np.array, state)


def join_states(states: list[Any]) -> Any:
    """One state from the states of consecutive groups (each leaf concatenated by rows)."""
    return _map(lambda *leaves: np.concatenate(leaves, axis=0), states[0], *states[1:])


# -- learning the layout ---------------------------------------------------------------------


@contextlib.contextmanager
def process_generators_kept() -> Iterator[None]:
    """The process's global generators (numpy's legacy ``np.random``, ``random``'s and, where it
    is imported, torch's CPU one) as they were before the block, whatever it drew from them."""
    torch = sys.modules.get("torch")
    torch_state = None if torch is None else torch.get_rng_state()
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        if torch is not None:
            torch.set_rng_state(torch_state)
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def probe(policy: Any, context: Any, observations: Any) -> PolicyOutputs:
    """Build a copy of ``policy`` for the envs of ``context`` and call it once on their rows
    ``observations``: the layout of its extras, and whether it is recurrent. The copy is then
    dropped (the workers build their own). ``policy`` is a
    :class:`~vecenv.worker.policy.WorkerPolicy` and ``context`` its
    :class:`~vecenv.worker.policy.PolicyContext` (typed loosely: that module builds on this one).

    Outputs that cannot be laid out raise :class:`~vecenv.errors.PolicyOutputError` here. An
    exception of the policy's own code is left for the workers to raise, where it is reported
    as any failure of the policy (at the rollout's first step): the layout is then taken as
    what was learned before it (nothing, or the state of a recurrent policy), and the exception
    kept as ``probe_error``, for the parent to name should the workers' outputs not fit it.
    """
    n = len(context.env_ids)
    # It runs in the caller's process: what it samples from the global generators (a module's
    # ``Categorical(...).sample()``) must not move the caller's streams on.
    with process_generators_kept():
        return _probe(policy, context, observations, n)


def _probe(policy: Any, context: Any, observations: Any, n: int) -> PolicyOutputs:
    """:func:`probe`'s call of the copy, on ``n`` rows."""
    recurrent, initial = False, None
    try:
        runner = policy.build(context)
        recurrent = runner.recurrent
        if recurrent:
            initial = as_state(runner.initial_state(n))
            check_initial_state(initial, n)
            actions, extras, state = runner.act_with_state(observations, copy_state(initial), None)
            state = as_state(state)
        else:
            _, extras = split_output(runner.act(observations, None), context.action_space)
    except PolicyOutputError:
        raise
    except Exception as exc:
        return PolicyOutputs((), recurrent, initial, f"{type(exc).__name__}: {exc}")
    if recurrent:
        check_containers(state, initial, f"returned by policy {policy.name}")
        check_state(state, n, initial, "returned by the policy")
    return PolicyOutputs(extras_layout(extras, n), recurrent, initial)
