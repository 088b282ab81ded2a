"""Train PPO on a Gymnasium vector env: vecenv, Gymnasium's SyncVectorEnv or AsyncVectorEnv.

The recipe is CleanRL's single-file PPO for CartPole (``ppo.py``), rewritten for the Gymnasium
1.x vector API: a rollout of ``--num-steps`` steps from each of ``--num-envs`` envs, advantages
by GAE, the clipped surrogate objective with a clipped value loss and an entropy bonus,
``--update-epochs`` passes over shuffled minibatches, Adam with a linearly annealed learning rate
and gradient-norm clipping. The default hyperparameters are the ones RL Baselines3 Zoo tuned for
CartPole-v1 (32 steps per env, 20 epochs, minibatches of 256, gamma 0.98, lambda 0.8, learning
rate 1e-3): with 8 envs they solve it in 30-60 thousand env steps. Two things differ from CleanRL,
both for Gymnasium 1.x:

- The envs run with ``AutoresetMode.SAME_STEP``: a finished env returns its reset observation at
  once and its last observation in ``infos["final_obs"]``, so every stored transition is real.
- A truncated (time-limited) episode is bootstrapped: ``reward += gamma * V(final_obs)``, since
  the episode did not really end there (CartPole-v1 is truncated at 500 steps).

Every run is deterministic: torch runs on one thread with deterministic algorithms, the network
and minibatch order come from ``--seed``, env ``i`` is reset with ``seed + i`` and actions are
drawn from a seeded ``torch.Generator``. The vector envs are exact, so ``--vector vecenv`` and
``--vector sync`` (and ``async``) give the same episode returns, episode for episode.

Outputs in ``--out``: ``episodes.csv`` (one row per finished episode: ``vector`` kind,
``env_step`` (all envs' steps so far), ``wall_time_s``, ``episode_return``, ``episode_length``,
``env_index``), ``summary.json`` (per vector kind: steps and seconds to solve, SPS;
``final_mean_return`` is ``null`` when no episode finished, ``solved_at_*`` when not solved)
and ``learning_curve.png`` (returns against env steps and against wall time, one line per vector
kind; needs matplotlib). ``--compare vecenv,sync,async`` trains once per kind, same seed and
hyperparameters, and puts them all in one CSV and one picture. Ctrl+C or SIGTERM during a run
after the first writes the finished runs as a whole run writes them, the cut run and those not
started left out, as ``summary.json``'s ``partial`` says (``null`` for a whole run); one during
the first run writes nothing, and one while the files are written says which of them it wrote.
``--capture-video`` also records env 0's episodes 0, K, 2K... (``--video-every K``) as mp4 files
in ``videos/KIND/``, as CleanRL's scripts do; rendering does not change the envs' dynamics, so
the returns stay the same.

    pip install -e ".[train]"
    python scripts/train_ppo.py --vector vecenv --num-envs 8
    python scripts/train_ppo.py --compare vecenv,sync,async --stop-when-solved --out runs/cmp
    python scripts/train_ppo.py --capture-video --video-every 50 --out runs/video
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import math
import os
import pathlib
import resource
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # also runs from a checkout
from vecenv.argtypes import (  # noqa: E402
    DefaultsHelpFormatter,
    existing_file,
    finite_float,
    non_negative_float,
    non_negative_int,
    out_folder,
    positive_float,
    positive_int,
    unit_float,
)
from vecenv.bench.envs import StepCost, costly_env, iterations_per_us  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402
from vecenv.bench.vectors import VectorKind, make_vector  # noqa: E402
from vecenv.files import json_text, replaced, write_text_atomically  # noqa: E402
from vecenv.interrupts import Terminated, exit_status  # noqa: E402

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - the message is the point
    raise SystemExit('train_ppo.py needs torch: pip install -e ".[train]"') from None

VECTOR_KINDS = ("vecenv", "sync", "async", "sb3")
SOLVE_WINDOW = 20  # episodes in the rolling mean that decides "solved"
#: --video-every when not given: env 0's episodes 0, 10, 20... are recorded.
VIDEO_EVERY = 10
#: What ``--plot`` reads besides the CSV: the folder to draw into and the words of the picture's
#: title; every other option trains, and is refused with ``--plot``.
PLOT_OPTIONS = frozenset({"plot", "out", "env_id", "num_envs", "seed", "env_step_ms"})


# -- command line -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options; every one is explained by ``--help``."""
    p = argparse.ArgumentParser(
        description="PPO (CleanRL's recipe) on a vecenv, Gymnasium Sync/Async or SB3 vector env.",
        formatter_class=DefaultsHelpFormatter,
    )
    g = p.add_argument_group("run")
    g.add_argument("--env-id", default="CartPole-v1", help="registered Gymnasium env id (discrete actions)")
    g.add_argument(
        "--vector",
        choices=VECTOR_KINDS,
        default="vecenv",
        help="vector env: vecenv.SubprocVectorEnv, gymnasium SyncVectorEnv or AsyncVectorEnv, "
        "or Stable-Baselines3's SubprocVecEnv (needs stable-baselines3)",
    )
    g.add_argument(
        "--compare",
        default=None,
        metavar="KINDS",
        help="comma-separated vector kinds to train one after the other with the same seed "
        "(e.g. vecenv,sync,async); overrides --vector. An interrupt keeps the finished runs",
    )
    g.add_argument("--num-envs", type=positive_int, default=8, help="envs stepped in parallel")
    g.add_argument(
        "--num-workers",
        type=_workers,
        default="auto",
        help="vecenv worker processes: a count in [0, --num-envs] (0: the envs step in this "
        "process) or 'auto': time one env and keep cheap envs in this process, "
        "else one worker per core; a count needs the vecenv kind (the others have a worker per env)",
    )
    g.add_argument("--seed", type=non_negative_int, default=1, help="seeds torch, the action sampler and the envs")
    g.add_argument(
        "--total-timesteps",
        type=positive_int,
        default=100_000,
        help="env steps to train for, rounded up to whole updates of --num-envs x --num-steps",
    )
    g.add_argument(
        "--env-step-ms",
        type=non_negative_float,
        default=0.0,
        help="extra CPU time burnt in each env step (pure Python, like the benchmark's "
        "py1ms workload): models an env whose step is expensive",
    )
    g.add_argument(
        "--solve-return",
        type=finite_float,
        default=475.0,
        help=f"solved when the mean return of the last {SOLVE_WINDOW} episodes reaches this",
    )
    g.add_argument("--stop-when-solved", action="store_true", help="stop training as soon as it is solved")
    g.add_argument(
        "--out",
        type=out_folder,
        default=pathlib.Path("runs/ppo"),
        help="output folder for episodes.csv, summary.json and learning_curve.png",
    )
    g.add_argument("--quiet", action="store_true", help="print only the summary, not every update")
    g.add_argument(
        "--capture-video",
        action="store_true",
        help="record videos of env 0 (every --video-every-th of its episodes) into --out/videos/KIND "
        "with vecenv.video.RecordVideo (needs: pip install -e '.[video]')",
    )
    g.add_argument(
        "--video-every",
        type=positive_int,
        default=None,  # None unless given, so that giving it alone can be refused
        metavar="K",
        help=f"with --capture-video: episodes 0, K, 2K... (default: {VIDEO_EVERY})",
    )
    g.add_argument(
        "--plot",
        type=existing_file,
        default=None,
        metavar="CSV",
        help="train nothing: redraw the learning curve of an episodes.csv into --out (its title "
        "names --env-id, --num-envs, --seed and --env-step-ms; training options are refused)",
    )

    h = p.add_argument_group("PPO hyperparameters")
    h.add_argument("--num-steps", type=positive_int, default=32, help="steps per env in each rollout")
    h.add_argument("--learning-rate", type=positive_float, default=1e-3, help="Adam's initial learning rate")
    h.add_argument(
        "--anneal-lr",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="decay the learning rate linearly to 0 over --total-timesteps",
    )
    h.add_argument("--gamma", type=unit_float, default=0.98, help="discount factor, in [0, 1]")
    h.add_argument("--gae-lambda", type=unit_float, default=0.8, help="GAE's lambda, in [0, 1]")
    h.add_argument(
        "--minibatch-size",
        type=positive_int,
        default=256,
        help="transitions per gradient step (the whole rollout if it is smaller); a fixed "
        "size keeps the gradient steps per env step the same whatever --num-envs is",
    )
    h.add_argument("--update-epochs", type=positive_int, default=20, help="passes over each rollout")
    h.add_argument(
        "--norm-adv",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="normalise advantages within each minibatch",
    )
    h.add_argument("--clip-coef", type=non_negative_float, default=0.2, help="clip range of the probability ratio")
    h.add_argument(
        "--clip-vloss",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="clip the value loss around the old values, as PPO's paper does",
    )
    h.add_argument("--ent-coef", type=finite_float, default=0.0, help="weight of the entropy bonus")
    h.add_argument("--vf-coef", type=non_negative_float, default=0.5, help="weight of the value loss")
    h.add_argument("--max-grad-norm", type=positive_float, default=0.5, help="gradient-norm clip")
    h.add_argument(
        "--target-kl",
        type=positive_float,
        default=None,
        help="stop an update's epochs early once the approximate KL exceeds this (default: never)",
    )
    args = p.parse_args(argv)
    if args.plot is not None:
        refuse_training_options(p, argv, args)
    _check_args(p, args)
    return args


