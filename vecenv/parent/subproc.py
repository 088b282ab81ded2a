"""The process backend's vector env: :class:`SubprocVectorEnv`, env groups in worker processes.

It checks its arguments, splits the env constructors into groups (or takes the groups
``from_groups`` was given), chooses the start method and builds a
:class:`~vecenv.transports.process.ProcessTransport`; everything after that is
:class:`~vecenv.parent.vector_env.GroupVectorEnv`'s constructor.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from vecenv.checks import (
    check_batch_size,
    check_context,
    check_env_fns,
    check_flag,
    check_group_fns,
    check_num_workers,
    check_worker_nice,
)
from vecenv.machine import check_may_start_processes, guard_main, pinned_core
from vecenv.options import DEFAULTS, VectorOptions
from vecenv.parent.groups import WorkerGroups, split_groups
from vecenv.parent.sizing import WorkerChoice, choose_num_workers
from vecenv.parent.vector_env import GroupVectorEnv
from vecenv.transports.base import Transport
from vecenv.transports.inline import ParentHostedFirst
from vecenv.transports.process import ProcessTransport
from vecenv.worker.core import WorkerOptions

__all__ = ["SubprocVectorEnv"]


@dataclasses.dataclass(frozen=True)
class ProcessOptions:
    """How the worker processes are started and run, as checked by the constructor."""

    daemon: bool
    pin_cpus: bool
    worker_nice: int


class SubprocVectorEnv(GroupVectorEnv):
    """A Gymnasium vector env whose envs run in a few worker processes, a group per worker.

    Results are identical to ``gymnasium.vector.SyncVectorEnv`` for the same seeds and actions,
    in every autoreset mode. Observations, actions, rewards and flags live in shared memory;
    pipes carry only commands, non-empty infos and errors.

    Args:
        env_fns: callables that each return a ``gymnasium.Env``, split into ``num_workers``
            contiguous groups whose sizes differ by at most one; each is called where its group
            runs: in a worker, or in this process for a group it hosts (``num_workers=0``,
            ``inline_group``; ``"auto"`` also builds one extra env here to time it).
        num_workers: env groups; default ``min(len(env_fns), available cores)``, the cores this
            process may run on (its affinity mask, which container limits set). ``0`` keeps
            every env in this process (one inline group, no worker process). ``"auto"`` builds
            one extra env from ``env_fns[0]`` here, times a few of its steps, closes it, and
            picks 0 when all the envs' work per step is too small to pay for processes (a few
            cheap envs), one worker per env (at most 16 per core) when a step mostly waits
            (it keeps its core busy under a quarter of its time and waits at least 0.1 ms:
            a simulator in another process, a socket, a sleep), else one group per core with the parent stepping one
            of them (``inline_group``); :attr:`worker_choice` says what it chose and why (see
            :mod:`vecenv.parent.sizing`).
        inline_group: the parent hosts the first group itself and steps it while the workers
            step theirs: one process fewer and no wake-up for that group. (A step's command
            and each worker's completion are also published in shared memory, and parent and
            workers spin on them briefly before sleeping, which saves the wake-up of a
            sleeping process on every step; where the vector env's processes are no more than
            the cores, as with ``inline_group`` and one group per core, the spin keeps its
            core, else it yields it each round: see the guide.) That
            group runs in the parent: its env errors surface as any env's, but a hang there
            cannot be timed out and a crash there is the parent's.
        on_worker_death: ``"raise"`` (a dead worker breaks the vector env: ``WorkerDiedError``)
            or ``"restart"``: a new process rebuilds the same envs on the same rows and resets
            them; the call that saw the death returns normally. A step reports the restarted
            envs with ``truncations`` True, reward 0, their fresh reset observation and
            ``infos["worker_restarted"]``, in every autoreset mode (no ``final_obs`` under
            SAME_STEP: none survived; the next step steps the new episode); a reset, call or
            attribute read is answered by the new envs. Env ``i`` last reset with seed ``s`` is
            reseeded ``s + r * num_envs`` at the vector env's ``r``-th restart.
        threads_per_worker: BLAS/OpenMP threads in each worker (``OMP_NUM_THREADS`` and the
            like, set before the env module is imported, plus the libraries already loaded),
            so W workers do not run W x cores threads; variables you set yourself win.
            ``None`` leaves the libraries' defaults. The parent is never changed.
        seed_policy: how ``reset(seed=s)`` with an int seeds the envs: ``"sequential"`` (the
            default: env ``i`` gets ``s + i``, as ``SyncVectorEnv``) or ``"spawn"`` (env ``i``
            gets a 63-bit seed from ``numpy.random.SeedSequence(s).spawn(num_envs)[i]``, so runs
            with different seeds share no env seed); see :mod:`vecenv.seeding`. The same on every
            backend and worker count, in ``reset`` and ``async_reset`` and for restarted workers.
            The chosen policy is the attribute ``seed_policy``.
        max_restarts: with ``on_worker_death="restart"``, more than this many restarts within
            ``restart_window`` seconds (a death during a rebuild counts) raise
            ``WorkerDiedError`` as ``"raise"`` does.
        restart_window: the seconds over which ``max_restarts`` is counted.
        autoreset_mode: Gymnasium's autoreset mode (an ``AutoresetMode`` or its string value).
        copy: return copies of the observations. With ``copy=False`` the observations returned
            by ``reset``/``step`` are views into shared buffers that the next call overwrites.
        context: multiprocessing start method (``"fork"``, ``"forkserver"``, ``"spawn"``) or
            ``None`` for the platform default, except that a parent already running other
            threads (Ray, a notebook kernel, torch's pools) is not forked: it uses
            ``forkserver``, as Python 3.14 does by default, because a forked worker can inherit
            a lock one of those threads held and wait for it forever. Env constructors are sent
            with cloudpickle, so envs defined in ``__main__`` or as lambdas work with every
            method. ``spawn`` and ``forkserver`` import the main script again in each worker:
            built by a script's top-level code outside ``if __name__ == "__main__":``, a vector
            env forks instead when it chose the method (an ``UnguardedMainWarning``), and raises
            ``UnguardedMainError`` when you did, so that the script never runs twice.
        daemon: start the workers as daemon processes.
        shared_memory: with ``False`` every array travels through the pipes (for debugging and
            custom spaces); results are the same.
        observation_mode: as Gymnasium's: ``"same"`` (every env's observation space is equal),
            ``"different"`` (same shape and dtype; the batched space is built from every env's
            space), or ``(batched space, single space)``.
        batch_size: envs returned by each :meth:`recv` (asynchronous batches); ``num_envs``
            (the default) or, with groups of equal size, a multiple of the group size.
        pin_cpus: pin worker ``w`` to the ``w``-th core this process may run on (round robin).
            A group this process hosts (``inline_group``) is worker 0: the thread that runs one
            of its rollouts is on the first core meanwhile, and has its own cores back after
            (its steps, tens of microseconds each, are not moved).
        worker_nice: run every thread of the worker processes this much below this process's
            CPU priority (its nice value plus this, up to 19; default 0: the same). Where the
            workers and this process share too few cores, a worker woken for its next command
            or rollout then waits for a free core instead of taking this process's, so a
            training loop that starts a rollout and then updates (``rollout_async``) is not cut
            off while it sends the commands, and its update comes before the workers' steps.
            The price: workers that compete with this process, or with other programs, for the
            cores get less of them. A group this process hosts (``inline_group``) runs at its
            priority.
        start_timeout: seconds the workers may take to build their envs (default: no limit);
            past it the constructor raises :class:`~vecenv.errors.VecEnvTimeoutError` naming the
            workers still building their envs. It does not bound the env ``"auto"`` builds in
            this process to time a step (nothing in this process can be timed out).
        display_name: the class name its error messages give (default: its own, in
            :attr:`display_name`). A layer that builds this vector env for its caller
            (:class:`~vecenv.MultiAgentVectorEnv`, the SB3 and SuperSuit drop-ins) passes its
            own class name, so that an error names the class the caller built.

    Raises:
        ValueError, TypeError: bad arguments, named with what was expected and what was given.
        SpaceMismatchError: two envs report different spaces.
        WorkerDiedError: a worker died while building its envs.
        UnguardedMainError: see ``context``.
        DescriptorLimitError: ``RLIMIT_NOFILE`` leaves too few file descriptors to start a worker.
    """

    #: What ``num_workers="auto"`` chose and why (``None`` for an explicit count).
    worker_choice: WorkerChoice | None = None
    #: The multiprocessing start method the workers were started with; ``None`` when no
    #: worker process starts (``num_workers=0``, or one group hosted in this process with
    #: ``inline_group``): every env runs in this process.
    start_method: str | None = None

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]] | WorkerGroups,
        num_workers: int | str | None = None,
        *,
        autoreset_mode: AutoresetMode | str = DEFAULTS.autoreset_mode,
        copy: bool = DEFAULTS.copy,
        context: str | None = DEFAULTS.context,
        daemon: bool = DEFAULTS.daemon,
        shared_memory: bool = DEFAULTS.shared_memory,
        observation_mode: str | tuple[gym.Space, gym.Space] = DEFAULTS.observation_mode,
        batch_size: int | None = DEFAULTS.batch_size,
        pin_cpus: bool = DEFAULTS.pin_cpus,
        worker_nice: int = DEFAULTS.worker_nice,
        start_timeout: float | None = DEFAULTS.start_timeout,
        inline_group: bool = DEFAULTS.inline_group,
        on_worker_death: str = DEFAULTS.on_worker_death,
        max_restarts: int = DEFAULTS.max_restarts,
        restart_window: float = DEFAULTS.restart_window,
        threads_per_worker: int | None = DEFAULTS.threads_per_worker,
        seed_policy: str = DEFAULTS.seed_policy,
        display_name: str | None = DEFAULTS.display_name,
    ) -> None:
        # Checked before "auto" builds and times an env in this process.
        check_flag(shared_memory, "shared_memory")
        process = ProcessOptions(
            check_flag(daemon, "daemon"), check_flag(pin_cpus, "pin_cpus"), check_worker_nice(worker_nice)
        )
        groups: Sequence[Callable[[], Any]]
        if isinstance(env_fns, WorkerGroups):  # from_groups: one builder per worker, as given
            groups = env_fns.group_fns
            options = VectorOptions.pick(locals())
            inline = check_flag(inline_group, "inline_group")
        else:
            fns = check_env_fns(env_fns)
            check_flag(inline_group, "inline_group")  # before auto may set it
            if num_workers == "auto":
                self.worker_choice = choose_num_workers(fns[0], len(fns))
                num_workers = self.worker_choice.num_workers
                inline_group = inline_group or self.worker_choice.inline_group
            workers = check_num_workers(num_workers, len(fns))
            groups = split_groups(fns, max(1, workers))
            check_batch_size(batch_size, [len(g.env_fns) for g in groups])
            options = VectorOptions.pick(locals())
            inline = inline_group or workers == 0
        transport = self._connect(groups, options, context, process, inline)
        super().__init__(transport, groups, options, shared_memory)

    @classmethod
    def from_groups(
        cls,
        group_fns: Sequence[Callable[[], Sequence[gym.Env] | gym.vector.VectorEnv]],
        *,
        autoreset_mode: AutoresetMode | str = DEFAULTS.autoreset_mode,
        copy: bool = DEFAULTS.copy,
        context: str | None = DEFAULTS.context,
        daemon: bool = DEFAULTS.daemon,
        shared_memory: bool = DEFAULTS.shared_memory,
        observation_mode: str | tuple[gym.Space, gym.Space] = DEFAULTS.observation_mode,
        batch_size: int | None = DEFAULTS.batch_size,
        pin_cpus: bool = DEFAULTS.pin_cpus,
        worker_nice: int = DEFAULTS.worker_nice,
        start_timeout: float | None = DEFAULTS.start_timeout,
        on_worker_death: str = DEFAULTS.on_worker_death,
        max_restarts: int = DEFAULTS.max_restarts,
        restart_window: float = DEFAULTS.restart_window,
        threads_per_worker: int | None = DEFAULTS.threads_per_worker,
        seed_policy: str = DEFAULTS.seed_policy,
        display_name: str | None = DEFAULTS.display_name,
        inline_group: bool = DEFAULTS.inline_group,
    ) -> SubprocVectorEnv:
        """One worker per callable; each returns the list of envs that worker hosts (or a
        native ``gymnasium.vector.VectorEnv``).

        The group sizes are learned in the handshake; env indices follow the order of
        ``group_fns`` and, within a group, the order of the returned list. The other
        arguments are the constructor's (``inline_group``: the parent hosts the first group).
        """
        return cls(
            WorkerGroups(check_group_fns(group_fns)),
            autoreset_mode=autoreset_mode,
            copy=copy,
            context=context,
            daemon=daemon,
            shared_memory=shared_memory,
            observation_mode=observation_mode,
            batch_size=batch_size,
            pin_cpus=pin_cpus,
            worker_nice=worker_nice,
            start_timeout=start_timeout,
            on_worker_death=on_worker_death,
            max_restarts=max_restarts,
            restart_window=restart_window,
            threads_per_worker=threads_per_worker,
            seed_policy=seed_policy,
            display_name=display_name,
            inline_group=inline_group,
        )

    def _connect(
        self,
        groups: Sequence[Callable[[], Any]],
        options: VectorOptions,
        context: Any,
        process: ProcessOptions,
        inline: bool,
    ) -> Transport:
        """The process transport (with the first group in this process when ``inline``)."""
        ctx = check_context(context)
        chosen = context is not None or multiprocessing.get_start_method(allow_none=True) is not None
        starts_processes = not (inline and len(groups) == 1)
        if starts_processes:
            name = options.display_name or type(self).__name__
            check_may_start_processes(name)
            method = guard_main(ctx.get_start_method(), chosen, name, "context")
            ctx = multiprocessing.get_context(method)
        self.start_method = ctx.get_start_method() if starts_processes else None
        mode = options.worker_observation_mode
        choice = self.worker_choice
        processes = ProcessTransport(
            ctx,
            daemon=process.daemon,
            pin_cpus=process.pin_cpus,
            nice=process.worker_nice,
            observation_mode=mode,
            threads=options.threads,
            first_index=int(inline),
            method_chosen=chosen,
            auto=None
            if choice is None
            else f"num_workers='auto' asked for {choice.num_workers} workers ({choice.reason})",
        )
        if not inline:
            return processes
        # pin_cpus: the group this process hosts is worker 0, on the first core while it runs.
        cpu = pinned_core(0) if process.pin_cpus else None
        return ParentHostedFirst(processes, WorkerOptions(mode, cpu))
