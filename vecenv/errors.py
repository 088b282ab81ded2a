"""The errors a vector env raises, and the transport of exceptions out of workers.

Who is at fault decides the type:

* :class:`WorkerDiedError` -- something outside the env code killed a worker process
  (a segfault, ``os._exit``, SIGKILL, the OOM killer). The vector env is unusable afterwards.
* :class:`VecEnvTimeoutError` -- a ``*_wait(timeout=...)`` call ran out of time. The late replies
  are discarded when they arrive; the envs must be reset before the next step.
* :class:`NeedsResetError` -- a call made in a state where stepping would give wrong data: after
  an env raised or a wait timed out, or an ended env under ``AutoresetMode.DISABLED``.
* :class:`RemoteEnvError` -- an exception raised by env code that could not be rebuilt in the
  parent (it cannot be pickled or unpickled); it carries the type name, message and traceback.
* :class:`SpaceMismatchError` -- the handshake found envs whose spaces differ.
* :class:`CallInFlightError` -- ``close()`` from another thread could not end the call in flight.
* :class:`DescriptorLimitError` -- a worker could not be started within ``RLIMIT_NOFILE``.
* :class:`MemoryLimitError` -- a shared block (step buffers, a rollout block) would need more
  memory than the machine can give it; refused before anything is made.
* :class:`WeightsMismatchError` -- ``update_policy_weights`` got weights that do not fit the
  policy (keys, shapes, dtypes); refused before anything is sent.
* :class:`UnguardedMainError` -- workers would import a script that is still running its
  unguarded top-level code (and so run it again), or a worker loading its env constructors
  imports a module whose top-level code builds a vector env; :class:`UnguardedMainWarning` when
  vecenv avoids the first by forking instead.

Every other error vecenv raises is a :class:`VecEnvError` that keeps the builtin base code may
already catch: :class:`InvalidArgumentError` (a ``ValueError``), :class:`ArgumentTypeError` (an
argument of the wrong type: a ``TypeError``, and an ``InvalidArgumentError`` too),
:class:`InvalidStateError` (a ``RuntimeError``), :class:`MissingDependencyError` (an
``ImportError``) and :class:`EnvIndexError` (an ``IndexError``); ``except ValueError`` and
``except VecEnvError`` both catch a bad argument, and ``except TypeError`` one of the wrong type.

Calls made in the wrong order or after ``close()`` raise :class:`AlreadyPendingCallError`,
:class:`NoAsyncCallError` and :class:`ClosedEnvironmentError`, and an unknown env id
:class:`UnknownEnvIdError`: each is a :class:`VecEnvError` and also Gymnasium's error of the same
meaning, so ``except gymnasium.error.NoAsyncCallError`` catches it as it would Gymnasium's. A seed
``reset`` cannot use raises :class:`InvalidSeedError` (or :class:`SeedTypeError` for one of the
wrong type), both Gymnasium's ``Error`` as well, which ``Env.reset`` raises for such a seed.
"""

from __future__ import annotations

import multiprocessing
import pickle
import traceback
from typing import Any, NamedTuple

import cloudpickle
import gymnasium.error
import numpy as np

__all__ = [
    "VecEnvError",
    "WorkerDiedError",
    "DeadWorker",
    "VecEnvTimeoutError",
    "NeedsResetError",
    "RemoteEnvError",
    "SpaceMismatchError",
    "InvalidObservationError",
    "InvalidInfoError",
    "CallInFlightError",
    "PolicyOutputError",
    "DescriptorLimitError",
    "MemoryLimitError",
    "WeightsMismatchError",
    "PolicySpecError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "InvalidSeedError",
    "SeedTypeError",
    "InvalidStateError",
    "MissingMethodError",
    "NotCopyableError",
    "MissingDependencyError",
    "EnvIndexError",
    "AlreadyPendingCallError",
    "NoAsyncCallError",
    "ClosedEnvironmentError",
    "UnknownEnvIdError",
    "UnguardedMainError",
    "UnguardedMainWarning",
    "RemoteTraceback",
    "PackedException",
]


class VecEnvError(Exception):
    """Base class of every error that vecenv itself raises."""


def _rebuild_keyword_error(cls: type[BaseException], message: str, keywords: dict[str, Any]) -> BaseException:
    """Unpickle (or copy) an error whose ``__init__`` takes keyword-only arguments."""
    return cls(message, **keywords)