def refuse_training_options(p: argparse.ArgumentParser, argv: Sequence[str] | None, args: argparse.Namespace) -> None:
    """A usage error for a training option given with ``--plot``, which trains nothing: the
    option would be silently ignored (a value equal to the default too, since it was given).
    The command line is parsed again into a namespace whose every option is already set to a
    marker: argparse leaves a preset attribute alone unless the option is given."""
    unset = object()
    given = p.parse_args(argv, namespace=argparse.Namespace(**dict.fromkeys(vars(args), unset)))
    for dest, value in vars(given).items():
        if dest in PLOT_OPTIONS or value is unset:
            continue
        option = ("--" if value is not False else "--no-") + dest.replace("_", "-")
        shown = option if isinstance(value, bool) else f"{option} {value}"
        p.error(
            f"argument {option}: expected no training option with --plot (it redraws a saved "
            f"episodes.csv, training nothing), got {shown} with --plot"
        )


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What one option's ``type=`` cannot check alone; a bad value is a usage error (one line,
    exit status 2) here, before any worker or training starts. Sets ``args.kinds``."""
    if args.num_workers != "auto" and not 0 <= args.num_workers <= args.num_envs:
        p.error(
            f"argument --num-workers: expected 'auto' or an int in [0, --num-envs={args.num_envs}], "
            f"got {args.num_workers}"
        )
    batch = args.num_envs * args.num_steps
    if batch % min(args.minibatch_size, batch):
        p.error(
            f"argument --minibatch-size: expected a divisor of --num-envs x --num-steps ({batch}) or more, "
            f"got {args.minibatch_size}"
        )
    if args.norm_adv and min(args.minibatch_size, batch) < 2:
        if args.minibatch_size < 2:
            refuse_one_row_minibatches(p, "--minibatch-size", str(args.minibatch_size))
        refuse_one_row_minibatches(p, "--num-steps", f"--num-envs {args.num_envs} x --num-steps {args.num_steps}")
    kinds = args.compare.split(",") if args.compare is not None else [args.vector]
    for kind in kinds:
        if kind not in VECTOR_KINDS:
            p.error(f"argument --compare: expected vector kinds among {','.join(VECTOR_KINDS)}, got {args.compare!r}")
    if len(set(kinds)) < len(kinds):  # one kind's rows would be two runs under one name, one line in the plot
        p.error(f"argument --compare: expected each vector kind at most once, got {args.compare!r}")
    args.kinds = kinds
    if args.video_every is not None and not args.capture_video:  # it would record nothing, silently
        p.error(
            f"argument --video-every: expected --capture-video with it (it picks the recorded episodes), "
            f"got --video-every {args.video_every} without --capture-video"
        )
    if args.video_every is None:
        args.video_every = VIDEO_EVERY
    if args.num_workers != "auto" and "vecenv" not in kinds:  # the other kinds have a worker per env
        p.error(
            f"argument --num-workers: expected the vecenv kind among the vector kinds (only it reads it), "
            f"got {','.join(kinds)}"
        )
    if args.capture_video and "sb3" in kinds:
        p.error("argument --capture-video: expected Gymnasium vector kinds (it records those), got the sb3 kind")
    if args.plot is not None:
        try:
            with args.plot.open(newline="") as f:
                header = next(csv.reader(f), [])
        except (OSError, ValueError, csv.Error):  # unreadable, or not text
            header = []
        missing = [f.name for f in dataclasses.fields(Episode) if f.name not in header]
        if missing:
            p.error(
                f"argument --plot: expected an episodes.csv of this script, got {str(args.plot)!r} (no {missing[0]})"
            )
    else:
        check_env(p, args.env_id)


def refuse_one_row_minibatches(p: argparse.ArgumentParser, option: str, received: str) -> None:
    """A usage error for minibatches of one transition with ``--norm-adv``: the advantages are
    divided by their standard deviation within the minibatch, which one value does not have
    (NaN), so the first update would make every weight NaN and the next rollout fail."""
    p.error(
        f"argument {option}: expected minibatches of at least 2 transitions with --norm-adv "
        f"(or --no-norm-adv), got {received}"
    )


def check_env(p: argparse.ArgumentParser, env_id: str) -> gym.Env:
    """Makes ``--env-id``'s env once, here, to refuse (``p.error``) an id that is not registered
    (with gymnasium's suggestion, if it has one) or an env whose actions are not Discrete.
    Returns the env, closed: its spaces and spec are still there to read."""
    try:
        env = gym.make(env_id)
    except (gym.error.Error, ImportError) as exc:
        reason = " ".join(str(exc).split())
        p.error(f"argument --env-id: expected a registered Gymnasium env id, got {env_id!r} ({reason})")
    env.close()
    if not isinstance(env.action_space, gym.spaces.Discrete):
        p.error(f"argument --env-id: expected an env with Discrete actions, got {env_id!r} with {env.action_space}")
    return env


# -- envs ---------------------------------------------------------------------------------------


@functools.cache
def iterations_per_ms() -> int:
    """Loop iterations of the busy work (``vecenv.bench.envs.burn``) that take about 1 ms here."""
    return max(1, round(1000 * iterations_per_us(chunk=20_000, tries=20)))


def _workers(text: str) -> int | str:
    """``--num-workers``: ``auto`` or an int."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an int, got {text!r}") from None


