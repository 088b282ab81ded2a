"""RLlib's EnvRunners over vecenv: each EnvRunner steps its envs in vecenv's worker groups.

RLlib's new API stack builds the envs of every EnvRunner with ``gymnasium.make_vec(...,
vectorization_mode=config.gym_env_vectorize_mode)``. For an env registered with
``ray.tune.registry.register_env``, the mode ``"vector_entry_point"`` makes RLlib call the
registered creator once per EnvRunner, with ``num_envs`` added to the env config. A creator that
then returns ``vecenv.make(...)`` puts vecenv's worker processes under the EnvRunner in place of
RLlib's ``SYNC`` (all envs in the EnvRunner's process) or ``ASYNC`` (one process per env)
vectorization. :func:`register_env` registers such a creator::

    from ray.rllib.algorithms.ppo import PPOConfig
    from vecenv.integrations import rllib

    rllib.register_env("vecenv-CartPole", "CartPole-v1", num_workers=2)
    config = (
        PPOConfig()
        .environment("vecenv-CartPole")
        .env_runners(num_envs_per_env_runner=64, gym_env_vectorize_mode="vector_entry_point")
    )

Ray and RLlib are imported only by :func:`register_env`; :class:`EnvCreator` needs neither.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from vecenv.errors import ArgumentTypeError, InvalidArgumentError, MissingDependencyError, describe
from vecenv.factory import make, vector_keywords

__all__ = ["EnvCreator", "RLlibConfigError", "register_env"]


class RLlibConfigError(InvalidArgumentError):
    """RLlib asked a vecenv env creator for something it cannot give: a single env.

    That is what RLlib does under ``gym_env_vectorize_mode="sync"`` or ``"async"`` (it wraps one
    env per creator call itself); vecenv is used only under ``"vector_entry_point"``.
    """


class EnvCreator:
    """An RLlib env creator that returns ``vecenv.make(env_id, num_envs, num_workers, ...)``.

    RLlib calls it with the EnvRunner's env config (``config.environment(env_config=...)``) plus
    ``num_envs``; the env config's entries become the env's keyword arguments (as
    ``gymnasium.make(env_id, **env_config)``), overriding those given here. It is picklable (Ray
    ships it to every EnvRunner).

    Args:
        env_id: a Gymnasium id (``"ID"`` or ``"module:ID"``) or ``EnvSpec``, as ``vecenv.make``
            takes it. The spec of a vector env (``envs.spec``) gives its env kwargs, wrappers and
            vector kwargs, which this creator's arguments override; RLlib gives ``num_envs``.
        num_workers: vecenv worker processes per EnvRunner (``None``: one per core, or the
            ``num_workers`` of ``vector_kwargs`` or of ``env_id``'s vector kwargs); an EnvRunner
            with fewer envs than this (an evaluation override, say) starts one per env.
            Every EnvRunner starts its own, so ``num_env_runners`` (or 1) times this many
            processes step envs: keep that product at or below the cores RLlib may use.
        **make_kwargs: any other keyword argument of ``vecenv.make`` (``vector_kwargs``,
            ``wrappers``, ``backend``, ``context``, ...); not ``num_envs``, which RLlib gives.

    Raises:
        ArgumentTypeError: ``num_envs`` among ``make_kwargs``, or ``num_workers`` given both as
            the argument and in ``vector_kwargs``.
        RLlibConfigError: an ``autoreset_mode`` other than ``NEXT_STEP``, or ``copy=False``
            (by name, in ``vector_kwargs`` or in ``env_id``'s): RLlib would record wrong
            episodes under either.
    """

    def __init__(
        self, env_id: str | gym.envs.registration.EnvSpec, num_workers: int | str | None = None, **make_kwargs: Any
    ) -> None:
        if "num_envs" in make_kwargs:
            raise ArgumentTypeError(
                "EnvCreator(num_envs=...): RLlib gives each EnvRunner's number of envs; set it with "
                f"config.env_runners(num_envs_per_env_runner=...), got num_envs={make_kwargs['num_envs']!r}"
            )
        own = make_kwargs.get("vector_kwargs")
        if num_workers is not None and isinstance(own, Mapping) and "num_workers" in own:
            raise ArgumentTypeError(
                f"EnvCreator: `num_workers` given twice, as {num_workers!r} and in `vector_kwargs` as "
                f"{own['num_workers']!r}; give it once"
            )
        if isinstance(env_id, gym.envs.registration.EnvSpec):
            env_id, make_kwargs = _unpack_vector_spec(env_id, make_kwargs, num_workers is not None)
        vector_kwargs = make_kwargs.get("vector_kwargs")
        if isinstance(vector_kwargs, Mapping) and "num_workers" in vector_kwargs:
            num_workers = vector_kwargs["num_workers"]  # one place to read it from, and to cap it
            make_kwargs["vector_kwargs"] = {k: v for k, v in vector_kwargs.items() if k != "num_workers"}
            vector_kwargs = make_kwargs["vector_kwargs"]
        given = {**(vector_kwargs if isinstance(vector_kwargs, Mapping) else {}), **make_kwargs}
        _check_rllib_reads_episodes(given)
        self.env_id = env_id
        self.num_workers = num_workers
        self.make_kwargs = make_kwargs

    def __call__(self, env_config: Mapping[str, Any]) -> gym.vector.VectorEnv:
        """The EnvRunner's vector env: ``env_config["num_envs"]`` envs in vecenv's workers.

        Raises:
            RLlibConfigError: ``env_config`` has no ``num_envs`` (RLlib asked for one env, as it
                does unless ``gym_env_vectorize_mode="vector_entry_point"``).
        """
        if "num_envs" not in env_config:
            raise RLlibConfigError(
                f"RLlib asked the vecenv creator of {self.env_id!r} for a single env (its env config "
                f"has no 'num_envs': {sorted(env_config)}); vecenv makes vector envs only: set "
                "config.env_runners(gym_env_vectorize_mode='vector_entry_point')"
            )
        num_envs = int(env_config["num_envs"])
        env_kwargs = {key: value for key, value in env_config.items() if key != "num_envs"}
        # The env config overrides the creator's env kwargs, those given by name too.
        vector_keys = vector_keywords(self.make_kwargs.get("backend", "process"))
        make_kwargs = {k: v for k, v in self.make_kwargs.items() if k in vector_keys or k not in env_kwargs}
        if env_kwargs:
            make_kwargs["env_kwargs"] = {**make_kwargs.get("env_kwargs", {}), **env_kwargs}
        num_workers = self.num_workers
        if isinstance(num_workers, int) and not isinstance(num_workers, bool) and num_workers > num_envs:
            num_workers = num_envs  # an EnvRunner with fewer envs (an evaluation override): one worker each
        return make(self.env_id, num_envs, num_workers, **make_kwargs)

    def __repr__(self) -> str:
        extra = "".join(f", {key}={value!r}" for key, value in self.make_kwargs.items())
        return f"EnvCreator({self.env_id!r}, num_workers={self.num_workers!r}{extra})"


def _unpack_vector_spec(
    spec: gym.envs.registration.EnvSpec, make_kwargs: dict[str, Any], has_num_workers: bool
) -> tuple[gym.envs.registration.EnvSpec, dict[str, Any]]:
    """A vector env's spec (``envs.spec`` of ``vecenv.make`` or ``make_vec``) as the env's spec and
    the creator's keyword arguments: its vector kwargs and wrappers join ``make_kwargs`` (which
    win over them, as does the creator's ``num_workers`` when it ``has_num_workers``), and its
    ``num_envs`` goes, as RLlib gives each EnvRunner's."""
    kwargs = dict(spec.kwargs)
    kwargs.pop("num_envs", None)
    kwargs.pop("vectorization_mode", None)
    spec_vector = kwargs.pop("vector_kwargs", None)
    spec_wrappers = kwargs.pop("wrappers", None)
    env_spec = copy.deepcopy(spec)
    env_spec.kwargs = kwargs
    merged = dict(make_kwargs)
    if isinstance(spec_vector, Mapping) and spec_vector:
        vector = dict(spec_vector)
        backend = vector.pop("backend", None)
        if has_num_workers:
            vector.pop("num_workers", None)
        if backend is not None:
            merged.setdefault("backend", backend)
        own = merged.get("vector_kwargs")
        merged["vector_kwargs"] = {
            **{k: v for k, v in vector.items() if k not in merged},
            **(own if isinstance(own, Mapping) else {}),
        }
    if spec_wrappers:
        merged.setdefault("wrappers", spec_wrappers)
    return env_spec, merged


def _check_rllib_reads_episodes(given: Mapping[str, Any]) -> None:
    """Refuse the vector env settings under which RLlib's EnvRunners record wrong episodes: they
    read an autoreset as ``NEXT_STEP`` lays it out, and keep each step's observations as given
    (``copy=False`` would hand them views that the next step overwrites)."""
    mode = given.get("autoreset_mode")
    if mode is not None:
        try:
            known = AutoresetMode(mode)
        except ValueError:
            known = None  # not a mode at all: vecenv.make names it
        if known is not None and known is not AutoresetMode.NEXT_STEP:
            raise RLlibConfigError(
                f"RLlib's EnvRunners read episodes from a vector env whose autoreset mode is NEXT_STEP; with "
                f"autoreset_mode={describe(mode)} they would record wrong episodes: leave it unset"
            )
    if given.get("copy") is False:
        raise RLlibConfigError(
            "RLlib's EnvRunners keep each step's observations, which copy=False would make views that the "
            "next step overwrites: leave `copy` unset"
        )


def register_env(
    name: str, env_id: str | gym.envs.registration.EnvSpec, num_workers: int | str | None = None, **make_kwargs: Any
) -> EnvCreator:
    """Register ``name`` with RLlib (``ray.tune.registry.register_env``) as vecenv's ``env_id``.

    Then ``config.environment(name).env_runners(num_envs_per_env_runner=N,
    gym_env_vectorize_mode="vector_entry_point")`` gives each EnvRunner one vecenv vector env of
    ``N`` envs in ``num_workers`` worker processes. Returns the registered :class:`EnvCreator`;
    its arguments are :class:`EnvCreator`'s.
    """
    try:
        from ray.tune.registry import register_env as ray_register_env
    except ImportError as exc:  # no Ray, or Ray without the parts RLlib needs (the ray extra alone)
        raise MissingDependencyError(
            f"vecenv.integrations.rllib.register_env needs RLlib: pip install 'vecenv[rllib]' (import failed: {exc})"
        ) from exc

    creator = EnvCreator(env_id, num_workers, **make_kwargs)
    ray_register_env(name, creator)
    return creator
