"""Multi-agent throughput: SuperSuit in-process, SuperSuit ``num_cpus=2``, and vecenv, in one run.

Agent-steps per second (rows x vector steps / s) for each runner on each workload, printed as
ratios to SuperSuit in-process and to the 2-core ceiling, measured in the same run (this machine
is shared and noisy: only ratios within one run mean anything). Runners take turns, ``--rounds``
times, and each runner's median round is kept, so a burst of load elsewhere hits them all alike;
the ratios of the best rounds are printed too (on a machine that others load, the best round is
the nearest to a run with the cores free).
Next to the speed, the CPU time that all of a runner's processes spend per agent-step (user +
system, from ``/proc``), as a ratio to SuperSuit in-process: what the runner costs beyond the
envs themselves, which load on the machine disturbs far less than wall-clock speed.

Runners:
    supersuit-0   ``supersuit.concat_vec_envs_v1(..., num_cpus=0)``: SuperSuit in-process (the baseline)
    supersuit-2   ``num_cpus=2``: SuperSuit's own processes (``ProcConcatVec``)
    vecenv-0w     ``vecenv.MultiAgentVectorEnv``, every copy in this process (vecenv's own cost)
    vecenv-2w     ``vecenv.MultiAgentVectorEnv``, 2 worker processes
    vecenv-inline ``vecenv.MultiAgentVectorEnv``, 2 groups: one in a worker, one in this process
    dropin-2      ``vecenv.supersuit.concat_vec_envs_v1(..., num_cpus=2)``
    ceiling       two independent processes, each stepping half the copies in-process, no
                  communication at all: what 2 cores give (their rates added)

Workloads (``--workloads``): ``simple_spread`` (MPE2, 3 agents, 16 copies), ``pistonball``
(20 pistons, SuperSuit's 84x84x3 preprocessing as in PettingZoo's SB3 tutorial, 4 copies) and
``kaz`` (knights-archers-zombies, agents die; SuperSuit needs ``black_death_v3``, vecenv does
not). ``--kaz-steps N`` then runs vecenv's native API on KAZ, no wrapper, for ``N`` agent-steps
and reports the agent deaths it saw (the agent-death check: no crash).

    python scripts/bench_multiagent.py --seconds 1.5 --rounds 5
    python scripts/bench_multiagent.py --workloads "" --kaz-steps 1000000   # the agent-death run alone
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

RUNNERS = ("supersuit-0", "supersuit-2", "vecenv-0w", "vecenv-2w", "vecenv-inline", "dropin-2", "ceiling")
COPIES = {"simple_spread": 16, "pistonball": 4, "kaz": 16}


def make_env(workload: str, black_death: bool = False) -> Any:
    """One parallel env of ``workload`` (built where it runs)."""
    import supersuit as ss

    with warnings.catch_warnings():  # PettingZoo 1.27 warns on the module API that SuperSuit's users use
        warnings.simplefilter("ignore", DeprecationWarning)
        if workload == "simple_spread":
            from mpe2 import simple_spread_v3

            return simple_spread_v3.parallel_env()
        if workload == "pistonball":
            from pettingzoo.butterfly import pistonball_v6

            env = pistonball_v6.parallel_env()
            env = ss.color_reduction_v0(env, mode="B")
            env = ss.resize_v1(env, x_size=84, y_size=84)
            return ss.frame_stack_v1(env, 3)
        from pettingzoo.butterfly import knights_archers_zombies_v11

        env = knights_archers_zombies_v11.parallel_env()
        return ss.black_death_v3(env) if black_death else env


def build(runner: str, workload: str, copies: int) -> Any:
    """The vector env of ``runner``, with SuperSuit's gymnasium API or the native one."""
    import supersuit as ss

    import vecenv
    import vecenv.supersuit as vs

    black_death = workload == "kaz"
    if runner in ("supersuit-0", "supersuit-2", "ceiling"):
        cpus = 2 if runner == "supersuit-2" else 0
        return ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(make_env(workload, black_death)), copies, cpus)
    if runner == "dropin-2":
        return vs.concat_vec_envs_v1(vs.pettingzoo_env_to_vec_env_v1(make_env(workload, black_death)), copies, 2)
    fn = _EnvFn(workload)
    if runner == "vecenv-0w":
        return vecenv.MultiAgentVectorEnv([fn] * copies, 0)
    if runner == "vecenv-2w":
        return vecenv.MultiAgentVectorEnv([fn] * copies, 2)
    return vecenv.MultiAgentVectorEnv([fn] * copies, 2, inline_group=True)