def make_vector_env(kind: str, args: argparse.Namespace) -> gym.vector.VectorEnv:
    """``args.num_envs`` envs in the vector env of the given kind, autoreset in the same step;
    each env burns ``--env-step-ms`` of CPU per step (built inside the worker processes). With
    ``--capture-video`` the envs render ``rgb_array`` frames and env 0 is recorded."""
    cost = round(args.env_step_ms * iterations_per_ms())
    build = rendering_env if args.capture_video else costly_env
    env_fns = [functools.partial(build, args.env_id, cost)] * args.num_envs
    if kind == "sb3":
        return SB3Adapter(env_fns)
    if kind not in VECTOR_KINDS:
        raise ValueError(f"unknown vector kind {kind!r}; choose from {', '.join(VECTOR_KINDS)}")
    envs = make_vector(
        VectorKind(kind), env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, num_workers=args.num_workers
    )
    if kind == "vecenv" and envs.worker_choice is not None and not args.quiet:
        print(f"vecenv: num_workers='auto' chose {envs.worker_choice.num_workers}: {envs.worker_choice.reason}")
    if not args.capture_video:
        return envs
    from vecenv.video import RecordVideo, every

    folder = args.out / "videos" / kind
    return RecordVideo(envs, folder, env_ids=[0], episode_trigger=every(args.video_every), name_prefix=args.env_id)


