"""``concat_vec_envs_v1(..., base_class="stable_baselines3")``: the drop-in as an SB3 ``VecEnv``.

It gives what SuperSuit's own ``SB3VecEnvWrapper`` gives over SuperSuit's in-process vector env:
dones are ``terminations[i] or truncations[i]`` per slot (uint8, as SuperSuit's flags), infos are
the list of slot dicts (``"terminal_observation"`` when a copy ends, no ``"TimeLimit.truncated"``:
SuperSuit sets none, and SB3's bootstrapping must see the same infos to learn the same), and the
reset infos are kept in ``reset_infos``. Two things SuperSuit's wrapper does not do, and this one
does: ``seed()`` (which SB3's ``PPO(seed=...)`` calls) seeds the next reset instead of raising,
and ``get_attr`` answers per slot. Both ``get_attr`` and ``env_is_wrapped`` answer for the slots
``indices`` selects, as SB3's ``VecEnv`` does (SuperSuit's ignores them).

This is not ``vecenv.sb3.SubprocVecEnv``: that one wraps single-agent envs and adds SB3's own
``TimeLimit.truncated`` infos, which SuperSuit's path does not have.

Importing this module imports Stable-Baselines3 (and torch); nothing else in vecenv does.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from vecenv.errors import MissingDependencyError
from vecenv.parent.vector_env import Uncopyable

try:
    from stable_baselines3.common.vec_env import VecEnvWrapper
    from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError as exc:  # SB3 itself, or torch which it imports, is missing
    raise MissingDependencyError(
        "concat_vec_envs_v1(base_class='stable_baselines3') needs Stable-Baselines3: "
        f"pip install 'vecenv[sb3]' (import failed: {exc})"
    ) from exc

from vecenv.integrations.sb3.vec_env import selected_envs  # (imports SB3: after the check above)

__all__ = ["SB3VecEnvWrapper"]


class SB3VecEnvWrapper(Uncopyable, VecEnvWrapper):
    """An SB3 ``VecEnv`` over :class:`vecenv.supersuit.ConcatVecEnv`, as SuperSuit's wrapper."""

    def __init__(self, venv: Any) -> None:
        # SuperSuit's wrapper sets these itself rather than calling VecEnvWrapper.__init__, whose
        # get_attr("render_mode") would reach into every copy; so does this one.
        self.venv = venv  # what SB3's wrappers unwrap
        self._drop_in: Any = venv  # the same object, as what it is
        self.num_envs = venv.num_envs
        self.observation_space = venv.observation_space
        self.action_space = venv.action_space
        self.render_mode = venv.render_mode
        self.reset_infos: list[dict[str, Any]] = []
        self._next_seed: int | None = None

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Seed the next :meth:`reset`: copy ``c`` gets ``seed + c``. Returns one seed per env
        (SB3's ``VecEnv.seed``), each slot its copy's."""
        self._next_seed = seed
        copies = self._drop_in.num_copies
        per_copy = self.num_envs // copies
        return [None if seed is None else seed + c for c in range(copies) for _ in range(per_copy)]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> VecEnvObs:
        """Reset every copy; their infos go to ``reset_infos``."""
        if seed is not None:
            self.seed(seed)
        seed, self._next_seed = self._next_seed, None
        observations, self.reset_infos = self._drop_in.reset(seed=seed, options=options)
        return observations

    def step_wait(self) -> VecEnvStepReturn:
        observations, rewards, terminations, truncations, infos = self._drop_in.step_wait()
        dones = terminations | truncations  # uint8, one per slot
        return observations, rewards, dones, infos

    def _select(self, per_slot: list[Any], indices: VecEnvIndices) -> list[Any]:
        """The values of the slots ``indices`` selects, in that order, as SB3's ``VecEnv`` selects
        envs (:func:`~vecenv.integrations.sb3.vec_env.selected_envs`)."""
        return per_slot if indices is None else [per_slot[i] for i in selected_envs(indices, self.num_envs)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """Per selected slot, whether its env is wrapped in ``wrapper_class`` (a parallel env: never)."""
        return self._select(self._drop_in.env_is_wrapped(wrapper_class), indices)

    def getattr_recursive(self, name: str) -> Any:
        raise AttributeError(name)

    def getattr_depth_check(self, name: str, already_found: bool) -> str | None:
        return None

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Attribute ``attr_name`` of each selected slot's env (``render_mode``: the vector env's)."""
        if attr_name == "render_mode":
            return self._select([self.render_mode] * self.num_envs, indices)
        return self._select(self._drop_in.get_attr(attr_name), indices)

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """The first copy's frame (as SuperSuit); a ``mode`` cannot change the env's render mode."""
        if mode is not None:
            warnings.warn(
                "PettingZoo environments do not take the `render(mode)` argument, to change rendering mode, "
                "re-initialize the environment using the `render_mode` argument.",
                stacklevel=2,
            )
        return self._drop_in.render()
