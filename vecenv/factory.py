"""``vecenv.make``: a vector env of registered Gymnasium envs, built inside the workers.

It takes what ``gymnasium.make_vec`` takes where that applies (an id or an ``EnvSpec``,
``num_envs``, ``vector_kwargs``, ``wrappers``, env keyword arguments) and sets ``envs.spec`` as
``make_vec`` does, so code written for ``make_vec`` moves over by changing the function name.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, VectorizeMode, find_highest_version, get_env_id, parse_env_id

from vecenv.backends import BACKENDS, other_backends_keyword, vector_class
from vecenv.checks import check_count
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, UnknownEnvIdError, describe
from vecenv.worker.builders import check_env, pickles

__all__ = ["make", "check_env_id", "vector_keywords", "BACKENDS", "VECTORIZATION_MODE"]

VECTORIZATION_MODE = "vecenv"
"""``envs.spec.kwargs["vectorization_mode"]`` of a vector env from :func:`make`."""

#: The ``vectorization_mode`` values :func:`make` takes besides ``None``: its own, and
#: ``make_vec``'s modes of single envs (each gives SyncVectorEnv's results, as make's envs do).
_SINGLE_ENV_MODES = (VECTORIZATION_MODE, VectorizeMode.SYNC.value, VectorizeMode.ASYNC.value)


def _vector_params(cls: type) -> frozenset[str]:
    """The vector env class's keyword arguments: a ``make(**kwargs)`` key among these goes to the
    vector env (as it always has), any other key to the envs (as ``make_vec`` passes ``**kwargs``)."""
    return frozenset(
        name for name, p in inspect.signature(cls).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
    )


def vector_keywords(backend: str = "process") -> frozenset[str]:
    """The keyword arguments that :func:`make` gives the vector env of ``backend`` (its own named
    ones included); any other keyword it is given is an env keyword argument."""
    return _vector_params(vector_class(backend)) | {"num_workers", "env_kwargs", "vector_kwargs", "wrappers", "backend"}


def check_env_id(env_id: str) -> str:
    """The registered id that ``env_id`` (``"ID"`` or ``"module:ID"``) names, as ``make_vec``
    finds it: an id without a version names its latest version (with Gymnasium's warning).

    ``"module:ID"`` imports the module first, as ``gymnasium.make`` does, since importing it is
    what registers its envs.

    Raises:
        ImportError: the module cannot be imported.
        gymnasium.error.DeprecatedEnv, VersionNotFound, NamespaceNotFound, Error: Gymnasium's
            errors for an old or missing version of a registered name, an unknown namespace, or
            a malformed id (``"Cart Pole"``), as ``make_vec`` raises them.
        UnknownEnvIdError: no env of that name (a ``gymnasium.error.NameNotFound``); the message
            lists close matches.
    """
    module, separator, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            # Alone it says only "No module named ...", not what wanted the module, nor why.
            exc.add_note(
                f"env_id {env_id!r}: the part before ':' is a module imported to register the env (as "
                f"gymnasium.make imports it); check that {module!r} is installed, importable and registers {name!r}"
            )
            raise
    if name in gym.registry:
        _warn_if_out_of_date(name)
        return env_id
    namespace, base, version = parse_env_id(name)
    latest = find_highest_version(namespace, base) if version is None else None
    if latest is not None:
        resolved = get_env_id(namespace, base, latest)
        gym.logger.warn(
            f"Using the latest versioned environment `{resolved}` instead of the unversioned environment `{name}`."
        )
        return f"{module}{separator}{resolved}"
    try:
        gym.spec(name)  # Gymnasium's errors for a registered name (DeprecatedEnv, VersionNotFound, ...)
    except gym.error.NameNotFound:
        pass
    except gym.error.Error as exc:
        if type(exc) is not gym.error.Error:  # (the plain Error says only "no registered env")
            raise
    lowered = {key.lower(): key for key in gym.registry}
    matches = [lowered[m] for m in difflib.get_close_matches(name.lower(), list(lowered), n=3)]
    hint = (
        f"; did you mean {', '.join(map(repr, matches))}?"
        if matches
        else " (gymnasium.pprint_registry() lists the ids)"
    )
    raise UnknownEnvIdError(f"unknown environment id {name!r}{hint}")


def _warn_if_out_of_date(name: str) -> None:
    """Gymnasium's warning for an old version of an env (``CartPole-v0``), here in the parent as
    ``make_vec`` gives it, since the workers make the env from its spec, which does not warn."""
    namespace, base, version = parse_env_id(name)
    latest = find_highest_version(namespace, base)
    if version is not None and latest is not None and latest > version:
        gym.logger.deprecation(
            f"The environment {name} is out of date. You should consider upgrading to version `v{latest}`."
        )


@dataclasses.dataclass(frozen=True)
class EnvRecipe:
    """How a worker makes one env of :func:`make`: ``gymnasium.make`` then each wrapper in order.

    As ``make_vec``, it makes the env from the parent's spec (registered kwargs merged there),
    so the worker builds what the parent registered, an id registered at run time included,
    whatever its own registry holds; a ``"module:ID"`` still imports its module first, as
    ``gymnasium.make`` does. A spec that cannot be pickled (an entry point in ``__main__``
    holding a lock) stays behind, and the worker looks the id up itself (``spec`` is ``None``,
    and ``unsent`` says why, for the error if the worker does not know the id).

    An entry point written as a string into ``__main__`` (``"__main__:MyEnv"``, registered from a
    notebook, ``python -c`` or a script) names a class that a worker started with ``spawn`` or
    ``forkserver`` may not have: its ``__main__`` is not the parent's. ``main_entry`` carries what
    the string names in this process (cloudpickle sends a ``__main__`` class by value), and the
    worker puts it where the string points when its own ``__main__`` lacks that name, so the
    env's spec keeps the string, as ``make_vec`` leaves it.
    """

    env_id: str | None
    spec: EnvSpec | None
    #: for ``gymnasium.make(spec, ...)`` every env kwarg, registered ones included; for
    #: ``gymnasium.make(env_id, ...)`` those given to :func:`make` (the worker merges the rest)
    kwargs: dict[str, Any]
    wrappers: tuple[Callable[[gym.Env], gym.Env], ...]
    unsent: str | None = None
    main_entry: Callable[..., Any] | None = None

    def __call__(self) -> gym.Env:
        module = self.env_id.rpartition(":")[0] if self.env_id is not None else ""
        if module:
            importlib.import_module(module)  # what importing it sets up, as gymnasium.make does
        if self.main_entry is not None and self.spec is not None and isinstance(self.spec.entry_point, str):
            main = sys.modules["__main__"]
            name = self.spec.entry_point.partition(":")[2]
            if not hasattr(main, name):  # a worker whose __main__ is not the parent's (not forked)
                setattr(main, name, self.main_entry)
        target = self.spec if self.spec is not None else self.env_id
        assert target is not None  # an EnvRecipe has a spec or an id
        try:
            env = gym.make(target, **self.kwargs)
        except gym.error.NameNotFound as exc:
            if self.unsent is not None:
                exc.add_note(f"vecenv.make could not send this worker the env's spec: {self.unsent}")
            raise
        for i, wrapper in enumerate(self.wrappers):
            # Checked here, by the wrapper's index: a wrapper that returns nothing (one that
            # changes the env in place) was reported as `env_fns[i]`, a name make's callers never gave.
            env = check_env(wrapper(env), f"`wrappers[{i}]` must return a gymnasium.Env (the wrapped env)")
        return env

    def name_of_env(self, index: int) -> str:
        """Env ``index`` as :func:`make`'s caller knows it, for an error raised while building it
        (a worker would otherwise name it ``env_fns[index]``, which the caller never gave)."""
        given = self.env_id if self.spec is None or self.env_id is not None else self.spec.id
        return f"env {index} of vecenv.make({given!r})"


def _recipe_of_id(
    env_id: str,
    env_kwargs: dict[str, Any],
    spec: EnvSpec,
    spec_kwargs: dict[str, Any],
    wrappers: tuple[Callable[[gym.Env], gym.Env], ...],
) -> EnvRecipe:
    """The recipe for a string id: the spec when it pickles, else the id alone and why."""
    try:
        cloudpickle.dumps((spec, spec_kwargs))
    except Exception as exc:
        return EnvRecipe(env_id, None, env_kwargs, wrappers, unsent=f"{type(exc).__name__}: {exc}")
    return EnvRecipe(env_id, copy.deepcopy(spec), spec_kwargs, wrappers, main_entry=_main_entry(spec))


def _main_entry(spec: EnvSpec) -> Callable[..., Any] | None:
    """What ``spec``'s entry point names when it is a string into ``__main__`` that this
    process's ``__main__`` defines (see :class:`EnvRecipe`), else ``None``."""
    entry = spec.entry_point
    if not isinstance(entry, str) or entry.partition(":")[0] != "__main__":
        return None
    found = getattr(sys.modules.get("__main__"), entry.partition(":")[2], None)
    # One that cannot travel (a class holding a lock) stays behind: a forked worker has it anyway.
    return found if callable(found) and pickles(found) else None


def make(
    env_id: str | EnvSpec | None = None,
    num_envs: int = 1,
    num_workers: int | str | None = None,
    *,
    env_kwargs: dict[str, Any] | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None = None,
    backend: str = "process",
    **kwargs: Any,
) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``gymnasium.make(env_id, **env kwargs)`` in ``num_workers`` processes.

    Returns a :class:`SubprocVectorEnv` (a ``RayVectorEnv`` with ``backend="ray"``).

    Args:
        env_id: a registered id (``"ID"`` or ``"module:ID"``, checked here with close matches on a
            typo; without a version, its latest, as in ``make_vec``) or an ``EnvSpec`` (also
            taken as ``id=``, ``make_vec``'s name for it), such as the ``spec`` of a vector env made by this function
            or by ``gymnasium.make_vec``; as in ``make_vec``, a spec's ``num_envs``,
            ``vector_kwargs`` and ``wrappers`` kwargs take precedence over the arguments.
        num_envs: envs to build.
        num_workers: worker processes, or ``"auto"`` (see :class:`SubprocVectorEnv`); also
            accepted in ``vector_kwargs``.
        env_kwargs: keyword arguments for each env's ``gymnasium.make``.
        vector_kwargs: keyword arguments for :class:`SubprocVectorEnv` (``autoreset_mode``,
            ``copy``, ``context``, ``batch_size``, ...), as ``make_vec`` takes them.
        wrappers: callables applied in order to each env, in its worker (they travel with
            cloudpickle, so lambdas work), as ``make_vec`` applies them.
        backend: ``"process"`` (:class:`SubprocVectorEnv`) or ``"ray"`` (``RayVectorEnv``,
            whose keyword arguments ``vector_kwargs`` then takes).
        **kwargs: :class:`SubprocVectorEnv`'s keyword arguments by name, as before; any other
            key is an env keyword argument, as ``make_vec`` passes ``**kwargs`` to the env (but a
            keyword of the other backend's vector env, ``address`` say, is refused, naming
            ``env_kwargs``, which passes it to the envs). ``vectorization_mode`` may be given
            as ``make_vec``'s default (``None``), ``"sync"``, ``"async"`` (or the
            ``VectorizeMode``) or ``"vecenv"``: the envs are always single envs, with
            ``SyncVectorEnv``'s results (an id's ``vector_entry_point``, such as CartPole's, is
            not used: see ``SubprocVectorEnv.from_groups`` for native groups).

    The envs are built where their group runs: in the workers, or in this process for a group
    it hosts (``num_workers=0``, ``inline_group``; ``"auto"`` also builds one extra env here to
    time it). ``envs.spec`` is what ``make_vec`` sets: a copy
    of the registered spec whose ``kwargs`` hold the env kwargs plus ``num_envs`` (when not 1),
    ``vectorization_mode="vecenv"``, ``vector_kwargs`` and ``wrappers`` (when given), so
    ``vecenv.make(envs.spec)`` builds the same vector env again. One difference: an explicit
    ``max_episode_steps`` env kwarg is also set on the spec's field, as ``gymnasium.make`` does
    for a single env.

    Raises:
        TypeError: an argument of the wrong type, an unknown ``vector_kwargs`` key, or a key
            given twice; the message names the argument, what was expected and what was given.
        ValueError: ``num_envs`` is not a positive int, ``backend`` is unknown, or
            ``vectorization_mode`` is not one of single envs.
        UnknownEnvIdError: no env is registered under ``env_id`` (a ``gymnasium.error.NameNotFound``).
    """
    if "id" in kwargs:  # make_vec's name for the first argument
        if env_id is not None:
            raise ArgumentTypeError(f"`id` is make_vec's name of `env_id`: give one of them, got both ({env_id!r})")
        env_id = kwargs.pop("id")
    if isinstance(env_id, str):
        env_id = check_env_id(env_id)
    spec = _spec_of(env_id)
    _check_argument_kinds(kwargs, env_kwargs, vector_kwargs)

    # A spec (from make_vec or from us) carries its vector arguments in its kwargs, as make_vec reads them.
    spec_kwargs = dict(spec.kwargs)
    spec.kwargs = {}
    num_envs = spec_kwargs.pop("num_envs", num_envs)
    spec_kwargs.pop("vectorization_mode", None)
    if "vector_kwargs" in spec_kwargs:
        # As make_vec: the spec's vector arguments take precedence over the same ones given here.
        vector_kwargs = spec_kwargs.pop("vector_kwargs")
        given = set(vector_kwargs or {})
        kwargs = {k: v for k, v in kwargs.items() if k not in given}
        if "num_workers" in given:
            num_workers = None
    wrappers = spec_kwargs.pop("wrappers", wrappers)
    if isinstance(vector_kwargs, dict) and "backend" in vector_kwargs:  # our spec records a non-default backend
        vector_kwargs = dict(vector_kwargs)
        backend = vector_kwargs.pop("backend")
    _refuse_other_backends_keywords(backend, kwargs, env_kwargs)  # before Ray is imported
    cls = vector_class(backend)
    vector_params = _vector_params(cls)

    num_envs = check_count(num_envs, "num_envs")
    vector = _vector_arguments(cls, vector_params, vector_kwargs, kwargs, num_workers)
    env_extra = _merge(
        "env_kwargs", dict(env_kwargs or {}), {k: v for k, v in kwargs.items() if k not in vector_params}
    )
    wrappers = _check_wrappers(wrappers)

    # As make_vec: the workers make the envs from this process's spec (see EnvRecipe), so what
    # was registered here, at run time too, is what they build. A copy of its own: the vector
    # env's spec below gets the vector kwargs.
    merged = {**spec_kwargs, **env_extra}
    if isinstance(env_id, str):
        env_fn = _recipe_of_id(env_id, env_extra, spec, merged, wrappers)
    else:
        env_fn = EnvRecipe(None, copy.deepcopy(spec), merged, wrappers, main_entry=_main_entry(spec))
    _check_sendable(env_fn)
    envs = cls([env_fn] * num_envs, vector.get("num_workers"), **_without(vector, "num_workers"))
    if backend != "process":
        vector["backend"] = backend
    envs.spec = _vector_spec(spec, {**spec_kwargs, **env_extra}, num_envs, vector, wrappers)
    return envs


def _check_sendable(recipe: EnvRecipe) -> None:
    """Raise pickling's error, with a note naming the env kwarg or wrapper it failed on, when
    ``recipe`` cannot travel to the workers (an env kwarg holding a lock, a lambda wrapper
    capturing an open file): pickling's own message names only the object it met."""
    try:
        cloudpickle.dumps(recipe)
    except Exception as exc:
        parts = [(f"the env kwarg `{k}`", v) for k, v in recipe.kwargs.items()]
        parts += [(f"`wrappers[{i}]`", w) for i, w in enumerate(recipe.wrappers)]
        culprit = next((name for name, part in parts if not pickles(part)), "the env's spec")
        exc.add_note(
            f"vecenv.make sends each worker the env's kwargs and wrappers with cloudpickle: {culprit} cannot be pickled"
        )
        raise