def rendering_env(env_id: str, iterations: int) -> gym.Env:
    """``costly_env`` whose frames ``render()`` returns (``render_mode="rgb_array"``), for
    ``--capture-video``; rendering is only on demand, so the envs step exactly as without it."""
    env = gym.make(env_id, render_mode="rgb_array")
    return StepCost(env, iterations) if iterations else env


class SB3Adapter:
    """Stable-Baselines3's ``SubprocVecEnv`` seen through the few Gymnasium calls used here.

    SB3 resets a finished env in the same step and puts its last observation in
    ``infos[i]["terminal_observation"]``; truncation is ``infos[i]["TimeLimit.truncated"]``.
    """

    def __init__(self, env_fns: list[Callable[[], gym.Env]]) -> None:
        try:
            from stable_baselines3.common.vec_env import SubprocVecEnv
        except ImportError:
            raise SystemExit("--vector sb3 needs stable-baselines3: pip install stable-baselines3") from None
        self._venv = SubprocVecEnv(env_fns)
        self.num_envs = self._venv.num_envs
        self.single_observation_space = self._venv.observation_space
        self.single_action_space = self._venv.action_space

    def reset(self, seed: int) -> tuple[np.ndarray, dict[str, Any]]:
        self._venv.seed(seed)  # env i gets seed + i at this reset, as in Gymnasium
        return self._venv.reset(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, dones, infos = self._venv.step(actions)
        trunc = np.array([bool(i.get("TimeLimit.truncated", False)) for i in infos]) & dones
        final = np.empty(self.num_envs, dtype=object)
        for i, info in enumerate(infos):
            final[i] = info.get("terminal_observation")
        return obs, rewards.astype(np.float64), dones & ~trunc, trunc, {"final_obs": final, "_final_obs": dones}

    def close(self) -> None:
        self._venv.close()


# -- the agent ----------------------------------------------------------------------------------


def layer(n_in: int, n_out: int, gain: float = math.sqrt(2)) -> nn.Linear:
    """A linear layer with orthogonal weights and zero bias (PPO's usual initialisation)."""
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)
    return linear


