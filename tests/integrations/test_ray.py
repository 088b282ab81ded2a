"""The Ray backend, on real Ray: RayVectorEnv must match SyncVectorEnv exactly, and fail as the
process backend does.

One local Ray (2 CPUs) is shared by the whole session, and this process connects to no other:
the tests where a vector env starts its own Ray, and the 2-node cluster cases
(``tests/integrations/ray_cluster_cases.py``, run by ``tests/integrations/test_ray_cluster.py``),
run in interpreters of their own. The differential runs reuse
``tests/engine/test_differential.py``'s driver and comparison.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.engine.test_differential import (
    DIFF_INFO_KEYS,
    SCENARIOS,
    Scenario,
    assert_same,
    run_differential,
    sample_actions,
)
from tests.engine.test_envpool_api import follow_sync_trajectories
from tests.engine.test_group import expected_masked_join, masked_group
from tests.engine.test_rollouts import assert_matches_sync, row_wise_policy, single_env_reference, sync_reference
from tests.helpers.envs import JitterEnv, diff_env_fns, make_group
from tests.helpers.fakes import count_pickles
from tests.helpers.faults import ElsewhereError, fault_fns, healthy_fns, odd_fns
from tests.helpers.ray_sessions import (  # noqa: F401
    ROOT,
    RaySessions,
    _ray_sessions,
    ray,
    ray_cluster,
    ray_local,
    run_driver,
)
from vecenv.errors import NeedsResetError, RemoteTraceback, VecEnvTimeoutError, WorkerDiedError
from vecenv.integrations.ray.vector_env import RayVectorEnv
from vecenv.wire.buffers import SHM_PREFIX
from vecenv.wire.protocol import OBJECT_STORE_WEIGHTS_BYTES

NEXT, SAME, DISABLED = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED
#: Half a CPU per actor lets 4 groups run on the 2-CPU local Ray.
HALF_CPU = {"num_cpus": 0.5}


def _ray_scenarios() -> list[Scenario]:
    """The differential scenarios that apply to Ray (no start method, no shared memory), one of
    each kind: every autoreset mode (NEXT_STEP also on the cluster), uneven groups, nested and
    Text spaces, copy=False, float64 actions for a float32 Box, an env that reuses its info
    dict, and the async call pairs. The engine under them is the process backend's, which the
    full matrix covers; these check what only the transport could break.

    Each actor costs most of a second of CPU to start and each step is a Ray call to every
    actor, so one scenario runs three actors (cartpole's 7 envs); the other 7-env ones run their
    uneven groups (4 and 3) in two, the auto worker count (``None``) takes whole CPUs (two
    actors, not four), and copy=False rides on the float64 actions' Dict scenario (the matrix's
    dict-discrete-n7w3-SameStep-nocopy: Discrete actions are the other scenarios')."""
    wanted = {
        "cartpole-n7w3-SameStep",
        "cartpole-n3w1-Disabled",
        "box-discrete-n4wNone-NextStep-async",
        "dict-box-n7w3-SameStep-actfloat64",
        "tuple_text-multidiscrete-n7w3-SameStep",
        "ReusedInfoEnv-box-discrete-n4w2-SameStep",
    }
    chosen = [sc for sc in SCENARIOS if sc.id in wanted]
    assert len(chosen) == len(wanted), wanted - {sc.id for sc in chosen}
    chosen = [
        dataclasses.replace(sc, num_workers=2) if sc.num_workers == 3 and sc.env != "cartpole" else sc for sc in chosen
    ]
    return [dataclasses.replace(sc, copy=False) if sc.env == "dict/box" else sc for sc in chosen]


RAY_SCENARIOS = _ray_scenarios()
#: Steps of a Ray differential run: past the runner's last scheduled reset (step 160), short of
#: its default 220 (each step is a Ray call to every actor).
RAY_STEPS = 170


def _check_stats(sc: Scenario, stats) -> None:
    assert stats.steps == RAY_STEPS
    assert stats.masked_resets >= 2
    assert stats.terminations > 0
    if sc.mode is SAME:
        assert {"final_obs", "final_info"} <= stats.info_keys
    if sc.env != "cartpole":
        assert stats.truncations > 0
        assert DIFF_INFO_KEYS <= stats.info_keys, DIFF_INFO_KEYS - stats.info_keys


def _actor_options(num_workers: int | None) -> dict:
    return HALF_CPU if num_workers is not None and num_workers > 2 else {}


# -- the differential suite on the local Ray ------------------------------------------------------


def test_auto_worker_count_is_refused_with_what_ray_takes() -> None:
    """'auto' chooses between this process and local workers; Ray always runs actors."""
    with pytest.raises(ValueError, match=r"`num_workers` of RayVectorEnv must be None .* or an int, got 'auto'"):
        RayVectorEnv(healthy_fns(2), "auto")  # type: ignore[arg-type]


@pytest.mark.parametrize("how", ["vecenv.make('CartPole-v1', 2, backend='ray')", "vecenv.RayVectorEnv"])
def test_missing_ray_gives_one_line_install_hint(how: str) -> None:
    code = (
        "import sys; sys.modules['ray'] = None\nimport vecenv\n"
        f"try:\n    {how}\nexcept vecenv.errors.MissingDependencyError as e:\n    print(e)\n"
        "else:\n    raise SystemExit('no error')"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True, text=True).stdout
    assert out.count("\n") == 1 and "needs Ray: pip install 'vecenv[ray]'" in out, out


def test_zero_workers_is_refused_naming_the_range() -> None:
    """No env runs in this process with Ray: 0 actors is a ValueError, not a ZeroDivisionError."""
    with pytest.raises(
        ValueError, match=r"`num_workers` must be None or an int in \[1, 2\] \(1 to len\(env_fns\)\), got 0"
    ):
        RayVectorEnv(healthy_fns(2), 0)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sc", RAY_SCENARIOS, ids=[sc.id for sc in RAY_SCENARIOS])
def test_matches_sync(ray_local: RaySessions, sc: Scenario) -> None:
    fns = sc.env_fns()
    stats = run_differential(
        fns,
        lambda: RayVectorEnv(
            fns, sc.num_workers, autoreset_mode=sc.mode, copy=sc.copy, actor_options=_actor_options(sc.num_workers)
        ),
        mode=sc.mode,
        copy=sc.copy,
        seed=sum(map(ord, sc.id)),
        action_dtype=sc.action_dtype,
        use_async=sc.use_async,
        steps=RAY_STEPS,
    )
    _check_stats(sc, stats)


@pytest.mark.timeout(90)
def test_from_groups_uneven_matches_sync(ray_local: RaySessions) -> None:
    groups = [[0], [1, 2, 3], [4, 5]]
    kwargs = {"obs_kind": "dict", "act_kind": "multidiscrete"}
    fns = diff_env_fns(6, **kwargs)
    group_fns = [functools.partial(make_group, g, **kwargs) for g in groups]
    made: list[RayVectorEnv] = []

    def make() -> RayVectorEnv:
        made.append(RayVectorEnv.from_groups(group_fns, autoreset_mode=SAME, actor_options=HALF_CPU))
        return made[-1]

    stats = run_differential(fns, make, mode=SAME, seed=7, steps=120)
    assert stats.terminations > 0
    assert made[0].num_workers == 3 and made[0].num_envs == 6


@pytest.mark.timeout(90)
def test_native_info_keys_masked_out_in_every_env_are_kept(ray_local: RaySessions) -> None:
    """A native group's info key with an all-False mask is kept with its mask, as by processes."""
    make = [functools.partial(masked_group, "masked"), functools.partial(masked_group, "carried")]
    want = expected_masked_join(("masked", "carried"))
    with RayVectorEnv.from_groups(make, actor_options=HALF_CPU) as sub:
        assert_same(sub.reset(seed=0)[1], want, "reset", ordered=False)
        assert_same(sub.step(np.zeros(4, np.int64))[4], want, "step", ordered=False)
        for t, infos in enumerate(sub.rollout(2).infos):
            assert_same(infos, want, f"rollout.infos[{t}]", ordered=False)


@pytest.mark.timeout(60)
def test_call_get_set_attr_render(ray_local: RaySessions) -> None:
    fns = diff_env_fns(5, obs_kind="box", act_kind="discrete", render_mode="rgb_array")
    sync = SyncVectorEnv(fns)
    rng = np.random.default_rng(0)
    try:
        with RayVectorEnv(fns, 2) as sub:
            assert sub.render_mode == "rgb_array" and sub.num_workers == 2
            assert_same(sub.reset(seed=11), sync.reset(seed=11))
            assert_same(sub.call("double", 3.0, plus=1.5), sync.call("double", 3.0, plus=1.5))
            for name in ("t", "index", "np_random_seed", "metadata"):
                assert_same(sub.get_attr(name), sync.get_attr(name), name)
            sub.set_attr("scale", [1.0, -1.0, 3.0, 0.5, 7.0])
            sync.set_attr("scale", [1.0, -1.0, 3.0, 0.5, 7.0])
            assert sub.get_attr("scale") == (1.0, -1.0, 3.0, 0.5, 7.0)
            with pytest.raises(AttributeError):
                sub.get_attr("no_such_attribute")
            for _ in range(20):
                a = sample_actions(sync.single_action_space, 5, rng)
                assert_same(sub.step(a), sync.step(a))
            assert_same(sub.render(), sync.render())
            sub.call_async("double", 2.0)
            assert_same(sub.call_wait(timeout=30), sync.call("double", 2.0))
            # A result Ray cannot serialise is that call's error; the actors live on.
            with pytest.raises(Exception) as excinfo:
                sub.call("unpicklable")
            assert not isinstance(excinfo.value, WorkerDiedError), excinfo.value
            assert sub.get_attr("index") == (0, 1, 2, 3, 4)
    finally:
        sync.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", [NEXT, SAME], ids=lambda m: m.value)
def test_async_batches_follow_sync_trajectories(ray_local: RaySessions, mode: AutoresetMode) -> None:
    """async_reset/recv/send: ray.wait hands back the first groups to finish; every env's
    trajectory is still the one SyncVectorEnv gives for its seed and actions."""
    with RayVectorEnv([JitterEnv] * 8, 4, batch_size=4, autoreset_mode=mode, actor_options=HALF_CPU) as envs:
        follow_sync_trajectories(envs, mode, rounds=60)


# -- faults ------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_env_error_keeps_type_remote_traceback_and_names_env_worker_node(ray_local: RaySessions) -> None:
    fns = fault_fns(4, "raise", "step", target=2)
    with RayVectorEnv(fns, 2) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="injected fault in step of env 2") as excinfo:
            envs.step(np.zeros((4, 2), np.float32))
        cause = excinfo.value.__cause__
        assert isinstance(cause, RemoteTraceback) and "injected fault" in cause.tb
        note = " ".join(getattr(excinfo.value, "__notes__", []))
        node_ip = envs._transport.locations[1][1]
        assert "env 2" in note and "worker 1" in note and f"node {node_ip}" in note, note
        with pytest.raises(NeedsResetError):
            envs.step(np.zeros((4, 2), np.float32))
        envs.reset(seed=1)  # usable again
        envs.step(np.zeros((4, 2), np.float32))


