"""The ``vecenv-collect`` command line: ``collect`` and ``export`` (see ``--help``).

The parsers are in ``cli_arguments.py``, the end-of-run reports in ``cli_summary.py``; this
module checks what argparse cannot, builds the environments, runs the library, and turns its
errors into one ``vecenv-collect: error: ...`` line (``vecenv-collect export: error: ...`` for
``export``, as its parser says): exit status 2 for bad input, 1 when the
output cannot be written (a full disk, a read-only ``--out``), where what was written is kept
as a dataset marked incomplete. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
from gymnasium.vector import AutoresetMode, VectorEnv

from vecenv.checks import seed_list
from vecenv.datasets.cli_arguments import PROG, build_export_parser, build_parser, default_num_envs, minari_metadata
from vecenv.datasets.collection import collect
from vecenv.datasets.dataset import load
from vecenv.datasets.errors import (
    FLAGS,
    DatasetWriteError,
    MinariNotInstalledError,
    NoEpisodesError,
    PolicyError,
    UnsupportedSpaceError,
)
from vecenv.datasets.format import METADATA_FILE
from vecenv.datasets.policy_specs import PolicySpecError, load_policy
from vecenv.datasets.start_up import INTERRUPTED_AT_START
from vecenv.datasets.writer import check_out
from vecenv.factory import check_env_id, make
from vecenv.interrupts import Terminated, exit_status, sigterm_raises
from vecenv.machine import available_cpus

# Imported where used, not at start-up: the end-of-run reports (``cli_summary``) and the Minari
# output (``minari``), which the default collection needs neither of.


class _UsageError(Exception):
    """Bad command line input: reported as one ``vecenv-collect: error: ...`` line."""


class _RunError(Exception):
    """An env or the policy raised during the run: reported as one ``vecenv-collect: error:
    ...`` line (``--debug`` shows the traceback instead), with what was kept."""


def _parse_env_kwargs(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"--env-kwargs: expected a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise _UsageError(f"--env-kwargs: expected a JSON object, got {text!r}")
    return value


def _check_env_id(env_id: str) -> str:
    """The registered id ``env_id`` ('[module:]ID') names (an id without a version: its latest,
    as ``make_vec`` finds it); raise _UsageError unless it names one."""
    module = env_id.rpartition(":")[0]
    if module:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise _UsageError(
                f"--env {env_id!r}: cannot import module {module!r}: {type(exc).__name__}: {exc}"
            ) from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # Gymnasium's notes on the id stay warnings, whatever -W says
            return check_env_id(env_id)
    except gymnasium.error.NamespaceNotFound as exc:
        if module:
            raise _UsageError(f"--env: {exc}") from None
        # Gymnasium 1.x registers no plugin envs: ALE's, say, exist once ale_py is imported.
        raise _UsageError(
            f"--env: {exc} (an env that a package registers when imported is named with it: "
            f"--env PACKAGE:{env_id}, e.g. --env ale_py:ALE/Pong-v5)"
        ) from None
    except gymnasium.error.Error as exc:  # an unknown name, an old or missing version, a malformed id
        raise _UsageError(f"--env: {exc}") from None


def _check_minari_options(args: argparse.Namespace) -> None:
    """Raise _UsageError for Minari options without ``--format minari`` or without a use."""
    minari = args.format == "minari"
    if minari and not args.dataset_id:
        raise _UsageError("--dataset-id: required with --format minari (e.g. --dataset-id cartpole/random-v0)")
    if not minari:
        for option, value in (
            ("--dataset-id", args.dataset_id),
            ("--open-episodes", args.open_episodes),
            ("--minari-storage", args.minari_storage),
            *((f"--{k.replace('_', '-')}", v) for k, v in minari_metadata(args).items()),
        ):
            if value is not None:
                raise _UsageError(f"{option}: only with --format minari, got {option} {value}")
    if args.open_episodes is not None and args.episodes is not None:
        raise _UsageError("--open-episodes: only with --steps (--episodes N writes no open episodes)")


def _load_policy(args: argparse.Namespace) -> Any:
    try:
        return load_policy(args.policy, args.deterministic)
    except PolicySpecError as exc:
        raise _UsageError(str(exc)) from None


def _checked_output(args: argparse.Namespace) -> Path:
    """Where the output goes, checked before any environment is built: our format's dataset
    directory, or the Minari datasets root (which fails at once without Minari)."""
    if args.format == "minari":
        from vecenv.datasets.minari import check_minari_seeds, datasets_root, minari_target

        out = datasets_root(args.out)
        try:
            minari_target(
                args.dataset_id, args.out, args.overwrite, FLAGS, args.minari_storage or "hdf5", prepare=False
            )
            # The command's envs take the default (sequential) seeds, as collect() will record them.
            first_seeds = seed_list(args.seed, args.num_envs)
            check_minari_seeds(first_seeds, args.minari_storage or "hdf5", "--seed", str(args.seed))
        except (MinariNotInstalledError, ValueError, FileExistsError) as exc:
            raise _UsageError(str(exc)) from None
        except DatasetWriteError as exc:  # a read-only directory: the message without "[Errno 13]"
            raise _UsageError(str(exc.strerror)) from None
        return out
    out = _default_out(args)
    try:
        check_out(out, args.overwrite, FLAGS)
    except FileExistsError as exc:
        raise _UsageError(str(exc)) from None
    except DatasetWriteError as exc:
        raise _UsageError(str(exc.strerror)) from None
    return out


def _make_envs(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> VectorEnv:
    if args.ray_address is not None and args.backend != "ray":
        raise _UsageError(f"--ray-address: only with --backend ray, got --ray-address {args.ray_address}")
    backend_options: dict[str, Any] = {}
    if args.backend == "ray":  # Ray picks the worker count from the cluster's CPUs by default
        num_workers = args.num_workers
        backend_options = {"backend": "ray", "address": args.ray_address}
    else:
        num_workers = args.num_workers or min(available_cpus(), args.num_envs)
    try:
        return make(
            args.env,
            args.num_envs,
            num_workers,
            env_kwargs=env_kwargs,
            autoreset_mode=AutoresetMode[args.autoreset_mode.upper()],
            **backend_options,
        )
    except Exception as exc:
        raise _UsageError(
            f"could not create {args.num_envs} x {args.env!r} with --env-kwargs "
            f"{json.dumps(env_kwargs)}: {type(exc).__name__}: {exc}"
        ) from None


def _run(args: argparse.Namespace, command_line: str, before: _Before) -> int:
    """Validate the arguments, build the environments, collect, and report; ``before`` is
    filled in with what the output path held before the run, once the path is known."""
    out: Path | None = None
    try:
        try:
            env_kwargs = _parse_env_kwargs(args.env_kwargs)
            if os.getcwd() not in sys.path:  # like `python -m`: modules in the current directory import
                sys.path.append(os.getcwd())
            args.env = _check_env_id(args.env)
            _check_minari_options(args)
            policy = _load_policy(args)
            if args.steps is None and args.episodes is None:
                args.steps = 10000
            if args.num_envs is None:
                args.num_envs = default_num_envs(args.steps)
            if args.num_workers is not None and args.num_workers > args.num_envs:
                raise _UsageError(
                    f"--num-workers: expected at most --num-envs ({args.num_envs}), got {args.num_workers}"
                )
            before.record(args)
            out = _checked_output(args)
            envs = _make_envs(args, env_kwargs)
            _check_signals()  # one that came while the workers were forked may have been lost
        except _UsageError:
            # An import the options name (the env's or the policy's module, Minari) may turn the
            # signal's exception into its own error (a C extension interrupted as it initialises
            # fails with an ImportError): still Ctrl+C, not bad input.
            _check_signals()
            raise
    except KeyboardInterrupt:
        # Checking the options imports the env's and the policy's modules (and Minari), which
        # can take seconds: Ctrl+C there is as much "before any data" as during start-up.
        if out is not None:
            _drop_empty_directories(out, before.existed)
        print(INTERRUPTED_AT_START + _kept_at_start(args), file=sys.stderr)
        raise
    try:
        dataset = _collect(args, envs, policy, out, env_kwargs, command_line, before)
    finally:
        envs.close()
    if not args.quiet:
        from vecenv.datasets.cli_summary import dataset_summary, minari_summary

        print(minari_summary(dataset, out) if args.format == "minari" else dataset_summary(dataset))
    return 0


def _collect(
    args: argparse.Namespace,
    envs: VectorEnv,
    policy: Any,
    out: Path,
    env_kwargs: dict[str, Any],
    command_line: str,
    before: _Before,
) -> Any:
    """``collect`` as the arguments say; after Ctrl+C or an error, say what was kept.

    A run that ends before it writes anything (the policy's output refused at the first step,
    Ctrl+C during start-up) leaves nothing, and an output it was to replace with
    ``--overwrite`` as it was, so the same command, corrected, runs as it would have;
    ``before``: what the output path held before the run."""
    minari_options: dict[str, Any] = {}
    if args.format == "minari":
        minari_options = {
            "format": "minari",
            "dataset_id": args.dataset_id,
            "open_episodes": args.open_episodes or "truncate",
            "minari_metadata": minari_metadata(args),
            "minari_storage": args.minari_storage or "hdf5",
        }
    try:
        if hasattr(policy, "check_spaces"):
            policy.check_spaces(envs.single_observation_space, envs.single_action_space)
        return collect(
            envs,
            policy,
            steps=args.steps,
            episodes=args.episodes,
            seed=args.seed,
            out=out,
            progress=False if args.quiet else "auto",  # on a terminal a bar, in a log one line
            overwrite=args.overwrite,
            metadata={
                "env_id": args.env,
                "env_kwargs": env_kwargs,
                "num_workers": getattr(envs, "num_workers", None),
                "policy": getattr(policy, "name", args.policy),
                "command_line": command_line,
            },
            rollout_steps=args.rollout_steps,
            **minari_options,
        )
    except (PolicyError, UnsupportedSpaceError, PolicySpecError) as exc:
        _drop_empty_directories(out, before.existed)
        if not isinstance(exc, PolicyError):  # refused before anything was written
            raise _UsageError(str(exc)) from None
        raise _UsageError(f"{exc}; {_what_was_kept(args, out, before)}") from None
    except NoEpisodesError as exc:  # bad input found at the end: --steps too few for "drop"
        raise _UsageError(
            f"--open-episodes drop: expected an episode to finish within --steps {exc.steps} (Minari cannot use "
            f"a dataset without episodes), got none: {exc.what_was_dropped()}; --open-episodes truncate keeps "
            f"them; {_what_was_kept(args, out, before)}"
        ) from None
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted: {_what_was_kept(args, out, before)}", file=sys.stderr)
        if args.format != "minari" and (out / METADATA_FILE).is_file() and not args.quiet:
            from vecenv.datasets.cli_summary import dataset_summary

            print(dataset_summary(load(out)))
        raise
    except OSError:
        raise  # the output could not be written: main says which file and why
    except Exception as exc:
        if args.debug:
            raise
        notes = " ".join(getattr(exc, "__notes__", ()))
        kept = _what_was_kept(args, out, before)
        raise _RunError(
            f"{type(exc).__name__}: {exc}{' (' + notes + ')' if notes else ''}; {kept} (--debug shows the traceback)"
        ) from None


def _what_was_kept(args: argparse.Namespace, out: Path, before: _Before) -> str:
    """What a run that stopped early left, for its last line (empty directories it made are
    removed). A dataset whose metadata is still the file there before the run is the one the
    run was to replace, put back as it was."""
    metadata = _metadata_path(args)
    written = before.written_by_run(args)
    if args.format == "minari":
        if written:
            return f"kept the finished episodes in Minari dataset {args.dataset_id!r} under {out}"
        _drop_empty_directories(out, before.existed)
        if metadata.is_file():
            return f"no episode had finished, so nothing was written; Minari dataset {args.dataset_id!r} is as it was"
        return f"no episode had finished, so no Minari dataset {args.dataset_id!r} was written"
    if written:
        return f'kept a partial dataset ("complete": false) in {out}'
    if metadata.is_file():
        return f"nothing was written; the dataset already in {out} is as it was"
    return "nothing was written"


def _kept_at_start(args: argparse.Namespace) -> str:
    """The end of the start-up interruption's line: that the dataset already at the output (one
    ``--overwrite`` was to replace) is as it was, when there is one. Start-up only checks the
    output: the old dataset is moved aside only once the collection begins."""
    if args.format == "minari" and not args.dataset_id:
        return ""
    if _identity(_metadata_path(args)) is None:
        return ""
    if args.format == "minari":
        return f"; Minari dataset {args.dataset_id!r} is as it was"
    return f"; the dataset already in {_output_path(args)} is as it was"


def _drop_empty_directories(out: Path, existed: bool) -> None:
    """Remove ``out`` and the directories under it when the run made it and left it without
    a file (a Minari root that never got its dataset); never anything that holds a file."""
    if existed or not out.is_dir():
        return
    for directory, _, files in sorted(os.walk(out), key=lambda entry: -len(entry[0])):
        if files:
            return
        try:
            os.rmdir(directory)
        except OSError:
            return


def _export(args: argparse.Namespace) -> int:
    """``vecenv-collect export``: an existing dataset to Minari."""
    from vecenv.datasets.cli_summary import minari_summary
    from vecenv.datasets.minari import datasets_root, export_minari, minari_target

    try:
        dataset = load(args.dataset)
    except (FileNotFoundError, ValueError) as exc:
        raise _UsageError(f"DIR: {exc}") from None
    root = datasets_root(args.out)
    storage = args.minari_storage or "hdf5"
    try:
        # The id and the target, in our terms; export_minari replaces the dataset.
        minari_target(args.dataset_id, args.out, args.overwrite, FLAGS, storage, prepare=False)
    except DatasetWriteError as exc:  # a read-only --out is bad input, as for collect (exit status 2)
        raise _UsageError(str(exc.strerror)) from None
    except (MinariNotInstalledError, ValueError, FileExistsError) as exc:
        raise _UsageError(str(exc)) from None
    metadata = root / args.dataset_id / "data" / "metadata.json"
    earlier = _identity(metadata)
    try:
        result = export_minari(
            dataset,
            args.dataset_id,
            out=root,
            overwrite=args.overwrite,
            open_episodes=args.open_episodes or "truncate",
            minari_metadata=minari_metadata(args),
            minari_storage=storage,
        )
    except (MinariNotInstalledError, ValueError, FileExistsError) as exc:
        raise _UsageError(str(exc)) from None
    except KeyboardInterrupt:
        now = _identity(metadata)
        if now is not None and now != earlier:
            kept = (
                f'kept the episodes exported so far in Minari dataset {args.dataset_id!r} under {root} ("complete": '
                "false in its vecenv metadata; --overwrite replaces it)"
            )
        elif now is not None:
            kept = f"nothing was written; Minari dataset {args.dataset_id!r} is as it was"
        else:
            kept = f"no Minari dataset {args.dataset_id!r} was written"
        print(f"{PROG} export: interrupted: {kept}", file=sys.stderr)
        raise
    if not args.quiet:
        print(minari_summary(result, root))
    return 0


def _write_failure(exc: OSError, args: argparse.Namespace, exporting: bool, before: _Before) -> str:
    """One line for an output that could not be written: the path, the cause, and what was kept
    (what this run wrote, told from an earlier dataset as ``_Before.written_by_run`` tells it)."""
    if isinstance(exc, DatasetWriteError):
        what = str(exc.strerror)
    else:
        cause = exc.strerror or str(exc)
        what = f"cannot write {exc.filename}: {cause}" if exc.filename else f"{type(exc).__name__}: {cause}"
    if exporting:
        return " ".join(what.split())
    if args.format == "minari":
        return " ".join(f"{what}; {_minari_kept(args, before)}".split())
    out = _default_out(args)
    if before.written_by_run(args):
        try:
            kept = json.loads((out / METADATA_FILE).read_text())["counts"]["transitions"]
            what += f'; kept a partial dataset ("complete": false) of {kept} transitions in {out}'
        except (OSError, ValueError, KeyError, TypeError):
            pass
    elif before.known and (out / METADATA_FILE).is_file():
        what += f"; nothing was written; the dataset already in {out} is as it was"
    elif before.known:
        what += "; nothing was written"
    return " ".join(what.split())


def _minari_kept(args: argparse.Namespace, before: _Before) -> str:
    """What a Minari run that could not write its dataset left, as Minari's metadata says."""
    path = _metadata_path(args)
    if not before.written_by_run(args):  # none, or the one there before the run, as it was
        if before.known and path.is_file():
            return f"no episode was written; Minari dataset {args.dataset_id!r} is as it was"
        return f"no readable Minari dataset {args.dataset_id!r} was left"
    nothing = f"no readable Minari dataset {args.dataset_id!r} was left"
    try:
        metadata = json.loads(path.read_text())
        episodes = int(metadata["total_episodes"])
    except (OSError, ValueError, KeyError, TypeError):
        return nothing
    if not episodes:
        return nothing
    record = metadata.get("vecenv")
    if isinstance(record, dict) and record.get("complete") is False:
        return f"kept the {episodes} episodes a reader finds, marked incomplete, in Minari dataset {args.dataset_id!r}"
    if isinstance(record, dict):
        return f"kept the {episodes} episodes of Minari dataset {args.dataset_id!r}, which its metadata calls complete"
    return (
        f"kept the {episodes} episodes a reader finds in Minari dataset {args.dataset_id!r}, not marked "
        "incomplete (its metadata could not be written either)"
    )


