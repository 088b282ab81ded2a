"""The ``vecenv-collect`` command line: ``collect`` and ``export`` (see ``--help``)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import gymnasium
from gymnasium.vector import AutoresetMode

from vecenv.factory import check_env_id, make
from vecenv.host import available_cpus
from vecenv.rollout.collection import OPEN_EPISODES, collect
from vecenv.rollout.dataset import Dataset, load
from vecenv.rollout.errors import MinariNotInstalledError, PolicyError, UnsupportedSpaceError
from vecenv.rollout.format import METADATA_FILE
from vecenv.rollout.policies import PolicySpecError, load_policy
from vecenv.rollout.writer import check_out

PROG = "vecenv-collect"


class _Terminated(KeyboardInterrupt):
    """Raised by ``main``'s SIGTERM handler so that termination finalizes the dataset
    exactly like Ctrl+C does."""


_EPILOG = """\
examples:
  vecenv-collect
      10000 transitions of CartPole-v1 with a seeded random policy into rollouts/CartPole-v1
  vecenv-collect --env Pendulum-v1 --episodes 50 --num-envs 16 --out data/pendulum
  vecenv-collect --env CartPole-v1 --env-kwargs '{"sutton_barto_reward": true}' --steps 1000000
  vecenv-collect --policy mypolicies:greedy --seed 3 --overwrite --quiet
  vecenv-collect --env mypackage.envs:MyEnv-v0 --autoreset-mode same_step
  vecenv-collect --env CartPole-v1 --episodes 100 --format minari --dataset-id cartpole/random-v0
      a Minari dataset: minari.load_dataset("cartpole/random-v0") opens it
  vecenv-collect --policy sb3:ppo_cartpole.zip --deterministic --episodes 100
  vecenv-collect --num-envs 256 --backend ray --ray-address auto
      the envs as Ray actors on the cluster that `ray start` runs here (see README)
  vecenv-collect export rollouts/CartPole-v1 --dataset-id cartpole/old-v0
      an existing dataset as a Minari dataset (see vecenv-collect export --help)

