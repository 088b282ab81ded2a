"""TorchRL over vecenv, against TorchRL over SyncVectorEnv, on real TorchRL.

``torchrl.envs.GymWrapper`` takes a Gymnasium ``VectorEnv`` whose autoreset mode is SAME_STEP or
DISABLED. Wrapped as a user would wrap it, vecenv must give the same rollout as SyncVectorEnv
(same seeds, same random actions from torch's generator), and so must a TorchRL collector. With
NEXT_STEP, TorchRL's own error names the modes to pass.

Skipped as a whole without TorchRL: install the ``torchrl`` extra.
"""

from __future__ import annotations

import functools
import multiprocessing
import warnings

import gymnasium as gym
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.helpers.envs import DictEndsAtEnv
from vecenv.errors import ClosedEnvironmentError

torch = pytest.importorskip("torch", reason="needs the torchrl extra: pip install -e '.[torchrl]'")
# Importing TorchRL sets multiprocessing's start method to "spawn" for the whole process (see
# docs/torchrl.md); pytest imports this module while collecting, so without putting the start
# method back every later test would start its workers with spawn.
_START_METHOD = multiprocessing.get_start_method(allow_none=True)
pytest.importorskip("torchrl", reason="needs the torchrl extra: pip install -e '.[torchrl]'")
with warnings.catch_warnings():
    # TorchRL 0.14 warns about its own deprecated class while importing its collectors.
    warnings.simplefilter("ignore", DeprecationWarning)
    from torchrl.collectors import Collector, MultiSyncCollector  # noqa: E402
from torchrl.envs import GymWrapper  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

multiprocessing.set_start_method(_START_METHOD, force=True)

