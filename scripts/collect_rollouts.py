"""Collect rollouts into rollouts/<env-id>: the ``vecenv-collect`` command (see --help)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # also runs from a checkout
from vecenv.datasets import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
