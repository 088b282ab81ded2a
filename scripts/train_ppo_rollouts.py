"""PPO with the policy in the workers: ``envs.rollout`` collects, the learner only learns.

The recipe and hyperparameters are ``scripts/train_ppo.py``'s (CleanRL's PPO, RL Baselines3
Zoo's CartPole settings). What changes is who runs the policy while collecting:

- ``--collect rollout`` (the default): every worker runs a copy of the policy on its envs for
  ``--num-steps`` steps (``envs.rollout``), one message per worker per rollout. The copy is the
  learner's network in numpy (a few rows a step: numpy's per-call cost is a fraction of
  torch's), samples the actions, and records each action's log-probability and the value
  (``rollout.extras``); new weights ride on the next rollout (``update_policy_weights``).
  ``--overlap`` starts the next rollout before the update (``rollout_async``), so the envs
  step while the learner learns; that rollout is acted by the weights one update behind, which
  PPO's ratio corrects for (the log-probs are the behaviour policy's, from the workers), and
  ``rollout.weights_version`` says so. Its advantages are bootstrapped by the same weights'
  critic as its recorded values (the MLP's: the numpy copy of the weights it acted with, which
  computed those values; the LSTM's: a copy of the agent from when it started), not by the
  weights the update made meanwhile. The workers then run below this process's priority
  (``--worker-nice 5``): a worker woken to start the next rollout waits for a free core
  rather than taking this one while it sends the other worker's command and updates.
- ``--collect step``: the same policy and sampling in this process, one ``step`` of the vector
  env (``--vector vecenv`` or Gymnasium's ``sync``) per env step, as ``train_ppo.py`` does.

``--policy lstm`` is a recurrent actor-critic (an LSTM, then actor and critic heads). The
workers carry each env's ``(h, c)`` and reset it where an episode starts; the update replays
each env's sequence from ``rollout.initial_state``, restarting from zeros at
``rollout.episode_starts``, as CleanRL's PPO-LSTM does, but in one LSTM call over every
episode's piece side by side rather than one call per step. ``--hide-velocity`` shows
CartPole only its cart position and pole angle: an MLP cannot balance the pole from that, an
LSTM can.

Outputs in ``--out``: ``episodes.csv`` (every episode, in ``train_ppo.py``'s columns: ``vector``
is how it was collected, ``rollout``, ``step-vecenv`` or ``step-sync``, and ``wall_time_s`` the
time the update of its rollout ended, when this process learns of the episode) and
``summary.json`` (per run: steps/s, steps and seconds to solve, and the split of the wall time
into ``startup_s`` (making the envs and resetting them), ``collect_s`` and ``update_s``, which add
up to ``wall_time_s`` but for the episode bookkeeping and printing; ``final_mean_return`` is
``null`` when no episode finished).
With the same seed, ``--collect rollout`` and ``--collect step`` (either ``--vector``) take the
same actions and give the same episodes: only the time differs (``--overlap`` acts with weights
one update behind, so it differs).

    python scripts/train_ppo_rollouts.py --num-envs 8 --stop-when-solved
    python scripts/train_ppo_rollouts.py --overlap
    python scripts/train_ppo_rollouts.py --collect step --vector sync
    python scripts/train_ppo_rollouts.py --policy lstm --hide-velocity --total-timesteps 500000
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import importlib.util
import itertools
import math
import pathlib
import sys
import time
import warnings
from collections import deque
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # also runs from a checkout
import vecenv  # noqa: E402
from vecenv.argtypes import (  # noqa: E402
    DefaultsHelpFormatter,
    finite_float,
    non_negative_float,
    non_negative_int,
    out_folder,
    positive_float,
    positive_int,
    unit_float,
)
from vecenv.bench.envs import costly_env  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402
from vecenv.files import json_text, write_text_atomically  # noqa: E402
from vecenv.policies import PolicyContext, PolicyRunner, WorkerPolicy  # noqa: E402

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - the message is the point
    raise SystemExit('train_ppo_rollouts.py needs torch: pip install -e ".[train]"') from None


def _load_sibling(name: str) -> Any:
    """``scripts/train_ppo.py`` as a module: its agent, GAE, update and outputs are shared."""
    path = pathlib.Path(__file__).resolve().with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_vecenv_scripts_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ppo = _load_sibling("train_ppo")
SOLVE_WINDOW = ppo.SOLVE_WINDOW


# -- command line -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="PPO with the policy in the workers (envs.rollout), or stepping for comparison.",
        formatter_class=DefaultsHelpFormatter,
    )
    g = p.add_argument_group("run")
    g.add_argument(
        "--env-id", default="CartPole-v1", help="registered Gymnasium env id (discrete actions, 1-D Box observations)"
    )
    g.add_argument(
        "--collect",
        choices=("rollout", "step"),
        default="rollout",
        help="rollout: the policy runs in the workers; step: in this process, one vector step at a time",
    )
    g.add_argument(
        "--vector", choices=("vecenv", "sync"), default="vecenv", help="with --collect step: the vector env stepped"
    )
    g.add_argument("--policy", choices=("mlp", "lstm"), default="mlp", help="actor-critic network")
    g.add_argument(
        "--hide-velocity", action="store_true", help="CartPole only: observe the cart position and pole angle only"
    )
    g.add_argument(
        "--overlap",
        action="store_true",
        help="collect the next rollout while updating: it is acted by the weights one update behind "
        "(its log-probs are theirs, which PPO's ratio corrects for); still deterministic per --seed",
    )
    g.add_argument("--num-envs", type=positive_int, default=8, help="envs stepped in parallel")
    g.add_argument(
        "--num-workers",
        type=non_negative_int,
        default=None,
        help="vecenv worker processes, at most --num-envs (0: all in this process; None: 2, or --num-envs if "
        "fewer); not with --vector sync, which has no workers",
    )
    g.add_argument(
        "--pin-cpus",
        action="store_true",
        help="vecenv: pin worker w to the w-th core this process may use (SubprocVectorEnv's pin_cpus)",
    )
    g.add_argument(
        "--worker-nice",
        type=non_negative_int,
        default=None,
        help="vecenv: run the worker processes this much below this process's CPU priority, 0 to 19 "
        "(SubprocVectorEnv's worker_nice; default: 5 with --overlap, else 0): a worker woken to start the "
        "next rollout then waits for a free core instead of taking this process's while it sends the "
        "commands and updates",
    )
    g.add_argument(
        "--inline-group",
        action="store_true",
        help="vecenv: this process hosts the first of the --num-workers groups and steps it (its policy "
        "copy too) while the worker processes step theirs: one process fewer to wake, and that group's "
        "envs share this process (SubprocVectorEnv's inline_group)",
    )
    g.add_argument("--seed", type=non_negative_int, default=1, help="seeds torch, the samplers and the envs")
    g.add_argument(
        "--total-timesteps",
        type=positive_int,
        default=100_000,
        help="env steps to train for, rounded up to whole updates of --num-envs x --num-steps",
    )
    g.add_argument("--env-step-ms", type=non_negative_float, default=0.0, help="extra CPU time burnt in each env step")
    g.add_argument(
        "--solve-return", type=finite_float, default=475.0, help=f"solved at this mean of the last {SOLVE_WINDOW}"
    )
    g.add_argument("--stop-when-solved", action="store_true", help="stop training as soon as it is solved")
    g.add_argument("--out", type=out_folder, default=pathlib.Path("runs/ppo_rollouts"), help="output folder")
    g.add_argument("--quiet", action="store_true", help="print only the summary, not every update")
    h = p.add_argument_group("PPO hyperparameters (as train_ppo.py)")
    h.add_argument("--num-steps", type=positive_int, default=32, help="steps per env in each rollout")
    h.add_argument("--learning-rate", type=positive_float, default=1e-3, help="Adam's initial learning rate")
    h.add_argument("--anneal-lr", action=argparse.BooleanOptionalAction, default=True, help="linear decay to 0")
    h.add_argument("--gamma", type=unit_float, default=0.98, help="discount factor, in [0, 1]")
    h.add_argument("--gae-lambda", type=unit_float, default=0.8, help="GAE's lambda, in [0, 1]")
    h.add_argument(
        "--minibatch-size",
        type=positive_int,
        default=None,
        help="--policy mlp only: transitions per gradient step (default: 256); the LSTM's are --num-minibatches",
    )
    h.add_argument(
        "--num-minibatches",
        type=positive_int,
        default=None,
        help="--policy lstm only: minibatches of whole env sequences (default: 1); the MLP's are --minibatch-size",
    )
    h.add_argument("--update-epochs", type=positive_int, default=20, help="passes over each rollout")
    h.add_argument("--norm-adv", action=argparse.BooleanOptionalAction, default=True, help="normalise advantages")
    h.add_argument("--clip-coef", type=non_negative_float, default=0.2, help="clip range of the probability ratio")
    h.add_argument("--clip-vloss", action=argparse.BooleanOptionalAction, default=True, help="clip the value loss")
    h.add_argument("--ent-coef", type=finite_float, default=0.0, help="weight of the entropy bonus")
    h.add_argument("--vf-coef", type=non_negative_float, default=0.5, help="weight of the value loss")
    h.add_argument("--max-grad-norm", type=positive_float, default=0.5, help="gradient-norm clip")
    h.add_argument(
        "--target-kl", type=positive_float, default=None, help="stop an update's epochs beyond this KL (default: never)"
    )
    h.add_argument(
        "--hidden",
        type=positive_int,
        default=None,
        help="--policy lstm only: the LSTM's hidden units (default: 64); the MLP's layers are fixed, as train_ppo.py's",
    )
    args = p.parse_args(argv)
    _check_args(p, args)
    return args


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What one option's ``type=`` cannot check alone; a bad value is a usage error (one line,
    exit status 2) here, before any worker or training starts. Sets the defaults of
    ``--num-workers`` and of the options that only one ``--policy`` reads."""
    _refuse_no_ops(p, args)
    if args.num_workers is None:  # 2 would refuse --num-envs 1, which the user did not ask for
        args.num_workers = min(2, args.num_envs)
    if args.vector == "vecenv" and args.num_workers > args.num_envs:
        p.error(f"argument --num-workers: expected an int in [0, --num-envs={args.num_envs}], got {args.num_workers}")
    if args.overlap and args.collect != "rollout":
        p.error(f"argument --overlap: expected --collect rollout, got --collect {args.collect}")
    if args.overlap and args.num_workers == 0:  # the rollout would run in this process, after the update
        p.error("argument --overlap: expected --num-workers of at least 1 (with 0 nothing overlaps), got 0")
    if args.collect == "rollout" and args.vector != "vecenv":
        p.error(
            f"argument --vector: expected vecenv with --collect rollout (sync is for --collect step), got {args.vector}"
        )
    if args.pin_cpus and args.vector != "vecenv":  # SyncVectorEnv has no workers to pin
        p.error(f"argument --pin-cpus: expected --vector vecenv (it pins vecenv's workers), got --vector {args.vector}")
    if args.worker_nice is None:
        args.worker_nice = 5 if args.overlap else 0
    if args.worker_nice > 19:
        p.error(f"argument --worker-nice: expected an int in [0, 19], got {args.worker_nice}")
    if args.worker_nice and (args.vector != "vecenv" or args.num_workers == 0):  # no worker processes
        got = f"--vector {args.vector}" if args.vector != "vecenv" else "--num-workers 0"
        p.error(f"argument --worker-nice: expected vecenv's worker processes (--vector vecenv), got {got}")
    if args.inline_group and args.vector != "vecenv":
        p.error(f"argument --inline-group: expected --vector vecenv (sync has no groups), got --vector {args.vector}")
    if args.inline_group and args.num_workers < 2:  # 0 or 1 group: everything is in this process already
        p.error(
            "argument --inline-group: expected --num-workers of at least 2 (the first group here, the others in "
            f"workers), got {args.num_workers}"
        )
    if args.inline_group and args.overlap:  # this process cannot step its group while it updates
        p.error(
            "argument --inline-group: expected no --overlap (the first group runs in this process, which "
            "steps it after the update, not during it), got --overlap"
        )
    if args.policy == "mlp" and args.minibatch_size is None:
        args.minibatch_size = 256
    if args.policy == "lstm":
        args.num_minibatches = 1 if args.num_minibatches is None else args.num_minibatches
        args.hidden = 64 if args.hidden is None else args.hidden
    batch = args.num_envs * args.num_steps
    if args.policy == "mlp" and batch % min(args.minibatch_size, batch):  # a short last one: 1 row, NaN std
        p.error(
            f"argument --minibatch-size: expected a divisor of --num-envs x --num-steps ({batch}) with --policy mlp, "
            f"got {args.minibatch_size}"
        )
    if args.policy == "lstm" and args.num_envs % args.num_minibatches:
        p.error(
            f"argument --num-minibatches: expected a divisor of --num-envs ({args.num_envs}) with --policy lstm, "
            f"got {args.num_minibatches}"
        )
    if args.norm_adv and args.policy == "mlp" and min(args.minibatch_size, batch) < 2:
        if args.minibatch_size < 2:
            ppo.refuse_one_row_minibatches(p, "--minibatch-size", str(args.minibatch_size))
        ppo.refuse_one_row_minibatches(p, "--num-steps", f"--num-envs {args.num_envs} x --num-steps {args.num_steps}")
    if args.norm_adv and args.policy == "lstm" and args.num_envs // args.num_minibatches * args.num_steps < 2:
        ppo.refuse_one_row_minibatches(
            p, "--num-minibatches", f"{args.num_minibatches} (of {args.num_envs} envs x --num-steps {args.num_steps})"
        )
    env = ppo.check_env(p, args.env_id)
    space = env.observation_space
    if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):  # the workers' copies take rows of floats
        p.error(
            f"argument --env-id: expected an env whose observations are a 1-D Box, got {args.env_id!r} with {space}"
        )
    if args.hide_velocity and (env.spec is None or env.spec.name != "CartPole"):
        p.error(f"argument --hide-velocity: expected a CartPole env id, got --env-id {args.env_id!r}")