@pytest.mark.timeout(60)
def test_env_error_at_start_names_the_env(ray_local: RaySessions) -> None:
    with pytest.raises(ValueError, match="injected fault in init of env 3") as excinfo:
        RayVectorEnv(fault_fns(4, "raise", "init", target=3), 2)
    assert "env 3" in " ".join(excinfo.value.__notes__)


@pytest.mark.timeout(60)
def test_actor_that_exits_while_building_is_worker_died(ray_local: RaySessions) -> None:
    start = time.monotonic()
    with pytest.raises(WorkerDiedError, match=r"worker 1 .*during `__init__`") as excinfo:
        RayVectorEnv(fault_fns(4, "exit", "init", target=3), 2)
    assert excinfo.value.worker == 1 and time.monotonic() - start < 30.0


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "fault, where, expected",
    [
        ("raise", "reset", ValueError),
        ("raise", "call", ValueError),
        ("unpicklable", "step", vecenv.RemoteEnvError),
        ("unloadable", "step", vecenv.RemoteEnvError),
    ],
)
def test_env_errors_of_every_kind_keep_the_actors(
    ray_local: RaySessions, fault: str, where: str, expected: type
) -> None:
    """As on the process backend: the error (or a RemoteEnvError when it cannot be rebuilt),
    naming env 1, and the vector env stays usable."""
    with RayVectorEnv(fault_fns(3, fault, where, target=1), 2) as envs:
        with pytest.raises(expected) as excinfo:
            envs.reset(seed=0)
            if where == "call":
                envs.call("boom")
            else:
                envs.step(np.zeros((3, 2), np.float32))
        assert isinstance(excinfo.value.__cause__, RemoteTraceback)
        assert "env 1 (worker 0 on node" in " ".join(excinfo.value.__notes__)
        envs.reset(seed=1)  # the fault fired once; the envs carry on
        assert envs.call("ping") == ("pong 0", "pong 1", "pong 2")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "odd, where",
    [
        ("lock-info", "env 3 (worker 1"),  # cannot be pickled in the worker: the env is known
        ("lock-call", "env 3 (worker 1"),
        ("home-info", "envs 2..3 (worker 1"),  # cannot be rebuilt here: the group's reply
        ("home-call", "envs 2..3 (worker 1"),
    ],
)
def test_a_reply_that_cannot_cross_fails_as_on_the_process_backend(
    ray_local: RaySessions, odd: str, where: str
) -> None:
    """Differential: a reply that cannot be pickled in the worker (an info or ``call`` result
    holding a lock), or pickles but cannot be rebuilt in the parent (its unpickling raises), is
    the same error on Ray as on the process backend: the same class (never Ray's
    ``RaySystemError`` or ``RayTaskError``), the remote traceback as its cause, and the same
    notes naming the env (or the group, whose reply as a whole failed) and the call. The worker
    answers the next call on both."""
    fns = odd_fns(4, {3: odd})
    error = TypeError if odd.startswith("lock") else ElsewhereError
    notes = {}
    for backend in ("process", "ray"):
        envs = vecenv.SubprocVectorEnv(fns, 2) if backend == "process" else RayVectorEnv(fns, 2, actor_options=HALF_CPU)
        with envs:
            envs.reset(seed=0)
            with pytest.raises(Exception) as excinfo:
                if odd.endswith("info"):
                    envs.step(np.zeros(4, np.int64))
                else:
                    envs.call("handle")
            assert type(excinfo.value) is error, (backend, repr(excinfo.value))
            assert isinstance(excinfo.value.__cause__, RemoteTraceback), backend
            notes[backend] = [re.sub(r" on node \S+ \(\w+\), pid \d+", "", n) for n in excinfo.value.__notes__]
            assert envs.get_attr("index") == (0, 1, 2, 3), backend
    assert notes["ray"] == notes["process"]
    assert f"raised in {where}) during `" in notes["process"][-1], notes


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["mid-step", "idle"])
def test_killed_actor_is_worker_died_within_seconds(ray_local: RaySessions, when: str) -> None:
    fns = fault_fns(4, "sleep", "step", target=2, duration=60.0)
    envs = RayVectorEnv(fns, 2)
    try:
        envs.reset(seed=0)
        pid = envs.actor_pids[1]
        if when == "mid-step":
            envs.step_async(np.zeros((4, 2), np.float32))
            time.sleep(0.3)  # worker 1 is now sleeping inside env 2's step
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerDiedError) as excinfo:
            if when == "mid-step":
                envs.step_wait()
            else:
                time.sleep(0.5)
                envs.step(np.zeros((4, 2), np.float32))
        assert time.monotonic() - start < 10.0
        message = str(excinfo.value)
        assert excinfo.value.worker == 1 and excinfo.value.envs == range(2, 4)
        assert "worker 1" in message and "envs 2..3" in message and "node" in message, message
        assert envs.state is vecenv.State.BROKEN
        with pytest.raises(WorkerDiedError):
            envs.reset(seed=0)
    finally:
        start = time.monotonic()
        envs.close()
        assert time.monotonic() - start < 5.0
    envs.close()


