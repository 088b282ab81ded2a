"""What a worker knows of a policy: the recipe it is sent (:class:`WorkerPolicy`), what it is
told when it builds its copy (:class:`PolicyContext`), and the copy it runs (:class:`PolicyRunner`).

The concrete policies (random, a function, a torch module, a Stable-Baselines3 model:
:mod:`vecenv.policies`) reach a worker pickled, so the worker imports none of them, only these
interfaces.
"""

from __future__ import annotations

import abc
import dataclasses
import random
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import Space

from vecenv.errors import ArgumentTypeError
from vecenv.policy_outputs import PolicyOutputs, probe

__all__ = ["PolicyContext", "PolicyRunner", "WorkerPolicy", "copy_seed", "policy_seed", "seed_process_generators"]

#: Mixed into every env's reset seed to seed its random-action generator, so that the actions
#: are not drawn from the same stream as the env's own ``np_random``.
_POLICY_STREAM = 0x7665_6365_6E76


def policy_seed(seed: int | None) -> int | None:
    """The seed of an env's random-action generator, from the seed its env was reset with."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), _POLICY_STREAM]).generate_state(1, np.uint64)[0])


#: Mixed into an env's reset seed, with a copy's number, for the policy copies built after the
#: first since that reset (:func:`copy_seed`).
_COPY_STREAM = 0x636F_7079


def copy_seed(seed: int | None, copy: int) -> int | None:
    """The seed a worker tells the ``copy``-th policy copy it builds since its env was reset with
    ``seed`` (:attr:`PolicyContext.seeds`): ``seed`` itself for the first (0), and for each later
    one a seed derived from it and ``copy``. A policy passed after another (``"random"`` again
    after an evaluation, a new ``SB3Policy`` at each rollout) then draws new numbers instead of
    the first copy's again; the same calls after the same seeded reset draw the same ones."""
    if seed is None or copy == 0:
        return seed
    return int(np.random.SeedSequence([int(seed), _COPY_STREAM, int(copy)]).generate_state(1, np.uint64)[0])


def seed_process_generators(seed: int | None) -> None:
    """Seed this process's global generators (numpy's legacy ``np.random``, ``random`` and, where
    it is imported, torch's CPU generator) from ``seed`` (``None``: fresh entropy).

    A worker process starts with its parent's generators (fork copies them; torch's default seed
    is the same in every process), so a policy that samples from them (``Categorical.sample()``,
    ``np.random.rand``) would draw the same numbers in every worker and give groups of the
    same size the same actions. Called in worker processes only, never in the parent.
    """
    entropy = np.random.SeedSequence(None if seed is None else [int(seed), _POLICY_STREAM]).entropy
    words = np.random.SeedSequence(entropy).generate_state(3, np.uint32)
    np.random.seed(int(words[0]))
    random.seed(int(words[1]))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.random.default_generator.manual_seed(int(words[1]) << 31 | int(words[2]) >> 1)


@dataclasses.dataclass(frozen=True)
class PolicyContext:
    """What a policy copy is told about the envs it acts for.

    Attributes:
        env_ids: the global indices of its envs, in row order.
        observation_space, action_space: one env's spaces.
        seeds: each env's last reset seed (``None``: never seeded), for the first copy built
            since that reset; later copies are told seeds derived from it (:func:`copy_seed`).
    """

    env_ids: range
    observation_space: Space
    action_space: Space
    seeds: Sequence[int | None]


class PolicyRunner(abc.ABC):
    """One policy copy acting for one group of envs (built in the worker).

    A recurrent runner (``recurrent = True``) is called through :meth:`act_with_state` with
    every env's state, which the worker keeps and resets to :meth:`initial_state` at every
    episode start; others through :meth:`act`, which may return ``actions`` or
    ``(actions, extras)`` (see :mod:`vecenv.policy_outputs`).
    """

    #: Whether the runner keeps per-env state (:meth:`initial_state`, :meth:`act_with_state`).
    recurrent: bool = False
    #: Whether the code it runs may sample from the process's global generators (a user's
    #: module or function): a worker process then seeds them (:func:`seed_process_generators`)
    #: from its group's first env's seed, so that workers draw different numbers.
    uses_process_generators: bool = False

    @abc.abstractmethod
    def act(self, observations: Any, active: np.ndarray | None) -> Any:
        """A batch of actions, one row per env, for the batch of observation rows.

        ``active`` (``DISABLED`` autoreset only) marks the envs that will be stepped; the rows
        of the others are ignored, and a policy with per-env state leaves theirs alone.
        """

    def reseed(self, local: int, seed: int | None) -> None:  # noqa: B027 - most policies keep no seeds
        """Env ``local`` (row index) was reset with ``seed``; ``None`` seeds are never passed."""

    def skip(self, steps: int) -> None:  # noqa: B027 - most policies keep no random streams
        """Advance every env's random stream as ``steps`` calls of :meth:`act` on all envs would,
        without acting: where a copy that takes over from another after that many steps goes on."""

    def initial_state(self, num_envs: int) -> Any:
        """A recurrent runner's fresh state for ``num_envs`` envs: a tree of arrays (or
        tensors) whose leading dimension is ``num_envs``."""
        raise ArgumentTypeError(f"{type(self).__name__} keeps no state")

    def act_with_state(self, observations: Any, state: Any, active: np.ndarray | None) -> tuple[Any, Any, Any]:
        """A recurrent runner's ``(actions, extras or None, new state)`` for the observation
        rows and every env's state (the rows of envs ``active`` leaves out are kept as they
        were by the worker, whatever is returned for them)."""
        raise ArgumentTypeError(f"{type(self).__name__} keeps no state")

    def load_weights(self, weights: Any) -> None:
        """Replace the weights with ``weights`` (what :meth:`WorkerPolicy.weights` returns)."""
        raise ArgumentTypeError(f"{type(self).__name__} has no weights to load")


class WorkerPolicy(abc.ABC):
    """A policy the workers run; pickled once per worker, built there into a runner."""

    #: How the policy is named in messages and in datasets' metadata.
    name: str = "policy"

    @abc.abstractmethod
    def build(self, context: PolicyContext) -> PolicyRunner:
        """A runner for the envs of ``context`` (called in the worker)."""

    def weights(self) -> Any:
        """The current weights of the original, to send to every copy. Raises ``TypeError``
        for policies without weights."""
        raise ArgumentTypeError(f"policy {self.name} has no weights: pass a new policy to `rollout` instead")

    def check_weights(self, weights: Any) -> Any:
        """``weights`` as the copies will load them, checked in the parent before they are sent
        (raise :class:`~vecenv.errors.WeightsMismatchError` for weights the copies cannot load).
        The default accepts anything: a policy of one's own checks what it can."""
        return weights

    def outputs(self, context: PolicyContext, observations: Any) -> PolicyOutputs:
        """What the policy gives beyond actions (extras' layout, whether it is recurrent),
        learned in the parent from one call of a copy on the rows of ``context``'s envs."""
        return probe(self, context, observations)
