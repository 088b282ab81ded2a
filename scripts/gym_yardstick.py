"""Gymnasium's own yardstick: ``gymnasium.utils.performance.benchmark_vector_step`` for
``SyncVectorEnv``, ``AsyncVectorEnv`` and vecenv, side by side in one run.

    python scripts/gym_yardstick.py                                  # CartPole, N=8 and 128
    python scripts/gym_yardstick.py --env-id Pendulum-v1 --sizes 16 --duration 3 --reps 5

Each cell builds the vector env with ``gymnasium.make_vec`` (``sync``, ``async``) or
``vecenv.make`` (``vecenv``: its defaults; ``vecenv-auto``: ``num_workers="auto"``), hands it to
Gymnasium's ``benchmark_vector_step`` (random actions from the vector action space, counting
only the steps that were not an autoreset step) for ``--duration`` seconds, and closes it. The
repetitions are interleaved, runner by runner; the table gives the median env-steps/s, the
range, and the ratio to ``sync`` taken within each repetition. Needs a Gymnasium that has
``gymnasium.utils.performance`` (1.1 and later).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runs from a checkout
from vecenv.argtypes import env_id  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402

RUNNERS = ("sync", "async", "vecenv", "vecenv-auto")


def _build(runner: str, env_id: str, num_envs: int) -> Any:
    import gymnasium as gym

    if runner in ("sync", "async"):
        return gym.make_vec(env_id, num_envs, vectorization_mode=runner)
    import vecenv

    return vecenv.make(env_id, num_envs, num_workers="auto" if runner == "vecenv-auto" else None)


def _measure(runner: str, env_id: str, num_envs: int, duration: int, seed: int) -> float:
    from gymnasium.utils.performance import benchmark_vector_step

    envs = _build(runner, env_id, num_envs)
    try:
        return float(benchmark_vector_step(envs, target_duration=duration, seed=seed))
    finally:
        envs.close()


def _list(text: str, name: str, kind: type, allowed: tuple[str, ...] = ()) -> list[Any]:
    try:
        items = [kind(item.strip()) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: expected a comma-separated list, got {text!r}") from None
    if not items or (allowed and any(item not in allowed for item in items)):
        expected = f"a comma-separated list of {', '.join(allowed)}" if allowed else "a non-empty list"
        raise argparse.ArgumentTypeError(f"{name}: expected {expected}, got {text!r}")
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--env-id", type=env_id, default="CartPole-v1", help="registered Gymnasium env id (default: CartPole-v1)"
    )
    parser.add_argument("--sizes", default="8,128", help="comma-separated numbers of envs (default: 8,128)")
    parser.add_argument("--runners", default=",".join(RUNNERS), help=f"comma-separated, of {', '.join(RUNNERS)}")
    parser.add_argument("--duration", type=int, default=3, help="seconds per cell, an int (default: 3)")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="reset seed (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        sizes = _list(args.sizes, "--sizes", int)
        runners = _list(args.runners, "--runners", str, RUNNERS)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    if args.duration < 1 or args.reps < 1 or any(n < 1 for n in sizes):
        parser.error(
            f"--duration, --reps and --sizes: expected positive ints, got {args.duration}, {args.reps}, {args.sizes!r}"
        )
    try:
        import gymnasium.utils.performance  # noqa: F401
    except ImportError:
        import gymnasium

        version = gymnasium.__version__
        parser.error(f"needs gymnasium.utils.performance (Gymnasium 1.1 or later), got Gymnasium {version}")
    rates: dict[tuple[int, str], list[float]] = {}
    for rep in range(args.reps):
        for n in sizes:
            for runner in runners:
                rate = _measure(runner, args.env_id, n, args.duration, args.seed + rep)
                rates.setdefault((n, runner), []).append(rate)
                print(f"[rep {rep + 1}/{args.reps}] {args.env_id} N={n} {runner}: {rate:,.0f} env-steps/s", flush=True)
    print(f"\n`benchmark_vector_step`, {args.env_id}, {args.duration} s per cell, {args.reps} interleaved repetitions")
    print("| N | vector env | env-steps/s, median (min-max) | x sync |")
    print("|---:|---|---:|---:|")
    for n in sizes:
        base = rates.get((n, "sync"))
        for runner in runners:
            values = rates[(n, runner)]
            ratio = f"{statistics.median(v / b for v, b in zip(values, base, strict=True)):.2f}" if base else "-"
            spread = f"{min(values):,.0f}-{max(values):,.0f}"
            print(f"| {n} | {runner} | {statistics.median(values):,.0f} ({spread}) | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(run_main("gym_yardstick.py", main, "the cells printed above are all there is"))
