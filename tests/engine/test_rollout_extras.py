"""What a policy in the workers gives beyond actions: extras, recurrent state, weights versions.

The reference is a plain loop over ``gymnasium.vector.SyncVectorEnv`` (under DISABLED, each env
on its own, left alone once its episode ended, as a rollout leaves it) that calls the same
policy row by row with each env's own state, and resets an env's state to the initial one at
the steps where Gymnasium makes its observation the first of an episode: after ``reset()``,
after the autoreset step (NEXT_STEP: ``SyncVectorEnv._autoreset_envs`` before the step;
SAME_STEP: where the step reports ``final_obs``), and never after a step under DISABLED.
"""

from __future__ import annotations

import collections
import functools
import os
import signal
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.helpers.envs import diff_env_fns, make_group, sync_group
from tests.helpers.faults import fault_fns, healthy_fns, transport_of
from vecenv.errors import PolicyOutputError
from vecenv.policies import FunctionPolicy

MODES = [pytest.param(m, id=m.value) for m in AutoresetMode]
N = 6
SEED = 11


class Recurrent:
    """A row-wise recurrent numpy policy: each row's output depends only on its row and its
    state (elementwise operations and row sums only, so any batching gives the same bits)."""

    def __init__(self, kind: str = "discrete", extras: bool = True) -> None:
        self.kind, self.extras = kind, extras

    def initial_state(self, n: int) -> Any:
        return (np.full((n, 2), 0.25), {"count": np.zeros(n, np.int64)})

    def __call__(self, observations: Any, state: Any) -> Any:
        h, d = state
        x = np.asarray(observations, np.float64).sum(axis=1)
        h = np.tanh(0.5 * h + x[:, None] * np.array([1.0, -0.5]))
        count = d["count"] + 1
        if self.kind == "discrete":
            actions = ((h[:, 0] > 0).astype(np.int64) + count) % 4
        else:
            actions = np.stack([h[:, 0], np.cos(count)], axis=1).astype(np.float32)
        extras = {"value": h[:, 1].astype(np.float32), "logits": np.stack([h[:, 0], -h[:, 0]], axis=1)}
        return actions, (extras if self.extras else {}), (h, {"count": count})


def with_extras(observations: Any) -> Any:
    """Row-wise, not recurrent: actions and two extras."""
    x = np.asarray(observations, np.float64).sum(axis=1)
    return (np.abs(x * 4).astype(np.int64) % 4), {"log_prob": (-np.abs(x)).astype(np.float32), "value": x}


def state_row(state: Any, i: int) -> Any:
    h, d = state
    return (h[i : i + 1], {"count": d["count"][i : i + 1]})


def join_rows(rows: list[Any]) -> Any:
    return (np.concatenate([r[0] for r in rows]), {"count": np.concatenate([r[1]["count"] for r in rows])})


class Reference:
    """SyncVectorEnv (or single envs under DISABLED) driven by the same calls as the vector env,
    with the policy called row-wise and each env's state kept and reset here."""

    def __init__(self, fns: list[Callable[[], gym.Env]], mode: AutoresetMode, policy: Recurrent) -> None:
        self.mode, self.policy, self.n = mode, policy, len(fns)
        self.disabled = mode is AutoresetMode.DISABLED
        self.sync = None if self.disabled else SyncVectorEnv(fns, autoreset_mode=mode)
        self.envs = [fn() for fn in fns] if self.disabled else []
        self.states = [policy.initial_state(1) for _ in range(self.n)]
        self.starts = np.ones(self.n, bool)
        self.ended = np.zeros(self.n, bool)
        self.obs: np.ndarray = np.zeros(0)

    def close(self) -> None:
        if self.sync is not None:
            self.sync.close()
        for env in self.envs:
            env.close()

    def _restart(self, mask: np.ndarray) -> None:
        for i in np.flatnonzero(mask):
            self.states[i] = self.policy.initial_state(1)

    def reset(self, seed: int | None = None, mask: np.ndarray | None = None) -> None:
        mask = np.ones(self.n, bool) if mask is None else mask
        if self.sync is not None:
            options = None if mask.all() else {"reset_mask": mask}
            self.obs, _ = self.sync.reset(seed=seed, options=options)
        else:
            obs = list(self.obs) if len(self.obs) else [None] * self.n
            for i in np.flatnonzero(mask):
                obs[i] = self.envs[i].reset(seed=None if seed is None else seed + int(i))[0]
            self.obs = np.stack(obs)
            self.ended[mask] = False
        self.starts[mask] = True
        self._restart(mask)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.sync is not None:
            autoreset = self.sync._autoreset_envs.copy()
            self.obs, rewards, terms, truncs, infos = self.sync.step(actions)
            if self.mode is AutoresetMode.NEXT_STEP:
                self.starts = autoreset
            else:
                self.starts = infos.get("_final_obs", np.zeros(self.n, bool)).copy()
        else:  # DISABLED: an ended env is left alone (a rollout leaves it unstepped)
            rewards, terms, truncs = np.zeros(self.n), np.zeros(self.n, bool), np.zeros(self.n, bool)
            obs = list(self.obs)
            for i, env in enumerate(self.envs):
                if not self.ended[i]:
                    obs[i], rewards[i], terms[i], truncs[i], _ = env.step(actions[i])
            self.obs = np.stack(obs)
            self.ended |= terms | truncs
            self.starts[:] = False
        self._restart(self.starts)
        return terms, truncs

    def rollout(self, steps: int) -> dict[str, Any]:
        seen: dict[str, list] = {"actions": [], "value": [], "logits": [], "episode_starts": [], "stepped": []}
        initial = join_rows(self.states)
        for _ in range(steps):
            seen["episode_starts"].append(self.starts.copy())
            active = ~self.ended if self.disabled else np.ones(self.n, bool)
            outs = [self.policy(self.obs[i : i + 1], self.states[i]) for i in range(self.n)]
            actions = np.concatenate([o[0] for o in outs])
            for key in ("value", "logits"):
                values = np.concatenate([o[1][key] for o in outs])
                values[~active] = 0
                seen[key].append(values)
            for i, o in enumerate(outs):
                if active[i]:
                    self.states[i] = o[2]
            seen["actions"].append(actions)
            seen["stepped"].append(active)
            self.step(actions)
        out = {k: np.stack(v) for k, v in seen.items()}
        out["initial_state"] = initial
        return out


