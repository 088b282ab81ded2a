"""Rollouts inside a worker: T steps of its group with its own policy copy, one reply.

:class:`GroupRollouts` belongs to one worker core. It holds the worker's view of the rollout
block (:mod:`vecenv.wire.rollout_buffers`), the installed policy's runner
(:mod:`vecenv.policies`) and each env's last reset seed (the random policy's seeds). A rollout
step is exactly a ``STEP`` of the group: the same :class:`~vecenv.worker.group.EnvGroup` with
its autoreset, the actions chosen here instead of sent. Each step's rows go into the block:

* ``observations[t]``: the observation the action was chosen from (the group's current rows;
  the policy is handed a copy, so what it does to its rows in place is not recorded);
* ``actions[t]``, as stored in the action space's dtype: what the envs receive;
* ``rewards[t]``, ``terminations[t]``, ``truncations[t]``: what the step returned;
* ``final_observations[t]`` (SAME_STEP): the final observation of an episode that ended there
  (its info entry keeps it too, exactly as the env returned it, as a step's does);
* ``stepped[t]`` (DISABLED): whether the env was stepped; an env whose episode ended waits,
  unstepped, for the rest of the rollout;
* ``episode_starts[t]``: whether ``observations[t]`` is the first of an episode;
* ``extras[name][t]``: the policy's extras (:mod:`vecenv.policy_outputs`), checked against the
  layout of its first call.

Episode starts are tracked here for every command, as gymnasium's ``SyncVectorEnv`` makes them:
``reset()`` starts the envs it resets; after a step, under NEXT_STEP the envs that ended at the
step before (this step reset them), under SAME_STEP the envs that ended at this step (their
observation is the reset's), under DISABLED none. A recurrent policy's state (one row per env)
lives here, across steps and rollouts; an env's row is set to the policy's initial state the
moment its observation becomes an episode's first, so the state beside an observation is
always the one to act on it with (a replacement worker starts from a fresh reset: all initial).

After the last step the group's rows of the step buffers hold the last observations and flags,
as after a ``STEP``, so a rollout and a step continue each other.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, Protocol

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.errors import InvalidArgumentError, InvalidStateError, PolicyOutputError
from vecenv.policy_outputs import (
    as_state,
    check_containers,
    check_initial_state,
    check_state,
    copy_state,
    keep_rows,
    reset_rows,
    split_output,
    store_extras,
)
from vecenv.spaces import named_leaves, row_writer, to_batch, tree_copy, tree_leaves, tree_map
from vecenv.wire.buffers import Buffers, SharedBlock
from vecenv.wire.protocol import (
    InfoEntries,
    MaskedKeys,
    Pickled,
    ResetArgs,
    RolloutArgs,
    RolloutBlockArgs,
    RolloutInfoEntries,
    RolloutReply,
    SlotWeights,
)
from vecenv.wire.rollout_buffers import RolloutBuffers
from vecenv.worker.group import EnvGroup, VectorGroup, snapshot_info
from vecenv.worker.policy import PolicyContext, PolicyRunner, copy_seed, seed_process_generators

__all__ = ["GroupRollouts", "RolloutFailure"]


class RolloutFailure:
    """Where the last rollout failed, for the error's note: the step, and whether the policy
    (not an env) raised."""

    def __init__(self, step: int, num_steps: int, in_policy: bool, policy_name: str = "") -> None:
        self.step, self.num_steps, self.in_policy = step, num_steps, in_policy
        #: The policy's name (``WorkerPolicy.name``), for an error of the policy: the learner
        #: may pass several policies in turn, and the exception alone does not say whose it is.
        self.policy_name = policy_name

    def order(self) -> tuple[int, int]:
        """Where a loop over the whole vector env would have met it: at this step, the policy
        (called for every env at once) before any env's step."""
        return self.step, 0 if self.in_policy else 1

    def describe(self) -> str:
        where = "in the worker's policy, " if self.in_policy else ""
        named = f"; the policy is {self.policy_name}" if self.in_policy and self.policy_name else ""
        return f"{where}at step {self.step} of the rollout (steps 0..{self.num_steps - 1}){named}"


class SteppedGroup(Protocol):
    """What a rollout needs of a group: an :class:`~vecenv.worker.group.EnvGroup`, a
    :class:`~vecenv.worker.group.VectorGroup` or a multi-agent group of copies."""

    num_envs: int

    def step(self, actions: Any) -> InfoEntries: ...


