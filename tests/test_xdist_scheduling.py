"""How ``-n auto`` spreads the tests (``tests/helpers/xdist_scheduling.py``, ``tests/conftest.py``):
the tests that share one local Ray are one unit of work, run last in the process that runs them
while the others run the tests left, and the number of test processes follows the cores this
process may use."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest
from vecenv import machine

NO_XDIST = "needs pytest-xdist: pip install -e '.[test]'"
scheduling = pytest.importorskip("tests.helpers.xdist_scheduling", reason=NO_XDIST)


def test_the_ray_files_tests_are_one_unit_and_every_other_test_its_own() -> None:
    ids = [
        "tests/integrations/test_ray.py::test_matches_sync[cartpole-n3w1-Disabled]",
        "tests/integrations/test_ray.py::test_make_backend_ray",
        "tests/integrations/test_rllib.py::test_rllib_trains",
    ]
    assert {scheduling.ray_unit_or_test(i) for i in ids} == {scheduling.RAY_UNIT}
    alone = [
        "tests/integrations/test_ray_cluster.py::test_the_two_node_cluster_cases_pass_in_a_fresh_interpreter",
        "tests/engine/test_differential.py::test_matches_sync[a-test_ray.py]",
        "tests/engine/test_faults.py::test_fault[ray]",
    ]
    assert [scheduling.ray_unit_or_test(i) for i in alone] == alone


def test_the_ray_files_sort_last(pytestconfig: pytest.Config) -> None:
    """The unit comes after every other test in the collected order, so the process that runs it
    has run its other tests first; the 2-node cluster's test goes with them."""
    files = ["test_ray.py", "test_a.py", "test_rllib.py", "test_ray_cluster.py", "test_z.py", "test_ray.py"]
    items = [SimpleNamespace(path=Path("tests/x") / name, get_closest_marker=lambda name: None) for name in files]
    conftest.pytest_collection_modifyitems(pytestconfig, items)
    last = ["test_ray.py", "test_rllib.py", "test_ray_cluster.py", "test_ray.py"]  # in their order
    assert [item.path.name for item in items] == ["test_a.py", "test_z.py", *last]
    assert set(scheduling.RAY_FILES) < set(last)


@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 2), (16, conftest.MAX_TEST_PROCESSES)])
def test_auto_gives_a_test_process_per_usable_core_up_to_the_cap(
    monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config, cores: int, expected: int
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(machine, "available_cpus", lambda: cores)
    assert conftest.pytest_xdist_auto_num_workers(pytestconfig) == expected
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert conftest.pytest_xdist_auto_num_workers(pytestconfig) is None  # pytest-xdist's own rule


class _Node:
    """What the scheduler sees of a test process: the tests it was sent, in order, and whether
    it was told to end once they are run."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.shutting_down, f"{self.gateway.id} was sent tests after it was told to end"
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


class _Config:
    """The options pytest-xdist's scheduler reads: ``-n processes``."""

    def __init__(self, processes: int) -> None:
        self.option = SimpleNamespace(loadscopereorder=True)
        self.tx = [f"{processes}*popen"]

    def getvalue(self, name: str) -> object:
        assert name == "tx", name
        return self.tx


def _run_schedule(collection: list[str], processes: int) -> list[list[str]]:
    """Every test of ``collection`` through :class:`RayTogether` with ``processes`` test
    processes, each finishing its oldest test in turn: the tests each process ran, in order."""
    scheduler = scheduling.RayTogether(_Config(processes))
    nodes = [_Node(f"gw{i}") for i in range(processes)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    done = {node: 0 for node in nodes}
    while any(done[node] < len(node.sent) for node in nodes):
        for node in nodes:
            if done[node] < len(node.sent):
                scheduler.mark_test_complete(node, node.sent[done[node]])
                done[node] += 1
    assert all(node.shutting_down for node in nodes)
    return [[collection[i] for i in node.sent] for node in nodes]


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_the_ray_unit_runs_last_in_its_process_while_the_others_run_the_rest(processes: int) -> None:
    ray = [f"tests/integrations/test_ray.py::test_{i}" for i in range(10)]
    after = ["tests/integrations/test_ray_cluster.py::test_cluster"]
    others = [f"tests/engine/test_x.py::test_{i}" for i in range(100)]
    ran = _run_schedule(others + ray + after, processes)
    assert sorted(sum(ran, [])) == sorted(others + ray + after)  # each test once
    (runs_ray,) = [tests for tests in ran if set(ray) & set(tests)]
    first = runs_ray.index(ray[0])
    assert runs_ray[first:] == ray  # together, and nothing after them in that process
    if processes == 1:
        assert runs_ray == others + after + ray
    else:
        # Out while RAY_LEAD others per Ray test were still to go, which the other processes ran.
        tail = others[-scheduling.RAY_LEAD * len(ray) :] + after
        assert not set(tail) & set(runs_ray), runs_ray
