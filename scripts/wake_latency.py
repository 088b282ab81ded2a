"""Wake-up latency between two processes: what delivering a step's command or its reply costs.

    python scripts/wake_latency.py                    # ~10 s
    python scripts/wake_latency.py --rounds 20000 --pause-us 2000

A parent and a forked child ping-pong a counter; each row is the round trip (ping to the child,
pong back) in microseconds, and one-way is half of it. The ways the waiting side learns of the
new value:

  pipe             it sleeps in os.read on a pipe; the writer's os.write wakes it
  spin             both sides spin on a shared int64 word: no system call at all
  spin-then-block  vecenv's fast path (vecenv.wire.fastpath): the waiter spins on the word for
                   up to --spin-us, then stores SLEEPING, fences, reads the word once more and
                   sleeps on its pipe; the writer stores the word, fences, and writes to the pipe
                   only when the waiter sleeps. The same protocol and fence as the library's.
  adaptive         spin-then-block with the library's own spin budget (vecenv.wire.fastpath
                   .SpinBudget, limit --spin-us): about twice the recent waits, and none for a
                   while after spins that caught nothing or were descheduled

--pause-us makes the parent sleep that long before each ping (a learner busy between steps):
longer than --spin-us, every round of spin-then-block takes its sleeping path, and pipe pays
for waking a reader that went to sleep long ago.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import time

from vecenv.argtypes import non_negative_float, positive_int
from vecenv.bench.stopping import run_main
from vecenv.wire.fastpath import SpinBudget, fence

PING, PONG, CHILD_SLEEPING, PARENT_SLEEPING = 0, 8, 16, 24  # word indices (64 bytes apart)


def _wait(words: memoryview, index: int, value: int, sleeping: int, fd: int, budget: SpinBudget) -> None:
    """Wait until ``words[index] == value``: spin for the budget, then the sleeping protocol."""
    clock = time.perf_counter
    start = before = clock()
    spin = budget.seconds()
    caught = False
    while spin:
        now = clock()
        if now - start >= spin or now - before > SpinBudget.PREEMPTED:
            break
        before = now
        if words[index] == value:
            caught = True
            break
    if not caught:
        words[sleeping] = 1
        fence()
        while words[index] != value:
            os.read(fd, 64)  # a stale wake-up byte only makes this loop once more
        words[sleeping] = 0
    budget.record(clock() - start, bool(spin), caught)


class _Fixed(SpinBudget):
    """Always the same spin (spin-then-block without adapting)."""

    def seconds(self, limit: float | None = None) -> float:
        return self.limit


def _post(words: memoryview, index: int, value: int, sleeping: int, fd: int) -> None:
    words[index] = value
    fence()
    if words[sleeping]:
        os.write(fd, b"w")


def _budget(mode: str, spin: float) -> SpinBudget:
    return SpinBudget(spin) if mode == "adaptive" else _Fixed(spin)


def _child(mode: str, rounds: int, spin: float, words: memoryview, to_child: int, to_parent: int) -> None:
    budget = _budget(mode, spin)
    for i in range(1, rounds + 1):
        if mode == "pipe":
            os.read(to_child, 1)
            os.write(to_parent, b"p")
        elif mode == "spin":
            while words[PING] != i:
                pass
            words[PONG] = i
        else:
            _wait(words, PING, i, CHILD_SLEEPING, to_child, budget)
            _post(words, PONG, i, PARENT_SLEEPING, to_parent)


def measure(mode: str, rounds: int, spin: float, pause: float) -> list[float]:
    """Round trips in seconds, one per round, of ``mode`` between this process and a child."""
    block = mmap.mmap(-1, 256)
    words = memoryview(block).cast("q")
    child_r, child_w = os.pipe()
    parent_r, parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _child(mode, rounds, spin, words, child_r, parent_w)
        finally:
            os._exit(0)
    times = []
    clock = time.perf_counter
    budget = _budget(mode, spin)
    try:
        for i in range(1, rounds + 1):
            if pause:
                time.sleep(pause)
            start = clock()
            if mode == "pipe":
                os.write(child_w, b"p")
                os.read(parent_r, 1)
            elif mode == "spin":
                words[PING] = i
                while words[PONG] != i:
                    pass
            else:
                _post(words, PING, i, CHILD_SLEEPING, child_w)
                _wait(words, PONG, i, PARENT_SLEEPING, parent_r, budget)
            times.append(clock() - start)
    finally:
        os.waitpid(pid, 0)
        for fd in (child_r, child_w, parent_r, parent_w):
            os.close(fd)
        words.release()
        block.close()
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--rounds", type=positive_int, default=20000, help="round trips per mode (default: %(default)s)"
    )
    parser.add_argument("--spin-us", type=non_negative_float, default=1000.0, help="spin-then-block: the spin (µs)")
    parser.add_argument("--pause-us", type=non_negative_float, default=0.0, help="sleep before each ping (µs)")
    parser.add_argument(
        "--modes",
        default="pipe,spin,spin-then-block,adaptive",
        help="comma-separated modes, in order (default: all four)",
    )
    args = parser.parse_args(argv)
    rounds = args.rounds if not args.pause_us else min(args.rounds, int(2e6 / max(args.pause_us, 1)))
    print(f"{rounds} round trips, pause {args.pause_us:.0f} µs, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print("| mode | round trip median (µs) | p10 | p90 | one-way median (µs) |")
    print("|---|---:|---:|---:|---:|")
    for mode in args.modes.split(","):
        times = sorted(measure(mode, rounds, args.spin_us * 1e-6, args.pause_us * 1e-6))
        median = statistics.median(times) * 1e6
        p10, p90 = times[len(times) // 10] * 1e6, times[len(times) * 9 // 10] * 1e6
        print(f"| {mode} | {median:.1f} | {p10:.1f} | {p90:.1f} | {median / 2:.1f} |")


if __name__ == "__main__":
    raise SystemExit(run_main("wake_latency.py", main))
