"""The Ray backend's vector env: :class:`RayVectorEnv`, env groups as Ray actors.

It checks its arguments (the shared ones through :class:`~vecenv.options.VectorOptions`, the Ray
ones here), connects to Ray, sizes the actors to the cluster and builds a
:class:`~vecenv.integrations.ray.transport.RayTransport`; everything after that is
:class:`~vecenv.parent.vector_env.GroupVectorEnv`'s, as for worker processes.

Ray is imported by this module only on first use of :class:`~vecenv.RayVectorEnv`.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import ray
from gymnasium.vector import AutoresetMode

from vecenv.checks import check_batch_size, check_env_fns, check_group_fns, check_num_workers
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, VecEnvTimeoutError, describe
from vecenv.integrations.ray.transport import DEFAULT_ACTOR_OPTIONS, RAY_USE, RayTransport, check_ray_takes
from vecenv.options import DEFAULTS, VectorOptions
from vecenv.parent.bounded import bounded_call
from vecenv.parent.groups import WorkerGroups, split_groups
from vecenv.parent.vector_env import GroupVectorEnv

__all__ = ["RayVectorEnv"]


def _check_actor_options(actor_options: Any) -> dict[str, Any]:
    if actor_options is None:
        return {}
    if not isinstance(actor_options, Mapping):
        raise ArgumentTypeError(
            f"`actor_options` must be a dict of Ray actor options or None, got {describe(actor_options)}"
        )
    bad = sorted(k for k in actor_options if not isinstance(k, str))
    if bad:
        raise ArgumentTypeError(f"`actor_options` keys must be str (Ray option names), got {describe(bad)}")
    if "name" in actor_options:
        raise InvalidArgumentError(
            "`actor_options` cannot hold 'name': every group is its own actor, and names are unique"
        )
    for key in ("max_concurrency", "concurrency_groups"):
        if actor_options.get(key) not in (None, 1):
            raise InvalidArgumentError(
                f"`actor_options` cannot hold {key!r} ({actor_options[key]!r}): an actor runs its group's "
                "commands one at a time, in the order sent, which concurrent calls would break"
            )
    for key in ("max_restarts", "max_task_retries"):
        if actor_options.get(key):
            raise InvalidArgumentError(
                f"`actor_options` cannot hold {key!r} ({actor_options[key]!r}): an actor that Ray restarts "
                "comes back without its envs or its rows; use on_worker_death='restart', which rebuilds them"
            )
    resources = actor_options.get("resources")
    if resources is not None and not isinstance(resources, Mapping):
        raise ArgumentTypeError(
            f"`actor_options['resources']` must be a dict of resource name to amount, got {describe(resources)}"
        )
    amounts = {key: actor_options.get(key) for key in _RESOURCE_OPTIONS} | {
        f"resources[{name!r}]": amount for name, amount in (resources or {}).items()
    }
    for key, amount in amounts.items():
        if amount is None:
            continue
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise ArgumentTypeError(f"`actor_options` {key} must be a non-negative number, got {describe(amount)}")
        if amount < 0 or not math.isfinite(amount):  # (Ray's own check overflows on inf)
            raise InvalidArgumentError(
                f"`actor_options` {key} must be a finite non-negative number (an amount an actor can hold), "
                f"got {describe(amount)}"
            )
    check_ray_takes(actor_options)  # the rest as Ray checks it, before Ray is started or joined
    return dict(actor_options)


#: How long the start waits for Ray to say what the cluster holds, when no start_timeout is
#: given: a GCS that is up answers in milliseconds.
CLUSTER_QUERY_TIMEOUT_S = 60.0

_RESOURCE_OPTIONS = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}


def _resources_per_actor(options: Mapping[str, Any]) -> dict[str, float]:
    """The Ray resources one actor asks for (CPU, GPU, memory, custom), from its options."""
    merged = {**DEFAULT_ACTOR_OPTIONS, **options}
    need = {resource: merged[key] for key, resource in _RESOURCE_OPTIONS.items() if merged.get(key) is not None}
    need.update(merged.get("resources") or {})
    return {resource: float(amount) for resource, amount in need.items()}


def _check_address(address: Any) -> str | None:
    """``address`` checked: None, or a non-empty str (what Ray makes of it, ``ray.init`` says)."""
    if address is not None and not isinstance(address, str):
        raise ArgumentTypeError(
            f"`address` must be a Ray address (str, e.g. '10.0.0.1:6379' or 'auto') or None, got {describe(address)}"
        )
    if address == "":
        raise InvalidArgumentError(
            "`address` must be a Ray address (str, e.g. '10.0.0.1:6379' or 'auto') or None, got '' (an empty str)"
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
        autoreset_mode: as :class:`~vecenv.SubprocVectorEnv`.
        copy: as :class:`~vecenv.SubprocVectorEnv`.
        observation_mode: as :class:`~vecenv.SubprocVectorEnv`.
        batch_size: as :class:`~vecenv.SubprocVectorEnv`.
        start_timeout: as :class:`~vecenv.SubprocVectorEnv`; it also bounds the wait for actors
            whose resources other jobs hold.
        on_worker_death: as :class:`~vecenv.SubprocVectorEnv`; with ``"restart"`` a dead actor
            is replaced by a new one (placed by Ray, possibly on another node) that rebuilds
            the same envs on the same rows.
        max_restarts: as :class:`~vecenv.SubprocVectorEnv`.
        restart_window: as :class:`~vecenv.SubprocVectorEnv`.
        seed_policy: as :class:`~vecenv.SubprocVectorEnv` (the same seeds for the same envs).
        display_name: as :class:`~vecenv.SubprocVectorEnv`.
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
        env_fns: Sequence[Callable[[], gym.Env]] | WorkerGroups,
        num_workers: int | None = None,
        *,
        address: str | None = None,
        actor_options: Mapping[str, Any] | None = None,
        autoreset_mode: AutoresetMode | str = DEFAULTS.autoreset_mode,
        copy: bool = DEFAULTS.copy,
        observation_mode: str | tuple[gym.Space, gym.Space] = DEFAULTS.observation_mode,
        batch_size: int | None = DEFAULTS.batch_size,
        start_timeout: float | None = DEFAULTS.start_timeout,
        on_worker_death: str = DEFAULTS.on_worker_death,
        max_restarts: int = DEFAULTS.max_restarts,
        restart_window: float = DEFAULTS.restart_window,
        threads_per_worker: int | None = DEFAULTS.threads_per_worker,
        seed_policy: str = DEFAULTS.seed_policy,
        display_name: str | None = DEFAULTS.display_name,
    ) -> None:
        make_groups: Callable[[int], Sequence[Callable[[], Any]]]
        if isinstance(env_fns, WorkerGroups):  # from_groups: one actor per builder, as given
            given = env_fns.group_fns
            make_groups, max_workers, num_workers = (lambda k: given), len(given), len(given)
        else:
            fns = check_env_fns(env_fns)
            if num_workers == "auto":
                raise InvalidArgumentError(
                    "`num_workers` of RayVectorEnv must be None (one actor per CPU of the cluster) or an int, "
                    "got 'auto' (which chooses between this process and local workers: SubprocVectorEnv only)"
                )
            if num_workers is not None:
                check_num_workers(num_workers, len(fns), in_process=False)
            else:  # its type and range now; whole groups once the cluster gives the actor count
                check_batch_size(batch_size, [1] * len(fns))

            def make_groups(k: int) -> Sequence[Callable[[], Any]]:
                chosen = split_groups(fns, k)
                check_batch_size(batch_size, [len(g.env_fns) for g in chosen])
                return chosen

            max_workers = len(fns)
        options = VectorOptions.pick(locals())
        transport, groups = self._connect(make_groups, max_workers, num_workers, address, actor_options, options)
        super().__init__(transport, groups, options, shared_memory=False)

    @classmethod
    def from_groups(
        cls,
        group_fns: Sequence[Callable[[], Sequence[gym.Env]]],
        *,
        address: str | None = None,
        actor_options: Mapping[str, Any] | None = None,
        autoreset_mode: AutoresetMode | str = DEFAULTS.autoreset_mode,
        copy: bool = DEFAULTS.copy,
        observation_mode: str | tuple[gym.Space, gym.Space] = DEFAULTS.observation_mode,
        batch_size: int | None = DEFAULTS.batch_size,
        start_timeout: float | None = DEFAULTS.start_timeout,
        on_worker_death: str = DEFAULTS.on_worker_death,
        max_restarts: int = DEFAULTS.max_restarts,
        restart_window: float = DEFAULTS.restart_window,
        threads_per_worker: int | None = DEFAULTS.threads_per_worker,
        seed_policy: str = DEFAULTS.seed_policy,
        display_name: str | None = DEFAULTS.display_name,
    ) -> RayVectorEnv:
        """One actor per callable; each returns the list of envs it hosts (or a native
        ``gymnasium.vector.VectorEnv``), as :meth:`SubprocVectorEnv.from_groups`."""
        return cls(
            WorkerGroups(check_group_fns(group_fns)),
            address=address,
            actor_options=actor_options,
            autoreset_mode=autoreset_mode,
            copy=copy,
            observation_mode=observation_mode,
            batch_size=batch_size,
            start_timeout=start_timeout,
            on_worker_death=on_worker_death,
            max_restarts=max_restarts,
            restart_window=restart_window,
            threads_per_worker=threads_per_worker,
            seed_policy=seed_policy,
            display_name=display_name,
        )

    def _connect(
        self,
        make_groups: Callable[[int], Sequence[Callable[[], Any]]],
        max_workers: int,
        num_workers: int | None,
        address: Any,
        actor_options: Any,
        options: VectorOptions,
    ) -> tuple[RayTransport, Sequence[Callable[[], Any]]]:
        """Connect to Ray and size the actors; every argument is checked before Ray is touched.
        ``make_groups(k)`` splits the env constructors over ``k`` actors; returns the
        transport and the groups."""
        ray_options = _check_actor_options(actor_options)
        address = _check_address(address)
        # A given count is split now, so that batch_size is checked against the group sizes.
        groups = None if num_workers is None else make_groups(num_workers)
        if address is not None and not ray.is_initialized():  # (an initialised Ray is used as is)
            _wait_for_address(address, options.start_timeout)
        lease = RAY_USE.acquire(address)
        try:
            total, nodes = _cluster_resources(options.start_timeout)
            num_workers = _fit_cluster(total, nodes, _resources_per_actor(ray_options), max_workers, num_workers)
            if groups is None:
                groups = make_groups(num_workers)
            transport = RayTransport(ray_options, options.worker_observation_mode, lease, options.threads)
        except BaseException:
            if lease is not None:
                RAY_USE.release(lease)
            raise
        self._transport = transport
        # From here on the transport releases Ray (in stop(), which a failed start calls).
        return transport, groups

    @property
    def node_ids(self) -> list[str | None]:
        """The Ray node id of each group's actor, in worker order."""
        return self._transport.node_ids

    @property
    def actor_pids(self) -> list[int | None]:
        """The process id of each group's actor (on its node), in worker order."""
        return self._transport.pids


