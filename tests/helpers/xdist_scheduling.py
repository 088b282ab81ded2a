"""How pytest-xdist (``-n auto``) spreads the tests over its test processes.

Its default distribution ("load") hands out tests one by one, in the collected order. That order
puts the Ray tests last (``tests/conftest.py``), and :class:`RayTogether` keeps that and adds two
rules: the tests that share a process's local Ray (:data:`RAY_FILES`) are one unit of work, which
a single test process runs after its other tests (the session's Ray then starts once, and no two
local Rays share the machine's cores); and that unit goes out while the other processes still
have :data:`RAY_LEAD` other tests per Ray test to run, the process that takes it taking nothing
after it. Handed out last, it ran alone at the end of the session (~140 s of ~550 on 2 cores).
(pytest-xdist's own ``--dist loadgroup`` would keep the unit together with ``xdist_group``
marks, but with pytest 9.2 it no longer sees them: the node ids it extends are read-only there,
pytest-xdist issue 1386.)

Imported only by pytest-xdist's scheduler hook, so the tests run without pytest-xdist too.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: The test files whose tests share one local Ray per process (``tests/helpers/ray_sessions.py``).
RAY_FILES = ("test_ray.py", "test_rllib.py")
#: The work unit of those tests.
RAY_UNIT = "ray"
#: The Ray unit goes out when at most this many other tests per Ray test are left to hand out,
#: so the other processes run them meanwhile. A Ray test takes ~4 times an average other test
#: here (~1.9 s against ~0.45 s, 2 test processes on 2 cores, 2026-12-06), and the tests last in
#: the collected order are longer than the average: with 1 to 3 the session's end came 6-30 s
#: sooner in a replay of that run's test times, with 4 and more later than handing it out last.
RAY_LEAD = 2


def ray_unit_or_test(nodeid: str) -> str:
    """The unit of work a test belongs to: :data:`RAY_UNIT` for the tests of RAY_FILES, else
    the test alone."""
    path = nodeid.split("::", 1)[0]
    return RAY_UNIT if path.rsplit("/", 1)[-1] in RAY_FILES else nodeid


class RayTogether(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with a scope per test, except the Ray tests' one scope, in
    the collected order (never the largest scope first: the Ray tests must come after the others
    in the process that runs them), but for when the Ray scope goes out (:data:`RAY_LEAD`)."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # the scopes in the collected order

    def _split_scope(self, nodeid: str) -> str:
        return ray_unit_or_test(nodeid)

    def _assign_work_unit(self, node) -> None:
        """Hand ``node`` the next unit; the Ray unit instead once few enough others are left and
        another process takes them (``node`` then shuts down: it runs the Ray tests last)."""
        ray = self.workqueue.get(RAY_UNIT)
        others = [n for n in self.nodes if n is not node and not n.shutting_down]
        if ray is not None and others and len(self.workqueue) - 1 <= RAY_LEAD * len(ray):
            self.workqueue.move_to_end(RAY_UNIT, last=False)
            super()._assign_work_unit(node)
            node.shutdown()
            return
        if ray is not None and len(self.workqueue) > 1 and next(iter(self.workqueue)) == RAY_UNIT:
            self.workqueue.move_to_end(RAY_UNIT)  # not yet: the tests collected after it go first
        super()._assign_work_unit(node)
