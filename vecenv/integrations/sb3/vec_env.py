"""Stable-Baselines3 drop-in: ``from vecenv.sb3 import SubprocVecEnv``.

SB3's own ``SubprocVecEnv`` starts one process per env. This one is an SB3
``VecEnv`` with the same constructor (plus ``num_workers`` and vecenv's options) that steps its
envs in a few :class:`vecenv.SubprocVectorEnv` worker groups with shared memory (or, with
``backend="ray"``, in :class:`vecenv.RayVectorEnv` actors on one machine or a cluster), and gives what SB3's class
gives for the same seeds and actions: observation batches, float64 rewards, bool dones, and a
list of per-env info dicts carrying ``"TimeLimit.truncated"`` and, when an episode ends,
``"terminal_observation"``, with the env already reset (SB3's autoreset). ``seed()`` and
``set_options()`` act at the next ``reset()``, as in SB3.

One difference is inherent to hosting several envs per process: envs of the same worker share
process-global state (e.g. ``np.random``'s global generator), as they do in SB3's
``DummyVecEnv``.

Importing this module imports Stable-Baselines3 (and so torch); ``import vecenv`` does not.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import operator
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array

from vecenv.errors import MissingDependencyError

try:
    from stable_baselines3.common.vec_env.base_vec_env import (
        VecEnv,
        VecEnvIndices,
        VecEnvObs,
        VecEnvStepReturn,
    )
except ImportError as exc:  # SB3 itself, or torch which it imports, is missing
    raise MissingDependencyError(
        f"vecenv.sb3 needs Stable-Baselines3: pip install 'vecenv[sb3]' (import failed: {exc})"
    ) from exc

from vecenv.backends import vector_class
from vecenv.checks import check_env_fns, check_seed_policy
from vecenv.errors import ArgumentTypeError, EnvIndexError, InvalidArgumentError, SpaceMismatchError, describe
from vecenv.integrations.sb3.env_adapter import DISPATCH, INFO_KEY, AdapterFn, InfoBox, SB3Call, SB3Op
from vecenv.machine import guard_main
from vecenv.options import DEFAULTS
from vecenv.parent.call_lock import CallLock, serialised
from vecenv.parent.handshake import loose_mismatch_message
from vecenv.parent.restart import RESTART_INFO_KEY
from vecenv.parent.vector_env import DEFAULT_CLOSE_TIMEOUT, GroupVectorEnv, Uncopyable
from vecenv.seeding import SeedPolicy, spawn_seeds
from vecenv.wire.protocol import SpaceRule

__all__ = ["SubprocVecEnv", "selected_envs"]


class SubprocVecEnv(Uncopyable, VecEnv):
    """An SB3 ``VecEnv`` whose envs run in :class:`vecenv.SubprocVectorEnv` worker groups.

    A drop-in for ``stable_baselines3.common.vec_env.SubprocVecEnv``::

        from vecenv.sb3 import SubprocVecEnv
        model = PPO("MlpPolicy", SubprocVecEnv([lambda: gym.make("CartPole-v1")] * 8, num_workers=2))

    Args:
        env_fns: callables that each return an env; called in the workers (sent with
            cloudpickle, so lambdas and closures work with every start method).
        start_method: ``"fork"``, ``"forkserver"`` or ``"spawn"``; default as in SB3:
            ``"forkserver"`` where available, else ``"spawn"``. Unknown names raise
            multiprocessing's ``ValueError`` ("cannot find context for ..."). Built by a script's
            top-level code outside ``if __name__ == "__main__":``, the default is ``"fork"``
            (with an ``UnguardedMainWarning``) and a method given that imports the script again
            raises ``UnguardedMainError``: the script never runs twice.
        num_workers: worker processes (or Ray actors), each hosting a contiguous group of envs;
            default ``min(len(env_fns), available cores)`` (the affinity mask, as
            ``vecenv.SubprocVectorEnv``), or with Ray one per CPU of the cluster.
        backend: ``"process"`` (worker processes on this machine) or ``"ray"``: the groups are
            Ray actors (:class:`vecenv.RayVectorEnv`), on this machine or a cluster.
        address: ``backend="ray"`` only, as :class:`vecenv.RayVectorEnv` takes it: which Ray to
            use (default: the one running in this process, else a new local one).
        actor_options: ``backend="ray"`` only: the actors' options (``num_cpus``,
            ``scheduling_strategy="SPREAD"``, a node affinity to pin groups to nodes, ...).
        on_worker_death: as :class:`vecenv.SubprocVectorEnv`. With ``"restart"`` a dead worker
            (or actor) is rebuilt and its envs reset; the step that saw the death reports them
            done, with ``"TimeLimit.truncated": True`` and ``"worker_restarted": True`` in their
            info and no ``"terminal_observation"`` (none survived; SB3's algorithms then
            bootstrap nothing for that step).
        max_restarts: as :class:`vecenv.SubprocVectorEnv`.
        restart_window: as :class:`vecenv.SubprocVectorEnv`.
        threads_per_worker: BLAS/OpenMP threads in each worker or actor (default 1).
        pin_cpus: ``backend="process"`` only: pin worker ``w`` to the ``w``-th available core
            (with Ray, place actors with ``actor_options``).
        worker_nice: ``backend="process"`` only: run the workers this much below this process's
            CPU priority (see :class:`vecenv.SubprocVectorEnv`).
        seed_policy: ``"sequential"`` (SB3's: :meth:`seed` gives env ``i`` the seed ``seed + i``)
            or ``"spawn"`` (env ``i`` gets :func:`vecenv.spawn_seeds` ``(seed, n)[i]``, so runs
            with different seeds share no env seed); see :mod:`vecenv.seeding`.

    Attributes:
        vector_env: the underlying :class:`vecenv.SubprocVectorEnv` (or :class:`vecenv.RayVectorEnv`;
            its envs are wrapped in an internal adapter; use this class's methods to reach them).
        waiting: a step was started with :meth:`step_async` and not yet collected.
        closed: :meth:`close` has run.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        start_method: str | None = None,
        num_workers: int | None = None,
        *,
        backend: str = "process",
        address: str | None = None,
        actor_options: Mapping[str, Any] | None = None,
        on_worker_death: str = DEFAULTS.on_worker_death,
        max_restarts: int = DEFAULTS.max_restarts,
        restart_window: float = DEFAULTS.restart_window,
        threads_per_worker: int | None = DEFAULTS.threads_per_worker,
        pin_cpus: bool = DEFAULTS.pin_cpus,
        worker_nice: int = DEFAULTS.worker_nice,
        seed_policy: str = DEFAULTS.seed_policy,
    ) -> None:
        # Checked here, before each is wrapped in a callable adapter: an env instance in the list
        # (`[env] * n`) is refused at once, not by a worker calling it after it has started.
        env_fns = check_env_fns(env_fns)
        self.waiting = False
        self.closed = False
        self._options_staged = False  # envs may hold staged options that a reset has not consumed
        self.seed_policy = check_seed_policy(seed_policy)
        adapted = [AdapterFn(fn, i) for i, fn in enumerate(env_fns)]
        shared: dict[str, Any] = {
            "autoreset_mode": AutoresetMode.SAME_STEP,
            "observation_mode": SpaceRule.AS_ENV_0,  # SB3 takes env 0's spaces, the others' bounds may differ
            "on_worker_death": on_worker_death,
            "max_restarts": max_restarts,
            "restart_window": restart_window,
            "threads_per_worker": threads_per_worker,
            "seed_policy": seed_policy,
            "display_name": type(self).__name__,  # errors name this class, not the engine underneath
        }
        own: dict[str, Any] = {}
        if backend == "process":
            _only_for("ray", address=address, actor_options=actor_options)
            chosen = start_method is not None
            if start_method is None:
                # SB3's default: fork is not thread-safe (torch threads in the parent).
                start_method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
            multiprocessing.get_context(start_method)  # SB3's error for an unknown method
            # Never import a script again that is running its unguarded top-level code (see vecenv.machine).
            start_method = guard_main(start_method, chosen, type(self).__name__, "start_method")
            own = {"context": start_method, "pin_cpus": pin_cpus, "worker_nice": worker_nice}
        elif backend == "ray":
            _only_for("process", start_method=start_method, pin_cpus=pin_cpus or None, worker_nice=worker_nice or None)
            own = {"address": address, "actor_options": actor_options}
        cls = vector_class(backend)  # the one place that knows the backends' classes (imports Ray)
        with _spaces_as_sb3_says():
            self.vector_env: GroupVectorEnv = cls(adapted, num_workers, **own, **shared)
        try:
            super().__init__(
                len(env_fns), self.vector_env.single_observation_space, self.vector_env.single_action_space
            )
            # SB3's VecVideoRecorder takes the envs' metadata (their `render_fps`, the videos' frame
            # rate) with `get_attr` only from SB3's own classes, and from any other VecEnv its
            # `metadata`: without env 0's keys here, its videos over this class would run at 30 fps.
            self.metadata = _with_env_metadata(self.metadata, self.get_attr("metadata", 0)[0])
        except BaseException:
            self.vector_env.close()
            raise

    @property
    def num_workers(self) -> int:
        """The number of workers (processes, or Ray actors with ``backend="ray"``)."""
        return self.vector_env.num_workers

    @property
    def call_lock(self) -> CallLock:
        """The core vector env's call lock: :meth:`step` and :meth:`reset`, each several calls
        of it, hold it throughout, so threads sharing the drop-in take turns, each call whole."""
        return self.vector_env.call_lock

    def seed(self, seed: int | None = None) -> Sequence[None | int]:
        """The seeds of the next :meth:`reset`, as SB3's: env ``i`` gets ``seed + i`` (a random
        ``seed`` when ``None``), or under ``seed_policy="spawn"`` :func:`vecenv.spawn_seeds` ``(seed, n)``."""
        if isinstance(seed, np.integer):
            # A seed, as vecenv takes it (SB3's envs refuse it), as the int it is: SB3 adds
            # `seed + i` in the seed's own type, which wraps (an int8 127 gave env 1 -128, a
            # uint64's largest gave env 1 the seed 0).
            seed = int(seed)
        seeds = super().seed(seed)
        base = seeds[0]
        if self.seed_policy == SeedPolicy.SPAWN and base is not None:
            self._seeds = [*spawn_seeds(base, self.num_envs)]
            return list(self._seeds)
        return seeds

    # -- reset and step --------------------------------------------------------------------------

    @serialised
    def reset(self) -> VecEnvObs:
        """Reset every env with the seeds of :meth:`seed` and the options of :meth:`set_options`.

        Both are used once, then forgotten, as in SB3. ``reset_infos`` holds each env's reset info.
        """
        # As SB3: env i takes entry i; entries beyond the envs are not read, and too few is an
        # IndexError (one that names the counts).
        n = self.num_envs
        if len(self._seeds) < n or len(self._options) < n:
            raise EnvIndexError(
                f"seeds and options must hold an entry for each of the {n} envs, "
                f"got {len(self._seeds)} seeds and {len(self._options)} options"
            )
        options = list(self._options[:n])
        if self._options_staged or any(options):
            # Options may differ per env: each env takes its own at its next reset.
            self._options_staged = True
            self.vector_env.call(DISPATCH, SB3Call(SB3Op.STAGE_OPTIONS, value=options))
        seeds = list(self._seeds[:n])
        obs, infos = self.vector_env.reset(seed=seeds)
        boxes, mask = _boxes(infos, n)
        restarted = _restarted(infos, n)
        if self._options_staged and restarted.any():
            # A worker that died in this reset was rebuilt and reset without the options staged
            # in its old envs: its new envs get them and the same seeds, as every env did.
            again = [options[j] if restarted[j] else None for j in range(n)]
            self.vector_env.call(DISPATCH, SB3Call(SB3Op.STAGE_OPTIONS, value=again))
            obs, infos = self.vector_env.reset(seed=seeds, options={"reset_mask": restarted})
            boxes_again, mask_again = _boxes(infos, n)
            boxes = [boxes_again[j] if restarted[j] else boxes[j] for j in range(n)]
            mask = np.where(restarted, mask_again, mask)
        self._options_staged = False
        self.reset_infos = [boxes[j].info if mask[j] else {} for j in range(n)]
        for j in np.flatnonzero(restarted).tolist():
            self.reset_infos[j] = {**self.reset_infos[j], RESTART_INFO_KEY: True}
        self._reset_seeds()
        self._reset_options()
        return obs

    @serialised
    def step(self, actions: np.ndarray) -> VecEnvStepReturn:
        """Step every env (:meth:`step_async` then :meth:`step_wait`, as SB3's ``VecEnv.step``),
        another thread's call waiting until both are done."""
        self.step_async(actions)
        return self.step_wait()

    @serialised
    def step_async(self, actions: np.ndarray) -> None:
        """Start stepping every env with its action: ``actions[i]`` goes to env ``i``, as in SB3.

        For ``Dict`` and ``Tuple`` action spaces SB3 takes a sequence of per-env actions while
        the engine takes Gymnasium's batched layout: such a sequence is batched here first
        (values are kept; leaves reach the envs as the space's numpy types).
        """
        if isinstance(self.action_space, (spaces.Dict, spaces.Tuple)) and not isinstance(actions, dict):
            items = list(actions)
            if len(items) != self.num_envs:
                raise InvalidArgumentError(
                    f"`actions` must hold one action per env ({self.num_envs}), got {len(items)}"
                )
            batch: Any = create_empty_array(self.action_space, self.num_envs)
            self.vector_env.step_async(concatenate(self.action_space, items, batch))
        else:
            self.vector_env.step_async(actions)
        self.waiting = True

    @serialised
    def step_wait(self) -> VecEnvStepReturn:
        """``(obs, rewards, dones, infos)`` of the step started by :meth:`step_async`.

        An env whose episode ended is already reset: its ``obs`` row is the reset observation,
        its info holds ``"terminal_observation"``, and its reset info is in ``reset_infos``.
        """
        try:
            obs, rewards, terminations, truncations, infos = self.vector_env.step_wait()
        finally:
            self.waiting = False
        dones = terminations | truncations
        boxes, mask = _boxes(infos, self.num_envs)
        final_boxes, _ = _boxes(infos.get("final_info", {}), self.num_envs)
        # Most envs send no info on most steps: give those a fresh dict, fill in the others.
        out: list[dict[str, Any]] = [{"TimeLimit.truncated": False} for _ in range(self.num_envs)]
        for j in np.flatnonzero(mask & ~dones).tolist():
            info = boxes[j].info
            info["TimeLimit.truncated"] = False  # neither terminated nor truncated
            out[j] = info
        restarted = _restarted(infos, self.num_envs)
        for j in np.flatnonzero(dones).tolist():
            final: InfoBox | None = final_boxes[j]
            if final is None:  # its worker was restarted: the episode's end did not survive
                assert restarted[j], "every other episode end carries its final info"
                info = {"TimeLimit.truncated": True, RESTART_INFO_KEY: True}
            else:
                info = final.info
                info["TimeLimit.truncated"] = bool(truncations[j] and not terminations[j])
                info["terminal_observation"] = final.terminal_obs
            out[j] = info
            self.reset_infos[j] = boxes[j].info if mask[j] else {}
        return obs, rewards, dones, out

    # -- per-env calls -------------------------------------------------------------------------

    def _dispatch(self, indices: VecEnvIndices, op: SB3Op, **fields: Any) -> list[Any]:
        """Run ``op`` (with the :class:`SB3Call` ``fields``) on the envs ``indices`` selects; one
        result per selected env, in that order.

        One round trip to every worker (the engine's ``call`` reaches all envs); an env that is
        not selected does nothing and returns nothing. Negative indices count from the end and
        repeated indices run the call again, as in SB3.
        """
        if indices is None:
            order = list(range(self.num_envs))
            counts = None
        else:
            order = selected_envs(indices, self.num_envs)
            counts = dict(Counter(order))
            if not order:
                return []
        per_env = self.vector_env.call(DISPATCH, SB3Call(op, counts, **fields))
        cursors = [0] * self.num_envs
        results = []
        for j in order:
            results.append(per_env[j][cursors[j]])
            cursors[j] += 1
        return results

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """Call ``method_name`` (found with ``get_wrapper_attr``) on the selected envs."""
        return self._dispatch(indices, SB3Op.ENV_METHOD, name=method_name, args=method_args, kwargs=method_kwargs)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Attribute ``attr_name`` (found with ``get_wrapper_attr``) of the selected envs."""
        return self._dispatch(indices, SB3Op.GET_ATTR, name=attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set ``attr_name`` to ``value`` on the selected envs (on the outermost wrapper, as SB3)."""
        self._dispatch(indices, SB3Op.SET_ATTR, name=attr_name, value=value)

    def has_attr(self, attr_name: str) -> bool:
        """Whether every env has attribute ``attr_name`` (nothing is sent back but a bool)."""
        return all(self._dispatch(None, SB3Op.HAS_ATTR, name=attr_name))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """For each selected env, whether a ``wrapper_class`` is among its wrappers."""
        return self._dispatch(indices, SB3Op.IS_WRAPPED, value=wrapper_class)

    # -- rendering and closing -----------------------------------------------------------------

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each env's ``render()`` frame; ``None`` each (with a warning) unless render_mode is rgb_array."""
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"The render mode is {self.render_mode}, but this method assumes it is `rgb_array` to obtain images.",
                stacklevel=2,
            )
            return [None] * self.num_envs
        return list(self.vector_env.render())

    def close(self) -> None:
        """Close the envs and release the workers (idempotent; a pending step is discarded).

        A step in flight is collected first, as SB3 does, but for
        :data:`~vecenv.parent.closing.DEFAULT_CLOSE_TIMEOUT` seconds at most (SB3 waits forever
        for a hung env); the workers still busy with it are then ended without more grace.
        While another thread waits for that step (or this thread does, from a signal handler),
        the vector env's own ``close()`` ends it instead: that call gets its grace, then raises
        ``WorkerDiedError`` (or, in this thread, the close runs when it is over).
        """
        if self.closed:
            return
        if self.waiting:
            with self.vector_env.call_lock.taken_if_free("close", closing=True) as free:
                if free:
                    with contextlib.suppress(Exception):  # closing anyway; the env's error is moot now
                        self.vector_env.step_wait(timeout=DEFAULT_CLOSE_TIMEOUT)
        self.vector_env.close()
        self.waiting = False
        self.closed = True