@pytest.mark.timeout(90)
def test_on_worker_death_restart_replaces_the_actor(ray_local: RaySessions) -> None:
    """on_worker_death="restart": a new actor rebuilds the dead one's envs on the same rows; the
    step that saw the death reports them truncated and reseeded; the other envs stay exact."""
    n, seed, victim_envs, keep = 5, 17, [3, 4], [0, 1, 2]
    fns = diff_env_fns(n, obs_kind="box", act_kind="discrete")
    sync = SyncVectorEnv(fns)
    rng = np.random.default_rng(3)
    try:
        # Half a CPU each: the replacement need not wait for Ray to free the dead actor's CPU.
        with RayVectorEnv(fns, 2, on_worker_death="restart", actor_options=HALF_CPU) as envs:
            assert_same(envs.reset(seed=seed), sync.reset(seed=seed))
            for t in range(12):
                actions = sample_actions(sync.single_action_space, n, rng)
                if t == 6:
                    old_pid = envs.actor_pids[1]
                    os.kill(old_pid, signal.SIGKILL)
                got, want = envs.step(actions), sync.step(actions)
                assert_same([x[keep] for x in got[:4]], [x[keep] for x in want[:4]], f"step {t}")
                if t == 6:
                    obs, rewards, terms, truncs, infos = got
                    assert truncs[victim_envs].all() and (rewards[victim_envs] == 0).all()
                    assert infos["_worker_restarted"].tolist() == [i in victim_envs for i in range(n)]
                    for i in victim_envs:  # reseeded with seed + i + restarts * num_envs
                        expected, _ = fns[i]().reset(seed=seed + i + n)
                        np.testing.assert_array_equal(obs[i], expected)
            assert envs.restart_count == 1 and envs.actor_pids[1] != old_pid
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_timeout_then_late_result_is_dropped(ray_local: RaySessions) -> None:
    fns = fault_fns(4, "sleep", "step", target=0, duration=3.0)
    sync = SyncVectorEnv(healthy_fns(4))
    try:
        with RayVectorEnv(fns, 2) as envs:
            envs.reset(seed=0)
            envs.step_async(np.zeros((4, 2), np.float32))
            start = time.monotonic()
            with pytest.raises(VecEnvTimeoutError):
                envs.step_wait(timeout=0.2)
            assert time.monotonic() - start < 2.5  # it did not wait for the 3 s step
            with pytest.raises(NeedsResetError):
                envs.step(np.zeros((4, 2), np.float32))
            # The reset waits behind the late step; the late step's rows are never returned.
            assert_same(envs.reset(seed=5), sync.reset(seed=5))
            rng = np.random.default_rng(3)
            for _ in range(10):
                a = sample_actions(sync.single_action_space, 4, rng)
                assert_same(envs.step(a), sync.step(a))
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_close_with_calls_in_flight_returns_and_ends_the_actors(ray_local: RaySessions) -> None:
    envs = RayVectorEnv(fault_fns(4, "hang", "step", target=1), 2)
    envs.reset(seed=0)
    actors = list(envs._transport.actors)
    envs.step_async(np.zeros((4, 2), np.float32))
    start = time.monotonic()
    with pytest.warns(UserWarning, match="pending call to `step`"):
        envs.close(timeout=0.5)
    assert time.monotonic() - start < 5.0
    assert envs.closed
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.__ray_ready__.remote(), timeout=10)
    envs.close()  # idempotent
    with pytest.raises(ClosedEnvironmentError):
        envs.step(np.zeros((4, 2), np.float32))
    assert ray.is_initialized(), "a Ray we did not start must stay up"


@pytest.mark.timeout(120)
def test_building_and_closing_many_leaves_no_actor_descriptor_or_block(ray_local: RaySessions) -> None:
    """On the user's Ray (the way docs/ray.md advises for a program that builds many vector
    envs), each build and close, twice or by ``del``, ends its actors and leaves this process
    with the descriptors and shared memory it had: nothing grows with the number of cycles."""
    import gc

    from tests.helpers.faults import open_fds

    def cycle(seed: int, by_del: bool = False, workers: int = 1) -> list:
        envs = RayVectorEnv(healthy_fns(2), workers, actor_options=HALF_CPU)
        envs.reset(seed=seed)
        envs.step(np.zeros((2, 2), np.float32))
        actors = list(envs._transport.actors)
        if by_del:
            del envs
            gc.collect()
        else:
            envs.close()
            envs.close()
        return actors

    def blocks() -> set[str]:
        """vecenv's named blocks (on Linux its blocks are memfds, which the descriptor check counts).
        Not all of /dev/shm: the test process beside this one makes and frees entries of its own
        there (multiprocessing's semaphores) at any moment."""
        return {name for name in os.listdir("/dev/shm") if name.startswith(SHM_PREFIX)}

    cycle(0, workers=2)  # Ray's own lazily opened descriptors (its clients, logs) are opened once
    fds, shm = set(open_fds()), blocks()
    # Five cycles of one actor each (an actor costs most of a second of CPU to start): a
    # descriptor left per cycle (or per actor) makes five, past the 3 allowed.
    ended = [actor for k in range(1, 6) for actor in cycle(k, by_del=k == 5)]
    grown = {fd: target for fd, target in open_fds().items() if fd not in fds}
    assert len(grown) < 4, f"{len(grown)} descriptors more after 5 cycles: {grown}"
    assert blocks() <= shm
    for actor in ended:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.__ray_ready__.remote(), timeout=10)


