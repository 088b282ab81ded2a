"""The collection loop of ``collect``: vector steps become recorded transitions.

Each vector step gives one candidate transition per env. The loop drops the NEXT_STEP
autoreset "reset steps" (where an env resets and ignores the action), takes the final
observation from ``infos["final_obs"]`` under SAME_STEP, resets finished envs itself under
DISABLED, and numbers episodes in the order they start. The transitions go to the sink as
rows in vector-step order or, through an ``EpisodeStager``, one whole episode at a time in
completion order (see ``sinks``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from vecenv.checks import seed_list
from vecenv.rollout.format import space_leaves
from vecenv.rollout.sinks import DatasetSink, EpisodeSummary
from vecenv.seeding import seed_policy_of
from vecenv.spaces import leaf_values

if TYPE_CHECKING:
    from tqdm import tqdm

    from vecenv.rollout.minari import MinariSink
    from vecenv.rollout.staging import EpisodeStager

Policy = Callable[[Any], Any]


@dataclass(frozen=True)
class Rollout:
    """What the collection loop runs: the envs, the policy, and how much (exactly one of
    ``steps`` and ``episodes`` is set)."""

    envs: VectorEnv
    act: Policy  # the batched observation to a batched action
    check_actions: Callable[[Any], list[np.ndarray]]  # an action batch to its recorded leaves
    mode: AutoresetMode
    seed: int
    steps: int | None
    episodes: int | None


@dataclass(frozen=True)
class CollectionRun:
    """A rollout and where its transitions go, fixed before the loop starts. ``stager`` is
    None when rows go to the sink as they come (our format with ``steps=N``), else whole
    episodes do."""

    rollout: Rollout
    sink: DatasetSink | MinariSink
    stager: EpisodeStager | None
    bar: tqdm


@dataclass(frozen=True)
class _Step:
    """One vector step as the loop records it."""

    columns: list[np.ndarray]  # every dataset field, one row per env
    rows: np.ndarray  # the envs whose transition is recorded, ascending
    done: np.ndarray  # per env: its episode ended with this step
    next_obs: Any
    next_columns: list[np.ndarray]  # the leaves of next_obs, copied


def record_transitions(run: CollectionRun) -> None:
    """Step the rollout's envs from a seeded reset until the requested count is in the sink."""
    _Collector(run).collect()


