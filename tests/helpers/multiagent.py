"""Multi-agent test envs and the plain-loop reference the native API is compared against.

* :class:`ToyParallelEnv`: a small PettingZoo-style parallel env that needs no PettingZoo: one
  agent dies mid-episode, one joins late, a copy-level info key, per-agent infos, a seeded random
  draw in every observation. Everything depends only on its seed and the actions it receives.
* the real envs of the differential tests (MPE2's ``simple_spread_v3``, butterfly's
  ``pistonball_v6`` and ``knights_archers_zombies_v11``), as module-level constructors so that
  spawned workers can unpickle them.
* :class:`PlainLoop`: the native API's documented semantics written as a plain loop over the
  parallel envs, with Gymnasium's own info batching; :func:`assert_tree_equal` compares.
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

__all__ = [
    "ToyParallelEnv",
    "simple_spread",
    "pistonball",
    "kaz",
    "PlainLoop",
    "assert_tree_equal",
    "first_value_policy",
]


class ToyParallelEnv:
    """Agents ``a0``, ``a1``, ``a2`` and ``late``; ``a2`` dies at step ``die_at``, ``late`` joins at
    step 2, everyone is truncated at step ``length`` (the episode then ends).

    ``crash_once``: a file path; the first process to reach step ``crash_at`` creates it and
    exits at once (a worker death that happens exactly once). ``closed_dir``: ``close()`` writes
    a file there, so a test can see that every copy was closed, wherever it ran.
    """

    metadata = {"render_modes": ["rgb_array"], "name": "toy_v0"}

    def __init__(
        self,
        length: int = 6,
        die_at: int = 3,
        obs_shapes: dict[str, int] | None = None,
        agents: tuple[str, ...] = ("a0", "a1", "a2", "late"),
        crash_once: str | None = None,
        crash_at: int = 2,
        closed_dir: str | None = None,
        raise_at: int | None = None,
    ) -> None:
        self.possible_agents = list(agents)
        self.agents: list[str] = []
        self.length, self.die_at = length, die_at
        self.render_mode = "rgb_array"
        self._obs_spaces = {a: spaces.Box(-1e6, 1e6, ((obs_shapes or {}).get(a, 3),), np.float32) for a in agents}
        self._act_space = spaces.Discrete(3)
        self.t = 0
        self.rng = np.random.default_rng()
        self.crash_once, self.crash_at = crash_once, crash_at
        self.closed_dir = closed_dir
        self.raise_at = raise_at
        self.label = "toy"

    @property
    def unwrapped(self) -> ToyParallelEnv:
        return self

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_space

    def _obs(self, agent: str) -> np.ndarray:
        obs = np.zeros(self._obs_spaces[agent].shape, np.float32)
        obs[:3] = (self.rng.integers(1000), self.t, self.possible_agents.index(agent))
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = [a for a in ("a0", "a1", "a2") if a in self.possible_agents]
        infos: dict[str, Any] = {agent: {} for agent in self.agents}
        infos["a1"] = {"reset_note": 1 if options is None else 2}
        infos["episode_id"] = int(self.rng.integers(100))  # copy-level
        return {agent: self._obs(agent) for agent in self.agents}, infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        assert set(actions) == set(self.agents), f"actions for {sorted(actions)}, agents {sorted(self.agents)}"
        self.t += 1
        if self.raise_at == self.t:
            raise KeyError("toy env failure")
        if self.crash_once is not None and self.t == self.crash_at and not os.path.exists(self.crash_once):
            open(self.crash_once, "w").close()
            os._exit(3)
        acting = list(self.agents)
        obs = {agent: self._obs(agent) for agent in acting}
        rewards = {agent: float(actions[agent]) + 0.5 * self.possible_agents.index(agent) for agent in acting}
        terms = {agent: agent == "a2" and self.t == self.die_at for agent in acting}
        truncs = {agent: self.t >= self.length for agent in acting}
        infos: dict[str, Any] = {agent: {} for agent in acting}
        infos["a0"] = {"t": self.t, "seen": np.arange(2) + self.t}
        if self.t % 3 == 0:
            infos["round"] = self.t // 3  # copy-level
        self.agents = [a for a in acting if not (terms[a] or truncs[a])]
        if self.t == 2 and self.t < self.length and "late" in self.possible_agents:
            self.agents.append("late")
        return obs, rewards, terms, truncs, infos

    def render(self) -> np.ndarray:
        return np.full((2, 2, 3), self.t, np.uint8)

    def close(self) -> None:
        if self.closed_dir is not None:
            open(os.path.join(self.closed_dir, f"closed-{os.getpid()}-{id(self)}"), "w").close()


def _butterfly(name: str) -> Any:
    """A butterfly env module, imported as SuperSuit's users import it. PettingZoo 1.27 warns
    (DeprecationWarning) on that import in favour of its registry; a forked worker inherits
    pytest's ``filterwarnings = error``, so the import is made with the warning ignored."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return importlib.import_module(f"pettingzoo.butterfly.{name}")


def simple_spread(max_cycles: int = 25, **kwargs: Any) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=max_cycles, **kwargs)


def pistonball(max_cycles: int = 15, **kwargs: Any) -> Any:
    return _butterfly("pistonball_v6").parallel_env(max_cycles=max_cycles, **kwargs)


def kaz(max_cycles: int = 100, **kwargs: Any) -> Any:
    """Knights-archers-zombies where agents die early: they die touching the top or bottom wall."""
    module = _butterfly("knights_archers_zombies_v11")
    return module.parallel_env(max_cycles=max_cycles, line_death=True, spawn_delay=3, **kwargs)


