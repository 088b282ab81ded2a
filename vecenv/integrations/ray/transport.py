"""The Ray transport: each worker group is a Ray actor, on this machine or a cluster.

Each group is one Ray actor hosting the same :class:`~vecenv.worker.core.WorkerCore` as a worker
process (the same ``worker/group.py`` code, autoreset included); the
:class:`~vecenv.parent.pool.WorkerPool` and the VectorEnv / EnvPool API layers are the process
backend's, unchanged (:class:`~vecenv.RayVectorEnv` is :mod:`vecenv.integrations.ray.vector_env`). Only the
transport differs:

* **Commands** go out as the same bytes as on a pipe (:func:`~vecenv.wire.protocol.encode_command`),
  as the argument of one actor method call. The actor unpickles the payload inside the worker
  core's guard, so an argument it cannot rebuild is that call's error, never a dead actor. Large
  new weights (a rollout's, from :data:`~vecenv.wire.protocol.OBJECT_STORE_WEIGHTS_BYTES`) are put into
  Ray's object store once per version and passed beside each command as that object, so each
  node fetches them once instead of every actor's call carrying them. The buffer spec of the
  attach calls (with the observation space in it) travels the same way, once per vector env.
* **Replies** come back as the method's return value through Ray's object store: observation
  rows, rewards and flags as numpy arrays (zero-copy on the same node) plus non-empty infos.
  Nothing is shared in place (``Transport.shares_memory`` is false): every call's rows travel.
* **Waiting** is ``ray.wait`` on the outstanding ``ObjectRef`` of every worker waited on: it hands
  back the first groups to finish (``recv`` of asynchronous batches) and honours deadlines.
* **Death**: an actor whose process or node is gone fails its pending calls with a
  ``RayActorError`` (or its results are lost with their node); the pool's death path then raises
  :class:`~vecenv.errors.WorkerDiedError` naming the group and its node. Ray reports a killed
  process within milliseconds; a lost node, within Ray's health-check period.

Ray is imported by this module (and :mod:`vecenv.integrations.ray.vector_env`) only; ``import vecenv`` never
imports it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import ray
from ray.exceptions import ObjectLostError, OwnerDiedError, RayActorError, RaySystemError

from vecenv.errors import ArgumentTypeError, InvalidArgumentError, PackedException, describe
from vecenv.transports.base import CannotRestart, Death, DeathCause, Event, Reply, Transport, WorkerGone
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import (
    OBJECT_STORE_WEIGHTS_BYTES,
    Attach,
    Command,
    Flags,
    Outcome,
    Pickled,
    RolloutArgs,
    RolloutReply,
    Rows,
    StepReply,
    decode_command,
    encode_command,
    unpickling_failure,
)
from vecenv.worker.builders import pickle_group
from vecenv.worker.core import WorkerCore, WorkerOptions, fallible_parts, unpicklable_failure

__all__ = ["RayTransport", "RAY_USE", "DEFAULT_ACTOR_OPTIONS", "check_ray_takes"]

#: Ray options of every group actor unless ``actor_options`` says otherwise. No restarts and no
#: task retries: a restarted actor would have lost its envs' state, so a death must be reported.
DEFAULT_ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0, "max_task_retries": 0}

#: The label Ray puts on every node, its node id: a replacement actor is steered away from the
#: node its predecessor died on by it (see ``RayTransport.relaunch``).
NODE_ID_LABEL = "ray.io/node-id"
#: The scheduling strategies under which Ray picks the node itself (no placement group, no node
#: affinity): only these give way to a replacement's preference for another node.
_RAY_PICKS_THE_NODE = (None, "DEFAULT", "SPREAD")

# Errors of ray.get that mean the worker's result can never come: its actor or its node is gone.
_DEATH_ERRORS = (RayActorError, ObjectLostError, OwnerDiedError)


class ActorLocation(NamedTuple):
    """Where a group actor runs: its Ray node, that node's address and the actor's process."""

    node_id: str
    ip: str
    pid: int


class Built(NamedTuple):
    """A group actor's answer to the handshake: the group's ``Hello`` (or what building it
    raised), and where it runs."""

    outcome: Outcome
    location: ActorLocation


class _GroupActor:
    """The actor side: one :class:`~vecenv.worker.core.WorkerCore`, driven by three methods.

    Every method returns normally with a value; env errors come back as ``PackedException``
    results, so a Ray task error means something outside the env code (see ``RayTransport.poll``).
    """

    def __init__(self, index: int, options: WorkerOptions) -> None:
        if options.threads is not None:  # before any env module is imported
            from vecenv.worker.threads import limit_threads

            limit_threads(options.threads)
        self.core = WorkerCore(index, options)
        self.buffers: Buffers | None = None
        self.attach_error: PackedException | None = None  # answered to every command after it

    def build(self, group_fn_bytes: bytes) -> Built:
        """Build the group; returns its ``Hello`` (or what building raised) and where it runs."""
        context = ray.get_runtime_context()
        where = ActorLocation(context.get_node_id(), ray.util.get_node_ip_address(), os.getpid())
        try:
            return Built(Outcome(True, self.core.build(group_fn_bytes)), where)
        except BaseException as exc:
            return Built(Outcome(False, PackedException(exc, None)), where)

    def attach(self, attach: Attach, spec: Any) -> None:
        """Give the group its rows (plain arrays: nothing is shared with the parent).

        ``spec``: the buffer spec, left out of ``attach`` by the parent and passed beside it
        as one object of Ray's store for every actor (Ray resolved it here), so that the
        parent pickles it once per vector env.

        Nobody waits for this call (the next command is queued behind it), so a failure is
        kept and becomes the answer to every command, rather than lost.
        """
        try:
            attach = dataclasses.replace(attach, buffers=spec)
            self.buffers = Buffers.attach(attach.buffers, attach.start, attach.start + attach.num_envs)
            self.core.attach(attach, self.buffers)
        except BaseException as exc:
            self.attach_error = PackedException(exc, None)

    def handle(self, message: bytes, weights: bytes | None = None) -> Outcome:
        """Run one encoded command; its result or PackedException. ``weights``: a
        rollout's new weights, which travelled beside it (Ray resolved the object)."""
        if self.attach_error is not None:
            return Outcome(False, self.attach_error)
        command, _, load = decode_command(message)
        if weights is not None:
            load = _with_weights(load, weights)
        return _serialisable(self.core.handle(command, load))