def make(fns: list, workers: int | str, mode: AutoresetMode = AutoresetMode.NEXT_STEP, **kwargs: Any) -> Any:
    inline = workers == "inline"
    return vecenv.SubprocVectorEnv(
        fns, 2 if inline else workers, autoreset_mode=mode, context="fork", inline_group=inline, **kwargs
    )


def assert_state_equal(got: Any, want: Any, where: str) -> None:
    np.testing.assert_array_equal(got[0], want[0], err_msg=f"{where}: h")
    np.testing.assert_array_equal(got[1]["count"], want[1]["count"], err_msg=f"{where}: count")


def assert_rollout_matches(got: vecenv.Rollout, want: dict[str, Any], where: str) -> None:
    stepped = want["stepped"]
    np.testing.assert_array_equal(got.episode_starts, want["episode_starts"], err_msg=f"{where}: episode_starts")
    np.testing.assert_array_equal(got.actions[stepped], want["actions"][stepped], err_msg=f"{where}: actions")
    for key in ("value", "logits"):
        np.testing.assert_array_equal(got.extras[key], want[key], err_msg=f"{where}: extras[{key}]")
    assert got.extras["value"].dtype == np.float32 and got.extras["logits"].shape == (got.num_steps, N, 2)
    assert_state_equal(got.initial_state, want["initial_state"], f"{where}: initial_state")


# -- differential: every mode, every worker count, mixed with step and reset ---------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("workers", "mode"),
    # The parent-hosted group is the same engine: one mode suffices for it.
    [pytest.param(w, m, id=f"w={w}-{m.value}") for w in (0, 1, 2, 3) for m in AutoresetMode]
    + [pytest.param("inline", AutoresetMode.SAME_STEP, id="w=inline-SameStep")],
)
def test_extras_and_state_match_a_row_wise_loop_over_sync(workers: int | str, mode: AutoresetMode) -> None:
    fns = diff_env_fns(N)
    policy = Recurrent()
    ref = Reference(fns, mode, policy)
    try:
        with make(fns, workers, mode) as envs:
            envs.reset(seed=SEED)
            ref.reset(seed=SEED)
            # T from 1 to longer than an episode (DiffEnv episodes last at most 40 steps).
            for i, steps in enumerate((1, 3, 45)):
                if mode is AutoresetMode.DISABLED and ref.ended.any():  # as before a step
                    mask = ref.ended.copy()
                    envs.reset(options={"reset_mask": mask})
                    ref.reset(mask=mask)
                got = envs.rollout(steps, policy)
                assert_rollout_matches(got, ref.rollout(steps), f"rollout {i} (T={steps})")
            crossed = (~got.stepped).any() if mode is AutoresetMode.DISABLED else got.episode_starts[1:].any()
            assert crossed, "the rollout crossed episode boundaries"
            # Steps between rollouts move the envs (and reset the state at episode starts).
            if mode is not AutoresetMode.DISABLED:
                for t in range(7):
                    actions = np.full(N, t % 4)
                    envs.step(actions)
                    ref.step(actions)
            mask = np.array([True, False, True, False, False, True]) | ref.ended
            envs.reset(options={"reset_mask": mask})
            ref.reset(mask=mask)
            assert_state_equal(envs.policy_state(), join_rows(ref.states), "policy_state after a masked reset")
            got = envs.rollout(30, policy)
            assert_rollout_matches(got, ref.rollout(30), "after steps and a masked reset")
    finally:
        ref.close()


@pytest.mark.timeout(60)
def test_extras_of_a_plain_callable_are_recorded_without_state() -> None:
    with make(diff_env_fns(N), 2) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(20, with_extras)
        assert got.initial_state is None and set(got.extras) == {"log_prob", "value"}
        x = got.observations.astype(np.float64).sum(axis=2)
        np.testing.assert_array_equal(got.extras["value"], x)
        np.testing.assert_array_equal(got.extras["log_prob"], (-np.abs(x)).astype(np.float32))
        assert got.extras["log_prob"].dtype == np.float32 and got.extras["value"].dtype == np.float64
        # A policy without extras after one with them: the block follows the policy.
        assert envs.rollout(5, "random").extras == {}
        with pytest.raises(ValueError, match="needs a recurrent policy"):
            envs.policy_state()


def _listed_extras_module(recurrent: bool) -> Any:
    """A torch module returning ``[actions, extras]`` (``[actions, extras, state]`` when
    ``recurrent``): lists, as a ``forward`` may build its output."""
    torch = pytest.importorskip("torch")

    class Listed(torch.nn.Module):
        def forward(self, obs: Any) -> Any:
            x = obs.double().sum(dim=1)
            return [(x.abs() * 4).long() % 4, {"value": x}]

    class ListedRecurrent(Listed):
        def initial_state(self, n: int) -> Any:
            return [torch.zeros(n)]

        def forward(self, obs: Any, state: Any) -> Any:  # type: ignore[override]
            return [*super().forward(obs), [state[0] + 1]]

    return ListedRecurrent() if recurrent else Listed()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["callable", "torch", "recurrent torch"])
def test_a_list_of_actions_and_extras_is_split_as_the_tuple_is(kind: str) -> None:
    """``[actions, extras]`` gives the same actions and extras as ``(actions, extras)``."""

    def listed(observations: Any) -> Any:
        return list(with_extras(observations))

    policy = listed if kind == "callable" else _listed_extras_module(kind == "recurrent torch")
    with make(diff_env_fns(4), 2) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(5, policy)
        assert set(got.extras) == ({"log_prob", "value"} if kind == "callable" else {"value"})
        x = got.observations.astype(np.float64).sum(axis=2)
        np.testing.assert_array_equal(got.extras["value"], x)
        np.testing.assert_array_equal(got.actions, np.abs(x * 4).astype(np.int64) % 4)
        if kind == "recurrent torch":
            np.testing.assert_array_equal(envs.policy_state()[0], np.full(4, 5.0, np.float32))


