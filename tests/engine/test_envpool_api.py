"""The EnvPool-style API (``vecenv.parent.envpool_api``: async_reset / recv / send): exact per-env
trajectories, whole groups per batch, what a reset reports, misuse, faults."""

from __future__ import annotations

import functools
import multiprocessing
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array

import vecenv
from tests.engine.test_differential import assert_same
from tests.helpers.envs import DiffEnv, GateEnv, JitterEnv, PayEnv, fns
from tests.helpers.faults import healthy_fns
from vecenv import SubprocVectorEnv
from vecenv.parent.calls import CallRunner
from vecenv.parent.replies import InfoMerger

START_METHODS = [pytest.param(m, id=m) for m in ("fork", "forkserver", "spawn")]


def _row_info(infos: dict, row: int) -> dict:
    """The info of one row of Gymnasium's batched info dict."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        if not infos[f"_{key}"][row]:
            continue
        out[key] = _row_info(value, row) if isinstance(value, dict) else value[row]
    return out


def _assert_same(a, b):
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (a, b)
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), (a, b)
    else:
        assert type(a) is type(b) and a == b, (a, b)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next", "same"])
@pytest.mark.parametrize("context", START_METHODS)
def test_each_env_follows_its_sync_trajectory(context, mode):
    _follow_sync_trajectories(mode, context=context)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next", "same"])
def test_inline_group_follows_sync_trajectories(mode):
    """The parent's own group (inline_group) takes part in async batches like any worker's."""
    _follow_sync_trajectories(mode, context="fork", inline_group=True)


def _follow_sync_trajectories(mode, **kwargs):
    with vecenv.SubprocVectorEnv([JitterEnv] * 8, 4, batch_size=4, autoreset_mode=mode, **kwargs) as envs:
        follow_sync_trajectories(envs, mode, rounds=120)


def follow_sync_trajectories(envs: Any, mode: AutoresetMode, rounds: int, seed: int = 123) -> None:
    """Drive ``envs`` (8 JitterEnvs, batches of 4) through ``rounds`` of recv/send: every env's
    rows follow the trajectory of its own SyncVectorEnv, whichever groups finish first."""
    refs = [gym.vector.SyncVectorEnv([JitterEnv], autoreset_mode=mode) for _ in range(envs.num_envs)]
    expected = [ref.reset(seed=seed + i) for i, ref in enumerate(refs)]
    rng = np.random.default_rng(0)
    orders = set()
    try:
        envs.async_reset(seed=seed)
        first = True
        for _ in range(rounds):
            obs, rewards, terms, truncs, infos, env_ids = envs.recv(timeout=30)
            assert env_ids.dtype.kind == "i" and len(env_ids) == 4
            assert (np.diff(env_ids) > 0).all(), f"rows must come in env order, got {env_ids}"
            orders.add(tuple(env_ids))
            for row, i in enumerate(env_ids):
                if first or len(expected[i]) == 2:
                    ref_obs, ref_info = expected[i]
                    _assert_same(obs[row], ref_obs[0])
                else:
                    ref_obs, ref_rew, ref_term, ref_trunc, ref_info = expected[i]
                    _assert_same(obs[row], ref_obs[0])
                    assert rewards[row] == ref_rew[0] and terms[row] == ref_term[0] and truncs[row] == ref_trunc[0]
                _assert_same(_row_info(infos, row), _row_info(ref_info, 0))
            actions = rng.integers(0, 3, size=len(env_ids))
            for row, i in enumerate(env_ids):
                expected[i] = refs[i].step(actions[row : row + 1])
            envs.send(actions, env_ids)
            first = False
        assert len(orders) > 1, "the random step times should change which groups finish first"
    finally:
        for ref in refs:
            ref.close()


def _row(space: gym.Space, batch: Any, row: int) -> Any:
    """Row ``row`` of a batch of ``space`` (a Text batch is a tuple of strings, not a Tuple)."""
    if isinstance(space, gym.spaces.Dict):
        return {key: _row(sub, batch[key], row) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_row(sub, part, row) for sub, part in zip(space.spaces, batch))
    return batch[row]


def _info_row(infos: dict, row: int) -> dict:
    """The info of one row, values kept as batched (``_row_info`` without the type checks)."""
    return {
        key: _info_row(value, row) if isinstance(value, dict) else value[row]
        for key, value in infos.items()
        if not key.startswith("_") and infos[f"_{key}"][row]
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next", "same"])
@pytest.mark.parametrize(
    ("context", "obs_kind", "act_kind"),
    [
        pytest.param("fork", "dict", "box", id="fork-dict-box"),
        pytest.param("fork", "tuple_text", "multidiscrete", id="fork-tuple_text-multidiscrete"),
        pytest.param("forkserver", "dict", "box", id="forkserver-dict-box"),
        pytest.param("spawn", "box", "discrete", id="spawn-box-discrete"),
    ],
)
def test_any_interleaving_follows_sync_trajectories(
    context: str, obs_kind: str, act_kind: str, mode: AutoresetMode
) -> None:
    """Six workers of two envs, batches of four, episodes ending by termination and truncation:
    batches are held back and sent later in shuffled order, each with its ids shuffled; every
    row (observation, reward, flags, info, final observation) is its env's own SyncVectorEnv's."""
    # Even indices only: DiffEnv's "mixed" info is an int there, so its batched dtype does not
    # depend on which envs share a batch.
    env_fns = [
        functools.partial(DiffEnv, index=2 * i, obs_kind=obs_kind, act_kind=act_kind, p_trunc=0.1) for i in range(12)
    ]
    refs = [SyncVectorEnv([fn], autoreset_mode=mode) for fn in env_fns]
    expected: list[tuple] = [ref.reset(seed=7 + i) for i, ref in enumerate(refs)]
    space, space_obs = refs[0].single_action_space, refs[0].single_observation_space
    space.seed(0)
    rng = np.random.default_rng(0)
    held: list[np.ndarray] = []
    truncated = 0
    try:
        with SubprocVectorEnv(env_fns, 6, batch_size=4, autoreset_mode=mode, context=context) as envs:
            envs.async_reset(seed=7)
            for round_ in range(80):
                obs, rewards, terms, truncs, infos, ids = envs.recv(timeout=30)
                for row, i in enumerate(ids):
                    where = f"env {i}, round {round_}"
                    want = expected[i]
                    assert_same(_row(space_obs, obs, row), _row(space_obs, want[0], 0), f"{where}: obs")
                    assert_same(_info_row(infos, row), _info_row(want[-1], 0), f"{where}: infos", ordered=False)
                    if len(want) == 5:
                        assert (rewards[row], terms[row], truncs[row]) == (want[1][0], want[2][0], want[3][0]), where
                        truncated += int(truncs[row])
                held.append(ids)
                # Hold a batch back now and then; send whenever recv would run out of envs.
                if envs.num_envs - 4 * len(held) < 4 or rng.random() < 0.5:
                    rng.shuffle(held)
                    for ids in held:
                        order = rng.permutation(ids)
                        actions = [space.sample() for _ in order]
                        envs.send(concatenate(space, actions, create_empty_array(space, len(order))), order)
                        for action, i in zip(actions, order):
                            expected[i] = refs[i].step(concatenate(space, [action], create_empty_array(space, 1)))
                    held = []
        assert truncated > 0, "the test must cover truncations"
    finally:
        for ref in refs:
            ref.close()


@pytest.mark.timeout(60)
class TalkingEnv(PayEnv):
    """A :class:`PayEnv` whose every step has an info: its worker's reply goes through the pipe,
    never in the shared words."""

    def step(self, action: Any):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"t": self.t}


@pytest.mark.timeout(120)
def test_recv_hands_out_a_group_whose_replies_use_the_pipe_among_groups_whose_replies_use_the_words() -> None:
    """Three groups reply in the shared words, one on its pipe (its steps have infos). A learner
    that thinks a little between ``recv`` and ``send`` finds the three done at every ``recv``:
    their replies were taken without a look at the pipes, so the fourth group was never handed
    out (its envs never stepped). Every group now comes back, and soon."""
    env_fns = fns(PayEnv, 6) + [functools.partial(TalkingEnv, index=i) for i in (6, 7)]
    with SubprocVectorEnv(env_fns, 4, batch_size=2, context="fork") as envs:
        envs.async_reset(seed=0)
        last_seen = {group: 0 for group in range(4)}
        longest_gap = 0
        counts = np.zeros(8, np.int64)
        for k in range(1, 401):
            obs, rewards, terms, truncs, infos, env_ids = envs.recv(timeout=30)
            group = int(env_ids[0]) // 2
            longest_gap = max(longest_gap, k - last_seen[group])
            last_seen[group] = k
            counts[env_ids] += 1
            np.testing.assert_array_equal(obs[:, 0], env_ids)  # each row is its env's
            if group == 3 and counts[6] > 1:  # after its reset's batch: a step's
                assert "t" in infos, infos
            deadline = time.perf_counter() + 0.002  # the learner's inference, busy
            while time.perf_counter() < deadline:
                pass
            envs.send(np.zeros(2, np.int64), env_ids)
        assert (counts >= 40).all(), counts
        assert longest_gap <= 40, (longest_gap, counts)


def test_send_misuse_is_refused_and_changes_nothing():
    with vecenv.SubprocVectorEnv([JitterEnv] * 4, 2, batch_size=2, context="fork") as envs:
        envs.async_reset(seed=0)
        _, _, _, _, _, ids = envs.recv()
        other = np.setdiff1d(np.arange(4), ids)
        cases = [
            (other, ValueError, "still in flight"),
            (np.array([ids[0], ids[0]]), ValueError, "duplicated"),
            (np.array([ids[0], 9]), ValueError, "unknown ids [9]"),
            (ids[:1], ValueError, "whole groups"),
            (np.array([0.5, 1.5]), TypeError, "env_ids"),
        ]
        for bad_ids, error, text in cases:
            with pytest.raises(error, match=text.replace("[", r"\[").replace("]", r"\]")):
                envs.send(np.zeros(len(bad_ids), dtype=np.int64), bad_ids)
        with pytest.raises(ValueError, match=r"shape \(2,\) \(a row for each of the 2 envs, .*got shape \(3,\)"):
            envs.send(np.zeros(3, dtype=np.int64), ids)  # the 2 envs sent, not the vector env's 4
        envs.send(np.zeros(2, dtype=np.int64), ids)  # the correct call still works
        _, _, _, _, _, ids2 = envs.recv()
        assert len(ids2) == 2


@pytest.mark.timeout(60)
def test_mixing_step_with_recv_and_send_is_refused_naming_both_calls() -> None:
    """With envs in flight, the synchronous calls are refused (naming the call made and the one
    pending) and the batches go on; once ``step()`` has ended the batches, ``recv`` and ``send``
    ask for ``async_reset``."""
    with vecenv.SubprocVectorEnv([JitterEnv] * 4, 2, batch_size=2, context="fork") as envs:
        envs.async_reset(seed=0)
        *_, ids = envs.recv(timeout=10)  # the other group is still in flight
        refused = {
            "step_async": lambda: envs.step(np.zeros(4, np.int64)),
            "call_async": lambda: envs.call("max_delay"),
            "set_attr": lambda: envs.set_attr("max_delay", 0.0),
            "reset_async": lambda: envs.reset(options={"reset_mask": np.array([True, True, False, False])}),
        }
        for call, run in refused.items():
            with pytest.raises(gym.error.AlreadyPendingCallError, match=f"`{call}` while .* `recv`"):
                run()
        envs.send(np.zeros(2, np.int64), ids)
        assert sorted(np.concatenate([envs.recv(timeout=10)[-1] for _ in range(2)]).tolist()) == [0, 1, 2, 3]
        envs.step(np.zeros(4, np.int64))  # nothing in flight: step ends the batches
        assert envs.state is vecenv.State.DEFAULT
        with pytest.raises(gym.error.NoAsyncCallError, match="`recv` without .* `async_reset`"):
            envs.recv(timeout=1)
        with pytest.raises(gym.error.NoAsyncCallError, match="`send` without .* `async_reset`"):
            envs.send(np.zeros(2, np.int64), ids)


@pytest.mark.timeout(60)
def test_recv_without_envs_in_flight_raises_instead_of_hanging():
    with vecenv.SubprocVectorEnv([JitterEnv] * 4, 2, batch_size=2, context="fork") as envs:
        with pytest.raises(gym.error.NoAsyncCallError, match="async_reset"):
            envs.recv()
        envs.async_reset(seed=0)
        envs.recv()
        envs.recv()
        with pytest.raises(gym.error.NoAsyncCallError, match="send"):
            envs.recv()


@pytest.mark.timeout(60)
def test_recv_timeout_keeps_envs_in_flight(tmp_path):
    """A recv that times out while an env is in flight leaves it there: the next recv returns it,
    with the data SyncVectorEnv gives for that env."""
    gate = str(tmp_path / "gate")
    os.mkfifo(gate)
    fns = [functools.partial(JitterEnv, max_delay=0.0), functools.partial(GateEnv, gate)]
    sync = gym.vector.SyncVectorEnv([functools.partial(JitterEnv, max_delay=0.0)] * 2)
    with vecenv.SubprocVectorEnv(fns, 2, batch_size=1, context="fork") as envs:
        envs.async_reset(seed=0)
        sync.reset(seed=0)
        ids = sorted(int(envs.recv()[5][0]) for _ in range(2))
        assert ids == [0, 1]
        actions = np.array([1, 0])
        envs.send(actions[:1], [0])
        envs.send(actions[1:], [1])  # env 1 now waits at the gate
        assert envs.recv(timeout=10)[5].tolist() == [0]
        with pytest.raises(vecenv.VecEnvTimeoutError):
            envs.recv(timeout=0.2)  # env 1 is in flight and cannot finish
        with open(gate, "wb") as fifo:
            fifo.write(b"x")
        obs, rewards, terms, truncs, infos, env_ids = envs.recv(timeout=10)
        want = sync.step(actions)
        assert env_ids.tolist() == [1]
        np.testing.assert_array_equal(obs[0], want[0][1])
        assert rewards[0] == want[1][1] and terms[0] == want[2][1] and truncs[0] == want[3][1]
        with pytest.raises(gym.error.NoAsyncCallError):
            envs.recv(timeout=0.05)  # both envs are back: nothing is in flight
        envs.call("unwrapped")  # ... so synchronous calls are allowed again
    sync.close()


class _StepRaises(JitterEnv):
    def step(self, action):
        raise RuntimeError("boom in step")


@pytest.mark.timeout(60)
def test_env_error_and_close_with_envs_in_flight():
    fns = [JitterEnv, _StepRaises]
    with vecenv.SubprocVectorEnv(fns, 2, batch_size=1, context="fork") as envs:
        envs.async_reset(seed=0)
        with pytest.raises(RuntimeError, match="boom in step") as info:
            for _ in range(1000):  # env 1's first step raises; env 0 may come back first, often on a loaded machine
                _, _, _, _, _, ids = envs.recv()
                envs.send(np.zeros(1, dtype=np.int64), ids)
        assert any("env 1" in note for note in info.value.__notes__)
        with pytest.raises(vecenv.NeedsResetError):
            envs.recv()
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(60)
def test_a_full_reset_recovers_from_an_env_error_with_other_envs_in_flight(tmp_path):
    """Env 1 raises in a batch while env 0 is still in flight (at a gate): ``reset()`` drops
    env 0's step and resets every env, as errors.md promises; a partial reset is still refused."""
    gate = str(tmp_path / "gate")
    os.mkfifo(gate)
    with vecenv.SubprocVectorEnv([functools.partial(GateEnv, gate), _StepRaises], 2, batch_size=1) as envs:
        envs.async_reset(seed=0)
        # Both resets first, whichever comes first: a step sent to env 1 before env 0's reset was
        # received could raise in that recv instead of the one below.
        resets = [envs.recv(timeout=10)[5] for _ in range(2)]
        for ids in resets:
            envs.send(np.zeros(1, dtype=np.int64), ids)  # env 0 now waits at the gate; env 1 raises
        with pytest.raises(RuntimeError, match="boom in step"):
            envs.recv(timeout=10)
        with pytest.raises(vecenv.NeedsResetError, match="async_reset"):
            envs.recv()
        with pytest.raises(gym.error.AlreadyPendingCallError, match="recv"):
            envs.reset(options={"reset_mask": np.array([True, False])})
        with open(gate, "wb") as fifo:  # env 0's step may finish before or after the reset is sent
            fifo.write(b"x")
        obs, _ = envs.reset(seed=5)
        sync = gym.vector.SyncVectorEnv([functools.partial(JitterEnv, max_delay=0.0)] * 2)
        np.testing.assert_array_equal(obs, sync.reset(seed=5)[0])
        sync.close()
        assert envs.state is vecenv.State.DEFAULT
        envs.async_reset(seed=0)  # and the batches start again
        assert len(envs.recv(timeout=10)[5]) == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("batch_size", [2, 4], ids=lambda b: f"batch={b}")
