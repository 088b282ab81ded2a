"""Each env's own random stream for a Stable-Baselines3 model's stochastic actions.

SB3 samples a batch of actions with one draw from torch's generator for the whole batch, so
which numbers an env's row gets depends on how many rows share the call and where the row is
among them: the data a stochastic model collects would depend on the number of workers (each
samples its own group's rows) and on whether the model runs in the workers or in the parent.

Here every env has a generator of its own (:class:`EnvStreams`), seeded from the seed its env
was last reset with, and each step an env's row takes the same number of draws from it,
whatever the batch. The sampling of a copy's action distribution is rerouted to those draws
(:func:`reroute_sampling`), by the distribution's family:

* categorical (and multi-categorical): one uniform per dimension, the action its inverse CDF;
* Bernoulli: one uniform per dimension, 1 below the probability;
* diagonal Gaussian (tanh-squashed too, as SAC's): one standard normal per dimension, scaled by
  the standard deviation and shifted by the mean, as ``rsample`` does;
* gSDE (``use_sde=True``): no draw per step; each env's noise matrix is drawn from its stream
  when the env is seeded and when new weights arrive (their ``log_std`` scales it);
* DQN-style epsilon-greedy (a model with an ``exploration_rate`` on a ``Discrete`` space): two
  uniforms, whether this env explores and, if so, its uniform action. SB3's ``predict`` decides
  once for the whole batch; here each env decides for itself, with the same probability.

A distribution of another family (sb3-contrib's masked ones, a user's own) keeps SB3's batch
sampling on the copy's own generators: reproducible for one layout of the envs, not across
layouts. The rows' probabilities still come from one batched forward, whose last bits can
depend on the batch size (see :mod:`vecenv.policies`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vecenv.errors import InvalidStateError

__all__ = ["Draw", "EnvStreams", "Family", "RowSampling", "reroute_sampling"]

#: About how many numbers each env's stream draws at once (a block): a Python call per env
#: and block instead of per env and step.
_BLOCK_NUMBERS = 256


class Draw(enum.Enum):
    """The kind of numbers a step takes from an env's stream."""

    UNIFORM = "uniform"  # in [0, 1)
    NORMAL = "normal"  # standard normal

    def __call__(self, generator: np.random.Generator, size: Any) -> np.ndarray:
        if self is Draw.UNIFORM:
            return generator.random(size)
        return generator.standard_normal(size)


class Family(enum.Enum):
    """SB3's action distributions whose sampling this module reroutes."""

    GSDE = "gsde"
    SQUASHED_GAUSSIAN = "squashed gaussian"
    GAUSSIAN = "gaussian"
    MULTI_CATEGORICAL = "multi-categorical"
    CATEGORICAL = "categorical"
    BERNOULLI = "bernoulli"


