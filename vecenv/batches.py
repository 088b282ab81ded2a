"""Asynchronous batches: the EnvPool-style ``async_reset``/``recv``/``send`` API over a pool.

``recv`` hands back the first whole groups to finish, ``batch_size`` envs; ``send`` steps exactly
those. Which envs are where is read off the pool's worker status, never kept twice: in flight
(BUSY, or READY with a reply not yet handed out) or returned and waiting for ``send`` (IDLE).
Every env's trajectory is the one ``SyncVectorEnv`` gives for its seed and action sequence,
whatever order the groups finish in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array

from vecenv.checks import check_env_ids, check_options, check_timeout, seed_list
from vecenv.pool import State, WorkerStatus
from vecenv.protocol import Command, ResetArgs
from vecenv.spaces import tree_map

if TYPE_CHECKING:
    from vecenv.coordinator import GroupVectorEnv

__all__ = ["AsyncBatches"]


class _InfoBatch:
    """Gymnasium's info batching (``VectorEnv._add_info``) over the rows of one ``recv`` batch."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


class AsyncBatches:
    """The EnvPool-style API of one vector env (the coordinator delegates to it)."""

    def __init__(self, venv: GroupVectorEnv, batch_size: int) -> None:
        self.venv = venv
        self.batch_size = batch_size
        workers = venv._pool.workers
        self._owner = np.repeat(np.arange(len(workers)), [w.size for w in workers])

    def async_reset(self, seed: Any, options: dict[str, Any] | None) -> None:
        venv = self.venv
        venv._check_open("async_reset")
        if venv._state not in (State.DEFAULT, State.POOL):
            raise AlreadyPendingCallError(
                f"Calling `async_reset` while waiting for a pending call to `{venv._state.value}` to complete.",
                venv._state.value,
            )
        if venv.autoreset_mode is AutoresetMode.DISABLED:
            raise ValueError("async_reset/recv/send need autoreset_mode NEXT_STEP or SAME_STEP, got DISABLED")
        options = check_options(options)
        if options is not None and "reset_mask" in options:
            raise ValueError("`options['reset_mask']` is not supported by `async_reset`: it resets every env")
        seeds = seed_list(seed, venv.num_envs)
        # Every check has passed: only now drop what is in flight.
        venv._remember_seeds(seeds, None)
        workers = venv._pool.workers
        for w in workers:
            if w.in_flight:
                w.abandon()
        venv._pool.send(
            workers, Command.RESET, [ResetArgs(seeds[w.start : w.stop], options, None) for w in workers], "async_reset"
        )
        venv._needs_reset = None
        venv._state = State.POOL

    def recv(self, timeout: float | None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], np.ndarray]:
        timeout = check_timeout(timeout)
        venv, pool = self.venv, self.venv._pool
        venv._check_waiting(State.POOL, "recv", "async_reset")
        venv._check_steppable("recv", "async_reset()")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ready = sorted((w for w in pool.workers if w.status is WorkerStatus.READY), key=lambda w: w.ready_at)
            if sum(w.size for w in ready) >= self.batch_size:
                break
            busy = [w for w in pool.workers if w.status is WorkerStatus.BUSY]
            in_flight = sum(w.size for w in ready) + sum(w.size for w in busy)
            if in_flight < self.batch_size:
                raise NoAsyncCallError(
                    f"Calling `recv` with only {in_flight} envs in flight, fewer than batch_size={self.batch_size}: "
                    "`send` actions for the envs the last `recv` returned first.",
                    State.POOL.value,
                )
            pool.wait(busy, deadline, "recv", timeout)
        groups, total = [], 0
        for w in ready:
            if total == self.batch_size:
                break
            groups.append(w)
            total += w.size
        replies = [w.take() for w in groups]
        for w, (ok, result) in zip(groups, replies):
            if not ok:
                venv._needs_reset = "an env raised during `recv`"
                pool.raise_remote(w, result, "recv")
        b = venv._buffers
        infos: dict[str, Any] = {}
        batch: Any = _InfoBatch(self.batch_size)  # duck-typed for VectorEnv._add_info
        offset = 0
        for w, (_, (entries, payload)) in zip(groups, replies):
            b.receive(w.start, w.stop, payload)
            for j, info in entries:
                infos = batch._add_info(infos, info, offset + j)
            offset += w.size
        env_ids = np.concatenate([np.arange(w.start, w.stop) for w in groups])
        if b.fixed_observations:
            obs = tree_map(lambda a: a[env_ids], b.observations)
        else:
            space = venv.single_observation_space
            out: Any = create_empty_array(space, len(env_ids))
            obs = concatenate(space, [b.observations[i] for i in env_ids], out)
        return obs, b.rewards[env_ids], b.terminations[env_ids], b.truncations[env_ids], infos, env_ids

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray) -> None:
        venv, pool = self.venv, self.venv._pool
        venv._check_waiting(State.POOL, "send", "async_reset")
        venv._check_steppable("send", "async_reset()")
        ids = check_env_ids(env_ids, venv.num_envs)
        busy = [int(i) for i in ids if pool.workers[self._owner[i]].status is not WorkerStatus.IDLE]
        if busy:
            raise ValueError(
                f"`env_ids` must be envs returned by `recv` and not sent since, got envs {busy} "
                "that are still in flight"
            )
        workers = [pool.workers[i] for i in np.unique(self._owner[ids])]
        missing = sorted(set(i for w in workers for i in w.envs) - set(ids.tolist()))
        if missing:
            raise ValueError(f"`env_ids` must cover whole groups (one group per worker), envs {missing} are missing")
        pool.send(workers, Command.STEP, venv._action_payloads(actions, workers, ids), "send")