@contextlib.contextmanager
def _spaces_as_sb3_says() -> Iterator[None]:
    """The engine's space mismatch, in the drop-in's terms: its own class name, and no advice
    to pass an ``observation_mode`` (which the drop-in does not take)."""
    try:
        yield
    except SpaceMismatchError as exc:
        m = exc.mismatch
        if m is None:
            raise
        error = SpaceMismatchError(loose_mismatch_message(m, "SubprocVecEnv"))
        error.mismatch = m
        raise error from None


def _only_for(backend: str, **given: Any) -> None:
    """Refuse the arguments of the other backend, naming them and what was given."""
    for name, value in given.items():
        if value is not None:
            raise InvalidArgumentError(f"`{name}` is for backend={backend!r} only, got {name}={describe(value)}")


def _restarted(infos: dict[str, Any], n: int) -> np.ndarray:
    """The envs whose worker was restarted on this step (``on_worker_death="restart"``)."""
    mask = infos.get(f"_{RESTART_INFO_KEY}")
    return np.zeros(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)


def _boxes(infos: dict[str, Any], n: int) -> tuple[Any, np.ndarray]:
    """The per-env :class:`InfoBox` objects of a batched info dict, and the mask of envs that sent one."""
    boxes = infos.get(INFO_KEY)
    if boxes is None:
        return [None] * n, np.zeros(n, dtype=bool)
    return boxes, infos[f"_{INFO_KEY}"]


def _with_env_metadata(own: Mapping[str, Any], env_metadata: Any) -> dict[str, Any]:
    """The vector env's ``metadata``: SB3's (its ``render_modes``, which may add ``"human"``), and
    env 0's other keys (``render_fps`` and the like), which SB3's ``VecVideoRecorder`` reads."""
    merged = dict(own)
    if isinstance(env_metadata, Mapping):
        for key, value in env_metadata.items():
            merged.setdefault(key, value)
    return merged


def selected_envs(indices: Any, num_envs: int) -> list[int]:
    """The envs SB3's ``indices`` selects, in its order: ``None`` all, an int one, a sequence
    those (repeats kept), negative indices counting from the end."""
    if indices is None:
        return list(range(num_envs))
    order = []
    for index in [indices] if isinstance(indices, (int, np.integer)) else indices:
        try:
            i = operator.index(index)
        except TypeError:
            raise ArgumentTypeError(f"env indices must be ints, got {type(index).__name__}") from None
        if not -num_envs <= i < num_envs:
            raise EnvIndexError(f"env index {i} is out of range for {num_envs} envs")
        order.append(i % num_envs)
    return order