def _refuse_other_backends_keywords(backend: str, kwargs: dict[str, Any], env_kwargs: Any) -> None:
    """A keyword of another backend's vector env (``context=`` with ``backend="ray"``) would
    otherwise reach every env as an env argument and fail there, in the workers. Checked
    before the backend's class is imported (Ray may not be installed); an unknown backend is
    left for :func:`~vecenv.backends.vector_class` to name."""
    found = other_backends_keyword(backend, kwargs)
    if found is not None:
        name, other = found
        raise InvalidArgumentError(
            f"`{name}` is a keyword of backend={other!r}, not of backend={backend!r}, got {name}="
            f"{describe(kwargs[name])}; to pass it to the envs, use env_kwargs={{{name!r}: ...}}"
        )


def _spec_of(env_id: Any) -> EnvSpec:
    """A copy of the spec ``env_id`` names (checked, with close matches on a typo) or is."""
    if isinstance(env_id, EnvSpec):
        return copy.deepcopy(env_id)
    if isinstance(env_id, str):  # (checked and resolved by check_env_id)
        return copy.deepcopy(gym.spec(env_id.rpartition(":")[2]))
    raise ArgumentTypeError(f"`env_id` must be a registered env id (str) or an EnvSpec, got {describe(env_id)}")


def _without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