class _EnvFn:
    """A picklable constructor for the native API (no wrapper: agent death is built in)."""

    def __init__(self, workload: str) -> None:
        self.workload = workload

    def __call__(self) -> Any:
        return make_env(self.workload)


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and all its descendants, from ``/proc``."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
            ticks[int(entry)] = int(fields[11]) + int(fields[12])  # utime, stime
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier and p not in tree]
        tree.update(frontier)
    return sum(ticks.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")


def step_for(envs: Any, seconds: float, warmup: int = 20, barrier: Any = None) -> tuple[float, float]:
    """Agent-steps per second of ``envs`` over ``seconds``, random actions sampled beforehand
    (``barrier``: wait there after the warm-up, so that the ceiling's halves run at once)."""
    n = envs.num_envs
    space = getattr(envs, "single_action_space", envs.action_space)
    space.seed(0)
    actions = [np.stack([space.sample() for _ in range(n)]) for _ in range(16)]
    envs.reset(seed=0)
    for i in range(warmup):
        envs.step(actions[i % 16])
    if barrier is not None:
        barrier.wait()
    steps, cpu, start = 0, _cpu_seconds(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(actions[steps % 16])
        steps += 1
    elapsed, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    return n * steps / elapsed, cpu / (n * steps)


def _half(workload: str, copies: int, seconds: float, barrier: Any, out: Any) -> None:
    envs = build("supersuit-0", workload, copies)
    out.send(step_for(envs, seconds, barrier=barrier))
    envs.close()


def ceiling(workload: str, copies: int, seconds: float) -> tuple[float, float]:
    """Two processes, half the copies each, in-process and independent: their rates added."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    pipes, procs = [], []
    for half in (copies // 2, copies - copies // 2):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_half, args=(workload, half, seconds, barrier, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    results = [p.recv() for p in pipes]
    for proc in procs:
        proc.join()
    rate = sum(r for r, _ in results)
    # CPU per agent-step over both halves: each half's cost weighted by its share of the steps.
    return float(rate), float(sum(r * c for r, c in results) / rate)


def measure(runner: str, workload: str, copies: int, seconds: float) -> tuple[float, float]:
    if runner == "ceiling":
        return ceiling(workload, copies, seconds)
    envs = build(runner, workload, copies)
    try:
        return step_for(envs, seconds)
    finally:
        envs.close()


def kaz_run(agent_steps: int, copies: int = 16) -> dict[str, Any]:
    """vecenv's native API on KAZ, no wrapper, for ``agent_steps``: deaths seen, episodes, rate."""
    import vecenv

    envs = vecenv.MultiAgentVectorEnv([_EnvFn("kaz")] * copies, 2)
    space = envs.single_action_space
    space.seed(1)
    actions = [np.stack([space.sample() for _ in range(envs.num_envs)]) for _ in range(16)]
    envs.reset(seed=1)
    deaths = episodes = done = 0
    was_active = envs.active.copy()
    start = time.perf_counter()
    while done < agent_steps:
        _, _, terms, truncs, infos = envs.step(actions[done % 16])
        active = infos["active"]
        deaths += int((was_active & ~active).sum())
        episodes += int((terms | truncs).reshape(copies, -1).all(axis=1).sum())
        was_active = active
        done += envs.num_envs
    seconds = time.perf_counter() - start
    envs.close()
    return {"agent_steps": done, "agents_left_early": deaths, "copy_episodes": episodes, "rate": done / seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="simple_spread,pistonball,kaz")
    parser.add_argument("--runners", default=",".join(RUNNERS))
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per runner per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kaz-steps", type=int, default=0, help="also run KAZ (agents die) for this many agent-steps")
    args = parser.parse_args(argv)
    runners = args.runners.split(",")
    report: Callable[[str], None] = lambda line: print(line, flush=True)  # noqa: E731
    for workload in [w for w in args.workloads.split(",") if w]:
        copies = COPIES[workload]
        rates: dict[str, list[float]] = {r: [] for r in runners}
        costs: dict[str, list[float]] = {r: [] for r in runners}
        for _ in range(args.rounds):
            for runner in runners:
                rate, cost = measure(runner, workload, copies, args.seconds)
                rates[runner].append(rate)
                costs[runner].append(cost)
        median = {r: statistics.median(v) for r, v in rates.items()}
        cost = {r: statistics.median(v) for r, v in costs.items()}
        base, ceil = median.get("supersuit-0"), median.get("ceiling")
        report(f"\n{workload}: {copies} copies, median of {args.rounds} rounds of {args.seconds:g} s")
        best = {r: max(v) for r, v in rates.items()}
        report(
            f"  {'runner':<14} {'x supersuit-0':>13} {'x ceiling':>10} {'spread':>8} "
            f"{'best: x ss-0':>13} {'x ceiling':>10} {'CPU/step x ss-0':>16}"
        )
        for r in runners:
            spread = (max(rates[r]) - min(rates[r])) / median[r] if median[r] else 0.0
            cells = [
                f"{median[r] / base:.2f}" if base else "-",
                f"{median[r] / ceil:.2f}" if ceil else "-",
                f"{spread:.0%}",
                f"{best[r] / best['supersuit-0']:.2f}" if base else "-",
                f"{best[r] / best['ceiling']:.2f}" if ceil else "-",
                f"{cost[r] / cost['supersuit-0']:.2f}" if base else "-",
            ]
            widths = (13, 10, 8, 13, 10, 16)
            report(f"  {r:<14} " + " ".join(f"{c:>{w}}" for c, w in zip(cells, widths)))
    if args.kaz_steps:
        result = kaz_run(args.kaz_steps)
        report(f"\nKAZ, native API, no wrapper: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
