"""Where the collection loop's vector steps come from, a :class:`Chunk` of T steps at a time.

* :class:`RolloutSource`: rollouts in the workers (``envs.rollout``), for vecenv's own vector
  envs under NEXT_STEP and SAME_STEP. The policy runs in every worker; one command and one
  reply per worker per chunk, and the next rollout is started before this one is recorded, so
  the workers step while the parent writes.
* :class:`StepSource`: ``envs.step`` once per chunk with the policy acting here, for any other
  vector env, and under DISABLED (where the loop resets each finished env at once, which a
  rollout, whose ended envs wait for its end, cannot do).

Both give the same transitions for the same seed: each env's random actions come from its own
generator (:class:`vecenv.policies.RandomPolicy`, here or in its worker), and a rollout is,
env for env, the same vector steps as ``step``. So a dataset does not depend on the source,
the number of workers or the chunk length.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from vecenv.datasets.action_checks import ActionChecker
from vecenv.datasets.format import Leaf
from vecenv.errors import InvalidStateError, MemoryLimitError
from vecenv.policies import PolicyContext, PolicyRunner, WorkerPolicy
from vecenv.policy_outputs import split_output
from vecenv.spaces import leaf_values

__all__ = ["Chunk", "StepSource", "RolloutSource", "copy_for_every_env", "rollout_length"]

#: The longest rollout the collector asks for (steps per env).
MAX_ROLLOUT_STEPS = 1024
#: Rollouts grow (from :data:`FIRST_ROLLOUT_STEPS`) or shrink towards this many seconds each, so
#: that slow envs still reach the disk often (the writer flushes every second) and fast ones
#: pay one message per worker for many steps.
ROLLOUT_SECONDS = 0.2
FIRST_ROLLOUT_STEPS = 16


@dataclass(frozen=True)
class Chunk:
    """``num_steps`` vector steps of every env, each field ``(num_steps, num_envs, ...)``, the
    observation and action fields one array per leaf of their space."""

    observations: list[np.ndarray]  # what each action was chosen from
    next_observations: list[np.ndarray]  # what the step led to: the true final one where an episode ended
    actions: list[np.ndarray]  # in the space's dtypes
    rewards: np.ndarray  # float64
    terminations: np.ndarray
    truncations: np.ndarray

    @property
    def num_steps(self) -> int:
        return int(self.rewards.shape[0])


def rollout_length(row_bytes: int, num_envs: int, chunk_bytes: int) -> int:
    """Steps per rollout: about ``chunk_bytes`` of rows, at most :data:`MAX_ROLLOUT_STEPS`."""
    return max(1, min(MAX_ROLLOUT_STEPS, chunk_bytes // max(1, row_bytes * num_envs)))


def copy_for_every_env(envs: VectorEnv, policy: WorkerPolicy, seeds: list[int | None]) -> PolicyRunner:
    """``policy`` acting here on every env's rows: a copy whose per-env streams (the random
    policy's generators, an SB3 model's sampling) are seeded from ``seeds`` (each env's reset
    seed) as its workers would seed them."""
    context = PolicyContext(range(envs.num_envs), envs.single_observation_space, envs.single_action_space, seeds)
    return policy.build(context)


def _leaves(space: spaces.Space, value: Any, leaves: list[Leaf]) -> list[np.ndarray]:
    """Copies of a batch's leaves in the dataset's dtypes (a vector env may reuse its arrays)."""
    return [np.array(v, dtype=leaf.dtype) for v, leaf in zip(leaf_values(space, value), leaves)]


class StepSource:
    """One ``envs.step`` per chunk; ``act`` maps the batched observation to batched actions."""

    def __init__(
        self,
        envs: VectorEnv,
        act: Any,
        check_actions: ActionChecker,
        mode: AutoresetMode,
        obs_leaves: list[Leaf],
        skip: Any = None,
    ) -> None:
        self.envs, self.act, self.check_actions, self.mode = envs, act, check_actions, mode
        self.skip = skip  # the random policy's ``skip``: its streams go on where the workers' stopped
        self.space = envs.single_observation_space
        self.obs_leaves = obs_leaves
        self.obs: Any = None
        self.obs_columns: list[np.ndarray] = []

    def start(self, seed: int) -> None:
        self.resume(self.envs.reset(seed=seed)[0])

    def resume(self, obs: Any, steps_taken: int = 0) -> None:
        """Act on ``obs`` next (the envs' current observations), after ``steps_taken`` vector
        steps that another source took (the random policy's streams skip them)."""
        self.obs, self.obs_columns = obs, _leaves(self.space, obs, self.obs_leaves)
        if steps_taken and self.skip is not None:
            self.skip(steps_taken)

    def next(self, wanted: int | None) -> Chunk:
        """The next vector step (``wanted``, the transitions still to record, is not needed)."""
        # Extras a policy gives beside its actions are dropped, as in the workers (CheckedPolicy).
        actions, _ = split_output(self.act(self.obs), self.envs.single_action_space)
        action_columns = self.check_actions(actions)  # recorded in the space's dtypes
        next_obs, rewards, terminations, truncations, infos = self.envs.step(actions)
        next_columns = _leaves(self.space, next_obs, self.obs_leaves)
        terminations = np.asarray(terminations, dtype=np.bool_)
        truncations = np.asarray(truncations, dtype=np.bool_)
        recorded_next = self.final(next_columns, terminations | truncations, infos)
        chunk = Chunk(
            [c[None] for c in self.obs_columns],
            [c[None] for c in recorded_next],
            [c[None] for c in action_columns],
            np.asarray(rewards, dtype=np.float64)[None],
            terminations[None],
            truncations[None],
        )
        self.obs, self.obs_columns = next_obs, next_columns
        return chunk

    def final(self, next_columns: list[np.ndarray], ended: np.ndarray, infos: dict) -> list[np.ndarray]:
        """The next observations recorded: under SAME_STEP an ended episode's is its final one."""
        if self.mode is not AutoresetMode.SAME_STEP or not ended.any():
            return next_columns
        if "final_obs" not in infos:
            raise InvalidStateError("SAME_STEP autoreset: an episode ended but infos has no 'final_obs'")
        recorded = [column.copy() for column in next_columns]
        for index in np.flatnonzero(ended):
            for column, value in zip(recorded, leaf_values(self.space, infos["final_obs"][index])):
                column[index] = value
        return recorded

    def recorded(self, done: np.ndarray) -> None:
        """The last chunk is recorded; ``done`` marks the envs whose episode it ended. Under
        DISABLED they are reset now (their generators continue from the seeded reset)."""
        if self.mode is AutoresetMode.DISABLED and done.any():
            self.obs, _ = self.envs.reset(options={"reset_mask": done.copy()})
            self.obs_columns = _leaves(self.space, self.obs, self.obs_leaves)

    def close(self, finished: bool) -> None:
        """Nothing is left in flight."""


class RolloutSource:
    """``envs.rollout`` in the workers, at most ``max_steps`` steps per chunk.

    ``adapt``: the length starts at :data:`FIRST_ROLLOUT_STEPS` and follows the measured time
    per rollout towards :data:`ROLLOUT_SECONDS` (at most doubling, or halving, at a time);
    else every rollout is ``max_steps`` long. Either way the data is the same: a rollout's
    length changes only where the steps are cut into chunks.
    """

    def __init__(
        self,
        envs: Any,
        policy: WorkerPolicy,
        max_steps: int,
        fallback: StepSource,
        how: dict[str, Any],
        adapt: bool = True,
    ) -> None:
        self.envs = envs
        self.policy = policy
        # Where the steps come from if the rollout block cannot be made, and the dataset's
        # record of how it was collected, updated then.
        self.fallback, self.how, self.stepping = fallback, how, False
        self.obs: Any = None
        self.steps_taken = 0  # vector steps of the rollouts collected so far
        self.max_steps = max_steps
        self.num_steps = min(max_steps, FIRST_ROLLOUT_STEPS) if adapt else max_steps
        self.adapt = adapt
        self.space = envs.single_observation_space
        self.action_space = envs.single_action_space
        self.pending = False  # a rollout was started and not yet collected
        self.started_at = 0.0

    def start(self, seed: int) -> None:
        self.obs, _ = self.envs.reset(seed=seed)

    def steps_for(self, wanted: int | None) -> int:
        """Enough steps for ``wanted`` more transitions (a NEXT_STEP reset step records none:
        a short chunk is followed by another), at most :attr:`num_steps`."""
        if wanted is None:
            return self.num_steps
        return max(1, min(self.num_steps, math.ceil(wanted / self.envs.num_envs)))

    def next(self, wanted: int | None) -> Chunk:
        """The next rollout; the one after it is started at once unless this one may finish
        the collection (``wanted``: transitions still to record, or ``None`` for episodes)."""
        if self.stepping:
            return self.fallback.next(wanted)
        if not self.pending and not self.begin(self.steps_for(wanted), self.obs):
            return self.fallback.next(wanted)
        self.pending = False
        rollout = self.envs.rollout_wait()
        self.steps_taken += rollout.num_steps
        self.follow(rollout.num_steps, time.monotonic() - self.started_at)
        if wanted is None or wanted > rollout.rewards.size:
            left = None if wanted is None else wanted - rollout.rewards.size
            self.begin(self.steps_for(left), rollout.last_observations)
        return Chunk(
            list(leaf_values(self.space, rollout.observations)),
            list(leaf_values(self.space, rollout.next_observations())),
            list(leaf_values(self.action_space, rollout.actions)),
            rollout.rewards,
            rollout.terminations,
            rollout.truncations,
        )

    def begin(self, steps: int, obs: Any) -> bool:
        """Start a rollout of ``steps`` steps from ``obs``. False when its block could not be
        made (``MemoryLimitError``: more than the machine's memory, ``/dev/shm`` or the file
        size limit allow; an ``OSError``: memory ran out all the same): the steps then come from
        ``envs.step``, from ``obs`` on, which gives the same data."""
        self.started_at = time.monotonic()
        try:
            self.envs.rollout_async(steps, self.policy)
        except (OSError, MemoryLimitError) as exc:
            if isinstance(exc, TimeoutError):
                raise
            self.stepping = True
            self.how.update(
                method="envs.step",
                policy_runs_in="the collecting process",
                fell_back=f"the rollout block could not be made: {exc}",
            )
            self.fallback.resume(obs, self.steps_taken)
            return False
        self.pending = True
        return True

    def follow(self, steps: int, seconds: float) -> None:
        """Adapt the length to a rollout of ``steps`` steps that took ``seconds``."""
        if not self.adapt or steps < self.num_steps:  # a short last one says little
            return
        wanted = steps * ROLLOUT_SECONDS / max(seconds, 1e-6)
        self.num_steps = int(max(1, min(self.max_steps, 2 * steps, max(steps // 2, wanted))))

    def recorded(self, done: np.ndarray) -> None:
        """Nothing to do: rollouts autoreset (NEXT_STEP, SAME_STEP)."""
        if self.stepping:
            self.fallback.recorded(done)

    def close(self, finished: bool) -> None:
        """Collect the rollout still in flight (``finished``), or abandon it (an error, Ctrl+C:
        a zero timeout drops its replies, so closing the vector env does not wait for it)."""
        if not self.pending:
            return
        self.pending = False
        if finished:
            self.envs.rollout_wait()
            return
        try:
            self.envs.rollout_wait(timeout=0)
        except Exception:  # VecEnvTimeoutError, or an error of its own: the one raised already wins
            pass