def _out_of_band(_buffer: Any) -> None:
    """Leaves an array's buffer out of the check's pickle, as Ray does (nothing is copied)."""


def _ray_dumps(value: Any) -> bytes:
    """Pickle ``value`` as Ray pickles an actor's result (its cloudpickle, with Ray's reducers)."""
    return ray.cloudpickle.dumps(value, protocol=5, buffer_callback=_out_of_band)


def _serialisable(outcome: Outcome) -> Outcome:
    """``outcome``, or, where Ray could not serialise a part of its result (an info value that
    holds a lock, say), that error naming the env whose part it is, as a worker process answers
    a reply it cannot pickle (:func:`vecenv.worker.loop._reply`): Ray itself would fail the whole
    call, with no env to name. Only the parts that can fail are pickled (infos, object rows,
    a call's items: see :func:`~vecenv.worker.core.fallible_parts`), their arrays out of band;
    a step with no infos checks nothing."""
    if not outcome.ok:
        return outcome
    parts = fallible_parts(outcome.result)
    if not parts:
        return outcome
    try:
        _ray_dumps([part for _, part in parts])
    except Exception as exc:
        return Outcome(False, unpicklable_failure(exc, outcome.result, _ray_dumps))
    return outcome


def _with_weights(load: Callable[[], Any], weights: bytes) -> Callable[[], Any]:
    """``load``, whose ``RolloutArgs`` then gets back the weights sent beside it."""
    return lambda: load().with_weights(weights)


@dataclasses.dataclass(frozen=True)
class RayCommand:
    """One encoded command for an actor, and the object of the new weights sent beside it."""

    call_id: int
    command: Command
    data: bytes
    weights: ray.ObjectRef | None = None


_ACTOR_CLASS = ray.remote(_GroupActor)