MODES = [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
#: CartPole cut at 15 steps, so rollouts hold truncations as well as terminations.
ENV_FNS = [functools.partial(gym.make, "CartPole-v1", max_episode_steps=15)] * 4


#: Five envs over three workers (groups of 2, 2, 1), episodes of different lengths.
UNEVEN_FNS = {
    "pendulum": [functools.partial(gym.make, "Pendulum-v1", max_episode_steps=k) for k in range(5, 10)],
    "dict": [functools.partial(DictEndsAtEnv, length=k) for k in range(2, 7)],
}


def _assert_same(got, want) -> None:
    assert got.batch_size == want.batch_size
    assert set(got.keys(True, True)) == set(want.keys(True, True))
    for key in want.keys(True, True):
        assert got[key].dtype == want[key].dtype and got[key].device == want[key].device, key
        assert torch.equal(got[key], want[key]), key


def _pair(mode: AutoresetMode, **kwargs) -> tuple[GymWrapper, GymWrapper]:
    ours = GymWrapper(vecenv.SubprocVectorEnv(ENV_FNS, num_workers=2, autoreset_mode=mode, **kwargs))
    ref = GymWrapper(SyncVectorEnv(ENV_FNS, autoreset_mode=mode))
    return ours, ref


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_gym_wrapper_rollout_equals_sync(mode: AutoresetMode) -> None:
    ours, ref = _pair(mode)
    try:
        assert ours.batch_size == ref.batch_size == torch.Size([4])
        assert ours.observation_spec == ref.observation_spec and ours.action_spec == ref.action_spec
        rollouts = []
        for env in (ours, ref):
            env.set_seed(7)
            torch.manual_seed(0)
            rollouts.append(env.rollout(60, break_when_any_done=False))
        got, want = rollouts
        assert got.batch_size == want.batch_size == torch.Size([4, 60])
        assert set(got.keys(True, True)) == set(want.keys(True, True))
        for key in want.keys(True, True):
            assert torch.equal(got[key], want[key]), key
        assert want["next", "terminated"].any() and want["next", "truncated"].any()
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_collector_over_vecenv_equals_collector_over_sync(mode: AutoresetMode) -> None:
    ours, ref = _pair(mode)
    try:
        batches = []
        for env in (ours, ref):
            env.set_seed(3)
            torch.manual_seed(1)
            collector = Collector(env, policy=None, frames_per_batch=160, total_frames=480)
            batches.append([batch.clone() for batch in collector])
            collector.shutdown()  # the collector closed env on reaching total_frames already
        got, want = batches
        assert len(got) == len(want) == 3
        for k, (a, b) in enumerate(zip(got, want)):
            assert a.batch_size == b.batch_size == torch.Size([4, 40])
            for key in b.keys(True, True):
                assert torch.equal(a[key], b[key]), (k, key)
        assert sum(int(b["next", "done"].sum()) for b in want) > 4
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(120)
def test_a_collector_reaching_total_frames_closes_vecenv_as_docs_torchrl_md_says() -> None:
    """TorchRL's collector calls ``env.close()`` at ``total_frames``: vecenv's workers end there,
    and a later call is refused (a SyncVectorEnv, closed the same way, would go on stepping)."""
    envs = vecenv.SubprocVectorEnv(ENV_FNS, num_workers=2, autoreset_mode=AutoresetMode.DISABLED)
    env = GymWrapper(envs)
    try:
        collector = Collector(env, policy=None, frames_per_batch=40, total_frames=80)
        assert sum(batch.numel() for batch in collector) == 80
        assert envs.closed
        with pytest.raises(ClosedEnvironmentError, match="after a call to `close\\(\\)`"):
            env.rollout(5)
        collector.shutdown(close_env=False)  # cannot reopen it
        assert envs.closed
    finally:
        env.close()  # a second close is harmless


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_collecting_with_total_frames_minus_one_keeps_vecenv_open_and_equal_to_sync(mode: AutoresetMode) -> None:
    """The way docs/torchrl.md gives to use the env after a collector: leave the loop yourself and
    shut the collector down with ``close_env=False``; the env then goes on as over Sync."""
    ours, ref = _pair(mode)
    try:
        results = []
        for env in (ours, ref):
            env.set_seed(5)
            torch.manual_seed(2)
            collector = Collector(env, policy=None, frames_per_batch=40, total_frames=-1)
            batches = []
            for batch in collector:
                batches.append(batch.clone())
                if len(batches) == 2:
                    break
            collector.shutdown(close_env=False)
            results.append((batches, env.rollout(30, break_when_any_done=False)))
        assert not ours.is_closed
        (got_batches, got_rollout), (want_batches, want_rollout) = results
        for got, want in [*zip(got_batches, want_batches), (got_rollout, want_rollout)]:
            assert got.batch_size == want.batch_size
            for key in want.keys(True, True):
                assert torch.equal(got[key], want[key]), key
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("name", sorted(UNEVEN_FNS))
def test_uneven_groups_and_episodes_equal_sync_in_specs_rollouts_and_partial_resets(
    name: str, mode: AutoresetMode
) -> None:
    fns = UNEVEN_FNS[name]
    ours = GymWrapper(vecenv.SubprocVectorEnv(fns, num_workers=3, autoreset_mode=mode))
    ref = GymWrapper(SyncVectorEnv(fns, autoreset_mode=mode))
    try:
        assert ours.observation_spec == ref.observation_spec and ours.full_done_spec == ref.full_done_spec
        for env in (ours, ref):  # both: what it leaves behind (TorchRL's transform too) shapes the next reset
            check_env_specs(env, seed=1, break_when_any_done="both")
        for break_when_any_done in (False, True):
            rollouts = []
            for env in (ours, ref):
                env.set_seed(7)
                torch.manual_seed(0)
                rollouts.append(env.rollout(25, break_when_any_done=break_when_any_done))
            _assert_same(*rollouts)
        assert rollouts[1].batch_size[-1] < 25  # the break came before the end
        if mode is AutoresetMode.DISABLED:  # TorchRL refuses a partial reset of live envs in SAME_STEP
            resets = []
            for env in (ours, ref):
                env.set_seed(11)
                torch.manual_seed(0)
                env.rand_step(env.reset())
                mask = torch.tensor([True, False, True, False, True]).unsqueeze(-1)
                resets.append(env.reset(env.reset().empty().set("_reset", mask)))
            _assert_same(*resets)
    finally:
        ours.close()
        ref.close()


def _wrapped_vecenv() -> GymWrapper:
    """One MultiSyncCollector process's env: a vecenv of its own (module level: spawn pickles it)."""
    return GymWrapper(vecenv.SubprocVectorEnv(ENV_FNS, num_workers=1, autoreset_mode=AutoresetMode.SAME_STEP))


def _wrapped_sync() -> GymWrapper:
    return GymWrapper(SyncVectorEnv(ENV_FNS, autoreset_mode=AutoresetMode.SAME_STEP))


@pytest.mark.timeout(240)
def test_multi_sync_collector_over_vecenv_equals_it_over_sync() -> None:
    """docs/torchrl.md: each collector process builds its own vecenv (and its workers) from the
    constructor, and the batches hold what they hold over SyncVectorEnv. One collector of three
    processes, every one seeded alike (``static_seed``): two over vecenv, one over SyncVectorEnv,
    whose part of each batch the vecenvs' parts must equal (two runs of two processes each cost
    a fourth process, each importing TorchRL). The trajectory ids are left out: TorchRL numbers
    them in the order its processes reach an episode's end."""
    torch.manual_seed(0)
    makers = [_wrapped_vecenv, _wrapped_vecenv, _wrapped_sync]
    collector = MultiSyncCollector(makers, policy=None, frames_per_batch=120, total_frames=240, cat_results="stack")
    try:
        collector.set_seed(3, static_seed=True)
        batches = [batch.clone() for batch in collector]
    finally:
        collector.shutdown()
    assert len(batches) == 2
    for batch in batches:
        assert batch.batch_size == torch.Size([3, 4, 10])
        want = batch[2]
        for got in (batch[0], batch[1]):
            for key in want.keys(True, True):
                if key != ("collector", "traj_ids"):
                    assert torch.equal(got[key], want[key]), key
    assert sum(int(b[2]["next", "done"].sum()) for b in batches) > 0


def test_importing_torchrl_sets_the_spawn_start_method_which_vecenv_then_uses() -> None:
    """What docs/torchrl.md tells users: checked in a fresh interpreter, as a user's script."""
    import subprocess
    import sys

    code = (
        "import multiprocessing as mp, gymnasium as gym, torchrl, vecenv\n"
        "print(mp.get_start_method(allow_none=True))\n"
        "if __name__ == '__main__':\n"
        "    with vecenv.SubprocVectorEnv([lambda: gym.make('CartPole-v1')] * 2, 1) as envs:\n"
        "        print(envs.start_method)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["spawn", "spawn"]


@pytest.mark.timeout(60)
def test_next_step_is_refused_by_torchrl_naming_the_modes_to_pass() -> None:
    envs = vecenv.SubprocVectorEnv(ENV_FNS, num_workers=2)  # NEXT_STEP, the default
    try:
        with pytest.raises(RuntimeError) as excinfo:
            GymWrapper(envs)
        message = str(excinfo.value)
        assert "SAME_STEP" in message and "DISABLED" in message and "NEXT_STEP" in message
    finally:
        envs.close()


@pytest.mark.timeout(600)
def test_torchrl_collect_script_reports_every_run_and_vecenv_collects_syncs_data() -> None:
    """``scripts/torchrl_collect.py`` (docs/benchmarks.md) on tiny numbers: one table row per
    run, a positive rate in each, and vecenv's run collecting exactly what ``sync`` collects.
    Three of its runs, the two the ratios are taken to and vecenv's (each run is a fresh
    process that imports TorchRL: ~7 s each here)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "torchrl_collect.py"
    args = ["--frames", "200", "--num-envs", "2", "--steps-per-batch", "10", "--repeat", "1"]
    args += ["--runs", "vecenv,sync,parallel"]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 6 and cells[0] != "run":
            rows[cells[0]] = cells
    assert set(rows) == {"vecenv", "sync", "parallel"}, done.stdout
    for run, cells in rows.items():
        assert float(cells[1]) > 0, cells
        assert cells[5] == ("yes" if run in ("vecenv", "sync") else "-"), cells
    assert rows["sync"][2] == rows["parallel"][3] == "1.00"
