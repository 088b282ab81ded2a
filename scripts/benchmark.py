"""Throughput benchmark of vecenv; a shim for ``python -m vecenv.benchmark``.

Usage (``--help`` explains every option):

    python scripts/benchmark.py --quick
    python scripts/benchmark.py --sizes 128 --reps 3
"""

import sys

from vecenv.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