@pytest.mark.timeout(60)
def test_bad_arguments_are_refused_before_anything_starts(ray_local: RaySessions) -> None:
    fns = healthy_fns(4)
    with pytest.raises(ValueError, match="num_workers"):
        RayVectorEnv(fns, 5)
    with pytest.raises(TypeError, match="actor_options"):
        RayVectorEnv(fns, 2, actor_options=[("num_cpus", 1)])
    with pytest.raises(ValueError, match="name"):
        RayVectorEnv(fns, 2, actor_options={"name": "x"})
    with pytest.raises(TypeError, match="address"):
        RayVectorEnv(fns, 2, address=6379)
    with pytest.raises(ValueError, match="batch_size"):
        RayVectorEnv(fns, 2, batch_size=3)
    with pytest.raises(ValueError, match=r"`batch_size` must be an int in \[1, num_envs=4\], got 5"):
        RayVectorEnv(fns, batch_size=5)  # no worker count given: checked before the cluster is asked
    with pytest.raises(ValueError, match="cannot hold 'max_restarts' .*on_worker_death='restart'"):
        RayVectorEnv(fns, 2, actor_options={"max_restarts": 2})
    with pytest.raises(TypeError, match="num_cpus must be a non-negative number"):
        RayVectorEnv(fns, 2, actor_options={"num_cpus": "1"})
    with pytest.raises(ValueError, match="need 4 CPU, but the Ray cluster has 2"):
        RayVectorEnv(fns, 4)  # 4 actors of 1 CPU on a 2-CPU Ray could never all start
    with pytest.raises(ValueError, match="need 2 simulator_license, but the Ray cluster has 0"):
        RayVectorEnv(fns, 2, actor_options={"resources": {"simulator_license": 1}})
    # Ray checks a scheduling strategy only when the actor is asked for: still a VecEnvError.
    with pytest.raises(
        vecenv.errors.InvalidArgumentError,
        match=r"`actor_options` .*, got \{'scheduling_strategy': 'NOWHERE'\}: .*Invalid scheduling_strategy",
    ):
        RayVectorEnv(fns, 2, actor_options={"scheduling_strategy": "NOWHERE"})
    with RayVectorEnv(fns) as envs:  # default: as many actors as the CPUs hold
        assert envs.num_workers == 2


@pytest.mark.timeout(60)
def test_start_timeout_bounds_a_start_that_waits_for_cpus(ray_local: RaySessions) -> None:
    """Actors that wait for CPUs another job holds: start_timeout turns the wait into an error."""

    @ray.remote(num_cpus=2)
    class Hog:
        def ready(self) -> bool:
            return True

    hog = Hog.remote()
    ray.get(hog.ready.remote(), timeout=30)
    try:
        start = time.monotonic()
        with pytest.raises(VecEnvTimeoutError):
            RayVectorEnv(healthy_fns(2), 1, start_timeout=1.0)
        assert time.monotonic() - start < 10.0
    finally:
        ray.kill(hog)


