"""Group builders made in the parent: ``env_fns`` split into one picklable builder per worker."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

__all__ = ["GroupOfFns", "WorkerGroups", "call_each", "contiguous_bounds", "split_groups"]


class GroupOfFns:
    """A picklable group builder: calls each env constructor of one worker, in order."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], first: int) -> None:
        self.env_fns = list(env_fns)
        self.first = first

    def __call__(self) -> list[gym.Env]:
        return call_each(self.env_fns, self.first, "env")


def call_each(fns: Sequence[Callable[[], Any]], first: int, what: str) -> list[Any]:
    """Call each constructor in order; an error is noted with its index (``what`` ``i``)."""
    built = []
    for i, fn in enumerate(fns, start=first):
        try:
            built.append(fn())
        except Exception as exc:
            exc.add_note(f"raised by env_fns[{i}] ({what} {i})")
            raise
    return built


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
