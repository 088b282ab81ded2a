"""Rollouts in the workers, parent side: one command and one reply per worker per T steps.

``rollout_async(num_steps, policy)`` sends every worker a ``ROLLOUT``; each steps its group
``num_steps`` times with its own copy of the policy (:mod:`vecenv.policies`) and writes its
columns of the rollout block (:mod:`vecenv.wire.rollout_buffers`); ``rollout_wait`` gathers the
replies (non-empty infos, errors) and returns a :class:`Rollout`. A rollout is, env for env,
``num_steps`` calls of ``step``: the same autoreset, the same infos, the same call state after
it (a step or a rollout may follow).

What each worker holds is tracked here, so each message carries only what it lacks: the block
(a ``ROLLOUT_BLOCK`` sent just before the ``ROLLOUT`` when it is made or grows, or for a
replacement worker; nobody waits for its reply, and a block a worker could not map fails the
rollout that follows, after which it is sent again), the policy (pickled once per worker until
another is passed) and the weights (:meth:`Rollouts.update_weights`; they ride on the next
``ROLLOUT``). A worker that died during a rollout and was restarted
(``on_worker_death="restart"``) reports the rollout's first step as a restarted step does
(reward 0, truncated, ``infos["worker_restarted"]``, its action lost) and the remaining steps
are run again by the replacement from its fresh reset.

Beyond actions (:mod:`vecenv.policy_outputs`): a policy's extras are laid out in the block
from one call of a copy in the parent when the policy is first passed; a recurrent policy's
state lives in the workers (read with :meth:`Rollouts.read_state`, set with
:meth:`Rollouts.set_state`: a ``POLICY_STATE`` at once, or with the next ``ROLLOUT`` while a call
is in flight); every rollout carries the weights version it was sent with.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
import types
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np
from gymnasium import Space
from gymnasium.vector import AutoresetMode

from vecenv.checks import check_num_steps, check_timeout
from vecenv.errors import ClosedEnvironmentError, InvalidArgumentError, PolicyOutputError, WeightsMismatchError
from vecenv.interrupts import HeldInterrupt
from vecenv.parent.action_rows import empty_action_space
from vecenv.parent.bounded import bounded_call
from vecenv.parent.call_lock import CallLock, serialised
from vecenv.parent.calls import CallRunner
from vecenv.parent.records import WorkerRecord
from vecenv.parent.replies import InfoMerger, current_observations
from vecenv.parent.restart import RestartedRollout, mark_restarted
from vecenv.parent.state import State
from vecenv.policies import PolicyContext, RandomPolicy, WorkerPolicy, as_worker_policy
from vecenv.policy_outputs import (
    PolicyOutputs,
    as_state,
    check_containers,
    check_state,
    join_states,
    repeat_first_row,
    state_rows,
)
from vecenv.spaces import empty_part, is_fixed, leaf_layout, tree_copy, tree_leaves, tree_map
from vecenv.wire.buffers import Buffers, layout_nbytes
from vecenv.wire.memory import check_block
from vecenv.wire.protocol import (
    Command,
    Pickled,
    RolloutArgs,
    RolloutBlockArgs,
    RolloutInfoEntries,
    RolloutReply,
    SlotWeights,
)
from vecenv.wire.rollout_buffers import RolloutBuffers, RolloutSpec
from vecenv.wire.weights import ApartPickler, WeightsSlot, slot_bytes

__all__ = ["Rollout", "Rollouts", "RolloutMethods"]


@dataclasses.dataclass(frozen=True)
class Rollout:
    """``num_steps`` steps of every env, as arrays shaped ``(num_steps, num_envs, ...)``.

    Row ``t`` is what the ``t``-th of ``num_steps`` calls of ``step`` would have given, with the
    actions the workers chose:

    Attributes:
        observations: the observation each action was chosen from (row 0: the observations the
            rollout started from; row ``t + 1``: what step ``t`` returned).
        actions: the actions the envs received, in the action space's dtype (zeros where an env
            received none: unstepped under DISABLED, or a restarted group's row 0).
        rewards, terminations, truncations: what each step returned.
        infos: one dict per step, exactly as ``step`` batches it (``_key`` masks, and under
            SAME_STEP ``final_obs``/``final_info``).
        last_observations: what the last step returned (``(num_envs, ...)``): where the next
            rollout, or ``step``, continues from.
        final_observations: SAME_STEP only (else ``None``): the true final observation of each
            episode that ended at step ``t``, where ``terminations | truncations``.
        stepped: DISABLED only (else ``None``): whether the env was stepped at step ``t``; an
            env whose episode ended waits, unstepped (reward 0, flags False, its final
            observation repeated), for the rest of the rollout.
        extras: the policy's extras by name (``"log_prob"``, ``"value"``, ...), each
            ``(num_steps, num_envs, ...)``: what it returned beside the action of row ``t``
            (zeros where nothing was chosen: an unstepped env, a restarted group's row 0).
        episode_starts: ``(num_steps, num_envs)`` bool: ``observations[t]`` is the first of an
            episode (after ``reset()``, after an autoreset, after a worker restart); a
            recurrent policy acted on it from its initial state.
        initial_state: a recurrent policy's state of every env before row 0 (a tree of
            ``(num_envs, ...)`` arrays, as the policy keeps it), else ``None``. Replaying the
            policy from it over ``observations``, resetting an env's state where
            ``episode_starts``, gives the state each action was chosen with.
        weights_version: the version of the weights that acted (see
            ``update_policy_weights``): a rollout started before an update was chosen by the
            weights before it.

    Trees (dicts, tuples) of arrays stand for Dict and Tuple spaces. With the vector env's
    ``copy=False`` the arrays are views of the rollout block, overwritten by the next rollout.
    """

    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: list[dict[str, Any]]
    last_observations: Any
    final_observations: Any = None
    stepped: np.ndarray | None = None
    extras: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    episode_starts: np.ndarray | None = None
    initial_state: Any = None
    weights_version: int = 0

    @property
    def num_steps(self) -> int:
        """How many steps the rollout ran: the first axis of every array."""
        return int(self.rewards.shape[0])

    def next_observations(self) -> Any:
        """The observation each step led to (new arrays): the next row's observation, the last
        observations for the last row, and the true final observation where an episode ended
        under SAME_STEP (under NEXT_STEP and DISABLED the next row already holds it)."""
        ended = self.terminations | self.truncations

        def shifted(obs: np.ndarray, last: np.ndarray, final: np.ndarray | None) -> np.ndarray:
            out = np.empty_like(obs)
            out[:-1] = obs[1:]
            out[-1] = last
            if final is not None:
                out[ended] = final[ended]
            return out

        observations = tree_leaves(self.observations)
        finals: list[np.ndarray | None] = [None] * len(observations)
        if self.final_observations is not None:
            finals = list(tree_leaves(self.final_observations))
        leaves = iter(
            [shifted(o, last, f) for o, last, f in zip(observations, tree_leaves(self.last_observations), finals)]
        )
        return tree_map(lambda _: next(leaves), self.observations)


@dataclasses.dataclass
class _Held:
    """What one worker holds, each keyed by the worker's launch count (a replacement holds
    nothing)."""

    block: tuple[int, int] | None = None  # (launches, block number)
    policy: tuple[int, int] | None = None  # (launches, policy number)
    weights: tuple[int, int] | None = None  # (launches, weights version)
    slot: tuple[int, int] | None = None  # (launches, weights slot number)


#: Rollouts that need at least this many bytes in the parent are checked against the memory first.
CHECKED_FROM = 64 * 2**20
#: What one step's dict of infos takes in the parent, at least (an empty dict and its slot).
INFO_BYTES = 72
#: Seconds a new policy's one call in the parent (learning its outputs) may take when the
#: rollout has no ``timeout=``, before :class:`~vecenv.errors.VecEnvTimeoutError`.
PROBE_TIMEOUT = 60.0

#: Seconds :meth:`Rollouts.read_state` waits for the workers' states by default before it
#: raises :class:`~vecenv.errors.VecEnvTimeoutError` (they are idle then: it takes milliseconds).
STATE_TIMEOUT = 60.0


class Rollouts:
    """The rollout API of one vector env (it delegates to this); see the module docstring."""

    def __init__(
        self,
        runner: CallRunner,
        buffers: Buffers,
        spaces: tuple[Space, Space],
        autoreset_mode: AutoresetMode,
        copy: bool,
        native_groups: bool,
    ) -> None:
        self.runner, self.buffers = runner, buffers
        self.calls, self.workers = runner.calls, runner.workers
        self.observation_space, self.action_space = spaces
        self.autoreset_mode = autoreset_mode
        self.copy = copy
        self.native_groups = native_groups
        self.num_envs = buffers.spec.num_envs
        self.block: RolloutBuffers | None = None
        self._block_number = 0
        self._held = [_Held() for _ in self.workers]
        self._given: Any = None  # what the caller passed, for "the same policy again"
        self._policy: WorkerPolicy | None = None
        self._pickled_policy: Pickled | None = None  # _policy as adopted, pickled once for every worker
        self._policy_number = 0
        self._weights: Any = None  # newer than the policy's own, or None
        self._pickled: Pickled | SlotWeights | None = None  # _weights as sent, made once for every worker
        # Where new weights' arrays go, when the workers map shared memory (vecenv.wire.weights).
        spec = buffers.spec
        self._slot_usable = spec.shared_flags and spec.shm_name is None and WeightsSlot.available()
        self._slot: WeightsSlot | None = None
        self._apart = ApartPickler()  # each version's weights laid out as the last: pickled once
        self._version = 0  # bumped by every new policy and every new weights
        # The version and pickled weights (None: the policy's own) the rollout in flight was
        # sent with; a group restarted during it runs the rest with them too.
        self._sent_version = 0
        self._sent_weights: Pickled | SlotWeights | None = None
        self._outputs = PolicyOutputs()  # the current policy's extras and whether it is recurrent
        self._state: Any = None  # a state to set before the next rollout (set_state)
        self._fresh_state = False  # every env's state to the initial one before the next rollout
        self._num_steps = 0
        self._start_obs: Any = None  # row 0 of a restarted group (kept only with restarts)
        self._infos = InfoMerger(self.num_envs)
        self._space_refusal: str | None = None  # why the spaces cannot be rolled out, once known
        self._small_rollout: tuple[int, int | None, Any] | None = None  # sizes last found below CHECKED_FROM

    # -- policies ----------------------------------------------------------------------------

    def _adopt(self, policy: Any) -> WorkerPolicy:
        current = self._policy
        if current is not None and (
            _same_object(policy, self._given) or policy is current or _is_random(policy, current)
        ):
            return current
        adopted = as_worker_policy(policy)
        outputs = self._probe(adopted)
        # Pickled now, as it is: every worker gets these bytes, a replacement later too.
        pickled = Pickled.of(adopted)
        self._given, self._policy, self._outputs = policy, adopted, outputs
        self._pickled_policy = pickled
        self._policy_number += 1
        self._version += 1
        self._weights = None
        self._forget_pickled()
        self._state, self._fresh_state = None, False
        return adopted

    def _probe(self, policy: WorkerPolicy) -> PolicyOutputs:
        """What ``policy`` gives beyond actions, from one call of a copy on the first worker's
        rows (so that a bad output is an error here, before anything is sent)."""
        w = self.workers[0]
        context = PolicyContext(range(w.start, w.stop), self.observation_space, self.action_space, [None] * w.size)
        observations = tree_map(lambda a: a[w.start : w.stop].copy(), self.buffers.observations)
        bound = PROBE_TIMEOUT if self.runner.timeout is None else self.runner.timeout
        outputs = bounded_call(
            lambda: policy.outputs(context, observations),
            bound,
            f"`rollout` could not learn what policy {policy.name} gives: called once in this process on "
            f"worker 0's rows, it did not return within {bound:g} s (it hangs?). Nothing was sent",
            "vecenv-policy-probe",
            lambda: self._closed_meanwhile(policy),
        )
        if outputs.recurrent and self.native_groups:
            raise PolicyOutputError(
                f"policy {policy.name} is recurrent (its state has a row per env, reset at episode starts), "
                "which needs groups of envs the workers step one by one: this vector env's groups are native "
                "VectorEnvs"
            )
        return outputs

    def _closed_meanwhile(self, policy: WorkerPolicy) -> BaseException | None:
        """The error for a probe that ``close()`` from another thread interrupted, if it did."""
        if self.runner.aborted is None:
            return None
        return ClosedEnvironmentError(
            f"`rollout` {self.runner.aborted} while the first call of policy {policy.name} ran in this process "
            "(that call goes on in a thread of its own); nothing was sent"
        )

    def update_weights(self, weights: Any) -> None:
        """New weights for the policy of the last rollout, sent with the next one."""
        self.calls.check_open("update_policy_weights")
        if self._policy is None:
            raise InvalidArgumentError(
                "`update_policy_weights` needs a policy: call `rollout(num_steps, policy)` first"
            )
        # Checked before anything changes: weights the copies cannot load are refused here, and
        # the copies keep the weights they had (WeightsMismatchError, TypeError).
        try:
            self._weights = self._policy.weights() if weights is None else self._policy.check_weights(weights)
        except WeightsMismatchError:
            if weights is None:
                # The original itself no longer fits its copies: the same object passed to
                # `rollout` again is a new policy, sent as a new copy (as the error's note says).
                self._given = None
            raise
        self._forget_pickled()
        self._version += 1

    @property
    def version(self) -> int:
        """The weights version the next rollout acts with."""
        return self._version

    def _sending(self) -> None:
        """What the commands about to go out carry: the current version and its weights."""
        old = self._sent_weights
        self._sent_version = self._version
        self._sent_weights = None if self._weights is None else self._pickled_weights()
        self._release(old)

    def _payload(self, w: WorkerRecord, num_steps: int, first_step: int) -> RolloutArgs:
        """Worker ``w``'s command for the call in flight (:meth:`_sending` came first), with
        what it lacks of the version sent."""
        held, launches = self._held[w.index], w.launches
        send_policy = held.policy != (launches, self._policy_number)
        weights = self._sent_weights
        send_weights = weights is not None and (send_policy or held.weights != (launches, self._sent_version))
        if send_weights and isinstance(weights, SlotWeights) and held.slot != (launches, weights.slot):
            assert self._slot is not None and self._slot.number == weights.slot, "the slot of the version sent"
            weights = dataclasses.replace(weights, fd=self._slot.fd)  # the worker maps the slot first
        state = None
        if first_step == 0 and self._state is not None:
            state = state_rows(self._state, w.start, w.stop)
        return RolloutArgs(
            num_steps,
            first_step,
            self._pickled_policy if send_policy else None,
            weights if send_weights else None,
            state,
            first_step == 0 and self._fresh_state,
        )

    def _pickled_weights(self) -> Pickled | SlotWeights:
        """The new weights as the workers get them, made at their first send and reused for
        every other worker and any later send of the same version (a replacement worker): in
        the shared slot where the workers map one, else pickled."""
        if self._pickled is None:
            self._pickled = self._made_weights(self._weights)
        return self._pickled

    def _made_weights(self, weights: Any) -> Pickled | SlotWeights:
        """``weights`` written into the shared slot, where the workers map one and they hold
        arrays; else pickled: no slot here, nothing for one (the pickle is then all there is),
        or plain pickle cannot pickle them (cloudpickle then does)."""
        apart = self._apart(weights) if self._slot_usable else None
        size = 0 if apart is None else slot_bytes(apart[1])
        if apart is not None and size:
            return self._in_slot(*apart, size)
        pickled = Pickled(apart[0]) if apart is not None and not apart[1] else Pickled.of(weights)
        self.runner.keep_block(pickled)  # its shared copy, if made, is closed at shutdown
        return pickled

    def _in_slot(self, header: bytes, buffers: list[memoryview], size: int) -> SlotWeights:
        """The weights' arrays (``size`` bytes) written into the shared slot (a larger slot made
        first when they outgrow it). Only while no call is in flight (see vecenv.wire.weights)."""
        if self._slot is None or self._slot.capacity < size:
            # Made before the old one is let go: a slot refused (MemoryLimitError) changes nothing,
            # and a Ctrl+C meanwhile waits until the new one is kept (closed at shutdown).
            with HeldInterrupt():
                old = self._slot
                new = WeightsSlot(size, 1 if old is None else old.number + 1)
                self._slot = new
                if old is not None:
                    self.runner.drop_block(old)  # each worker's mapping of it stays its own
                self.runner.keep_block(new)
        return self._slot.write(header, buffers)

    def _forget_pickled(self) -> None:
        """Newer weights, or none: the pickled ones are dropped once the call in flight (if it
        was sent with them) no longer needs them either."""
        old, self._pickled = self._pickled, None
        self._release(old)

    def _release(self, pickled: Pickled | SlotWeights | None) -> None:
        """Close the shared copy of weights that neither the next call nor the one in flight
        sends (a rollout's command is never sent again; a replacement gets a new one)."""
        if isinstance(pickled, Pickled) and pickled is not self._pickled and pickled is not self._sent_weights:
            self.runner.drop_block(pickled)

    def _sent(self, workers: Sequence[WorkerRecord]) -> None:
        """``workers`` ran the command just answered: they hold the current policy, weights and
        state. (Not a replaced worker whose reply was made here: it was never sent one.)"""
        for w in workers:
            held = self._held[w.index]
            held.policy = (w.launches, self._policy_number)
            held.weights = (w.launches, self._sent_version)
            if isinstance(self._sent_weights, SlotWeights):  # loaded from that slot, now or before
                held.slot = (w.launches, self._sent_weights.slot)

    # -- a recurrent policy's state ----------------------------------------------------------

    def _check_recurrent(self, call: str) -> None:
        self.calls.check_open(call)
        if self._policy is None or not self._outputs.recurrent:
            raise InvalidArgumentError(
                f"`{call}` needs a recurrent policy (one with initial_state): pass it to `rollout` first"
            )

    def set_state(self, state: Any, timeout: float | None = None) -> None:
        """Every env's state now (``None``: the policy's initial state): sent at once when no
        call is in flight (one round trip), so a reset or step before the next rollout restarts
        the state of the envs it starts episodes for, as for any state; else it rides on the
        next rollout, or :meth:`give_set_state` sends it before a reset or step."""
        self._check_recurrent("set_policy_state")
        if state is None:
            self._state, self._fresh_state = None, True
        else:
            state = as_state(state)
            if self._outputs.initial_state is not None:
                check_containers(state, self._outputs.initial_state, "given to set_policy_state")
            check_state(state, self.num_envs, self._outputs.initial_state, "given to set_policy_state")
            self._state, self._fresh_state = state, False
        if self.calls.idle:
            self.read_state(timeout, "set_policy_state")

    def give_set_state(self) -> None:
        """Before a call that may start episodes (a reset, a step), with no call in flight:
        send a state set while a call was in flight (one round trip), so that this call
        restarts it for the envs whose episodes it starts, as it does a state set while idle.
        (The initial state, set as ``None``, needs no round trip: restarting gives it too.)"""
        if self._state is not None and self.calls.idle:
            self.read_state(None, "set_policy_state")

    def read_state(self, timeout: float | None, call: str = "policy_state") -> Any:
        """Every env's state as the next rollout would start from it (one round trip), after
        the state set for it, if any, is set; ``call`` names the call in errors."""
        self._check_recurrent(call)
        self.calls.check_can_start(call)
        workers = self.workers
        self._sending()
        payloads = [self._payload(w, 0, 0) for w in workers]
        replies = self.runner.round_trip(
            workers, Command.POLICY_STATE, payloads, call, STATE_TIMEOUT if timeout is None else timeout
        )
        self._state, self._fresh_state = None, False
        self._sent([w for w, reply in zip(workers, replies) if not isinstance(reply, RestartedRollout)])
        states = [self._reply_state(w, reply) for w, reply in zip(workers, replies)]
        return join_states(states)

    def _reply_state(self, w: WorkerRecord, reply: Any) -> Any:
        """A worker's state from its reply; a replaced worker's envs start afresh."""
        if isinstance(reply, RestartedRollout) or reply.state is None:
            initial = self._outputs.initial_state
            return repeat_first_row(as_state(initial), w.size)
        return reply.state

    # -- the block ---------------------------------------------------------------------------

    def _spec(self, num_steps: int) -> RolloutSpec:
        return RolloutSpec.plan(
            num_steps,
            self.num_envs,
            self.observation_space,
            self.action_space,
            self.buffers.spec.shared_flags,
            self.autoreset_mode,
            self._outputs.extras,
        )

    def _block_capacity(self, num_steps: int) -> int | None:
        """The steps of the block to make for a rollout of ``num_steps``, or ``None`` when the
        block there is fits (long enough, with the policy's extras)."""
        block = self.block
        if block is None:
            return num_steps
        if block.spec.num_steps < num_steps or block.spec.extras != self._outputs.extras:
            return max(num_steps, block.spec.num_steps)
        if not block.sendable and any(held.block is None for held in self._held):
            # A worker may lack it (after a failed rollout) and its descriptor is gone: a new one.
            return block.spec.num_steps
        return None

    def _check_memory(self, num_steps: int) -> None:
        """Refuse a rollout whose memory in the parent exceeds what the machine can give
        (``MemoryLimitError``) rather than run it and fail at the end: the block when it must be
        made, the new arrays ``rollout_wait`` returns with ``copy=True`` (as large as the block's
        rows) and its ``infos``, a dict per step (:data:`INFO_BYTES`). Checked from
        :data:`CHECKED_FROM` bytes up: smaller rollouts are not worth the reads."""
        capacity = self._block_capacity(num_steps)
        # The same rollout again, whose sizes were found below the line: nothing to read.
        key = (num_steps, capacity, self._outputs.extras)
        if key == self._small_rollout:
            return
        rows = layout_nbytes(self._spec(num_steps).layout())
        made = 0 if capacity is None else layout_nbytes(self._spec(capacity).layout())
        needed = made + (rows if self.copy else 0) + num_steps * INFO_BYTES
        if needed < CHECKED_FROM:
            self._small_rollout = key
            return
        parts = ["its block" if made else "", "the arrays rollout_wait returns with copy=True" if self.copy else ""]
        parts.append("a dict of infos per step")
        what = f"a rollout of {num_steps} steps of {self.num_envs} envs ({', '.join(p for p in parts if p)})"
        check_block(needed, what, shared=False)

    def _ensure_block(self, num_steps: int, workers: Sequence[WorkerRecord]) -> None:
        """Make the block if it is missing, too short or laid out for other extras, and send it
        to every worker lacking it.

        Nobody waits for the workers to map it: the ``ROLLOUT`` that follows on the same pipe
        finds it mapped, or fails (and then :meth:`finish` forgets what the workers hold).
        """
        capacity = self._block_capacity(num_steps)
        if capacity is not None:
            # Made before the old one is let go: a block refused (MemoryLimitError) changes nothing.
            # A Ctrl+C meanwhile waits until the new block is kept (closed at shutdown), not lost.
            with HeldInterrupt():
                new = RolloutBuffers.create(self._spec(capacity))
                old, self.block = self.block, new
                if old is not None:
                    self.runner.drop_block(old)
                self.runner.keep_block(new)  # released at shutdown
                self._block_number += 1
        block, number = self.block, self._block_number
        assert block is not None, "made above when missing"
        fd = block.block.fd if block.block is not None else None
        message = RolloutBlockArgs(block.spec, fd)
        while True:
            lacking = [w for w in workers if self._held[w.index].block != (w.launches, number)]
            if not lacking:
                break
            # A worker found dead while sending is replaced at once: its replacement (another
            # launch) still lacks the block, and is sent it on the next turn.
            launches = [w.launches for w in lacking]
            messages = [message] * len(lacking)
            self.runner.send(lacking, Command.ROLLOUT_BLOCK, messages, "rollout_async", None, wanted=False)
            for w, launch in zip(lacking, launches):
                self._held[w.index].block = (launch, number)
        if not self.runner.restarts_workers and all(
            h.block == (w.launches, number) for h, w in zip(self._held, self.workers)
        ):
            # The descriptor travelled with each message; a replacement worker would need it
            # again, and without restarts there is none.
            block.release_fd()

    # -- a rollout ---------------------------------------------------------------------------

    def start(self, num_steps: Any, policy: Any) -> None:
        """Check, send the block to the workers lacking it and every worker its ``ROLLOUT``."""
        calls = self.calls
        calls.check_can_start("rollout_async")
        calls.check_steppable("rollout_async", "reset()")
        if self.autoreset_mode is AutoresetMode.DISABLED:
            calls.check_none_ended("rollout_async")
            if self.native_groups:
                raise InvalidArgumentError(
                    "`rollout` under autoreset_mode=DISABLED leaves ended envs unstepped, which a native "
                    "VectorEnv group cannot do: use NEXT_STEP or SAME_STEP"
                )
        t = check_num_steps(num_steps)
        if self._space_refusal is None:
            self._space_refusal = self._refusal_of_spaces()
        if self._space_refusal:
            raise InvalidArgumentError(self._space_refusal)
        self._adopt(policy)  # (its extras decide the block's layout)
        self._check_memory(t)
        workers = self.workers
        if self.runner.restarts_workers:  # before the block: a worker replaced there resets its rows
            self._start_obs = tree_copy(self.buffers.observations)
        self._ensure_block(t, workers)
        self._sending()
        payloads = [self._payload(w, t, 0) for w in workers]
        self._num_steps = t
        self.runner.send(workers, Command.ROLLOUT, payloads, "rollout_async", State.WAITING_ROLLOUT)
        self._state, self._fresh_state = None, False

    def _refusal_of_spaces(self) -> str:
        """Why the spaces cannot be rolled out (``""``: they can). The spaces never change, so
        :meth:`start` asks once."""
        for name, space in (("observation", self.observation_space), ("action", self.action_space)):
            if not is_fixed(space):
                return f"`rollout` needs fixed-shape spaces (Box, Discrete, ...); the {name} space is {space}"
        needs = "`rollout` needs spaces that hold values (Box, Discrete, ...)"
        if not leaf_layout(self.observation_space, 0):  # the block would have no rows for them
            return f"{needs}; the observation space {self.observation_space} holds no values"
        empty_actions = empty_part(self.action_space, "actions")
        if empty_actions is not None:
            return f"{needs}; {empty_action_space(self.action_space, empty_actions)}"
        return ""

    def finish(self, timeout: float | None) -> Rollout:
        """Gather the replies (running restarted groups' steps again) and assemble the rollout."""
        self.calls.check_waiting(State.WAITING_ROLLOUT, "rollout_wait", "rollout_async")
        try:
            workers, replies = self.runner.finish("rollout_wait", timeout, poisons=True, collect=self._gather)
        except PolicyOutputError as exc:
            if self._outputs.probe_error:  # the layout checked against was not learned
                exc.add_note(
                    f"the policy's call in this process, which learns its outputs' layout, raised "
                    f"{self._outputs.probe_error}: the workers expected what was learned before that"
                )
            raise
        try:
            return self._assemble(workers, replies)
        except BaseException as exc:
            self.calls.interrupted_after_stepping("rollout_wait", exc)
            raise

    def _gather(self, workers: list[WorkerRecord], timeout: float | None) -> list[Any]:
        """Every worker's reply; a restarted group's steps are run again by its replacement.
        On a failure the workers are sent the block and the policy again next time (a worker
        may have failed to map the one or to build the other)."""
        try:
            return self._gather_all(workers, None if timeout is None else time.monotonic() + timeout, timeout)
        except BaseException:
            for held in self._held:
                held.block = held.policy = held.weights = held.slot = None
            raise

    def _gather_all(self, workers: Sequence[WorkerRecord], deadline: float | None, timeout: float | None) -> list[Any]:
        runner, call = self.runner, "rollout_wait"
        replies = dict(zip((w.index for w in workers), runner.gather(workers, timeout, call, deadline=deadline)))
        first_rows: dict[int, RolloutReply] = {}
        again = [w for w in workers if isinstance(replies[w.index], RestartedRollout)]
        while again:
            for w in again:
                first_rows[w.index] = self._restarted_first_step(w, replies[w.index])
            if self.block is not None and self.block.stepped is not None:
                break  # DISABLED: the restarted step ended the episode; the envs wait unstepped
            self._ensure_block(self._num_steps, again)
            payloads = [self._payload(w, self._num_steps, 1) for w in again]
            runner.send(again, Command.ROLLOUT, payloads, call, None)
            replies.update(zip((w.index for w in again), runner.gather(again, timeout, call, deadline=deadline)))
            again = [w for w in again if isinstance(replies[w.index], RestartedRollout)]
        made_here = set()  # replacements never sent the rollout (DISABLED): they hold no policy yet
        for index, first in first_rows.items():
            reply = replies[index]
            if isinstance(reply, RestartedRollout):
                replies[index] = first
                made_here.add(index)
            else:  # the state before row 0 died with the worker: the fresh one (first.state)
                masked = (first.masked or []) + (reply.masked or []) or None
                replies[index] = RolloutReply(first.infos + reply.infos, reply.rows, reply.block, first.state, masked)
        self._sent([w for w in workers if w.index not in made_here])
        return [replies[w.index] for w in workers]

    def _restarted_first_step(self, w: WorkerRecord, restarted: RestartedRollout) -> RolloutReply:
        """Row 0 of a group whose worker was replaced: the restarted step, as ``step`` reports it.

        Under DISABLED that step ends the envs' episodes, so the other rows are filled here too:
        unstepped, at the fresh reset's observation (the step buffers hold it once received).
        Under SAME_STEP its final observation (the episode's true one died with the worker) is
        that fresh observation, which ``step`` returns for it and which the next row holds
        under NEXT_STEP.
        """
        block = self.block
        assert block is not None and self._start_obs is not None
        span = slice(w.start, w.stop)
        t = self._num_steps
        if block.stepped is not None or block.final_observations is not None:
            self.buffers.receive(w.start, w.stop, restarted.reset.rows)
        if block.final_observations is not None:
            for dst, src in zip(tree_leaves(block.final_observations), tree_leaves(self.buffers.observations)):
                dst[0, span] = src[span]
        if block.plain_ends is not None:  # the dead worker may have marked row 0
            block.plain_ends[0, span] = False
        if block.stepped is not None:
            for dst, src in zip(tree_leaves(block.observations), tree_leaves(self.buffers.observations)):
                dst[1:t, span] = src[span]
            block.rewards[1:t, span] = 0.0
            block.terminations[1:t, span] = False
            block.truncations[1:t, span] = False
            block.stepped[1:t, span] = False
        if restarted.observations is not None:  # rewritten by the restart before this rollout
            for dst, src in zip(tree_leaves(block.observations), tree_leaves(restarted.observations)):
                dst[0, span] = src
        else:
            for dst, src in zip(tree_leaves(block.observations), tree_leaves(self._start_obs)):
                dst[0, span] = src[span]
        for dst in tree_leaves(block.actions):  # lost (row 0), or never chosen (DISABLED's waiting rows)
            dst[0 if block.stepped is None else slice(0, t), span] = 0
        block.rewards[0, span] = 0.0
        block.terminations[0, span] = False
        block.truncations[0, span] = True
        if block.stepped is not None:
            block.stepped[0, span] = True
        # Row 0's observation was the dead worker's; its action and outputs were lost.
        block.episode_starts[0, span] = False
        if block.stepped is not None:
            block.episode_starts[1:t, span] = False
        for array in block.extras.values():
            array[0 if block.stepped is None else slice(0, t), span] = 0
        state = self._reply_state(w, restarted) if self._outputs.recurrent else None
        infos = [(0, j, info) for j, info in mark_restarted(restarted.reset.infos, w.size)]
        masked = restarted.reset.masked
        return RolloutReply(infos, state=state, masked=None if masked is None else [(0, masked)])

    def _assemble(self, workers: Sequence[WorkerRecord], replies: Sequence[RolloutReply]) -> Rollout:
        block = self.block
        assert block is not None
        t = self._num_steps
        try:
            for w, reply in zip(workers, replies):
                block.receive(w.start, w.stop, reply.block)
                self.buffers.receive(w.start, w.stop, reply.rows)
        except BaseException as exc:
            if self.autoreset_mode is AutoresetMode.DISABLED:
                # The envs stepped, but which of them ended is not recorded (nor, for rows that
                # travel in replies, known): refuse steps until a reset rather than step them on.
                self.calls.poison(
                    f"`rollout_wait` was cut short ({type(exc).__name__}) before it recorded which envs ended"
                )
            raise
        ends = block.terminations[:t] | block.truncations[:t]
        # Recorded before the infos are batched: the envs ended whether or not they can be.
        self.calls.rollout_done(ends.any(axis=0) if block.stepped is not None else ends[t - 1])
        infos: list[dict[str, Any]] = [{} for _ in range(t)]
        for w, reply in zip(workers, replies):
            for step, j, info in _with_plain_ends(block, t, w.start, w.stop, reply.infos):
                infos[step] = self._infos.add(infos[step], info, w.start + j)
        for reply in replies:  # after every env's info, as a step adds them
            for step, keys in reply.masked or ():
                self._infos.add_masked(infos[step], keys)
        initial_state = None
        if self._outputs.recurrent:
            initial_state = join_states([reply.state for reply in replies])

        def rows(tree: Any) -> Any:
            if tree is None:
                return None
            return tree_map((lambda a: a[:t].copy()) if self.copy else (lambda a: a[:t]), tree)

        return Rollout(
            rows(block.observations),
            rows(block.actions),
            rows(block.rewards),
            rows(block.terminations),
            rows(block.truncations),
            infos,
            current_observations(self.buffers, self.copy),
            rows(block.final_observations),
            rows(block.stepped),
            {name: rows(array) for name, array in block.extras.items()},
            rows(block.episode_starts),
            initial_state,
            self._sent_version,
        )


def _with_plain_ends(
    block: RolloutBuffers, num_steps: int, start: int, stop: int, entries: RolloutInfoEntries
) -> RolloutInfoEntries:
    """A group's info entries with those its worker left out put back (SAME_STEP's
    ``plain_ends``: ``{"final_obs": <a copy of the row>, "final_info": {}}``), in step and env
    order, as the group made them."""
    plain = block.plain_ends
    if plain is None:
        return entries
    rows = plain[:num_steps, start:stop]
    if not rows.any():
        return entries
    final = block.final_observations
    made = [
        (step, j, {"final_obs": final[step, start + j, ...].copy(), "final_info": {}})
        for step, j in zip(*(axis.tolist() for axis in np.nonzero(rows)))
    ]
    if not entries:
        return made
    return list(heapq.merge(entries, made, key=itemgetter(0, 1)))


def _same_object(policy: Any, given: Any) -> bool:
    """``policy`` is the object passed before: itself, or a bound method of the same object and
    function (``agent.act`` makes a new method object at each access, so ``is`` alone would send
    the same policy again, a new version, at every rollout)."""
    if policy is given:
        return True
    return (
        isinstance(policy, types.MethodType)
        and isinstance(given, types.MethodType)
        and policy.__self__ is given.__self__
        and policy.__func__ is given.__func__
    )


def _is_random(policy: Any, current: WorkerPolicy) -> bool:
    """Both are the random policy (``"random"`` names it; every RandomPolicy is the same)."""
    return isinstance(current, RandomPolicy) and (policy == "random" or isinstance(policy, RandomPolicy))


class RolloutMethods:
    """The rollout API of :class:`~vecenv.parent.vector_env.GroupVectorEnv` (a mixin over its
    ``_rollouts``; kept here, beside the engine it calls)."""

    _rollouts: Rollouts
    call_lock: CallLock

    @serialised
    def rollout_async(self, num_steps: int, policy: Any = "random") -> None:
        """Start a rollout of ``num_steps`` steps of every env, actions chosen by ``policy`` in
        the workers; :meth:`rollout_wait` collects it.

        ``policy``: ``"random"``, a :class:`~vecenv.policies.WorkerPolicy`, a CPU
        ``torch.nn.Module``, a Stable-Baselines3 model or any picklable callable
        ``policy(observations) -> actions`` on a batch of rows (see :mod:`vecenv.policies`).
        Each worker gets a copy the first time a policy is passed; passing the same object
        again reuses the copies (push new weights with :meth:`update_policy_weights`; where that
        refuses the original's own weights as no longer fitting the copies, the same object passed
        again is sent as a new copy). A policy
        may return ``(actions, extras)`` (named per-row arrays, in :attr:`Rollout.extras`) and
        may be recurrent (``initial_state``; see :mod:`vecenv.policy_outputs`): its layout is
        learned from one call of a copy here, when it is first passed.

        Raises:
            ValueError: ``num_steps`` is not a positive int, a space has no fixed shape, or a
                native vector env group under DISABLED.
            PolicyOutputError: extras or a state that cannot be laid out (not one row per env),
                or a recurrent policy on native vector env groups; at a later step (in the
                worker), extras or a state whose names, shapes or dtypes changed.
            NeedsResetError: as for ``step`` (after a failed call; ended envs under DISABLED).
        """
        self._rollouts.start(num_steps, policy)

    @serialised
    def rollout_wait(self, timeout: float | None = None) -> Rollout:
        """The rollout started by :meth:`rollout_async`; raises the timeout error after
        ``timeout`` seconds (the late replies are dropped; ``reset()`` comes next).

        An env error is raised as in ``step``, its note naming the env and the step of the
        rollout; afterwards ``step`` and ``rollout`` raise ``NeedsResetError`` until ``reset()``.
        """
        return self._rollouts.finish(check_timeout(timeout))

    @serialised
    def rollout(self, num_steps: int, policy: Any = "random", *, timeout: float | None = None) -> Rollout:
        """``num_steps`` steps of every env with ``policy`` running in the workers: one command
        and one reply per worker for the whole rollout. Every env's trajectory is the one
        ``num_steps`` calls of ``step`` give with the same actions; the vector env continues
        from ``rollout.last_observations``. See :meth:`rollout_async` and :class:`Rollout`."""
        timeout = check_timeout(timeout)
        runner = self._rollouts.runner
        with runner.whole("rollout"):
            with runner.within(timeout):
                self.rollout_async(num_steps, policy)
            return self.rollout_wait(timeout)

    @serialised
    def update_policy_weights(self, weights: Any = None) -> None:
        """Give every worker's copy of the last rollout's policy new weights before the next
        rollout (they travel with it). ``weights=None`` reads them from the original: the
        ``state_dict`` of the torch module, or of the SB3 model's policy, as it is now."""
        self._rollouts.update_weights(weights)

    @property
    def policy_weights_version(self) -> int:
        """The version of the weights the next rollout acts with: bumped by every new policy
        and every :meth:`update_policy_weights`. Each :class:`Rollout` says its own
        (``weights_version``): after ``rollout_async``, ``update_policy_weights``,
        ``rollout_wait`` the rollout was chosen by the weights before the update, one version
        behind this."""
        return self._rollouts.version

    @serialised
    def policy_state(self, timeout: float | None = None) -> Any:
        """A recurrent policy's state of every env (a tree of ``(num_envs, ...)`` arrays), as
        the next rollout starts from it: one round trip to the workers, between calls.

        Raises:
            ValueError: the last policy passed to ``rollout`` keeps no state.
        """
        return self._rollouts.read_state(check_timeout(timeout))

    @serialised
    def set_policy_state(self, state: Any = None, timeout: float | None = None) -> None:
        """Set every env's state of the recurrent policy; ``None``: the policy's initial state
        (to evaluate from a fresh state, say). It is the state beside the envs' current
        observations (one round trip, bounded by ``timeout`` as :meth:`policy_state`'s; while a
        call is in flight, it is sent with the next rollout, or before the next reset or step):
        a ``reset`` or ``step`` before the next rollout restarts it for the envs whose episodes
        it starts, as it would any state.

        Raises:
            PolicyOutputError: other containers than the policy's initial state (a list for
                its tuple, say), a leaf without one row per env, or another shape or dtype than
                the policy's initial state.
            ValueError: the last policy passed to ``rollout`` keeps no state.
        """
        self._rollouts.set_state(state, check_timeout(timeout))
