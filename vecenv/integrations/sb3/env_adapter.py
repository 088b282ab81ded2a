"""Worker side of :mod:`vecenv.sb3`: a wrapper that gives each env Stable-Baselines3's semantics.

This module imports neither Stable-Baselines3 nor torch, so workers started with ``spawn`` or
``forkserver`` stay light: only the parent needs SB3 (for its ``VecEnv`` base class).

Why a wrapper at all: :class:`vecenv.SubprocVectorEnv` merges per-env infos into Gymnasium's
batched layout (one array per key, ``_key`` masks), which is lossy for SB3's list of per-env
dicts (a Python ``int`` comes back as ``np.int64``, a ``Dict`` final observation as a dict of
object arrays). :class:`SB3EnvAdapter` puts each non-empty info dict, and on the step that ends
an episode the terminal observation too, in an opaque :class:`InfoBox` under one key; an
opaque object travels through the merge unchanged. It also runs SB3's per-env calls
(``env_method``, ``get_attr``, ``set_attr``, ``has_attr``, ``env_is_wrapped``) on the env
exactly as SB3's own worker does, for the envs an ``indices`` argument selects.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from copy import deepcopy
from typing import Any

import cloudpickle
import gymnasium as gym

from vecenv.errors import InvalidArgumentError
from vecenv.worker.group import snapshot_info

__all__ = ["INFO_KEY", "DISPATCH", "InfoBox", "SB3Call", "SB3EnvAdapter", "SB3Op", "AdapterFn", "kept_info"]

#: The info key under which an :class:`InfoBox` travels (the adapter's infos have no other key).
INFO_KEY = "vecenv_sb3"
#: The adapter method that :meth:`vecenv.SubprocVectorEnv.call` invokes for SB3's per-env calls.
DISPATCH = "vecenv_sb3_call"


class SB3Op(enum.Enum):
    """SB3's per-env operations, as :class:`SB3EnvAdapter` runs them in the worker."""

    ENV_METHOD = enum.auto()  # call ``name(*args, **kwargs)``, found with ``get_wrapper_attr``
    GET_ATTR = enum.auto()  # attribute ``name``, found with ``get_wrapper_attr``
    SET_ATTR = enum.auto()  # set ``name`` to ``value`` on the outermost wrapper, as SB3 does
    HAS_ATTR = enum.auto()  # whether ``get_wrapper_attr(name)`` finds anything
    IS_WRAPPED = enum.auto()  # whether a wrapper of class ``value`` is in the chain
    STAGE_OPTIONS = enum.auto()  # ``value[i]`` is env i's options for its next reset


@dataclasses.dataclass(frozen=True)
class SB3Call:
    """One SB3 per-env operation, sent to every env through the engine's ``call``.

    ``counts`` maps an env index to how often ``indices`` selected it (``None``: every env,
    once); an env runs the operation that many times and returns that many results.
    """

    op: SB3Op
    counts: Mapping[int, int] | None = None
    name: str = ""
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    value: Any = None


class InfoBox:
    """One env's info dict (and, at an episode's end, its terminal observation), kept opaque.

    Not a dict, a number or an array, so Gymnasium's info batching stores it as one object.
    """

    __slots__ = ("info", "terminal_obs")

    def __init__(self, info: dict[str, Any], terminal_obs: Any = None) -> None:
        self.info = info
        self.terminal_obs = terminal_obs

    def __repr__(self) -> str:
        return f"InfoBox({self.info!r})"


