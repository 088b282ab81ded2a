"""The benchmark's former module, kept for ``python -m vecenv.benchmark`` and for the names that
scripts and tests import from it; the benchmark itself is the package :mod:`vecenv.bench`."""

import sys

from vecenv.bench.calibration import calibrate
from vecenv.bench.cli import ALL_RUNNERS, OPT_IN_RUNNERS, main, parse_args
from vecenv.bench.envs import ALL_WORKLOADS, ATARI_MISSING, BurnEnv, FrameEnv, atari_missing, burn, make_atari
from vecenv.bench.measure import measure
from vecenv.bench.plan import plan
from vecenv.bench.procfs import tree_pss_kib

__all__ = [
    "ALL_RUNNERS",
    "ALL_WORKLOADS",
    "ATARI_MISSING",
    "BurnEnv",
    "FrameEnv",
    "OPT_IN_RUNNERS",
    "atari_missing",
    "burn",
    "calibrate",
    "main",
    "make_atari",
    "measure",
    "parse_args",
    "plan",
    "tree_pss_kib",
]

if __name__ == "__main__":
    sys.exit(main())
