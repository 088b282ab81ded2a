"""Rollouts inside a worker: T steps of its group with its own policy copy, one reply.

:class:`GroupRollouts` belongs to one worker core. It holds the worker's view of the rollout
block (:mod:`vecenv.wire.rollout_buffers`), the installed policy's runner
(:mod:`vecenv.policies`) and each env's last reset seed (the random policy's seeds). A rollout
step is exactly a ``STEP`` of the group: the same :class:`~vecenv.worker.group.EnvGroup` with
its autoreset, the actions chosen here instead of sent. Each step's rows go into the block:

* ``observations[t]``: the observation the action was chosen from (the group's current rows);
* ``actions[t]``, as stored in the action space's dtype: what the envs receive;
* ``rewards[t]``, ``terminations[t]``, ``truncations[t]``: what the step returned;
* ``final_observations[t]`` (SAME_STEP): the final observation of an episode that ended there
  (its info entry keeps it too, exactly as the env returned it, as a step's does);
* ``stepped[t]`` (DISABLED): whether the env was stepped; an env whose episode ended waits,
  unstepped, for the rest of the rollout.

After the last step the group's rows of the step buffers hold the last observations and flags,
as after a ``STEP``, so a rollout and a step continue each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any, Protocol

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.spaces import row_writer, to_batch, tree_leaves, tree_map
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import (
    InfoEntries,
    ResetArgs,
    RolloutArgs,
    RolloutBlockArgs,
    RolloutInfoEntries,
    RolloutReply,
)
from vecenv.wire.rollout_buffers import RolloutBuffers
from vecenv.worker.group import EnvGroup, batched_view
from vecenv.worker.policy import PolicyContext, PolicyRunner

__all__ = ["GroupRollouts", "RolloutFailure"]


class RolloutFailure:
    """Where the last rollout failed, for the error's note: the step, and whether the policy
    (not an env) raised."""

    def __init__(self, step: int, num_steps: int, in_policy: bool) -> None:
        self.step, self.num_steps, self.in_policy = step, num_steps, in_policy

    def describe(self) -> str:
        where = "in the worker's policy, " if self.in_policy else ""
        return f"{where}at step {self.step} of the rollout (steps 0..{self.num_steps - 1})"


class SteppedGroup(Protocol):
    """What a rollout needs of a group: an :class:`~vecenv.worker.group.EnvGroup`, a
    :class:`~vecenv.worker.group.VectorGroup` or a multi-agent group of copies."""

    num_envs: int

    def step(self, actions: Any) -> InfoEntries: ...


class GroupRollouts:
    """One worker's rollouts (see the module docstring)."""

    def __init__(self, group: SteppedGroup, buffers: Buffers, start: int, autoreset_mode: AutoresetMode) -> None:
        self.group = group
        self.buffers = buffers
        self.start = start
        self.autoreset_mode = autoreset_mode
        self.seeds: list[int | None] = [None] * group.num_envs
        self.block: RolloutBuffers | None = None
        self.policy: PolicyRunner | None = None
        self.failure: RolloutFailure | None = None

    # -- set-up ------------------------------------------------------------------------------

    def map_block(self, args: RolloutBlockArgs) -> None:
        """Map (or make) this group's columns of a new rollout block; the old one is released."""
        block = RolloutBuffers.attach(args.spec, self.start, self.start + self.group.num_envs, args.fd)
        if self.block is not None:
            self.block.close()
        self.block = block

    def reset_done(self, args: ResetArgs) -> None:
        """A reset succeeded: remember each reset env's seed, and reseed the policy's streams."""
        for j, seed in enumerate(args.seeds):
            if seed is None or (args.mask is not None and not args.mask[j]):
                continue
            self.seeds[j] = seed
            if self.policy is not None:
                self.policy.reseed(j, seed)

    def close(self) -> None:
        self.policy = None
        if self.block is not None:
            self.block.close()
            self.block = None

    # -- one rollout -------------------------------------------------------------------------

    def run(self, args: RolloutArgs) -> RolloutReply:
        """Steps ``args.first_step .. args.num_steps - 1``; their rows go into the block."""
        self.failure = None
        block = self.block
        if block is None:
            raise RuntimeError("a rollout came before its rollout block (ROLLOUT_BLOCK)")
        if args.num_steps > block.spec.num_steps:
            raise RuntimeError(f"a rollout of {args.num_steps} steps in a block of {block.spec.num_steps}")
        # Building the policy or loading its weights fails "in the policy, at the first step".
        self.failure = RolloutFailure(args.first_step, args.num_steps, True)
        if args.policy is not None:
            self.policy = None
            spec = self.buffers.spec
            context = PolicyContext(
                range(self.start, self.start + self.group.num_envs),
                spec.observation_space,
                spec.action_space,
                list(self.seeds),
            )
            self.policy = args.policy.build(context)
        policy = self.policy
        if policy is None:
            raise RuntimeError("a rollout came before its policy")
        if args.weights is not None:
            policy.load_weights(args.weights)
        infos = self._steps(block, policy, args.first_step, args.num_steps)
        self.failure = None
        return RolloutReply(infos, self.buffers.payload(), block.payload(args.first_step, args.num_steps))

    def _steps(self, block: RolloutBuffers, policy: PolicyRunner, first: int, num_steps: int) -> RolloutInfoEntries:
        group, buffers = self.group, self.buffers
        n = group.num_envs
        space = buffers.spec.action_space
        now = tree_leaves(buffers.observations)
        obs_leaves = tree_leaves(block.observations)
        act_leaves = tree_leaves(block.actions)
        single_obs = len(obs_leaves) == 1
        single_act = len(act_leaves) == 1
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        active = np.ones(n, np.bool_) if block.stepped is not None else None
        infos: RolloutInfoEntries = []
        failure = self.failure
        assert failure is not None
        for t in range(first, num_steps):
            failure.step, failure.in_policy = t, True
            for dst, src in zip(obs_leaves, now):
                np.copyto(dst[t], src)
            observations = obs_leaves[0][t] if single_obs else tree_map(itemgetter(t), block.observations)
            chosen = policy.act(observations, active)
            actions = act_leaves[0][t] if single_act else tree_map(itemgetter(t), block.actions)
            _store(space, actions, chosen, n)
            failure.in_policy = False
            if active is None:
                entries = group.step(actions)
            else:  # DISABLED: only an EnvGroup can leave ended envs unstepped (the parent checks)
                assert isinstance(group, EnvGroup), "only an env group rolls out under DISABLED"
                entries = group.step(actions, active)
            block.rewards[t] = buffers.rewards
            block.terminations[t] = buffers.terminations
            block.truncations[t] = buffers.truncations
            if entries:
                if same_step:
                    self._final_observations(block, t, entries)
                # What a step would pickle at once: an env may refill the same dict later.
                infos.extend((t, j, batched_view(info)) for j, info in entries)
            if active is not None:
                assert block.stepped is not None
                block.stepped[t] = active
                active &= ~(buffers.terminations | buffers.truncations)
        return infos

    def _final_observations(self, block: RolloutBuffers, t: int, entries: Sequence[tuple[int, dict[str, Any]]]) -> None:
        """SAME_STEP: each ended episode's final observation into ``final_observations[t]``."""
        ended = self.buffers.terminations | self.buffers.truncations
        write = None
        for j, info in entries:
            if ended[j] and "final_obs" in info and "final_info" in info:
                if write is None:
                    final = tree_map(itemgetter(t), block.final_observations)
                    write = row_writer(self.buffers.spec.observation_space, final)
                write(j, info["final_obs"])


def _store(space: Any, dst: Any, actions: Any, n: int) -> None:
    """The policy's actions into the block's row ``dst``, checked as the vector env checks a
    step's actions (shape, and a dtype that casts within its kind), then stored in the space's
    dtype."""
    if type(dst) is np.ndarray and type(actions) is np.ndarray and actions.shape == dst.shape:
        if np.can_cast(actions.dtype, dst.dtype, casting="same_kind"):
            np.copyto(dst, actions, casting="unsafe")
            return
    batch = to_batch(space, actions, n, "the policy's actions")
    for d, s in zip(tree_leaves(dst), tree_leaves(batch), strict=True):
        np.copyto(d, s.reshape(d.shape), casting="unsafe")