def first_value_policy(observations: np.ndarray) -> np.ndarray:
    """A rollout policy for Discrete(3) agents that depends on each row: its first value mod 3
    (the toy env's random draw; zero for an absent agent's row). Module-level, so that spawned
    workers can unpickle it."""
    return (np.abs(observations.reshape(len(observations), -1)[:, 0]).astype(np.int64)) % 3


class _Batcher(VectorEnv):
    """Gymnasium's own info batching (``VectorEnv._add_info``) over ``n`` rows."""

    def __init__(self, n: int) -> None:
        self.num_envs = n


class PlainLoop:
    """The native API's semantics as a plain loop: one row per (copy, agent)."""

    def __init__(self, env_fns: list[Any], mode: AutoresetMode) -> None:
        self.envs = [fn() for fn in env_fns]
        self.agents = list(self.envs[0].possible_agents)
        self.mode = mode
        space = self.envs[0].observation_space(self.agents[0])
        self.zero = np.zeros(space.shape, space.dtype)
        self.n = len(self.envs) * len(self.agents)
        self.pending = [False] * len(self.envs)
        self.obs = np.zeros((self.n, *space.shape), space.dtype)
        self.active = np.ones(self.n, dtype=np.bool_)

    def _rows(self, obs: dict, infos: dict) -> tuple[list, list, list]:
        rows, row_infos, active = [], [], []
        common = {k: v for k, v in infos.items() if k not in self.agents}
        for agent in self.agents:
            here = agent in obs
            rows.append(obs[agent] if here else self.zero)
            info = dict(infos.get(agent) or {})
            if common:
                info["copy_info"] = common
            row_infos.append(info)
            active.append(here)
        return rows, row_infos, active

    def reset(self, seed: int | None = None, mask: np.ndarray | None = None) -> tuple[Any, dict]:
        """Reset every copy (or the copies of ``mask``; the other rows keep their state). As in
        ``SyncVectorEnv``, a masked reset passes the options without ``reset_mask``: ``{}``."""
        a_n = len(self.agents)
        entries = []
        for c, env in enumerate(self.envs):
            if mask is not None and not mask[c]:
                continue
            o, i = env.reset(seed=None if seed is None else seed + c, options=None if mask is None else {})
            self.pending[c] = False
            rows, infos, act = self._rows(o, i)
            self.obs[c * a_n : (c + 1) * a_n] = rows
            self.active[c * a_n : (c + 1) * a_n] = act
            entries += [(c * a_n + a, info) for a, info in enumerate(infos)]
        return self.obs.copy(), self._batch(entries, self.active.copy())

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        a_n = len(self.agents)
        obs_rows, rewards, terms, truncs, entries, active = [], [], [], [], [], []
        for c, env in enumerate(self.envs):
            base = c * a_n
            if self.pending[c]:
                o, i = env.reset()
                self.pending[c] = False
                rows, infos, act = self._rows(o, i)
                rew, term, trunc = [0.0] * a_n, [not x for x in act], [False] * a_n
            else:
                live = list(env.agents)
                o, r, te, tr, i = env.step({ag: actions[base + a] for a, ag in enumerate(self.agents) if ag in live})
                rows, infos, act = self._rows(o, i)
                rew = [r.get(ag, 0.0) if here else 0.0 for ag, here in zip(self.agents, act)]
                term = [bool(te.get(ag, False)) if here else True for ag, here in zip(self.agents, act)]
                trunc = [bool(tr.get(ag, False)) if here else False for ag, here in zip(self.agents, act)]
                done = all(x or y for x, y in zip(term, trunc))
                if done and self.mode is AutoresetMode.SAME_STEP:
                    for a in range(a_n):
                        final = {**infos[a], "vecenv_final_active": act[a]}
                        entries.append((base + a, {"final_obs": rows[a], "final_info": final}))
                    o, i = env.reset()
                    rows, infos, act = self._rows(o, i)
                elif done and self.mode is AutoresetMode.NEXT_STEP:
                    self.pending[c] = True
            obs_rows += rows
            rewards, terms, truncs, active = rewards + rew, terms + term, truncs + trunc, active + act
            entries += [(base + a, info) for a, info in enumerate(infos)]
        self.obs = np.stack(obs_rows)
        self.active = np.array(active, dtype=np.bool_)
        flags = (np.array(rewards, np.float64), np.array(terms), np.array(truncs))
        return self.obs.copy(), *flags, self._batch(entries, self.active.copy())

    def _batch(self, entries: list, active: np.ndarray) -> dict:
        batcher: Any = _Batcher(self.n)
        infos: dict[str, Any] = {}
        for j, info in entries:
            if info:
                infos = batcher._add_info(infos, info, j)
        final = infos.get("final_info")
        if final is not None:
            flags = final.pop("vecenv_final_active")
            final.pop("_vecenv_final_active")
            final["active"] = flags & infos["_final_info"]
            final["_active"] = infos["_final_info"].copy()
        infos["active"] = active
        infos["_active"] = np.ones(self.n, dtype=np.bool_)
        return infos

    def close(self) -> None:
        for env in self.envs:
            env.close()


def assert_tree_equal(a: Any, b: Any, path: str = "value") -> None:
    """Exact equality of nested dicts (any key order), sequences, arrays (dtype, shape, values)."""
    from tests.engine.test_differential import assert_same  # here: workers import this module too

    assert_same(a, b, path, ordered=False)