class PairShapedActionsEnv(gym.Env):
    """Actions of a Tuple space whose batch is itself a 2-tuple ending in a mapping, as
    ``(actions, extras)`` is; the observation counts the steps and holds the last action."""

    observation_space = gym.spaces.Box(0, 100, (4,), np.float32)
    action_space = gym.spaces.Tuple(
        (
            gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3))),
            gym.spaces.Dict({"k": gym.spaces.Discrete(4)}),
        )
    )

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> Any:
        assert self.action_space.contains(action), action
        (a, b), d = action
        self.t += 1
        return np.array([self.t, a, b, d["k"]], np.float32), 1.0, False, self.t >= 5, {}


def pair_shaped_actions(observations: Any) -> Any:
    """A row-wise batch of :class:`PairShapedActionsEnv`'s actions, from the step count."""
    t = np.asarray(observations)[:, 0].astype(np.int64)
    return ((t % 2, t % 3), {"k": t % 4})


def pair_shaped_actions_and_extras(observations: Any) -> Any:
    return pair_shaped_actions(observations), {"value": np.asarray(observations)[:, 0] * 2}


@pytest.mark.timeout(60)
def test_actions_shaped_as_a_pair_are_actions_and_the_pair_of_them_with_extras_is_split() -> None:
    """For a Tuple action space ``(Tuple, Dict)`` a batch of actions is a 2-tuple whose second
    item is a mapping, as ``(actions, extras)`` is: the policy's actions alone are the actions
    (as ``step`` takes them), and ``(actions, extras)`` is the pair, both giving the steps a
    plain loop gives."""
    fns = [PairShapedActionsEnv] * 3
    with make(fns, 2) as envs:
        envs.reset(seed=SEED)
        bare = envs.rollout(7, pair_shaped_actions)
        assert bare.extras == {}
        envs.reset(seed=SEED)
        paired = envs.rollout(7, pair_shaped_actions_and_extras)
        assert set(paired.extras) == {"value"}
    sync = SyncVectorEnv(fns)
    try:
        obs, _ = sync.reset(seed=SEED)
        for t in range(7):
            for got in (bare, paired):
                np.testing.assert_array_equal(got.observations[t], obs, err_msg=f"step {t}")
            np.testing.assert_array_equal(paired.extras["value"][t], obs[:, 0] * 2)
            obs = sync.step(pair_shaped_actions(obs))[0]
        (a, b), d = bare.actions
        np.testing.assert_array_equal(a[:, 0], np.array([0, 1, 0, 1, 0, 1, 0]))  # t = 0-5, then the reset's 0
        np.testing.assert_array_equal(d["k"], paired.actions[1]["k"])
    finally:
        sync.close()


# -- the state: read, set, across restarts -------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_parent_reads_and_sets_the_state() -> None:
    policy = Recurrent()
    with make(diff_env_fns(N), 2) as envs:
        envs.reset(seed=SEED)
        first = envs.rollout(5, policy)
        np.testing.assert_array_equal(first.initial_state[0], np.full((N, 2), 0.25))
        carried = envs.policy_state()
        assert carried[1]["count"].tolist() != [0] * N, "the state goes on across rollouts"
        second = envs.rollout(4, policy)
        assert_state_equal(second.initial_state, carried, "the next rollout starts from the state read")
        envs.set_policy_state(None)  # a fresh state for every env
        assert_state_equal(envs.policy_state(), policy.initial_state(N), "after set_policy_state(None)")
        chosen = (np.arange(2 * N, dtype=np.float64).reshape(N, 2), {"count": np.arange(N, dtype=np.int64)})
        envs.set_policy_state(chosen)
        third = envs.rollout(3, policy)
        assert_state_equal(third.initial_state, chosen, "set_policy_state")
        with pytest.raises(
            PolicyOutputError, match=r"state\[0\].*expected leading dimension 6, received shape \(5, 2\)"
        ):
            envs.set_policy_state((np.zeros((5, 2)), {"count": np.zeros(N, np.int64)}))
        with pytest.raises(PolicyOutputError, match=r"state\[1\]\['count'\].*dtype int64.*received.*dtype float64"):
            envs.set_policy_state((np.zeros((N, 2)), {"count": np.zeros(N)}))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("read_between", [False, True], ids=["set-only", "read-between"])
@pytest.mark.parametrize("after_batches", [False, True], ids=["after-steps", "after-batches"])
@pytest.mark.parametrize("in_flight", [False, True], ids=["set-idle", "set-in-flight"])
def test_a_set_state_is_the_current_one_so_a_reset_before_the_next_rollout_restarts_it(
    read_between: bool, after_batches: bool, in_flight: bool
) -> None:
    """set_policy_state sets the state beside the current observations: a masked reset before
    the next rollout starts its envs from the initial state and leaves the others' as set, and
    reading the state in between changes nothing (after async batches with none in flight too;
    set while a rollout is in flight, it is the state beside the observations that rollout left)."""
    policy = Recurrent()
    with make(diff_env_fns(N), 2) as envs:
        envs.reset(seed=SEED)
        envs.rollout(2, policy)
        if after_batches:
            envs.async_reset(seed=SEED)
            received = 0
            while received < N:
                received += len(envs.recv(timeout=30)[-1])
        chosen = (np.arange(2 * N, dtype=np.float64).reshape(N, 2), {"count": np.arange(N, dtype=np.int64) + 7})
        if in_flight:
            envs.rollout_async(1, policy)
            envs.set_policy_state(chosen)
            envs.rollout_wait(timeout=30)
        else:
            envs.set_policy_state(chosen)
        if read_between:
            assert_state_equal(envs.policy_state(), chosen, "read back")
        mask = np.arange(N) % 2 == 0
        envs.reset(seed=SEED, options={"reset_mask": mask})
        (h0, d0), (h, d) = policy.initial_state(N), chosen
        expected = (np.where(mask[:, None], h0, h), {"count": np.where(mask, d0["count"], d["count"])})
        got = envs.rollout(1, policy)
        assert_state_equal(got.initial_state, expected, "reset envs restart, the others keep what was set")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [pytest.param(m, id=m.value) for m in AutoresetMode if m.value != "Disabled"])
