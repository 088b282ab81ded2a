"""``python -m vecenv.rollout``: the ``vecenv-collect`` command."""

from vecenv.rollout.cli import main

raise SystemExit(main())