@pytest.mark.timeout(60)
def test_a_cluster_that_does_not_answer_fails_the_start_within_start_timeout(
    ray_local: RaySessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray's ray.cluster_resources() has no deadline (a stalled connection to the GCS waits in
    native code forever): the start waits for it at most start_timeout, then raises."""
    release = threading.Event()

    def stalled() -> dict[str, float]:
        release.wait(30)
        return {"CPU": 2.0}

    monkeypatch.setattr(ray, "cluster_resources", stalled)
    try:
        start = time.monotonic()
        with pytest.raises(VecEnvTimeoutError, match=r"ray\.cluster_resources\(\) within 0\.5 s"):
            RayVectorEnv(healthy_fns(2), 1, start_timeout=0.5)
        assert time.monotonic() - start < 5.0
    finally:
        release.set()
    monkeypatch.undo()
    with RayVectorEnv(healthy_fns(2), 1, start_timeout=30) as envs:  # Ray itself was never touched
        assert envs.reset(seed=0)[0].shape[0] == 2


@pytest.mark.timeout(90)
def test_an_address_where_nothing_answers_fails_the_start_within_start_timeout() -> None:
    """ray.init(address=...) retries a closed port for many minutes (over 200 s, Ray 2.60),
    whatever start_timeout says: the start raises VecEnvTimeoutError naming the address once
    start_timeout has passed, and leaves no Ray connected. In an interpreter of its own: this
    one is connected to the shared local Ray, which a vector env uses whatever its address."""
    with socket.socket() as probe:  # a port nothing listens on (bound, then given back)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        "import time, ray\n"
        "from tests.helpers.faults import healthy_fns\n"
        "from vecenv.errors import VecEnvTimeoutError\n"
        "from vecenv.integrations.ray.vector_env import RayVectorEnv\n"
        "start = time.monotonic()\n"
        "try:\n"
        f"    RayVectorEnv(healthy_fns(2), 1, address='127.0.0.1:{port}', start_timeout=1.5)\n"
        "except VecEnvTimeoutError as err:\n"
        "    print(f'{time.monotonic() - start:.2f}', ray.is_initialized(), err)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, timeout=60, capture_output=True, text=True, cwd=ROOT
    ).stdout
    seconds, initialized, message = out.split(" ", 2)
    assert 1.5 <= float(seconds) < 10.0 and initialized == "False", out
    assert f"nothing answered at `address` '127.0.0.1:{port}'" in message, message
    assert "within 1.5 s (start_timeout=1.5)" in message and "ConnectionRefusedError" in message, message


def _arrays(tree: object) -> list[np.ndarray]:
    """Every numpy array in ``tree`` (dicts, tuples, lists, the fields of a Rollout)."""
    if isinstance(tree, np.ndarray):
        return [tree]
    if isinstance(tree, dict):
        return [a for v in tree.values() for a in _arrays(v)]
    if isinstance(tree, (list, tuple)):
        return [a for v in tree for a in _arrays(v)]
    return []


@pytest.mark.timeout(90)
@pytest.mark.parametrize("copy", [True, False], ids=["copy", "nocopy"])
def test_what_step_reset_recv_and_rollout_return_is_writable(ray_local: RaySessions, copy: bool) -> None:
    """SyncVectorEnv's and the process backend's results can be changed in place (``obs[mask] = 0``);
    Ray's must be too, though Ray hands out read-only arrays: the parent copies every row into
    arrays of its own, and this holds it to that for each call that returns arrays."""
    fns = diff_env_fns(4, obs_kind="dict", act_kind="discrete")
    with RayVectorEnv(fns, 2, autoreset_mode=SAME, copy=copy, batch_size=2) as envs:
        rng = np.random.default_rng(0)
        returned = {"reset": [envs.reset(seed=0)[0]]}
        for t in range(30):
            obs, rewards, terminations, truncations, _ = envs.step(sample_actions(envs.single_action_space, 4, rng))
            returned[f"step {t}"] = [obs, rewards, terminations, truncations]
        if not copy:  # views of the vector env's buffers: the last step's values
            returned = {"step 29": returned["step 29"]}
        for call, values in returned.items():
            for array in _arrays(values):
                assert array.flags.writeable, call
                array[...] = 0  # "assignment destination is read-only" if it were not
        envs.async_reset(seed=1)
        for i in range(10):
            *received, env_ids = envs.recv()
            for array in _arrays(received):
                assert array.flags.writeable, "recv"
                array[...] = 0
            if i < 8:  # the last two receive both groups: none is in flight after them
                envs.send(sample_actions(envs.single_action_space, len(env_ids), rng), env_ids)
        envs.reset(seed=2)
        batch = envs.rollout(30)
        fields = {
            name: getattr(batch, name)
            for name in (
                "observations",
                "actions",
                "rewards",
                "terminations",
                "truncations",
                "last_observations",
                "final_observations",
                "episode_starts",
                "infos",
            )
        }
        fields["next_observations()"] = batch.next_observations()
        assert _arrays(fields["final_observations"]), "no episode ended: nothing checked there"
        for name, value in fields.items():
            for array in _arrays(value):
                assert array.flags.writeable, name
                array[...] = 0


@pytest.mark.timeout(60)
def test_infos_and_call_results_are_writable_arrays(ray_local: RaySessions) -> None:
    """Ray hands numpy arrays out read-only; what the user gets is writable, as from a pipe."""
    fns = diff_env_fns(3, obs_kind="box", act_kind="discrete", render_mode="rgb_array")
    with RayVectorEnv(fns, 2, autoreset_mode=SAME) as envs:
        _, infos = envs.reset(seed=0)
        rng = np.random.default_rng(0)
        seen_final = False
        for _ in range(60):
            _, _, _, _, infos = envs.step(sample_actions(envs.single_action_space, 3, rng))
            for key, value in infos.items():
                if isinstance(value, np.ndarray) and value.dtype != object:
                    assert value.flags.writeable, key
            if "final_obs" in infos:
                seen_final = True
                for i in np.flatnonzero(infos["_final_obs"]):
                    infos["final_obs"][i][...] = 0  # writable
        assert seen_final
        frames = envs.render()  # a call result: one frame per env
        assert all(f.flags.writeable for f in frames)
        frames[0][...] = 0
        # Arrays inside other objects too (a Space here; namedtuples, OrderedDicts, ...).
        spaces = envs.get_attr("observation_space")
        assert all(space.low.flags.writeable for space in spaces)
        spaces[0].low[...] = 0


@pytest.mark.timeout(60)
def test_make_backend_ray(ray_local: RaySessions) -> None:
    fns = [functools.partial(gym.make, "CartPole-v1")] * 4
    sync = SyncVectorEnv(fns)
    try:
        with vecenv.make("CartPole-v1", 4, 1, backend="ray") as envs:  # one actor: make is what is checked
            assert isinstance(envs, RayVectorEnv)
            assert envs.spec is not None and envs.spec.id == "CartPole-v1"
            assert_same(envs.reset(seed=2), sync.reset(seed=2))
            for t in range(30):
                a = np.array([t % 2, 1, 0, (t // 2) % 2])
                assert_same(envs.step(a), sync.step(a))
    finally:
        sync.close()
    with pytest.raises(ValueError, match="backend"):
        vecenv.make("CartPole-v1", 4, 2, backend="threads")


@pytest.mark.timeout(90)
def test_rollout_cli_backend_ray_writes_the_same_arrays(ray_local: RaySessions, tmp_path, capsys) -> None:
    from vecenv.datasets.cli import main

    common = ["--env", "CartPole-v1", "--num-envs", "5", "--steps", "300", "--seed", "4", "--quiet"]
    assert main([*common, "--num-workers", "2", "--out", str(tmp_path / "process")]) == 0
    assert main([*common, "--backend", "ray", "--num-workers", "2", "--out", str(tmp_path / "ray")]) == 0
    process, on_ray = vecenv.load(tmp_path / "process"), vecenv.load(tmp_path / "ray")
    assert sorted(process) == sorted(on_ray)
    for name in process:
        np.testing.assert_array_equal(np.asarray(on_ray[name]), np.asarray(process[name]), err_msg=name)
    assert ray.is_initialized(), "the collector used the Ray it found and left it running"
    assert main([*common, "--ray-address", "auto", "--out", str(tmp_path / "x")]) == 2
    assert "--ray-address: only with --backend ray" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_import_vecenv_does_not_import_ray() -> None:
    code = (
        "import sys, vecenv; from vecenv import *; assert 'ray' not in sys.modules; "
        "from vecenv.integrations.ray.vector_env import RayVectorEnv; assert vecenv.RayVectorEnv is RayVectorEnv"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.timeout(60)
def test_docs_example_runs_on_the_local_ray(ray_local: RaySessions) -> None:
    """docs/ray.md's cluster example (tests/test_docs.py leaves it to this test): its Python
    lines, on the shared local Ray (which an initialised Ray takes precedence over ``address``),
    at a size that fits 2 CPUs."""
    page = Path(__file__).resolve().parents[2] / "docs" / "ray.md"
    example = re.search(
        r"tested-by tests/integrations/test_ray.py -->\n```python\n(.*?)```", page.read_text(), re.S
    ).group(1)
    assert 'address="auto"' in example and "num_workers=16" in example and "num_envs=256" in example
    example = example.replace("num_workers=16", "num_workers=2").replace("num_envs=256", "num_envs=8")
    example = example.replace("range(1000)", "range(50)")
    exec(compile(example, str(page), "exec"), {"__name__": "__main__"})
    assert ray.is_initialized()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runner", ["ray-2w", "ray-2w-half"])
def test_benchmark_ray_runners_measure(ray_local: RaySessions, runner: str) -> None:
    """The benchmark's Ray rows, measured in this process on the shared Ray (the benchmark
    itself runs each cell in a fresh process, where the vector env starts its own Ray)."""
    from vecenv.bench.measure import measure
    from vecenv.bench.plan import plan

    cells, notes = plan(["cartpole"], [4], ["sync", runner], quick=True)
    cell = next(c for c in cells if c["runner"] == runner)
    spec = {**cell, "calib": {"inference_reps": 1}, "warmup": 0.05, "seconds": 0.2}
    result = measure(spec)
    assert result["rate"] > 0 and result["env_steps"] > 0
    if runner.endswith("-half"):
        assert cell["batch_size"] == 2 and cell["workers"] == 2


# -- multi-agent copies on Ray (vecenv.MultiAgentVectorEnv, backend="ray") --------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [NEXT, SAME], ids=lambda m: m.value)
def test_multiagent_matches_plain_loop(ray_local: RaySessions, mode: AutoresetMode) -> None:
    """The multi-agent groups in actors give the plain loop's results (agent death included)."""
    from tests.multiagent.test_vector_env import run_native, toy_fns

    seen = run_native(toy_fns(5), mode, steps=16, num_workers=2, backend="ray", actor_options=HALF_CPU)
    assert seen["inactive_rows"] > 0 and seen["copy_ends"] >= 5


@pytest.mark.timeout(120)
def test_multiagent_kaz_matches_plain_loop(ray_local: RaySessions) -> None:
    pytest.importorskip("pymunk", reason="knights_archers_zombies needs pymunk")
    from tests.helpers.multiagent import kaz
    from tests.multiagent.test_vector_env import run_native

    seen = run_native([kaz] * 2, SAME, steps=140, num_workers=2, backend="ray", actor_options=HALF_CPU)
    assert seen["inactive_rows"] > 0


@pytest.mark.timeout(120)
def test_multiagent_rollout_in_actors_gives_the_steps_of_its_actions(ray_local: RaySessions) -> None:
    from tests.helpers.multiagent import first_value_policy
    from tests.multiagent.test_vector_env import rollout_matches_steps, toy_fns

    inactive = rollout_matches_steps(
        toy_fns(3), 12, first_value_policy, num_workers=2, backend="ray", actor_options=HALF_CPU
    )
    assert inactive > 0


@pytest.mark.timeout(90)
def test_multiagent_restart_replaces_the_actor(ray_local: RaySessions) -> None:
    from tests.multiagent.test_vector_env import toy_fns

    envs = vecenv.MultiAgentVectorEnv(toy_fns(4), 2, backend="ray", actor_options=HALF_CPU, on_worker_death="restart")
    with envs:
        envs.reset(seed=1)
        os.kill(envs.rows.actor_pids[1], signal.SIGKILL)
        _, rewards, _, truncs, infos = envs.step(envs.action_space.sample())
        assert truncs[8:].all() and (rewards[8:] == 0).all() and not truncs[:8].any()
        assert infos["_worker_restarted"].tolist() == [False] * 8 + [True] * 8
        for _ in range(6):
            envs.step(envs.action_space.sample())