#: A file's device, inode and modification time: a run that writes nothing puts the dataset it
#: was to replace back (renamed, so the same inode and time); the run's own metadata is another
#: file. A modification time alone, compared with the run's start, cannot tell an earlier run's
#: file written a moment before (a file system may keep whole seconds) from this run's.
_Identity = tuple[int, int, int] | None


def _identity(path: Path) -> _Identity:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_mtime_ns


@dataclass
class _Before:
    """What the run's output path held before the run: recorded once the path is known (a run
    that stops before that has written nothing)."""

    known: bool = False
    existed: bool = True  # the output path (our dataset directory, or the Minari root)
    earlier: _Identity = None  # the metadata file of the dataset there

    def record(self, args: argparse.Namespace) -> None:
        self.existed = _output_path(args).exists()
        self.earlier = _identity(_metadata_path(args))
        self.known = True

    def written_by_run(self, args: argparse.Namespace) -> bool:
        """Whether the dataset's metadata file is this run's: there, and not the file that was
        there before the run. The one test of every report of what a run kept."""
        return self.known and _identity(_metadata_path(args)) not in (None, self.earlier)


def _metadata_path(args: argparse.Namespace) -> Path:
    """The metadata file of the dataset the run writes (either format)."""
    if args.format == "minari":
        return _output_path(args) / args.dataset_id / "data" / "metadata.json"
    return _output_path(args) / METADATA_FILE


