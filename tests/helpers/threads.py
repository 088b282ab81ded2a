"""Threads that share one vector env, for the tests that check they take turns."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["take_turns"]


def take_turns(calls: Sequence[Callable[[], Any]], repeats: int, join_timeout: float = 60.0) -> None:
    """Run each of ``calls`` ``repeats`` times, each in a thread of its own, all started together
    (a barrier), and check that every thread ended within ``join_timeout`` seconds and that no
    call raised (the first error is shown)."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> None:
        start.wait()
        try:
            for _ in range(repeats):
                call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_timeout)
    assert not any(t.is_alive() for t in threads), f"a thread is still calling after {join_timeout:g} s"
    assert not errors, f"{len(errors)} calls failed, the first: {errors[0]!r}"
