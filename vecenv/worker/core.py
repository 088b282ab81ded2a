"""The worker core: one worker's env group and its command handlers, with no transport.

:class:`WorkerCore` builds the group's envs, describes them in a :class:`~vecenv.wire.protocol.Hello`,
attaches the group's rows of the buffers, and answers one command at a time. Every exception,
including one raised while unpickling a command's payload, becomes an error reply to that
command, so a worker only ends when asked to (or when something outside Python kills it). The
process loop (:mod:`vecenv.worker.loop`), the parent-hosted group
(:mod:`vecenv.transports.inline`) and the Ray actor (:mod:`vecenv.integrations.ray.transport`) all wrap this
same core; its unit tests feed it messages directly.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.process
import os
import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import Space
from gymnasium.vector import AutoresetMode

from vecenv.checks import check_autoreset_mode
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, MissingMethodError, PackedException, describe
from vecenv.machine import loading_constructors
from vecenv.spaces import tree_copy
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import (
    Attach,
    CallArgs,
    Command,
    Hello,
    Outcome,
    RenderArgs,
    ResetArgs,
    RolloutArgs,
    RolloutBlockArgs,
    RolloutReply,
    SetAttrArgs,
    SpaceKind,
    SpaceMismatch,
    SpaceRule,
    StepReply,
    space_fits,
)
from vecenv.worker.builders import check_env
from vecenv.worker.group import EnvGroup, GroupSource, HostedGroup, VectorGroup
from vecenv.worker.rollout import GroupRollouts

__all__ = ["WorkerCore", "WorkerOptions", "fallible_parts", "unpicklable_failure", "unpicklable_part"]


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """How a worker checks its envs and sets up its process.

    Attributes:
        observation_mode: a :class:`~vecenv.wire.protocol.SpaceRule` (``SAME``: every env's
            observation space equals the first's; ``DIFFERENT``: same shape and dtype, every
            space is reported for batching; ``AS_ENV_0``: observation and action spaces of the
            first's shape and dtype), or the single observation space every env's must match
            in shape and dtype.
        cpu: pin the process to this core.
        threads: limit BLAS/OpenMP threads in the worker to this many (``None``: leave alone).
        nice: the nice value every thread of the worker runs at (``None``: the one it
            inherited); one it cannot reach (a lower one needs privileges) is left as it is.
        spin: seconds the worker may poll its pipe for its next command before it sleeps on it
            (0: never), where the step's fast path does not run (its spin limit is in the shared
            words instead). Only given where every process of the vector env has a core of its
            own; see :func:`vecenv.worker.loop._serve`.
        slot: the worker's slot in the control block of the step's fast path, whose descriptor
            follows the ``Attach`` on the pipe (``None``: no fast path; see
            :mod:`vecenv.wire.fastpath`).
        slots: the slots in that block.
        death_signal: ask the kernel to kill the worker when the thread that started it ends
            (see :func:`vecenv.worker.loop._exit_with_parent`); only where that thread is the
            parent process's main thread, which lives as long as the process.
        environ: the parent's environment variables when it started the worker, which replace
            the worker's own (``None``: it inherited them). A fork server's children inherit the
            server's, as they were when the first vector env started it: a variable set since
            (``MUJOCO_GL``, ``CUDA_VISIBLE_DEVICES``) would not reach them otherwise.
    """

    observation_mode: SpaceRule | Space = SpaceRule.SAME
    cpu: int | None = None
    threads: int | None = None
    spin: float = 0.0
    nice: int | None = None
    slot: int | None = None
    slots: int = 0
    death_signal: bool = False
    environ: dict[str, str] | None = None


def _check_group(envs: list[gym.Env], mode: SpaceRule | Space) -> tuple[SpaceMismatch | None, list[Space]]:
    """The first env whose spaces do not fit the group's, and (``DIFFERENT``) every obs space."""
    first = envs[0]
    reference = mode if isinstance(mode, Space) else first.observation_space
    spaces = [env.observation_space for env in envs] if mode is SpaceRule.DIFFERENT else []
    for j, env in enumerate(envs):
        if not space_fits(mode, SpaceKind.OBSERVATION, reference, env.observation_space):
            return SpaceMismatch(j, SpaceKind.OBSERVATION, reference, env.observation_space), spaces
        if not space_fits(mode, SpaceKind.ACTION, first.action_space, env.action_space):
            return SpaceMismatch(j, SpaceKind.ACTION, first.action_space, env.action_space), spaces
    return None, spaces