@pytest.mark.parametrize("workers", [0, 2])
def test_steps_restart_a_state_set_in_flight_as_one_set_between_calls(mode: AutoresetMode, workers: int) -> None:
    """A state set while a rollout is in flight, then steps that autoreset envs: the next
    rollout starts from the same state as when it was set after ``rollout_wait``: the
    restarted envs from the initial state, the others from what was set."""
    policy = Recurrent()
    chosen = (np.arange(2 * N, dtype=np.float64).reshape(N, 2) + 1, {"count": np.arange(N, dtype=np.int64) + 7})
    starts = []
    for in_flight in (True, False):
        with make(diff_env_fns(N, p_term=0.3), workers, mode) as envs:
            envs.reset(seed=SEED)
            envs.rollout_async(3, policy)
            if in_flight:
                envs.set_policy_state(chosen)
            envs.rollout_wait(timeout=30)
            if not in_flight:
                envs.set_policy_state(chosen)
            for _ in range(4):
                envs.step(np.ones(N, np.int64))
            starts.append(envs.rollout(1, policy).initial_state)
    assert_state_equal(starts[0], starts[1], "set in flight against set between calls")
    restarted = starts[1][1]["count"] == 0
    assert restarted.any() and not restarted.all(), "the steps restart some envs' state, not all"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", [pytest.param(m, id=m.value) for m in AutoresetMode if m.value != "Disabled"])
def test_a_worker_restarted_mid_rollout_starts_its_envs_afresh(mode: AutoresetMode, tmp_path: Any) -> None:
    once = str(tmp_path / "died")
    fns = fault_fns(4, "exit", "step", 3, at=4, once=once)
    policy = Recurrent("box")
    steps, victims, others = 10, [2, 3], [0, 1]
    with make(fns, 2, mode, on_worker_death="restart") as envs:
        envs.reset(seed=SEED)
        warm = envs.rollout(2, policy)  # the state moves on before the death
        assert warm.episode_starts[0].all()
        got = envs.rollout(steps, policy)
        assert envs.restart_count == 1
        # Row 0 of the restarted group was lost; row 1 is its fresh reset: an episode start.
        assert not got.episode_starts[0, victims].any() and got.episode_starts[1, victims].all()
        assert (got.extras["value"][0, victims] == 0).all()
        np.testing.assert_array_equal(got.initial_state[0][victims], np.full((2, 2), 0.25))
        # From row 1 on, a row-wise loop from the initial state on the replacement's observations.
        state = policy.initial_state(2)
        for t in range(1, steps):
            starts = got.episode_starts[t, victims]
            h, d = state
            state = (np.where(starts[:, None], 0.25, h), {"count": np.where(starts, 0, d["count"])})
            actions, extras, state = policy(got.observations[t, victims], state)
            np.testing.assert_array_equal(got.actions[t, victims], actions, err_msg=f"step {t}")
            np.testing.assert_array_equal(got.extras["value"][t, victims], extras["value"], err_msg=f"step {t}")
        # The other group went on from the state it had.
        assert (got.initial_state[1]["count"][others] == 2).all()
        # The replacement carries its envs' state on: read back, it is the replayed one.
        read = envs.policy_state()
        assert_state_equal((read[0][victims], {"count": read[1]["count"][victims]}), state, "after the restart")


@pytest.mark.timeout(90)
def test_a_restart_under_disabled_leaves_the_group_waiting_with_nothing_chosen(tmp_path: Any) -> None:
    fns = fault_fns(4, "exit", "step", 3, at=4, once=str(tmp_path / "died"))
    policy = Recurrent("box")
    with make(fns, 2, AutoresetMode.DISABLED, on_worker_death="restart") as envs:
        envs.reset(seed=SEED)
        envs.rollout(2, policy)
        got = envs.rollout(6, policy)
        victims = [2, 3]
        assert envs.restart_count == 1 and not got.stepped[1:, victims].any()
        assert not got.episode_starts[:, victims].any()  # the restarted step ended their episodes
        assert (got.extras["value"][:, victims] == 0).all() and (got.extras["logits"][:, victims] == 0).all()
        assert (got.actions[:, victims] == 0).all()  # nothing chosen: not the last rollout's actions
        np.testing.assert_array_equal(got.initial_state[0][victims], np.full((2, 2), 0.25))
        assert (got.initial_state[1]["count"][[0, 1]] == 2).all()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("then", ["step", "rollout"])
