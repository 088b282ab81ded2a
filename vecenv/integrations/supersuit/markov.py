"""The SuperSuit drop-in's group: each copy behaves as SuperSuit's ``MarkovVectorEnv``.

SuperSuit's ``pettingzoo_env_to_vec_env_v1`` turns one parallel env into one slot per agent and
``concat_vec_envs_v1`` concatenates copies of it. :class:`MarkovGroup` gives exactly what those
give for each copy, so that :mod:`vecenv.supersuit` can return SuperSuit's in-process results
from any number of worker processes:

* a copy is done when every flag its env returned is set; it is then reset at once (seed
  ``None``), its infos get ``"terminal_observation"`` for each agent the env returned, and the
  reset's infos are merged into the step's;
* rewards are rounded to float32, as SuperSuit stores them;
* an agent missing from the observations, or an agent list that differs from
  ``possible_agents``, raises :class:`~vecenv.multiagent.errors.AgentDeathError` (an
  ``AssertionError``, as SuperSuit's), unless the copy was made with ``black_death``;
* infos travel as one opaque :class:`~vecenv.multiagent.copies.RowInfo` per non-empty row, so
  the parent hands back each row's dict exactly as the env made it.

A plain ``gymnasium.Env`` (which ``concat_vec_envs_v1`` also takes) is hosted as a parallel env
with one agent, :class:`GymAsParallel`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

from vecenv.multiagent.copies import AgentCopies, RowInfo
from vecenv.multiagent.errors import AgentDeathError
from vecenv.multiagent.group import CopyGroup
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import InfoEntries

__all__ = [
    "MarkovGroup",
    "MarkovCopies",
    "MarkovCopiesFn",
    "GymAsParallel",
    "CopyOptions",
    "ROW_INFO_KEY",
    "OPTIONS_KEY",
]

#: The info key of a row's :class:`RowInfo` (the only key these groups send).
ROW_INFO_KEY = "vecenv_row_info"
#: The options key of a :class:`CopyOptions` (the only key the drop-in's ``reset`` sends).
OPTIONS_KEY = "vecenv_copy_options"

_DEATH_HINT = (
    "SuperSuit's pettingzoo_env_to_vec_env_v1, whose results this drop-in gives, does not allow agent "
    "death: wrap the env in supersuit.black_death_v3, or use vecenv.MultiAgentVectorEnv, which handles "
    "agent death itself"
)


class CopyOptions:
    """``reset``'s options for every copy, exactly as the caller gave them, kept opaque.

    SuperSuit hands the options to each copy's ``reset`` as they are, ``"reset_mask"`` included
    (the env's to read; every copy is reset). The engine would take a ``"reset_mask"`` as its
    own mask of rows to reset and drop it from what the envs get; inside this object it sees
    no such key.
    """

    __slots__ = ("options",)

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"CopyOptions({self.options!r})"


class MarkovGroup(CopyGroup):
    """Copies stepped with SuperSuit's ``MarkovVectorEnv`` semantics (see the module docstring)."""

    def __init__(self, copies: MarkovCopies, buffers: Buffers) -> None:
        super().__init__(copies, buffers)
        self.black_death = copies.black_death

    def reset(
        self, seeds: Sequence[int | None], options: dict[str, Any] | None, mask: Sequence[bool] | None
    ) -> InfoEntries:
        """Reset the copies ``mask`` selects; options sent as a :class:`CopyOptions` reach each
        copy as the caller gave them."""
        held = options.get(OPTIONS_KEY) if isinstance(options, Mapping) else None
        if isinstance(held, CopyOptions):
            options = held.options
        return super().reset(seeds, options, mask)

    def _reset_copy(self, c: int, seed: int | None, options: dict[str, Any] | None, entries: InfoEntries) -> None:
        infos = self._restart(c, seed, options)
        a = self.num_agents
        self._store(c, [0.0] * a, [False] * a, [False] * a)
        self._queue(c, infos, entries)

    def _restart(self, c: int, seed: int | None, options: dict[str, Any] | None) -> list[dict[str, Any]]:
        """Reset copy ``c`` and write its observations; returns each agent's reset info."""
        obs, infos = self.envs[c].reset(seed=seed, options=options)
        self._concat(c, obs)
        return [infos.get(agent, {}) for agent in self.agents]

    def _concat(self, c: int, obs: dict[str, Any]) -> None:
        write, base = self._write_row, c * self.num_agents
        for a, agent in enumerate(self.agents):
            if agent not in obs:
                raise AgentDeathError(f"agent {agent!r} is missing from its env's observations. {_DEATH_HINT}")
            write(base + a, obs[agent])

    def _step_copy(self, c: int, items: list[Any], entries: InfoEntries) -> None:
        env = self.envs[c]
        observations, rewards, terms, truncs, infos = env.step(self._actions(c, items))
        ended = np.fromiter(terms.values(), dtype=bool) | np.fromiter(truncs.values(), dtype=bool)
        env_done = ended.all()
        if env_done:
            for agent, obs in observations.items():
                infos[agent]["terminal_observation"] = obs
        agents = self.agents
        rews = np.array([rewards.get(agent, 0) for agent in agents], dtype=np.float32)
        tms = [bool(terms.get(agent, False)) for agent in agents]
        tcs = [bool(truncs.get(agent, False)) for agent in agents]
        step_infos = [infos.get(agent, {}) for agent in agents]
        if env_done:
            reset_infos = self._restart(c, None, None)
            row_infos = [{**info, **reset} for info, reset in zip(step_infos, reset_infos)]
        else:
            self._concat(c, observations)
            row_infos = [{**info} for info in step_infos]
        if not self.black_death and list(env.agents) != list(env.possible_agents):
            raise AgentDeathError(
                f"the env's agents {list(env.agents)} differ from its possible_agents "
                f"{list(env.possible_agents)}. {_DEATH_HINT}"
            )
        self._store(c, rews.tolist(), tms, tcs)
        self._queue(c, row_infos, entries)

    def _queue(self, c: int, infos: list[dict[str, Any]], entries: InfoEntries) -> None:
        base = c * self.num_agents
        entries.extend((base + a, {ROW_INFO_KEY: RowInfo(info)}) for a, info in enumerate(infos) if info)

    def _is_wrapped(self, c: int, wrapper_class: type) -> list[bool]:
        """SuperSuit's answer: whether a plain gymnasium env is wrapped; never for a parallel env."""
        env = self.envs[c]
        if not isinstance(env, GymAsParallel):
            return [False] * self.num_agents
        inner = env.env
        while isinstance(inner, gym.Wrapper):
            if isinstance(inner, wrapper_class):
                return [True]
            inner = inner.env
        return [False]


class GymAsParallel:
    """A ``gymnasium.Env`` seen as a parallel env with the one agent :attr:`AGENT`."""

    AGENT = "env"

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.possible_agents = [self.AGENT]
        self.agents = [self.AGENT]
        self.metadata = env.metadata
        self.render_mode = env.render_mode

    def observation_space(self, agent: str) -> gym.Space:
        return self.env.observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        return {self.AGENT: obs}, {self.AGENT: info}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions[self.AGENT])
        a = self.AGENT
        return {a: obs}, {a: reward}, {a: terminated}, {a: truncated}, {a: info}

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.env, name)


class MarkovCopies(AgentCopies):
    """Copies for the SuperSuit drop-in (:mod:`vecenv.supersuit`)."""

    def __init__(self, envs: Sequence[Any], black_death: bool = False, first: int = 0) -> None:
        super().__init__([GymAsParallel(e) if isinstance(e, gym.Env) else e for e in envs], first)
        self.black_death = black_death

    def make_group(self, buffers: Buffers) -> MarkovGroup:
        return MarkovGroup(self, buffers)


class MarkovCopiesFn:
    """A picklable group builder: ``count`` copies of one env, each unpickled from ``env_bytes``
    (a cloudpickled parallel env or gymnasium env, as SuperSuit copies it)."""

    def __init__(self, env_bytes: bytes, count: int, first: int, black_death: bool = False) -> None:
        self.env_bytes = env_bytes
        self.count = count
        self.first = first
        self.black_death = black_death

    def __call__(self) -> MarkovCopies:
        envs = [cloudpickle.loads(self.env_bytes) for _ in range(self.count)]
        return MarkovCopies(envs, self.black_death, self.first)