def _reduce_keyword_error(error: BaseException, names: tuple[str, ...]) -> tuple[Any, ...]:
    """``__reduce__`` of an error made as ``cls(message, **keywords)``: ``BaseException``'s own
    calls ``cls(*args)``, without the keywords, so ``pickle``, ``copy.copy`` and
    ``copy.deepcopy`` failed with a ``TypeError``, as Ray does on an error it hands on (Tune's
    ``Trainable.train`` copies the chain of causes, an actor's error is pickled to the driver)."""
    keywords = {name: getattr(error, name) for name in names}
    return _rebuild_keyword_error, (type(error), str(error), keywords), error.__dict__


class DeadWorker(NamedTuple):
    """One worker a :class:`WorkerDiedError` found dead: its index, its process id (``None``
    where it has none: a Ray actor not yet placed), its envs (``None``: not yet assigned), its
    exit code (a signal's is negative; ``None`` where it is unknown) and how it ended, in words
    ("was killed by signal SIGKILL")."""

    worker: int
    pid: int | None
    envs: range | None
    exitcode: int | None
    how: str


class WorkerDiedError(VecEnvError):
    """A worker process ended without being asked to.

    Raised by any call that waits on the worker (including the constructor) within about a
    second of its death. Not raised for exceptions in env code: those keep their own type.
    After it, every call but ``close()`` raises it again: the other workers are terminated,
    because the envs of the dead one are lost.

    ``worker``, ``envs`` and ``exitcode`` name the worker whose death was seen first.
    ``deaths`` lists every worker found dead when the error was made, that one first, each a
    :class:`DeadWorker` (several die together: all killed at once, an env that exits in every
    worker at the same step); the message names them all.
    """

    def __init__(
        self,
        message: str,
        *,
        worker: int,
        envs: range,
        exitcode: int | None,
        deaths: tuple[DeadWorker, ...] | None = None,
    ) -> None:
        super().__init__(message)
        self.worker = worker
        self.envs = envs
        self.exitcode = exitcode
        if deaths is None:
            deaths = (DeadWorker(worker, None, envs, exitcode, "died"),)
        self.deaths = tuple(deaths)

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduce_keyword_error(self, ("worker", "envs", "exitcode", "deaths"))

    def copy(self) -> WorkerDiedError:
        """The same error (its cause too), new and never raised (so it holds no traceback)."""
        error = WorkerDiedError(
            str(self), worker=self.worker, envs=self.envs, exitcode=self.exitcode, deaths=self.deaths
        )
        error.__cause__ = self.__cause__
        return error


class VecEnvTimeoutError(VecEnvError, multiprocessing.TimeoutError, TimeoutError):
    """A ``*_wait(timeout=...)`` ran out of time.

    An instance of both :class:`TimeoutError` and :class:`multiprocessing.TimeoutError`, which
    is what Gymnasium's ``AsyncVectorEnv`` raises. The timed-out call's results are never
    handed out: the next ``step`` raises :class:`NeedsResetError` until ``reset()`` is called.
    """


class NeedsResetError(VecEnvError, RuntimeError):
    """Stepping now would give wrong data; ``reset()`` (for the named envs) must come first.

    Raised before anything is sent to a worker, so the call changes nothing.
    """


class RemoteEnvError(VecEnvError):
    """An exception from env code that could not be rebuilt in the parent.

    ``type_name`` is the qualified name of the original type; the worker's formatted traceback is
    attached as ``__cause__`` (a :class:`RemoteTraceback`).
    """

    def __init__(self, message: str, *, type_name: str) -> None:
        super().__init__(message)
        self.type_name = type_name

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduce_keyword_error(self, ("type_name",))


class SpaceMismatchError(VecEnvError, RuntimeError, ValueError):
    """Two envs of one vector env have different observation or action spaces.

    A ``RuntimeError``, as ``SyncVectorEnv`` raises for the same case, and a ``ValueError``.
    ``mismatch``: where the handshake found it (the env's index, which space, both spaces),
    for a layer above that names its own units (the multi-agent copies); ``worker`` and
    ``worker_row``: the worker (group) that hosts that env and the env's place in its group.
    """

    mismatch: Any = None
    worker: int | None = None
    worker_row: int | None = None


class InvalidObservationError(VecEnvError, ValueError, TypeError):
    """An env returned an observation that does not fit its observation space.

    Raised in the worker, so it reaches the parent as any env error does: with a note naming
    the env and the call. A ``ValueError`` (wrong shape) and a ``TypeError`` (wrong dtype), the
    two errors ``SyncVectorEnv`` raises for the same observations.
    """


class InvalidInfoError(VecEnvError, TypeError):
    """An env's ``reset`` or ``step`` returned an info that is not a mapping (``None``, a list),
    or, in :class:`~vecenv.MultiAgentVectorEnv`, an agent's info holding a key the vector env
    sets itself on that row (``active``, ``copy_info``), which would replace it without a word.

    ``SyncVectorEnv`` fails on it too (an ``AttributeError`` when it batches the info: it reads
    ``items()``, so a mapping that is not a dict is taken, here as there); this one
    reaches the parent as any env error does, with a note naming the env and the call.
    """


