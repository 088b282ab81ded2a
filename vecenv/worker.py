"""The worker: one process (or actor) hosting one :class:`~vecenv.group.EnvGroup`.

:class:`WorkerCore` is the transport-free part: it builds the group's envs, describes them in a
:class:`~vecenv.protocol.Hello`, attaches the group's rows of the buffers, and answers one
command at a time. Every exception, including one raised while unpickling a command's payload,
becomes an error reply to that command, so a worker only ends when asked to (or when something
outside Python kills it). :func:`worker_main` is the process transport's loop around it: pipe
bytes in, pipe bytes out, until ``CLOSE`` or until the parent is gone. Other transports (Ray
actors) wrap the same core.
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing import parent_process, reduction
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import cloudpickle
import gymnasium as gym
from gymnasium import Space
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode

from vecenv.buffers import Buffers, drop_inherited_mappings
from vecenv.errors import PackedException
from vecenv.group import EnvGroup, VectorGroup
from vecenv.multiagent.copies import AgentCopies  # hook: multi-agent groups (vecenv.multiagent)
from vecenv.protocol import (
    Attach,
    CallArgs,
    Command,
    Hello,
    ResetArgs,
    SpaceMismatch,
    decode_command,
    encode_reply,
)
from vecenv.spaces import tree_copy

if TYPE_CHECKING:
    from vecenv.multiagent.group import CopyGroup

__all__ = ["WorkerCore", "WorkerOptions", "worker_main", "PARENT_ENDS", "Spin"]

#: Seconds a worker (or the parent) polls for the next message before it sleeps, where it may.
SPIN_SECONDS = 200e-6
#: After a poll that caught nothing, this many waits sleep at once.
SPIN_BACKOFF = 8

#: The parent's ends of every worker pipe this process created. A worker started by ``fork``
#: inherits copies of them (and so would keep other vector envs' pipes open); it closes its
#: copies first thing, holding only what is its own.
PARENT_ENDS: weakref.WeakSet[Connection] = weakref.WeakSet()


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """How a worker checks its envs and sets up its process.

    Attributes:
        observation_mode: ``"same"`` (every env's observation space equals the first's),
            ``"different"`` (same shape and dtype; every space is reported for batching), or the
            single observation space every env's must match in shape and dtype.
        cpu: pin the process to this core.
        threads: limit BLAS/OpenMP threads in the worker to this many (``None``: leave alone).
        spin: seconds the worker may poll for its next command before it sleeps on the pipe
            (0: never). Only given where every process of the vector env has a core of its
            own; see :func:`_serve`.
    """

    observation_mode: str | Space = "same"
    cpu: int | None = None
    threads: int | None = None
    spin: float = 0.0


def _check_group(envs: list[gym.Env], mode: str | Space) -> tuple[SpaceMismatch | None, list[Space]]:
    """The first env whose spaces do not fit the group's, and (``"different"``) every obs space."""
    first = envs[0]
    reference = mode if isinstance(mode, Space) else first.observation_space
    spaces = [env.observation_space for env in envs] if mode == "different" else []
    for j, env in enumerate(envs):
        obs_space = env.observation_space
        fits = obs_space == reference if mode == "same" else is_space_dtype_shape_equiv(reference, obs_space)
        if not fits:
            return SpaceMismatch(j, "observation_space", reference, obs_space), spaces
        if env.action_space != first.action_space:
            return SpaceMismatch(j, "action_space", first.action_space, env.action_space), spaces
    return None, spaces


class WorkerCore:
    """One worker's group and its command handlers, independent of how commands arrive."""

    def __init__(self, index: int, options: WorkerOptions) -> None:
        self.index = index
        self.options = options
        self.envs: Any = None
        self.group: EnvGroup | VectorGroup | CopyGroup | None = None
        self._handlers: dict[Command, Callable[[Any], Any]] = {}

    def build(self, group_fn_bytes: bytes) -> Hello:
        """Build the envs with the cloudpickled group builder and describe them."""
        group_fn: Callable[[], Any] = cloudpickle.loads(group_fn_bytes)
        built = group_fn()
        if isinstance(built, AgentCopies):  # hook: copies of a multi-agent env describe themselves
            self.envs = built
            return built.hello()
        if isinstance(built, gym.vector.VectorEnv):
            self.envs = built
            return Hello(
                num_envs=built.num_envs,
                observation_space=built.single_observation_space,
                action_space=built.single_action_space,
                metadata=dict(built.metadata),
                render_mode=built.render_mode,
                spec=built.spec,
                mismatch=None,
                native_autoreset=built.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP),
            )
        envs = list(built)
        if not envs:
            raise ValueError(f"the env group of worker {self.index} is empty; each needs one env or more")
        self.envs = envs
        mismatch, spaces = _check_group(envs, self.options.observation_mode)
        first = envs[0]
        return Hello(
            num_envs=len(envs),
            observation_space=first.observation_space,
            action_space=first.action_space,
            metadata=dict(first.metadata),
            render_mode=first.render_mode,
            spec=first.spec,
            mismatch=mismatch,
            native_autoreset=None,
            observation_spaces=spaces,
        )

    def attach(self, attach: Attach, buffers: Buffers) -> None:
        """Wire the group to its rows of the buffers; commands can be handled from now on."""
        group: EnvGroup | VectorGroup | CopyGroup
        if isinstance(self.envs, AgentCopies):  # hook: multi-agent copies make their own group
            group = self.envs.make_group(buffers)
        elif isinstance(self.envs, gym.vector.VectorEnv):
            group = VectorGroup(self.envs, buffers)
        else:
            group = EnvGroup(self.envs, attach.autoreset_mode, buffers)
        self.group = group

        def reset(args: ResetArgs) -> Any:
            return group.reset(args.seeds, args.options, args.mask), buffers.payload()

        def step(actions: Any) -> Any:
            if actions is None:  # in the shared rows, which the next step rewrites: take a copy
                actions = tree_copy(buffers.actions)
            return group.step(actions), buffers.payload()

        def call(args: CallArgs) -> Any:
            return group.call(args.name, args.args, args.kwargs)

        def set_attr(args: tuple[str, list[Any]]) -> None:
            group.set_attr(*args)

        self._handlers = {
            Command.RESET: reset,
            Command.STEP: step,
            Command.CALL: call,
            Command.SET_ATTR: set_attr,
            Command.RENDER: lambda _: group.render(),
            Command.CLOSE: lambda _: group.close(),
        }

    def detach(self) -> None:
        """Drop the group and every handler (they hold views of the buffers)."""
        self.group = None
        self._handlers = {}

    def handle(self, command: Command, load: Callable[[], Any]) -> tuple[bool, Any]:
        """Run one command; ``load()`` gives its payload. Returns ``(ok, result or PackedException)``.

        The payload is loaded inside the guard: an argument that cannot be unpickled here is
        that call's error, with its traceback, and the worker carries on.
        """
        group = self.group
        assert group is not None, "attach() comes before any command"
        group.blame = None
        try:
            return True, self._handlers[command](load())
        except BaseException as exc:
            return False, PackedException(exc, group.blame)