def check_ray_takes(actor_options: Mapping[str, Any]) -> None:
    """Raise ``InvalidArgumentError`` (or ``ArgumentTypeError``) naming ``actor_options`` when
    Ray refuses them (over :data:`DEFAULT_ACTOR_OPTIONS`) for an actor: an unknown option, a
    ``lifetime`` or ``runtime_env`` of the wrong kind, ``get_if_exists`` without a name.

    Ray's own check of ``ActorClass.options`` starts nothing and needs no running Ray, so a bad
    option is refused before Ray is started or joined, instead of as Ray's plain ``ValueError``
    once it has started (seconds later) and the first actor is asked for."""
    try:
        _ACTOR_CLASS.options(**{**DEFAULT_ACTOR_OPTIONS, **actor_options})
    except (TypeError, ValueError, ArithmeticError) as exc:  # ArithmeticError: an amount that overflows
        raise _refused(actor_options, exc) from exc


def _refused(actor_options: Mapping[str, Any], error: Exception) -> InvalidArgumentError | ArgumentTypeError:
    """The vecenv error for ``actor_options`` that Ray refused with ``error``, keeping its
    builtin base (a ``TypeError`` stays one)."""
    kind = ArgumentTypeError if isinstance(error, TypeError) else InvalidArgumentError
    return kind(
        f"`actor_options` must be options that Ray takes for an actor, got {describe(dict(actor_options), 200)}: "
        f"Ray refused them ({type(error).__name__}: {error})"
    )


#: Which Ray connection this process has (its job and node ids): ``ray.shutdown()`` then
#: ``ray.init()`` give another, in which the actors and handles of the first are gone.
RaySession = tuple[str, str]


def ray_session() -> RaySession | None:
    """The Ray connection this process has now (``None``: none)."""
    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return context.get_job_id(), context.get_node_id()


