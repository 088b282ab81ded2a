"""SuperSuit drop-in: ``from vecenv.supersuit import pettingzoo_env_to_vec_env_v1, concat_vec_envs_v1``.

SuperSuit vectorizes a PettingZoo ``ParallelEnv`` in two calls: ``pettingzoo_env_to_vec_env_v1``
gives one slot per agent, ``concat_vec_envs_v1(vec_env, num_vec_envs, num_cpus, base_class)``
concatenates copies of it, in this process (``num_cpus`` 0 or 1) or in ``num_cpus`` processes.
These two functions take the same arguments and give what SuperSuit's in-process path gives,
value for value, for the same seed and actions, whatever ``num_cpus`` is: observations, float32
rewards, uint8 ``terminations``/``truncations``, and a list of one info dict per slot with
``"terminal_observation"`` on the step that ends a copy (which is then already reset). Copy
``c`` is reset with ``seed + c`` in every case (SuperSuit's processes give copies on different
processes the same seed). With ``num_cpus`` >= 2 the copies run in vecenv worker processes
(:mod:`vecenv.integrations.supersuit.markov` is their group), so ``close()`` closes every copy's env.

SuperSuit's wrappers (``color_reduction_v0``, ``frame_stack_v1``, ``black_death_v3``, ...) stay
SuperSuit's, applied before. As in SuperSuit, an agent that leaves its env before the episode
ends raises (:class:`~vecenv.multiagent.errors.AgentDeathError`, an ``AssertionError``): wrap the
env in ``black_death_v3``, or use :class:`vecenv.MultiAgentVectorEnv`, which handles it itself.
``concat_vec_envs_v1`` also takes a plain ``gymnasium.Env`` (one slot per copy).

Every other name (SuperSuit's wrappers: ``ss.color_reduction_v0``, ``ss.black_death_v3``, ...) is
SuperSuit's own, looked up in ``supersuit`` on first use, so that a script switches by changing
``import supersuit as ss`` to ``import vecenv.supersuit as ss`` and nothing else. SuperSuit is
imported only then; PettingZoo never.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.spaces import Discrete
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from vecenv.checks import check_count, seed_list
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, describe
from vecenv.integrations.supersuit.markov import OPTIONS_KEY, ROW_INFO_KEY, CopyOptions, MarkovCopies, MarkovCopiesFn
from vecenv.multiagent.copies import COPY_CALL, CopyCall, CopyOp, RowInfo, per_row
from vecenv.parent.call_lock import CallLock, serialised
from vecenv.parent.groups import contiguous_bounds
from vecenv.parent.replies import current_observations
from vecenv.parent.vector_env import Uncopyable
from vecenv.wire.buffers import Buffers, BufferSpec

__all__ = ["pettingzoo_env_to_vec_env_v1", "concat_vec_envs_v1", "ParallelVecEnv", "ConcatVecEnv", "BASE_CLASSES"]

#: ``concat_vec_envs_v1(base_class=...)``: a Gymnasium-style vector env, or a Stable-Baselines3 ``VecEnv``.
BASE_CLASSES = ("gymnasium", "stable_baselines3")

StepResult = tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]


def _items(space: gym.Space, actions: Any) -> list[Any]:
    """One action per slot, as SuperSuit splits a batch (it iterates a ``Discrete`` batch as is)."""
    return list(iter(actions) if isinstance(space, Discrete) else iterate(space, actions))


def _list_infos(entries: Any, n: int) -> list[dict[str, Any]]:
    """One dict per row from the groups' :class:`RowInfo` entries; a fresh ``{}`` elsewhere."""
    infos: list[dict[str, Any]] = [{} for _ in range(n)]
    for j, info in entries:
        infos[j] = info[ROW_INFO_KEY].info
    return infos


