"""Run CleanRL's own ``ppo.py``, unchanged but for its vector env, and time it.

    python scripts/cleanrl_ppo.py --ppo CLEANRL/cleanrl/ppo.py --vector sync,vecenv,sync,vecenv

``--ppo`` is ``cleanrl/ppo.py`` from a checkout of CleanRL (https://github.com/vwxyzjn/cleanrl);
it needs ``torch``, ``tyro`` and ``tensorboard`` (``pip install torch tyro tensorboard``). Each
run is a fresh Python process that executes that file as ``__main__`` with Gymnasium's
``SyncVectorEnv`` replaced by the chosen vector env, built from the same list of env constructors
CleanRL makes (``sync``: Gymnasium's own; ``vecenv``: ``vecenv.SubprocVectorEnv`` with its
defaults; ``vecenv-auto``: with ``num_workers="auto"``). Nothing else of the script changes:
same arguments (``--env-id``, ``--num-envs``, ``--total-timesteps``, ``--seed``), same seeds,
same network and update.

For each run the table gives the wall time of the whole process, its CPU time (the process and
its children), and a digest of every episode's return in the order they ended (read from the
``episode`` infos that CleanRL's ``RecordEpisodeStatistics`` puts in each step's infos), so
that runs that stepped the same episodes show the same digest. Runs go in the order given;
interleave the vector envs to spread a busy machine's noise over them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runs from a checkout
from vecenv.argtypes import env_id, non_negative_int, positive_int  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402

VECTORS = ("sync", "vecenv", "vecenv-auto")


def _child(ppo: str, vector: str, out: str, argv: list[str]) -> None:
    """In the child process: patch the vector env, run ``ppo.py`` as ``__main__``, dump returns."""
    import gymnasium as gym
    import numpy as np

    original = gym.vector.SyncVectorEnv
    returns: list[float] = []

    class Recording(gym.vector.VectorWrapper):
        """Records each finished episode's return from the step's infos; changes nothing."""

        def step(self, actions: Any) -> Any:
            result = super().step(actions)
            infos = result[4]
            if "episode" in infos:
                mask = infos.get("_episode", np.ones(self.num_envs, bool))
                returns.extend(float(r) for r in np.asarray(infos["episode"]["r"])[mask])
            return result

    def build(env_fns: list[Any], **kwargs: Any) -> Any:
        if vector == "sync":
            return Recording(original(env_fns, **kwargs))
        import vecenv

        workers = "auto" if vector == "vecenv-auto" else None
        return Recording(vecenv.SubprocVectorEnv(env_fns, workers, **kwargs))

    gym.vector.SyncVectorEnv = build  # type: ignore[misc]
    sys.argv = [ppo, *argv]
    try:
        runpy.run_path(ppo, run_name="__main__")
    finally:
        Path(out).write_text(json.dumps(returns))


class RunFailed(Exception):
    """A run of ``ppo.py`` ended with an error (which it printed): the comparison stops there."""


def _run(ppo: str, vector: str, argv: list[str], workdir: str) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        command = [sys.executable, os.path.abspath(__file__), "--child", vector, "--ppo", ppo, "--out", out, "--"]
        done = subprocess.run([*command, *argv], cwd=workdir, stdout=subprocess.DEVNULL)
        if done.returncode != 0:  # ppo.py's error is on stderr already
            raise RunFailed(f"the {vector} run of {ppo} failed with exit status {done.returncode} (see above)")
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        returns = json.loads(Path(out).read_text())
    finally:
        os.unlink(out)
    digest = hashlib.sha256(json.dumps(returns).encode()).hexdigest()[:12]
    return {"vector": vector, "wall_s": wall, "cpu_s": cpu, "episodes": len(returns), "digest": digest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ppo", required=True, help="path to CleanRL's cleanrl/ppo.py")
    parser.add_argument(
        "--vector",
        default="sync,vecenv",
        help=f"comma-separated runs, in order, each one of {', '.join(VECTORS)} (default: sync,vecenv)",
    )
    parser.add_argument("--env-id", type=env_id, default="CartPole-v1", help="passed to ppo.py (default: %(default)s)")
    parser.add_argument("--num-envs", type=positive_int, default=8, help="passed to ppo.py (default: %(default)s)")
    parser.add_argument(
        "--total-timesteps", type=positive_int, default=150_000, help="passed to ppo.py (default: %(default)s)"
    )
    parser.add_argument("--seed", type=non_negative_int, default=1, help="passed to ppo.py (default: %(default)s)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        _child(args.ppo, args.child, args.out, [a for a in rest if a != "--"])
        return 0
    ppo = os.path.abspath(args.ppo)
    if not os.path.isfile(ppo):
        parser.error(f"--ppo: expected the path of CleanRL's cleanrl/ppo.py, got {args.ppo!r} (no such file)")
    vectors = [v.strip() for v in args.vector.split(",") if v.strip()]
    unknown = [v for v in vectors if v not in VECTORS]
    if unknown or not vectors:
        parser.error(f"--vector: expected a comma-separated list of {', '.join(VECTORS)}, got {args.vector!r}")
    argv = [
        f"--env-id={args.env_id}",
        f"--num-envs={args.num_envs}",
        f"--total-timesteps={args.total_timesteps}",
        f"--seed={args.seed}",
    ]
    rows = []
    with tempfile.TemporaryDirectory() as workdir:  # CleanRL writes its runs/ folder here
        for i, vector in enumerate(vectors):
            try:
                row = _run(ppo, vector, argv, workdir)
            except RunFailed as exc:
                print(f"{parser.prog}: error: {exc}", file=sys.stderr)
                return 1
            rows.append(row)
            print(
                f"[{i + 1}/{len(vectors)}] {vector}: {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} CPU-s, "
                f"{row['episodes']} episodes, returns {row['digest']}",
                flush=True,
            )
    sync = sorted(r["wall_s"] for r in rows if r["vector"] == "sync")
    print(f"\nCleanRL ppo.py, {args.env_id}, {args.num_envs} envs, {args.total_timesteps:,} steps, seed {args.seed}")
    print("| vector env | wall s | CPU s | episodes | returns digest | wall / Sync's median |")
    print("|---|---:|---:|---:|---|---:|")
    median = sync[len(sync) // 2] if sync else None
    for r in rows:
        ratio = f"{r['wall_s'] / median:.2f}" if median else "-"
        print(f"| {r['vector']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['episodes']} | {r['digest']} | {ratio} |")

    return 0


if __name__ == "__main__":
    raise SystemExit(run_main("cleanrl_ppo.py", main, quiet="--child" in sys.argv))
