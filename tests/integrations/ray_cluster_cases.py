"""The Ray backend on a 2-node Ray cluster on this machine (one CPU per node).

Not collected by the main session (the name does not start with ``test_``):
``tests/integrations/test_ray_cluster.py::test_the_two_node_cluster_cases_pass_in_a_fresh_interpreter``
runs this module with pytest in an interpreter of its own, so that each process connects its
driver to one Ray only. (Connecting one driver to a second Ray after the first, local, one was
shut down has left it waiting forever inside Ray's native GCS client, in this suite.) Run it
alone with ``python -m pytest tests/integrations/ray_cluster_cases.py``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vecenv
from tests.engine.test_differential import NEXT, SAME, assert_same, run_differential
from tests.engine.test_rollouts import stack
from tests.helpers.envs import diff_env_fns
from tests.helpers.faults import fault_fns, held_fns
from tests.helpers.ray_sessions import _ray_sessions, ray, ray_cluster, run_driver  # noqa: F401
from tests.integrations.test_ray import _sb3_or_skip
from vecenv.bench import procfs
from vecenv.errors import WorkerDiedError
from vecenv.integrations.ray.vector_env import RayVectorEnv


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [NEXT, SAME], ids=lambda m: m.value)
def test_cluster_groups_on_both_nodes_match_sync(ray_cluster, mode: AutoresetMode) -> None:
    fns = diff_env_fns(5, obs_kind="dict", act_kind="box")
    made: list[RayVectorEnv] = []

    def make() -> RayVectorEnv:
        made.append(RayVectorEnv(fns, 2, autoreset_mode=mode, actor_options={"scheduling_strategy": "SPREAD"}))
        return made[-1]

    # 170 steps: past the runner's last scheduled reset (step 160), short of its default 220.
    stats = run_differential(fns, make, mode=mode, seed=11, action_dtype=np.float32, steps=170)
    assert stats.steps == 170 and stats.terminations > 0 and stats.masked_resets >= 2
    cluster_nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert len(cluster_nodes) == 2
    assert set(made[0].node_ids) == cluster_nodes, "one group on each node"


@pytest.mark.timeout(120)
def test_cluster_rollouts_on_both_nodes_give_the_process_backends_data(ray_cluster) -> None:
    fns = diff_env_fns(5, obs_kind="dict", act_kind="box")
    with RayVectorEnv(fns, 2, actor_options={"scheduling_strategy": "SPREAD"}) as envs:
        assert len(set(envs.node_ids)) == 2, "one group on each node"
        envs.reset(seed=3)
        got = [envs.rollout(t) for t in (9, 21)]
    with vecenv.SubprocVectorEnv(fns, 3) as local:
        local.reset(seed=3)
        theirs = local.rollout(30)
    for key in ("observations", "actions", "rewards", "terminations", "truncations"):
        joined = stack([getattr(r, key) for r in got], np.concatenate)
        assert_same(joined, getattr(theirs, key), key)
    assert_same(got[0].infos + got[1].infos, theirs.infos, "infos")


@pytest.mark.timeout(120)
def test_cluster_env_error_names_the_node(ray_cluster) -> None:
    with RayVectorEnv(
        fault_fns(4, "raise", "step", target=3), 2, actor_options={"scheduling_strategy": "SPREAD"}
    ) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError) as excinfo:
            envs.step(np.zeros((4, 2), np.float32))
        node_id = envs.node_ids[1]
        assert node_id[:8] in " ".join(excinfo.value.__notes__)


CONNECTS_BY_ADDRESS = """
import sys
import ray
from vecenv import RayVectorEnv
from tests.helpers.faults import healthy_fns

assert not ray.is_initialized()
with RayVectorEnv(healthy_fns(2), 2, address=sys.argv[1]) as envs:
    assert ray.is_initialized()
    envs.reset(seed=0)
    assert len(set(envs.node_ids)) >= 1
