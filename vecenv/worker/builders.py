"""Group builders as a worker calls them: each env constructor of one worker, in order.

The parent makes them (:func:`vecenv.parent.groups.split_groups`) and sends them pickled; a
worker calls one to build its envs. Multi-agent copies are built with :func:`call_each` too.
"""

from __future__ import annotations

import pickletools
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import cloudpickle
import gymnasium as gym

from vecenv.errors import ArgumentTypeError, describe

__all__ = [
    "ConstructorGroup",
    "GroupOfFns",
    "NamedConstructor",
    "call_each",
    "check_env",
    "pickle_group",
    "pickles",
    "unimportable_note",
    "unregistered_note",
]

#: What a vector env uses of each env (a gymnasium.Env has them; duck-typed envs may too).
_ENV_API = ("reset", "step", "observation_space", "action_space")


def check_env(env: Any, rule: str) -> Any:
    """``env`` when it has a Gymnasium env's API; else ``ArgumentTypeError`` saying ``rule``
    (what must be a gymnasium.Env) and what it got. A native vector env has that API too, but
    would pass as one env whose observation is a whole batch (and fail at its first step): it
    is refused, saying how to host it."""
    if isinstance(env, gym.vector.VectorEnv):
        raise ArgumentTypeError(
            f"{rule}, got {type(env).__name__}, a gymnasium.vector.VectorEnv: a native vector env is a worker's "
            "whole group, returned alone (not in a list) by a group builder of SubprocVectorEnv.from_groups"
        )
    if not all(hasattr(env, name) for name in _ENV_API):
        raise ArgumentTypeError(f"{rule} (with reset, step, observation_space and action_space), got {describe(env)}")
    return env


@runtime_checkable
class NamedConstructor(Protocol):
    """An env constructor that vecenv made for its caller (``vecenv.make``'s recipe): its errors
    name what the caller gave (the env id and the env's index), since the caller gave no ``env_fns``."""

    def name_of_env(self, index: int) -> str:
        """Env ``index`` (of the vector env) as the caller knows it, e.g. ``env 3 of vecenv.make('CartPole-v1')``."""
        ...


def _as_known(fn: Callable[[], Any], index: int, given: str) -> str:
    """Env ``index``'s constructor ``fn`` as the caller knows it: the words vecenv made it with
    (:class:`NamedConstructor`, which names the env id and the env), else ``given``, the words
    for an ``env_fns[index]`` the caller gave. The one place that tells the two apart."""
    return fn.name_of_env(index) if isinstance(fn, NamedConstructor) else given


def _constructor(fn: Callable[[], Any], index: int) -> str:
    """Constructor ``index`` in words for an error: as the caller gave it (``env_fns[i]``, its name
    and line) or as vecenv made it for them (:class:`NamedConstructor`)."""
    return _as_known(fn, index, f"`env_fns[{index}]` ({_name_of(fn)})")