def test_reading_the_state_after_a_restart_leaves_the_restart_for_the_next_step(then: str) -> None:
    """A worker dies while idle; ``policy_state()`` is the first call after it: its envs' state
    is the initial one, the next step or rollout still reports the restart, and the replacement
    is sent the policy when it is next asked to act."""
    policy = Recurrent("box")
    victims, others = [2, 3], [0, 1]
    with make(healthy_fns(4), 2, AutoresetMode.NEXT_STEP, on_worker_death="restart") as envs:
        envs.reset(seed=SEED)
        envs.rollout(3, policy)
        victim = transport_of(envs).processes[1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(5.0)
        read = envs.policy_state()
        np.testing.assert_array_equal(read[0][victims], np.full((2, 2), 0.25))
        assert read[1]["count"].tolist() == [3, 3, 0, 0]
        if then == "step":
            _, rewards, _, truncations, infos = envs.step(np.zeros((4, 2), np.float32))
            assert truncations[victims].all() and not truncations[others].any() and (rewards[victims] == 0).all()
            assert infos["_worker_restarted"].tolist() == [False, False, True, True]
            got = envs.rollout(3, policy)
            assert got.episode_starts[0, victims].all()
        else:
            got = envs.rollout(3, policy)
            assert got.truncations[0, victims].all() and not got.truncations[0, others].any()
            assert got.infos[0]["_worker_restarted"].tolist() == [False, False, True, True]
            assert got.episode_starts[1, victims].all()
        assert envs.restart_count == 1 and (got.extras["value"][2, victims] != 0).all()
        assert envs.policy_state()[1]["count"][victims].tolist() == [3 if then == "step" else 2] * 2


class _InPlace:
    """A recurrent policy that counts each env's steps by adding to its state in place."""

    def initial_state(self, n: int) -> Any:
        return {"steps": np.zeros(n, np.int64)}

    def __call__(self, observations: Any, state: Any) -> Any:
        state["steps"] += 1
        return np.zeros((len(observations), 2), np.float32), {}, state


@pytest.mark.timeout(60)
def test_unstepped_envs_keep_their_state_when_the_policy_changes_it_in_place() -> None:
    """DISABLED: an env whose episode ended is not stepped, so its state must not move on even
    when the policy adds to the state it was given, rows of waiting envs included."""
    with make(healthy_fns(4), 2, AutoresetMode.DISABLED) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(12, _InPlace())  # episodes of 5 to 7 steps: every env ends and waits
        stepped = got.stepped.sum(axis=0)
        assert stepped.min() < 12
        np.testing.assert_array_equal(envs.policy_state()["steps"], stepped)


class _KeysReordered(Recurrent):
    """Its initial state is a dict ``{"h", "count"}``; each call returns ``{"count", "h"}``."""

    def initial_state(self, n: int) -> Any:
        h, d = super().initial_state(n)
        return {"h": h, "count": d["count"]}

    def __call__(self, observations: Any, state: Any) -> Any:
        actions, extras, (h, d) = super().__call__(observations, (state["h"], {"count": state["count"]}))
        return actions, extras, {"count": d["count"], "h": h}


def test_a_state_dict_may_come_back_with_its_keys_in_another_order() -> None:
    with make(diff_env_fns(N), 2) as envs:
        envs.reset(seed=SEED)
        policy = _KeysReordered()
        envs.rollout(3, policy)
        assert envs.policy_state()["count"].tolist() == [3] * N
        envs.set_policy_state({"count": np.arange(N, dtype=np.int64), "h": np.zeros((N, 2))})
        got = envs.rollout(2, policy)
        assert got.initial_state["count"].tolist() == list(range(N))
        np.testing.assert_array_equal(got.initial_state["h"], np.zeros((N, 2)))


def test_an_extra_numpy_cannot_hold_is_refused_by_name() -> None:
    torch = pytest.importorskip("torch")

    def bfloat16_value(observations: Any) -> Any:
        n = len(observations)
        return np.zeros(n, np.int64), {"value": torch.zeros(n, dtype=torch.bfloat16)}

    with make(diff_env_fns(N), 2) as envs:
        envs.reset(seed=SEED)
        with pytest.raises(PolicyOutputError, match=r"extras\['value'\] cannot be made a numpy array: TypeError"):
            envs.rollout(2, FunctionPolicy(bfloat16_value))


def test_an_sb3_actor_critic_gives_its_log_prob_and_value() -> None:
    sb3 = pytest.importorskip("stable_baselines3")
    torch = pytest.importorskip("torch")
    model = sb3.PPO("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu")
    with vecenv.make("CartPole-v1", 4, 2) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(8, vecenv.policies.SB3Policy(model, deterministic=True))
    assert set(got.extras) == {"log_prob", "value"} and got.extras["value"].shape == (8, 4)
    obs = torch.as_tensor(got.observations.reshape(32, 4))
    with torch.no_grad():
        values, log_prob, _ = model.policy.evaluate_actions(obs, torch.as_tensor(got.actions.reshape(32)))
    np.testing.assert_allclose(got.extras["log_prob"].reshape(32), log_prob.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.extras["value"].reshape(32), values.numpy().reshape(32), rtol=1e-5, atol=1e-6)


@pytest.mark.timeout(120)
def test_an_sb3_model_on_a_box_gives_the_unclipped_actions_a_learner_needs() -> None:
    """The envs get the clipped actions, the learner the unclipped ones its log-probs are of;
    gSDE's noise comes from the copies' seeded generators: the same layout and seeds give the
    same rollout (it came from the process's generator when the model was loaded)."""
    sb3 = pytest.importorskip("stable_baselines3")
    torch = pytest.importorskip("torch")
    env = gym.make("MountainCarContinuous-v0")
    for model in (
        sb3.PPO("MlpPolicy", env, seed=0, device="cpu"),
        sb3.PPO("MlpPolicy", env, device="cpu", use_sde=True, policy_kwargs={"log_std_init": 1.0}),
    ):
        runs = []
        for _ in range(2):
            with vecenv.make("MountainCarContinuous-v0", 4, 2) as envs:
                envs.reset(seed=SEED)
                runs.append(envs.rollout(8, vecenv.policies.SB3Policy(model)))
        got = runs[0]
        np.testing.assert_array_equal(got.actions, runs[1].actions)
        unclipped = got.extras["unclipped_actions"]
        assert unclipped.shape == got.actions.shape == (8, 4, 1) and unclipped.dtype == np.float32
        assert (np.abs(unclipped) > 1).any(), "nothing was clipped: the test shows nothing"
        np.testing.assert_array_equal(got.actions, np.clip(unclipped, -1, 1))
        obs = torch.as_tensor(got.observations.reshape(32, 2))
        with torch.no_grad():
            _, log_prob, _ = model.policy.evaluate_actions(obs, torch.as_tensor(unclipped.reshape(32, 1)))
        np.testing.assert_allclose(got.extras["log_prob"].reshape(32), log_prob.numpy(), rtol=1e-5, atol=1e-5)


# -- which weights acted ------------------------------------------------------------------------


def test_weights_version_says_which_weights_acted() -> None:
    torch = pytest.importorskip("torch")

    class Module(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))

        def forward(self, obs: Any) -> Any:
            n = obs.shape[0]
            return torch.zeros(n, dtype=torch.int64), {"w": self.w.expand(n).clone()}

    module = Module()
    with make(diff_env_fns(4), 2) as envs:
        envs.reset(seed=SEED)
        first = envs.rollout(3, module)
        v = first.weights_version
        assert (first.extras["w"] == 0).all() and envs.policy_weights_version == v
        # A rollout in flight while the learner updates: chosen by the weights it was sent with.
        envs.rollout_async(3, module)
        with torch.no_grad():
            module.w.fill_(1.0)
        envs.update_policy_weights()
        behind = envs.rollout_wait()
        assert behind.weights_version == v and (behind.extras["w"] == 0).all()
        assert envs.policy_weights_version == v + 1
        current = envs.rollout(3, module)
        assert current.weights_version == v + 1 and (current.extras["w"] == 1).all()
        with torch.no_grad():
            module.w.fill_(2.0)
        envs.update_policy_weights()
        envs.update_policy_weights()  # twice: the newest weights, two versions on
        latest = envs.rollout(3, module)
        assert latest.weights_version == v + 3 and (latest.extras["w"] == 2).all()