class Agent(nn.Module):
    """Separate actor and critic MLPs (two tanh layers of 64) for flat observations."""

    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
        self.actor = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_actions, 0.01))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def act(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled actions, their log-probabilities and the state values."""
        logits = self.actor(obs)
        actions = torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
        logp = logits.log_softmax(-1).gather(-1, actions[:, None]).squeeze(-1)
        return actions, logp, self.value(obs)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probabilities of given actions, the policy's entropy and the state values."""
        logp_all = self.actor(obs).log_softmax(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp_all.gather(-1, actions[:, None]).squeeze(-1), entropy, self.value(obs)


# -- the update ---------------------------------------------------------------------------------


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    next_done: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Generalised advantage estimates, computed backwards through a ``(steps, envs)`` rollout.

    ``dones[t]`` says whether the observation of step ``t`` starts a new episode (the previous
    step ended one), so no value flows back across an episode boundary.
    """
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(next_value)
    for t in reversed(range(steps)):
        following_done = next_done if t == steps - 1 else dones[t + 1]
        following_value = next_value if t == steps - 1 else values[t + 1]
        alive = 1.0 - following_done
        delta = rewards[t] + gamma * following_value * alive - values[t]
        running = delta + gamma * lam * alive * running
        advantages[t] = running
    return advantages


@dataclasses.dataclass
class Rollout:
    """One rollout, flattened to ``num_steps * num_envs`` transitions."""

    obs: torch.Tensor
    actions: torch.Tensor
    logp: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: torch.Tensor


def ppo_update(
    agent: Agent,
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    args: argparse.Namespace,
    generator: torch.Generator,
) -> torch.Tensor:
    """``--update-epochs`` passes of clipped-objective minibatch steps; returns the last approximate KL."""
    batch = len(rollout.actions)
    minibatch = min(args.minibatch_size, batch)
    approx_kl = torch.zeros(())
    for _ in range(args.update_epochs):
        order = torch.randperm(batch, generator=generator)
        for lo in range(0, batch, minibatch):
            idx = order[lo : lo + minibatch]
            logp, entropy, value = agent.evaluate(rollout.obs[idx], rollout.actions[idx])
            log_ratio = logp - rollout.logp[idx]
            ratio = log_ratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()
            adv = rollout.advantages[idx]
            if args.norm_adv:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            # Clipped surrogate: the pessimistic one of the two objectives, as a loss.
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
            old_value, target = rollout.values[idx], rollout.returns[idx]
            if args.clip_vloss:
                clipped = old_value + (value - old_value).clamp(-args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max((value - target) ** 2, (clipped - target) ** 2).mean()
            else:
                v_loss = 0.5 * ((value - target) ** 2).mean()
            loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and approx_kl > args.target_kl:
            break
    return approx_kl


# -- training -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Episode:
    """One finished episode, as written to episodes.csv."""

    vector: str
    env_step: int
    wall_time_s: float
    episode_return: float
    episode_length: int
    env_index: int


@dataclasses.dataclass
class RunSummary:
    """What one training run achieved and how fast."""

    vector: str
    num_envs: int
    env_step_ms: float
    env_steps: int
    wall_time_s: float
    sps: float
    episodes: int
    final_mean_return: float | None  # None (null in summary.json) when no episode finished
    solved: bool
    solved_at_step: int | None
    solved_at_s: float | None
    cpu_s: float | None = None


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have exited and been joined.

    On a machine shared with other work, wall time depends on how many processes compete for
    the cores; CPU time does not, so the summary records both. Workers that are not our own
    children (SB3's, started by a forkserver) are not counted.
    """
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def train(args: argparse.Namespace, kind: str) -> tuple[list[Episode], RunSummary]:
    """One PPO run on the vector env ``kind``; returns its episodes and summary."""
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    cpu_start = cpu_seconds()
    start = time.perf_counter()  # env start-up counts: it is part of the wall-clock cost
    envs = make_vector_env(kind, args)
    try:
        episodes, summary = _train(args, kind, envs, generator, start)
    finally:
        envs.close()  # joins the workers, so their CPU time is counted from here on
    if kind != "sb3":
        summary.cpu_s = round(cpu_seconds() - cpu_start, 1)
    return episodes, summary


def _train(
    args: argparse.Namespace, kind: str, envs: Any, generator: torch.Generator, start: float
) -> tuple[list[Episode], RunSummary]:
    """The loop: collect ``--num-steps`` steps from every env, then update; record each episode."""
    if not isinstance(envs.single_action_space, gym.spaces.Discrete):
        raise SystemExit(f"train_ppo.py needs a Discrete action space, {args.env_id} has {envs.single_action_space}")
    n, steps = args.num_envs, args.num_steps
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    batch = n * steps
    updates = math.ceil(args.total_timesteps / batch)

    obs_buf = torch.zeros((steps, n, obs_dim))
    act_buf = torch.zeros((steps, n), dtype=torch.long)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros((steps, n)) for _ in range(4))

    def as_tensor(obs: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(obs, np.float32).reshape(len(obs), obs_dim))

    next_obs = as_tensor(envs.reset(seed=args.seed)[0])
    next_done = torch.zeros(n)
    running = np.zeros(n)
    lengths = np.zeros(n, dtype=np.int64)
    episodes: list[Episode] = []
    recent: deque[float] = deque(maxlen=SOLVE_WINDOW)
    solved_step: int | None = None
    solved_s: float | None = None
    global_step = 0

    for update in range(updates):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - update / updates)
        for t in range(steps):
            obs_buf[t], done_buf[t] = next_obs, next_done
            with torch.no_grad():
                actions, logp, values = agent.act(next_obs, generator)
            act_buf[t], logp_buf[t], val_buf[t] = actions, logp, values
            obs, rewards, terms, truncs, infos = envs.step(actions.numpy())
            global_step += n
            rewards = np.asarray(rewards, np.float64)
            running += rewards
            lengths += 1
            dones = np.logical_or(terms, truncs)
            cut = np.flatnonzero(np.logical_and(truncs, ~np.asarray(terms)))
            if cut.size:  # time limit, not a real end: bootstrap from the last observation
                final = as_tensor(np.stack([infos["final_obs"][i] for i in cut]))
                with torch.no_grad():
                    rewards = rewards.copy()
                    rewards[cut] += args.gamma * agent.value(final).double().numpy()
            now = time.perf_counter() - start
            for i in np.flatnonzero(dones):
                episodes.append(Episode(kind, global_step, now, float(running[i]), int(lengths[i]), int(i)))
                recent.append(float(running[i]))
                running[i], lengths[i] = 0.0, 0
                if solved_step is None and len(recent) == SOLVE_WINDOW and np.mean(recent) >= args.solve_return:
                    solved_step, solved_s = global_step, now
            rew_buf[t] = torch.as_tensor(rewards, dtype=torch.float32)
            next_obs, next_done = as_tensor(obs), torch.as_tensor(dones, dtype=torch.float32)

        with torch.no_grad():
            next_value = agent.value(next_obs)
        advantages = gae_advantages(rew_buf, val_buf, done_buf, next_value, next_done, args.gamma, args.gae_lambda)
        rollout = Rollout(
            obs_buf.reshape(batch, obs_dim),
            act_buf.reshape(batch),
            logp_buf.reshape(batch),
            advantages.reshape(batch),
            (advantages + val_buf).reshape(batch),
            val_buf.reshape(batch),
        )
        approx_kl = ppo_update(agent, optimizer, rollout, args, generator)

        elapsed = time.perf_counter() - start
        if not args.quiet:
            mean = f"{np.mean(recent):7.1f}" if recent else "      -"
            print(
                f"[{kind}] step {global_step:>8,}  mean return (last {SOLVE_WINDOW}) {mean}  "
                f"episodes {len(episodes):>5}  SPS {global_step / elapsed:7,.0f}  "
                f"kl {approx_kl.item():.4f}  {elapsed:6.1f}s",
                flush=True,
            )
        if solved_step is not None and args.stop_when_solved:
            break

    elapsed = time.perf_counter() - start
    summary = RunSummary(
        vector=kind,
        num_envs=n,
        env_step_ms=args.env_step_ms,
        env_steps=global_step,
        wall_time_s=round(elapsed, 3),
        sps=round(global_step / elapsed, 1),
        episodes=len(episodes),
        final_mean_return=round(float(np.mean(recent)), 2) if recent else None,
        solved=solved_step is not None,
        solved_at_step=solved_step,
        solved_at_s=None if solved_s is None else round(solved_s, 3),
    )
    return episodes, summary


