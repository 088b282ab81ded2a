"""``vecenv.make``: a vector env of registered Gymnasium envs, built inside the workers."""

from __future__ import annotations

import difflib
import importlib
import functools
from typing import Any

import gymnasium as gym

from vecenv.coordinator import SubprocVectorEnv
from vecenv.errors import describe

__all__ = ["make", "check_env_id"]


def check_env_id(env_id: str) -> None:
    """Raise unless ``env_id`` (``"ID"`` or ``"module:ID"``) names a registered env.

    ``"module:ID"`` imports the module first, as ``gymnasium.make`` does, since importing it is
    what registers its envs.

    Raises:
        ImportError: the module cannot be imported.
        gymnasium.error.NameNotFound: no such id; the message lists close matches.
    """
    module, _, name = env_id.rpartition(":")
    if module:
        importlib.import_module(module)
    if name in gym.registry:
        return
    lowered = {key.lower(): key for key in gym.registry}
    matches = [lowered[m] for m in difflib.get_close_matches(name.lower(), list(lowered), n=3)]
    hint = f"; did you mean {', '.join(map(repr, matches))}?" if matches else " (gymnasium.pprint_registry() lists the ids)"
    raise gym.error.NameNotFound(f"unknown environment id {name!r}{hint}")


def make(
    env_id: str,
    num_envs: int,
    num_workers: int | None = None,
    *,
    env_kwargs: dict[str, Any] | None = None,
    **vector_kwargs: Any,
) -> SubprocVectorEnv:
    """``num_envs`` copies of ``gymnasium.make(env_id, **env_kwargs)`` in ``num_workers`` processes.

    ``vector_kwargs`` are :class:`SubprocVectorEnv`'s keyword arguments (``autoreset_mode``,
    ``copy``, ``context``, ...). The id is checked in the parent (with close matches on a typo);
    the envs themselves are only ever built in the workers.
    """
    if not isinstance(env_id, str):
        raise TypeError(f"`env_id` must be a registered env id (str), got {describe(env_id)}")
    check_env_id(env_id)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"`num_envs` must be a positive int, got {describe(num_envs)}")
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise TypeError(f"`env_kwargs` must be a dict or None, got {describe(env_kwargs)}")
    env_fn = functools.partial(gym.make, env_id, **(env_kwargs or {}))
    envs = SubprocVectorEnv([env_fn] * num_envs, num_workers, **vector_kwargs)
    envs.spec = envs._env_spec
    return envs