class _RayUse:
    """Reference count of the Ray connection that vector envs opened themselves.

    A vector env that finds Ray initialised by someone else uses it and never shuts it down. One
    that had to start a local Ray (or connect to ``address``) holds a reference; the connection
    ends (``ray.shutdown()``: a local Ray stops, a remote cluster is only disconnected from)
    when the last vector env holding one closes. The count belongs to one session: after the
    user's own ``ray.shutdown()`` (and maybe ``ray.init()``), a vector env of the old session
    that closes never ends the new one.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.session: RaySession | None = None

    def acquire(self, address: str | None) -> RaySession | None:
        """Make sure Ray is connected; return the session the caller holds a reference to
        (``None``: it holds none)."""
        with self.lock:
            current = ray_session()
            if current is not None:
                if self.users and current == self.session:
                    self.users += 1
                    return current
                return None
            if address is None:
                # "local": a new instance, never a cluster that ray.init() would otherwise find
                # on this machine (pass address="auto" for that one).
                ray.init(address="local", include_dashboard=False)
            else:
                ray.init(address=address)
            self.users = 1
            self.session = ray_session()
            return self.session

    def release(self, session: RaySession) -> None:
        with self.lock:
            if session != self.session:  # a session that already ended: nothing of it to end
                return
            self.users -= 1
            if self.users == 0:
                self.session = None
                if ray_session() == session:
                    ray.shutdown()


_SHUT_DOWN = "is unreachable: Ray was shut down in this process (its actors ended with that session)"

#: This process's use of Ray by vector envs (see :class:`_RayUse`).
RAY_USE = _RayUse()


#: Ray's error for a call whose actor stopped answering (its connection closed or refused: the
#: process or its node went away); Ray versions before it raise ``RayActorError`` itself.
_UNAVAILABLE: type[BaseException] | tuple[()] = getattr(ray.exceptions, "ActorUnavailableError", ())


def _short_cause(error: BaseException) -> str:
    """The part of a Ray death message that says why, in one line."""
    text = str(error)
    if "ray.kill" in text:
        return "was killed with ray.kill"
    if isinstance(error, _UNAVAILABLE):
        # Ray words it "temporarily unavailable ... may or may not have been executed": true of
        # an actor Ray could restart, never of a group's (no Ray restarts; see DEFAULT_ACTOR_OPTIONS).
        rpc = re.search(r"RPC error: (.*?)(?: rpc_code|$)", text, re.DOTALL)
        detail = f": {' '.join(rpc.group(1).split())}" if rpc else ""
        return f"stopped answering: its process or its node went away (Ray lost its connection{detail})"
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
        self,
        actor_options: Mapping[str, Any],
        observation_mode: Any,
        lease: RaySession | None,
        threads: int | None = None,
    ) -> None:
        self.given_options = dict(actor_options)  # as the user gave them, for error messages
        self.actor_options = {**DEFAULT_ACTOR_OPTIONS, **actor_options}
        self.options = WorkerOptions(observation_mode, None, threads)
        self.actors: list[Any] = []
        self._group_fns: list[bytes] = []  # cloudpickled, to build a replacement (relaunch)
        # Per worker, its outstanding calls in the order sent: (ObjectRef, call id, command).
        self.outstanding: list[deque[tuple[ray.ObjectRef, int, Command | None]]] = []
        self.locations: list[ActorLocation | None] = []
        # Per worker, the node its last built actor ran on, kept while replacements die before
        # they build (their own location is never known).
        self._last_nodes: dict[int, str] = {}
        self._causes: dict[int, str] = {}
        self._lease = lease  # the session whose reference this transport holds (None: none)
        self.session = ray_session()  # the one its actors live in
        self._stopped = False
        # The last large weights put into the object store, and their object (see encode).
        self._weights: tuple[Pickled, ray.ObjectRef] | None = None
        # The buffer spec put into the object store, and its object (see attach).
        self._spec: tuple[Any, ray.ObjectRef] | None = None

    # -- start-up ----------------------------------------------------------------------------

    def launch(self, group_fns: Sequence[Callable[[], Any]]) -> None:
        for worker, group_fn in enumerate(group_fns):
            self._group_fns.append(pickle_group(group_fn, worker))
            self.actors.append(None)
            self.locations.append(None)
            self.outstanding.append(deque())
            self._start(len(self.actors) - 1)

    def _start(self, worker: int, avoid: str | None = None) -> None:
        """A new actor for ``worker``, asked to build its group (the Hello is call id 0);
        ``avoid``: a node id that it should run on only if no other node has room."""
        options = self.actor_options
        elsewhere = None
        if avoid is not None and options.get("scheduling_strategy") in _RAY_PICKS_THE_NODE:
            elsewhere = _elsewhere_than(avoid)
        if elsewhere is not None:
            options = {**options, "scheduling_strategy": elsewhere}
        try:
            actor = _ACTOR_CLASS.options(**options).remote(worker, self.options)
        except (TypeError, ValueError, ArithmeticError) as exc:  # what only creating one checks (a scheduling_strategy)
            raise _refused(self.given_options, exc) from exc
        self.actors[worker] = actor
        self.locations[worker] = None
        build: Any = actor.build  # an actor method handle (Ray adds .remote)
        self.outstanding[worker] = deque([(build.remote(self._group_fns[worker]), 0, None)])

    def relaunch(self, worker: int) -> None:
        """Replace a dead worker's actor by a new one, on another node than the one the dead
        actor ran on where one has room (unless ``actor_options`` chose the node: a placement
        group or a node affinity).

        Ray counts a node it lost as alive until its health check gives up on it (seconds), and
        would place the replacement there, where it dies too and spends another restart."""
        if not self._live():
            raise CannotRestart("Ray was shut down in this process: no actor can be started")
        try:
            ray.kill(self.actors[worker], no_restart=True)
        except Exception:
            pass  # already gone
        self._causes.pop(worker, None)
        location = self.locations[worker]
        if location is not None:
            self._last_nodes[worker] = location.node_id
        self._start(worker, avoid=self._last_nodes.get(worker))

    def attach(self, worker: int, attach: Attach, buffers: Buffers, timeout: float | None = None) -> None:
        # Actor calls from one caller run in the order sent, so the next command finds the group
        # attached; an actor that died in between is reported by that command's result.
        if not self._live():
            raise WorkerGone
        self.actors[worker].attach.remote(dataclasses.replace(attach, buffers=None), self._spec_object(attach.buffers))

    def _spec_object(self, spec: Any) -> ray.ObjectRef:
        """``spec`` in Ray's object store, put there once for every actor (a replacement too).

        With a large observation space the spec is tens of MiB (a Box's ``low`` and ``high``):
        inside each actor's attach call it would be serialised and stored once per actor (and
        a second vector env's start could wait seconds for room in the store). As one object
        passed beside each call, it is serialised once and each node fetches it once. The
        actors read its arrays in place (Ray hands them out read-only): only the actor's own
        bookkeeping uses the spec, never the user."""
        if self._spec is None or self._spec[0] is not spec:
            self._spec = (spec, ray.put(spec))
        return self._spec[1]

    # -- calls -------------------------------------------------------------------------------

    def encode(self, command: Command, call_id: int, payload: Any) -> RayCommand:
        weights = payload.weights_beside(OBJECT_STORE_WEIGHTS_BYTES) if isinstance(payload, RolloutArgs) else None
        if weights is not None:
            if self._weights is None or self._weights[0] is not weights:
                self._weights = (weights, ray.put(weights.data))  # the older object goes with its last call
            data = encode_command(command, call_id, payload.without_weights())
            return RayCommand(call_id, command, data, self._weights[1])
        return RayCommand(call_id, command, encode_command(command, call_id, payload))

    def send(self, worker: int, message: RayCommand, timeout: float | None = None) -> None:
        if not ray.is_initialized():  # (a later session's Ray refuses the call: see below)
            self._causes.setdefault(worker, _SHUT_DOWN)
            raise WorkerGone
        handle = self.actors[worker].handle
        try:
            ref = (
                handle.remote(message.data) if message.weights is None else handle.remote(message.data, message.weights)
            )
        except Exception as exc:  # Ray refused the call (not env code: that runs in the actor)
            self._causes.setdefault(worker, f"is unreachable: Ray refused the call ({type(exc).__name__}: {exc})")
            raise WorkerGone from None
        self.outstanding[worker].append((ref, message.call_id, message.command))

    def poll(self, workers: Sequence[int], timeout: float | None) -> list[Event]:
        if not self._live():  # e.g. Ray's own exit handler ran before our close
            gone: list[Event] = []
            for w in workers:
                if self.outstanding[w]:  # reported once: a second poll finds nothing owed
                    self.outstanding[w].clear()
                    self._causes.setdefault(w, _SHUT_DOWN)
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
        events: list[Event] = []
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
            if isinstance(exc, RaySystemError) and isinstance(exc.client_exc, BaseException):
                # The reply arrived but could not be unpickled here (a __setstate__ that raises):
                # the error the process backend gives for that reply, the original exception.
                return Reply(worker, call_id, False, unpickling_failure(exc.client_exc))
            # Not env code (that comes back as a value): the result could not be serialised
            # in the actor or rebuilt here. It is this call's error; the actor lives on.
            cause = getattr(exc, "cause", None)
            error = cause if isinstance(cause, BaseException) else exc
            return Reply(worker, call_id, False, PackedException(error, None))
        return self._reply(worker, call_id, command, value)

    def _reply(self, worker: int, call_id: int, command: Command | None, value: Any) -> Reply:
        if call_id == 0:  # the handshake also says where the actor runs
            built: Built = value
            self.locations[worker] = built.location
            return Reply(worker, 0, built.outcome.ok, built.outcome.result)
        ok, result = value
        if ok and result is not None:
            result = _owned_result(result)
        return Reply(worker, call_id, ok, result)

    # -- failures and shutdown ---------------------------------------------------------------

    def cause_of_death(self, worker: int) -> DeathCause:
        return DeathCause(self._causes.get(worker, "died"), None)

    def where(self, worker: int) -> str:
        location = self.locations[worker] if worker < len(self.locations) else None
        if location is None:
            return ""
        return f" on node {location.ip} ({location.node_id[:8]}), pid {location.pid}"

    def kill(self) -> None:
        if not self._live():
            return
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass  # already gone

    def _live(self) -> bool:
        """Whether the Ray session the actors were started in is this process's still (not shut
        down, nor replaced by another ``ray.init()``)."""
        return self.session is not None and ray_session() == self.session

    def abort(self, reason: str) -> None:
        for worker in range(len(self.actors)):
            self._causes[worker] = reason
        self.kill()  # ray.kill from this thread; the waiting one's ray.wait sees the deaths

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
            if self.actors and self._live():
                self.kill()
                _wait_dead(self.actors, max(deadline, time.monotonic()) + 1.0)
        finally:
            self.actors = []
            self._weights = None
            self._spec = None
            for queue in self.outstanding:
                queue.clear()
            if self._lease is not None:
                lease, self._lease = self._lease, None
                RAY_USE.release(lease)

    @property
    def pids(self) -> list[int | None]:
        """Each actor's process id (``None`` before its group is built)."""
        return [loc.pid if loc else None for loc in self.locations]

    @property
    def node_ids(self) -> list[str | None]:
        """The Ray node id each group runs on (``None`` before its group is built)."""
        return [loc.node_id if loc else None for loc in self.locations]