def _exit_with_parent() -> None:
    """Leave at once when the parent process ends, however it ended (no orphans).

    A thread blocked on the parent's sentinel costs nothing while the parent lives; pipe EOF alone
    is not enough because other processes may hold copies of our pipe's ends.
    """
    parent = parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="vecenv-parent-watch", daemon=True).start()


def _setup_process(options: WorkerOptions) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # fork: give up what belongs to the parent (other vector envs' blocks, parent pipe ends).
    drop_inherited_mappings()
    for conn in list(PARENT_ENDS):
        conn.close()
    if options.cpu is not None:
        os.sched_setaffinity(0, {options.cpu})
    if options.threads is not None:
        from vecenv.threads import limit_threads

        limit_threads(options.threads)
    _exit_with_parent()


def worker_main(index: int, conn: Connection, group_fn_bytes: bytes, options: WorkerOptions) -> None:
    """Entry point of worker process ``index``; ``group_fn_bytes`` is a cloudpickled group builder.

    The builder returns the list of envs this worker hosts, one native ``VectorEnv``, or the
    copies of a multi-agent env (a :class:`vecenv.multiagent.copies.AgentCopies`).
    SIGINT is ignored: Ctrl+C belongs to the parent, which closes the workers itself.
    """
    _setup_process(options)
    core = WorkerCore(index, options)
    try:
        try:
            # cloudpickle: an env spec may hold lambdas (wrappers built with them).
            message = encode_reply(0, True, core.build(group_fn_bytes), cloudpickle.dumps)
        except BaseException as exc:
            conn.send_bytes(encode_reply(0, False, PackedException(exc, None)))
            return
        conn.send_bytes(message)
        attach: Attach = conn.recv()
        fd = reduction.recv_handle(conn) if Buffers.needs_fd(attach.buffers) else None
        buffers = Buffers.attach(attach.buffers, attach.start, attach.start + attach.num_envs, fd)
        try:
            core.attach(attach, buffers)
            _serve(core, conn, options.spin)
        finally:
            core.detach()
            buffers.close()  # the group and its views are gone by now
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the parent went away; nothing is left to answer
    finally:
        conn.close()


def _serve(core: WorkerCore, conn: Connection, spin: float = 0.0) -> None:
    """Answer commands until CLOSE. One reply per command, tagged with the command's call id.

    Waking a process that sleeps on a pipe costs the writer tens of microseconds (on a virtual
    machine, an interrupt to a halted core), as much as a CartPole group's whole step. So where
    the worker has a core of its own (``spin > 0``), it polls for up to ``spin`` seconds after
    each reply before it sleeps on the pipe. A poll that catches nothing (a learner busy between
    steps) makes it sleep at once for the next :data:`SPIN_BACKOFF` commands, so that a vector
    env used with pauses between steps spends almost no CPU waiting.
    """
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    awake = Spin(spin)
    while True:
        awake.poll(poller)
        command, call_id, load = decode_command(conn.recv_bytes())
        ok, result = core.handle(command, load)
        try:
            reply = encode_reply(call_id, ok, result)
        except BaseException as exc:
            # A result that cannot be pickled is the caller's error to see, not a reason to die.
            reply = encode_reply(call_id, False, PackedException(exc, None))
        conn.send_bytes(reply)
        if command is Command.CLOSE:
            return


class Spin:
    """Polling without sleeping, bounded, before a blocking wait (the workers' and the parent's).

    :meth:`poll` polls for up to ``seconds`` (never past ``limit``); one that catches nothing
    makes the next :data:`SPIN_BACKOFF` calls return at once, so that waits which are long
    anyway (a learner busy between steps) go straight to sleep. ``seconds=0`` never polls.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._skip = 0

    def poll(self, poller: Any, limit: float | None = None) -> list[tuple[int, int]]:
        """What ``poller`` reports ready within the spin (``[]``: sleep on it now)."""
        if not self.seconds or limit == 0:
            return []
        if self._skip:
            self._skip -= 1
            return []
        deadline = time.perf_counter() + (self.seconds if limit is None else min(self.seconds, limit))
        while True:
            ready: list[tuple[int, int]] = poller.poll(0)
            if ready:
                return ready
            if time.perf_counter() >= deadline:
                self._skip = SPIN_BACKOFF
                return []