#: How often the start tries again to reach a Ray address that refused the connection.
ADDRESS_RETRY_S = 0.2


def _ray_endpoint(address: str) -> tuple[str, int] | None:
    """The host and TCP port that ``ray.init(address=address)`` connects to first (the GCS, or
    the Ray Client server of a ``ray://`` address; ``"auto"``: the cluster that ``RAY_ADDRESS``
    or this machine's ``ray start`` names), or ``None`` where that cannot be told (an address
    Ray itself will refuse at once, or none to find for ``"auto"``: Ray's own error then).

    Ray's own reading of the address is used where this Ray has it: it turns a loopback host
    into this node's address, the one a GCS started by ``ray start`` listens on."""
    if address.startswith("ray://"):
        target: str | None = address[len("ray://") :].split("/", 1)[0]
    else:
        try:
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address(address)
        except ImportError:  # pragma: no cover - a Ray without it: the address as given
            target = None if address == "auto" else address
        except Exception:  # noqa: BLE001 - an address Ray cannot read: ray.init says why
            return None
    if target is None:
        return None
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _wait_for_address(address: str, start_timeout: float | None) -> None:
    """Wait until something accepts a TCP connection at the Ray ``address``, at most
    ``start_timeout`` (else :data:`CLUSTER_QUERY_TIMEOUT_S`) seconds; raise
    ``VecEnvTimeoutError`` naming it when nothing has by then.

    ``ray.init`` has no deadline of its own: at an address where nothing listens (a wrong host
    or port, a cluster that is down) it retries for many minutes (over 200 s with Ray 2.60 at a
    closed port), whatever ``start_timeout`` the caller gave, and a host that drops the packets
    holds it longer still. A refused connection is tried again until the deadline, since a
    head node that is starting opens its port late."""
    endpoint = _ray_endpoint(address)
    if endpoint is None:
        return
    limit = CLUSTER_QUERY_TIMEOUT_S if start_timeout is None else start_timeout
    deadline = time.monotonic() + limit
    while True:
        try:
            with socket.create_connection(endpoint, timeout=max(0.05, deadline - time.monotonic())):
                return
        except OSError as exc:
            error = exc
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(ADDRESS_RETRY_S, left))
    host, port = endpoint
    raise VecEnvTimeoutError(
        f"RayVectorEnv start: nothing answered at `address` {address!r} ({host}:{port}: "
        f"{type(error).__name__}: {error}) within {limit:g} s (start_timeout={start_timeout!r}), so Ray was "
        "not joined and no actor was started. Check the address (`ray status` on the head node prints it) "
        "and that the cluster is up, then try again"
    )


