"""Worker groups as Ray actors: :class:`RayVectorEnv`, for envs spread over more than one machine.

Each group is one Ray actor hosting the same :class:`~vecenv.worker.WorkerCore` as a worker
process (the same ``group.py`` code, autoreset included); the :class:`~vecenv.pool.WorkerPool`
and the VectorEnv / EnvPool API layers are the process backend's, unchanged. Only the transport
differs:

* **Commands** go out as the same bytes as on a pipe (:func:`~vecenv.protocol.encode_command`),
  as the argument of one actor method call. The actor unpickles the payload inside the worker
  core's guard, so an argument it cannot rebuild is that call's error, never a dead actor.
* **Replies** come back as the method's return value through Ray's object store: observation
  rows, rewards and flags as numpy arrays (zero-copy on the same node) plus non-empty infos.
  Nothing is shared in place (``Transport.shares_memory`` is false): every call's rows travel.
* **Waiting** is ``ray.wait`` on the outstanding ``ObjectRef`` of every worker waited on: it hands
  back the first groups to finish (``recv`` of asynchronous batches) and honours deadlines.
* **Death**: an actor whose process or node is gone fails its pending calls with a
  ``RayActorError`` (or its results are lost with their node); the pool's death path then raises
  :class:`~vecenv.errors.WorkerDiedError` naming the group and its node. Ray reports a killed
  process within milliseconds; a lost node, within Ray's health-check period.

Ray is imported by this module only; ``import vecenv`` never imports it.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import ray
from gymnasium.vector import AutoresetMode
from ray.exceptions import ObjectLostError, OwnerDiedError, RayActorError

from vecenv.buffers import Buffers
from vecenv.checks import (
    check_autoreset_mode,
    check_batch_size,
    check_env_fns,
    check_group_fns,
    check_num_workers,
    check_observation_mode,
    check_restarts,
    check_threads,
    check_timeout,
)
from vecenv.coordinator import GroupVectorEnv, split_groups
from vecenv.errors import PackedException, describe
from vecenv.pool import Death, Reply, Transport, WorkerGone
from vecenv.protocol import Attach, Command, decode_command, encode_command
from vecenv.worker import WorkerCore, WorkerOptions

__all__ = ["RayVectorEnv", "RayTransport", "DEFAULT_ACTOR_OPTIONS"]

#: Ray options of every group actor unless ``actor_options`` says otherwise. No restarts and no
#: task retries: a restarted actor would have lost its envs' state, so a death must be reported.
DEFAULT_ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0, "max_task_retries": 0}

# Errors of ray.get that mean the worker's result can never come: its actor or its node is gone.
_DEATH_ERRORS = (RayActorError, ObjectLostError, OwnerDiedError)


class _GroupActor:
    """The actor side: one :class:`~vecenv.worker.WorkerCore`, driven by three methods.

    Every method returns normally with a value; env errors come back as ``PackedException``
    results, so a Ray task error means something outside the env code (see ``RayTransport.poll``).
    """

    def __init__(self, index: int, options: WorkerOptions) -> None:
        if options.threads is not None:  # before any env module is imported
            from vecenv.threads import limit_threads

            limit_threads(options.threads)
        self.core = WorkerCore(index, options)
        self.buffers: Buffers | None = None
        self.attach_error: PackedException | None = None  # answered to every command after it

    def build(self, group_fn_bytes: bytes) -> tuple[bool, Any, tuple[str, str, int]]:
        """Build the group; returns ``(ok, Hello or PackedException, (node id, node ip, pid))``."""
        context = ray.get_runtime_context()
        where = (context.get_node_id(), ray.util.get_node_ip_address(), os.getpid())
        try:
            return True, self.core.build(group_fn_bytes), where
        except BaseException as exc:
            return False, PackedException(exc, None), where

    def attach(self, attach: Attach) -> None:
        """Give the group its rows (plain arrays: nothing is shared with the parent).

        Nobody waits for this call (the next command is queued behind it), so a failure is
        kept and becomes the answer to every command, rather than lost.
        """
        try:
            self.buffers = Buffers.attach(attach.buffers, attach.start, attach.start + attach.num_envs)
            self.core.attach(attach, self.buffers)
        except BaseException as exc:
            self.attach_error = PackedException(exc, None)

    def handle(self, message: bytes) -> tuple[bool, Any]:
        """Run one encoded command; ``(ok, result or PackedException)``."""
        if self.attach_error is not None:
            return False, self.attach_error
        command, _, load = decode_command(message)
        return self.core.handle(command, load)


_ACTOR_CLASS = ray.remote(_GroupActor)


class _RayUse:
    """Reference count of the Ray connection that vector envs opened themselves.

    A vector env that finds Ray initialised by someone else uses it and never shuts it down. One
    that had to start a local Ray (or connect to ``address``) holds a reference; the connection
    ends (``ray.shutdown()``: a local Ray stops, a remote cluster is only disconnected from)
    when the last vector env holding one closes.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0

    def acquire(self, address: str | None) -> bool:
        """Make sure Ray is connected; return whether the caller holds a reference."""
        with self.lock:
            if ray.is_initialized():
                if self.users:
                    self.users += 1
                    return True
                return False
            if address is None:
                # "local": a new instance, never a cluster that ray.init() would otherwise find
                # on this machine (pass address="auto" for that one).
                ray.init(address="local", include_dashboard=False)
            else:
                ray.init(address=address)
            self.users = 1
            return True

    def release(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0 and ray.is_initialized():
                ray.shutdown()


_RAY_USE = _RayUse()


def _short_cause(error: BaseException) -> str:
    """The part of a Ray death message that says why, in one line."""
    text = str(error)
    if "ray.kill" in text:
        return "was killed with ray.kill"
    match = re.search(r"Worker exit type: (\S+)(?: Worker exit detail: ([^.]*))?", text)
    if match:
        detail = f": {match.group(2).strip()}" if match.group(2) else ""
        return f"died (its actor process ended, {match.group(1)}{detail})"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return f"died ({type(error).__name__}: {first})"


class RayTransport(Transport):
    """One Ray actor per group; commands are actor calls, replies their results."""

    shares_memory = False

    def __init__(
        self, actor_options: Mapping[str, Any], observation_mode: Any, holds_ray: bool, threads: int | None = None
    ) -> None:
        self.actor_options = {**DEFAULT_ACTOR_OPTIONS, **actor_options}
        self.options = WorkerOptions(observation_mode, None, threads)
        self.actors: list[Any] = []
        self._group_fns: list[bytes] = []  # cloudpickled, to build a replacement (relaunch)
        # Per worker, its outstanding calls in the order sent: (ObjectRef, call id, command).
        self.outstanding: list[deque[tuple[ray.ObjectRef, int, Command | None]]] = []
        self.locations: list[tuple[str, str, int] | None] = []  # (node id, node ip, pid)
        self._causes: dict[int, str] = {}
        self._holds_ray = holds_ray
        self._stopped = False

    # -- start-up ----------------------------------------------------------------------------

    def launch(self, group_fns: Sequence[Callable[[], Any]]) -> None:
        for group_fn in group_fns:
            self._group_fns.append(cloudpickle.dumps(group_fn))
            self.actors.append(None)
            self.locations.append(None)
            self.outstanding.append(deque())
            self._start(len(self.actors) - 1)

    def _start(self, worker: int) -> None:
        """A new actor for ``worker``, asked to build its group (the Hello is call id 0)."""
        actor = _ACTOR_CLASS.options(**self.actor_options).remote(worker, self.options)
        self.actors[worker] = actor
        self.locations[worker] = None
        build: Any = actor.build  # an actor method handle (Ray adds .remote)
        self.outstanding[worker] = deque([(build.remote(self._group_fns[worker]), 0, None)])

    def relaunch(self, worker: int) -> None:
        """Replace a dead worker's actor by a new one (Ray may place it on another node)."""
        if not ray.is_initialized():
            raise NotImplementedError("Ray was shut down in this process: no actor can be started")
        try:
            ray.kill(self.actors[worker], no_restart=True)
        except Exception:
            pass  # already gone
        self._causes.pop(worker, None)
        self._start(worker)

    def attach(self, worker: int, attach: Attach, buffers: Buffers) -> None:
        # Actor calls from one caller run in the order sent, so the next command finds the group
        # attached; an actor that died in between is reported by that command's result.
        if not ray.is_initialized():
            raise WorkerGone
        self.actors[worker].attach.remote(attach)

    # -- calls -------------------------------------------------------------------------------

    def encode(self, command: Command, call_id: int, payload: Any) -> tuple[int, Command, bytes]:
        return call_id, command, encode_command(command, call_id, payload)

    def send(self, worker: int, message: tuple[int, Command, bytes]) -> None:
        if not ray.is_initialized():
            self._causes.setdefault(worker, "is unreachable: Ray was shut down in this process")
            raise WorkerGone
        call_id, command, data = message
        self.outstanding[worker].append((self.actors[worker].handle.remote(data), call_id, command))

    def poll(self, workers: Sequence[int], timeout: float | None) -> list[Reply | Death]:
        if not ray.is_initialized():  # e.g. Ray's own exit handler ran before our close
            gone: list[Reply | Death] = []
            for w in workers:
                if self.outstanding[w]:  # reported once: a second poll finds nothing owed
                    self.outstanding[w].clear()
                    self._causes.setdefault(w, "is unreachable: Ray was shut down in this process")
                    gone.append(Death(w))
            return gone
        refs = [ref for w in workers for ref, _, _ in self.outstanding[w]]
        if not refs:  # only after a death was reported and not acted on (the pool's drain)
            return []
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
        if not ready:
            return []
        if rest:  # everything else that is done too, so one gather needs few polls
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        done = set(ready)
        taken: list[tuple[int, ray.ObjectRef, int, Command | None]] = []
        for w in workers:
            queue = self.outstanding[w]
            while queue and queue[0][0] in done:
                taken.append((w, *queue.popleft()))
        try:  # one round trip for every result; any failure is sorted out ref by ref
            values: list[Any] | None = ray.get([ref for _, ref, _, _ in taken])
        except Exception:
            values = None
        events: list[Reply | Death] = []
        dead: set[int] = set()
        for k, (w, ref, call_id, command) in enumerate(taken):
            if w in dead:
                continue
            if values is None:
                event = self._result(w, ref, call_id, command)
            else:
                event = self._reply(w, call_id, command, values[k])
            events.append(event)
            if isinstance(event, Death):
                dead.add(w)
                self.outstanding[w].clear()
        return events

    def _result(self, worker: int, ref: ray.ObjectRef, call_id: int, command: Command | None) -> Reply | Death:
        try:
            value = ray.get(ref)
        except _DEATH_ERRORS as exc:
            self._causes.setdefault(worker, _short_cause(exc))
            return Death(worker)
        except Exception as exc:
            # Not env code (that comes back as a value): the result could not be serialised
            # in the actor or rebuilt here. It is this call's error; the actor lives on.
            cause = getattr(exc, "cause", None)
            error = cause if isinstance(cause, BaseException) else exc
            return Reply(worker, call_id, False, PackedException(error, None))
        return self._reply(worker, call_id, command, value)

    def _reply(self, worker: int, call_id: int, command: Command | None, value: Any) -> Reply:
        if call_id == 0:  # the handshake also says where the actor runs
            ok, hello, location = value
            self.locations[worker] = location
            return Reply(worker, 0, ok, hello)
        ok, result = value
        if ok and result is not None:
            result = _owned_result(command, result)
        return Reply(worker, call_id, ok, result)

    # -- failures and shutdown ---------------------------------------------------------------

    def cause_of_death(self, worker: int) -> tuple[str, int | None]:
        return self._causes.get(worker, "died"), None

    def where(self, worker: int) -> str:
        location = self.locations[worker] if worker < len(self.locations) else None
        if location is None:
            return ""
        node_id, ip, pid = location
        return f" on node {ip} ({node_id[:8]}), pid {pid}"

    def kill(self) -> None:
        if not ray.is_initialized():
            return
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass  # already gone

    def stop(self, deadline: float, closing: Sequence[int] = ()) -> None:
        """End every actor and release Ray if ours.

        An actor does not exit by itself after ``CLOSE``, so all are killed at once: those in
        ``closing`` have answered it (their envs are closed) by the time the pool calls this.
        Waits until Ray reports each actor dead, at most until ``deadline`` plus one second.
        """
        if self._stopped:
            return
        self._stopped = True
        try:
            if ray.is_initialized() and self.actors:
                self.kill()
                probes = []
                for actor in self.actors:
                    try:
                        probes.append(actor.__ray_ready__.remote())
                    except Exception:
                        pass
                remaining = max(0.0, deadline - time.monotonic()) + 1.0
                if probes:
                    ray.wait(probes, num_returns=len(probes), timeout=remaining)
        finally:
            self.actors = []
            for queue in self.outstanding:
                queue.clear()
            if self._holds_ray:
                self._holds_ray = False
                _RAY_USE.release()

    @property
    def pids(self) -> list[int | None]:
        """Each actor's process id (``None`` before its group is built)."""
        return [loc[2] if loc else None for loc in self.locations]

    @property
    def node_ids(self) -> list[str | None]:
        """The Ray node id each group runs on (``None`` before its group is built)."""
        return [loc[0] if loc else None for loc in self.locations]


def _owned(value: Any) -> Any:
    """``value`` with every read-only numpy array in it (Ray hands arrays out as read-only
    views of the received bytes) replaced by a writable copy, through dicts, lists, tuples and
    object arrays, as a pipe's unpickling would give them."""
    kind = type(value)
    if kind is np.ndarray:
        if value.dtype == object:
            out = np.empty_like(value)
            for index in np.ndindex(value.shape):
                out[index] = _owned(value[index])
            return out
        return value if value.flags.writeable else value.copy()
    if kind is dict:
        return {k: _owned(v) for k, v in value.items()}
    if kind is list:
        return [_owned(v) for v in value]
    if kind is tuple:
        return tuple(_owned(v) for v in value)
    return value


def _owned_result(command: Command | None, result: Any) -> Any:
    """What the user or the pool may write to in a reply, made writable: infos, object
    observations (a list, kept by reference in the parent), flags and call results.
    Fixed-shape observation rows are left alone: the parent copies them into its buffers."""
    if command is Command.STEP or command is Command.RESET:
        entries, payload = result
        if payload is not None:
            obs, flags = payload
            # Flags are a few bytes a row, and the pool may rewrite them (a restarted group's
            # step is reported truncated): copied. Fixed-shape observation rows are not.
            payload = (_owned(obs) if type(obs) is list else obs, _owned(flags))
        return _owned(entries), payload
    return _owned(result)


def _check_actor_options(actor_options: Any) -> dict[str, Any]:
    if actor_options is None:
        return {}
    if not isinstance(actor_options, Mapping):
        raise TypeError(f"`actor_options` must be a dict of Ray actor options or None, got {describe(actor_options)}")
    bad = sorted(k for k in actor_options if not isinstance(k, str))
    if bad:
        raise TypeError(f"`actor_options` keys must be str (Ray option names), got {describe(bad)}")
    if "name" in actor_options:
        raise ValueError("`actor_options` cannot hold 'name': every group is its own actor, and names are unique")
    resources = actor_options.get("resources")
    if resources is not None and not isinstance(resources, Mapping):
        raise TypeError(
            f"`actor_options['resources']` must be a dict of resource name to amount, got {describe(resources)}"
        )
    amounts = {key: actor_options.get(key) for key in _RESOURCE_OPTIONS} | {
        f"resources[{name!r}]": amount for name, amount in (resources or {}).items()
    }
    for key, amount in amounts.items():
        if amount is not None and (isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0):
            raise TypeError(f"`actor_options` {key} must be a non-negative number, got {describe(amount)}")
    return dict(actor_options)


_RESOURCE_OPTIONS = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


def _resources_per_actor(options: Mapping[str, Any]) -> dict[str, float]:
    """The Ray resources one actor asks for (CPU, GPU, memory, custom), from its options."""
    merged = {**DEFAULT_ACTOR_OPTIONS, **options}
    need = {resource: merged[key] for key, resource in _RESOURCE_OPTIONS.items() if merged.get(key) is not None}
    need.update(merged.get("resources") or {})
    return {resource: float(amount) for resource, amount in need.items()}


def _check_address(address: Any) -> str | None:
    if address is not None and (not isinstance(address, str) or not address):
        raise TypeError(
            f"`address` must be a Ray address (str, e.g. '10.0.0.1:6379' or 'auto') or None, got {describe(address)}"
        )
    return address


class RayVectorEnv(GroupVectorEnv):
    """A Gymnasium vector env whose env groups are Ray actors, on one machine or a cluster.

    Same semantics, errors and API as :class:`~vecenv.SubprocVectorEnv` (including
    ``async_reset``/``recv``/``send``); only the transport differs. Every call costs one Ray
    actor call per group (about a millisecond), so it pays for slow envs, or for more envs than
    one machine's cores can step.

    Args:
        env_fns: callables that each return a ``gymnasium.Env``, called in the actors, split into
            ``num_workers`` contiguous groups whose sizes differ by at most one.
        num_workers: actors to start; default ``min(len(env_fns), CPUs in the cluster // CPUs per
            actor)``.
        address: with Ray already initialised in this process it is used as is (and never shut
            down); else ``None`` starts a new local Ray (with every CPU of this machine) and any
            other value is passed to ``ray.init(address=...)``: ``"auto"`` (the cluster that
            ``ray start`` runs on this machine), ``"10.0.0.1:6379"``, ``"ray://..."``. A Ray
            that this class started or connected to is shut down (or disconnected) when the
            last vector env using it closes.
        actor_options: Ray actor options for every group (``num_cpus``, ``resources``,
            ``scheduling_strategy="SPREAD"``, ``runtime_env``, ...); default ``num_cpus=1``, no
            restarts. The actors must all fit the cluster at once (checked at start-up).
        autoreset_mode, copy, observation_mode, batch_size, start_timeout: as
            :class:`~vecenv.SubprocVectorEnv`.
        on_worker_death, max_restarts, restart_window: as :class:`~vecenv.SubprocVectorEnv`;
            with ``"restart"`` a dead actor is replaced by a new one (placed by Ray, possibly on
            another node) that rebuilds the same envs on the same rows.
        threads_per_worker: BLAS/OpenMP threads in each actor, as for worker processes (Ray
            also sets ``OMP_NUM_THREADS`` to the actor's ``num_cpus``; a value already in the
            environment is left alone).

    Raises:
        ValueError, TypeError: bad arguments, named with what was expected and what was given.
        SpaceMismatchError: two envs report different spaces.
        WorkerDiedError: an actor died while building its envs.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None = None,
        *,
        address: str | None = None,
        actor_options: Mapping[str, Any] | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        observation_mode: str | tuple[gym.Space, gym.Space] = "same",
        batch_size: int | None = None,
        start_timeout: float | None = None,
        on_worker_death: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
        threads_per_worker: int | None = 1,
    ) -> None:
        fns = check_env_fns(env_fns)
        if num_workers == "auto":
            raise ValueError(
                "`num_workers` of RayVectorEnv must be None (one actor per CPU of the cluster) or an int, "
                "got 'auto' (which chooses between this process and local workers: SubprocVectorEnv only)"
            )
        if num_workers is not None:
            check_num_workers(num_workers, len(fns), in_process=False)

        def groups(k: int) -> Sequence[Callable[[], Any]]:
            chosen = split_groups(fns, k)
            check_batch_size(batch_size, [len(g.env_fns) for g in chosen])
            return chosen

        self._start(
            groups,
            len(fns),
            num_workers,
            address,
            actor_options,
            autoreset_mode,
            copy,
            observation_mode,
            batch_size,
            start_timeout,
            check_restarts(on_worker_death, max_restarts, restart_window),
            check_threads(threads_per_worker),
        )

    @classmethod
    def from_groups(
        cls,
        group_fns: Sequence[Callable[[], Sequence[gym.Env]]],
        *,
        address: str | None = None,
        actor_options: Mapping[str, Any] | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        observation_mode: str | tuple[gym.Space, gym.Space] = "same",
        batch_size: int | None = None,
        start_timeout: float | None = None,
        on_worker_death: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
        threads_per_worker: int | None = 1,
    ) -> RayVectorEnv:
        """One actor per callable; each returns the list of envs it hosts (or a native
        ``gymnasium.vector.VectorEnv``), as :meth:`SubprocVectorEnv.from_groups`."""
        fns = check_group_fns(group_fns)
        self = cls.__new__(cls)
        self._start(
            lambda k: fns,
            len(fns),
            len(fns),
            address,
            actor_options,
            autoreset_mode,
            copy,
            observation_mode,
            batch_size,
            start_timeout,
            check_restarts(on_worker_death, max_restarts, restart_window),
            check_threads(threads_per_worker),
        )
        return self

    def _start(
        self,
        make_groups: Callable[[int], Sequence[Callable[[], Any]]],
        max_workers: int,
        num_workers: int | None,
        address: Any,
        actor_options: Any,
        autoreset_mode: Any,
        copy: bool,
        observation_mode: Any,
        batch_size: int | None,
        start_timeout: Any,
        restarts: tuple[int, float] | None,
        threads: int | None,
    ) -> None:
        # Every argument is checked before Ray is touched.
        mode = check_autoreset_mode(autoreset_mode)
        obs_mode = check_observation_mode(observation_mode)
        start_timeout = check_timeout(start_timeout, "start_timeout")
        options = _check_actor_options(actor_options)
        address = _check_address(address)
        if num_workers is not None:
            make_groups(num_workers)  # batch_size against the group sizes
        self.closed = True  # until the pool exists: close() and __del__ have nothing to do
        holds_ray = _RAY_USE.acquire(address)
        try:
            need = _resources_per_actor(options)
            total = ray.cluster_resources()
            if num_workers is None:  # as many as the cluster holds at once, at most one per group
                fits = [int(total.get(r, 0.0) // amount) for r, amount in need.items() if amount > 0]
                num_workers = max(1, min([max_workers, *fits]))
            for resource, amount in need.items():
                if amount * num_workers > total.get(resource, 0.0):
                    raise ValueError(
                        f"{num_workers} actors of {amount:g} {resource} each need {amount * num_workers:g} {resource}, "
                        f"but the Ray cluster has {total.get(resource, 0.0):g}: they could not all start. Use "
                        "fewer workers, ask less per actor (actor_options), or add nodes"
                    )
            groups = make_groups(num_workers)
            transport = RayTransport(
                options, obs_mode[1] if isinstance(obs_mode, tuple) else obs_mode, holds_ray, threads
            )
        except BaseException:
            if holds_ray:
                _RAY_USE.release()
            raise
        self._transport = transport
        # From here on the transport releases Ray (in stop(), which _open's failure path calls).
        self._open(
            transport,
            groups,
            autoreset_mode=mode,
            copy=copy,
            observation_mode=obs_mode,
            shared_memory=False,
            batch_size=batch_size,
            start_timeout=start_timeout,
            restarts=restarts,
        )

    @property
    def node_ids(self) -> list[str | None]:
        """The Ray node id of each group's actor, in worker order."""
        return self._transport.node_ids

    @property
    def actor_pids(self) -> list[int | None]:
        """The process id of each group's actor (on its node), in worker order."""
        return self._transport.pids