def _elsewhere_than(node_id: str) -> Any:
    """A scheduling strategy that prefers any node but ``node_id`` (a soft preference: with no
    room elsewhere, ``node_id`` it is, as on a one-node Ray); ``None`` on a Ray without node
    labels (older than the oldest release setup.cfg allows may lack them): no preference."""
    try:
        from ray.util.scheduling_strategies import NodeLabelSchedulingStrategy, NotIn
    except ImportError:  # pragma: no cover - an older Ray
        return None
    return NodeLabelSchedulingStrategy({}, soft={NODE_ID_LABEL: NotIn(node_id)})


def _wait_dead(actors: Sequence[Any], end: float) -> None:
    """Wait until Ray reports each of ``actors`` dead (a call to it fails), or until ``end``.

    ``ray.kill`` only asks: a call made right after it may still be answered by the actor, so
    an answered probe means "not dead yet" and is sent again (every 10 ms), not "gone"."""
    alive = list(actors)
    while alive:
        probes = []
        for actor in alive:
            try:
                probes.append((actor.__ray_ready__.remote(), actor))
            except Exception:  # noqa: BLE001 - a handle Ray no longer knows: gone
                pass
        left = end - time.monotonic()
        if not probes or left <= 0:
            return
        refs = [ref for ref, _ in probes]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=left)
        answered = set(ready)
        alive = []
        for ref, actor in probes:
            if ref not in answered:
                return  # still busy past the deadline: the pool reports it as it is
            try:
                ray.get(ref, timeout=0)
            except Exception:  # noqa: BLE001 - RayActorError and the like: it is dead
                continue
            alive.append(actor)  # answered: the kill has not landed yet
        if alive:
            time.sleep(min(0.01, max(0.0, end - time.monotonic())))


