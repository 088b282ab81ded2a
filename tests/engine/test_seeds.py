"""``seed_policy="spawn"``: per-env seeds from ``SeedSequence(s).spawn(n)``, the same everywhere.

The documented formula is checked against NumPy directly; every backend and worker count must give
the envs the same seeds (``reset`` and ``async_reset``, and restarted workers), and the
trajectories must equal a ``SyncVectorEnv`` reset with the same per-env seeds. The default stays
``s + i``, exact with ``SyncVectorEnv``. The Ray backend's check is in ``tests/integrations/test_ray.py``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.engine.test_differential import assert_same, sample_actions
from tests.helpers.envs import CounterEnv, GlobalDrawsEnv, diff_env_fns, global_draws_seeded_in_constructor
from tests.helpers.faults import transport_of
from vecenv.seeding import SeedPolicy, derive_seed, restart_seed, seed_policy_of, spawn_seeds

#: (num_workers, inline_group): one worker, uneven groups, one per env, the parent only, the parent's group.
BACKENDS = [(1, False), (2, False), (3, False), (7, False), (0, False), (3, True)]


def test_spawn_seeds_are_the_first_word_of_each_spawned_child() -> None:
    for s in (0, 1, 12345, 2**40):
        children = np.random.SeedSequence(s).spawn(6)
        expected = [int(c.generate_state(1, dtype=np.uint64)[0]) >> 1 for c in children]
        assert spawn_seeds(s, 6) == expected
        assert vecenv.spawn_seeds(s, 6) == expected
        assert spawn_seeds(s, 3) == expected[:3], "env i's seed depends on s and i only"
        assert all(0 <= x < 2**63 for x in expected) and max(expected) >= 2**40
    assert restart_seed("spawn", 99, 2, 6) == derive_seed(99, 2)
    assert derive_seed(99, 2) == int(np.random.SeedSequence(99, spawn_key=(2,)).generate_state(1, np.uint64)[0]) >> 1
    assert restart_seed("sequential", 99, 2, 6) == 99 + 2 * 6


def test_a_sweep_of_runs_shares_no_env_seed_under_spawn_and_most_under_sequential() -> None:
    runs, n = 10, 4
    spawned = [spawn_seeds(s, n) for s in range(runs)]
    assert len({x for seeds in spawned for x in seeds}) == runs * n
    sequential = [[s + i for i in range(n)] for s in range(runs)]
    assert len({x for seeds in sequential for x in seeds}) == runs + n - 1


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("workers", "inline"), BACKENDS, ids=str)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_spawn_matches_sync_seeded_with_the_spawned_seeds(workers: int, inline: bool, mode: AutoresetMode) -> None:
    fns = diff_env_fns(7, obs_kind="box", act_kind="discrete")
    sync = SyncVectorEnv(fns, autoreset_mode=mode)
    rng = np.random.default_rng(2)
    try:
        with vecenv.SubprocVectorEnv(
            fns, workers, inline_group=inline, autoreset_mode=mode, seed_policy="spawn"
        ) as envs:
            assert envs.seed_policy == "spawn" and envs.seed_policy is SeedPolicy.SPAWN
            assert_same(envs.reset(seed=21), sync.reset(seed=spawn_seeds(21, 7)))
            assert envs.np_random_seed == tuple(spawn_seeds(21, 7))
            for t in range(40):
                actions = sample_actions(sync.single_action_space, 7, rng)
                assert_same(envs.step(actions), sync.step(actions), f"step {t}")
            # A list is used as given; None leaves the envs unseeded (their streams go on).
            assert_same(envs.reset(seed=list(range(7))), sync.reset(seed=list(range(7))))
            assert envs.np_random_seed == tuple(range(7))
            mask = np.array([True, False] * 3 + [True])
            assert_same(
                envs.reset(seed=5, options={"reset_mask": mask}),
                sync.reset(seed=spawn_seeds(5, 7), options={"reset_mask": mask.copy()}),
            )
    finally:
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("workers", "inline"), [(1, False), (3, False), (0, False)], ids=str)
def test_async_reset_spawns_the_same_seeds(workers: int, inline: bool) -> None:
    fns = diff_env_fns(6, obs_kind="box", act_kind="discrete")
    sync = SyncVectorEnv(fns)
    try:
        with vecenv.SubprocVectorEnv(fns, workers, inline_group=inline, seed_policy="spawn") as envs:
            envs.async_reset(seed=8)
            obs, *_, env_ids = envs.recv()
            want, _ = sync.reset(seed=spawn_seeds(8, 6))
            np.testing.assert_array_equal(obs, want[env_ids])
            assert envs.np_random_seed == tuple(spawn_seeds(8, 6))
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_default_stays_s_plus_i_and_bad_policies_are_refused() -> None:
    fns = diff_env_fns(3)
    with vecenv.SubprocVectorEnv(fns, 2) as envs:
        assert envs.seed_policy == "sequential"
        envs.reset(seed=4)
        assert envs.np_random_seed == (4, 5, 6)
    with vecenv.make("RolloutCounter-v0", 3, 0, seed_policy="spawn") as made:
        made.reset(seed=1)
        assert made.np_random_seed == tuple(spawn_seeds(1, 3)) and seed_policy_of(made) == "spawn"
    assert seed_policy_of(SyncVectorEnv(diff_env_fns(1))) == "sequential"
    for bad in ("Spawn", None, 1):
        with pytest.raises(ValueError, match=r"`seed_policy` must be one of 'sequential', 'spawn', got"):
            vecenv.SubprocVectorEnv(fns, 2, seed_policy=bad)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy", ["sequential", "spawn"])
def test_restarted_envs_derive_their_seeds_from_the_policy(policy: str) -> None:
    fns = diff_env_fns(4, obs_kind="box", act_kind="discrete")
    with vecenv.SubprocVectorEnv(fns, 2, on_worker_death="restart", context="fork", seed_policy=policy) as envs:
        envs.reset(seed=30)
        first = envs.np_random_seed
        process = transport_of(envs).processes[1]
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
        envs.step(np.zeros(4, np.int64))
        seeds = envs.np_random_seed
        assert seeds[:2] == first[:2]
        assert list(seeds[2:]) == [restart_seed(policy, s, 1, 4) for s in first[2:]]
        if policy == "spawn":
            assert list(first) == spawn_seeds(30, 4) and list(seeds[2:]) == [derive_seed(s, 1) for s in first[2:]]


@pytest.mark.timeout(60)
def test_the_collector_records_the_seed_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fns = [CounterEnv] * 3
    with vecenv.SubprocVectorEnv(fns, 2, seed_policy="spawn") as envs:
        dataset = vecenv.collect(envs, steps=12, seed=6, out=tmp_path / "spawn", progress=False)
    assert dataset.metadata["seed_policy"] == "spawn" and dataset.metadata["seed"] == 6
    assert json.loads((tmp_path / "spawn" / "metadata.json").read_text())["seed_policy"] == "spawn"
    sync = vecenv.collect(SyncVectorEnv(fns), steps=12, seed=6, out=tmp_path / "sync", progress=False)
    assert sync.metadata["seed_policy"] == "sequential"
    minari = pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    with vecenv.SubprocVectorEnv(fns, 2, seed_policy="spawn") as envs:
        vecenv.collect(envs, episodes=6, seed=6, format="minari", dataset_id="seeds/spawn-v0", progress=False)
    loaded = minari.load_dataset("seeds/spawn-v0")
    seeds = [m.get("seed") for m in loaded.storage.get_episode_metadata(range(loaded.total_episodes))]
    assert {int(s) for s in seeds if s is not None} <= set(spawn_seeds(6, 3))
    assert any(s is not None for s in seeds)


@pytest.mark.timeout(10)
def test_spawn_seeds_refuses_a_list_that_memory_cannot_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """At once, naming the size, instead of filling memory for hours."""
    with pytest.raises(vecenv.errors.MemoryLimitError, match=r"a list of 1180591620717411303424 seeds"):
        spawn_seeds(3, 2**70)
    monkeypatch.setattr(vecenv.seeding, "_CHECKED_FROM", 1)  # every list checked: one that fits is made
    assert spawn_seeds(3, 5) == [derive_seed(3, i) for i in range(5)]


def _global_draws(envs: vecenv.SubprocVectorEnv, seed: int) -> np.ndarray:
    """The observations of a seeded reset and two steps of :class:`GlobalDrawsEnv`s."""
    rows = [envs.reset(seed=seed)[0]]
    rows += [envs.step(np.zeros(envs.num_envs, np.int64))[0] for _ in range(2)]
    return np.stack(rows)


@pytest.mark.timeout(90)
def test_envs_drawing_from_the_global_generators_draw_apart_in_each_worker_and_follow_the_seed() -> None:
    # Forked workers started with copies of the parent's `np.random`: the envs of every worker
    # drew the same numbers; and no worker's generators followed `reset(seed=s)`, so a rerun with
    # the same seed drew other numbers (SyncVectorEnv's envs draw one stream, apart).
    runs = []
    for context in ("fork", "spawn"):
        with vecenv.SubprocVectorEnv([GlobalDrawsEnv] * 4, 2, context=context) as envs:
            first = _global_draws(envs, 5)
            for column, generator in enumerate(["np.random", "random"]):
                assert not np.array_equal(first[:, :2, column], first[:, 2:, column]), (
                    f"both workers drew one {generator}"
                )
            np.testing.assert_array_equal(_global_draws(envs, 5), first)
            assert not np.array_equal(_global_draws(envs, 6), first), "another seed, other numbers"
        runs.append(first)
    np.testing.assert_array_equal(runs[0], runs[1])  # the same for any start method


@pytest.mark.timeout(60)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_constructor_that_seeds_the_global_generators_keeps_its_seed(context: str) -> None:
    """The workers' fresh entropy comes before their envs are built: an env constructor that
    seeds ``np.random`` and ``random`` itself draws from that seed (an unseeded reset here)."""
    import random

    with vecenv.SubprocVectorEnv([global_draws_seeded_in_constructor] * 2, 2, context=context) as envs:
        obs, _ = envs.reset()
    expected = [np.random.RandomState(7).rand(), random.Random(7).random()]
    np.testing.assert_array_equal(obs, [expected, expected])