class PolicyOutputError(VecEnvError, ValueError):
    """A policy running in the workers returned an output (its extras, its recurrent state)
    whose names, shape or dtype differ from what it gave at its first call, or from what the
    envs it acts for need. The message names the output, the expected and the received shape."""


class CallInFlightError(VecEnvError, RuntimeError):
    """``close()`` from another thread found a call still running after it ended the workers
    (a call stuck in env code that the parent itself hosts); the vector env is left open."""


class DescriptorLimitError(VecEnvError, OSError):
    """A worker, or a shared block (a rollout block, the step buffers, new weights' shared
    copy), could not be made: this process may open no more file descriptors
    (``RLIMIT_NOFILE``). Nothing of the workers started so far, or of the block, is left open."""


class MemoryLimitError(VecEnvError, MemoryError):
    """A block of memory (the step buffers, a rollout block) would need more than the machine
    can give it: ``needed`` and ``available`` bytes, ``limit`` naming the tightest limit
    (available memory, a cgroup, ``/dev/shm``, ``RLIMIT_FSIZE``, ``RLIMIT_AS``). Raised before
    anything is allocated, so the vector env is as it was."""

    def __init__(self, message: str, *, needed: int, available: int, limit: str) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available
        self.limit = limit

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduce_keyword_error(self, ("needed", "available", "limit"))


class WeightsMismatchError(VecEnvError, ValueError, TypeError):
    """``update_policy_weights`` got weights that do not fit the policy's module: keys missing or
    unexpected, a shape or dtype that differs, or not a state dict at all. Raised before anything
    is sent: every copy keeps the weights it had. A ``ValueError`` and a ``TypeError``."""


class UnguardedMainError(VecEnvError, RuntimeError):
    """The workers' start method would import the running script again while its top-level
    code, outside an ``if __name__ == "__main__":`` block, is what builds the vector env: the
    script would run once more in every worker. Raised before any process starts. Also raised
    in a worker, for the parent's constructor to raise, where loading its env constructors
    imports a module whose top-level code builds a vector env (each worker would build one)."""


class PolicySpecError(VecEnvError, ValueError):
    """A policy named by a string (``vecenv-collect --policy``) that cannot be turned into a
    policy: an unknown form, a module or attribute that does not import, a saved model that
    does not load or was trained on other spaces. The message names the value and says why."""


class InvalidArgumentError(VecEnvError, ValueError):
    """An argument, or a value handed over for the call (an env's spaces, a dataset's files), that
    the call cannot take: out of range, of the wrong length or shape, an unknown name. A
    ``ValueError``, as before; the message names the argument, what it expects and what it got."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of a type the call cannot take (a float where an int is needed, a policy that
    is none of the kinds a worker can run). A ``TypeError``, as Python's own calls raise for a
    wrong type, and an :class:`InvalidArgumentError` (so a ``ValueError``) too, so code written
    to catch a bad argument as that still catches it; the message names the argument, what it
    expects and what it got."""


class InvalidSeedError(InvalidArgumentError, gymnasium.error.Error):
    """A seed ``reset`` cannot use: a negative one, alone or in a list. An
    :class:`InvalidArgumentError` (a ``ValueError``), found before any env is reset, and
    Gymnasium's ``Error`` too, which ``Env.reset`` raises for such a seed (where
    ``SyncVectorEnv`` hands it on), so ``except gymnasium.error.Error`` still catches it."""


class SeedTypeError(InvalidSeedError, ArgumentTypeError):
    """A seed of a type ``reset`` cannot use (a float, a string, ``True``): an
    :class:`ArgumentTypeError` (a ``TypeError``) and an :class:`InvalidSeedError` (Gymnasium's
    ``Error``, which ``Env.reset`` raises for a seed that is not an int)."""


class InvalidStateError(VecEnvError, RuntimeError):
    """Something the call relies on is missing or came out of order: a rollout before its block
    or policy reached the worker, an autoreset mode's promised ``final_obs`` that an env did not
    give, a benchmark run that got other than it asked for; or the process cannot do it: worker
    processes in a daemonic process, a call in a child forked from the vector env's process. A
    ``RuntimeError``, as before."""


class MissingDependencyError(VecEnvError, ImportError):
    """An optional package a feature needs is not installed (Stable-Baselines3, imageio, torch,
    Minari); the message names the package and the extra that installs it. An ``ImportError``."""