# -- a Ray that the vector env starts itself ---------------------------------------------------


OWN_AND_ENDED_SESSIONS = """
import numpy as np
import ray
from vecenv import RayVectorEnv, WorkerDiedError
from tests.helpers.faults import healthy_fns

HALF = {"num_cpus": 0.5}  # three actors on the 2-CPU Ray a vector env starts


def make():
    return RayVectorEnv(healthy_fns(2), 1, actor_options=HALF)


def fails_then_closes(stale):
    # A vector env of an ended session: its step raises, its close returns and leaves the
    # Ray that runs now alone.
    try:
        stale.step(np.zeros((2, 2), np.float32))
    except WorkerDiedError as exc:
        assert "Ray was shut down" in str(exc) or "Ray refused the call" in str(exc), exc
    else:
        raise AssertionError("a step on the actors of an ended Ray session returned")
    stale.close()
    assert ray.is_initialized(), "a vector env of an ended session ended the Ray that runs now"


envs = []
try:
    # 1. The first vector env starts a Ray; the next ones share it; it runs while one is open.
    assert not ray.is_initialized()
    envs += [make(), make(), make()]  # starts a Ray; the second and third share it
    first, stale_a, stale_b = envs
    assert ray.is_initialized()
    first.close()
    assert ray.is_initialized(), "still used by the other vector envs"
    stale_a.reset(seed=0)
    stale_b.reset(seed=0)
    # 2. The user ends that Ray (a notebook cell, a fixture); the next vector env starts one of
    # its own, which the one after it shares and the last of them to close stops.
    ray.shutdown()
    envs += [make(), make()]
    own, shared = envs[-2:]
    fails_then_closes(stale_a)
    own.reset(seed=0)
    own.step(np.zeros((2, 2), np.float32))
    own.close()
    assert ray.is_initialized(), "still used by the second vector env"
    shared.reset(seed=0)
    shared.close()
    assert not ray.is_initialized(), "the last vector env to close stops the Ray they started"
    # 3. The user starts a Ray; a vector env uses it, and no close (stale or not) ends it.
    ray.init(address="local", include_dashboard=False, num_cpus=2)
    envs.append(make())
    users = envs[-1]
    fails_then_closes(stale_b)
    users.reset(seed=0)
    users.step(np.zeros((2, 2), np.float32))
    users.close()
    assert ray.is_initialized(), "a Ray the user started stays"
finally:
    for made in envs:
        made.close()
ray.shutdown()
print("ok")
"""


@pytest.mark.timeout(300)
def test_a_vector_env_starts_shares_and_stops_its_ray_and_one_of_an_ended_session_fails_cleanly(
    _ray_sessions: RaySessions,
) -> None:
    """In a fresh interpreter, as a script would: a vector env starts a Ray, the next ones share
    it, and the last to close stops it. The user shuts down the Ray vector envs started, then Ray
    starts again: a vector env's own, then the user's ``ray.init()``. A vector env of an ended
    session raises WorkerDiedError, its close() returns, and neither ends the new session, whose
    vector envs step on; the Ray a vector env started stops with the last of them, the user's
    stays. (One driver for all of it: every Ray start costs seconds of CPU. Not in this
    process: stopping and starting Ray again in one driver, with the shared local Ray around it,
    has left the next Ray's driver connection stalled inside Ray's native client.)"""
    assert os.environ["RAY_TMPDIR"] == _ray_sessions.temp_dir  # its session files go with ours
    run_driver(OWN_AND_ENDED_SESSIONS, timeout=240)
    _ray_sessions.note_pids()  # any of its Ray processes still running fails the session's check


def test_actor_options_that_would_run_a_groups_commands_concurrently_are_refused() -> None:
    fns = healthy_fns(2)
    for options in ({"max_concurrency": 4}, {"concurrency_groups": {"io": 2}}):
        with pytest.raises(ValueError, match=f"cannot hold '{next(iter(options))}'.*one at a time"):
            RayVectorEnv(fns, 2, actor_options=options)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"num_cpus": math.inf}, "num_cpus"),
        ({"num_gpus": math.inf}, "num_gpus"),
        ({"memory": math.inf}, "memory"),
        ({"resources": {"simulator_license": math.inf}}, "resources['simulator_license']"),
        ({"num_cpus": math.nan}, "num_cpus"),
    ],
)
def test_resource_amounts_that_are_not_finite_are_refused_naming_the_option(
    monkeypatch: pytest.MonkeyPatch, options: dict, named: str
) -> None:
    """An infinite amount passed the non-negative check and reached Ray's own, which raised a
    bare OverflowError ("cannot convert float infinity to integer") naming nothing: it is an
    InvalidArgumentError naming the option and the value, before Ray is started or joined."""
    from vecenv.integrations.ray import vector_env

    class NoRay:
        def acquire(self, address: object) -> None:
            raise AssertionError("Ray was touched before actor_options were checked")

    monkeypatch.setattr(vector_env, "RAY_USE", NoRay())
    with pytest.raises(vecenv.errors.InvalidArgumentError) as excinfo:
        RayVectorEnv(healthy_fns(2), 1, actor_options=options)
    message = str(excinfo.value)
    assert message.startswith(f"`actor_options` {named} must be a finite non-negative number"), message
    assert message.endswith(("got inf", "got nan")), message


