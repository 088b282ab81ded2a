"""The ``vecenv-collect`` command line's arguments: the two parsers and their help text."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from gymnasium.vector import AutoresetMode

from vecenv.argtypes import non_negative_int, positive_int
from vecenv.datasets.sinks import OPEN_EPISODES

PROG = "vecenv-collect"

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
      the envs as Ray actors on the cluster that `ray start` runs here (see docs/ray.md)
  vecenv-collect export rollouts/CartPole-v1 --dataset-id cartpole/old-v0
      an existing dataset as a Minari dataset (see vecenv-collect export --help)

The dataset is a directory with metadata.json and one .npy file per field (Dict/Tuple
spaces: one per leaf, e.g. observations.pos.npy); read it with vecenv.load(DIR).
The arrays depend only on the arguments other than --num-workers, --backend,
--ray-address, --rollout-steps, --quiet and --out (for --policy module:attr, as long as
the policy maps each observation to its action alone; for sb3:, whose sampling draws from a
generator per env, up to the last bits of its batched forward: see docs/datasets.md).
Ctrl+C or SIGTERM stops early and keeps what was collected as a valid dataset with
"complete": false in metadata.json (exit status 130 / 143); a Minari dataset keeps the
episodes finished so far. Bad arguments, or --format minari without Minari: exit status 2.
An env or the policy that raises, or an output that cannot be written: one line saying
what was kept, exit status 1 (--debug shows the traceback).
"""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage dump) with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


#: Without --num-envs, ``default_num_envs`` gives each env at least this many of the run's steps.
STEPS_PER_DEFAULT_ENV = 15_625
_DEFAULT_ENVS, _MOST_DEFAULT_ENVS = 8, 64


def default_num_envs(steps: int | None) -> int:
    """The env count without --num-envs: 8, doubled up to 64 while every env still runs at least
    ``STEPS_PER_DEFAULT_ENV`` of ``steps`` (8 without a step count, as with --episodes).

    More envs share the fixed cost of each step of a rollout in the workers (the policy call, the
    recording): measured on 2 cores, 500,000 CartPole transitions went from 1.4x a plain loop
    with 8 envs to 1.85x with 32. The bound keeps each env's trajectory long, so the episodes
    still open when the run ends (at most one per env) stay a small share of the data.
    """
    num_envs = _DEFAULT_ENVS
    while steps is not None and num_envs * 2 <= _MOST_DEFAULT_ENVS and steps >= num_envs * 2 * STEPS_PER_DEFAULT_ENV:
        num_envs *= 2
    return num_envs


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``vecenv-collect`` (collecting); its options in ``--help`` order."""
    parser = _Parser(
        prog=PROG,
        description="Run a policy in vecenv environments and save the transitions\n"
        "(observation, action, reward, terminated, truncated, next observation) as a dataset.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_environment_arguments(parser)
    _add_policy_arguments(parser)
    _add_output_arguments(parser)
    _add_minari_arguments(parser, collecting=True)
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="show no progress bar and no summary (e.g. --quiet)",
    )
    _add_runtime_arguments(parser)
    _add_debug_argument(parser)
    return parser


def _add_debug_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, show its full traceback instead of one line (e.g. --debug)",
    )


def _add_environment_arguments(parser: argparse.ArgumentParser) -> None:
    """Which environments, how many, and in how many worker processes."""
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
        type=positive_int,
        metavar="N",
        help="number of environments stepped together (default: 8, doubled up to 64 while each "
        f"env still runs at least {STEPS_PER_DEFAULT_ENV:,} of --steps: 16 at 250000, 32 at 500000, "
        "64 from 1000000, where more envs share each rollout step's fixed cost; e.g. --num-envs 16)",
    )
    parser.add_argument(
        "--num-workers",
        type=positive_int,
        metavar="N",
        help="number of worker processes; the data does not depend on it "
        "(default: the number of CPU cores, at most --num-envs; e.g. --num-workers 4)",
    )


def _add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """How much to collect, with which policy, from which seed."""
    count = parser.add_mutually_exclusive_group()
    count.add_argument(
        "--steps",
        type=positive_int,
        metavar="N",
        help="write exactly N transitions (default: 10000 unless --episodes is given; e.g. --steps 1000000)",
    )
    count.add_argument(
        "--episodes",
        type=positive_int,
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
        type=non_negative_int,
        default=0,
        metavar="N",
        help="seed of the environments (env i gets N+i) and of the random policy "
        "(default: %(default)s; e.g. --seed 42)",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the dataset goes."""
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


def _add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """How the environments run: autoreset mode and backend."""
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
        "--rollout-steps",
        type=non_negative_int,
        metavar="T",
        help="steps per rollout in the workers, where the policy runs beside the environments "
        "(one message per worker per T steps); 0 steps the environments one vector step at a "
        "time with the policy here; the data does not depend on it (default: adapted to about "
        "0.2 s a rollout, at most 8 MiB of rows and 1024 steps; e.g. --rollout-steps 0)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="with --backend ray: the Ray cluster to connect to, as ray.init(address=...) takes it "
        "(default: start a local Ray; e.g. --ray-address 10.0.0.1:6379, or auto for the cluster "
        "that `ray start` runs on this machine)",
    )


def _add_minari_arguments(parser: argparse.ArgumentParser, collecting: bool) -> None:
    """The options of Minari output, shared by collecting and ``export``."""
    if collecting:
        parser.add_argument(
            "--format",
            choices=["vecenv", "minari"],
            default="vecenv",
            help="'vecenv': a directory of .npy files that vecenv.load reads; 'minari': a Minari "
            'dataset in Minari\'s HDF5 format (needs: pip install "vecenv[minari]") '
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
        "leaves them out: only finished episodes, fewer steps (none finished: no dataset, "
        "exit status 2). The counts are recorded in "
        "the dataset's 'vecenv' metadata either way; --episodes N has no open episodes "
        "(default: truncate; e.g. --open-episodes drop)",
    )
    parser.add_argument(
        "--minari-storage",
        choices=["hdf5", "arrow"],
        help="Minari's storage backend: 'hdf5' (one HDF5 file) or 'arrow' (a directory of Arrow "
        'files per episode; needs pyarrow: pip install "minari[arrow]") (default: hdf5; e.g. '
        "--minari-storage arrow)",
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


def minari_metadata(args: argparse.Namespace) -> dict[str, Any]:
    """The Minari metadata options given on the command line, by ``minari_metadata`` key."""
    names = ("author", "author_email", "code_permalink", "description")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def build_export_parser() -> argparse.ArgumentParser:
    """The parser of ``vecenv-collect export``."""
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
    _add_debug_argument(parser)
    return parser