class GroupRollouts:
    """One worker's rollouts (see the module docstring)."""

    def __init__(
        self,
        group: SteppedGroup,
        buffers: Buffers,
        start: int,
        autoreset_mode: AutoresetMode,
        own_process: bool = True,
    ) -> None:
        self.group = group
        #: Whether this worker is a process of its own, whose global generators it may seed
        #: (not the group the parent hosts: the parent's generators are the caller's).
        self.own_process = own_process
        self._process_seeded = False  # its global generators were seeded for a policy
        self.buffers = buffers
        self.start = start
        self.autoreset_mode = autoreset_mode
        self.seeds: list[int | None] = [None] * group.num_envs
        # Policy copies built since each env's last seeded reset (their seeds: copy_seed).
        self.copies = np.zeros(group.num_envs, np.int64)
        self.block: RolloutBuffers | None = None
        self.block_error: BaseException | None = None  # why the last block could not be mapped
        # The parent's weights slot as mapped here, and its number (vecenv.wire.weights).
        self.weights_slot: SharedBlock | None = None
        self.weights_slot_number = 0
        self.policy: PolicyRunner | None = None
        self.policy_name = ""  # the installed policy's name, for its errors
        self.failure: RolloutFailure | None = None
        n = group.num_envs
        self.starts = np.ones(n, np.bool_)  # the current observation is an episode's first
        self._ended = np.zeros(n, np.bool_)  # NEXT_STEP: ended at the last step (resets next)
        self.state: Any = None  # a recurrent policy's state, one row per env
        self._initial: Any = None  # its initial state for this group

    # -- set-up ------------------------------------------------------------------------------

    def map_block(self, args: RolloutBlockArgs) -> None:
        """Map (or make) this group's columns of a new rollout block; the old one is released.

        The old one goes first, whatever happens: a worker that kept it would write its rows
        where the parent no longer reads them. Nobody waits for this command's reply, so an
        error is kept and reported by the next rollout, which then fails.
        """
        if self.block is not None:
            self.block.close()
            self.block = None
        try:
            self.block = RolloutBuffers.attach(args.spec, self.start, self.start + self.group.num_envs, args.fd)
            self.block_error = None
        except Exception as exc:
            self.block_error = exc
            raise

    def reset_starts(self, args: ResetArgs) -> None:
        """A reset is about to run: when it seeds the group's first env, a worker process seeds
        its global generators from that seed (:func:`~vecenv.worker.policy.seed_process_generators`)
        before any env draws from them, so that env code drawing from ``np.random``, ``random``
        or torch's default generator draws the same numbers again after the same seeded reset,
        and each worker other numbers. (A policy's draws are seeded again once it arrives and
        after each seeded reset: see :meth:`_seed_process`.) The parent's generators (the group
        it hosts) are the caller's and are left alone."""
        seed = args.seeds[0] if args.seeds else None
        if self.own_process and seed is not None and (args.mask is None or args.mask[0]):
            seed_process_generators(seed)

    def reset_done(self, args: ResetArgs) -> None:
        """A reset succeeded: remember each reset env's seed, and reseed the policy's streams."""
        for j, seed in enumerate(args.seeds):
            if seed is None or (args.mask is not None and not args.mask[j]):
                continue
            self.seeds[j] = seed
            # The copy installed now and the next one built both start from the seed itself: a
            # new policy passed right after a seeded reset draws as it would had none been here.
            self.copies[j] = 0
            if self.policy is not None:
                self.policy.reseed(j, seed)
                if j == 0:
                    self._seed_process(seed, restart=True)
        mask = np.ones(self.group.num_envs, np.bool_) if args.mask is None else np.asarray(args.mask, np.bool_)
        self.starts |= mask
        # What the reset reported for its rows: nothing ended for an env, but a multi-agent
        # group's absent agent is "terminated" at a reset as at every step, so that its next
        # zero row is a start after reset() as after an autoreset.
        self._ended[mask] = self.buffers.terminations[mask] | self.buffers.truncations[mask]
        self._restart_state(mask)

    def step_done(self) -> None:
        """A ``STEP`` succeeded: update the episode starts (and the state of envs that start)."""
        self._after_step(None)

    def _after_step(self, active: np.ndarray | None) -> None:
        starts, buffers = self.starts, self.buffers
        mode = self.autoreset_mode
        if mode is AutoresetMode.NEXT_STEP:
            self.starts, self._ended = self._ended, starts
            np.logical_or(buffers.terminations, buffers.truncations, out=self._ended)
        elif mode is AutoresetMode.SAME_STEP:
            np.logical_or(buffers.terminations, buffers.truncations, out=starts)
        else:
            starts.fill(False)
        if self.state is not None:
            self._restart_state(self.starts)

    def _restart_state(self, mask: np.ndarray) -> None:
        """The envs ``mask`` marks start from the policy's initial state."""
        if self.state is not None and mask.any():
            self.state = reset_rows(self.state, self._initial, mask)

    def close(self) -> None:
        self.policy = None
        self.state = self._initial = None
        if self.block is not None:
            self.block.close()
            self.block = None
        self._drop_weights_slot()

    def _map_weights_slot(self, weights: SlotWeights) -> None:
        """Map the weights slot whose descriptor came with this command (the one mapped before
        is let go first, whatever happens); the descriptor is closed here."""
        fd = weights.fd
        assert fd is not None, "called for weights that came with the slot"
        self._drop_weights_slot()
        try:
            size = os.fstat(fd).st_size
        except BaseException:
            os.close(fd)
            raise
        self.weights_slot = SharedBlock.attach(size, None, fd)  # (closes fd)
        self.weights_slot_number = weights.slot

    def _drop_weights_slot(self) -> None:
        slot, self.weights_slot = self.weights_slot, None
        if slot is not None:
            slot.close(unlink=False)

    def _loaded_weights(self, weights: Pickled | SlotWeights) -> Any:
        """New weights as the policy loads them: unpickled, or read out of the slot."""
        if isinstance(weights, Pickled):
            return weights.load()
        slot = self.weights_slot
        if slot is None or self.weights_slot_number != weights.slot:
            raise InvalidStateError(
                f"new weights came in the weights slot number {weights.slot}, which this worker does not map "
                f"(it maps {self.weights_slot_number if slot is not None else 'none'})"
            )
        return weights.load(slot.buf)

    # -- one rollout -------------------------------------------------------------------------

    def run(self, args: RolloutArgs) -> RolloutReply:
        """Steps ``args.first_step .. args.num_steps - 1``; their rows go into the block."""
        self.failure = None
        if isinstance(args.weights, SlotWeights) and args.weights.fd is not None:
            self._map_weights_slot(args.weights)  # first: this command owns the descriptor
        block = self.block
        if args.num_steps > 0:
            if block is None and self.block_error is not None:
                raise InvalidStateError(
                    f"this worker could not map the rollout block: {type(self.block_error).__name__}: "
                    f"{self.block_error}"
                ) from self.block_error
            if block is None:
                raise InvalidStateError("a rollout came before its rollout block (ROLLOUT_BLOCK)")
            if args.num_steps > block.spec.num_steps:
                raise InvalidStateError(f"a rollout of {args.num_steps} steps in a block of {block.spec.num_steps}")
        # Building the policy or loading its weights fails "in the policy, at the first step".
        self.failure = failure = RolloutFailure(args.first_step, args.num_steps, True, self.policy_name)
        if args.policy is not None:
            worker_policy = args.policy.load()
            self.policy_name = failure.policy_name = str(getattr(worker_policy, "name", ""))
            self._install(worker_policy)
        policy = self.policy
        if policy is None:
            raise InvalidStateError("a rollout came before its policy")
        if args.weights is not None:
            policy.load_weights(self._loaded_weights(args.weights))
        if args.fresh_state:
            self._restart_state(np.ones(self.group.num_envs, np.bool_))
        if args.state is not None:
            self._set_state(args.state)
        state = copy_state(self.state)
        if args.num_steps == 0:  # the parent reads (or has just set) the state
            self.failure = None
            return RolloutReply([], state=state)
        assert block is not None
        infos, masked = self._steps(block, policy, args.first_step, args.num_steps)
        self.failure = None
        rows = block.payload(args.first_step, args.num_steps)
        return RolloutReply(infos, self.buffers.payload(), rows, state, masked)

    def _install(self, worker_policy: Any) -> None:
        """Build the policy's copy for this group; a recurrent one starts from its initial state."""
        self.policy = None
        self.state = self._initial = None
        spec = self.buffers.spec
        n = self.group.num_envs
        seeds = [copy_seed(seed, copy) for seed, copy in zip(self.seeds, self.copies.tolist(), strict=True)]
        self.copies += 1
        context = PolicyContext(range(self.start, self.start + n), spec.observation_space, spec.action_space, seeds)
        runner = worker_policy.build(context)
        self._seed_process(self.seeds[0] if self.seeds else None, runner)
        if runner.recurrent:
            if not isinstance(self.group, EnvGroup):
                raise PolicyOutputError(
                    "a recurrent policy (with initial_state) needs a group of envs the worker steps one by one; "
                    f"this worker runs a {type(self.group).__name__}"
                )
            initial = as_state(runner.initial_state(n))
            check_initial_state(initial, n)
            self._initial, self.state = initial, copy_state(initial)
        self.policy = runner

    def _seed_process(self, seed: int | None, runner: PolicyRunner | None = None, restart: bool = False) -> None:
        """A policy that samples from the process's generators draws, in a worker process,
        from generators seeded from its group's first env's seed (see
        :func:`~vecenv.worker.policy.seed_process_generators`): once, the first time such a
        policy arrives, and again at every seeded reset (``restart``). A new policy passed to
        every rollout (a bound method is a new object at every access) goes on drawing where
        the last one stopped: seeding again would give it the same numbers at every rollout."""
        runner = runner or self.policy
        if not (self.own_process and runner is not None and runner.uses_process_generators):
            return
        if restart or not self._process_seeded:
            seed_process_generators(seed)
            self._process_seeded = True

    def _set_state(self, state: Any) -> None:
        if self._initial is None:
            raise PolicyOutputError("the state was set for a policy that keeps none (no initial_state)")
        state = as_state(state)
        check_state(state, self.group.num_envs, self._initial, "as set by the parent")
        self.state = copy_state(state)

    def _steps(
        self, block: RolloutBuffers, policy: PolicyRunner, first: int, num_steps: int
    ) -> tuple[RolloutInfoEntries, list[tuple[int, MaskedKeys]] | None]:
        """The steps' infos, and a native group's info keys that none of its envs carried, by
        step (``None``: none at any step)."""
        group, buffers = self.group, self.buffers
        native = group if isinstance(group, VectorGroup) else None
        masked: list[tuple[int, MaskedKeys]] | None = None
        n = group.num_envs
        space = buffers.spec.action_space
        now = tree_leaves(buffers.observations)
        obs_leaves = tree_leaves(block.observations)
        act_leaves = tree_leaves(block.actions)
        # One array, not a Dict or Tuple of one: those reach the policy and the envs as trees.
        single_obs = isinstance(block.observations, np.ndarray)
        single_act = isinstance(block.actions, np.ndarray)
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        # SAME_STEP: an ended env's info that is nothing but its final observation, an array as
        # its row of the block holds it, is left out of the reply (the parent makes it from the
        # row); only for a group of envs, whose entries this worker knows, and a one-array space.
        plain_ends = block.plain_ends if isinstance(group, EnvGroup) and single_obs else None
        if block.plain_ends is not None:
            block.plain_ends[first:num_steps] = False
        active = np.ones(n, np.bool_) if block.stepped is not None else None
        layout = block.spec.extras
        recurrent = self.state is not None
        infos: RolloutInfoEntries = []
        failure = self.failure
        assert failure is not None
        for t in range(first, num_steps):
            failure.step, failure.in_policy = t, True
            for dst, src in zip(obs_leaves, now):
                np.copyto(dst[t], src)
            block.episode_starts[t] = self.starts
            # The policy gets rows of its own: one that changes them in place (a normalisation
            # written as ``obs /= 255``, say) must leave the recorded rows what the envs returned.
            observations = now[0].copy() if single_obs else tree_copy(buffers.observations)
            if recurrent:
                # Unstepped envs keep their rows whatever the policy does, in place included.
                idle = None if active is None or active.all() else ~active
                kept = None if idle is None else copy_state(self.state)
                chosen, extras, state = policy.act_with_state(observations, self.state, active)
                state = as_state(state)
                returned = f"returned by policy {self.policy_name} at step {t}"
                check_containers(state, self._initial, returned)
                check_state(state, n, self._initial, returned)
                self.state = state if idle is None else keep_rows(state, kept, idle)
            else:
                chosen, extras = split_output(policy.act(observations, active), space)
            actions = act_leaves[0][t] if single_act else tree_map(itemgetter(t), block.actions)
            _store(space, actions, chosen, n)
            if active is not None and not active.all():
                for leaf in tree_leaves(actions):
                    leaf[~active] = 0  # not stepped: no env received an action
            if layout or extras:
                rows = {name: array[t] for name, array in block.extras.items()}
                store_extras(rows, extras, layout)
                if active is not None and not active.all():
                    for row in rows.values():
                        row[~active] = 0  # not stepped: nothing was chosen
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
                    plain = self._final_observations(block, t, entries, plain_ends is not None)
                    if plain:
                        assert plain_ends is not None
                        plain_ends[t, plain] = True
                        entries = [entry for entry in entries if entry[0] not in plain]
                # What a step would pickle at once: an env may change the same dict, or a
                # list in it, at a later step.
                infos.extend((t, j, snapshot_info(info)) for j, info in entries)
            if native is not None and native.masked is not None:
                masked = masked or []
                masked.append((t, native.masked))
            if active is not None:
                assert block.stepped is not None
                block.stepped[t] = active
                active &= ~(buffers.terminations | buffers.truncations)
            self._after_step(active)
        return infos, masked

    def _final_observations(
        self, block: RolloutBuffers, t: int, entries: Sequence[tuple[int, dict[str, Any]]], plain: bool
    ) -> list[int]:
        """SAME_STEP: each ended episode's final observation into ``final_observations[t]``.

        An ended env's first entry is the step's own (``final_obs``/``final_info``, as the
        group batches it); the entry after it is the reset's info, which is the env's and may
        hold keys of those names too: it is not the final observation.

        Returns, where ``plain`` (a one-array space), the envs whose only entry is a plain
        one (see :func:`_is_plain_end`): row ``t`` of the block then says all of it."""
        ended = self.buffers.terminations | self.buffers.truncations
        write = None
        written: dict[int, dict[str, Any]] = {}
        for j, info in entries:
            if ended[j] and j not in written and "final_obs" in info and "final_info" in info:
                if write is None:
                    final = tree_map(itemgetter(t), block.final_observations)
                    write = row_writer(self.buffers.spec.observation_space, final)
                write(j, info["final_obs"])
                written[j] = info
        if not plain or not written:
            return []
        row = block.final_observations[t, 0]
        alone = len(written) == len(entries)  # no env with a second entry (its reset's info)
        return [
            j
            for j, info in written.items()
            if (alone or sum(1 for k, _ in entries if k == j) == 1) and _is_plain_end(info, row)
        ]


