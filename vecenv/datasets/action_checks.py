"""Checking the policy's actions before the envs see them: ``ActionChecker`` in this process,
``CheckedPolicy`` around a policy that runs in the workers."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from vecenv.datasets.errors import PolicyError
from vecenv.errors import InvalidArgumentError, describe
from vecenv.policy_outputs import PolicyOutputs, split_output
from vecenv.spaces import build_tree, leaf_values, named_leaves, to_batch
from vecenv.worker.policy import PolicyContext, PolicyRunner, WorkerPolicy

#: Why a collection refuses a recurrent policy (one with ``initial_state``): every way it steps
#: (rollouts in the workers, or ``envs.step`` here) calls the policy on observations alone.
RECURRENT_REFUSED = (
    "expected a policy of observations alone, got a recurrent one (it has initial_state): a collection "
    "calls its policy on the observations and carries no recurrent state"
)


def is_recurrent(policy: Any) -> bool:
    """Whether a collector's policy keeps per-env state (a callable ``initial_state``)."""
    return callable(getattr(policy, "initial_state", None))


def one_line(value: Any) -> str:
    """The value as error messages about actions show it (dtype included, up to 300 characters)."""
    return describe(value, 300, dtype=True)


class ActionChecker:
    """Accepts exactly the action batches a vector env accepts, and only those in the space.

    A batch must have the right structure and shape and a dtype that casts ``same_kind`` to
    the space's (float64 for a float32 Box, as numpy policies produce, is fine; floats for a
    Discrete space are not, though a step hands them on to the envs): the dataset records
    actions in the space's dtype. Its values, cast to it, must then lie in the space.
    """

    def __init__(self, single: spaces.Space, num_envs: int, policy: str, first_env: int = 0) -> None:
        self.single = single
        self.num_envs = num_envs
        self.policy = policy
        self.first_env = first_env  # the global index of the batch's first env, for messages
        self.batched = batch_space(single, num_envs)
        self.dtypes = [np.dtype(leaf.dtype) for _, leaf in named_leaves(single)]

    def __call__(self, actions: Any) -> list[np.ndarray]:
        """Check ``actions`` and return its leaves cast to the space's dtypes (the rows
        recorded), or raise PolicyError naming the policy and the first bad env."""
        try:
            batch = to_batch(self.single, actions, self.num_envs, "actions")
        except (TypeError, ValueError) as exc:
            raise PolicyError(
                f"policy {self.policy!r} returned actions the vector env does not accept: {exc} "
                f"(expected an element of {self.batched}, got {one_line(actions)})"
            ) from None
        leaves = [
            np.asarray(leaf).astype(dtype, copy=False)
            for leaf, dtype in zip(leaf_values(self.single, batch), self.dtypes)
        ]
        for (name, space), leaf in zip(named_leaves(self.single), leaves):
            expected = (self.num_envs, *(space.shape or ()))
            if leaf.shape != expected:  # a step would take (n,) for a (1,) space; a dataset records rows of its shape
                part = f" (part {name!r})" if name else ""
                last = self.first_env + self.num_envs - 1
                raise PolicyError(
                    f"policy {self.policy!r} returned actions{part} of shape {leaf.shape}, expected shape {expected}: "
                    f"one action of {space} for each of envs {self.first_env}..{last} (got {one_line(actions)})"
                )
        if self.batched.contains(build_tree(self.single, iter(leaves))):
            return leaves
        for index in range(self.num_envs):
            action = build_tree(self.single, iter([leaf[index] for leaf in leaves]))
            if not self.single.contains(action):
                raise PolicyError(
                    f"policy {self.policy!r} returned an action outside the action space: env {self.first_env + index} "
                    f"got {one_line(action)}, expected an element of {self.single} "
                    f"(whole batch: {one_line(actions)})"
                )
        raise PolicyError(
            f"policy {self.policy!r} returned actions outside the action space: expected an "
            f"element of {self.batched}, got {one_line(actions)}"
        )


class CheckedPolicy(WorkerPolicy):
    """A worker policy whose every action batch goes through an :class:`ActionChecker` before
    the envs see it, so a collection refuses out-of-space actions with the same
    :class:`PolicyError` wherever the policy runs (its note then names the rollout's step).

    Every hook of :class:`WorkerPolicy` goes to the wrapped policy, so that its own checks run
    (an SB3 model's spaces at the first rollout, weights before they are sent); only the extras
    it gives beside its actions are dropped: a dataset records actions."""

    def __init__(self, policy: WorkerPolicy) -> None:
        self.policy = policy
        self.name = policy.name

    def build(self, context: PolicyContext) -> PolicyRunner:
        checker = ActionChecker(context.action_space, len(context.env_ids), self.name, context.env_ids.start)
        return _Checked(self.policy.build(context), checker)

    def weights(self) -> Any:
        return self.policy.weights()

    def check_weights(self, weights: Any) -> Any:
        return self.policy.check_weights(weights)

    def outputs(self, context: PolicyContext, observations: Any) -> PolicyOutputs:
        """The wrapped policy's checks and first call; its copies here give actions only."""
        wrapped = self.policy.outputs(context, observations)
        if wrapped.recurrent:  # a WorkerPolicy of a recurrent module, say
            raise InvalidArgumentError(f"policy {self.name}: {RECURRENT_REFUSED}")
        return PolicyOutputs(probe_error=wrapped.probe_error)


class _Checked(PolicyRunner):
    def __init__(self, runner: PolicyRunner, checker: ActionChecker) -> None:
        self.runner, self.checker = runner, checker

    def act(self, observations: Any, active: np.ndarray | None) -> Any:
        # A dataset records actions: extras a policy gives beside them (SB3's log-probs) are dropped.
        actions, _ = split_output(self.runner.act(observations, active), self.checker.single)
        leaves = self.checker(actions)
        return build_tree(self.checker.single, iter(leaves))

    def reseed(self, local: int, seed: int | None) -> None:
        self.runner.reseed(local, seed)

    def load_weights(self, weights: Any) -> None:
        self.runner.load_weights(weights)
