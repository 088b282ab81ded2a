"""How ``-n auto`` spreads the tests (``tests/helpers/xdist_scheduling.py``, ``tests/conftest.py``):
the tests that share one local Ray are one unit of work, run last, and the number of test
processes follows the cores this process may use."""

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