def _is_plain_end(info: dict[str, Any], row: np.ndarray) -> bool:
    """Whether an ended env's entry is ``{"final_obs": obs, "final_info": {}}`` with ``obs`` an
    array that a copy of its row of the block (``row``'s dtype and shape) equals in every way
    that shows: the env's info and its reset's were empty."""
    if len(info) != 2:
        return False
    obs, final_info = info["final_obs"], info["final_info"]
    return (
        type(final_info) is dict
        and not final_info
        and type(obs) is np.ndarray
        and obs.dtype == row.dtype
        and obs.shape == row.shape
    )


def _store(space: Any, dst: Any, actions: Any, n: int) -> None:
    """The policy's actions into the block's row ``dst``, checked as the vector env checks a
    step's actions (shape, and a dtype that casts within its kind), then stored in the space's
    dtype. A step hands env ``i`` row ``i`` of what it is given, so it takes a batch of ``(n,)``
    for a space of shape ``(1,)`` (each env then gets a scalar); the block holds actions of the
    space's shape, which is what a rollout's envs get, so here the shape must be exact."""
    if type(dst) is np.ndarray and type(actions) is np.ndarray and actions.shape == dst.shape:
        if np.can_cast(actions.dtype, dst.dtype, casting="same_kind"):
            np.copyto(dst, actions, casting="unsafe")
            return
    batch = to_batch(space, actions, n, "the policy's actions")
    for (name, _), d, s in zip(named_leaves(space), tree_leaves(dst), tree_leaves(batch), strict=True):
        if s.shape != d.shape:
            part = f" (part {name!r})" if name else ""
            raise InvalidArgumentError(
                f"`the policy's actions`{part} must have shape {d.shape} (a row for each of the {n} envs, single "
                f"space {space}), got shape {s.shape}"
            )
        np.copyto(d, s, casting="unsafe")
