"""Checking the policy's actions before the vector env sees them (``ActionChecker``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from vecenv.errors import describe
from vecenv.rollout.errors import PolicyError
from vecenv.spaces import build_tree, leaf_values, named_leaves, to_batch


def one_line(value: Any) -> str:
    """The value as error messages about actions show it (dtype included, up to 300 characters)."""
    return describe(value, 300, dtype=True)


class ActionChecker:
    """Accepts exactly the action batches a vector env accepts, and only those in the space.

    A batch must have the right structure and shape and a dtype that casts ``same_kind`` to
    the space's (float64 for a float32 Box, as numpy policies produce, is fine; floats for a
    Discrete space are not), the rule ``vecenv.spaces.to_batch`` applies for the vector env.
    Its values, cast to the space's dtype, must then lie in the space.
    """

    def __init__(self, single: spaces.Space, num_envs: int, policy: str) -> None:
        self.single = single
        self.num_envs = num_envs
        self.policy = policy
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
        if self.batched.contains(build_tree(self.single, iter(leaves))):
            return leaves
        for index in range(self.num_envs):
            action = build_tree(self.single, iter([leaf[index] for leaf in leaves]))
            if not self.single.contains(action):
                raise PolicyError(
                    f"policy {self.policy!r} returned an action outside the action space: env {index} "
                    f"got {one_line(action)}, expected an element of {self.single} "
                    f"(whole batch: {one_line(actions)})"
                )
        raise PolicyError(
            f"policy {self.policy!r} returned actions outside the action space: expected an "
            f"element of {self.batched}, got {one_line(actions)}"
        )