def test_calls_that_step_nothing_between_recv_and_send_keep_the_batches(batch_size: int) -> None:
    """With no env in flight, get_attr, call and set_attr may run between a ``recv`` and its
    ``send``; the batches go on after them, each env exactly as without them."""

    def rows(batches: list[tuple]) -> dict[int, np.ndarray]:
        return {int(i): obs[k] for obs, *_, ids in batches for k, i in enumerate(ids)}

    jitter_free = functools.partial(JitterEnv, max_delay=0.0)
    with (
        vecenv.SubprocVectorEnv([jitter_free] * 4, 2, batch_size=batch_size) as envs,
        vecenv.SubprocVectorEnv([jitter_free] * 4, 2, batch_size=batch_size) as plain,
    ):
        envs.async_reset(seed=3)
        plain.async_reset(seed=3)
        for round_ in range(6):
            got = [envs.recv(timeout=10) for _ in range(4 // batch_size)]
            want = [plain.recv(timeout=10) for _ in range(4 // batch_size)]
            assert envs.get_attr("max_delay") == (0.0,) * 4
            assert envs.call("max_delay") == (0.0,) * 4
            envs.set_attr("max_delay", [0.0] * 4)
            assert envs.state is vecenv.State.WAITING_RECV
            got_rows, want_rows = rows(got), rows(want)
            assert sorted(got_rows) == sorted(want_rows) == [0, 1, 2, 3]
            for i in range(4):
                np.testing.assert_array_equal(got_rows[i], want_rows[i], err_msg=f"env {i}, round {round_}")
            for batches, vector in ((got, envs), (want, plain)):
                for *_, ids in batches:
                    vector.send((ids + round_) % 3, ids)


class _WaitsAtGate(JitterEnv):
    def wait_at(self, gate: str) -> bool:
        """Return once the test writes a byte to the FIFO ``gate``."""
        with open(gate, "rb") as fifo:
            return fifo.read(1) == b"x"


@pytest.mark.timeout(60)
def test_send_after_a_call_that_timed_out_between_recv_and_send(tmp_path: Any) -> None:
    """A call that times out between ``recv`` and ``send`` leaves its worker owing a reply
    nobody wants (LATE), not in flight: ``send`` steps its envs (the step queues behind the
    call, whose reply is dropped), as ``step()`` does after such a call."""
    gate = str(tmp_path / "gate")
    os.mkfifo(gate)
    jitter_free = functools.partial(_WaitsAtGate, max_delay=0.0)
    sync = SyncVectorEnv([jitter_free])
    with vecenv.SubprocVectorEnv([jitter_free], 1, batch_size=1, context="fork") as envs:
        envs.async_reset(seed=4)
        sync.reset(seed=4)
        assert envs.recv(timeout=10)[5].tolist() == [0]
        envs.call_async("wait_at", gate)
        with pytest.raises(vecenv.VecEnvTimeoutError):
            envs.call_wait(timeout=0.2)  # the env waits at the gate
        assert envs.state is vecenv.State.WAITING_RECV
        envs.send(np.array([2]), np.array([0]))
        with open(gate, "wb") as fifo:
            fifo.write(b"x")
        obs, rewards, terms, truncs, _, env_ids = envs.recv(timeout=10)
        want_obs, want_rewards, want_terms, want_truncs, _ = sync.step(np.array([2]))
        assert env_ids.tolist() == [0]
        np.testing.assert_array_equal(obs, want_obs)
        np.testing.assert_array_equal(rewards, want_rewards)
        assert terms.tolist() == want_terms.tolist() and truncs.tolist() == want_truncs.tolist()
    sync.close()


@pytest.mark.timeout(60)
def test_batch_size_must_be_a_multiple_of_the_group_size():
    with pytest.raises(ValueError, match="batch_size"):
        vecenv.SubprocVectorEnv([JitterEnv] * 4, 2, batch_size=3, context="fork")
    assert multiprocessing.active_children() == []


# -- batches of whole groups; what async_reset reports; bad input --------------------------------


@pytest.mark.timeout(60)
def test_ctrl_c_while_recv_waits_keeps_the_envs_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl+C while ``recv`` waits (before it took any group) hands nothing out and loses
    nothing: the next ``recv`` returns the envs, with SyncVectorEnv's data."""
    real = CallRunner.wait

    def wait(self: CallRunner, *args: Any) -> Any:
        monkeypatch.setattr(CallRunner, "wait", real)  # once
        raise KeyboardInterrupt

    jitter_free = functools.partial(JitterEnv, max_delay=0.0)
    sync = SyncVectorEnv([jitter_free] * 2)
    with vecenv.SubprocVectorEnv([jitter_free] * 2, 2, context="fork") as envs:
        monkeypatch.setattr(CallRunner, "wait", wait)
        envs.async_reset(seed=1)
        with pytest.raises(KeyboardInterrupt):
            envs.recv(timeout=10)
        assert envs.state is vecenv.State.WAITING_RECV
        obs, *_, ids = envs.recv(timeout=10)
        assert ids.tolist() == [0, 1]
        np.testing.assert_array_equal(obs, sync.reset(seed=1)[0])
    sync.close()


@pytest.mark.timeout(60)
def test_default_batch_is_every_env_with_uneven_groups() -> None:
    envs = vecenv.make("CartPole-v1", num_envs=10, num_workers=3)  # groups 4/3/3
    sync = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 10)
    try:
        envs.async_reset(seed=0)
        obs, rewards, terms, truncs, infos, ids = envs.recv(timeout=30)
        assert obs.shape == (10, 4) and rewards.shape == (10,) and len(ids) == 10
        assert sorted(ids.tolist()) == list(range(10))
        sync_obs, _ = sync.reset(seed=0)
        np.testing.assert_array_equal(obs, sync_obs[ids])
        actions = np.ones(10, np.int64)
        envs.send(actions[ids], ids)
        obs, rewards, terms, truncs, infos, ids = envs.recv(timeout=30)
        assert len(ids) == 10
        sync_obs, sync_rewards, *_ = sync.step(actions)
        np.testing.assert_array_equal(obs, sync_obs[ids])
        np.testing.assert_array_equal(rewards, sync_rewards[ids])
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
def test_a_batch_of_every_env_is_exactly_what_step_returns(tmp_path: Any) -> None:
    """With batch_size == num_envs, ``recv`` is the synchronous path: rows in env order, the
    same arrays and infos as ``step()``, even when the first group replies last."""
    gate = str(tmp_path / "gate")
    os.mkfifo(gate)
    jitter_free = functools.partial(JitterEnv, max_delay=0.0)
    sync = SyncVectorEnv([jitter_free] * 4)
    with vecenv.SubprocVectorEnv([functools.partial(GateEnv, gate)] + [jitter_free] * 3, 2, context="fork") as envs:
        assert envs.batch_size == 4
        envs.async_reset(seed=9)
        obs, rewards, terms, truncs, infos, ids = envs.recv(timeout=10)
        want_obs, want_infos = sync.reset(seed=9)
        assert ids.tolist() == [0, 1, 2, 3]
        np.testing.assert_array_equal(obs, want_obs)
        _assert_same(infos, want_infos)
        actions = np.array([2, 1, 0, 1])
        envs.send(actions, ids)
        # Worker 0 (envs 0-1) waits at the gate, so worker 1 (envs 2-3) replies first.
        with pytest.raises(vecenv.VecEnvTimeoutError):
            envs.recv(timeout=1.0)
        with open(gate, "wb") as fifo:
            fifo.write(b"x")
        obs, rewards, terms, truncs, infos, ids = envs.recv(timeout=10)
        want = sync.step(actions)
        assert ids.tolist() == [0, 1, 2, 3]
        for got, expected in zip((obs, rewards, terms, truncs, infos), want):
            _assert_same(got, expected)
    sync.close()


@pytest.mark.timeout(60)
def test_batch_size_that_groups_cannot_add_up_to_is_refused(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"batch_size.*\[4, 3, 3\]") as info:
        vecenv.make("CartPole-v1", num_envs=10, num_workers=3, batch_size=7)
    assert "7" in str(info.value)
    # At construction, before any env is built (each FaultEnv writes its pid file when built).
    with pytest.raises(ValueError, match=r"\[4, 3, 3\]"):
        SubprocVectorEnv(healthy_fns(10, pid_dir=str(tmp_path)), num_workers=3, batch_size=7)
    assert os.listdir(tmp_path) == []
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_async_reset_reports_zero_rewards_and_clear_flags(mode: AutoresetMode) -> None:
    envs = SubprocVectorEnv(fns(PayEnv, 4, horizon=2), num_workers=2, autoreset_mode=mode)
    try:
        envs.async_reset(seed=0)
        *_, ids = envs.recv(timeout=30)
        for _ in range(2):
            envs.send(np.zeros(len(ids), np.int64), ids)
            _, rewards, terms, truncs, _, ids = envs.recv(timeout=30)
            assert (rewards == 7.0).all()
        assert truncs.all()  # the episodes ended on that step
        envs.async_reset(seed=1)
        _, rewards, terms, truncs, _, ids = envs.recv(timeout=30)
        assert sorted(ids.tolist()) == [0, 1, 2, 3]
        np.testing.assert_array_equal(rewards, np.zeros(4))
        assert not terms.any() and not truncs.any()
    finally:
        envs.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "bad",
    [
        {"seed": -1},
        {"seed": [0, 1]},  # not one seed per env
        {"options": "x"},
        {"options": {"reset_mask": np.ones(4, np.bool_)}},  # async_reset resets every env
    ],
    ids=["seed=-1", "seed-count", "options-str", "reset_mask"],
)
def test_bad_async_reset_keeps_the_envs_in_flight(bad: dict[str, Any]) -> None:
    envs = SubprocVectorEnv(healthy_fns(4), num_workers=2)
    sync = SyncVectorEnv(healthy_fns(4))
    try:
        envs.async_reset(seed=0)
        obs, *_, ids = envs.recv(timeout=30)
        sync_obs, _ = sync.reset(seed=0)
        np.testing.assert_array_equal(obs, sync_obs[ids])
        actions = np.full((4, 2), 0.5, np.float32)
        envs.send(actions[ids], ids)
        with pytest.raises((ValueError, TypeError)):
            envs.async_reset(**bad)
        obs, rewards, terms, truncs, _, ids = envs.recv(timeout=30)
        sync_obs, sync_rewards, sync_terms, sync_truncs, _ = sync.step(actions)
        assert sorted(ids.tolist()) == [0, 1, 2, 3]
        np.testing.assert_array_equal(obs, sync_obs[ids])
        np.testing.assert_array_equal(rewards, sync_rewards[ids])
        np.testing.assert_array_equal(terms, sync_terms[ids])
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, ValueError], ids=lambda e: e.__name__)
def test_recv_cut_short_after_taking_groups_refuses_the_next_recv_until_async_reset(
    raised: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``recv`` cut short once it took its groups (a signal handler's SystemExit, Ctrl+C, an
    info that cannot be batched) never hands out their ids, so they can never be sent: the
    next ``recv`` must say so rather than carry on without those envs, and ``async_reset``
    brings every env back."""
    real = InfoMerger.merge

    def merge(self: InfoMerger, *args: Any) -> Any:
        monkeypatch.setattr(InfoMerger, "merge", real)  # once
        raise raised("cut")

    with vecenv.SubprocVectorEnv([JitterEnv] * 4, 4, batch_size=2, context="fork") as envs:
        envs.async_reset(seed=0)
        monkeypatch.setattr(InfoMerger, "merge", merge)
        with pytest.raises(raised, match="cut"):
            envs.recv()
        with pytest.raises(vecenv.NeedsResetError, match=r"`recv` .*\(" + raised.__name__ + r"\).*async_reset\(\)"):
            envs.recv(timeout=10)
        with pytest.raises(vecenv.NeedsResetError, match="async_reset"):
            envs.send(np.zeros(2, np.int64), np.arange(2))
        envs.async_reset(seed=1)
        seen = [envs.recv(timeout=10)[-1] for _ in range(2)]
        assert sorted(np.concatenate(seen).tolist()) == [0, 1, 2, 3]
