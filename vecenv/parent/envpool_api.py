"""Asynchronous batches: the EnvPool-style ``async_reset``/``recv``/``send`` API over a pool.

``recv`` hands back the first whole groups to finish, ``batch_size`` envs in ascending env id
order; ``send`` steps exactly those. Which envs are where is read off the pool's worker status,
never kept twice: in flight (BUSY, or READY with a reply not yet handed out) or returned and
waiting for ``send`` (IDLE, or LATE when a call made in between timed out: its reply is dropped
on arrival).
Every env's trajectory is the one ``SyncVectorEnv`` gives for its seed and action sequence,
whatever order the groups finish in.

This class holds no reference to the vector env that owns it: it is given the call runner (the
one door to the pool, and the call state), the buffers and the action placer, and changes the
call state only through their methods.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array

from vecenv.checks import check_env_ids, check_options, check_timeout
from vecenv.errors import InvalidArgumentError, NoAsyncCallError
from vecenv.parent.action_rows import ActionPlacer
from vecenv.parent.calls import CallRunner
from vecenv.parent.records import WorkerRecord, WorkerStatus
from vecenv.parent.replies import InfoMerger
from vecenv.parent.state import SeedBook, State, already_pending
from vecenv.spaces import tree_map
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import Command, ResetArgs

__all__ = ["AsyncBatches"]


class AsyncBatches:
    """The EnvPool-style API of one vector env (the vector env delegates to it)."""

    def __init__(
        self,
        runner: CallRunner,
        buffers: Buffers,
        actions: ActionPlacer,
        seeds: SeedBook,
        single_observation_space: gym.Space,
        autoreset_mode: AutoresetMode,
        batch_size: int,
    ) -> None:
        self.runner = runner
        self.workers = workers = runner.workers
        self.buffers = buffers
        self.calls = runner.calls
        self.actions = actions
        self.seeds = seeds
        self.single_observation_space = single_observation_space
        self.autoreset_mode = autoreset_mode
        self.batch_size = batch_size
        self.num_envs = sum(w.size for w in workers)
        self._infos = InfoMerger(batch_size)
        self._owner = np.repeat(np.arange(len(workers)), [w.size for w in workers])

    def async_reset(self, seed: Any, options: dict[str, Any] | None) -> None:
        calls = self.calls
        calls.check_open("async_reset")
        if calls.waiting not in (State.DEFAULT, State.WAITING_RECV):
            raise already_pending("async_reset", calls.waiting)
        if self.autoreset_mode is AutoresetMode.DISABLED:
            raise InvalidArgumentError("async_reset/recv/send need autoreset_mode NEXT_STEP or SAME_STEP, got DISABLED")
        sent = check_options(options)
        if sent is not None and "reset_mask" in sent:
            raise InvalidArgumentError("`options['reset_mask']` is not supported by `async_reset`: it resets every env")
        seeds = self.seeds.expand(seed, self.num_envs)
        # Every check has passed: only now drop what is in flight.
        self.seeds.remember(seeds, None)
        workers = self.workers
        self.runner.abandon(workers)
        payloads = [ResetArgs(seeds[w.start : w.stop], sent, None) for w in workers]
        self.runner.send(workers, Command.RESET, payloads, "async_reset", None, started=calls.batches_started)

    def recv(self, timeout: float | None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], np.ndarray]:
        timeout = check_timeout(timeout)
        runner, calls = self.runner, self.calls
        calls.check_waiting(State.WAITING_RECV, "recv", "async_reset")
        calls.check_steppable("recv", "async_reset()")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ready = runner.ready()
            if sum(w.size for w in ready) >= self.batch_size:
                break
            busy = [w for w in self.workers if w.status is WorkerStatus.BUSY]
            in_flight = sum(w.size for w in ready) + sum(w.size for w in busy)
            if in_flight < self.batch_size:
                raise NoAsyncCallError(
                    f"Calling `recv` with only {in_flight} envs in flight, fewer than batch_size={self.batch_size}: "
                    "`send` actions for the envs the last `recv` returned first.",
                    State.WAITING_RECV.value,
                )
            runner.wait(busy, deadline, "recv", timeout)
        groups, total = [], 0
        for w in ready:
            if total == self.batch_size:
                break
            groups.append(w)
            total += w.size
        # The first groups to finish, handed out in env order: with batch_size == num_envs a
        # batch is then exactly what `step()` returns (as in EnvPool's synchronous mode), and a
        # batch's row order never depends on which of its groups happened to reply first.
        groups.sort(key=lambda w: w.start)
        # Whatever cuts the call short from here on (Ctrl+C, a signal handler's SystemExit, an
        # info that cannot be batched) loses the taken groups: the caller never learns their ids,
        # so none of them could be sent again, and the batches would go on without those envs.
        # Until `async_reset`, `recv` and `send` raise NeedsResetError instead.
        try:
            replies = runner.take(groups, "recv", "async_reset()")
        except Exception:
            raise  # an env's error: `take` has refused steps until a reset already
        except BaseException as exc:
            calls.interrupted("recv", exc, poisons=True)
            raise
        try:
            return self._batch(groups, replies)
        except Exception as exc:
            calls.poison(f"`recv` failed ({type(exc).__name__})")
            raise
        except BaseException as exc:
            calls.interrupted("recv", exc, poisons=True)
            raise

    def _batch(
        self, groups: list[WorkerRecord], replies: list[Any]
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], np.ndarray]:
        """The batch of the taken ``groups``, from their replies."""
        b = self.buffers
        offsets = np.cumsum([0] + [w.size for w in groups[:-1]]).tolist()
        infos = self._infos.merge(b, groups, replies, offsets)
        env_ids = np.concatenate([np.arange(w.start, w.stop) for w in groups])
        if b.fixed_observations:
            obs = tree_map(lambda a: a[env_ids], b.observations)
        else:
            space = self.single_observation_space
            out: Any = create_empty_array(space, len(env_ids))
            obs = concatenate(space, [b.observations[i] for i in env_ids], out)
        return obs, b.rewards[env_ids], b.terminations[env_ids], b.truncations[env_ids], infos, env_ids

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray) -> None:
        workers, calls = self.workers, self.calls
        calls.check_waiting(State.WAITING_RECV, "send", "async_reset")
        calls.check_steppable("send", "async_reset()")
        ids = check_env_ids(env_ids, self.num_envs)
        # In flight: stepping, or a reply not yet taken by `recv`. A worker that still owes only
        # the reply to a call that timed out (LATE: a `call_wait(timeout=)` between `recv` and
        # `send`) is not: that reply is dropped on arrival and the step queues behind it, as a
        # `step()` after such a call does.
        busy = [int(i) for i in ids if workers[self._owner[i]].in_flight]
        if busy:
            raise InvalidArgumentError(
                f"`env_ids` must be envs returned by `recv` and not sent since, got envs {busy} "
                "that are still in flight"
            )
        sent = [workers[i] for i in np.unique(self._owner[ids])]
        missing = sorted(set(i for w in sent for i in w.envs) - set(ids.tolist()))
        if missing:
            raise InvalidArgumentError(
                f"`env_ids` must cover whole groups (one group per worker), envs {missing} are missing"
            )
        self.runner.send(sent, Command.STEP, self.actions.payloads(actions, sent, ids), "send", None)
