"""``python -m vecenv.datasets``: the ``vecenv-collect`` command."""

from vecenv.datasets.command import main

raise SystemExit(main())