def _check_argument_kinds(kwargs: dict[str, Any], env_kwargs: Any, vector_kwargs: Any) -> None:
    # make_vec's default (None), its modes of single envs ("sync", "async": the results are
    # SyncVectorEnv's either way) and this function's own mode name mean what make builds anyway.
    mode = kwargs.pop("vectorization_mode", None)
    name = mode.value if isinstance(mode, VectorizeMode) else mode
    if not (name is None or (isinstance(name, str) and name in _SINGLE_ENV_MODES)):
        raise InvalidArgumentError(
            "`vectorization_mode` must be None, 'vecenv', 'sync' or 'async': vecenv.make "
            "builds a vecenv.SubprocVectorEnv of single envs (an id's vector_entry_point is not used; "
            "SubprocVectorEnv.from_groups hosts native vector envs), got "
            f"vectorization_mode={describe(mode)}"
        )
    for name, value in (("env_kwargs", env_kwargs), ("vector_kwargs", vector_kwargs)):
        if value is not None and not isinstance(value, dict):
            raise ArgumentTypeError(f"`{name}` must be a dict or None, got {describe(value)}")


def _vector_arguments(
    vector_class: type,
    vector_params: frozenset[str],
    vector_kwargs: Any,
    kwargs: dict[str, Any],
    num_workers: Any,
) -> dict[str, Any]:
    """The vector env's keyword arguments: ``vector_kwargs`` with its keys given by name in
    ``kwargs`` and ``num_workers``; a key given twice or unknown to the class raises."""
    vector = _merge("vector_kwargs", dict(vector_kwargs or {}), {k: v for k, v in kwargs.items() if k in vector_params})
    unknown = sorted(set(vector) - vector_params - {"num_workers"})
    if unknown:
        raise ArgumentTypeError(
            f"`vector_kwargs` keys must be {vector_class.__name__} arguments "
            f"({', '.join(sorted(vector_params | {'num_workers'}))}), got unknown {', '.join(map(repr, unknown))}"
        )
    if num_workers is not None:
        vector = _merge("vector_kwargs", vector, {"num_workers": num_workers})
    return vector