def _refuse_no_ops(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for an option given where it changes nothing: a user who sets it believes the
    run used it (its value is recorded in summary.json's config all the same)."""
    only_lstm = {"--hidden": args.hidden, "--num-minibatches": args.num_minibatches}
    for option, value in only_lstm.items():
        if args.policy == "mlp" and value is not None:
            p.error(f"argument {option}: expected --policy lstm (the MLP does not read it), got --policy mlp")
    if args.policy == "lstm" and args.minibatch_size is not None:
        p.error(
            "argument --minibatch-size: expected --policy mlp (the LSTM's minibatches are whole env sequences: "
            "--num-minibatches), got --policy lstm"
        )
    if args.vector == "sync" and args.collect == "step" and args.num_workers is not None:
        p.error(f"argument --num-workers: expected --vector vecenv (sync has no workers), got --vector {args.vector}")


# -- envs ---------------------------------------------------------------------------------------


def make_env(env_id: str, iterations: int, hide_velocity: bool) -> gym.Env:
    """One env, burning ``iterations`` of CPU per step; CartPole without its velocities when asked."""
    env = costly_env(env_id, iterations)
    if hide_velocity:
        low, high = env.observation_space.low[[0, 2]], env.observation_space.high[[0, 2]]
        space = gym.spaces.Box(low, high, dtype=np.float32)
        env = gym.wrappers.TransformObservation(env, lambda obs: obs[[0, 2]], space)
    return env


def make_envs(args: argparse.Namespace) -> gym.vector.VectorEnv:
    cost = round(args.env_step_ms * ppo.iterations_per_ms()) if args.env_step_ms else 0
    fns = [functools.partial(make_env, args.env_id, cost, args.hide_velocity)] * args.num_envs
    mode = gym.vector.AutoresetMode.SAME_STEP
    if args.vector == "sync":
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    return vecenv.SubprocVectorEnv(
        fns,
        args.num_workers,
        autoreset_mode=mode,
        pin_cpus=args.pin_cpus,
        inline_group=args.inline_group,
        worker_nice=args.worker_nice,
    )


# -- the agents (torch, for learning) -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Segments:
    """Each env's steps of a rollout cut where its episodes start: what one batched LSTM call
    replays at once, each piece from the state it starts from.

    Segment ``k`` is env ``env[k]``'s steps ``start[k]`` to ``start[k] + length[k] - 1``. It
    starts from the rollout's initial state where ``carried[k]`` (the env's first segment, unless
    an episode starts at the rollout's first step), else from zeros. Step ``t`` of env ``e`` is
    step ``offset[t, e]`` of segment ``index[t, e]``."""

    env: np.ndarray
    start: np.ndarray
    length: np.ndarray
    carried: np.ndarray
    index: np.ndarray
    offset: np.ndarray

    @classmethod
    def of(cls, starts: np.ndarray) -> Segments:
        """The segments of a ``(T, n)`` mask of episode starts."""
        steps, n = starts.shape
        begins = starts.astype(bool).T.copy()  # (n, T): each env's steps in order
        begins[:, 0] = True
        flat = begins.ravel()
        first = np.flatnonzero(flat)
        index = (np.cumsum(flat) - 1).reshape(n, steps).T
        start = first % steps
        return cls(
            env=first // steps,
            start=start,
            length=np.diff(np.append(first, flat.size)),
            carried=(start == 0) & ~starts[0, first // steps].astype(bool),
            index=index,
            offset=np.arange(steps)[:, None] - start[index],
        )


class LSTMAgent(nn.Module):
    """An LSTM over the observations, then an actor and a critic head (one tanh layer of 64
    each) on its output: RL Baselines3 Zoo's recurrent CartPole network, one LSTM shared."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.lstm = nn.LSTM(obs_dim, hidden)
        self.actor = nn.Sequential(ppo.layer(hidden, 64), nn.Tanh(), ppo.layer(64, n_actions, 0.01))
        self.critic = nn.Sequential(ppo.layer(hidden, 64), nn.Tanh(), ppo.layer(64, 1, 1.0))

    def replay(self, obs: torch.Tensor, segments: Segments, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The LSTM's outputs ``(T, n, hidden)`` over a ``(T, n, ...)`` sequence that starts from
        ``state`` (``(n, hidden)`` each) and restarts from zeros where an episode starts.

        One call of the LSTM over every segment side by side, padded at their ends (which the
        outputs kept never see: an LSTM looks only backwards), instead of a call per step: the
        same outputs, several times faster forwards and backwards."""
        env = torch.as_tensor(segments.env)
        steps = torch.as_tensor(segments.start)[None, :] + torch.arange(int(segments.length.max()))[:, None]
        x = obs[steps.clamp(max=obs.shape[0] - 1), env]
        out, _ = self.lstm(x, _initial_state(state, env, segments.carried))
        return out[torch.as_tensor(segments.offset), torch.as_tensor(segments.index)]

    def state_after(
        self, obs: torch.Tensor, segments: Segments, state: tuple[torch.Tensor, torch.Tensor], k: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h, c)`` (``(1, hidden)`` each) after the last step of segment ``k``."""
        env = torch.as_tensor(segments.env[k : k + 1])
        start, length = int(segments.start[k]), int(segments.length[k])
        _, (h, c) = self.lstm(obs[start : start + length, env], _initial_state(state, env, segments.carried[k : k + 1]))
        return h[0], c[0]

    def step(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The LSTM's output for one step ``(n, ...)`` from ``state``."""
        out, _ = self.lstm(x[None], (state[0][None], state[1][None]))
        return out[0]


def _initial_state(
    state: tuple[torch.Tensor, torch.Tensor], env: torch.Tensor, carried: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor]:
    """The LSTM's ``(h0, c0)`` for pieces of envs ``env``: their env's row of ``state`` where
    ``carried``, zeros where the piece starts an episode."""
    keep = torch.as_tensor(carried, dtype=state[0].dtype)[:, None]
    return (state[0][env] * keep)[None], (state[1][env] * keep)[None]


# -- the policy in the workers (numpy) ----------------------------------------------------------


def _linear_layers(weights: dict[str, np.ndarray], prefix: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ``(weight, bias)`` pairs of a Linear (``prefix.weight``) or a Sequential's Linears."""
    if f"{prefix}.weight" in weights:
        return [(weights[f"{prefix}.weight"], weights[f"{prefix}.bias"])]
    indices = sorted({int(k.split(".")[1]) for k in weights if k.startswith(prefix + ".")})
    return [(weights[f"{prefix}.{i}.weight"], weights[f"{prefix}.{i}.bias"]) for i in indices]


def _fused_heads(
    actor: list[tuple[np.ndarray, np.ndarray]], critic: list[tuple[np.ndarray, np.ndarray]]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The actor and the critic as one MLP whose output is ``[logits..., value]``: the first
    layers stacked, the later ones block-diagonal, each weight transposed once here. On the few
    rows a worker steps, a numpy call costs more than its arithmetic, so one product per layer
    instead of two halves the policy's time per step."""
    assert len(actor) == len(critic), "the actor and the critic have as many layers"
    fused = []
    for i, ((wa, ba), (wc, bc)) in enumerate(zip(actor, critic, strict=True)):
        if i == 0:
            w = np.concatenate([wa, wc], axis=0)
        else:
            w = np.zeros((wa.shape[0] + wc.shape[0], wa.shape[1] + wc.shape[1]), np.float32)
            w[: wa.shape[0], : wa.shape[1]] = wa
            w[wa.shape[0] :, wa.shape[1] :] = wc
        fused.append((np.ascontiguousarray(w.T), np.concatenate([ba, bc])))
    return fused


def _rows_times(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w``, each row's result the same however many rows come with it. One BLAS product
    over all rows may differ in its last bits with the row count (its kernels block rows in
    fours and eights), so the workers' forwards on their own rows would differ from one forward
    on every env's rows. Here each row is its own ``(1, k) @ (k, m)`` product (a stack of
    one-row matrices, one BLAS call per row with the same shapes whatever the row count). The
    price, measured on the default MLP over a worker's 4 rows: 9 us a forward against 6 us for
    one BLAS product (and 19 us for a sum in one fixed order, numpy's einsum loop)."""
    return np.matmul(x[:, None, :], w)[:, 0, :]


def _forward(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """:func:`_mlp` over weights already transposed (:func:`_fused_heads`), row by row exact
    (:func:`_rows_times`)."""
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        x = _rows_times(x, w)
        x += b
        if i < last:
            np.tanh(x, out=x)
    return x


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


class NumpyActorCritic(WorkerPolicy):
    """The learner's actor-critic as a worker policy: its weights in numpy in every worker.

    Each env's actions are sampled from a generator of its own, seeded from ``seed`` and the
    env's index, whoever runs the copy: so the workers' rollouts and ``--collect step`` (one
    copy for every env) draw the same random numbers, and with the same seed take the same
    actions and train the same weights. Returns ``{"log_prob", "value"}`` beside the actions.
    The LSTM kind is recurrent: its state is ``(h, c)``, zeros at every episode start.

    The weights travel as the copies use them: the actor and the critic fused into one MLP
    (:func:`_fused_heads`), the LSTM's matrices transposed and its biases summed, made once
    here per update rather than in every worker before every rollout.
    """

    def __init__(self, agent: nn.Module, kind: str, seed: int) -> None:
        self.agent, self.kind, self.seed = agent, kind, seed
        self.name = f"numpy-{kind}"
        self.hidden = getattr(agent, "hidden", 0)
        self._initial = self.weights()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("agent", None)  # the learner stays here; the copies get its weights
        return state

    def weights(self) -> dict[str, np.ndarray]:
        """The learner's weights as the copies use them: ``layer{i}.weight`` and
        ``layer{i}.bias`` of the fused MLP (weights transposed), and for the LSTM
        ``cell.input``, ``cell.hidden`` (transposed) and ``cell.bias`` (both biases)."""
        learned = {k: v.detach().numpy() for k, v in self.agent.state_dict().items()}
        heads = _fused_heads(_linear_layers(learned, "actor"), _linear_layers(learned, "critic"))
        out = {}
        for i, (w, b) in enumerate(heads):
            out[f"layer{i}.weight"], out[f"layer{i}.bias"] = w, b
        if self.kind == "lstm":
            out["cell.input"] = np.ascontiguousarray(learned["lstm.weight_ih_l0"].T)
            out["cell.hidden"] = np.ascontiguousarray(learned["lstm.weight_hh_l0"].T)
            out["cell.bias"] = learned["lstm.bias_ih_l0"] + learned["lstm.bias_hh_l0"]
        return out

    def build(self, context: PolicyContext) -> PolicyRunner:
        rngs = [np.random.default_rng([self.seed, env]) for env in context.env_ids]
        runner = _NumpyRunner(self.kind, self.hidden, rngs)
        runner.load_weights(self._initial)
        return runner


class _NumpyRunner(PolicyRunner):
    def __init__(self, kind: str, hidden: int, rngs: list[np.random.Generator]) -> None:
        self.kind, self.hidden, self.rngs = kind, hidden, rngs
        self.rows = np.arange(0)
        self.recurrent = kind == "lstm"

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Weights as :meth:`NumpyActorCritic.weights` gives them: nothing left to convert."""
        layers = sum(1 for k in weights if k.startswith("layer") and k.endswith(".weight"))
        self.heads = [(weights[f"layer{i}.weight"], weights[f"layer{i}.bias"]) for i in range(layers)]
        self.n_actions = self.heads[-1][0].shape[1] - 1  # the last column is the value
        if self.kind == "lstm":
            self.w_input, self.w_hidden = weights["cell.input"], weights["cell.hidden"]
            self.bias = weights["cell.bias"]

    def _sample(self, out: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions sampled from the logits in ``out[:, :-1]``, their log-probabilities and the
        values in ``out[:, -1]`` (float32). A handful of numpy calls on a few rows
        cost more than their arithmetic, so this makes as few as it can."""
        n, k = len(out), self.n_actions
        logits = out[:, :k]
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1)
        # Inverse CDF on the unnormalised weights: u * total against their running sum; one
        # uniform per env from its own generator (see NumpyActorCritic).
        u = np.fromiter([rng.random() for rng in self.rngs], np.float64, n) * total
        if k == 2:
            actions = (exp[:, 0] < u).astype(np.int64)
        else:
            actions = np.minimum((np.cumsum(exp, axis=1) < u[:, None]).sum(axis=1), k - 1)
        if len(self.rows) < n:
            self.rows = np.arange(n)
        chosen = shifted[self.rows[:n], actions] - np.log(total)
        return actions, {"log_prob": chosen, "value": out[:, k]}

    def act(self, observations: Any, active: np.ndarray | None) -> Any:
        return self._sample(_forward(np.asarray(observations, np.float32), self.heads))

    def initial_state(self, num_envs: int) -> Any:
        zeros = np.zeros((num_envs, self.hidden), np.float32)
        return zeros, zeros.copy()

    def act_with_state(self, observations: Any, state: Any, active: np.ndarray | None) -> tuple[Any, Any, Any]:
        h, c = state
        gates = _rows_times(np.asarray(observations, np.float32), self.w_input) + _rows_times(h, self.w_hidden)
        gates += self.bias
        i, f, g, o = np.split(gates, 4, axis=1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        actions, extras = self._sample(_forward(h, self.heads))
        return actions, extras, (h, c)


# -- collecting ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Batch:
    """One rollout as the learner needs it, ``(T, n, ...)`` arrays."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    final_observations: np.ndarray
    last_observations: np.ndarray
    log_prob: np.ndarray
    value: np.ndarray
    episode_starts: np.ndarray
    initial_state: Any
    weights_version: int


def from_rollout(r: vecenv.Rollout) -> Batch:
    return Batch(
        r.observations,
        r.actions,
        r.rewards,
        r.terminations,
        r.truncations,
        r.final_observations,
        r.last_observations,
        r.extras["log_prob"],
        r.extras["value"],
        r.episode_starts,
        r.initial_state,
        r.weights_version,
    )


class StepCollector:
    """The same policy and sampling in this process, one vector step at a time."""

    def __init__(self, envs: Any, policy: NumpyActorCritic, n: int, seed: int) -> None:
        self.envs, self.policy, self.n = envs, policy, n
        space = envs.single_observation_space
        self.runner = policy.build(PolicyContext(range(n), space, envs.single_action_space, [seed] * n))
        self.obs, _ = envs.reset(seed=seed)
        self.starts = np.ones(n, bool)
        self.state = self.runner.initial_state(n) if self.runner.recurrent else None
        self.version = 0

    def collect(self, steps: int, weights: dict[str, np.ndarray]) -> Batch:
        """``steps`` vector steps acted by ``weights`` (:meth:`NumpyActorCritic.weights`)."""
        self.runner.load_weights(weights)
        self.version += 1
        runner = self.runner
        rows: dict[str, list[Any]] = {k: [] for k in ("obs", "act", "rew", "term", "trunc", "lp", "v", "starts")}
        finals = np.zeros((steps, *self.obs.shape), np.float32)
        initial = None if self.state is None else tuple(a.copy() for a in self.state)
        for t in range(steps):
            rows["obs"].append(self.obs)
            rows["starts"].append(self.starts.copy())
            if self.state is not None:
                actions, extras, self.state = runner.act_with_state(self.obs, self.state, None)
            else:
                actions, extras = runner.act(self.obs, None)
            obs, rewards, terms, truncs, infos = self.envs.step(actions)
            ended = terms | truncs
            for i in np.flatnonzero(ended):
                finals[t, i] = infos["final_obs"][i]
            if self.state is not None and ended.any():
                self.state = tuple(np.where(ended[:, None], 0.0, a).astype(np.float32) for a in self.state)
            self.starts = ended
            for key, value in zip(
                ("act", "rew", "term", "trunc", "lp", "v"),
                (actions, rewards, terms, truncs, extras["log_prob"], extras["value"]),
            ):
                rows[key].append(np.asarray(value))
            self.obs = obs
        s = {k: np.stack(v) for k, v in rows.items()}
        return Batch(
            s["obs"], s["act"], s["rew"], s["term"], s["trunc"], finals, self.obs, s["lp"], s["v"], s["starts"],
            initial, self.version,
        )  # fmt: skip


# -- learning -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Timings:
    startup_s: float = 0.0  # making the envs (the workers start) and their first reset
    collect_s: float = 0.0  # waiting for (or making) rollouts
    update_s: float = 0.0  # advantages, PPO epochs and the weights push


class WeightsCopies:
    """Copies of the agent, refilled in turn with its current weights (:meth:`refill`).

    The tensors of each copy and of the agent are listed once: walking the modules for them
    on every refill cost more than the copies themselves."""

    def __init__(self, agent: nn.Module, count: int) -> None:
        self.copies = [copy.deepcopy(agent) for _ in range(count)]
        self._source = _tensors(agent)
        self._targets = [_tensors(c) for c in self.copies]

    def refill(self, index: int) -> nn.Module:
        """Copy ``index``, holding the agent's current weights."""
        with torch.no_grad():
            for d, w in zip(self._targets[index], self._source, strict=True):
                d.copy_(w)
        return self.copies[index]


class NumpyCritic:
    """The critic of weights as the copies use them (:meth:`NumpyActorCritic.weights`), computed
    as the copies compute it: a rollout's bootstrap values from the weights that acted in it are
    then the values its copies would have recorded. Holding one costs nothing: each version's
    weights are new arrays, which nothing writes afterwards."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        layers = sum(1 for k in weights if k.startswith("layer") and k.endswith(".weight"))
        self.heads = [(weights[f"layer{i}.weight"], weights[f"layer{i}.bias"]) for i in range(layers)]

    def value(self, obs: Any) -> torch.Tensor:
        """``V(obs)`` for a batch of observations (an array or a CPU tensor)."""
        return torch.from_numpy(_forward(np.asarray(obs, np.float32), self.heads)[:, -1].copy())


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    """The parameters and buffers of ``module``, in a fixed order (its copies list theirs alike)."""
    return list(itertools.chain(module.parameters(), module.buffers()))


def advantages_of(
    agent: nn.Module | NumpyCritic, kind: str, b: Batch, args: argparse.Namespace
) -> tuple[torch.Tensor, ...]:
    """GAE over the rollout, with the behaviour policy's values; a truncated episode's reward
    gets ``gamma * V(final observation)``, the last step's value is bootstrapped by ``agent``:
    the weights that acted (the LSTM agent or its copy; the MLP's :class:`NumpyCritic`)."""
    tensor = functools.partial(torch.as_tensor, dtype=torch.float32)
    rewards = tensor(b.rewards).clone()
    values = tensor(b.value)
    cut = b.truncations & ~b.terminations
    with torch.no_grad():
        if kind == "lstm":
            state = (tensor(b.initial_state[0]), tensor(b.initial_state[1]))
            obs = torch.cat([tensor(b.observations), tensor(b.last_observations)[None]])
            ended = b.terminations | b.truncations
            segments = Segments.of(np.concatenate([b.episode_starts, ended[-1:]]))
            next_value = agent.critic(agent.replay(obs, segments, state)[-1]).squeeze(-1)
            # A truncated episode's final observation follows the state after its last step
            # (which ends its segment: the next step starts an episode).
            for t, e in zip(*np.nonzero(cut)):
                h, c = agent.state_after(obs, segments, state, int(segments.index[t, e]))
                h_fin = agent.step(tensor(b.final_observations[t, e])[None], (h, c))
                rewards[t, e] += args.gamma * agent.critic(h_fin).squeeze()
        else:
            next_value = agent.value(tensor(b.last_observations))
            if cut.any():
                rewards[cut] += args.gamma * agent.value(tensor(b.final_observations[cut]))
    dones = tensor(b.episode_starts)
    next_done = tensor(b.terminations[-1] | b.truncations[-1])
    adv = ppo.gae_advantages(rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda)
    return adv, adv + values


def lstm_update(
    agent: LSTMAgent,
    optimizer: torch.optim.Optimizer,
    b: Batch,
    adv: torch.Tensor,
    ret: torch.Tensor,
    args: Any,
    generator: torch.Generator,
) -> tuple[float, float]:
    """PPO epochs over minibatches of whole env sequences, replayed from the initial state."""
    tensor = functools.partial(torch.as_tensor, dtype=torch.float32)
    obs = tensor(b.observations)
    actions, old_logp, old_v = torch.as_tensor(b.actions, dtype=torch.long), tensor(b.log_prob), tensor(b.value)
    h0, c0 = (tensor(a) for a in b.initial_state)
    n = obs.shape[1]
    per = n // args.num_minibatches
    loss = kl = torch.zeros(())
    for _ in range(args.update_epochs):
        order = torch.randperm(n, generator=generator)
        for lo in range(0, n, per):
            e = order[lo : lo + per]
            hs = agent.replay(obs[:, e], Segments.of(b.episode_starts[:, e.numpy()]), (h0[e], c0[e]))
            logp_all = agent.actor(hs).log_softmax(-1)
            logp = logp_all.gather(-1, actions[:, e, None]).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            value = agent.critic(hs).squeeze(-1)
            loss, kl = _ppo_loss(logp, old_logp[:, e], adv[:, e], value, old_v[:, e], ret[:, e], entropy, args)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and kl > args.target_kl:
            break
    return float(loss.detach()), float(kl.detach())


def _ppo_loss(logp, old_logp, adv, value, old_v, ret, entropy, args) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    with torch.no_grad():
        kl = ((ratio - 1) - log_ratio).mean()
    if args.norm_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
    if args.clip_vloss:
        clipped = old_v + (value - old_v).clamp(-args.clip_coef, args.clip_coef)
        v_loss = 0.5 * torch.max((value - ret) ** 2, (clipped - ret) ** 2).mean()
    else:
        v_loss = 0.5 * ((value - ret) ** 2).mean()
    return pg - args.ent_coef * entropy.mean() + args.vf_coef * v_loss, kl


def mlp_update(
    agent: Any, optimizer: Any, b: Batch, adv: torch.Tensor, ret: torch.Tensor, args: Any, generator: torch.Generator
) -> tuple[float, float]:
    """train_ppo.py's update on the flattened rollout, the old log-probs the workers'."""
    size = b.actions.size
    obs = torch.as_tensor(b.observations, dtype=torch.float32).reshape(size, -1)
    rollout = ppo.Rollout(
        obs,
        torch.as_tensor(b.actions, dtype=torch.long).reshape(size),
        torch.as_tensor(b.log_prob).reshape(size),
        adv.reshape(size),
        ret.reshape(size),
        torch.as_tensor(b.value).reshape(size),
    )
    kl = ppo.ppo_update(agent, optimizer, rollout, args, generator)
    with torch.no_grad():  # the loss at the end, for the record
        logp, entropy, value = agent.evaluate(rollout.obs, rollout.actions)
        loss, _ = _ppo_loss(
            logp, rollout.logp, rollout.advantages, value, rollout.values, rollout.returns, entropy, args
        )
    return float(loss), float(kl)


@dataclasses.dataclass
class Summary:
    collect: str
    policy: str
    overlap: bool
    num_envs: int
    env_steps: int
    updates: int
    wall_time_s: float
    sps: float
    startup_s: float
    collect_s: float
    update_s: float
    episodes: int
    final_mean_return: float | None  # None (null in summary.json) when no episode finished
    solved: bool
    solved_at_step: int | None
    solved_at_s: float | None
    weights_versions: list[int]
    losses: list[float]


def train(args: argparse.Namespace) -> tuple[Summary, list[Any]]:
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    envs = make_envs(args)
    try:
        return _train(args, envs, start)
    finally:
        with warnings.catch_warnings():
            # Ctrl+C or SIGTERM with the next rollout under way (--overlap): dropping it is what
            # the user asked for, and the run ends on run_main's one line, not a warning too.
            warnings.filterwarnings("ignore", message=".*Calling `close` while waiting for a pending call")
            envs.close()


def _train(args: argparse.Namespace, envs: Any, start: float) -> tuple[Summary, list[Any]]:
    """The training run, and its finished episodes (``train_ppo.Episode``, in finishing order)."""
    n, steps = args.num_envs, args.num_steps
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    n_actions = int(envs.single_action_space.n)
    agent = LSTMAgent(obs_dim, n_actions, args.hidden) if args.policy == "lstm" else ppo.Agent(obs_dim, n_actions)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    policy = NumpyActorCritic(agent, args.policy, args.seed)
    updates = math.ceil(args.total_timesteps / (n * steps))
    timings = Timings()
    running, lengths = np.zeros(n), np.zeros(n, np.int64)
    recent: deque[float] = deque(maxlen=SOLVE_WINDOW)
    episodes, global_step = 0, 0
    solved_step: int | None = None
    solved_s: float | None = None
    kind = args.collect if args.collect == "rollout" else f"step-{args.vector}"
    finished: list[Any] = []
    versions: list[int] = []
    losses: list[float] = []
    collector = None
    if args.collect == "step":
        collector = StepCollector(envs, policy, n, args.seed)
    else:
        envs.reset(seed=args.seed)
    timings.startup_s = time.perf_counter() - start

    def collect() -> Batch:
        t0 = time.perf_counter()
        if collector is not None:
            batch = collector.collect(steps, pushed)
        elif pending[0]:
            batch = from_rollout(envs.rollout_wait())
            pending[0] = False
        else:
            batch = from_rollout(envs.rollout(steps, policy))
        timings.collect_s += time.perf_counter() - t0
        return batch

    pending = [False]
    # The weights that act in the rollout under way, whose critic bootstraps its advantages:
    # the agent's own, but for a rollout that runs beside the update (--overlap), the weights
    # from when that rollout started, as its recorded values are. The MLP's critic is computed
    # from the weights as the copies got them (NumpyCritic: nothing to copy). The LSTM's is the
    # agent's, replayed in torch: two copies of the agent, used in turn, the one of the rollout
    # being learned from kept until its advantages are computed. Made once; refilling one
    # costs ~50 us an update, a deep copy ~600 us.
    pushed = policy.weights()  # the copies' weights now (in the workers, those they start with)
    critic: nn.Module | NumpyCritic = NumpyCritic(pushed) if args.policy == "mlp" else agent
    copies = WeightsCopies(agent, 2) if args.overlap and args.policy == "lstm" else None
    acting = critic
    for update in range(updates):
        batch = collect()
        acted = acting if args.overlap else critic
        if args.overlap and update + 1 < updates:
            t0 = time.perf_counter()
            envs.rollout_async(steps, policy)  # acted by the weights before this update
            pending[0] = True
            acting = critic if copies is None else copies.refill(update % 2)
            timings.collect_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        versions.append(batch.weights_version)
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - update / updates)
        adv, ret = advantages_of(acted, args.policy, batch, args)
        update_fn = lstm_update if args.policy == "lstm" else mlp_update
        # The minibatches' order: a stream of its own per update (not per weights version, which
        # two updates share when the next rollout overlaps the update; nor seed + update, which
        # runs of neighbouring seeds would share).
        shuffle = torch.Generator().manual_seed(int(np.random.SeedSequence([args.seed, update]).generate_state(1)[0]))
        loss, kl = update_fn(agent, optimizer, batch, adv, ret, args, shuffle)
        losses.append(loss)
        pushed = policy.weights()
        if collector is None:
            envs.update_policy_weights(pushed)
        if args.policy == "mlp":
            critic = NumpyCritic(pushed)
        timings.update_s += time.perf_counter() - t0
        # Episode bookkeeping from the rollout's rewards and ends.
        ended = batch.terminations | batch.truncations
        now = time.perf_counter() - start
        for t in range(steps):
            global_step += n
            running += batch.rewards[t]
            lengths += 1
            for i in np.flatnonzero(ended[t]):
                episodes += 1
                recent.append(float(running[i]))
                finished.append(
                    ppo.Episode(kind, global_step, round(now, 3), float(running[i]), int(lengths[i]), int(i))
                )
                running[i], lengths[i] = 0.0, 0
                if solved_step is None and len(recent) == SOLVE_WINDOW and np.mean(recent) >= args.solve_return:
                    solved_step, solved_s = global_step, now
        if not args.quiet:
            mean = f"{np.mean(recent):7.1f}" if recent else "      -"
            print(
                f"[{args.collect}/{args.policy}] step {global_step:>8,}  mean return {mean}  loss {loss:8.4f}  "
                f"kl {kl:.4f}  weights v{batch.weights_version}  collect {timings.collect_s:6.1f}s  "
                f"update {timings.update_s:6.1f}s",
                flush=True,
            )
        if solved_step is not None and args.stop_when_solved:
            break
    if pending[0]:  # stopped early with one under way: collected and dropped
        t0 = time.perf_counter()
        envs.rollout_wait()
        timings.collect_s += time.perf_counter() - t0
    elapsed = time.perf_counter() - start
    summary = Summary(
        kind,
        args.policy,
        args.overlap,
        n,
        global_step,
        len(versions),
        round(elapsed, 3),
        round(global_step / elapsed, 1),
        round(timings.startup_s, 3),
        round(timings.collect_s, 3),
        round(timings.update_s, 3),
        episodes,
        round(float(np.mean(recent)), 2) if recent else None,
        solved_step is not None,
        solved_step,
        None if solved_s is None else round(solved_s, 3),
        versions,
        losses,
    )
    return summary, finished


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    summary, finished = train(args)
    solved = (
        f"solved at step {summary.solved_at_step:,} after {summary.solved_at_s:.1f}s"
        if summary.solved
        else "not solved"
    )
    print(
        f"[{summary.collect}/{summary.policy}{' overlap' if summary.overlap else ''}] {summary.env_steps:,} steps in "
        f"{summary.wall_time_s:.1f}s ({summary.sps:,.0f} SPS; start-up {summary.startup_s:.1f}s, "
        f"collect {summary.collect_s:.1f}s, update {summary.update_s:.1f}s); "
        f"{ppo.mean_return_text(summary.final_mean_return)}; "
        f"{solved}",
        flush=True,
    )
    config = {k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in vars(args).items()}
    written: list[str] = []
    try:
        ppo.write_csv(args.out / "episodes.csv", finished)
        written.append("episodes.csv")
        summary_text = json_text({"config": config, "run": dataclasses.asdict(summary)})
        write_text_atomically(args.out / "summary.json", summary_text)
    except OSError as error:  # a full disk, a folder in a result file's place
        print(ppo.write_failed_line(error, args.out, written, _RESULT_FILES, PROG), file=sys.stderr, flush=True)
        return 1
    return 0


#: The files :func:`main` writes into ``--out``, in that order.
_RESULT_FILES = ("episodes.csv", "summary.json")
PROG = "train_ppo_rollouts.py"


if __name__ == "__main__":
    raise SystemExit(run_main(PROG, main))