class GroupOfFns:
    """A picklable group builder: calls each env constructor of one worker, in order."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], first: int) -> None:
        self.env_fns = list(env_fns)
        self.first = first

    def __call__(self) -> list[gym.Env]:
        envs = call_each(self.env_fns, self.first, "env")
        for i, (fn, env) in enumerate(zip(self.env_fns, envs), start=self.first):
            check_env(env, f"{_as_known(fn, i, f'`env_fns[{i}]`')} must return a gymnasium.Env")
        return envs

    @property
    def envs(self) -> range:
        """The envs it builds: env ``i`` is ``env_fns[i]`` (before the handshake assigns rows)."""
        return range(self.first, self.first + len(self.env_fns))


def call_each(fns: Sequence[Callable[[], Any]], first: int, what: str) -> list[Any]:
    """Call each constructor in order; an error is noted with its index (``what`` ``i``), or as
    the caller knows the env where vecenv made its constructor (:class:`NamedConstructor`)."""
    built = []
    for i, fn in enumerate(fns, start=first):
        try:
            built.append(fn())
        except Exception as exc:
            exc.add_note(f"raised by {_as_known(fn, i, f'env_fns[{i}] ({what} {i})')}")
            raise
    return built


@runtime_checkable
class ConstructorGroup(Protocol):
    """A group builder made of the user's constructors ``env_fns[first:first + len(env_fns)]``
    (:class:`GroupOfFns`, a multi-agent worker's copies): an error can name one of them."""

    env_fns: list[Callable[[], Any]]
    first: int


def pickle_group(group_fn: Callable[[], Any], worker: int) -> bytes:
    """``group_fn`` pickled with cloudpickle, as it travels to worker ``worker``.

    A constructor that cannot be pickled (a lambda that captured a lock, an open file, a
    socket) fails here, before any worker starts. Pickling's own error names only the object
    it met, not whose it was: a note is added naming the first of the group's ``env_fns``
    that cannot be pickled (or the group builder itself, ``group_fns[worker]``, for
    ``from_groups``), so that one bad constructor among many is found without bisecting.
    """
    try:
        return bytes(cloudpickle.dumps(group_fn))
    except Exception as exc:
        exc.add_note(
            f"{_unpicklable_part(group_fn, worker)} cannot be pickled to be sent to worker {worker}: constructors "
            "travel to the workers with cloudpickle, so what they hold (captured variables, bound objects) "
            "must pickle too"
        )
        raise


def _unpicklable_part(group_fn: Callable[[], Any], worker: int) -> str:
    """The constructor of ``group_fn`` that pickling fails on, in words."""
    if isinstance(group_fn, ConstructorGroup):
        for i, fn in enumerate(group_fn.env_fns, start=group_fn.first):
            if not pickles(fn):
                return _constructor(fn, i)
        last = group_fn.first + len(group_fn.env_fns) - 1
        return f"the constructors of worker {worker} (`env_fns[{group_fn.first}..{last}]`)"
    return f"`group_fns[{worker}]` ({_name_of(group_fn)})"


def unimportable_note(group_fn: Callable[[], Any], worker: int, module: str) -> str | None:
    """Why worker ``worker`` could not import ``module``, which this process has imported,
    naming the first of ``group_fn``'s constructors that refers to it; ``None`` where this
    process has not imported it or no constructor refers to it (nothing more to say).

    cloudpickle sends a class or function of a module this process imported as a reference (the
    module's name and its own), for the worker to import. A forked worker has every module of
    this process; any other (``spawn``, ``forkserver``, a Ray worker) imports it anew, which a
    module loaded from a file path with ``importlib``, or from a folder missing from the
    worker's ``sys.path``, does not survive. Unpickling the whole group then fails on the first
    such reference, before any constructor runs, with an error that says nothing of whose it was.
    """
    if module not in sys.modules:
        return None
    if isinstance(group_fn, ConstructorGroup):
        part = next(
            (
                _constructor(fn, i)
                for i, fn in enumerate(group_fn.env_fns, start=group_fn.first)
                if _refers_to(fn, module)
            ),
            None,
        )
    else:
        part = f"`group_fns[{worker}]` ({_name_of(group_fn)})" if _refers_to(group_fn, module) else None
    if part is None:
        return None
    return (
        f"{part} refers to module {module!r}, which worker {worker} cannot import. Constructors travel to the "
        "workers with cloudpickle, which sends a class or function of a module imported here as the module's "
        "name, for the worker to import again; a worker that is not forked from this process (started with "
        "'spawn' or 'forkserver') imports it anew, which a module loaded from a file path (importlib), or "
        f"found in a folder missing from the worker's sys.path, does not survive. Make {module!r} importable "
        "(install it, or put its folder on PYTHONPATH), or call cloudpickle.register_pickle_by_value(module) "
        "before building the vector env so that its code travels with the constructors, or start the workers "
        "with 'fork'"
    )


#: Gymnasium's NameNotFound message: the id's name, and its namespace when it has one.
_NAME_NOT_FOUND = re.compile(r"Environment `(?P<name>[^`]+)` doesn't exist(?: in namespace (?P<ns>[^.\s]+))?\.")


def unregistered_note(exc: BaseException, worker: int) -> str | None:
    """Why worker ``worker`` does not know an env id that this process has registered, for the
    ``NameNotFound`` its constructor's ``gymnasium.make(id)`` raised there; ``None`` for any other
    error, or an id unknown here too (Gymnasium's own message says all there is).

    ``gym.register`` changes this process's registry only. A forked worker copies it; one started
    with ``spawn`` or ``forkserver`` (or a Ray worker) imports the modules its constructors refer
    to and, from a script file, the script's top-level code: a registration made in a notebook,
    ``python -c``, or under the script's main guard never runs there.
    """
    if not isinstance(exc, gym.error.NameNotFound):
        return None
    found = _NAME_NOT_FOUND.search(str(exc))
    if found is None:
        return None
    name, namespace = found.group("name"), found.group("ns")
    ids = sorted(spec.id for spec in gym.registry.values() if spec.name == name and spec.namespace == namespace)
    if not ids:
        return None
    return (
        f"env id {ids[-1]!r} is registered in this process but not in worker {worker}: gym.register changes "
        "only the registry of the process that calls it, and a worker that was not forked from this one "
        "(started with 'spawn' or 'forkserver') runs no registration made in a notebook, in `python -c`, or "
        'under the script\'s `if __name__ == "__main__":`. Register the id in a module the constructor '
        'imports (gym.make("my_module:MyEnv-v0") imports my_module first), build the envs with vecenv.make, '
        "which sends each worker this process's spec of the id, or start the workers with 'fork'"
    )


def _refers_to(fn: Any, module: str) -> bool:
    """Whether ``fn``'s pickle holds ``module``'s name (or a submodule's) as a string: what a
    global reference to it, or cloudpickle's import of a module object that a function's
    globals hold, writes (a string constant of that name counts too: only a hint is made of it)."""
    try:
        data = cloudpickle.dumps(fn)
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name == "GLOBAL" and isinstance(arg, str):  # protocols 0-3: "module name"
                arg = arg.partition(" ")[0]
            if isinstance(arg, str) and (arg == module or arg.startswith(module + ".")):
                return True
    except Exception:  # it pickled once, to be sent; nothing more is known if not now
        return False
    return False


def pickles(value: Any) -> bool:
    """Whether cloudpickle can pickle ``value``: to find, once pickling a whole failed, the
    part that made it fail."""
    try:
        cloudpickle.dumps(value)
    except Exception:
        return False
    return True


def _name_of(fn: Callable[[], Any]) -> str:
    """A constructor as its author would find it: its name and where it is defined."""
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", None)
    if code is not None and name is not None:
        return f"{name}, {code.co_filename}:{code.co_firstlineno}"
    return describe(fn)