class SB3EnvAdapter(gym.Wrapper):
    """Wraps the env an SB3 ``env_fn`` returned; the engine steps this wrapper.

    * ``step`` returns the env's results unchanged except the info, which becomes
      ``{INFO_KEY: InfoBox(info)}`` (or ``{}`` when the info is empty, so nothing travels); on a
      terminal or truncated step the box also holds the terminal observation. As SB3's worker
      does, it first writes ``"TimeLimit.truncated"`` (and at an episode's end
      ``"terminal_observation"``) into the env's own info dict.
    * ``step`` and ``reset`` box the env's info as it is when the env returns it
      (:func:`kept_info`), as SB3's classes keep it: the env may change it
      later, in place, before the parent reads it (at its next step, with every env in the
      parent, ``num_workers=0``), or before the worker's reply is pickled (in the autoreset
      that follows, or the next env's step where the envs of a worker share it). The
      terminal observation is the info's copy of it.
    * ``reset`` calls the env as SB3's worker does: ``reset(seed=seed)``, plus ``options=`` only
      when the options are non-empty. Per-env options are staged beforehand with the
      ``SB3Op.STAGE_OPTIONS`` call (the engine's ``reset`` takes one options dict for all envs).
    * ``spec`` is the env's own (this wrapper is an implementation detail, not part of it).

    Args:
        env: what the user's ``env_fn`` returned (an old ``gym`` env is converted with SB3's own
            ``_patch_env``, imported only then).
        index: the env's index in the vector env, used to pick its share of ``indices`` calls.
    """

    def __init__(self, env: Any, index: int) -> None:
        if not isinstance(env, gym.Env):
            from stable_baselines3.common.vec_env.patch_gym import _patch_env  # only for gym envs

            env = _patch_env(env)
        super().__init__(env)
        self.sb3_index = index
        self._staged_options: dict[str, Any] | None = None

    @property
    def spec(self) -> Any:  # type: ignore[override]  # Env declares a plain attribute
        """The env's own spec: this wrapper is an implementation detail, not part of it."""
        return self.env.spec

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        sent = bool(info)  # an empty info travels as nothing: the parent gives that env a fresh dict
        # SB3's worker writes its keys into the env's own dict: an env that returns one dict on
        # every step finds them there, and gives them again on its next steps, as under SB3.
        info["TimeLimit.truncated"] = truncated and not terminated
        if terminated or truncated:
            info["terminal_observation"] = obs
            kept = kept_info(info)
            return obs, reward, terminated, truncated, {INFO_KEY: InfoBox(kept, kept["terminal_observation"])}
        return obs, reward, terminated, truncated, ({INFO_KEY: InfoBox(kept_info(info))} if sent else {})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        staged, self._staged_options = self._staged_options, None
        if staged is not None:
            options = staged
        # SB3 passes options only when they are non-empty.
        obs, info = self.env.reset(seed=seed, options=options) if options else self.env.reset(seed=seed)
        return obs, ({INFO_KEY: InfoBox(kept_info(info))} if info else {})

    def vecenv_sb3_call(self, request: SB3Call) -> list[Any]:
        """Run ``request`` once per time this env appears in ``indices``.

        Returns the results, in order; an env that is not selected returns ``[]``. Arguments
        and values are deep-copied per call: SB3's workers each unpickle their own copy, while
        the engine unpickles one copy per worker for all the envs it hosts.
        """
        times = 1 if request.counts is None else request.counts.get(self.sb3_index, 0)
        return [self._run(request) for _ in range(times)]

    def _run(self, request: SB3Call) -> Any:
        env = self.env
        op = request.op
        if op is SB3Op.ENV_METHOD:
            return env.get_wrapper_attr(request.name)(*deepcopy(request.args), **deepcopy(dict(request.kwargs)))
        if op is SB3Op.GET_ATTR:
            return env.get_wrapper_attr(request.name)
        if op is SB3Op.SET_ATTR:
            setattr(env, request.name, deepcopy(request.value))  # on the env itself, as SB3 does
            return None
        if op is SB3Op.HAS_ATTR:
            try:
                env.get_wrapper_attr(request.name)
            except AttributeError:
                return False
            return True
        if op is SB3Op.IS_WRAPPED:
            return is_wrapped(env, request.value)
        if op is SB3Op.STAGE_OPTIONS:
            options = request.value[self.sb3_index]
            self._staged_options = deepcopy(options) if options else None
            return None
        raise InvalidArgumentError(f"`request.op` must be an SB3Op, got {op!r}")


def kept_info(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` as it is now, as SB3's classes keep it (``DummyVecEnv`` deep-copies its infos,
    each process of ``SubprocVecEnv`` pickles them at once): a deep copy, of the same types.

    One that cannot be deep-copied (it holds a lock or a handle) is
    :func:`~vecenv.worker.group.snapshot_info`'s copy, which keeps such values as they are.
    """
    try:
        return deepcopy(info)
    except Exception:
        return snapshot_info(info)


def is_wrapped(env: gym.Env, wrapper_class: type) -> bool:
    """Whether any wrapper in ``env``'s chain of ``gym.Wrapper`` objects is a ``wrapper_class``."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False


class AdapterFn:
    """A picklable env constructor: calls the user's ``env_fn`` and wraps the env for SB3.

    It pickles its ``env_fn`` on its own, so each env unpickles its own copy of whatever its
    constructor holds, as each process of SB3's ``SubprocVecEnv`` does. Pickled together with
    the other constructors of its worker, it would share the objects they hold in common:
    ``[lambda: env] * n`` would give the envs of one worker one env instance, stepped once per
    env on every step, and a constructor that counts its calls would count across envs.
    """

    def __init__(self, env_fn: Callable[[], Any], index: int) -> None:
        self.env_fn = env_fn
        self.index = index

    def __reduce__(self) -> tuple[Callable[[bytes, int], AdapterFn], tuple[bytes, int]]:
        return _load_adapter_fn, (cloudpickle.dumps(self.env_fn), self.index)

    def __call__(self) -> SB3EnvAdapter:
        return SB3EnvAdapter(self.env_fn(), self.index)


def _load_adapter_fn(env_fn: bytes, index: int) -> AdapterFn:
    """An :class:`AdapterFn` from its pickled ``env_fn``: one ``loads`` of its own, so it shares no
    object with the other envs' constructors."""
    return AdapterFn(cloudpickle.loads(env_fn), index)