# -- outputs ------------------------------------------------------------------------------------


def write_csv(path: pathlib.Path, episodes: list[Episode]) -> None:
    """One row per finished episode, in the order they finished."""
    fields = [f.name for f in dataclasses.fields(Episode)]
    with replaced(path) as temporary, temporary.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for ep in episodes:
            writer.writerow(dataclasses.asdict(ep))


def read_csv(path: pathlib.Path) -> list[Episode]:
    """The episodes written by :func:`write_csv`."""
    with path.open(newline="") as f:
        return [
            Episode(
                r["vector"],
                int(r["env_step"]),
                float(r["wall_time_s"]),
                float(r["episode_return"]),
                int(r["episode_length"]),
                int(r["env_index"]),
            )
            for r in csv.DictReader(f)
        ]


def plot(episodes: list[Episode], path: pathlib.Path, title: str) -> bool:
    """Returns (rolling mean of the last 20 episodes) against env steps and against wall time.

    Returns False, with a note, when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no learning_curve.png (pip install matplotlib)")
        return False
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    for kind in dict.fromkeys(ep.vector for ep in episodes):
        eps = [ep for ep in episodes if ep.vector == kind]
        rets = np.array([ep.episode_return for ep in eps])
        smooth = np.array([rets[max(0, i - SOLVE_WINDOW + 1) : i + 1].mean() for i in range(len(rets))])
        by_step.plot([ep.env_step for ep in eps], smooth, label=kind, lw=1.2)
        by_time.plot([ep.wall_time_s for ep in eps], smooth, label=kind, lw=1.2)
    traces = {}
    for ep in episodes:
        traces.setdefault(ep.vector, []).append((ep.env_step, ep.env_index, ep.episode_return))
    same = len(traces) > 1 and all(t == next(iter(traces.values())) for t in traces.values())
    by_step.set_title("identical returns for every vector env" if same else "", fontsize=9)
    by_time.set_title("only the wall time differs" if same else "", fontsize=9)
    by_step.set_xlabel("env steps")
    by_time.set_xlabel("wall time (s)")
    by_step.set_ylabel(f"return (mean of last {SOLVE_WINDOW})")
    if episodes:  # no line to name otherwise (matplotlib warns)
        by_time.legend(loc="lower right", fontsize=8)
    for ax in (by_step, by_time):
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with replaced(path) as temporary:
        fig.savefig(temporary, dpi=72)
    plt.close(fig)
    return True


def mean_return_text(mean: float | None) -> str:
    """The summary line's words for ``final_mean_return``."""
    return "no episode finished" if mean is None else f"mean return of the last {SOLVE_WINDOW} episodes {mean}"


