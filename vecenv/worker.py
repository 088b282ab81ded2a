"""The worker loop: one process hosting one :class:`~vecenv.group.EnvGroup`.

The life of a worker: build the group's envs, send a :class:`~vecenv.protocol.Hello`, receive an
:class:`~vecenv.protocol.Attach` that maps its rows of the shared arrays, then answer one command
at a time until ``CLOSE`` or until the parent is gone. Every exception is caught and sent back as
a :class:`~vecenv.errors.PackedException`, so the worker itself only ends when asked to (or when
something outside Python kills it).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from multiprocessing import parent_process, reduction
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle
import gymnasium as gym
from gymnasium.vector import AutoresetMode

from vecenv.buffers import Buffers
from vecenv.errors import PackedException
from vecenv.group import EnvGroup, VectorGroup
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

__all__ = ["worker_main"]


def _exit_with_parent() -> None:
    """Leave at once when the parent process ends, however it ended (no orphans).

    A thread blocked on the parent's sentinel costs nothing while the parent lives; pipe EOF alone
    is not enough because sibling workers forked later may hold copies of our pipe's ends.
    """
    parent = parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="vecenv-parent-watch", daemon=True).start()


def _hello(envs: list[gym.Env]) -> Hello:
    first = envs[0]
    mismatch = None
    for j, env in enumerate(envs):
        for which in ("observation_space", "action_space"):
            if getattr(env, which) != getattr(first, which):
                mismatch = SpaceMismatch(j, which, getattr(first, which), getattr(env, which))
                break
        if mismatch is not None:
            break
    return Hello(
        num_envs=len(envs),
        observation_space=first.observation_space,
        action_space=first.action_space,
        metadata=dict(first.metadata),
        render_mode=first.render_mode,
        spec=first.spec,
        mismatch=mismatch,
        native_autoreset=None,
    )


def _native_hello(vec: gym.vector.VectorEnv) -> Hello:
    return Hello(
        num_envs=vec.num_envs,
        observation_space=vec.single_observation_space,
        action_space=vec.single_action_space,
        metadata=dict(vec.metadata),
        render_mode=vec.render_mode,
        spec=vec.spec,
        mismatch=None,
        native_autoreset=vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP),
    )


def worker_main(index: int, conn: Connection, group_fn_bytes: bytes, cpu: int | None = None) -> None:
    """Entry point of worker ``index``; ``group_fn_bytes`` is a cloudpickled group builder.

    The builder returns the list of envs this worker hosts, or one native ``VectorEnv``.
    SIGINT is ignored: Ctrl+C belongs to the parent, which closes the workers itself.
    ``cpu``: pin this process to that core.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    _exit_with_parent()
    try:
        try:
            group_fn: Callable[[], Any] = cloudpickle.loads(group_fn_bytes)
            built = group_fn()
            if isinstance(built, gym.vector.VectorEnv):
                envs: Any = built
                hello = _native_hello(built)
            else:
                envs = list(built)
                if not envs:
                    raise ValueError(f"the env group of worker {index} is empty; each needs one env or more")
                hello = _hello(envs)
            message = encode_reply(0, True, hello)
        except BaseException as exc:
            conn.send_bytes(encode_reply(0, False, PackedException(exc, None)))
            return
        conn.send_bytes(message)
        attach: Attach = conn.recv()
        fd = reduction.recv_handle(conn) if Buffers.needs_fd(attach.buffers) else None
        buffers = Buffers.attach(attach.buffers, attach.start, attach.start + attach.num_envs, fd)
        try:
            _serve(_make_group(envs, attach, buffers), conn)
        finally:
            buffers.close()  # the group and its views are gone by now
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the parent went away; nothing is left to answer
    finally:
        conn.close()


def _make_group(envs: Any, attach: Attach, buffers: Buffers) -> EnvGroup | VectorGroup:
    if isinstance(envs, gym.vector.VectorEnv):
        return VectorGroup(envs, buffers)
    return EnvGroup(envs, attach.autoreset_mode, buffers)


def _serve(group: EnvGroup | VectorGroup, conn: Connection) -> None:
    """Answer commands until CLOSE. One reply per command, tagged with the command's call id."""
    buffers = group.buffers

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

    handlers: dict[Command, Callable[[Any], Any]] = {
        Command.RESET: reset,
        Command.STEP: step,
        Command.CALL: call,
        Command.SET_ATTR: set_attr,
        Command.RENDER: lambda _: group.render(),
        Command.CLOSE: lambda _: group.close(),
    }
    while True:
        command, call_id, payload = decode_command(conn.recv_bytes())
        group.blame = None
        try:
            result = handlers[command](payload)
            # Encoded here, inside the try: a result that cannot be pickled is the caller's
            # error to see, not a reason for the worker to die.
            reply = encode_reply(call_id, True, result)
        except BaseException as exc:
            reply = encode_reply(call_id, False, PackedException(exc, group.blame))
        conn.send_bytes(reply)
        if command is Command.CLOSE:
            return