class EnvIndexError(VecEnvError, IndexError):
    """An env index outside ``[-num_envs, num_envs)``. An ``IndexError``, as for a sequence."""


class AlreadyPendingCallError(VecEnvError, gymnasium.error.AlreadyPendingCallError):
    """A call started while another is pending (``step_async`` twice, ``reset`` between
    ``step_async`` and ``step_wait``), or made in the middle of a call running in the same
    thread (from a signal handler); ``name`` is the pending or running call. Gymnasium's error too."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Gymnasium's __init__ takes (message, name), its args hold the message alone.
        return type(self), (str(self), self.name), self.__dict__


class NoAsyncCallError(VecEnvError, gymnasium.error.NoAsyncCallError):
    """A ``*_wait`` (or ``recv``) with nothing of its kind in flight; ``name`` is the state the
    call expected. Gymnasium's error too."""

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.name), self.__dict__


class ClosedEnvironmentError(VecEnvError, gymnasium.error.ClosedEnvironmentError):
    """A call after ``close()``. Gymnasium's error too."""


class UnknownEnvIdError(VecEnvError, gymnasium.error.NameNotFound):
    """``vecenv.make`` (or ``vecenv-collect``) got an env id that is not registered; the message
    lists close matches. Gymnasium's ``NameNotFound`` too."""


class MissingMethodError(VecEnvError, AttributeError):
    """A native vector env group has no ``call`` or ``set_attr`` (``gymnasium.vector.VectorEnv``
    does not define them; ``SyncVectorEnv`` does), which ``call``, ``get_attr`` and ``set_attr``
    need to reach its envs; or env 0 has no ``metadata`` or ``render_mode``, which the vector
    env takes from it as ``SyncVectorEnv`` does. An ``AttributeError``, as a missing attribute is."""


class NotCopyableError(VecEnvError, TypeError):
    """A vector env was pickled or copied (``pickle``, ``copy.copy``, ``copy.deepcopy``, an
    argument to a spawned process): its workers (processes or Ray actors) and what connects them
    exist once, in the process that made it. A ``TypeError``, as for any object that cannot be pickled."""


class UnguardedMainWarning(UserWarning):
    """A vector env built by a script's unguarded top-level code starts its workers with
    ``fork``, the one start method that does not import the script again."""


class RemoteTraceback(Exception):
    """Carries the worker's formatted traceback as the ``__cause__`` of a re-raised exception."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


class PackedException:
    """An exception made ready to cross a pipe, whatever it holds.

    The worker keeps the exception object only when it survives a pickle round trip; the type
    name, message and formatted traceback always travel, so nothing is lost when it does not.
    """

    def __init__(
        self, exc: BaseException, env_index: int | None, detail: str | None = None, order: tuple[int, int] = (0, 0)
    ) -> None:
        self.type_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        try:
            self.message = str(exc)
        except Exception:  # a broken __str__ must not hide the original error
            self.message = f"<unprintable {type(exc).__name__}>"
        self.traceback = "".join(traceback.format_exception(exc))
        self.env_index = env_index
        self.detail = detail  # where within the call it happened ("at step 5 of the rollout ...")
        #: When within a call of many steps it happened, (step, 0 in the policy or 1 in an env):
        #: of several workers' errors the parent raises the one a plain loop would have met first.
        self.order = order
        #: Already raised in the parent: a Ctrl+C that cut a command of the parent's own group
        #: (the reply stands for the command, whose envs' state is then unknown).
        self.raised = False
        self.payload: bytes | None
        try:
            payload = cloudpickle.dumps(exc)
            pickle.loads(payload)
        except Exception:
            payload = None
        self.payload = payload

    def rebuild(self, note: str) -> BaseException:
        """Return the exception to raise in the parent, with the remote traceback as its cause."""
        exc: BaseException | None = None
        if self.payload is not None:
            try:
                exc = pickle.loads(self.payload)
            except Exception:
                exc = None
        if not isinstance(exc, BaseException):
            exc = RemoteEnvError(
                f"{self.type_name}: {self.message} (the exception could not be rebuilt "
                f"in the parent; its traceback is attached)",
                type_name=self.type_name,
            )
        exc.__cause__ = RemoteTraceback(self.traceback)
        exc.add_note(note)
        return exc


def describe(value: Any, limit: int = 80, dtype: bool = False) -> str:
    """A short, safe ``repr`` for error messages about user input: one line, at most ``limit``
    characters; ``dtype`` appends an array's dtype (which its repr may not show)."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    if dtype and isinstance(value, np.ndarray):
        text += f" (dtype {value.dtype})"
    return text if len(text) <= limit else text[: limit - 3] + "..."
