"""How the parent splits ``env_fns`` over workers: contiguous ranges, one group builder each."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from vecenv.worker.builders import GroupOfFns

__all__ = ["WorkerGroups", "contiguous_bounds", "split_groups"]


def contiguous_bounds(n: int, k: int) -> list[tuple[int, int]]:
    """``k`` contiguous ranges ``(start, stop)`` over ``range(n)`` whose sizes differ by at most one."""
    base, extra = divmod(n, k)
    return list(itertools.pairwise(itertools.accumulate((base + (i < extra) for i in range(k)), initial=0)))


def split_groups(env_fns: Sequence[Callable[[], gym.Env]], k: int) -> list[GroupOfFns]:
    """``k`` contiguous group builders over ``env_fns`` whose sizes differ by at most one."""
    return [GroupOfFns(env_fns[a:b], a) for a, b in contiguous_bounds(len(env_fns), k)]


class WorkerGroups:
    """Group builders given as they are, one per worker (``from_groups``), in place of the
    ``env_fns`` a vector env's constructor splits itself: both ways in run one constructor."""

    def __init__(self, group_fns: Sequence[Callable[[], Any]]) -> None:
        self.group_fns = list(group_fns)