def test_torch_modules_give_extras_and_carry_an_lstm_state() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)

    class LSTMPolicy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = torch.nn.LSTMCell(3, 8)
            self.head = torch.nn.Linear(8, 4)

        def initial_state(self, n: int) -> Any:
            return torch.zeros(n, 8), torch.zeros(n, 8)

        def forward(self, obs: Any, state: Any) -> Any:
            h, c = self.cell(obs.float(), state)
            logits = self.head(h)
            actions = logits.argmax(dim=1)
            log_prob = torch.log_softmax(logits, dim=1).gather(1, actions[:, None])[:, 0]
            return actions, {"log_prob": log_prob}, (h, c)

    module = LSTMPolicy()
    with make(diff_env_fns(4), 2) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(50, module)
        assert got.extras["log_prob"].shape == (50, 4) and got.extras["log_prob"].dtype == np.float32
        assert got.initial_state[0].shape == (4, 8) and got.episode_starts[1:].any()
        # Replaying the sequence from the initial state, resetting at episode starts, gives the
        # same actions and log-probs (up to the last bits of a batched forward).
        h, c = (torch.as_tensor(a) for a in got.initial_state)
        with torch.no_grad():
            for t in range(50):
                keep = torch.as_tensor(~got.episode_starts[t], dtype=torch.float32)[:, None]
                actions, extras, (h, c) = module(torch.as_tensor(got.observations[t]), (h * keep, c * keep))
                np.testing.assert_array_equal(actions.numpy(), got.actions[t])
                np.testing.assert_allclose(extras["log_prob"].numpy(), got.extras["log_prob"][t], rtol=1e-5)


def _stacked_gru() -> Any:
    """A module of two GRU cells whose state is a list of their hidden states, which its forward
    updates in place (as per-layer recurrent code often does)."""
    torch = pytest.importorskip("torch")

    class StackedGRU(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cells = torch.nn.ModuleList([torch.nn.GRUCell(3, 8), torch.nn.GRUCell(8, 8)])
            self.head = torch.nn.Linear(8, 4)

        def initial_state(self, n: int) -> Any:
            return [torch.zeros(n, 8), torch.zeros(n, 8)]

        def forward(self, obs: Any, state: Any) -> Any:
            x = obs.float()
            for i, cell in enumerate(self.cells):
                state[i] = x = cell(x, state[i])
            return self.head(x).argmax(dim=1), {}, state

    torch.manual_seed(0)
    return StackedGRU()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [2, "inline"], ids=lambda w: f"w={w}")
def test_a_list_state_is_handed_back_as_a_list(workers: int | str) -> None:
    torch = pytest.importorskip("torch")
    module = _stacked_gru()
    with make(diff_env_fns(4), workers) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(20, module)
        assert type(got.initial_state) is list and type(envs.policy_state()) is list
        state = [torch.as_tensor(a) for a in got.initial_state]
        with torch.no_grad():
            for t in range(20):
                keep = torch.as_tensor(~got.episode_starts[t], dtype=torch.float32)[:, None]
                actions, _, state = module(torch.as_tensor(got.observations[t]), [s * keep for s in state])
                np.testing.assert_array_equal(actions.numpy(), got.actions[t], err_msg=f"step {t}")
        envs.set_policy_state([np.ones((4, 8), np.float32), np.zeros((4, 8), np.float32)])
        again = envs.rollout(2, module)
        assert type(again.initial_state) is list
        np.testing.assert_array_equal(again.initial_state[0], np.ones((4, 8), np.float32))


#: A recurrent state as a named tuple (an LSTM's hidden and cell state, read by name).
HiddenCell = collections.namedtuple("HiddenCell", "h c")


class _NamedState:
    """A numpy policy whose state is a :data:`HiddenCell`, read by its fields."""

    def initial_state(self, n: int) -> Any:
        return HiddenCell(np.zeros((n, 2), np.float32), np.zeros(n, np.int64))

    def __call__(self, observations: Any, state: Any) -> Any:
        h, c = state.h + 1, state.c + 2  # AttributeError if handed a plain tuple
        return np.zeros(len(observations), np.int64), {}, HiddenCell(h, c)


def _named_state_module() -> Any:
    torch = pytest.importorskip("torch")

    class NamedStateModule(torch.nn.Module):
        def initial_state(self, n: int) -> Any:
            return HiddenCell(torch.zeros(n, 2), torch.zeros(n, dtype=torch.int64))

        def forward(self, obs: Any, state: Any) -> Any:
            return torch.zeros(len(obs), dtype=torch.int64), {}, HiddenCell(state.h + 1, state.c + 2)

    return NamedStateModule()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["callable", "torch"])
@pytest.mark.parametrize("workers", [0, 2, "inline"], ids=lambda w: f"w={w}")
def test_a_named_tuple_state_is_handed_back_as_that_named_tuple(workers: int | str, kind: str) -> None:
    """The policy, the rollout's ``initial_state`` and ``policy_state()`` get the state in the
    named tuple the policy made it of, not a plain tuple (``state.h`` then fails)."""
    policy = _NamedState() if kind == "callable" else _named_state_module()
    with make(diff_env_fns(4), workers) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(3, policy)
        assert type(got.initial_state) is HiddenCell and type(envs.policy_state()) is HiddenCell
        np.testing.assert_array_equal(envs.policy_state().h, np.full((4, 2), 3, np.float32))
        np.testing.assert_array_equal(envs.policy_state().c, np.full(4, 6))
        envs.set_policy_state(HiddenCell(np.ones((4, 2), np.float32), np.zeros(4, np.int64)))
        again = envs.rollout(1, policy)
        assert type(again.initial_state) is HiddenCell
        np.testing.assert_array_equal(envs.policy_state().h, np.full((4, 2), 2, np.float32))