def test_wrong_values_are_value_errors_and_wrong_types_type_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A negative amount and an empty ``address`` raised ArgumentTypeError, a TypeError, for a
    value of the right type: they are InvalidArgumentError (a ValueError) now; a value of the
    wrong type stays a TypeError. All before Ray is started or joined."""
    from vecenv.integrations.ray import vector_env

    class NoRay:
        def acquire(self, address: object) -> None:
            raise AssertionError("Ray was touched before the arguments were checked")

    monkeypatch.setattr(vector_env, "RAY_USE", NoRay())
    for kwargs, named in (
        ({"actor_options": {"num_cpus": -1}}, "`actor_options` num_cpus must be a finite non-negative number"),
        ({"actor_options": {"resources": {"gpu_slot": -0.5}}}, "`actor_options` resources['gpu_slot'] must be"),
        ({"address": ""}, "`address` must be a Ray address"),
    ):
        with pytest.raises(vecenv.errors.InvalidArgumentError, match=re.escape(named)) as excinfo:
            RayVectorEnv(healthy_fns(2), 1, **kwargs)
        assert not isinstance(excinfo.value, TypeError), kwargs
    for kwargs in ({"actor_options": {"num_cpus": "1"}}, {"address": 6379}):
        with pytest.raises(vecenv.errors.ArgumentTypeError):
            RayVectorEnv(healthy_fns(2), 1, **kwargs)


@pytest.mark.parametrize(
    "options, error, says",
    [
        ({"bogus": 1}, ValueError, "Invalid option keyword bogus"),
        ({"lifetime": "forever"}, ValueError, "lifetime"),
        ({"get_if_exists": True}, ValueError, "name must be specified"),
        ({"runtime_env": 5}, TypeError, "runtime_env"),
    ],
)
def test_actor_options_that_ray_refuses_are_a_vecenv_error_before_ray_is_touched(
    monkeypatch: pytest.MonkeyPatch, options: dict, error: type, says: str
) -> None:
    """An option Ray does not take is refused as the other bad arguments are: a VecEnvError
    (keeping Ray's builtin base) naming `actor_options` and what was given, with Ray's reason,
    before Ray is started or joined, not as Ray's plain ValueError seconds later."""
    from vecenv.integrations.ray import vector_env

    class NoRay:
        def acquire(self, address: object) -> None:
            raise AssertionError("Ray was touched before actor_options were checked")

    monkeypatch.setattr(vector_env, "RAY_USE", NoRay())
    with pytest.raises(error) as excinfo:
        RayVectorEnv(healthy_fns(2), 2, actor_options=options)
    assert isinstance(excinfo.value, vecenv.VecEnvError), repr(excinfo.value)
    message = str(excinfo.value)
    assert message.startswith("`actor_options` must be options that Ray takes for an actor, got {"), message
    assert repr(next(iter(options))) in message and says in message, message


def test_actors_that_no_placement_on_the_nodes_holds_are_refused_at_once() -> None:
    """The cluster's total holds them, its nodes do not (an actor runs on one node): refused
    before any actor is started, not waited for forever."""
    from vecenv.integrations.ray.vector_env import _fit_cluster

    total, nodes = {"CPU": 2.0}, [{"CPU": 1.0}, {"CPU": 1.0}]
    with pytest.raises(ValueError, match=r"1 actors of 1.5 CPU each do not fit .*nodes \(1 CPU; 1 CPU\) hold 0"):
        _fit_cluster(total, nodes, {"CPU": 1.5}, 4, 1)
    with pytest.raises(ValueError, match=r"3 actors of 0.6 CPU each do not fit .* hold 2"):
        _fit_cluster(total, nodes, {"CPU": 0.6}, 4, 3)
    assert _fit_cluster(total, nodes, {"CPU": 0.6}, 4, None) == 2  # as many as the nodes hold
    assert _fit_cluster(total, nodes, {"CPU": 0.5}, 8, None) == 4
    with pytest.raises(ValueError, match="need 3 CPU, but the Ray cluster has 2"):
        _fit_cluster(total, nodes, {"CPU": 1.0}, 4, 3)


# -- rollouts in the actors --------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [NEXT, SAME, DISABLED], ids=lambda m: m.value)
def test_rollouts_match_sync_and_the_process_backend(ray_local: RaySessions, mode: AutoresetMode) -> None:
    """A rollout on Ray actors: Sync's trajectories with the recorded actions, and the process
    backend's data for the same seed (random policy: per-env streams, whatever the layout: two
    actors of 3 envs here, three workers of 2 there)."""
    fns = diff_env_fns(6, obs_kind="box", act_kind="discrete", p_term=0.06, p_trunc=0.04)
    policy = vecenv.policies.FunctionPolicy(row_wise_policy) if mode is DISABLED else "random"
    with RayVectorEnv(fns, 2, autoreset_mode=mode, actor_options=HALF_CPU) as envs:
        envs.reset(seed=7)
        got = envs.rollout(30, policy)
    if mode is DISABLED:
        assert_matches_sync(got, single_env_reference(fns, 7, got.actions, 30))
    else:
        assert_matches_sync(got, sync_reference(fns, mode, 7, got.actions, 30))
    assert (got.terminations | got.truncations).sum() >= 5
    with vecenv.SubprocVectorEnv(fns, 3, autoreset_mode=mode) as local:
        local.reset(seed=7)
        theirs = local.rollout(30, policy)
    for key in ("observations", "actions", "rewards", "terminations", "truncations", "last_observations"):
        assert_same(getattr(got, key), getattr(theirs, key), key)
    assert_same(got.infos, theirs.infos, "infos")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [NEXT, SAME, DISABLED], ids=lambda m: m.value)
def test_rollout_extras_and_recurrent_state_match_a_row_wise_loop(ray_local: RaySessions, mode: AutoresetMode) -> None:
    """On Ray the rollout rows travel in the replies: the extras, the episode starts and the
    state (read, set, carried across rollouts) are still those of a row-wise loop over Sync."""
    from tests.engine.test_rollout_extras import (
        N,
        Recurrent,
        Reference,
        assert_rollout_matches,
        assert_state_equal,
        join_rows,
    )

    fns = diff_env_fns(N)
    policy = Recurrent()
    ref = Reference(fns, mode, policy)
    try:
        with RayVectorEnv(fns, 2, autoreset_mode=mode, actor_options=HALF_CPU) as envs:
            envs.reset(seed=3)
            ref.reset(seed=3)
            for steps in (1, 45):
                if ref.ended.any():
                    mask = ref.ended.copy()
                    envs.reset(options={"reset_mask": mask})
                    ref.reset(mask=mask)
                assert_rollout_matches(envs.rollout(steps, policy), ref.rollout(steps), f"T={steps}")
            assert_state_equal(envs.policy_state(), join_rows(ref.states), "policy_state")
    finally:
        ref.close()