assert not ray.is_initialized(), "the connection it opened is closed with it"
print("ok")
"""


@pytest.mark.timeout(120)
def test_address_connects_and_never_shuts_down_the_cluster(ray_cluster) -> None:
    """A script (a driver of its own, as users run one) connects by address; closing the vector
    env closes that connection and leaves the cluster running."""
    run_driver(CONNECTS_BY_ADDRESS, ray_cluster.address)
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2, "the cluster itself is untouched"


@pytest.mark.timeout(120)
def test_cluster_lost_node_is_worker_died_naming_it_or_restarts_the_group_on_another_node(ray_cluster) -> None:
    """A node goes away with the actors of two vector envs, a step in flight in each. Without
    restarts: WorkerDiedError naming the group and the node. With on_worker_death="restart":
    the group is rebuilt by a new actor on a node that is still there (its soft node affinity
    names the lost one), and that vector env carries on.

    A third node is added for the occasion (one for both cases: a node costs seconds of CPU to
    start), so the cluster keeps its two nodes afterwards.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray_cluster.add_node(num_cpus=1, object_store_memory=100 * 1024 * 1024)
    ray_cluster.wait_for_nodes()
    pinned = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False), "num_cpus": 0.5}
    prefer = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=True), "num_cpus": 0.5}
    fns = fault_fns(2, "sleep", "step", target=1, duration=60.0)  # a step in flight when the node goes
    with (
        RayVectorEnv(fns, 1, actor_options=pinned) as dies,
        RayVectorEnv(fns, 1, actor_options=prefer, on_worker_death="restart") as moves,
    ):
        for envs in (dies, moves):
            envs.reset(seed=0)
            assert envs.node_ids == [node.node_id]
            envs.step_async(np.zeros((2, 2), np.float32))
        time.sleep(0.3)
        start = time.monotonic()
        ray_cluster.remove_node(node, allow_graceful=False)
        with pytest.raises(WorkerDiedError) as excinfo:
            dies.step_wait(timeout=60)
        assert time.monotonic() - start < 30.0
        message = str(excinfo.value)
        assert f"({node.node_id[:8]})" in message and "worker 0 (envs 0..1" in message
        # Not Ray's wording for an actor it may bring back ("temporarily unavailable ... may or
        # may not have been executed"): Ray never restarts a group's actor.
        assert "temporarily" not in message and "may or may not" not in message, message
        _, rewards, _, truncs, infos = moves.step_wait(timeout=60)
        assert truncs.all() and (rewards == 0).all() and infos["_worker_restarted"].all()
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert moves.node_ids[0] != node.node_id and moves.node_ids[0] in alive
        assert moves.call("ping") == ("pong 0", "pong 1")


@pytest.mark.timeout(120)
def test_cluster_restart_of_a_lost_nodes_groups_spends_one_restart_each(ray_cluster, tmp_path) -> None:
    """A node lost with two of six actors, their steps in flight, costs two restarts, not more:
    each replacement is placed away from the node its predecessor died on. (Ray counts a lost
    node as alive until its health check gives up, and placed a replacement there, which died
    too and spent a third restart: past ``max_restarts=2``, the vector env broke although the
    other nodes had room for both.)"""
    node = ray_cluster.add_node(num_cpus=1, object_store_memory=100 * 1024 * 1024)
    ray_cluster.wait_for_nodes()
    spread = {"scheduling_strategy": "SPREAD", "num_cpus": 0.3}  # two a node, room for one more
    fns = held_fns(12, str(tmp_path))
    with RayVectorEnv(fns, 6, actor_options=spread, on_worker_death="restart", max_restarts=2) as envs:
        envs.reset(seed=0)
        lost = [w for w, node_id in enumerate(envs.node_ids) if node_id == node.node_id]
        assert len(lost) == 2, envs.node_ids
        held = [tmp_path / f"env{i}" for w in lost for i in (2 * w, 2 * w + 1)]
        for path in held:
            path.touch()
        envs.step_async(np.zeros((12, 2), np.float32))
        pids = [pid for w, pid in enumerate(envs.actor_pids) if w in lost and pid is not None]
        ray_cluster.remove_node(node, allow_graceful=False)
        deadline = time.monotonic() + 30
        while any(procfs.alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.01)  # polls a condition: the lost node's actors are gone
        for path in held:  # their replacements step at once
            path.unlink()
        _, _, _, truncs, _ = envs.step_wait(timeout=60)
        assert envs.restart_count == 2
        assert truncs.tolist() == [w in lost for w in range(6) for _ in range(2)]
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert node.node_id not in envs.node_ids and set(envs.node_ids) <= alive


@pytest.mark.timeout(120)
def test_sb3_backend_ray_on_both_nodes_matches_dummy_vec_env(ray_cluster) -> None:
    _sb3_or_skip()
    from stable_baselines3.common.vec_env import DummyVecEnv

    from tests.integrations.test_sb3 import info_fns, run_differential
    from vecenv.sb3 import SubprocVecEnv

    spread = {"scheduling_strategy": "SPREAD"}
    ours = SubprocVecEnv(info_fns(), num_workers=2, backend="ray", actor_options=spread, on_worker_death="restart")
    ref = DummyVecEnv(info_fns())
    try:
        cluster_nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert len(cluster_nodes) == 2 and set(ours.vector_env.node_ids) == cluster_nodes, "one group per node"
        assert run_differential(ours, ref, steps=30, seed=5, rewards_dtype_exact=False) >= 10
    finally:
        ours.close()
        ref.close()