The dataset is a directory with metadata.json and one .npy file per field (Dict/Tuple
spaces: one per leaf, e.g. observations.pos.npy); read it with vecenv.load(DIR).
The arrays depend only on the arguments other than --num-workers, --backend,
--ray-address, --quiet and --out.
Ctrl+C or SIGTERM stops early and keeps what was collected as a valid dataset with
"complete": false in metadata.json (exit status 130 / 143); a Minari dataset keeps the
episodes finished so far. Bad arguments, or --format minari without Minari: exit status 2.
"""


class _UsageError(Exception):
    """Bad command line input: reported as one ``vecenv-collect: error: ...`` line."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage dump) with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Run a policy in vecenv environments and save the transitions\n"
        "(observation, action, reward, terminated, truncated, next observation) as a dataset.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--env",
        default="CartPole-v1",
        metavar="ID",
        help="gymnasium environment id; 'module:ID' imports the module that registers it first "
        "(default: %(default)s; e.g. --env Pendulum-v1)",
    )
    parser.add_argument(
        "--env-kwargs",
        default="{}",
        metavar="JSON",
        help="keyword arguments for the environment, as a JSON object "
        """(default: %(default)s; e.g. --env-kwargs '{"max_episode_steps": 200}')""",
    )
    parser.add_argument(
        "--num-envs",
        type=_positive_int,
        default=8,
        metavar="N",
        help="number of environments stepped together (default: %(default)s; e.g. --num-envs 16)",
    )
    parser.add_argument(
        "--num-workers",
        type=_positive_int,
        metavar="N",
        help="number of worker processes; the data does not depend on it "
        "(default: the number of CPU cores, at most --num-envs; e.g. --num-workers 4)",
    )
    count = parser.add_mutually_exclusive_group()
    count.add_argument(
        "--steps",
        type=_positive_int,
        metavar="N",
        help="write exactly N transitions (default: 10000 unless --episodes is given; e.g. --steps 1000000)",
    )
    count.add_argument(
        "--episodes",
        type=_positive_int,
        metavar="N",
        help="write exactly N complete episodes instead, the first N to finish (e.g. --episodes 100)",
    )
    parser.add_argument(
        "--policy",
        default="random",
        metavar="POLICY",
        help="'random' (uniform actions, seeded by --seed); 'sb3:PATH.zip', a saved "
        "Stable-Baselines3 model (PPO, A2C, DQN, SAC, TD3; the algorithm is read from the file, "
        "or name it: sb3:ALGO:PATH.zip) whose predict() chooses the actions; or 'module:attr', a "
        "callable taking the batched observation and returning a batched action (float64 for a "
        "float32 Box is fine); the current directory is importable "
        "(default: %(default)s; e.g. --policy sb3:ppo_cartpole.zip)",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="sb3: policies only: take the most likely action instead of sampling "
        "(e.g. --policy sb3:ppo.zip --deterministic)",
    )
    parser.add_argument(
        "--seed",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="seed of the environments (env i gets N+i) and of the random policy "
        "(default: %(default)s; e.g. --seed 42)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="dataset directory to create (default: rollouts/<env-id>; e.g. --out data/cartpole); "
        "with --format minari, the Minari datasets root the dataset goes under as DIR/<dataset-id> "
        "(default: $MINARI_DATASETS_PATH or ~/.minari/datasets; read it back with "
        "MINARI_DATASETS_PATH=DIR)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the output if it exists (only if it is a dataset or empty; e.g. --overwrite)",
    )
    _add_minari_arguments(parser, collecting=True)
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="show no progress bar and no summary (e.g. --quiet)",
    )
    parser.add_argument(
        "--autoreset-mode",
        choices=[mode.name.lower() for mode in AutoresetMode],
        default="next_step",
        help="how the vector environment resets finished episodes; the recorded transitions "
        "are real steps in every mode (default: %(default)s; e.g. --autoreset-mode same_step)",
    )
    parser.add_argument(
        "--backend",
        choices=["process", "ray"],
        default="process",
        help="where the environments run: worker processes on this machine, or Ray actors "
        "(pip install -e '.[ray]'), one per worker, on this machine or a Ray cluster; the data "
        "does not depend on it (default: %(default)s; e.g. --backend ray)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="with --backend ray: the Ray cluster to connect to, as ray.init(address=...) takes it "
        "(default: start a local Ray; e.g. --ray-address 10.0.0.1:6379, or auto for the cluster "
        "that `ray start` runs on this machine)",
    )
    return parser


def _add_minari_arguments(parser: argparse.ArgumentParser, collecting: bool) -> None:
    """The options of Minari output, shared by collecting and ``export``."""
    if collecting:
        parser.add_argument(
            "--format",
            choices=["vecenv", "minari"],
            default="vecenv",
            help="'vecenv': a directory of .npy files that vecenv.load reads; 'minari': a Minari "
            'dataset written with Minari\'s API (needs: pip install "vecenv[minari]") '
            "(default: %(default)s; e.g. --format minari --dataset-id cartpole/random-v0)",
        )
    parser.add_argument(
        "--dataset-id",
        metavar="ID",
        required=not collecting,
        help="Minari dataset id, NAMESPACE/NAME-vN or NAME-vN"
        + (" (required with --format minari" if collecting else " (required")
        + "; e.g. --dataset-id cartpole/random-v0)",
    )
    parser.add_argument(
        "--open-episodes",
        choices=list(OPEN_EPISODES),
        help="Minari stores whole episodes: what to do with the episodes still open after "
        "the last of --steps N transitions. 'truncate' keeps them with their last step "
        "marked truncated (the budget ended them, like a time limit): exactly N steps. 'drop' "
        "leaves them out: only finished episodes, fewer steps. The counts are recorded in "
        "the dataset's 'vecenv' metadata either way; --episodes N has no open episodes "
        "(default: truncate; e.g. --open-episodes drop)",
    )
    parser.add_argument(
        "--author", metavar="NAME", help="Minari metadata: who made the dataset (e.g. --author 'Ada L.')"
    )
    parser.add_argument(
        "--author-email", metavar="EMAIL", help="Minari metadata: a contact (e.g. --author-email ada@example.org)"
    )
    parser.add_argument(
        "--code-permalink",
        metavar="URL",
        help="Minari metadata: link to the code that made the data (e.g. --code-permalink https://...)",
    )
    parser.add_argument(
        "--description", metavar="TEXT", help="Minari metadata: what the dataset is (default: env, policy and seed)"
    )