def curve_title(args: argparse.Namespace) -> str:
    cost = f", +{args.env_step_ms:g} ms CPU per step" if args.env_step_ms else ""
    return f"PPO on {args.env_id}, {args.num_envs} envs{cost}, seed {args.seed}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.plot is not None:
        plot(read_csv(args.plot), args.out / "learning_curve.png", curve_title(args))
        print(f"wrote {args.out}/learning_curve.png")
        return 0
    torch.set_num_threads(1)  # one thread: deterministic, and the cores stay with the env workers
    torch.use_deterministic_algorithms(True)
    episodes: list[Episode] = []
    summaries: list[RunSummary] = []
    for kind in args.kinds:
        try:
            eps, summary = train(args, kind)
        except KeyboardInterrupt as exc:
            if not summaries:  # nothing finished: run_main's line says nothing was written
                raise
            # The finished runs cost minutes each: keep them, as an uninterrupted run writes
            # them, and leave the cut run (and those not started) out, saying so.
            ended = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (Ctrl+C)"
            left_out = args.kinds[len(summaries) :]
            partial = f"the run was {ended} during the {kind} run: {', '.join(left_out)} left out"
            verb = "terminated" if isinstance(exc, Terminated) else "interrupted"
            finished = ",".join(s.vector for s in summaries)
            written: list[str] = []
            try:
                write_results(args, episodes, summaries, partial, written)
            except KeyboardInterrupt as again:  # a second Ctrl+C (or SIGTERM) cut the writing
                cut = f"{verb} during the {kind} run and again while writing the finished runs ({finished})"
                print(cut_writing_line(cut, args.out, written), file=sys.stderr, flush=True)
                return exit_status(again)
            except OSError as error:
                print(write_failed_line(error, args.out, written), file=sys.stderr, flush=True)
                return 1
            print(
                f"train_ppo.py: {verb} during the {kind} run: the finished runs ({finished}) written to "
                f"{written_text(args.out, written)}; {', '.join(left_out)} left out",
                file=sys.stderr,
                flush=True,
            )
            return exit_status(exc)
        episodes += eps
        summaries.append(summary)
        solved = (
            f"solved at step {summary.solved_at_step:,} after {summary.solved_at_s:.1f}s"
            if summary.solved
            else "not solved"
        )
        cpu = "" if summary.cpu_s is None else f", {summary.cpu_s:.1f} CPU-s"
        print(
            f"[{kind}] {summary.env_steps:,} steps in {summary.wall_time_s:.1f}s{cpu} ({summary.sps:,.0f} SPS); "
            f"{mean_return_text(summary.final_mean_return)}; {solved}",
            flush=True,
        )
    written = []
    try:
        write_results(args, episodes, summaries, None, written)
    except KeyboardInterrupt as exc:  # the runs are over, some of their files may be written
        verb = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(cut_writing_line(f"{verb} while writing the results", args.out, written), file=sys.stderr, flush=True)
        return exit_status(exc)
    except OSError as error:  # a full disk, a folder in a result file's place
        print(write_failed_line(error, args.out, written), file=sys.stderr, flush=True)
        return 1
    print(f"wrote {written_text(args.out, written)}")
    return 0