def _env_0_identity(env: Any) -> tuple[dict[str, Any], str | None, Any]:
    """Env 0's ``metadata``, ``render_mode`` and ``spec``, which become the vector env's.

    ``SyncVectorEnv`` reads the first two (an ``AttributeError`` where env 0 lacks one: here a
    :class:`~vecenv.errors.MissingMethodError` naming env 0 and the attribute) and not the
    spec, which is ``None`` where env 0 has none."""
    values = []
    for name in ("metadata", "render_mode"):
        try:
            values.append(getattr(env, name))
        except AttributeError as exc:
            raise MissingMethodError(
                f"env 0 ({type(env).__name__}) has no `{name}`: the vector env takes its metadata and "
                f"render_mode from env 0, as SyncVectorEnv does (every gymnasium.Env has both)"
            ) from exc
    return dict(values[0]), values[1], getattr(env, "spec", None)


def _note_daemonic_start(exc: AssertionError, index: int) -> None:
    """Say how to fix ``exc`` where it is multiprocessing's refusal to start a process from this
    daemonic worker (an env group that starts processes of its own: a gymnasium
    ``AsyncVectorEnv`` as a native group). Its own message says only that daemonic processes
    cannot have children, not that the worker is one because of ``daemon=True``."""
    if not multiprocessing.current_process().daemon:
        return
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None and tb.tb_frame.f_code.co_filename == multiprocessing.process.__file__:
        exc.add_note(
            f"worker {index} is a daemonic process (daemon=True, the default), which cannot start processes: "
            "envs or a native vector env (an AsyncVectorEnv) that start processes of their own need "
            "SubprocVectorEnv(..., daemon=False) or SubprocVectorEnv.from_groups(..., daemon=False)"
        )


