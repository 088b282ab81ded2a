"""The in-process group: a worker's envs, stepped in index order, with Gymnasium's autoreset.

This is the one place where autoreset lives. It runs without any process around it (the unit
tests drive it directly); a worker is this class plus a pipe. Results are written straight into
the group's rows of the :class:`~vecenv.buffers.Buffers`; only non-empty infos are returned,
tagged with the env's index within the group, in the order ``SyncVectorEnv`` adds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, iterate

from vecenv.buffers import Buffers
from vecenv.spaces import tree_copy

__all__ = ["EnvGroup", "InfoEntries"]

#: ``(local env index, info dict)`` pairs, to be merged in order by ``VectorEnv._add_info``.
InfoEntries = list[tuple[int, dict[str, Any]]]


class EnvGroup:
    """Several envs that one process steps one after the other.

    Args:
        envs: the envs, in global index order.
        autoreset_mode: Gymnasium's autoreset mode, applied per env exactly as ``SyncVectorEnv``
            applies it.
        buffers: this group's rows of the vector env's arrays.

    Attributes:
        blame: after a method raised, the local index of the env whose code raised, else ``None``.
    """

    def __init__(self, envs: Sequence[gym.Env], autoreset_mode: AutoresetMode, buffers: Buffers) -> None:
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.autoreset_mode = autoreset_mode
        self.buffers = buffers
        self.blame: int | None = None
        self._write_obs = buffers.observation_writer()
        self._autoreset = [False] * self.num_envs
        single_action_space = self.envs[0].action_space if self.envs else None
        self._batched_action_space = (
            batch_space(single_action_space, self.num_envs) if self.envs else None
        )
        self._shared_actions = buffers.spec.shared_actions

    # -- reset and step ----------------------------------------------------------------------

    def reset(
        self, seeds: Sequence[int | None], options: dict[str, Any] | None, mask: Sequence[bool] | None
    ) -> InfoEntries:
        """Reset the envs selected by ``mask`` (all when ``None``) with one seed per env."""
        infos: InfoEntries = []
        buffers, write = self.buffers, self._write_obs
        j = 0
        try:
            for j, env in enumerate(self.envs):
                if mask is not None and not mask[j]:
                    continue
                obs, info = env.reset(seed=seeds[j], options=options)
                write(j, obs)
                buffers.terminations[j] = False
                buffers.truncations[j] = False
                self._autoreset[j] = False
                if info:
                    infos.append((j, info))
        except BaseException:
            self.blame = j
            raise
        return infos

    def step(self, actions: Any) -> InfoEntries:
        """Step every env with its row of ``actions`` (the group's rows of the batch)."""
        if self._shared_actions:
            actions = tree_copy(actions)  # the shared rows are rewritten by the next step
        action_iter = iterate(self._batched_action_space, actions)
        infos: InfoEntries = []
        write, autoreset = self._write_obs, self._autoreset
        rewards, terms, truncs = self.buffers.rewards, self.buffers.terminations, self.buffers.truncations
        mode = self.autoreset_mode
        j = 0
        try:
            for j, (env, action) in enumerate(zip(self.envs, action_iter)):
                if mode is AutoresetMode.NEXT_STEP and autoreset[j]:
                    obs, info = env.reset()
                    rewards[j] = 0.0
                    terms[j] = truncs[j] = False
                else:
                    obs, rewards[j], terms[j], truncs[j], info = env.step(action)
                    if mode is AutoresetMode.SAME_STEP and (terms[j] or truncs[j]):
                        infos.append((j, {"final_obs": obs, "final_info": info}))
                        obs, info = env.reset()
                autoreset[j] = bool(terms[j] or truncs[j])
                write(j, obs)
                if info:
                    infos.append((j, info))
        except BaseException:
            self.blame = j
            raise
        return infos

    # -- everything else ---------------------------------------------------------------------

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """Call a method (or read an attribute) on every env, as ``SyncVectorEnv.call`` does."""
        results = []
        j = 0
        try:
            for j, env in enumerate(self.envs):
                function = env.get_wrapper_attr(name)
                results.append(function(*args, **kwargs) if callable(function) else function)
        except BaseException:
            self.blame = j
            raise
        return results

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Set an attribute on every env, one value per env."""
        j = 0
        try:
            for j, (env, value) in enumerate(zip(self.envs, values, strict=True)):
                env.set_wrapper_attr(name, value)
        except BaseException:
            self.blame = j
            raise

    def render(self) -> list[Any]:
        """Render every env."""
        return self.call("render", (), {})

    def close(self) -> None:
        """Close every env, even when one raises; the first error is re-raised at the end."""
        first: tuple[int, BaseException] | None = None
        for j, env in enumerate(self.envs):
            try:
                env.close()
            except Exception as exc:
                first = first or (j, exc)
        if first is not None:
            self.blame = first[0]
            raise first[1]