@pytest.mark.timeout(60)
def test_a_set_state_in_other_containers_than_the_initial_state_is_refused() -> None:
    """A list where the policy's state is a tuple (or a plain tuple where it is a named tuple)
    was accepted and handed to the policy as given: refused, naming both structures, and the
    state is left as it was."""
    with make(diff_env_fns(N), 2) as envs:
        envs.reset(seed=SEED)
        policy = Recurrent()
        envs.rollout(2, policy)
        before = envs.policy_state()
        h, count = np.zeros((N, 2)), np.zeros(N, np.int64)
        expected = "tuple(array, dict{'count': array})"
        for state, received in [
            ([h, {"count": count}], "list[array, dict{'count': array}]"),
            ((h, [count]), "tuple(array, list[array])"),
        ]:
            with pytest.raises(PolicyOutputError) as raised:
                envs.set_policy_state(state)
            assert str(raised.value) == (
                f"state (given to set_policy_state): expected the containers of the policy's initial state, "
                f"{expected}, received {received}"
            )
        assert_state_equal(envs.policy_state(), before, "after a refused set_policy_state")
    with make(diff_env_fns(4), 2) as envs:
        envs.reset(seed=SEED)
        envs.rollout(1, _NamedState())
        with pytest.raises(PolicyOutputError, match=r"HiddenCell\(h=array, c=array\), received tuple\(array, array\)$"):
            envs.set_policy_state((np.ones((4, 2), np.float32), np.zeros(4, np.int64)))


class _ListStateFrom(Recurrent):
    """Its initial state is a tuple; from its call number ``first`` on (counted per copy) it
    returns its new state as a list, which would reach it (and the learner) as a list."""

    def __init__(self, first: int) -> None:
        super().__init__()
        self.first, self.calls = first, 0

    def __call__(self, observations: Any, state: Any) -> Any:
        actions, extras, new = super().__call__(observations, state)
        self.calls += 1
        return actions, extras, (list(new) if self.calls > self.first else new)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2, "inline"], ids=lambda w: f"w={w}")
def test_a_state_returned_in_other_containers_than_the_initial_state_is_refused(workers: int | str) -> None:
    """A step's state in other containers than the initial state's was kept and handed back to
    the policy and the learner as returned: refused as ``set_policy_state`` refuses it, at the
    parent's first call of the policy, or at the step that changed them."""
    expected, received = "tuple(array, dict{'count': array})", "list[array, dict{'count': array}]"
    with make(diff_env_fns(4), workers) as envs:
        envs.reset(seed=SEED)
        policy = FunctionPolicy(_ListStateFrom(0), name="list-state")
        with pytest.raises(PolicyOutputError) as raised:
            envs.rollout(3, policy)
        assert str(raised.value) == (
            f"state (returned by policy list-state): expected the containers of the policy's initial state, "
            f"{expected}, received {received}"
        )
        # Its first call (the parent's) passes: the copies' second calls are refused.
        later = FunctionPolicy(_ListStateFrom(1), name="list-state-later")
        with pytest.raises(PolicyOutputError) as raised:
            envs.rollout(3, later)
        assert str(raised.value) == (
            f"state (returned by policy list-state-later at step 1): expected the containers of the policy's "
            f"initial state, {expected}, received {received}"
        )
        envs.reset(seed=SEED)
        got = envs.rollout(2, Recurrent())
        assert type(got.initial_state) is tuple and type(envs.policy_state()) is tuple


def test_a_torch_module_s_extra_numpy_cannot_hold_is_refused_by_name() -> None:
    torch = pytest.importorskip("torch")

    class HalfValue(torch.nn.Module):
        def forward(self, obs: Any) -> Any:
            n = obs.shape[0]
            return torch.zeros(n, dtype=torch.int64), {"value": torch.zeros(n, dtype=torch.bfloat16)}

    with make(diff_env_fns(N), 2) as envs:
        envs.reset(seed=SEED)
        with pytest.raises(PolicyOutputError, match=r"extras\['value'\] cannot be made a numpy array: TypeError"):
            envs.rollout(2, HalfValue())


# -- bad input -------------------------------------------------------------------------------


class ChangesShape:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, observations: Any) -> Any:
        self.calls += 1
        n = len(observations)
        value = np.zeros((n,) if self.calls == 1 else (n, 2), np.float32)
        return np.zeros(n, np.int64), {"value": value}


def changes_dtype(observations: Any) -> Any:
    n = len(observations)
    return np.zeros(n, np.int64), {"value": np.zeros(n, np.float32 if n == 3 else np.float64)}


class WrongRows(Recurrent):
    def initial_state(self, n: int) -> Any:
        return (np.zeros((n + 1, 2)), {"count": np.zeros(n, np.int64)})


class DropsRows(Recurrent):
    def __call__(self, observations: Any, state: Any) -> Any:
        actions, extras, (h, d) = super().__call__(observations, state)
        return actions, extras, (h[:1], d)


@pytest.mark.timeout(60)
def test_bad_outputs_are_named_with_the_expected_and_received_shape() -> None:
    with make(diff_env_fns(6), 2) as envs:  # groups of 3
        envs.reset(seed=SEED)
        # Each copy's first call gives (3,), its next (3, 2): raised at the call that changed.
        with pytest.raises(
            PolicyOutputError, match=r"extras\['value'\] changed: expected shape \(3,\).*received shape \(3, 2\)"
        ) as info:
            envs.rollout(4, ChangesShape())
        assert "in the worker's policy, at step 1" in " ".join(info.value.__notes__)
        envs.reset(seed=SEED)
        # The probe's rows are the first group's (3): float32; a group of another size: float64.
        with make(diff_env_fns(5), 2) as uneven:  # groups of 3 and 2
            uneven.reset(seed=SEED)
            with pytest.raises(
                PolicyOutputError, match=r"expected shape \(2,\) dtype float32.*received shape \(2,\) dtype float64"
            ):
                uneven.rollout(4, changes_dtype)
        # A wrong leading dimension: refused in the parent, before anything is sent.
        with pytest.raises(
            PolicyOutputError,
            match=r"state\[0\] \(from initial_state\).*expected leading dimension 3, received shape \(4, 2\)",
        ):
            envs.rollout(4, WrongRows())
        with pytest.raises(
            PolicyOutputError,
            match=r"state\[0\] \(returned by the policy\).*expected leading dimension 3, received shape \(1, 2\)",
        ):
            envs.rollout(4, DropsRows())
        assert envs.rollout(2, Recurrent()).num_steps == 2  # refused calls sent nothing


