"""The parent-hosted group: worker 0 runs in this process, the other groups in worker processes.

:class:`InlineWorker` is the same :class:`~vecenv.worker.core.WorkerCore` that a worker process
runs, fed the same encoded commands; it runs when the parent waits, i.e. after the commands to
the other workers are out, so it steps while they step. One process fewer and no wake-up for
that group; the price is that it runs in the parent: a hang there cannot be timed out and a
crash there is the parent's.

:class:`ParentHostedFirst` is the transport for that layout: worker 0 is the inline worker,
workers ``1..k-1`` are workers ``0..k-2`` of an ordinary
:class:`~vecenv.transports.process.ProcessTransport`, which knows nothing of the inline one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from vecenv.errors import PackedException
from vecenv.interrupts import HeldInterrupt
from vecenv.transports.base import CannotRestart, Death, DeathCause, Event, Reply, Transport
from vecenv.transports.process import ProcessTransport
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import Attach, Command, WithFd, decode_command, encode_for_pipe
from vecenv.worker.builders import pickle_group
from vecenv.worker.core import WorkerCore, WorkerOptions

__all__ = ["InlineWorker", "ParentHostedFirst", "on_core"]


class InlineWorker:
    """A worker hosted by the parent: a WorkerCore fed the same messages as a process."""

    def __init__(self, options: WorkerOptions) -> None:
        self.core = WorkerCore(0, options, own_process=False)  # the parent's generators stay the caller's
        # Commands not yet run, each with the descriptor that came with it (a duplicate).
        self.pending: list[tuple[bytes, int | None]] = []
        # Replies made by a run that an interrupt ended, for the next run.
        self.kept: list[Event] = []
        self.hello: Reply | None = None
        self.buffers: Buffers | None = None

    def build(self, group_fn: Callable[[], Any]) -> None:
        try:
            self.hello = Reply(0, 0, True, self.core.build(pickle_group(group_fn, 0)))
        except BaseException as exc:
            self.hello = Reply(0, 0, False, PackedException(exc, None))

    def attach(self, attach: Attach, buffers: Buffers) -> None:
        """Map the parent's block a second time for this group, and wire the group to it.

        The mapping is recorded before a Ctrl+C may land: one raised between the two would take
        the new mapping up with its frames, where no ``close()`` reaches it, and a traceback
        kept by the caller would keep it mapped."""
        block = buffers.block
        with HeldInterrupt():  # maps and records, runs no env code
            fd = os.dup(block.fd) if block is not None and block.fd is not None else None
            self.buffers = Buffers.attach(attach.buffers, attach.start, attach.start + attach.num_envs, fd)
        self.core.attach(attach, self.buffers)

    def run(self) -> list[Event]:
        """Answer every command sent since the last run, in order.

        A Ctrl+C (or another signal handler's exception) while a command runs here is the
        parent's own: it is raised at once, as in any wait, never packed as that command's
        reply, which a command nobody waits for (a rollout block's) would drop, letting the
        commands queued after it run as if nothing had happened. The interrupted command is
        answered with the interrupt and the replies already made are kept for the next run
        (the call that was interrupted abandons them); the commands after it run then.
        """
        replies, self.kept = self.kept, []
        if self.hello is not None:
            replies.append(self.hello)
            self.hello = None
        running: int | None = None  # the call id of a command taken off the queue, not yet answered
        try:
            while self.pending:
                data, fd = self.pending[0]
                command, call_id, load = decode_command(data)
                # Mapping a rollout block runs no env code, so Ctrl+C waits for it: cut short,
                # it would leave the block's descriptor open for good.
                with HeldInterrupt() if command is Command.ROLLOUT_BLOCK else contextlib.nullcontext():
                    running = call_id
                    del self.pending[0]
                    cpu = self.core.options.cpu
                    if cpu is not None and command is Command.ROLLOUT:
                        with on_core(cpu):
                            ok, result = self.core.handle(command, load, fd, interrupts=True)
                    else:  # a step's path pays no context manager
                        ok, result = self.core.handle(command, load, fd, interrupts=True)
                    replies.append(Reply(0, call_id, ok, result))
                    running = None
        except BaseException as exc:
            if running is not None:
                cut = PackedException(exc, None)
                cut.raised = True
                replies.append(Reply(0, running, False, cut))
            self.kept = replies
            raise
        return replies

    def send(self, message: bytes | WithFd) -> None:
        """Queue a command for the next :meth:`run` (a descriptor beside it is duplicated now:
        the parent may close its own before the command runs). Ctrl+C is held meanwhile: raised
        between the duplicate and the queue, it would leave the duplicate open for good."""
        if isinstance(message, WithFd):
            with HeldInterrupt():
                self.pending.append((message.data, os.dup(message.fd)))
        else:
            self.pending.append((message, None))

    def drop_pending(self) -> None:
        """Forget the commands not run yet (and close the descriptors that came with them)."""
        for _, fd in self.pending:
            if fd is not None:
                os.close(fd)
        self.pending.clear()

    def release(self) -> None:
        self.core.detach()
        self.core.envs = None
        self.drop_pending()
        self.kept = []
        if self.buffers is not None:
            self.buffers.close()
            self.buffers = None


@contextlib.contextmanager
def on_core(cpu: int | None) -> Iterator[None]:
    """The calling thread on core ``cpu`` meanwhile, then back on the cores it had (``None``,
    or a core the thread may not use: left where it is).

    With ``pin_cpus`` the group this process hosts is worker 0, and its rollouts run on the
    first core while the worker processes have the others: unpinned, a worker woken by the
    rollout's command was often queued on the core where this process went on to step its own
    group, and started only when that group was done. Only rollouts move: a step's few tens of
    microseconds would pay the two system calls on every step."""
    before = None
    # The pinning is inside the ``try``: a Ctrl+C held back while the thread is moved is raised
    # as the held block ends, once ``before`` is known, and the ``finally`` moves it back. The
    # move back is held too: a Ctrl+C just before it would leave the thread on one core for good.
    try:
        if cpu is not None:
            with HeldInterrupt():  # a Ctrl+C between the two calls would leave the thread pinned
                try:
                    before = os.sched_getaffinity(0)
                    os.sched_setaffinity(0, {cpu})
                except OSError:  # the core went away, or a cpuset no longer allows it
                    before = None
        yield
    finally:
        if before is not None:
            with HeldInterrupt(), contextlib.suppress(OSError):
                os.sched_setaffinity(0, before)


class ParentHostedFirst(Transport):
    """Worker 0 in this process (:class:`InlineWorker`), the rest behind ``processes``."""

    shares_memory = True

    def __init__(self, processes: ProcessTransport, options: WorkerOptions) -> None:
        self.processes_transport = processes
        self.inline = InlineWorker(options)

    def launch(self, group_fns: Sequence[Callable[[], Any]]) -> None:
        self.processes_transport.launch(group_fns[1:])
        self.inline.build(group_fns[0])

    def attach(self, worker: int, attach: Attach, buffers: Buffers, timeout: float | None = None) -> None:
        if worker == 0:
            self.inline.attach(attach, buffers)
        else:
            self.processes_transport.attach(worker - 1, attach, buffers, timeout)

    def encode(self, command: Command, call_id: int, payload: Any) -> bytes | WithFd:
        return encode_for_pipe(command, call_id, payload)

    def send(self, worker: int, message: bytes | WithFd, timeout: float | None = None) -> None:
        if worker == 0:
            self.inline.send(message)
        else:
            self.processes_transport.send(worker - 1, message, timeout)

    def poll(self, workers: Sequence[int], timeout: float | None) -> list[Event]:
        if len(workers) == 1 and workers[0] == 0:  # every env in this process (num_workers=0)
            return self.inline.run()
        events: list[Event] = []
        if 0 in workers:
            # The parent's own group runs now: the other workers already have their commands.
            events = self.inline.run()
            if events:
                timeout = 0.0
        others = [i - 1 for i in workers if i != 0]
        if not others:
            return events
        # The process transport waits until it has an event or the timeout has passed.
        return events + [_shifted(e) for e in self.processes_transport.poll(others, timeout)]

    def drop_queued(self) -> None:
        self.inline.drop_pending()

    def sole_core(self) -> WorkerCore | None:
        return self.inline.core if not self.processes_transport.processes else None

    def cause_of_death(self, worker: int) -> DeathCause:
        return self.processes_transport.cause_of_death(worker - 1)

    def ended(self, workers: Sequence[int]) -> list[int]:
        # The parent's own group (worker 0) cannot end without the parent.
        return [i + 1 for i in self.processes_transport.ended([w - 1 for w in workers if w > 0])]

    def release_fds(self) -> None:
        self.processes_transport.release_fds()

    def relaunch(self, worker: int) -> None:
        if worker == 0:
            raise CannotRestart("the group hosted by the parent cannot be restarted")
        self.processes_transport.relaunch(worker - 1)

    def kill(self) -> None:
        self.processes_transport.kill()

    def abort(self, reason: str) -> None:
        self.processes_transport.abort(reason)

    def stop(self, deadline: float, closing: Sequence[int] = ()) -> None:
        self.inline.release()
        self.processes_transport.stop(deadline, [i - 1 for i in closing if i != 0])

    @property
    def spin(self) -> float:
        """Seconds parent and workers poll before sleeping (see ``ProcessTransport.spin``)."""
        return self.processes_transport.spin

    @property
    def pids(self) -> list[int | None]:
        """Each worker's process id, ``None`` for the group hosted here."""
        return [None, *self.processes_transport.pids]

    @property
    def processes(self) -> list[Any]:
        """Each worker's process, ``None`` for the group hosted here."""
        return [None, *self.processes_transport.processes]

    @property
    def conns(self) -> list[Any]:
        """Each worker's pipe, ``None`` for the group hosted here."""
        return [None, *self.processes_transport.conns]


def _shifted(event: Event) -> Event:
    """An event of the process transport's worker ``i``: ours is worker ``i + 1``."""
    if isinstance(event, Reply):
        return Reply(event.worker + 1, event.call_id, event.ok, event.result)
    return Death(event.worker + 1)