class WorkerCore:
    """One worker's group and its command handlers, independent of how commands arrive."""

    def __init__(self, index: int, options: WorkerOptions, own_process: bool = True) -> None:
        self.index = index
        self.options = options
        #: Whether it runs in a process of its own (a worker process, a Ray actor), not the parent's.
        self.own_process = own_process
        self.envs: Any = None
        self.group: HostedGroup | None = None
        self.rollouts: GroupRollouts | None = None
        self._handlers: dict[Command, Callable[[Any], Any]] = {}

    def build(self, group_fn_bytes: bytes) -> Hello:
        """Build the envs with the cloudpickled group builder and describe them."""
        with loading_constructors():  # the modules it imports must not build vector envs
            group_fn: Callable[[], Any] = cloudpickle.loads(group_fn_bytes)
        try:
            built = group_fn()
        except AssertionError as exc:
            if self.own_process:
                _note_daemonic_start(exc, self.index)
            raise
        if isinstance(built, GroupSource):  # e.g. copies of a multi-agent env: they describe themselves
            self.envs = built
            return built.hello()
        builder = f"worker {self.index}'s group builder (`group_fns`)"
        if isinstance(built, gym.vector.VectorEnv):
            self.envs = built
            return Hello(
                num_envs=self._native_num_envs(built, builder),
                observation_space=built.single_observation_space,
                action_space=built.single_action_space,
                metadata=dict(built.metadata),
                render_mode=built.render_mode,
                spec=built.spec,
                mismatch=None,
                native_autoreset=check_autoreset_mode(
                    built.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP),
                    f"{builder} returned {type(built).__name__}, a native vector env whose metadata['autoreset_mode']",
                ),
            )
        if isinstance(built, (str, bytes, dict)) or not hasattr(built, "__iter__"):
            raise ArgumentTypeError(
                f"{builder} must return a list of envs or a gymnasium.vector.VectorEnv, got {describe(built)}"
            )
        envs = [
            check_env(env, f"item {j} of the list {builder} returned must be a gymnasium.Env")
            for j, env in enumerate(built)
        ]
        if not envs:
            raise InvalidArgumentError(f"the env group of worker {self.index} is empty; each needs one env or more")
        self.envs = envs
        mismatch, spaces = _check_group(envs, self.options.observation_mode)
        first = envs[0]
        # The vector env's metadata and render_mode are env 0's, as SyncVectorEnv takes them:
        # only the group holding env 0 reads them (an env elsewhere may have none, as there).
        metadata, render_mode, spec = _env_0_identity(first) if self.index == 0 else ({}, None, None)
        return Hello(
            num_envs=len(envs),
            observation_space=first.observation_space,
            action_space=first.action_space,
            metadata=metadata,
            render_mode=render_mode,
            spec=spec,
            mismatch=mismatch,
            native_autoreset=None,
            observation_spaces=spaces,
        )

    def _native_num_envs(self, vec: gym.vector.VectorEnv, builder: str) -> int:
        """A native env's ``num_envs``: the rows it fills, so a positive int (a NumPy integer
        is taken as its int); anything else is refused here, not met as a failure to make or
        fill its rows."""
        num_envs = vec.num_envs
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)):
            raise ArgumentTypeError(
                f"{builder} returned {type(vec).__name__}, a native vector env whose `num_envs` must be an int, "
                f"got {describe(num_envs)}"
            )
        if num_envs < 1:
            raise InvalidArgumentError(
                f"{builder} returned {type(vec).__name__}, a native vector env whose `num_envs` must be 1 or more "
                f"(each group needs one env or more), got {int(num_envs)}"
            )
        return int(num_envs)

    def attach(self, attach: Attach, buffers: Buffers) -> None:
        """Wire the group to its rows of the buffers; commands can be handled from now on."""
        group: HostedGroup
        if isinstance(self.envs, GroupSource):  # it makes its own group
            group = self.envs.make_group(buffers)
        elif isinstance(self.envs, gym.vector.VectorEnv):
            group = VectorGroup(self.envs, buffers)
        else:
            group = EnvGroup(self.envs, attach.autoreset_mode, buffers)
        self.group = group
        rollouts = self.rollouts = GroupRollouts(group, buffers, attach.start, attach.autoreset_mode, self.own_process)

        # A native group's info keys that none of its envs carried travel beside the entries.
        native = group if isinstance(group, VectorGroup) else None

        def reset(args: ResetArgs) -> StepReply:
            rollouts.reset_starts(args)
            entries = group.reset(args.seeds, args.options, args.mask)
            reply = StepReply(entries, buffers.payload(), None if native is None else native.masked)
            rollouts.reset_done(args)
            return reply

        def step(actions: Any) -> StepReply:
            if actions is None:  # in the shared rows, which the next step rewrites: take a copy
                shared = buffers.actions
                actions = shared.copy() if type(shared) is np.ndarray else tree_copy(shared)
            entries = group.step(actions)
            rollouts.step_done()  # episode starts (a recurrent policy's state) follow every step
            if native is None:
                return StepReply(entries, buffers.payload())
            return StepReply(entries, buffers.payload(), native.masked)

        def call(args: CallArgs) -> Any:
            return group.call(args.name, args.args, args.kwargs)

        def set_attr(args: SetAttrArgs) -> None:
            group.set_attr(args.name, args.values)

        def render(args: RenderArgs | None) -> list[Any]:
            return group.render(None if args is None else args.env_ids)

        def rollout(args: RolloutArgs) -> RolloutReply:
            return rollouts.run(args)

        def rollout_block(args: RolloutBlockArgs) -> None:
            rollouts.map_block(args)

        self._handlers = {
            Command.RESET: reset,
            Command.STEP: step,
            Command.CALL: call,
            Command.SET_ATTR: set_attr,
            Command.RENDER: render,
            Command.CLOSE: lambda _: group.close(),
            Command.ROLLOUT: rollout,
            Command.POLICY_STATE: rollout,
            Command.ROLLOUT_BLOCK: rollout_block,
        }

    def detach(self) -> None:
        """Drop the group and every handler (they hold views of the buffers)."""
        if self.rollouts is not None:
            self.rollouts.close()
        self.rollouts = None
        self.group = None
        self._handlers = {}

    def handle(
        self, command: Command, load: Callable[[], Any], fd: int | None = None, interrupts: bool = False
    ) -> Outcome:
        """Run one command; ``load()`` gives its payload. Returns its result, or the
        :class:`PackedException` of what it raised.

        The payload is loaded inside the guard: an argument that cannot be unpickled here is
        that call's error, with its traceback, and the worker carries on. ``fd``: a descriptor
        that came with the command (a ``ROLLOUT_BLOCK``'s memfd, a ``ROLLOUT``'s large weights):
        the payload takes it (``with_fd``), and it is closed if the payload cannot be loaded.
        ``interrupts``: what is not an ``Exception`` (Ctrl+C's ``KeyboardInterrupt``, a signal
        handler's ``SystemExit``) is raised, not returned: in the parent's own group it is the
        parent's (a worker process ignores SIGINT).
        """
        group, rollouts = self.group, self.rollouts
        assert group is not None and rollouts is not None, "attach() comes before any command"
        group.blame = None
        try:
            payload = load()
            if fd is not None:
                taken, fd = fd, None  # the payload owns it now, even if taking it fails
                payload = payload.with_fd(taken)
            return Outcome(True, self._handlers[command](payload))
        except BaseException as exc:
            if interrupts and not isinstance(exc, Exception):
                raise
            failure = rollouts.failure if command is Command.ROLLOUT else None
            if failure is None:
                return Outcome(False, PackedException(exc, group.blame))
            return Outcome(False, PackedException(exc, group.blame, failure.describe(), failure.order()))
        finally:
            if fd is not None:
                os.close(fd)