class _RowInitial(Recurrent):
    """Its initial state differs from row to row (``h`` is ``0.25 + row``): which rows an env
    gets would depend on its worker's group."""

    def initial_state(self, n: int) -> Any:
        h, d = super().initial_state(n)
        return (h + np.arange(n)[:, None], d)


class _NanInitial(Recurrent):
    """Its initial ``h`` is NaN in every row: equal rows, as a state not yet known may be."""

    def initial_state(self, n: int) -> Any:
        h, d = super().initial_state(n)
        return (np.full_like(h, np.nan), d)


@pytest.mark.timeout(60)
def test_an_initial_state_whose_rows_differ_is_refused_naming_the_leaf_and_rows() -> None:
    """An env's state restarts from its row of ``initial_state(n)``: rows that differ would make
    an env's initial state depend on how the envs are grouped, and the parent reports a replaced
    worker's envs with row 0 repeated. Refused in the parent before anything is sent, and in a
    worker whose group is larger than the first (where the parent's call could not see it)."""
    with make(diff_env_fns(4), 2) as envs:  # groups of 2
        envs.reset(seed=SEED)
        with pytest.raises(
            PolicyOutputError,
            match=r"state\[0\] \(from initial_state\) must be the same for every env: expected 2 rows equal to "
            r"row 0 = \[0\.25 0\.25\], received row 1 = \[1\.25 1\.25\]",
        ):
            envs.rollout(3, _RowInitial())
        got = envs.rollout(3, _NanInitial())  # NaN rows are equal rows
        assert np.isnan(got.initial_state[0]).all()
    groups = [functools.partial(make_group, [0]), functools.partial(make_group, [1, 2, 3])]
    with vecenv.SubprocVectorEnv.from_groups(groups, context="fork") as envs:
        envs.reset(seed=SEED)
        with pytest.raises(PolicyOutputError, match=r"expected 3 rows equal to row 0") as info:
            envs.rollout(3, _RowInitial())
        assert "in the worker's policy, at step 0" in " ".join(info.value.__notes__)


@pytest.mark.timeout(60)
def test_a_recurrent_policy_on_native_vector_groups_is_refused() -> None:
    groups = [
        functools.partial(sync_group, [0, 1], AutoresetMode.NEXT_STEP),
        functools.partial(sync_group, [2, 3], AutoresetMode.NEXT_STEP),
    ]
    with vecenv.SubprocVectorEnv.from_groups(groups, context="fork") as envs:
        envs.reset(seed=SEED)
        with pytest.raises(PolicyOutputError, match="is recurrent.*native VectorEnvs"):
            envs.rollout(3, FunctionPolicy(Recurrent()))
        assert envs.rollout(3, with_extras).extras["value"].shape == (3, 4)


class _OnlyInWorkers:
    """Raises in the process that built the vector env (as a policy opening a resource only a
    worker has would), and returns extras in the workers."""

    def __init__(self) -> None:
        self.parent = os.getpid()

    def __call__(self, observations: Any) -> Any:
        if os.getpid() == self.parent:
            raise RuntimeError("no simulator handle in the training process")
        return np.zeros(len(observations), np.int64), {"value": np.zeros(len(observations), np.float32)}


@pytest.mark.timeout(60)
def test_extras_that_could_not_be_learned_in_the_parent_are_refused_naming_why() -> None:
    with make(diff_env_fns(N), 2) as envs:
        envs.reset(seed=SEED)
        with pytest.raises(PolicyOutputError, match=r"expected the names \[\].*received \['value'\]") as info:
            envs.rollout(2, _OnlyInWorkers())
        notes = " ".join(getattr(info.value, "__notes__", ()))
        assert "RuntimeError: no simulator handle in the training process" in notes


#: The events of :class:`_HangsInTheParent`, which its copies made in this process share.
_PROBE_EVENTS: dict[str, Any] = {}


class _HangsInTheParent:
    """Its call in the process that made the vector env (a copy, as the probe makes) blocks
    until the ``release`` event of ``_PROBE_EVENTS[token]`` is set."""

    def __init__(self, token: str) -> None:
        self.parent, self.token = os.getpid(), token

    def __call__(self, observations: Any) -> Any:
        if os.getpid() == self.parent:
            called, release = _PROBE_EVENTS[self.token]
            called.set()
            release.wait(60)
        return np.zeros(len(observations), np.int64)


@pytest.mark.timeout(60)
def test_close_from_another_thread_ends_a_rollout_whose_policy_hangs_in_its_first_call() -> None:
    """The first call of a new policy runs in the parent; close() from another thread while it
    hangs there: the rollout raises ClosedEnvironmentError at once and the close completes."""
    import threading
    import time

    called, release = _PROBE_EVENTS["close"] = (threading.Event(), threading.Event())
    policy = _HangsInTheParent("close")
    envs = make(diff_env_fns(N), 2)
    envs.reset(seed=SEED)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            envs.rollout(3, policy)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert called.wait(30), "the policy's first call did not start"
        start = time.monotonic()
        envs.close(timeout=0.5)
        took = time.monotonic() - start
        thread.join(10)
        assert not thread.is_alive() and took < 0.5 + 3.0, took
        assert len(outcome) == 1 and isinstance(outcome[0], vecenv.errors.ClosedEnvironmentError), outcome
        assert "close() from another thread" in str(outcome[0]) and "nothing was sent" in str(outcome[0])
        assert envs.closed and all(not os.path.exists(f"/proc/{pid}") for pid in envs.worker_pids if pid)
    finally:
        release.set()
        envs.close()