def _batched_infos(infos: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """One dict per row from the engine's batched infos (whose only key holds :class:`RowInfo`)."""
    boxes, mask = infos.get(ROW_INFO_KEY), infos.get(f"_{ROW_INFO_KEY}")
    if boxes is None or mask is None:
        return [{} for _ in range(n)]
    return [boxes[j].info if mask[j] and isinstance(boxes[j], RowInfo) else {} for j in range(n)]


def _outputs(obs: Any, rewards: np.ndarray, terms: np.ndarray, truncs: np.ndarray) -> tuple[Any, ...]:
    """SuperSuit's dtypes: float32 rewards, uint8 flags."""
    return obs, rewards.astype(np.float32), terms.astype(np.uint8), truncs.astype(np.uint8)


class ParallelVecEnv(VectorEnv):
    """One parallel env as one slot per agent, in this process: SuperSuit's ``MarkovVectorEnv``.

    ``observation_space`` and ``action_space`` are one agent's (as SuperSuit sets them; so are
    ``single_observation_space`` and ``single_action_space``). :attr:`par_env` is the env.
    """

    def __init__(self, par_env: Any, black_death: bool = False) -> None:
        if not (hasattr(par_env, "possible_agents") and callable(getattr(par_env, "observation_space", None))):
            raise ArgumentTypeError(
                "pettingzoo_env_to_vec_env_v1 takes a PettingZoo ParallelEnv (e.g. pistonball_v6.parallel_env(), or "
                f"pettingzoo.utils.conversions.aec_to_parallel(env)), got {describe(par_env)}"
            )
        copies = MarkovCopies([par_env], black_death)
        self.par_env = par_env
        self.black_death = black_death
        self.metadata = par_env.metadata
        self.render_mode = getattr(getattr(par_env, "unwrapped", par_env), "render_mode", None)
        self.observation_space = self.single_observation_space = copies.observation_space
        self.action_space = self.single_action_space = copies.action_space
        self.num_envs = copies.num_rows
        self._buffers = Buffers.create(
            BufferSpec.plan(self.num_envs, copies.observation_space, copies.action_space, shared_memory=False)
        )
        self._group = copies.make_group(self._buffers)
        self._saved_actions: Any = None

    def _observations(self) -> Any:
        return current_observations(self._buffers, True)

    # SuperSuit's signatures: list infos, not Gymnasium's batched dict.
    def reset(  # type: ignore[override]
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Reset the env; ``(observations, one info dict per agent)``."""
        entries = self._group.reset([seed] * self.num_envs, options, None)
        return self._observations(), _list_infos(entries, self.num_envs)

    def step(self, actions: Any) -> StepResult:  # type: ignore[override]
        """Step with one action per agent (those of agents not in the env are dropped)."""
        entries = self._group.step(_items(self.action_space, actions))
        b = self._buffers
        obs, rewards, terms, truncs = _outputs(self._observations(), b.rewards, b.terminations, b.truncations)
        return obs, rewards, terms, truncs, _list_infos(entries, self.num_envs)

    def step_async(self, actions: Any) -> None:
        self._saved_actions = actions

    def step_wait(self) -> StepResult:
        return self.step(self._saved_actions)

    def render(self) -> Any:  # SuperSuit returns the env's frame
        return self.par_env.render()

    def close(self, **kwargs: Any) -> None:
        self.par_env.close()

    def env_is_wrapped(self, wrapper_class: type) -> list[bool]:
        """SuperSuit's answer for a parallel env: ``False`` per slot."""
        return [False] * self.num_envs


class ConcatVecEnv(Uncopyable, VectorEnv):
    """``num_copies`` copies of one env (parallel or gymnasium), concatenated: SuperSuit's
    ``ConcatVecEnv`` (or ``ProcConcatVec``), in this process (``num_cpus`` < 2) or in
    ``num_cpus`` vecenv workers.

    Attributes:
        rows: the engine's vector env underneath (``vecenv.SubprocVectorEnv``).
    """

    def __init__(
        self, env: Any, num_copies: int, num_cpus: int, black_death: bool = False, context: str | None = None
    ) -> None:
        copies = MarkovCopies([env], black_death)  # the spaces, checked here before any worker starts
        env_bytes = cloudpickle.dumps(env)
        workers = min(num_cpus, num_copies) if num_cpus >= 2 else 1
        groups: list[Callable[[], Any]] = [
            MarkovCopiesFn(env_bytes, b - a, a, black_death) for a, b in contiguous_bounds(num_copies, workers)
        ]
        import vecenv  # the public names, loaded on first use

        self.rows = vecenv.SubprocVectorEnv.from_groups(
            groups, inline_group=num_cpus < 2, context=context, display_name=type(self).__name__
        )
        self.num_copies = num_copies
        self.num_agents = len(copies.agents)
        self.num_envs = self.rows.num_envs
        self.metadata = env.metadata
        self.render_mode = getattr(getattr(env, "unwrapped", env), "render_mode", None)
        self.observation_space = self.single_observation_space = copies.observation_space
        self.action_space = self.single_action_space = copies.action_space

    @property
    def call_lock(self) -> CallLock:
        """The engine's call lock, which :meth:`step` (a send, then a wait) and every other call
        hold throughout: threads sharing this vector env take turns."""
        return self.rows.call_lock

    def _batch(self, actions: Any) -> Any:
        """The actions as SuperSuit hands them on: split, then concatenated in the space's dtype."""
        space = self.action_space
        out: Any = create_empty_array(space, n=self.num_envs)
        return concatenate(space, _items(space, actions), out)

    # SuperSuit's signatures: list infos, not Gymnasium's batched dict.
    @serialised
    def reset(  # type: ignore[override]
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Reset every copy: copy ``c`` with ``seed + c`` (or unseeded); ``(observations, infos)``.

        ``options`` reaches every copy's ``reset`` as given, as in SuperSuit: a ``"reset_mask"``
        in it is the env's to read, and every copy is reset all the same.
        """
        copy_seeds = seed_list(seed, self.num_copies)
        sent = None if options is None else {OPTIONS_KEY: CopyOptions(options)}  # no reset_mask the engine reads
        obs, infos = self.rows.reset(seed=per_row(copy_seeds, self.num_agents), options=sent)
        return obs, _batched_infos(infos, self.num_envs)

    @serialised
    def step_async(self, actions: Any) -> None:
        self.rows.step_async(self._batch(actions))

    @serialised
    def step_wait(self) -> StepResult:
        obs, rewards, terms, truncs, infos = self.rows.step_wait()
        out = _outputs(obs, rewards, terms, truncs)
        return out[0], out[1], out[2], out[3], _batched_infos(infos, self.num_envs)

    @serialised
    def step(self, actions: Any) -> StepResult:  # type: ignore[override]
        """Step every slot; a copy whose episode ended is reset, with its last observation in
        each of its slots' ``"terminal_observation"``."""
        self.step_async(actions)
        return self.step_wait()

    def render(self) -> Any:  # SuperSuit returns the first copy's frame
        """The first copy's frame, as SuperSuit renders (:class:`vecenv.MultiAgentVectorEnv` renders any)."""
        return self.rows.render(env_ids=[0])[0]

    def get_attr(self, name: str) -> list[Any]:
        """Attribute ``name`` of each slot's env (its copy's)."""
        return list(self.rows.get_attr(name))

    def close(self, **kwargs: Any) -> None:
        """Close every copy's env and release the workers."""
        self.rows.close(**kwargs)

    def env_is_wrapped(self, wrapper_class: type) -> list[bool]:
        """Per slot, whether its env is wrapped in ``wrapper_class`` (a parallel env: never)."""
        return list(self.rows.call(COPY_CALL, CopyCall(CopyOp.IS_WRAPPED, argument=wrapper_class)))


def pettingzoo_env_to_vec_env_v1(parallel_env: Any) -> ParallelVecEnv:
    """One slot per agent of ``parallel_env`` (a PettingZoo ``ParallelEnv``), as SuperSuit's.

    Raises:
        AgentSpaceMismatchError: the agents' spaces differ (an ``AssertionError``, as SuperSuit's).
    """
    return ParallelVecEnv(parallel_env)


def concat_vec_envs_v1(
    vec_env: Any, num_vec_envs: int, num_cpus: int = 0, base_class: str = "gymnasium", *, context: str | None = None
) -> Any:
    """``num_vec_envs`` copies of ``vec_env``, as SuperSuit's ``concat_vec_envs_v1``.

    Args:
        vec_env: what ``pettingzoo_env_to_vec_env_v1`` returned (this module's or SuperSuit's),
            or a ``gymnasium.Env``; each copy is a cloudpickle copy of it, as in SuperSuit.
        num_vec_envs: the copies.
        num_cpus: 0 or 1 steps every copy in this process; ``n`` >= 2 starts ``min(n, copies)``
            worker processes. The results are the same.
        base_class: ``"gymnasium"`` (this module's :class:`ConcatVecEnv`) or
            ``"stable_baselines3"`` (an SB3 ``VecEnv`` over it, as SuperSuit's wrapper).
        context: the workers' multiprocessing start method (not in SuperSuit; default as
            ``vecenv.SubprocVectorEnv``'s).
    """
    if base_class not in BASE_CLASSES:
        raise InvalidArgumentError(
            f"`base_class` must be one of {', '.join(map(repr, BASE_CLASSES))}, got {describe(base_class)}"
        )
    num_vec_envs = check_count(num_vec_envs, "num_vec_envs")
    num_cpus = check_count(num_cpus, "num_cpus", low=0)
    if isinstance(vec_env, gym.Env):
        env, black_death = vec_env, False
    elif hasattr(vec_env, "par_env"):  # this module's ParallelVecEnv, or SuperSuit's MarkovVectorEnv
        env, black_death = vec_env.par_env, bool(getattr(vec_env, "black_death", False))
    else:
        raise ArgumentTypeError(
            f"`vec_env` must be what pettingzoo_env_to_vec_env_v1 returned or a gymnasium.Env, got {describe(vec_env)}"
        )
    if base_class == "stable_baselines3":
        # Imported before any worker starts: without SB3 this raises and nothing is left running.
        from vecenv.integrations.supersuit.sb3_wrapper import SB3VecEnvWrapper

        return SB3VecEnvWrapper(ConcatVecEnv(env, num_vec_envs, num_cpus, black_death, context))
    return ConcatVecEnv(env, num_vec_envs, num_cpus, black_death, context)


def __getattr__(name: str) -> Any:
    """SuperSuit's other names (its wrappers), from ``supersuit`` itself."""
    if name.startswith("__"):
        raise AttributeError(f"module 'vecenv.supersuit' has no attribute {name!r}")
    try:
        import supersuit
    except ImportError as exc:
        raise AttributeError(
            f"module 'vecenv.supersuit' has no attribute {name!r}: it is not one of the drop-in's vectorizers, "
            f"and SuperSuit, whose names the rest are, is not installed: pip install supersuit ({exc})"
        ) from None
    try:
        return getattr(supersuit, name)
    except ImportError as exc:  # SuperSuit's own __getattr__ answers unknown names so
        raise AttributeError(str(exc)) from exc