def fallible_parts(result: Any) -> list[tuple[int, Any]] | None:
    """The parts of a reply that may fail to pickle, each with the local index of its env: the
    infos of a :class:`~vecenv.wire.protocol.StepReply` or
    :class:`~vecenv.wire.protocol.RolloutReply` and a step's observations that travel in the
    reply (object spaces: numeric rows always pickle), or each item of a ``call``/``render``
    result (one per env). ``None`` for any other result, which is one part of no env."""
    if isinstance(result, RolloutReply):
        return [(j, info) for _, j, info in result.infos]
    if isinstance(result, StepReply):
        parts = list(result.infos)
        rows = result.rows
        if rows is not None and isinstance(rows.observations, list):
            parts += list(enumerate(rows.observations))
        return parts
    if isinstance(result, list):
        return list(enumerate(result))
    return None


def _pickle(value: Any) -> Any:
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def unpicklable_part(result: Any, dumps: Callable[[Any], Any] = _pickle) -> int | None:
    """The local index of the env whose part of ``result`` (see :func:`fallible_parts`) cannot
    be pickled by ``dumps``. ``None`` when no one part fails."""
    for j, part in sorted(fallible_parts(result) or [], key=lambda p: p[0]):
        try:
            dumps(part)
        except Exception:
            return j
    return None


def unpicklable_failure(exc: BaseException, result: Any, dumps: Callable[[Any], Any] = _pickle) -> PackedException:
    """``exc``, raised pickling ``result``, packed to name the env whose part failed (see
    :func:`unpicklable_part`) and, where that part is an info, the value within it
    (``info['stats']['handle']``, its type, and for a rollout the step): an info may hold
    many values, and pickling's own message names only the type of the one that failed. (The
    note leaves out the value's ``repr``, which may hold an address: it stays the same on every
    backend and every run.)"""
    j = unpicklable_part(result, dumps)
    detail = None if j is None else _unpicklable_info(result, j, dumps)
    return PackedException(exc, j, detail)


def _unpicklable_info(result: Any, j: int, dumps: Callable[[Any], Any]) -> str | None:
    """Where env ``j``'s infos in ``result`` hold a value ``dumps`` cannot pickle, or ``None``."""
    if isinstance(result, RolloutReply):
        entries = [(f" at step {t} of the rollout", info) for t, i, info in result.infos if i == j]
    elif isinstance(result, StepReply):
        entries = [("", info) for i, info in result.infos if i == j]
    else:
        return None
    for when, info in entries:
        found = _unpicklable_value(info, "info", dumps)
        if found is not None:
            path, value = found
            return (
                f"its {path}{when} is a {type(value).__module__}.{type(value).__qualname__}, which cannot be "
                "pickled to reach the parent: with worker processes every info value must be picklable "
                "(envs the parent hosts, num_workers=0 or inline_group=True, keep their values as they are)"
            )
    return None


def _unpicklable_value(value: Any, path: str, dumps: Callable[[Any], Any]) -> tuple[str, Any] | None:
    """The path and value of the innermost part of ``value`` that ``dumps`` fails on, going
    down through dicts (the levels ``SyncVectorEnv`` batches key by key), or ``None``."""
    try:
        dumps(value)
    except Exception:
        if isinstance(value, dict):
            for key, item in value.items():
                found = _unpicklable_value(item, f"{path}[{key!r}]", dumps)
                if found is not None:
                    return found
        return path, value
    return None
