"""``python -m vecenv.datasets``: the ``vecenv-collect`` command."""

from vecenv.datasets.cli import main

raise SystemExit(main())
