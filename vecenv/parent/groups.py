"""Group builders made in the parent: ``env_fns`` split into one picklable builder per worker."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import gymnasium as gym

__all__ = ["GroupOfFns", "split_groups"]


class GroupOfFns:
    """A picklable group builder: calls each env constructor of one worker, in order."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], first: int) -> None:
        self.env_fns = list(env_fns)
        self.first = first

    def __call__(self) -> list[gym.Env]:
        envs = []
        for i, fn in enumerate(self.env_fns, start=self.first):
            try:
                envs.append(fn())
            except Exception as exc:
                exc.add_note(f"raised by env_fns[{i}] (env {i})")
                raise
        return envs


def split_groups(env_fns: Sequence[Callable[[], gym.Env]], k: int) -> list[GroupOfFns]:
    """``k`` contiguous group builders over ``env_fns`` whose sizes differ by at most one."""
    base, extra = divmod(len(env_fns), k)
    bounds = list(itertools.accumulate((base + (i < extra) for i in range(k)), initial=0))
    return [GroupOfFns(env_fns[a:b], a) for a, b in itertools.pairwise(bounds)]