@pytest.mark.timeout(120)
def test_new_weights_reach_every_actor_large_ones_put_once_per_version(
    ray_local: RaySessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small weights ride inside each actor's command; large ones are put into the object store
    once per version and passed beside every command (a replacement actor's too)."""
    from tests.engine.test_rollouts import ConstantPolicy, PaddedPolicy
    from vecenv.integrations.ray import transport as ray_transport

    puts: list[int] = []
    put = ray_transport.ray.put

    def counted(value: Any, **kw: Any) -> Any:
        if isinstance(value, bytes):  # weights (the buffer spec is put too, once: not counted here)
            puts.append(len(value))
        return put(value, **kw)

    monkeypatch.setattr(ray_transport.ray, "put", counted)
    fns = diff_env_fns(6, act_kind="discrete")
    with RayVectorEnv(fns, 2, on_worker_death="restart", actor_options=HALF_CPU) as envs:
        envs.reset(seed=0)
        for policy, large in ((ConstantPolicy(), False), (PaddedPolicy(), True)):
            assert (envs.rollout(2, policy).actions == 0).all()
            for action in (1, 2):
                policy.action = action
                envs.update_policy_weights()
                assert (envs.rollout(3, policy).actions == action).all(), (large, action)
        assert len(puts) == 2 and min(puts) >= OBJECT_STORE_WEIGHTS_BYTES, puts
        os.kill(envs.actor_pids[1], signal.SIGKILL)
        got = envs.rollout(4, policy)  # its first step is the restarted one where the death is seen
        assert envs.restart_count == 1 and (got.actions[1:] == 2).all() and (got.actions[:, :3] == 2).all()
        assert len(puts) == 2, "the replacement gets the object already put"
        policy.action = 1
        envs.update_policy_weights()
        assert (envs.rollout(3, policy).actions == 1).all() and len(puts) == 3


@pytest.mark.timeout(120)
def test_the_buffer_spec_is_pickled_once_for_every_actor_and_replacement(
    ray_local: RaySessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each actor's attach call holds the buffer spec, and with it the observation space (tens
    of MiB for a large image Box): it is pickled and put into Ray's object store once per
    vector env, not once per actor, and a replacement actor gets the same object; every actor
    still builds the rows it describes (the steps match Sync)."""
    from vecenv.wire.buffers import BufferSpec

    pickled = count_pickles(monkeypatch, BufferSpec)
    parent = os.getpid()
    fns = diff_env_fns(6, obs_kind="box", act_kind="discrete")
    sync = SyncVectorEnv(fns)
    try:
        with RayVectorEnv(fns, 2, on_worker_death="restart", actor_options=HALF_CPU) as envs:
            assert_same(envs.reset(seed=5), sync.reset(seed=5))
            assert pickled.count(parent) == 1, pickled
            os.kill(envs.actor_pids[1], signal.SIGKILL)
            actions = np.ones(6, np.int64)
            got, want = envs.step(actions), sync.step(actions)  # actor 1 is replaced and attached
            assert envs.restart_count == 1 and got[3][3:].all()
            assert_same([x[:3] for x in got[:4]], [x[:3] for x in want[:4]], "the other actor's rows")
            assert pickled.count(parent) == 1, "the replacement gets the object already put"
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_rollout_env_error_names_env_step_worker_and_node(ray_local: RaySessions) -> None:
    with RayVectorEnv(fault_fns(4, "raise", "step", target=2, at=3), 2) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="injected fault in step of env 2") as excinfo:
            envs.rollout(6)
        note = " ".join(excinfo.value.__notes__)
        node_ip = envs._transport.locations[1][1]
        assert f"env 2 (worker 1 on node {node_ip}" in note and "at step 2 of the rollout (steps 0..5)" in note
        with pytest.raises(NeedsResetError):
            envs.rollout(6)
        envs.reset(seed=0)
        assert envs.rollout(6).num_steps == 6


@pytest.mark.timeout(90)
@pytest.mark.parametrize("restart", [False, True], ids=["raise", "restart"])
def test_actor_killed_mid_rollout(ray_local: RaySessions, restart: bool, tmp_path: Path) -> None:
    fns = fault_fns(4, "exit", "step", target=3, at=4, once=str(tmp_path / "died"))
    options = {"on_worker_death": "restart"} if restart else {}
    envs = RayVectorEnv(fns, 2, actor_options=HALF_CPU, **options)
    try:
        envs.reset(seed=0)
        if not restart:
            with pytest.raises(WorkerDiedError, match=r"worker 1 \(envs 2\.\.3 on node .*during `rollout_wait`"):
                envs.rollout(8)
            return
        got = envs.rollout(8)
        assert envs.restart_count == 1
        assert got.truncations[0, 2:].all() and got.infos[0]["_worker_restarted"].tolist() == [False, False, True, True]
        with vecenv.SubprocVectorEnv(healthy_fns(2), 0) as twin:  # the other group, untouched (here)
            twin.reset(seed=0)
            theirs = twin.rollout(8)
        np.testing.assert_array_equal(got.observations[:, :2], theirs.observations)
        np.testing.assert_array_equal(got.rewards[:, :2], theirs.rewards)
    finally:
        envs.close()


# -- render(env_ids), seed policies and SB3 on the local Ray ----------------------------------


@pytest.mark.timeout(90)
def test_render_env_ids_asks_only_the_hosting_actors(ray_local: RaySessions) -> None:
    from tests.helpers.envs import frame_fns

    sync = SyncVectorEnv(frame_fns(5))
    try:
        with RayVectorEnv(frame_fns(5), 2) as envs:
            envs.reset(seed=2)
            sync.reset(seed=2)
            for _ in range(3):
                envs.step(np.ones(5, np.int64))
                sync.step(np.ones(5, np.int64))
            frames = envs.render(env_ids=[4, 0])
            assert_same(frames, (sync.envs[4].render(), sync.envs[0].render()))
            assert envs.get_attr("renders") == (1, 0, 0, 0, 1)
            with pytest.raises(ValueError, match=r"`env_ids` must lie in \[0, 5\), got unknown ids \[7\]"):
                envs.render(env_ids=[7])
    finally:
        sync.close()


@pytest.mark.timeout(90)
def test_seed_policy_spawn_gives_the_process_backends_seeds(ray_local: RaySessions) -> None:
    fns = diff_env_fns(5, obs_kind="box", act_kind="discrete")
    sync = SyncVectorEnv(fns)
    try:
        with RayVectorEnv(fns, 2, seed_policy="spawn") as envs:
            assert_same(envs.reset(seed=9), sync.reset(seed=vecenv.spawn_seeds(9, 5)))
            assert envs.np_random_seed == tuple(vecenv.spawn_seeds(9, 5))
            envs.async_reset(seed=10)
            obs, *_, env_ids = envs.recv()
            np.testing.assert_array_equal(obs, sync.reset(seed=vecenv.spawn_seeds(10, 5))[0][env_ids])
            assert envs.np_random_seed == tuple(vecenv.spawn_seeds(10, 5))
    finally:
        sync.close()


SB3_MISSING = "needs the sb3 extra: pip install -e '.[sb3]'"


def _sb3_or_skip() -> None:
    pytest.importorskip("stable_baselines3", reason=SB3_MISSING)


@pytest.mark.timeout(120)
def test_sb3_backend_ray_matches_dummy_vec_env(ray_local: RaySessions) -> None:
    _sb3_or_skip()
    from stable_baselines3.common.vec_env import DummyVecEnv

    from tests.integrations.test_sb3 import info_fns, run_differential
    from vecenv.sb3 import SubprocVecEnv

    ours = SubprocVecEnv(info_fns(dict_obs=True), num_workers=2, backend="ray")
    ref = DummyVecEnv(info_fns(dict_obs=True))
    try:
        assert isinstance(ours.vector_env, RayVectorEnv) and ours.num_workers == 2
        assert len({pid for pid, _, _ in ours.env_method("process_info")}) == 2, "two actors"
        assert run_differential(ours, ref, steps=30, seed=7, rewards_dtype_exact=False) >= 10
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(120)
def test_sb3_backend_ray_takes_spaces_whose_bounds_differ(ray_local: RaySessions) -> None:
    """As on processes: env 0's spaces, envs whose bounds differ accepted, ``DummyVecEnv``'s batches."""
    _sb3_or_skip()
    from tests.integrations.test_sb3 import loose_fns, run_loose_differential
    from vecenv.sb3 import SubprocVecEnv

    ours = SubprocVecEnv(loose_fns(), num_workers=2, backend="ray", actor_options=HALF_CPU)
    try:
        run_loose_differential(ours)
    finally:
        ours.close()


@pytest.mark.timeout(60)
def test_sb3_backend_ray_passes_the_vector_env_options_on(
    ray_local: RaySessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sb3_or_skip()
    import vecenv.integrations.ray.vector_env
    from tests.integrations.test_sb3 import info_fns
    from vecenv.sb3 import SubprocVecEnv

    given: dict = {}

    class Recording(RayVectorEnv):
        def __init__(self, *args, **kwargs) -> None:
            given.update(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(vecenv.integrations.ray.vector_env, "RayVectorEnv", Recording)
    options = {"on_worker_death": "restart", "max_restarts": 5, "restart_window": 9.0, "threads_per_worker": 2}
    ours = SubprocVecEnv(
        info_fns(2), num_workers=1, backend="ray", actor_options=HALF_CPU, seed_policy="spawn", **options
    )
    try:
        assert {k: given[k] for k in options} == options and given["actor_options"] == HALF_CPU
        assert given["address"] is None and given["autoreset_mode"] is AutoresetMode.SAME_STEP
        assert ours.vector_env.seed_policy == "spawn" and ours.seed(1) == vecenv.spawn_seeds(1, 2)
    finally:
        ours.close()


@pytest.mark.timeout(120)
def test_sb3_backend_ray_restarts_a_dead_actor(ray_local: RaySessions) -> None:
    _sb3_or_skip()
    from tests.integrations.test_sb3 import info_fns, restart_differential
    from vecenv.sb3 import SubprocVecEnv

    ours = SubprocVecEnv(
        info_fns(),
        num_workers=2,
        backend="ray",
        actor_options=HALF_CPU,
        on_worker_death="restart",
    )
    try:
        restart_differential(ours, 16, victim_env=0, group=[0, 1, 2])  # actor 0 hosts envs 0..2
    finally:
        ours.close()