def _minari_metadata(args: argparse.Namespace) -> dict[str, Any]:
    names = ("author", "author_email", "code_permalink", "description")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _build_export_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"{PROG} export",
        description="Write an existing vecenv dataset (a directory that vecenv.load reads) as a\n"
        "Minari dataset, so older datasets open with minari.load_dataset. Episodes come in\n"
        "the order they end; open episodes (from --steps datasets) follow by env index,\n"
        'truncated or dropped as --open-episodes says. Needs: pip install "vecenv[minari]".',
        epilog="example:\n  vecenv-collect export rollouts/CartPole-v1 --dataset-id cartpole/random-v0\n"
        "  python -c 'import minari; print(minari.load_dataset(\"cartpole/random-v0\"))'\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dataset", metavar="DIR", help="the vecenv dataset directory (e.g. rollouts/CartPole-v1)")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="Minari datasets root the dataset goes under as DIR/<dataset-id> "
        "(default: $MINARI_DATASETS_PATH or ~/.minari/datasets; e.g. --out data/minari)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the Minari dataset if it exists (e.g. --overwrite)"
    )
    parser.add_argument("--quiet", action="store_true", help="print no summary (e.g. --quiet)")
    _add_minari_arguments(parser, collecting=False)
    return parser


def _minari_summary(dataset: Any, root: Path) -> str:
    """The end-of-run report of a Minari dataset: counts, where it is, how to open it."""
    record = dataset.storage.metadata.get("vecenv", {})
    dropped = record.get("dropped_open_episodes", {})
    lines = [
        f"transitions: {dataset.total_steps}",
        f"episodes:    {dataset.total_episodes}"
        + (
            f" ({record['truncated_open_episodes']} open ones truncated)"
            if record.get("truncated_open_episodes")
            else ""
        )
        + (
            f" ({dropped['episodes']} open ones dropped: {dropped['transitions']} transitions)"
            if dropped.get("episodes")
            else ""
        ),
        f"output:      {dataset.storage.data_path.parent} (Minari dataset {dataset.id!r}"
        + ("" if record.get("complete", True) else ", incomplete")
        + ")",
    ]
    default_root = os.environ.get("MINARI_DATASETS_PATH")
    prefix = (
        ""
        if default_root and Path(default_root).resolve() == root.resolve()
        else f"MINARI_DATASETS_PATH={shlex.quote(str(root))} "
    )
    if root == _default_minari_root():
        prefix = ""
    lines.append(f"open with:   {prefix}python -c 'import minari; print(minari.load_dataset(\"{dataset.id}\"))'")
    return "\n".join(lines)


def _default_minari_root() -> Path:
    from vecenv.rollout.minari import datasets_root

    return datasets_root(None)