#: The files :func:`write_results` writes, in the order it writes them.
RESULT_FILES = ("episodes.csv", "summary.json", "learning_curve.png")


def write_results(
    args: argparse.Namespace,
    episodes: list[Episode],
    summaries: list[RunSummary],
    partial: str | None,
    written: list[str],
) -> None:
    """episodes.csv, summary.json and learning_curve.png of the finished runs into ``--out``;
    ``partial`` (``null`` in summary.json for a whole run) says which runs an interrupt left out.
    Each file is replaced whole or not at all, and its name is appended to ``written`` once it is
    in place: an interrupt between two files leaves some written, and the last line says which."""
    write_csv(args.out / "episodes.csv", episodes)
    written.append("episodes.csv")
    config = {k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in vars(args).items()}
    runs = [dataclasses.asdict(s) for s in summaries]
    write_text_atomically(
        args.out / "summary.json",
        json_text({"config": config, "cpu_count": os.cpu_count(), "partial": partial, "runs": runs}),
    )
    written.append("summary.json")
    if plot(episodes, args.out / "learning_curve.png", curve_title(args)):
        written.append("learning_curve.png")


def written_text(out: pathlib.Path, written: list[str]) -> str:
    """The files written into ``out``, for the last line: ``OUT/episodes.csv, summary.json``."""
    return f"{out}/{', '.join(written)}"


def cut_writing_line(
    cut: str, out: pathlib.Path, written: list[str], files: Sequence[str] = RESULT_FILES, prog: str = "train_ppo.py"
) -> str:
    """The one line for an interrupt while :func:`write_results` wrote: which files it had put in
    ``out``, and which it left as they were (absent, or from an earlier run into ``out``)."""
    left = [name for name in files if name not in written]
    done = f"{written_text(out, written)} written" if written else "nothing was written"
    return f"{prog}: {cut}: {done}; {', '.join(left)} left as {'it was' if len(left) == 1 else 'they were'}"


def write_failed_line(
    error: OSError,
    out: pathlib.Path,
    written: list[str],
    files: Sequence[str] = RESULT_FILES,
    prog: str = "train_ppo.py",
) -> str:
    """The one line for a result file that could not be written (the training is done; its
    numbers were printed): the file, the cause, and what was written or left as it was."""
    failed = next((name for name in files if name not in written), files[-1])
    cause = error.strerror or str(error) or type(error).__name__
    return cut_writing_line(f"error: cannot write {out / failed}: {cause}", out, written, files, prog)


if __name__ == "__main__":
    raise SystemExit(run_main("train_ppo.py", main))