def _cluster_resources(start_timeout: float | None) -> tuple[dict[str, float], list[dict[str, float]]]:
    """``ray.cluster_resources()`` and each live node's resources (``ray.nodes()``), waited for
    at most ``start_timeout`` (else :data:`CLUSTER_QUERY_TIMEOUT_S`) seconds.

    Ray's call has no deadline of its own: a driver whose connection to the cluster's GCS
    stalls waits in it forever, inside native code that no signal interrupts. The call runs in
    a daemon thread instead (:func:`~vecenv.parent.bounded.bounded_call`), and a start that
    gets no answer in time raises ``VecEnvTimeoutError``.
    """
    limit = CLUSTER_QUERY_TIMEOUT_S if start_timeout is None else start_timeout

    def query() -> tuple[dict[str, float], list[dict[str, float]]]:
        nodes = [dict(node.get("Resources") or {}) for node in ray.nodes() if node.get("Alive")]
        return dict(ray.cluster_resources()), nodes

    total, nodes = bounded_call(
        query,
        limit,
        f"RayVectorEnv start: Ray did not answer ray.cluster_resources() within {limit:g} s (start_timeout="
        f"{start_timeout!r}), so no actor was started: this process's connection to the cluster's GCS "
        "is stalled or the GCS is overloaded. Check the cluster (ray status), then try again",
        "vecenv-ray-cluster-resources",
    )
    return total, nodes