def _output_path(args: argparse.Namespace) -> Path:
    """Where the output goes, as :func:`_checked_output` finds it, without checking or making
    anything (to know, after a run that wrote nothing, whether the run made that folder)."""
    if args.format == "minari":
        from vecenv.datasets.minari import datasets_root

        return datasets_root(args.out)
    return _default_out(args)


def _default_out(args: argparse.Namespace) -> Path:
    return Path(args.out) if args.out else Path("rollouts") / args.env.rpartition(":")[2]


_MAIN_PID = os.getpid()


_terminate = sigterm_raises(_MAIN_PID)


def _raise_terminated(signum: int, frame: Any) -> None:
    if os.getpid() == _MAIN_PID:  # a worker forked before it reset its handlers ends in silence
        _received.append(signum)
    _terminate(signum, frame)


def _raise_interrupt(signum: int, frame: Any) -> None:
    if os.getpid() != _MAIN_PID:  # a worker forked before it ignored Ctrl+C: the parent's to handle
        return
    _received.append(signum)
    raise KeyboardInterrupt


#: Signals received by this run. A handler's exception can be lost where Python ignores
#: exceptions (os.fork's after-fork hooks, finalizers); the run checks this list too.
_received: list[int] = []


def _check_signals() -> None:
    """Raise for a signal whose exception was lost on its way (see ``_received``)."""
    if _received:
        signum = _received[-1]
        raise Terminated(f"terminated by signal {signum}") if signum == signal.SIGTERM else KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """The ``vecenv-collect`` command (see ``--help``); returns the exit status.

    0 on success, 2 for bad input (one ``vecenv-collect: error: ...`` line on stderr), 1
    when the output cannot be written (one line naming the path and the cause; what was
    written stays a dataset marked ``"complete": false``) or an env or the policy raised
    (one line with the exception and what was kept), 130 after Ctrl+C (SIGINT) and 143
    after SIGTERM, both of which keep what was collected as a dataset marked
    ``"complete": false`` and close the environments' workers. ``--debug`` shows the
    traceback of an error that is not bad input.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    exporting = bool(arguments) and arguments[0] == "export"
    try:  # Ctrl+C before the handlers are set: as during the rest of start-up (command.py)
        parser = build_export_parser() if exporting else build_parser()
        args = parser.parse_args(arguments[1:] if exporting else arguments)
    except SystemExit as exc:  # --help, or a usage error the parser already reported
        return int(exc.code or 0)
    except KeyboardInterrupt as exc:  # SIGTERM here: command.main's handler
        print(INTERRUPTED_AT_START, file=sys.stderr)
        return exit_status(exc)
    command_line = shlex.join(sys.argv if argv is None else [PROG, *argv])
    before = _Before()  # what the output held, to tell this run's output from an earlier one
    _received.clear()
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:  # signal handlers can only be set from the main thread
        previous = {
            signal.SIGINT: signal.signal(signal.SIGINT, _raise_interrupt),
            signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated),
        }
    prog = f"{PROG} export" if exporting else PROG  # as the parser names it in its own errors
    try:
        return _export(args) if exporting else _run(args, command_line, before)
    except _UsageError as exc:
        print(f"{prog}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except _RunError as exc:
        print(f"{prog}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except OSError as exc:
        if args.debug:
            raise
        print(f"{prog}: error: {_write_failure(exc, args, exporting, before)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl+C, or SIGTERM (Terminated): what was collected is kept
        return exit_status(exc)
    finally:
        if in_main_thread:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