def _owned(value: Any) -> Any:
    """``value`` with every read-only numpy array in it (Ray hands arrays out as read-only
    views of the received bytes) replaced by a writable copy, through dicts, lists, tuples and
    object arrays, and in any other object by copying it. Through a pipe an array arrives
    writable unless the env gave it read-only; Ray's hide which were, so here every one is
    writable (docs/ray.md)."""
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
    if value is None or isinstance(value, _PLAIN):
        return value
    # Anything else (a namedtuple, an OrderedDict, a Space, a user's object) may hold arrays
    # too: a fresh copy, as unpickling from a pipe gives (deepcopy copies arrays writable).
    try:
        return copy.deepcopy(value)
    except Exception:  # not copyable: as Ray gave it
        return value


#: Values with no array inside, left as they are.
_PLAIN = (bool, int, float, complex, str, bytes, np.generic)


def _owned_result(result: Any) -> Any:
    """What the user or the pool may write to in a reply, made writable: infos, object
    observations (a list, kept by reference in the parent), flags and call results.
    Fixed-shape observation rows and rollout rows are left alone: the parent copies them into
    its own arrays."""
    if type(result) is RolloutReply:  # the block's rows are copied into the parent's arrays
        return dataclasses.replace(result, infos=_owned(result.infos), rows=_owned_rows(result.rows))
    if type(result) is StepReply:
        return dataclasses.replace(result, infos=_owned(result.infos), rows=_owned_rows(result.rows))
    return _owned(result)


def _owned_rows(rows: Rows | None) -> Rows | None:
    if rows is not None:
        obs, flags = rows.observations, rows.flags
        # Flags are a few bytes a row, and the pool may rewrite them (a restarted group's
        # step is reported truncated): copied. Fixed-shape observation rows are not.
        if flags is not None:
            flags = Flags(_owned(flags.rewards), _owned(flags.terminations), _owned(flags.truncations))
        rows = Rows(_owned(obs) if type(obs) is list else obs, flags)
    return rows
