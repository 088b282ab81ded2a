"""``python -m vecenv.bench``: the benchmark's command line."""

import sys

from vecenv.bench.cli import main

sys.exit(main())