class EnvStreams:
    """One NumPy generator per env (row), seeded with ``seeds[row]`` (``None``: from the OS).

    A step's draw takes ``count`` numbers of one kind from the stream of every active row
    (:attr:`active`, ``None`` for all); an inactive row's numbers are zeros and its stream
    stays where it was, as the env it stands for is not stepped. The numbers are drawn a block
    of steps at a time: a NumPy generator gives the same numbers whether they are drawn at once
    or a few at a time, so an env's numbers depend only on its seed and its own steps.
    """

    def __init__(self, seeds: Sequence[int | None]) -> None:
        self.generators = [np.random.default_rng(seed) for seed in seeds]
        self.active: np.ndarray | None = None
        self.kind: Draw | None = None  # what a step draws (and how many), fixed at the first draw
        self.count = 0
        self.blocks = np.zeros((len(seeds), 0, 0))  # (row, step in the block, number)
        self.used = np.zeros(len(seeds), np.int64)  # steps of each row's block used
        self.rows = np.arange(len(seeds))

    def __len__(self) -> int:
        return len(self.generators)

    def reseed(self, row: int, seed: int | None) -> None:
        self.generators[row] = np.random.default_rng(seed)
        self.used[row] = self.blocks.shape[1]  # its block is of the old stream: drawn anew

    def uniform(self, count: int) -> np.ndarray:
        """``(rows, count)`` float64 uniforms in [0, 1)."""
        return self._step(Draw.UNIFORM, count)

    def normal(self, count: int, rows: Sequence[int] | None = None) -> np.ndarray:
        """``(rows, count)`` float64 standard normals; ``rows``: drawn at once by these rows only
        (the result has only theirs), whatever :attr:`active` says, for numbers that are not a
        step's (gSDE's noise matrices)."""
        if rows is not None:
            return np.stack([self.generators[row].standard_normal(count) for row in rows]).reshape(len(rows), count)
        return self._step(Draw.NORMAL, count)

    def _layout(self, kind: Draw, count: int) -> None:
        if self.kind is None:
            steps = max(1, _BLOCK_NUMBERS // max(1, count))
            self.kind, self.count = kind, count
            self.blocks = np.zeros((len(self.generators), steps, count))
            self.used[:] = steps
        elif (kind, count) != (self.kind, self.count):
            raise InvalidStateError(
                f"EnvStreams: a step draws {self.count} {self.kind.value} numbers per env, "
                f"asked for {count} {kind.value}"
            )

    def _step(self, kind: Draw, count: int) -> np.ndarray:
        self._layout(kind, count)
        active, used, steps = self.active, self.used, self.blocks.shape[1]
        for row in np.flatnonzero(used == steps).tolist():
            if active is None or active[row]:
                self.blocks[row] = kind(self.generators[row], (steps, count))
                used[row] = 0
        out = self.blocks[self.rows, np.minimum(used, steps - 1)]
        if active is None:
            used += 1
        else:
            out[~active] = 0.0
            used += active
        return out

    def skip(self, steps: int, kind: Draw, count: int) -> None:
        """Advance every stream by ``steps`` steps' draws of ``count`` numbers of ``kind``, as
        that many steps with every row active would."""
        self._layout(kind, count)
        block = self.blocks.shape[1]
        for row, generator in enumerate(self.generators):
            left = steps - (block - int(self.used[row]))  # steps beyond the row's current block
            if left <= 0:
                self.used[row] += steps
                continue
            self.used[row] = block
            left *= count
            while left > 0:
                taken = min(left, 1 << 20)
                kind(generator, taken)
                left -= taken


class RowSampling:
    """What :func:`reroute_sampling` installed on a copy: each step's draws per env (``kind``,
    ``count``: none when ``count`` is 0) and, for gSDE, how to draw an env's noise matrix."""

    def __init__(self, streams: EnvStreams, kind: Draw, count: int) -> None:
        self.streams, self.kind, self.count = streams, kind, count
        self.redraw_noise: Callable[[Sequence[int] | None], None] | None = None
        self.explore: Callable[[Any, Any], Any] | None = None  # epsilon-greedy: (greedy, rate) -> actions

    def skip(self, steps: int) -> None:
        """Where a copy that takes over from another after ``steps`` steps goes on."""
        if self.count:
            self.streams.skip(steps, self.kind, self.count)


def _action_distribution(model: Any) -> tuple[Any, Any]:
    """The distribution object a model's policy samples from (an actor-critic's, or the actor's
    of SAC-style models); SB3 reuses that object at every forward."""
    policy = getattr(model, "policy", None)
    for owner in (policy, getattr(policy, "actor", None)):
        dist = getattr(owner, "action_dist", None)
        if dist is not None:
            return owner, dist
    return None, None


def _family(dist: Any) -> Family | None:
    """Which of SB3's distribution families ``dist`` is (``None``: none of them, or no
    distribution); a subclass counts as its base (SquashedDiagGaussian before DiagGaussian)."""
    if dist is None:
        return None
    from stable_baselines3.common import distributions as sb3

    families = (
        (sb3.StateDependentNoiseDistribution, Family.GSDE),
        (sb3.SquashedDiagGaussianDistribution, Family.SQUASHED_GAUSSIAN),
        (sb3.DiagGaussianDistribution, Family.GAUSSIAN),
        (sb3.MultiCategoricalDistribution, Family.MULTI_CATEGORICAL),
        (sb3.CategoricalDistribution, Family.CATEGORICAL),
        (sb3.BernoulliDistribution, Family.BERNOULLI),
    )
    return next((family for cls, family in families if isinstance(dist, cls)), None)


def reroute_sampling(model: Any, streams: EnvStreams, action_space: Any) -> RowSampling | None:
    """Make the stochastic actions of ``model`` (a copy of the caller's own: its distribution
    object is changed in place) come from ``streams``, one row per env; ``None`` where its
    sampling is not of a family this module knows (it is left as it was)."""
    import torch
    from gymnasium import spaces

    rate = getattr(model, "exploration_rate", None)
    if rate is not None and isinstance(action_space, spaces.Discrete):
        sampling = RowSampling(streams, Draw.UNIFORM, 2)
        n, start = int(action_space.n), int(action_space.start)

        def explore(greedy: Any, rate: float) -> Any:
            draws = streams.uniform(2)
            chosen = start + np.minimum((draws[:, 1] * n).astype(np.int64), n - 1)
            return np.where(draws[:, 0] < rate, chosen.astype(greedy.dtype), greedy)

        sampling.explore = explore
        return sampling

    owner, dist = _action_distribution(model)
    family = _family(dist)
    if family is None:
        return None
    original = dist.sample

    def batch_fits(rows: int) -> bool:
        return rows == len(streams)

    if family is Family.GSDE:
        sampling = RowSampling(streams, Draw.NORMAL, 0)
        log_std = owner.log_std
        with torch.no_grad():
            shape = tuple(dist.get_std(log_std).shape)  # the weights change its values, not its shape

        def redraw(rows: Sequence[int] | None) -> None:
            """Env ``rows``' noise matrices drawn anew from their streams; ``None``: every env's,
            scaled by the current standard deviation (new weights bring a new one)."""
            with torch.no_grad():
                chosen = list(range(len(streams)) if rows is None else rows)
                drawn = torch.as_tensor(streams.normal(int(np.prod(shape)), chosen).reshape((len(chosen), *shape)))
                if rows is None:
                    std = dist.get_std(log_std)
                    dist.weights_dist = torch.distributions.Normal(torch.zeros_like(std), std)
                    dist.exploration_matrices = drawn.to(std.dtype) * std
                    dist.exploration_mat = dist.exploration_matrices[0]  # a view: follows row 0
                else:  # the others keep theirs, at the standard deviation they were drawn with
                    std = dist.weights_dist.stddev
                    dist.exploration_matrices[chosen] = drawn.to(std.dtype) * std

        sampling.redraw_noise = redraw
        return sampling

    if family in (Family.GAUSSIAN, Family.SQUASHED_GAUSSIAN):
        squashed = family is Family.SQUASHED_GAUSSIAN

        def sample_normal() -> Any:
            normal = dist.distribution
            if not batch_fits(normal.loc.shape[0]):
                return original()
            eps = torch.as_tensor(streams.normal(normal.loc.shape[-1]), dtype=normal.loc.dtype)
            gaussian = normal.loc + eps * normal.scale
            if squashed:
                dist.gaussian_actions = gaussian
                return torch.tanh(gaussian)
            return gaussian

        dist.sample = sample_normal
        return RowSampling(streams, Draw.NORMAL, int(dist.action_dim))

    if family in (Family.CATEGORICAL, Family.MULTI_CATEGORICAL):
        multi = family is Family.MULTI_CATEGORICAL
        dims = len(dist.action_dims) if multi else 1

        def inverse_cdf(categorical: Any, uniforms: Any) -> Any:
            cdf = categorical.probs.to(torch.float64).cumsum(-1)
            index = (cdf <= uniforms[:, None]).sum(-1)
            return index.clamp_(max=cdf.shape[-1] - 1)

        def sample_categorical() -> Any:
            parts = dist.distribution if multi else [dist.distribution]
            if not batch_fits(parts[0].probs.shape[0]):
                return original()
            uniforms = torch.as_tensor(streams.uniform(dims))
            chosen = [inverse_cdf(part, uniforms[:, k]) for k, part in enumerate(parts)]
            return torch.stack(chosen, dim=1) if multi else chosen[0]

        dist.sample = sample_categorical
        return RowSampling(streams, Draw.UNIFORM, dims)

    if family is Family.BERNOULLI:

        def sample_bernoulli() -> Any:
            probs = dist.distribution.probs
            if not batch_fits(probs.shape[0]):
                return original()
            uniforms = torch.as_tensor(streams.uniform(probs.shape[-1]))
            return (uniforms < probs.to(torch.float64)).to(probs.dtype)

        dist.sample = sample_bernoulli
        return RowSampling(streams, Draw.UNIFORM, int(dist.action_dims))
    return None