class _Collector:
    """The loop's state: each env's episode (id, return, length) and the observation to act on."""

    def __init__(self, run: CollectionRun) -> None:
        self.rollout, self.sink, self.stager, self.bar = run.rollout, run.sink, run.stager, run.bar
        self.obs_space = self.rollout.envs.single_observation_space
        self.obs_leaves = space_leaves(self.obs_space, "observations")
        num_envs = self.rollout.envs.num_envs
        self.env_ids = np.arange(num_envs, dtype=np.int64)
        self.episode_ids = np.arange(num_envs, dtype=np.int64)
        self.next_episode_id = num_envs
        self.episode_return = np.zeros(num_envs, dtype=np.float64)
        self.episode_length = np.zeros(num_envs, dtype=np.int64)
        self.resetting = np.zeros(num_envs, dtype=np.bool_)  # NEXT_STEP: this step only resets the env
        self.taken = 0  # steps=N: transitions taken so far (written, or open in the stager)
        self.first_seeds = seed_list(self.rollout.seed, num_envs, seed_policy_of(self.rollout.envs))
        self.shown_episodes = 0

    def collect(self) -> None:
        obs, _ = self.rollout.envs.reset(seed=self.rollout.seed)
        obs_columns = self.copy_obs(obs)
        while True:
            step = self.step(obs, obs_columns)
            finished = self.write_rows(step) if self.stager is None else self.write_episodes(step, self.stager)
            self.show_progress()
            if finished:
                return
            obs, obs_columns = self.start_next(step)

    def copy_obs(self, value: Any) -> list[np.ndarray]:
        # Copies: a vector env may reuse its observation buffers on the next step.
        return [np.array(v, dtype=leaf.dtype) for v, leaf in zip(leaf_values(self.obs_space, value), self.obs_leaves)]

    def seed_of(self, episode_id: int) -> int | None:
        # The first episode of env i starts from its seed of reset(seed=seed) (seed + i unless the
        # vector env's seed_policy is "spawn"); later ones continue its RNG.
        return self.first_seeds[episode_id] if episode_id < self.rollout.envs.num_envs else None

    def step(self, obs: Any, obs_columns: list[np.ndarray]) -> _Step:
        """Act on ``obs``, step the envs, and count the transitions this step records."""
        rollout = self.rollout
        actions = rollout.act(obs)
        action_columns = rollout.check_actions(actions)
        next_obs, rewards, terminations, truncations, infos = rollout.envs.step(actions)
        next_columns = self.copy_obs(next_obs)
        rewards = np.asarray(rewards, dtype=np.float64)
        terminations = np.asarray(terminations, dtype=np.bool_)
        truncations = np.asarray(truncations, dtype=np.bool_)
        valid = ~self.resetting
        done = (terminations | truncations) & valid
        columns = [
            *obs_columns,
            *self.recorded_next(next_columns, done, infos),
            *action_columns,
            rewards,
            terminations,
            truncations,
            self.env_ids,
            self.episode_ids.copy(),
        ]
        rows = np.flatnonzero(valid)
        if rollout.steps is not None:  # the last step may record only the lowest env indices
            rows = rows[: rollout.steps - self.taken]
            self.taken += len(rows)
            self.bar.update(len(rows))
        self.episode_return[rows] += rewards[rows]
        self.episode_length[rows] += 1
        return _Step(columns, rows, done, next_obs, next_columns)

    def recorded_next(self, next_columns: list[np.ndarray], done: np.ndarray, infos: dict) -> list[np.ndarray]:
        """The next observations recorded: under SAME_STEP an ended episode's is its final one."""
        if self.rollout.mode is not AutoresetMode.SAME_STEP or not done.any():
            return next_columns
        if "final_obs" not in infos:
            raise RuntimeError("SAME_STEP autoreset: an episode ended but infos has no 'final_obs'")
        recorded = [column.copy() for column in next_columns]
        for index in np.flatnonzero(done):
            for column, value in zip(recorded, leaf_values(self.obs_space, infos["final_obs"][index])):
                column[index] = value
        return recorded

    def write_rows(self, step: _Step) -> bool:
        """Our format with ``steps=N``: the step's rows go straight to the sink."""
        sink, rows = self.sink, step.rows
        assert isinstance(sink, DatasetSink)  # collect stages every episode for Minari
        ended = rows[step.done[rows]]
        sink.rows([column[rows] for column in step.columns], self.episode_return[ended], self.episode_length[ended])
        return sink.transitions == self.rollout.steps

    def write_episodes(self, step: _Step, stager: EpisodeStager) -> bool:
        """Whole episodes: the step's rows are staged, and the episodes they end are written."""
        rollout, sink, rows = self.rollout, self.sink, step.rows
        stager.add(step.columns, rows)
        for index in rows[step.done[rows]].tolist():
            self.hand_over(stager, index, finished=True)
            if rollout.episodes is not None:
                self.bar.update(1)
                if sink.episodes == rollout.episodes:
                    break
        finished = sink.episodes == rollout.episodes if rollout.episodes is not None else self.taken == rollout.steps
        if finished:
            for open_env in [i for i in range(rollout.envs.num_envs) if stager.length(i)]:  # by env index
                self.hand_over(stager, open_env, finished=False)
        return finished

    def hand_over(self, stager: EpisodeStager, env: int, finished: bool) -> None:
        """Give ``env``'s staged episode to the sink: a finished one to ``episode``, one still
        open when the requested count is reached to ``open_episode``."""
        episode_id = int(self.episode_ids[env])
        episode_return, length = float(self.episode_return[env]), int(self.episode_length[env])
        summary = EpisodeSummary(episode_return, length, episode_id, self.seed_of(episode_id))
        if finished:
            self.sink.episode(stager.pieces(env), summary, truncate_last=False)
        else:
            self.sink.open_episode(stager.pieces(env), summary)
        stager.discard(env)

    def show_progress(self) -> None:
        sink = self.sink
        if sink.episodes != self.shown_episodes:
            self.shown_episodes = sink.episodes
            self.bar.set_postfix_str(
                f"episodes={self.shown_episodes}"
                if self.rollout.steps is not None
                else f"transitions={sink.transitions}",
                refresh=False,
            )

    def start_next(self, step: _Step) -> tuple[Any, list[np.ndarray]]:
        """Start new episodes where ``step`` ended some; return the observation to act on next
        and its copied leaves."""
        done = step.done
        self.episode_return[done] = 0.0
        self.episode_length[done] = 0
        obs, obs_columns = step.next_obs, step.next_columns
        if self.rollout.mode is AutoresetMode.NEXT_STEP:
            starting, self.resetting = self.resetting, done
        else:
            starting = done
            if self.rollout.mode is AutoresetMode.DISABLED and done.any():
                # Reset finished envs ourselves; their RNG continues from the seeded reset.
                obs, _ = self.rollout.envs.reset(options={"reset_mask": done.copy()})
                obs_columns = self.copy_obs(obs)
        started = int(starting.sum())
        if started:
            self.episode_ids[starting] = np.arange(self.next_episode_id, self.next_episode_id + started)
            self.next_episode_id += started
        return obs, obs_columns
