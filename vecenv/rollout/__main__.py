"""Deprecated: ``python -m vecenv.datasets`` (or ``vecenv-collect``) is the command now."""

from vecenv.datasets.cli import main

raise SystemExit(main())