def _fit_cluster(
    total: Mapping[str, float],
    nodes: Sequence[Mapping[str, float]],
    need: Mapping[str, float],
    max_workers: int,
    num_workers: int | None,
) -> int:
    """The actor count: ``num_workers``, or as many as the cluster's nodes hold at once (at most
    one per group); raises when they could not all start: the cluster's ``total`` is short, or
    no placement on its ``nodes`` holds them (an actor lives on one node)."""
    if num_workers is None:
        num_workers = max(1, _placeable(nodes, need, max_workers))
    for resource, amount in need.items():
        if amount * num_workers > total.get(resource, 0.0):
            raise InvalidArgumentError(
                f"{num_workers} actors of {amount:g} {resource} each need {amount * num_workers:g} {resource}, "
                f"but the Ray cluster has {total.get(resource, 0.0):g}: they could not all start. Use "
                "fewer workers, ask less per actor (actor_options), or add nodes"
            )
    placed = _placeable(nodes, need, num_workers)
    if placed < num_workers:
        asked = ", ".join(f"{amount:g} {resource}" for resource, amount in need.items() if amount > 0)
        held = "; ".join(
            ", ".join(f"{node.get(resource, 0.0):g} {resource}" for resource, amount in need.items() if amount > 0)
            for node in nodes
        )
        raise InvalidArgumentError(
            f"{num_workers} actors of {asked} each do not fit on the Ray cluster's nodes at once: an actor "
            f"runs on one node, and the nodes ({held}) hold {placed}. Use fewer workers, ask less per actor "
            "(actor_options), or add nodes"
        )
    return num_workers


def _placeable(nodes: Sequence[Mapping[str, float]], need: Mapping[str, float], count: int) -> int:
    """How many of ``count`` actors, each asking ``need``, the ``nodes`` hold at once (each
    actor on one node; for equal actors, placing each on the first node with room is best)."""
    free = [dict(node) for node in nodes]
    asked = {resource: amount for resource, amount in need.items() if amount > 0}
    for placed in range(count):
        node = next((n for n in free if all(n.get(r, 0.0) + 1e-9 >= a for r, a in asked.items())), None)
        if node is None:
            return placed
        for resource, amount in asked.items():
            node[resource] = node.get(resource, 0.0) - amount
    return count
