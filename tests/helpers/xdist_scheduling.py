"""How pytest-xdist (``-n auto``) spreads the tests over its test processes.

Its default distribution ("load") hands out tests one by one, in the collected order. That order
puts the Ray tests last (``tests/conftest.py``), and :class:`RayTogether` keeps that and adds one
rule: the tests that share a process's local Ray (:data:`RAY_FILES`) are one unit of work, which
a single test process runs after its other tests. The session's Ray then starts once, and no two
local Rays share the machine's cores. (pytest-xdist's own ``--dist loadgroup`` would do it with
``xdist_group`` marks, but with pytest 9.2 it no longer sees them: the node ids it extends are
read-only there, pytest-xdist issue 1386.)

Imported only by pytest-xdist's scheduler hook, so the tests run without pytest-xdist too.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: The test files whose tests share one local Ray per process (``tests/helpers/ray_sessions.py``).
RAY_FILES = ("test_ray.py", "test_rllib.py")
#: The work unit of those tests.
RAY_UNIT = "ray"


def ray_unit_or_test(nodeid: str) -> str:
    """The unit of work a test belongs to: :data:`RAY_UNIT` for the tests of RAY_FILES, else
    the test alone."""
    path = nodeid.split("::", 1)[0]
    return RAY_UNIT if path.rsplit("/", 1)[-1] in RAY_FILES else nodeid


class RayTogether(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with a scope per test, except the Ray tests' one scope, in
    the collected order (never the largest scope first: the Ray tests must come after the others
    in the process that runs them)."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # the scopes in the collected order

    def _split_scope(self, nodeid: str) -> str:
        return ray_unit_or_test(nodeid)