def _vector_spec(
    spec: EnvSpec,
    env_kwargs: dict[str, Any],
    num_envs: int,
    vector: dict[str, Any],
    wrappers: Sequence[Callable[[gym.Env], gym.Env]],
) -> EnvSpec:
    """``spec`` as ``make_vec`` records a vector env in it (see :func:`make`)."""
    spec.kwargs = dict(env_kwargs)
    if num_envs != 1:
        spec.kwargs["num_envs"] = num_envs
    spec.kwargs["vectorization_mode"] = VECTORIZATION_MODE
    if vector:
        spec.kwargs["vector_kwargs"] = vector
    if wrappers:
        spec.kwargs["wrappers"] = list(wrappers)
    if spec.kwargs.get("max_episode_steps") is not None:
        spec.max_episode_steps = spec.kwargs["max_episode_steps"]
    return spec


def _merge(name: str, base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``extra``; a key in both is an error, not a silent override."""
    both = sorted(set(base) & set(extra))
    if both:
        given = ", ".join(map(repr, both))
        raise ArgumentTypeError(f"{given} given twice: in `{name}` and as a keyword argument; give it once")
    return {**base, **extra}


def _check_wrappers(wrappers: Any) -> tuple[Callable[[gym.Env], gym.Env], ...]:
    if wrappers is None:
        return ()
    if isinstance(wrappers, (str, bytes)) or callable(wrappers) or not isinstance(wrappers, Sequence):
        raise ArgumentTypeError(
            f"`wrappers` must be a sequence of callables (env -> env) or None, got {describe(wrappers)}"
        )
    for i, wrapper in enumerate(wrappers):
        if not callable(wrapper):
            raise ArgumentTypeError(f"`wrappers[{i}]` must be callable (env -> wrapped env), got {describe(wrapper)}")
    return tuple(wrappers)
