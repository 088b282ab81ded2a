"""Deprecated: ``python -m vecenv.datasets`` (or ``vecenv-collect``) is the command now."""

from vecenv.datasets.command import main

raise SystemExit(main())
