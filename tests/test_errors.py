"""Every error vecenv raises is a :class:`vecenv.errors.VecEnvError`, with the builtin base it had.

An AST walk over ``vecenv/`` lists every ``raise <builtin exception>(...)``; only the cases below
may remain, each for a reason a ``VecEnvError`` cannot serve. Exceptions that env code raised
are re-raised as they are (``raise exc``), as Gymnasium's ``SyncVectorEnv`` does: the walk does
not see those. Gymnasium's errors of the call order (``AlreadyPendingCallError``, ...) are raised
as ``vecenv.errors`` subclasses that are both.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import gymnasium.error
import pytest

import vecenv
import vecenv.errors
from vecenv.datasets import errors as dataset_errors
from vecenv.errors import VecEnvError

PACKAGE = Path(vecenv.errors.__file__).resolve().parent

#: (exception, where) pairs allowed to stay builtin; ``where`` is a function name or a file.
ALLOWED = {
    # The attribute protocol: a module's or a wrapper's __getattr__ says "no such attribute"
    # with AttributeError (hasattr, getattr with a default and copy rely on it).
    ("AttributeError", "__getattr__"),
    # SB3's VecEnvWrapper.__getattr__ asks getattr_recursive, which follows the same protocol.
    ("AttributeError", "getattr_recursive"),
    # The abstract methods of the multi-agent group's base, which its subclasses implement.
    ("NotImplementedError", "group.py"),
    # `python -m vecenv.datasets`: the exit status of the command, not an error.
    ("SystemExit", "__main__.py"),
    # The /proc reader of the benchmark imports nothing of vecenv (it measures processes whose
    # memory an import would change); callers catch ProcessLookupError.
    ("ProcessLookupError", "procfs.py"),
    # vecenv-collect's SIGINT handler raises what Python's own raises for Ctrl+C.
    ("KeyboardInterrupt", "_raise_interrupt"),
    # json's `default=` protocol: TypeError for a value it cannot write.
    ("TypeError", "json_default"),
    # The reply reader raises what Connection.recv_bytes raises for a pipe closed part-way; the
    # process transport catches it and reports the worker dead.
    ("EOFError", "receiving.py"),
}


def _builtin_raises() -> list[tuple[str, str, str]]:
    """``(exception, enclosing function or "<module>", "file:line")`` for each builtin raise."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for function, node in _walk(tree, "<module>"):
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = exc.id if isinstance(exc, ast.Name) else None
            if name is not None and isinstance(getattr(builtins, name, None), type):
                if issubclass(getattr(builtins, name), BaseException):
                    found.append((name, function, f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"))
    return found


def _walk(node: ast.AST, function: str):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _walk(child, child.name)
        else:
            if isinstance(child, ast.Raise) and child.exc is not None:
                yield function, child
            yield from _walk(child, function)


def _allowed(name: str, function: str, where: str) -> bool:
    file = Path(where.split(":")[0]).name
    return any(n == name and w in ("*", function, file) for n, w in ALLOWED)


def test_every_error_raised_is_a_vecenv_error() -> None:
    raises = _builtin_raises()
    assert len(raises) > 5, "the walk found too few raises: it no longer sees the package"
    bare = [
        f"{where}: raise {name}(...) in {function}"
        for name, function, where in raises
        if not _allowed(name, function, where)
    ]
    assert bare == [], "raise a VecEnvError subclass with the same builtin base instead:\n" + "\n".join(bare)


@pytest.mark.parametrize(
    ("error", "base"),
    [
        (vecenv.errors.InvalidArgumentError, ValueError),
        (vecenv.errors.ArgumentTypeError, TypeError),
        (vecenv.errors.InvalidSeedError, ValueError),
        (vecenv.errors.InvalidSeedError, gymnasium.error.Error),
        (vecenv.errors.SeedTypeError, TypeError),
        (vecenv.errors.SeedTypeError, gymnasium.error.Error),
        (vecenv.errors.InvalidStateError, RuntimeError),
        (vecenv.errors.MissingDependencyError, ImportError),
        (vecenv.errors.EnvIndexError, IndexError),
        (dataset_errors.OutputExistsError, FileExistsError),
        (dataset_errors.DatasetNotFoundError, FileNotFoundError),
        (dataset_errors.MinariNotInstalledError, ImportError),
        (dataset_errors.NoEpisodesError, ValueError),
    ],
)
def test_each_error_keeps_its_builtin_base(error: type, base: type) -> None:
    """``except ValueError`` (what callers wrote before) and ``except VecEnvError`` both catch it."""
    assert issubclass(error, VecEnvError) and issubclass(error, base)
    with pytest.raises(base, match="the message"):
        raise error("the message")


@pytest.mark.parametrize(
    ("error", "gym_error", "args"),
    [
        (vecenv.errors.AlreadyPendingCallError, gymnasium.error.AlreadyPendingCallError, ("the message", "step")),
        (vecenv.errors.NoAsyncCallError, gymnasium.error.NoAsyncCallError, ("the message", "step")),
        (vecenv.errors.ClosedEnvironmentError, gymnasium.error.ClosedEnvironmentError, ("the message",)),
        (vecenv.errors.UnknownEnvIdError, gymnasium.error.NameNotFound, ("the message",)),
    ],
)
def test_gymnasium_errors_are_raised_as_vecenv_errors(error: type, gym_error: type, args: tuple) -> None:
    """``except gymnasium.error.X`` (what Gymnasium's callers wrote) and ``except VecEnvError``
    both catch it; it survives pickling (a worker's, an executor's) and copies, with its ``name``."""
    import copy
    import pickle

    assert issubclass(error, VecEnvError) and issubclass(error, gym_error)
    raised = error(*args)
    for again in (pickle.loads(pickle.dumps(raised)), copy.deepcopy(raised)):
        assert type(again) is error and str(again) == "the message"
        assert getattr(again, "name", None) == getattr(raised, "name", None)


def test_no_module_raises_gymnasiums_own_errors() -> None:
    """The call-order errors come from ``vecenv.errors``, never straight from ``gymnasium.error``."""
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "errors.py"
        and any(
            s in path.read_text() for s in ("from gymnasium.error import", "raise gym.error.", "raise gymnasium.error.")
        )
    ]
    assert offenders == []


def test_calls_out_of_order_raise_both_errors() -> None:
    """End to end: ``step_wait`` with nothing in flight, then any call after ``close()``."""
    envs = vecenv.make("CartPole-v1", 2, num_workers=0)
    try:
        with pytest.raises(vecenv.errors.NoAsyncCallError, match="Calling `step_wait` without any prior call"):
            envs.step_wait()
    finally:
        envs.close()
    with pytest.raises(gymnasium.error.ClosedEnvironmentError) as info:
        envs.reset()
    assert isinstance(info.value, VecEnvError)
    with pytest.raises(gymnasium.error.NameNotFound, match="unknown environment id 'CartPol-v1'") as unknown:
        vecenv.make("CartPol-v1", 2)
    assert isinstance(unknown.value, VecEnvError)


def test_a_bad_argument_is_both_a_value_error_and_a_vecenv_error() -> None:
    """End to end: a refused argument is caught by either ``except``, with the same message."""
    from vecenv.checks import check_timeout

    with pytest.raises(ValueError, match="`timeout` must be None or a non-negative number") as info:
        check_timeout(-1.0)
    assert isinstance(info.value, VecEnvError)


@pytest.mark.parametrize(
    ("error", "keywords"),
    [
        (vecenv.errors.WorkerDiedError, {"worker": 1, "envs": range(2, 4), "exitcode": -9}),
        (
            vecenv.errors.WorkerDiedError,
            {
                "worker": 1,
                "envs": range(2, 4),
                "exitcode": -9,
                "deaths": (
                    vecenv.errors.DeadWorker(1, 41, range(2, 4), -9, "was killed by signal SIGKILL"),
                    vecenv.errors.DeadWorker(3, 43, range(6, 8), 3, "exited with code 3"),
                ),
            },
        ),
        (vecenv.errors.RemoteEnvError, {"type_name": "somewhere.SomeError"}),
        (vecenv.errors.MemoryLimitError, {"needed": 10, "available": 5, "limit": "/dev/shm"}),
    ],
)
def test_errors_with_keyword_arguments_survive_pickling_and_copies(error: type, keywords: dict) -> None:
    """Ray pickles an actor's error to the driver and Tune's ``Trainable.train`` (so RLlib's
    ``algo.train()``) copies each error of the chain it re-raises: a ``TypeError`` about the
    missing keywords took the place of a dead worker's ``WorkerDiedError`` there."""
    import copy
    import pickle

    raised = error("the message", **keywords)
    raised.add_note("where it came from")
    for again in (pickle.loads(pickle.dumps(raised)), copy.copy(raised), copy.deepcopy(raised)):
        assert type(again) is error and str(again) == "the message"
        assert {name: getattr(again, name) for name in keywords} == keywords
        assert again.__notes__ == ["where it came from"]


def test_a_worker_died_error_made_without_deaths_lists_its_one_worker() -> None:
    """``deaths`` is optional: code that makes the error as before gets the one worker it names."""
    error = vecenv.errors.WorkerDiedError("gone", worker=1, envs=range(2, 4), exitcode=-9)
    assert error.deaths == (vecenv.errors.DeadWorker(1, None, range(2, 4), -9, "died"),)