def _parse_env_kwargs(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"--env-kwargs: expected a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise _UsageError(f"--env-kwargs: expected a JSON object, got {text!r}")
    return value


def _check_env_id(env_id: str) -> None:
    """Raise _UsageError unless ``env_id`` ('[module:]ID') names a registered environment."""
    try:
        check_env_id(env_id)
    except gymnasium.error.NameNotFound as exc:
        raise _UsageError(f"--env: {exc}") from None
    except Exception as exc:
        module = env_id.rpartition(":")[0]
        raise _UsageError(f"--env {env_id!r}: cannot import module {module!r}: {type(exc).__name__}: {exc}") from None


def _human_size(size: float) -> str:
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    index = 0
    while size >= 1024 and index < len(units) - 1:
        size /= 1024
        index += 1
    return f"{size:.1f} {units[index]}" if index else f"{int(size)} B"


def _summary(dataset: Dataset) -> str:
    """The end-of-run report: counts, episode statistics, speed, output path and size."""
    metadata, stats = dataset.metadata, dataset.metadata["stats"]
    lines = [
        f"transitions: {metadata['counts']['transitions']}",
        f"episodes:    {metadata['counts']['episodes']} completed",
    ]
    for key, label in (("episode_return", "return:     "), ("episode_length", "length:     ")):
        value = stats[key]
        lines.append(
            label
            + (
                "n/a (no episode completed)"
                if value is None
                else f"mean {value['mean']:.4g}, min {value['min']:.4g}, max {value['max']:.4g}"
            )
        )
    rate = stats["steps_per_second"]
    lines.append(f"steps/s:     {rate:,.0f} over {stats['duration_s']:.1f} s" if rate else "steps/s:     n/a")
    size = sum(p.stat().st_size for p in dataset.path.iterdir() if p.is_file())
    state = "" if dataset.complete else ', incomplete: "complete": false'
    lines.append(f"output:      {dataset.path} ({_human_size(size)}{state})")
    return "\n".join(lines)


def _raise_terminated(signum: int, frame: Any) -> NoReturn:
    raise _Terminated(f"terminated by signal {signum}")


def _run(args: argparse.Namespace, command_line: str) -> int:
    """Validate the arguments, build the environments, collect, and report."""
    env_kwargs = _parse_env_kwargs(args.env_kwargs)
    if os.getcwd() not in sys.path:  # like `python -m`: modules in the current directory import
        sys.path.append(os.getcwd())
    _check_env_id(args.env)
    minari = args.format == "minari"
    if minari and not args.dataset_id:
        raise _UsageError("--dataset-id: required with --format minari (e.g. --dataset-id cartpole/random-v0)")
    if not minari:
        for option, value in (
            ("--dataset-id", args.dataset_id),
            ("--open-episodes", args.open_episodes),
            *((f"--{k.replace('_', '-')}", v) for k, v in _minari_metadata(args).items()),
        ):
            if value is not None:
                raise _UsageError(f"{option}: only with --format minari, got {option} {value}")
    if args.open_episodes is not None and args.episodes is not None:
        raise _UsageError("--open-episodes: only with --steps (--episodes N writes no open episodes)")
    try:
        policy: Any = load_policy(args.policy, args.deterministic)
    except PolicySpecError as exc:
        raise _UsageError(str(exc)) from None
    if minari:
        from vecenv.rollout.minari import datasets_root, minari_target

        out = datasets_root(args.out)
        try:  # fails at once without Minari, before any env is built
            minari_target(args.dataset_id, out, args.overwrite)
        except (MinariNotInstalledError, ValueError, FileExistsError) as exc:
            raise _UsageError(
                str(exc).replace("overwrite=True / ", "").replace("dataset_id:", "--dataset-id:")
            ) from None
    else:
        out = Path(args.out) if args.out else Path("rollouts") / args.env.rpartition(":")[2]
        try:
            check_out(out, args.overwrite)
        except FileExistsError as exc:
            raise _UsageError(str(exc).replace("overwrite=True / ", "")) from None
    if args.steps is None and args.episodes is None:
        args.steps = 10000
    if args.ray_address is not None and args.backend != "ray":
        raise _UsageError(f"--ray-address: only with --backend ray, got --ray-address {args.ray_address}")
    backend_options: dict[str, Any] = {}
    if args.backend == "ray":  # Ray picks the worker count from the cluster's CPUs by default
        num_workers = args.num_workers
        backend_options = {"backend": "ray", "address": args.ray_address}
    else:
        num_workers = args.num_workers or min(available_cpus(), args.num_envs)

    try:
        envs = make(
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
    try:
        if hasattr(policy, "check_spaces"):
            policy.check_spaces(envs.single_observation_space, envs.single_action_space)
        minari_options: dict[str, Any] = {}
        if minari:
            minari_options = {
                "format": "minari",
                "dataset_id": args.dataset_id,
                "open_episodes": args.open_episodes or "truncate",
                "minari_metadata": _minari_metadata(args),
            }
        dataset = collect(
            envs,
            policy,
            steps=args.steps,
            episodes=args.episodes,
            seed=args.seed,
            out=out,
            progress=not args.quiet,
            overwrite=args.overwrite,
            metadata={
                "env_id": args.env,
                "env_kwargs": env_kwargs,
                "num_workers": getattr(envs, "num_workers", None),
                "policy": getattr(policy, "name", args.policy),
                "command_line": command_line,
            },
            **minari_options,
        )
    except (PolicyError, UnsupportedSpaceError, PolicySpecError) as exc:
        raise _UsageError(str(exc)) from None
    except KeyboardInterrupt:
        if minari:
            print(
                f"{PROG}: interrupted: kept the finished episodes in Minari dataset {args.dataset_id!r} under {out}",
                file=sys.stderr,
            )
        elif (out / METADATA_FILE).is_file():
            print(f'{PROG}: interrupted: kept a partial dataset ("complete": false) in {out}', file=sys.stderr)
            if not args.quiet:
                print(_summary(load(out)))
        raise
    finally:
        envs.close()
    if not args.quiet:
        print(_minari_summary(dataset, out) if minari else _summary(dataset))
    return 0


def _export(args: argparse.Namespace) -> int:
    """``vecenv-collect export``: an existing dataset to Minari."""
    from vecenv.rollout.minari import datasets_root, export_minari

    try:
        dataset = load(args.dataset)
    except (FileNotFoundError, ValueError) as exc:
        raise _UsageError(f"DIR: {exc}") from None
    root = datasets_root(args.out)
    try:
        result = export_minari(
            dataset,
            args.dataset_id,
            out=root,
            overwrite=args.overwrite,
            open_episodes=args.open_episodes or "truncate",
            minari_metadata=_minari_metadata(args),
        )
    except (MinariNotInstalledError, ValueError, FileExistsError) as exc:
        raise _UsageError(str(exc).replace("overwrite=True / ", "").replace("dataset_id:", "--dataset-id:")) from None
    if not args.quiet:
        print(_minari_summary(result, root))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``vecenv-collect`` command (see ``--help``); returns the exit status.

    0 on success, 2 for bad input (one ``vecenv-collect: error: ...`` line on stderr),
    130 after Ctrl+C (SIGINT) and 143 after SIGTERM, both of which keep what was collected
    as a dataset marked ``"complete": false`` and close the environments' workers.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    exporting = bool(arguments) and arguments[0] == "export"
    parser = _build_export_parser() if exporting else _build_parser()
    try:
        args = parser.parse_args(arguments[1:] if exporting else arguments)
    except SystemExit as exc:  # --help, or a usage error the parser already reported
        return int(exc.code or 0)
    command_line = shlex.join(sys.argv if argv is None else [PROG, *argv])
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:  # signal handlers can only be set from the main thread
        previous = {
            signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
            signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated),
        }
    try:
        return _export(args) if exporting else _run(args, command_line)
    except _UsageError as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        if isinstance(exc, _Terminated):
            return 128 + signal.SIGTERM
        return 128 + signal.SIGINT
    finally:
        if in_main_thread:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
