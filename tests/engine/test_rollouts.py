"""Rollouts in the workers (``envs.rollout``): every env's trajectory is the one SyncVectorEnv
gives with the same actions, the data does not depend on the number of workers or on the
rollout length, and every fault behaves as it does in ``step``.

The reference is always ``gymnasium.vector.SyncVectorEnv`` (or, under DISABLED, where a
rollout leaves ended envs unstepped, each env on its own) stepped with the actions the rollout
recorded.
"""

from __future__ import annotations

import functools
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.engine.test_differential import assert_same
from tests.helpers.envs import (
    EmptyObservationEnv,
    FinalKeysInfoEnv,
    MixedEndsEnv,
    OneLeafEnv,
    diff_env_fns,
    fns,
    greedy_module,
    one_leaf_policy,
)
from tests.helpers.faults import FaultEnv, done_words, fault_fns, healthy_fns, silent_fns, transport_of
from vecenv.errors import InvalidArgumentError, RemoteTraceback, WeightsMismatchError, WorkerDiedError
from vecenv.parent import rollouts as rollouts_module
from vecenv.parent.replies import InfoMerger
from vecenv.policies import FunctionPolicy, PolicyContext, PolicyRunner, RandomPolicy, WorkerPolicy
from vecenv.spaces import tree_leaves, tree_map
from vecenv.transports import process as process_transport
from vecenv.wire import fastpath
from vecenv.wire.protocol import (
    MEMFD_WEIGHTS_BYTES,
    OBJECT_STORE_WEIGHTS_BYTES,
    Command,
    Pickled,
    RolloutArgs,
    RolloutReply,
    WithFd,
    decode_command,
    decode_reply,
    encode_for_pipe,
    fd_follows,
)

MODES = [pytest.param(m, id=m.value) for m in AutoresetMode]
N = 6
SEED = 23


def stack(trees: Sequence[Any], join: Callable[[list], np.ndarray] = np.stack) -> Any:
    """Trees of arrays (one per step) as one tree of arrays with a leading step axis (or, with
    ``join=np.concatenate``, joined along their own first axis)."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: stack([t[k] for t in trees], join) for k in first}
    if isinstance(first, tuple):
        return tuple(stack([t[i] for t in trees], join) for i in range(len(first)))
    return join(list(trees))


def row(tree: Any, t: int) -> Any:
    return tree_map(lambda a: a[t], tree)


def sync_reference(fns: list[Callable[[], gym.Env]], mode: AutoresetMode, seed: int, actions: Any, steps: int) -> dict:
    """SyncVectorEnv reset with ``seed`` and stepped with each row of ``actions``."""
    sync = SyncVectorEnv(fns, autoreset_mode=mode)
    try:
        obs, _ = sync.reset(seed=seed)
        seen: dict[str, list] = {"observations": [], "rewards": [], "terminations": [], "truncations": [], "infos": []}
        for t in range(steps):
            seen["observations"].append(obs)
            obs, rewards, terms, truncs, infos = sync.step(row(actions, t))
            for key, value in zip(("rewards", "terminations", "truncations", "infos"), (rewards, terms, truncs, infos)):
                seen[key].append(value)
        out = {k: stack(v) for k, v in seen.items() if k != "infos"}
        out["infos"], out["last_observations"] = seen["infos"], obs
        return out
    finally:
        sync.close()


def assert_matches_sync(got: vecenv.Rollout, want: dict, where: str = "") -> None:
    for key in ("observations", "rewards", "terminations", "truncations", "last_observations"):
        assert_same(getattr(got, key), want[key], f"{where}{key}")
    assert len(got.infos) == len(want["infos"])
    for t, (a, b) in enumerate(zip(got.infos, want["infos"])):
        assert_same(a, b, f"{where}infos[{t}]")


def single_env_reference(fns: list[Callable[[], gym.Env]], seed: int, actions: Any, steps: int) -> dict:
    """DISABLED: each env on its own, stepped until its episode ends and left alone after."""
    envs = [fn() for fn in fns]
    merger = InfoMerger(len(envs))
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    ended = [False] * len(envs)
    seen: dict[str, list] = {k: [] for k in ("observations", "rewards", "terminations", "truncations", "stepped")}
    infos_per_step = []
    for t in range(steps):
        seen["observations"].append(list(obs))
        rewards, terms, truncs, infos = [], [], [], {}
        seen["stepped"].append([not e for e in ended])
        for i, env in enumerate(envs):
            if ended[i]:
                rewards.append(0.0), terms.append(False), truncs.append(False)
                continue
            obs[i], reward, term, trunc, info = env.step(row(actions, t)[i])
            rewards.append(reward), terms.append(term), truncs.append(trunc)
            infos = merger.add(infos, info, i) if info else infos
            ended[i] = term or trunc
        for key, value in zip(("rewards", "terminations", "truncations"), (rewards, terms, truncs)):
            seen[key].append(value)
        infos_per_step.append(infos)
    return {
        "observations": np.array(seen["observations"], dtype=np.float32),
        "rewards": np.array(seen["rewards"], dtype=np.float64),
        "terminations": np.array(seen["terminations"]),
        "truncations": np.array(seen["truncations"]),
        "stepped": np.array(seen["stepped"]),
        "infos": infos_per_step,
        "last_observations": np.array(obs, dtype=np.float32),
    }


def row_wise_policy(observations: Any) -> np.ndarray:
    """A deterministic row-wise policy for DiffEnv's box observations and Discrete(4) actions."""
    return (np.abs(np.asarray(observations)[:, 1]) * 4).astype(np.int64) % 4


def make(fns: list, workers: int | str, mode: AutoresetMode = AutoresetMode.NEXT_STEP, **kwargs: Any) -> Any:
    inline = workers == "inline"
    return vecenv.SubprocVectorEnv(
        fns, 2 if inline else workers, autoreset_mode=mode, context="fork", inline_group=inline, **kwargs
    )


# -- the trajectories are SyncVectorEnv's ----------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [m for m in MODES if m.values[0] is not AutoresetMode.DISABLED])
@pytest.mark.parametrize(
    ("policy", "obs_kind"),
    # (the row-wise test policy reads box observations)
    [("random", "box"), ("random", "dict"), ("random", "tuple"), ("random", "discrete"), ("function", "box")],
    ids=lambda value: value,
)
def test_rollout_matches_sync_stepped_with_its_actions(mode: AutoresetMode, obs_kind: str, policy: str) -> None:
    act_kind = "discrete" if policy == "function" else "multidiscrete"
    fns = diff_env_fns(N, obs_kind=obs_kind, act_kind=act_kind, p_term=0.08, p_trunc=0.05)
    chosen = FunctionPolicy(row_wise_policy) if policy == "function" else "random"
    with make(fns, 3, mode) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(40, chosen)
        assert got.num_steps == 40 and got.rewards.shape == (40, N)
        ends = int((got.terminations | got.truncations).sum())
        assert ends >= 5, "episodes must end (and autoreset) during the rollout"
        want = sync_reference(fns, mode, SEED, got.actions, 40)
        assert_matches_sync(got, want)
        if mode is AutoresetMode.SAME_STEP and obs_kind == "box":
            ended = got.terminations | got.truncations
            following = got.next_observations()
            for t in np.flatnonzero(ended.any(axis=1)):
                finals = np.stack(want["infos"][t]["final_obs"][ended[t]])  # an object array in Sync
                np.testing.assert_array_equal(got.final_observations[t][ended[t]], finals)
                np.testing.assert_array_equal(following[t][ended[t]], finals)
        if policy == "function":
            np.testing.assert_array_equal(got.actions, np.stack([row_wise_policy(o) for o in got.observations]))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [m for m in MODES if m.values[0] is not AutoresetMode.DISABLED])
@pytest.mark.parametrize("workers", [0, 2], ids=["in-parent", "2-workers"])
def test_a_dict_or_tuple_of_one_array_reaches_the_policy_and_the_envs_as_a_tree(
    mode: AutoresetMode, workers: int
) -> None:
    """A Tuple observation space or a Dict action space holding one Box is a tree of one
    array, not the array: the policy got the bare array (its Tuple unpacked row by row), the
    envs a bare array for their Dict action (gymnasium's iterate failed on it), and under
    SAME_STEP the final observation was read from the block as from an array."""
    env_fns = fns(OneLeafEnv, 4)
    with make(env_fns, workers, mode) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(7, one_leaf_policy)
    assert isinstance(got.observations, tuple) and isinstance(got.actions, dict)
    want = sync_reference(env_fns, mode, SEED, got.actions, 7)
    assert_matches_sync(got, want)
    chosen = [one_leaf_policy(rows)["move"] for rows in zip(*got.observations)]
    np.testing.assert_array_equal(got.actions["move"], np.stack(chosen))
    assert (got.terminations | got.truncations).sum() >= 4
    if mode is AutoresetMode.SAME_STEP:
        ended = got.truncations
        for t in np.flatnonzero(ended.any(axis=1)):
            finals = np.stack([obs[0] for obs in want["infos"][t]["final_obs"][ended[t]]])
            np.testing.assert_array_equal(got.final_observations[0][t][ended[t]], finals)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2, 3, "inline"], ids=lambda w: f"w={w}")
def test_disabled_leaves_ended_envs_unstepped_and_matches_each_env(workers: int | str) -> None:
    fns = diff_env_fns(N, obs_kind="box", act_kind="discrete", p_term=0.06, p_trunc=0.04)
    with make(fns, workers, AutoresetMode.DISABLED) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(30, FunctionPolicy(row_wise_policy))
        want = single_env_reference(fns, SEED, got.actions, 30)
        assert_matches_sync(got, want)
        assert_same(got.stepped, want["stepped"])
        ended = (got.terminations | got.truncations).any(axis=0)
        assert ended.any() and not got.stepped.all()
        assert (got.actions[~got.stepped] == 0).all(), "an env that waits unstepped received no action"
        with pytest.raises(vecenv.NeedsResetError, match=r"rollout_async.*DISABLED"):
            envs.rollout(5)
        envs.reset(options={"reset_mask": ended})
        assert envs.rollout(5).num_steps == 5


@pytest.mark.timeout(60)
def test_rollouts_and_steps_continue_each_other() -> None:
    fns = diff_env_fns(N, act_kind="multidiscrete")
    sync = SyncVectorEnv(fns)
    rng = np.random.default_rng(1)
    try:
        with make(fns, 2) as envs:
            assert_same(envs.reset(seed=SEED), sync.reset(seed=SEED))
            for round_ in range(3):
                got = envs.rollout(9)
                for t in range(9):
                    obs, *rest = sync.step(row(got.actions, t))
                    assert_same(got.infos[t], rest[-1], f"round {round_} infos[{t}]")
                assert_same(got.last_observations, obs)
                actions = rng.integers(0, [3, 5], size=(N, 2))
                assert_same(envs.step(actions), sync.step(actions), f"the step after round {round_}")
    finally:
        sync.close()


def zeroing_policy(observations: Any) -> np.ndarray:
    """Action 0 for every row, after scaling its rows in place (as ``obs /= 255`` would)."""
    for leaf in tree_leaves(observations):
        leaf *= 0
    return np.zeros(len(tree_leaves(observations)[0]), np.int64)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("obs_kind", ["box", "dict"])
@pytest.mark.parametrize("workers", [2, "inline"], ids=lambda w: f"w={w}")
def test_a_policy_that_changes_its_rows_in_place_leaves_the_recorded_observations_alone(
    workers: int | str, obs_kind: str
) -> None:
    """The recorded rows are what the envs returned, as a loop that stores each observation
    before calling the policy keeps them."""
    fns = diff_env_fns(N, obs_kind=obs_kind, act_kind="discrete")
    with make(fns, workers) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(6, FunctionPolicy(zeroing_policy))
        want = sync_reference(fns, AutoresetMode.NEXT_STEP, SEED, got.actions, 6)
        assert_matches_sync(got, want)
        assert any(np.any(leaf != 0) for leaf in tree_leaves(got.observations))


# -- the data does not depend on the layout or on T -------------------------------------------


def _random_run(workers: int | str, lengths: Sequence[int], mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> dict:
    fns = diff_env_fns(N, act_kind="box", p_term=0.05)
    with make(fns, workers, mode) as envs:
        envs.reset(seed=SEED)
        parts = [envs.rollout(t) for t in lengths]
    return {
        "actions": np.concatenate([p.actions for p in parts]),
        "observations": np.concatenate([p.observations for p in parts]),
        "rewards": np.concatenate([p.rewards for p in parts]),
        "infos": [i for p in parts for i in p.infos],
        "last": parts[-1].last_observations,
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES)
def test_random_policy_data_is_independent_of_workers_and_of_rollout_length(mode: AutoresetMode) -> None:
    reference = _random_run(1, [36], mode)
    assert len(np.unique(reference["actions"])) > 100, "actions must vary"
    layouts = [(2, [36]), (3, [12, 12, 12]), ("inline", [5, 31]), (2, [1] * 3 + [33])]
    if mode is AutoresetMode.DISABLED:  # an env that ends waits for the rollout's end: T matters there
        layouts = [(w, [36]) for w in (2, 3, "inline")]
    for workers, lengths in layouts:
        got = _random_run(workers, lengths, mode)
        for key in reference:
            assert_same(got[key], reference[key], f"workers={workers}, lengths={lengths}: {key}")


@pytest.mark.timeout(60)
def test_random_policy_is_reseeded_by_a_seeded_reset() -> None:
    with make(diff_env_fns(4, act_kind="box"), 2) as envs:
        envs.reset(seed=5)
        first = envs.rollout(10).actions
        assert not np.array_equal(envs.rollout(10).actions, first)  # the streams go on
        envs.reset(seed=5)
        np.testing.assert_array_equal(envs.rollout(10).actions, first)
        envs.reset(seed=6)
        assert not np.array_equal(envs.rollout(10).actions, first)
        envs.reset(seed=5)
        np.testing.assert_array_equal(envs.rollout(10, RandomPolicy()).actions, first)  # the same policy


def _zero_boxes(observations: np.ndarray) -> np.ndarray:
    return np.zeros((len(observations), 2), np.float32)


@pytest.mark.timeout(120)
def test_random_policy_passed_again_after_another_goes_on_with_new_streams() -> None:
    """An evaluation rollout between two random ones: the random policy passed again drew, action
    for action, what it drew after the last seeded reset (the copy was built anew from the same
    seeds). It now draws new numbers, the same for any grouping, and a seeded reset still starts
    the same sequence again."""

    def calls(workers: int | str) -> list[np.ndarray]:
        with make(diff_env_fns(6, act_kind="box"), workers) as envs:
            envs.reset(seed=5)
            got = [envs.rollout(8).actions, envs.rollout(8).actions]
            envs.rollout(2, _zero_boxes)  # any other policy
            got.append(envs.rollout(8).actions)
            envs.rollout(2, _zero_boxes)
            got.append(envs.rollout(8, RandomPolicy()).actions)
            envs.reset(seed=5)
            got.append(envs.rollout(8).actions)
            return got

    reference = calls(1)
    for earlier in range(3):
        for later in range(earlier + 1, 4):
            assert not np.array_equal(reference[later], reference[earlier]), (earlier, later)
    np.testing.assert_array_equal(reference[4], reference[0], err_msg="a seeded reset starts them again")
    for workers in (2, 3, "inline"):
        for k, (got, want) in enumerate(zip(calls(workers), reference, strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"workers={workers}, rollout {k}")


# -- policies --------------------------------------------------------------------------------


def _global_numpy_sampler(observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Samples from numpy's global generator, as ``np.random.randint`` in a user's policy does."""
    n = len(observations)
    return np.random.randint(0, 4, n), {"noise": np.random.rand(n)}


def _torch_sampler() -> Any:
    """A module that samples from torch's global generator, as ``Categorical(...).sample()`` does."""
    import torch

    class Sampler(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.logits = torch.nn.Linear(3, 4)

        def forward(self, observations: Any) -> Any:
            actions = torch.distributions.Categorical(logits=self.logits(observations) * 0).sample()
            return actions, {"noise": torch.rand(len(observations), dtype=torch.float64)}

    return Sampler()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_policies_sampling_from_global_generators_draw_apart_in_each_worker_and_follow_the_seed(kind: str) -> None:
    # Forked workers start with the parent's generators (and torch's default seed is the same in
    # every process): every group of the same size drew the same noise, the same actions.
    if kind == "torch":
        pytest.importorskip("torch")  # before the sampler, which imports it
    policy = _global_numpy_sampler if kind == "numpy" else _torch_sampler()
    fns = diff_env_fns(6, obs_kind="box", act_kind="discrete", p_term=0.0, p_trunc=0.0)
    with make(fns, 2) as envs:
        envs.reset(seed=SEED)
        first = envs.rollout(8, policy)
        noise = first.extras["noise"]
        assert not np.array_equal(noise[:, :3], noise[:, 3:]), "both workers drew the same numbers"
        assert not np.array_equal(first.actions[:, :3], first.actions[:, 3:])
        envs.reset(seed=SEED)
        again = envs.rollout(8, policy)
        np.testing.assert_array_equal(again.extras["noise"], noise)
        np.testing.assert_array_equal(again.actions, first.actions)
        envs.reset(seed=SEED + 100)
        assert not np.array_equal(envs.rollout(8, policy).extras["noise"], noise), "another seed, other numbers"
        if kind == "numpy":  # a new policy object at every rollout goes on where the last stopped
            envs.reset(seed=SEED)
            first = envs.rollout(4, FunctionPolicy(_global_numpy_sampler)).extras["noise"]
            second = envs.rollout(4, FunctionPolicy(_global_numpy_sampler)).extras["noise"]
            np.testing.assert_array_equal(np.concatenate([first, second]), noise)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_the_first_call_of_a_policy_in_this_process_leaves_its_generators_where_they_were(
    kind: str, workers: int
) -> None:
    # The call that learns a new policy's extras runs in the caller's process; it moved the
    # caller's numpy and torch streams on, so a learner seeded for a reproducible run drew other
    # numbers, and the group the parent hosts other actions than a plain loop of the policy.
    torch = pytest.importorskip("torch")
    policy = _global_numpy_sampler if kind == "numpy" else _torch_sampler()

    def seed() -> None:
        np.random.seed(7)
        torch.manual_seed(7)

    fns = diff_env_fns(4, obs_kind="box", act_kind="discrete", p_term=0.0, p_trunc=0.0)
    with make(fns, workers) as envs:
        observations, _ = envs.reset(seed=SEED)
        seed()
        noise = envs.rollout(1, policy).extras["noise"][0]
        after = np.random.rand(), torch.rand(1).item()
        seed()
        if workers == 0:  # the parent's group draws from the caller's generators, as a loop would
            rows = observations if kind == "numpy" else torch.as_tensor(observations)
            np.testing.assert_array_equal(noise, np.asarray(policy(rows)[1]["noise"]))
        else:  # the workers draw from theirs: the caller's have not moved
            assert after == (np.random.rand(), torch.rand(1).item())


@pytest.mark.timeout(120)
def test_torch_module_runs_in_workers_and_takes_new_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its new weights travel as arrays in the weights slot (where there is one): each command
    stays small, and a tensor's bytes are never pickled."""
    torch = pytest.importorskip("torch")

    module = greedy_module()
    fns = diff_env_fns(N, obs_kind="box", act_kind="discrete")
    with make(fns, 3) as envs:
        commands = recorded_sends(envs, monkeypatch)
        envs.reset(seed=SEED)
        got = envs.rollout(12, module)
        assert (got.actions == 2).all()
        assert_matches_sync(got, sync_reference(fns, AutoresetMode.NEXT_STEP, SEED, got.actions, 12))
        with torch.no_grad():
            module.linear.bias.copy_(torch.tensor([0.0, 7.0, 0.0, 0.0]))
        assert (envs.rollout(3, module).actions == 2).all(), "copies keep their weights until told"
        envs.update_policy_weights()
        assert (envs.rollout(3, module).actions == 1).all()
        big = torch.zeros(4, 3).expand(4, 3)  # not contiguous: pickled (in the slot's header), not in the slot
        commands.clear()
        envs.update_policy_weights({"linear.weight": big, "linear.bias": torch.tensor([0.0, 0, 0, 9])})
        assert (envs.rollout(3, module).actions == 3).all()
        if hasattr(os, "memfd_create"):
            sizes = [len(m.data if isinstance(m, WithFd) else m) for m in rollout_commands(commands)]
            assert len(sizes) == 3 and max(sizes) < 1024, sizes
            assert len(weights_slot_fds()) == 1


@pytest.mark.timeout(60)
def test_the_original_module_s_weights_that_no_longer_fit_are_refused_before_anything_is_sent() -> None:
    # They went out unchecked: the workers' load_state_dict failed at the next rollout, which
    # then needed a reset.
    torch = pytest.importorskip("torch")
    module = greedy_module()
    with make(diff_env_fns(4), 2) as envs:
        envs.reset(seed=SEED)
        envs.rollout(2, module)
        version = envs.policy_weights_version
        module.linear = torch.nn.Linear(3, 5)
        with pytest.raises(WeightsMismatchError, match=r"must have shape \(4, 3\)") as info:
            envs.update_policy_weights()
        assert "the original module's state_dict()" in " ".join(info.value.__notes__)
        assert envs.policy_weights_version == version


@pytest.mark.timeout(60)
def test_a_changed_module_passed_again_after_its_weights_were_refused_is_sent_as_a_new_copy() -> None:
    """The refusal's note says to pass the module to ``rollout`` again: that sends a new copy,
    made of the module as it is now, whose weights can then be pushed again. Before, the same
    object passed again reused the old copies, and every later push was refused the same way."""
    torch = pytest.importorskip("torch")
    module = greedy_module()
    with make(diff_env_fns(4), 2) as envs:
        envs.reset(seed=SEED)
        first = envs.rollout(2, module)
        module.register_parameter("scale", torch.nn.Parameter(torch.ones(1)))  # unused: a new entry
        with torch.no_grad():
            module.linear.bias.copy_(torch.tensor([0.0, 5.0, 0.0, 0.0]))
        with pytest.raises(WeightsMismatchError, match="unexpected 'scale'") as info:
            envs.update_policy_weights()
        assert "pass the module to `rollout` again" in " ".join(info.value.__notes__)
        assert envs.policy_weights_version == first.weights_version, "the refusal changed nothing"
        again = envs.rollout(2, module)
        assert again.weights_version == first.weights_version + 1
        assert (again.actions == 1).all(), "the new copy acts with the module as it is now"
        with torch.no_grad():
            module.linear.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 5.0]))
            module.scale.fill_(2.0)
        envs.update_policy_weights()  # fits the new copies
        assert (envs.rollout(2, module).actions == 3).all()


class ZeroAgent:
    """A learner's agent whose ``act`` is passed as the policy: ``agent.act`` is a new bound
    method object at each access."""

    def __init__(self, action: int) -> None:
        self.action = action

    def act(self, observations: np.ndarray) -> np.ndarray:
        return np.full(len(observations), self.action, np.int64)


@pytest.mark.timeout(60)
def test_the_same_bound_method_passed_again_is_the_same_policy() -> None:
    # Compared with `is`, each rollout probed, pickled and sent `agent.act` again as a new policy.
    agent, other = ZeroAgent(1), ZeroAgent(0)
    with make(diff_env_fns(4), 2) as envs:
        envs.reset(seed=SEED)
        versions = [envs.rollout(2, agent.act).weights_version for _ in range(3)]
        assert versions == [versions[0]] * 3, versions
        agent.action = 0  # the workers' copies are as the agent was when first passed
        assert (envs.rollout(2, agent.act).actions == 1).all()
        switched = envs.rollout(2, other.act)  # another object's method: a new policy
        assert switched.weights_version == versions[0] + 1 and (switched.actions == 0).all()


class CountedWeights:
    """Weights that count how often this process pickles them."""

    pickled = 0

    def __init__(self, action: int) -> None:
        self.action = action

    def __reduce__(self) -> tuple[type, tuple[int]]:
        CountedWeights.pickled += 1
        return CountedWeights, (self.action,)


class ConstantPolicy(WorkerPolicy):
    """Every env takes ``action``; its weights are the action."""

    name = "constant"

    def __init__(self) -> None:
        self.action = 0

    def build(self, context: PolicyContext) -> PolicyRunner:
        return _Constant()

    def weights(self) -> CountedWeights:
        return CountedWeights(self.action)


class _Constant(PolicyRunner):
    def __init__(self) -> None:
        self.action = 0

    def load_weights(self, weights: CountedWeights) -> None:
        self.action = weights.action

    def act(self, observations: Any, active: np.ndarray | None) -> np.ndarray:
        return np.full(len(observations), self.action, np.int64)


@pytest.mark.timeout(120)
def test_new_weights_are_pickled_once_for_every_worker_and_reach_each() -> None:
    """A rollout's command is pickled per worker; the weights in it once per update, however
    many workers take them, and a worker restarted later gets the same bytes."""
    policy = ConstantPolicy()
    with make(diff_env_fns(6, act_kind="discrete"), 3, on_worker_death="restart") as envs:
        envs.reset(seed=0)
        assert (envs.rollout(2, policy).actions == 0).all()
        for action in (1, 0, 1):
            policy.action = action
            envs.update_policy_weights()
            before = CountedWeights.pickled
            assert (envs.rollout(3, policy).actions == action).all()
            assert CountedWeights.pickled == before + 1
        process = transport_of(envs).processes[1]  # its replacement gets the policy and the same weights
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
        before = CountedWeights.pickled
        got = envs.rollout(4, policy)  # a longer block: the death is found sending it
        assert envs.restart_count == 1 and (got.actions[1:] == 1).all()
        # Row 0 of worker 1's envs is the restarted step (its action lost); the others acted.
        assert got.actions[0].tolist() == [1, 1, 0, 0, 1, 1] and got.truncations[0].tolist() == [0, 0, 1, 1, 0, 0]
        assert CountedWeights.pickled == before


class CountedPolicy(ConstantPolicy):
    """A constant policy that counts how often this process pickles it."""

    pickled = 0

    def __reduce__(self) -> tuple[type, tuple[()]]:
        CountedPolicy.pickled += 1
        return CountedPolicy, ()


@pytest.mark.timeout(120)
def test_a_policy_is_pickled_once_for_every_worker_and_a_replacement() -> None:
    policy = CountedPolicy()
    with make(diff_env_fns(6, act_kind="discrete"), 3, on_worker_death="restart") as envs:
        envs.reset(seed=0)
        before = CountedPolicy.pickled
        assert (envs.rollout(2, policy).actions == 0).all()
        assert CountedPolicy.pickled == before + 1, "once, not once per worker"
        process = transport_of(envs).processes[2]
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
        assert (envs.rollout(3, policy).actions == 0).all() and envs.restart_count == 1
        assert CountedPolicy.pickled == before + 1, "the replacement gets the same bytes"


class BoxConstantPolicy(ConstantPolicy):
    """Every env takes ``action`` in each dimension of a Box action space."""

    def build(self, context: PolicyContext) -> PolicyRunner:
        return _BoxConstant(context.action_space)


class _BoxConstant(_Constant):
    def __init__(self, space: Any) -> None:
        super().__init__()
        self.space = space

    def act(self, observations: Any, active: np.ndarray | None) -> np.ndarray:
        return np.full((len(observations), *self.space.shape), self.action, self.space.dtype)


@pytest.mark.timeout(90)
def test_a_group_restarted_mid_rollout_acts_with_the_weights_the_rollout_was_sent_with(tmp_path: Any) -> None:
    """``rollout_async``, new weights, ``rollout_wait`` with a worker dying in between: its
    replacement runs the rest of the rollout with the weights the rollout was sent with (the
    version the rollout reports), and the next rollout acts with the new ones everywhere."""
    fns = fault_fns(FAULT_N, "exit", "step", FAULT_TARGET, at=4, once=str(tmp_path / "died"))
    policy = BoxConstantPolicy()
    with make(fns, 2, on_worker_death="restart") as envs:
        envs.reset(seed=SEED)
        assert (envs.rollout(1, policy).actions == 0).all()
        policy.action = 0.25
        envs.update_policy_weights()
        sent_version = envs.policy_weights_version
        envs.rollout_async(10, policy)  # env 3 exits at its 4th step, in this rollout
        policy.action = 0.5
        envs.update_policy_weights()
        got = envs.rollout_wait()
        assert envs.restart_count == 1 and got.weights_version == sent_version
        assert got.infos[0]["_worker_restarted"].tolist() == [False, False, True, True]
        assert (got.actions[:, :2] == 0.25).all() and (got.actions[1:, 2:] == 0.25).all(), got.actions[:, :, 0]
        after = envs.rollout(3, policy)
        assert (after.actions == 0.5).all() and after.weights_version == envs.policy_weights_version


class PaddedWeights(CountedWeights):
    """Weights that pickle to more than ``MEMFD_WEIGHTS_BYTES``: the action and padding."""

    def __init__(self, action: int, padding: bytes = bytes(MEMFD_WEIGHTS_BYTES)) -> None:
        super().__init__(action)
        self.padding = padding

    def __reduce__(self) -> tuple[type, tuple[int, bytes]]:  # type: ignore[override]
        CountedWeights.pickled += 1
        return PaddedWeights, (self.action, self.padding)


class PaddedPolicy(ConstantPolicy):
    def weights(self) -> PaddedWeights:
        return PaddedWeights(self.action)


def shared_weights_fds() -> list[int]:
    """This process's descriptors of weights' shared copies (memfds)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:vecenv-weights"):
                found.append(int(name))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return found


def recorded_sends(envs: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every message the transport of ``envs`` sends from now on, as encoded."""
    transport = transport_of(envs)
    send = transport.send
    sent: list[Any] = []
    monkeypatch.setattr(transport, "send", lambda w, m, t=None: (sent.append(m), send(w, m, t))[1])
    return sent


def rollout_commands(commands: list[Any]) -> list[Any]:
    return [m for m in commands if decode_command(m.data if isinstance(m, WithFd) else m)[0] is Command.ROLLOUT]


def rollout_past_a_killed_worker(envs: Any, policy: Any) -> None:
    """Kill worker 1 of 3 (envs 2..3) and roll out: its replacement acts with the weights the
    others have (action 1) but for row 0, the restarted step."""
    process = transport_of(envs).processes[1]
    os.kill(process.pid, signal.SIGKILL)
    process.join(30)
    got = envs.rollout(4, policy)  # a longer block: the death is found sending it
    assert envs.restart_count == 1 and (got.actions[1:] == 1).all()
    assert got.actions[0].tolist() == [1, 1, 0, 0, 1, 1]  # row 0 of worker 1's: the restarted step


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the shared copy is a memfd (Linux)")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [3, "inline", 0])
def test_large_weights_travel_as_one_shared_copy_beside_each_command(
    workers: int | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Weights of more than ``MEMFD_WEIGHTS_BYTES`` are written once into a sealed memfd whose
    descriptor goes beside each worker's command, never inside it; every worker (a replacement
    too) acts with them, and the parent keeps no copy of an older version, nor any after close."""
    policy = PaddedPolicy()
    with make(diff_env_fns(6, act_kind="discrete"), workers, on_worker_death="restart") as envs:
        commands = recorded_sends(envs, monkeypatch)
        envs.reset(seed=0)
        assert (envs.rollout(2, policy).actions == 0).all()
        for action in (1, 2, 3, 1):
            policy.action = action
            envs.update_policy_weights()
            before, commands[:] = CountedWeights.pickled, []
            assert (envs.rollout(3, policy).actions == action).all()
            assert CountedWeights.pickled == before + 1
            rollouts = rollout_commands(commands)
            assert len(rollouts) == len(envs.worker_pids)  # one per worker, the parent-hosted one too
            assert all(isinstance(m, WithFd) and len(m.data) < 1024 for m in rollouts), [
                len(getattr(m, "data", m)) for m in rollouts
            ]
            assert len(shared_weights_fds()) == 1, "the newest version's copy only"
        if workers == 3:
            rollout_past_a_killed_worker(envs, policy)  # its replacement gets the same copy
    assert shared_weights_fds() == []


class ArrayWeightsPolicy(ConstantPolicy):
    """Every env takes ``action``; its weights are arrays holding it (``size`` of them), which
    the copies check are theirs to write."""

    def __init__(self, size: int = 1000) -> None:
        super().__init__()
        self.size = size

    def build(self, context: PolicyContext) -> PolicyRunner:
        return _ArrayConstant(context.action_space)

    def weights(self) -> Any:
        return {"action": np.full(self.size, self.action, np.int64), "scale": np.arange(3.0), "name": "w"}


class _ArrayConstant(_BoxConstant):  # (a Discrete space's shape is ())
    def load_weights(self, weights: Any) -> None:
        action, scale = weights["action"], weights["scale"]
        assert action.flags.writeable and scale.flags.writeable, "the worker's own copies"
        assert weights["name"] == "w" and scale.tolist() == [0.0, 1.0, 2.0]
        action += 0  # (writable: a worker may train or normalise its copy in place)
        self.action = int(action[-1])


def weights_slot_fds() -> list[int]:
    """This process's descriptors of the new weights' shared slot."""
    slot = "/memfd:vecenv-weights-slot"
    return [fd for fd in shared_weights_fds() if os.readlink(f"/proc/self/fd/{fd}").startswith(slot)]


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the slot is a memfd (Linux)")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [3, "inline", 0])
def test_weights_arrays_travel_through_one_slot_that_each_worker_maps_once(
    workers: int | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New weights holding arrays: their bytes go into one shared slot, whose descriptor goes
    beside a worker's command only until it maps it; every command stays a few hundred bytes
    however large the arrays, every worker (a replacement too) acts with each version, a larger
    version gets a larger slot, and nothing is left open after close."""
    policy = ArrayWeightsPolicy()
    with make(diff_env_fns(6, act_kind="discrete"), workers, on_worker_death="restart") as envs:
        commands = recorded_sends(envs, monkeypatch)
        envs.reset(seed=0)
        assert (envs.rollout(2, policy).actions == 0).all() and weights_slot_fds() == []
        for k, (action, size) in enumerate([(1, 1000), (2, 1000), (3, 200_000), (1, 1000)]):
            policy.action, policy.size = action, size
            envs.update_policy_weights()
            commands.clear()
            assert (envs.rollout(3, policy).actions == action).all()
            rollouts = rollout_commands(commands)
            assert len(rollouts) == len(envs.worker_pids)  # one per worker, the parent-hosted one too
            data = [m.data if isinstance(m, WithFd) else m for m in rollouts]
            assert all(len(d) < 1024 for d in data), [len(d) for d in data]
            # The slot's descriptor goes with the first weights, and with the larger slot (k == 2).
            assert all(isinstance(m, WithFd) == (k in (0, 2)) for m in rollouts), [type(m) for m in rollouts]
            assert len(weights_slot_fds()) == 1, "the current slot only"
        if workers == 3:
            commands.clear()
            rollout_past_a_killed_worker(envs, policy)  # its replacement maps the slot, gets the weights
            resent = [m for m in rollout_commands(commands) if isinstance(m, WithFd)]
            assert len(resent) == 1, "the slot's descriptor to the replacement only"
    assert weights_slot_fds() == []


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the slot is a memfd (Linux)")
@pytest.mark.timeout(120)
def test_a_worker_that_reads_its_weights_after_the_slot_was_written_again_acts_with_the_newest() -> None:
    """A worker still busy with an abandoned call reads a rollout's weights late, after the
    parent wrote the next version over them in the slot (smaller: its old layout reads a mix of
    the two). That rollout's reply is dropped, and the worker is sent the newest weights again
    with its next rollout."""
    policy = ArrayWeightsPolicy(size=1000)
    with make(fault_fns(4, "sleep", "call", 1, duration=1.5), 2) as envs:  # env 1: worker 0
        envs.reset(seed=0)
        assert (envs.rollout(1, policy).actions == 0).all()
        envs.call_async("boom")
        with pytest.raises(vecenv.VecEnvTimeoutError):
            envs.call_wait(timeout=0.2)
        policy.action = 1
        envs.update_policy_weights()
        with pytest.raises(vecenv.VecEnvTimeoutError):
            envs.rollout(3, policy, timeout=0.2)  # worker 0 has not read its command yet
        policy.action, policy.size = 2, 500  # fits the slot: written over what worker 0 will read
        envs.update_policy_weights()
        envs.reset(seed=0)  # (waits for worker 0: its call, the late rollout, then this)
        assert (envs.rollout(3, policy).actions == 2).all()


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="the shared copy is a memfd (Linux)")
def test_shared_weights_are_sealed_and_small_weights_stay_inside_the_command() -> None:
    small, large = Pickled.of(PaddedWeights(1, b"")), Pickled.of(PaddedWeights(2))
    # Weights between Ray's threshold and the memfd's: beside the call to Ray actors (one object
    # in the store), inside the command to worker processes (cheaper than making the copy).
    medium = Pickled.of(PaddedWeights(3, bytes(OBJECT_STORE_WEIGHTS_BYTES)))
    assert OBJECT_STORE_WEIGHTS_BYTES < len(medium.data) < MEMFD_WEIGHTS_BYTES
    try:
        assert RolloutArgs(3, weights=small).weights_beside(OBJECT_STORE_WEIGHTS_BYTES) is None
        assert RolloutArgs(3, weights=medium).weights_beside(OBJECT_STORE_WEIGHTS_BYTES) is medium
        for weights in (small, medium):
            message = encode_for_pipe(Command.ROLLOUT, 7, RolloutArgs(3, weights=weights))
            assert isinstance(message, bytes) and not fd_follows(message)
            assert decode_command(message)[2]().weights.data == weights.data
        assert shared_weights_fds() == [], "no shared copy made"
        message = encode_for_pipe(Command.ROLLOUT, 7, RolloutArgs(3, weights=large))
        assert isinstance(message, WithFd) and fd_follows(message.data) and len(message.data) < 1024
        assert message.fd == large.shared_fd(), "made once, at the first send"
        with pytest.raises(PermissionError):
            os.pwrite(message.fd, b"x", 0)
        with pytest.raises(PermissionError):
            os.ftruncate(message.fd, 1)
        command, call_id, load = decode_command(message.data)
        received = load().with_fd(os.dup(message.fd))
        assert (command, call_id) == (Command.ROLLOUT, 7) and received.weights.load().action == 2
        assert pickle.loads(pickle.dumps(large)).data == large.data, "pickled (Ray): the bytes travel"
    finally:
        large.close()
    assert shared_weights_fds() == []


@pytest.mark.timeout(180)
def test_sb3_model_runs_in_workers_deterministically() -> None:
    sb3 = pytest.importorskip("stable_baselines3")
    model = sb3.PPO("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu")
    fns = [functools.partial(gym.make, "CartPole-v1")] * 4
    with make(fns, 2) as envs:
        envs.reset(seed=3)
        got = envs.rollout(50, vecenv.policies.SB3Policy(model, deterministic=True))
        want_actions = np.stack([model.predict(o, deterministic=True)[0] for o in got.observations])
        np.testing.assert_array_equal(got.actions, want_actions)
        assert_matches_sync(got, sync_reference(fns, AutoresetMode.NEXT_STEP, 3, got.actions, 50))
        envs.reset(seed=3)
        stochastic = [envs.rollout(20, model).actions for _ in range(2)]
        envs.reset(seed=3)
        again = [envs.rollout(20, model).actions for _ in range(2)]
        np.testing.assert_array_equal(np.concatenate(stochastic), np.concatenate(again))


class StillEnv(gym.Env):
    """The same observation at every step, and no end: a stochastic policy's actions on it are
    its sampler's draws alone."""

    observation_space = gym.spaces.Box(0, 1, (3,), np.float32)
    action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.full(3, 0.5, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.full(3, 0.5, np.float32), 0.0, False, False, {}


@pytest.mark.timeout(180)
def test_a_stochastic_sb3_policy_made_again_samples_anew_and_follows_the_seed() -> None:
    """A new ``SB3Policy`` of the same model at each rollout (or the model passed again after
    another policy) sampled, on observations that repeat, the very same actions at every
    rollout: each copy seeded its sampler from the same reset seed. Later copies now draw new
    numbers, and the same calls after the same seeded reset draw the same ones again."""
    sb3 = pytest.importorskip("stable_baselines3")
    model = sb3.PPO("MlpPolicy", StillEnv(), n_steps=16, batch_size=16, seed=0, device="cpu")
    with make([StillEnv] * 4, 2) as envs:

        def calls() -> list[np.ndarray]:
            envs.reset(seed=1)
            got = [envs.rollout(20, vecenv.policies.SB3Policy(model)).actions for _ in range(2)]
            got.append(envs.rollout(20, model).actions)
            envs.rollout(1)  # another policy
            got.append(envs.rollout(20, model).actions)
            return got

        first = calls()
        assert len(np.unique(first[0])) > 1, "the policy samples"
        for earlier in range(3):
            for later in range(earlier + 1, 4):
                assert not np.array_equal(first[later], first[earlier]), (earlier, later)
        for k, (got, want) in enumerate(zip(calls(), first, strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"rollout {k} after the same seeded reset")


@pytest.mark.timeout(180)
def test_sb3_model_on_other_spaces_is_refused_and_exploration_follows_the_model() -> None:
    """A CartPole model on Acrobot's envs failed in the workers with SB3's bare ValueError: the
    first rollout refuses it naming both spaces, and nothing was sent. A DQN's copies kept the
    exploration rate the model had when it was passed: new weights bring the current one."""
    sb3 = pytest.importorskip("stable_baselines3")
    from vecenv.errors import VecEnvError

    model = sb3.DQN("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu", buffer_size=100)
    with vecenv.make("Acrobot-v1", 4, 2) as envs:
        envs.reset(seed=0)
        with pytest.raises(VecEnvError, match=r"policy sb3:DQN was made for the observation space Box\(.*\(4,\)"):
            envs.rollout(2, model)
        assert envs.rollout(2).actions.shape == (2, 4), "still usable"
    with vecenv.make("CartPole-v1", 4, 2) as envs:
        envs.reset(seed=0)
        policy = vecenv.policies.SB3Policy(model)
        got = envs.rollout(30, policy)  # exploration_rate 0: greedy
        greedy = np.stack([model.predict(o, deterministic=True)[0] for o in got.observations])
        np.testing.assert_array_equal(got.actions, greedy)
        model.exploration_rate = 1.0  # as learn's schedule starts
        envs.update_policy_weights()
        got = envs.rollout(50, policy)
        greedy = np.stack([model.predict(o, deterministic=True)[0] for o in got.observations])
        assert 0.3 < np.mean(got.actions != greedy) < 0.7, "uniform actions: half of them differ from the greedy ones"


@pytest.mark.timeout(60)
def test_native_vector_groups_roll_out_like_one_make_vec() -> None:
    make_vec = functools.partial(gym.make_vec, "CartPole-v1", vectorization_mode="vector_entry_point")
    with vecenv.SubprocVectorEnv.from_groups([functools.partial(make_vec, 3), functools.partial(make_vec, 2)]) as sub:
        sub.reset(seed=5)
        got = sub.rollout(300)
        twins = [make_vec(3), make_vec(2)]
        try:
            twins[0].reset(seed=5), twins[1].reset(seed=8)
            for t in range(300):
                parts = [twins[0].step(got.actions[t, :3]), twins[1].step(got.actions[t, 3:])]
                np.testing.assert_array_equal(got.rewards[t], np.concatenate([parts[0][1], parts[1][1]]))
                np.testing.assert_array_equal(got.terminations[t], np.concatenate([parts[0][2], parts[1][2]]))
                obs = np.concatenate([parts[0][0], parts[1][0]])
                np.testing.assert_array_equal(got.observations[t + 1] if t < 299 else got.last_observations, obs)
            assert got.terminations.sum() > 5
        finally:
            for twin in twins:
                twin.close()


# -- input and policy errors -----------------------------------------------------------------


def _raises_in_policy(observations: Any) -> Any:
    raise KeyError("no action for you")


def _wrong_shape(observations: Any) -> Any:
    return np.zeros((len(observations), 3), np.int64)


def _squeezed(observations: Any) -> Any:
    return np.full(len(observations), 0.5, np.float32)  # one value per env, for a Box of shape (1,)


def _pendulum() -> gym.Env:
    return gym.make("Pendulum-v1")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2], ids=lambda w: f"w={w}")
def test_actions_of_a_size_that_step_takes_but_not_the_space_s_shape_are_refused(workers: int) -> None:
    """A step hands env i row i of what it is given, so (n,) actions for a Box of shape (1,)
    reach Pendulum as scalars (which it cannot index, in SyncVectorEnv too); a rollout's envs get
    rows of the space's shape from the block, so it refuses such a batch by its shape rather
    than stepping the envs with actions a step would not have given them."""
    with make([_pendulum] * 4, workers) as envs:
        envs.reset(seed=0)
        shapes = r"the policy's actions` must have shape \((2|4), 1\).*got shape \((2|4),\)"  # (a worker's 2 envs)
        with pytest.raises(ValueError, match=shapes):
            envs.rollout(3, _squeezed)
        envs.reset(seed=0)
        got = envs.rollout(3, lambda obs: _squeezed(obs)[:, None])
        assert got.actions.shape == (3, 4, 1) and (got.actions == 0.5).all()


@pytest.mark.timeout(60)
def test_bad_input_and_policy_errors_are_named() -> None:
    with make(diff_env_fns(4), 2) as envs:
        envs.reset(seed=0)
        for bad in (0, -3, 2.5, "7"):
            with pytest.raises(ValueError, match=r"`num_steps` must be a positive int"):
                envs.rollout(bad)
        with pytest.raises(ValueError, match=r"`policy` must be 'random'"):
            envs.rollout(3, "greedy")
        with pytest.raises(TypeError, match=r"`policy` must be 'random'"):
            envs.rollout(3, 42)
        assert envs.rollout(3).num_steps == 3  # nothing was sent by the refused calls
        with pytest.raises(KeyError, match="no action for you") as info:
            envs.rollout(3, _raises_in_policy)
        assert (
            "in the worker's policy, at step 0 of the rollout (steps 0..2); the policy is "
            "tests.engine.test_rollouts:_raises_in_policy"
        ) in str(info.value.__notes__)
        with pytest.raises(vecenv.NeedsResetError):
            envs.rollout(3)
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=r"the policy's actions` must have shape \(2,\)"):
            envs.rollout(3, _wrong_shape)
        envs.reset(seed=0)
        envs.rollout(2, "random")
        with pytest.raises(TypeError, match="policy random has no weights"):
            envs.update_policy_weights()
    with make(diff_env_fns(2), 1) as envs:
        with pytest.raises(ValueError, match="`update_policy_weights` needs a policy"):
            envs.update_policy_weights()


@pytest.mark.timeout(60)
def test_spaces_without_a_fixed_shape_are_refused() -> None:
    with make(diff_env_fns(2, obs_kind="text"), 1) as envs:
        envs.reset(seed=0)
        for _ in range(2):  # refused again: the spaces are judged once, the verdict kept
            with pytest.raises(ValueError, match="fixed-shape spaces"):
                envs.rollout(3)
        envs.step(np.zeros(2, np.int64))  # and the vector env goes on


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 1])
def test_an_observation_space_that_holds_no_values_is_refused_by_name(num_workers: int) -> None:
    """An empty Tuple observation steps as in ``SyncVectorEnv``; a rollout, whose block has no
    rows for it, is refused naming the space instead of failing on the block's layout."""
    sync = SyncVectorEnv(fns(EmptyObservationEnv, 2))
    with make(fns(EmptyObservationEnv, 2), num_workers) as envs:
        assert_same(envs.reset(seed=0), sync.reset(seed=0))
        for _ in range(2):
            with pytest.raises(InvalidArgumentError, match=r"the observation space Tuple\(\) holds no values$"):
                envs.rollout(3)
        actions = np.zeros(2, np.int64)
        assert_same(envs.step(actions), sync.step(actions))  # and the vector env goes on
    sync.close()


@pytest.mark.timeout(60)
def test_calls_in_the_wrong_order_raise_as_gymnasium_does() -> None:
    from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

    envs = make(diff_env_fns(2), 1)
    envs.reset(seed=0)
    with pytest.raises(NoAsyncCallError, match="Calling `rollout_wait` without any prior call to `rollout_async`"):
        envs.rollout_wait()
    envs.rollout_async(4)
    with pytest.raises(AlreadyPendingCallError, match="while waiting for a pending call to `rollout`"):
        envs.step(np.zeros(2, np.int64))
    assert envs.rollout_wait().num_steps == 4
    with pytest.warns(UserWarning, match="pending call to `rollout`"):
        envs.rollout_async(2)
        envs.close()
    with pytest.raises(ClosedEnvironmentError):
        envs.rollout(2)


@pytest.mark.timeout(60)
def test_copy_false_returns_views_of_the_block() -> None:
    with make(diff_env_fns(2), 1, copy=False) as envs:
        envs.reset(seed=0)
        first = envs.rollout(5)
        kept = first.observations.copy()
        second = envs.rollout(5)
        assert np.shares_memory(first.observations, second.observations)
        assert not np.array_equal(first.observations, kept)  # overwritten, as documented
    with make(diff_env_fns(2), 1) as envs:
        envs.reset(seed=0)
        first = envs.rollout(5)
        kept = first.observations.copy()
        envs.rollout(5)
        np.testing.assert_array_equal(first.observations, kept)


@pytest.mark.timeout(60)
def test_longer_rollouts_grow_the_block_and_shorter_ones_reuse_it() -> None:
    fns = diff_env_fns(4, act_kind="box")
    with make(fns, 2) as envs:
        envs.reset(seed=SEED)
        parts = [envs.rollout(t) for t in (3, 10, 2, 10)]
        assert [p.num_steps for p in parts] == [3, 10, 2, 10]
        assert envs._rollouts.block is not None and envs._rollouts.block.spec.num_steps == 10
        actions = np.concatenate([p.actions for p in parts])
        want = sync_reference(fns, AutoresetMode.NEXT_STEP, SEED, actions, 25)
        for key in ("observations", "rewards", "terminations", "truncations"):
            assert_same(np.concatenate([getattr(p, key) for p in parts]), want[key], key)


@pytest.mark.timeout(60)
def test_rollout_async_sends_the_block_without_waiting_for_it() -> None:
    """A new or larger block travels just before the ROLLOUT, with no round trip of its own:
    with every env in the parent, nothing runs until the parent waits, so both are still queued
    when rollout_async returns; a block long enough is not sent again."""
    from vecenv.wire.protocol import Command, decode_command

    fns = diff_env_fns(3, act_kind="box")
    with vecenv.SubprocVectorEnv(fns, 0) as envs:
        inline = envs._pool.transport.inline
        envs.reset(seed=SEED)
        for t, expected in ((4, [Command.ROLLOUT_BLOCK, Command.ROLLOUT]), (2, [Command.ROLLOUT])):
            envs.rollout_async(t)
            assert [decode_command(data)[0] for data, _ in inline.pending] == expected
            assert envs.rollout_wait().num_steps == t
        assert envs.rollout(6).actions.shape[0] == 6  # a longer one: a new block, then the rollout
        assert envs._rollouts.block is not None and envs._rollouts.block.spec.num_steps == 6


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2], ids=["in-parent", "2-workers"])
def test_final_observations_are_the_steps_not_keys_of_the_resets_info(workers: int) -> None:
    """Under SAME_STEP an ended env's reset info follows its final step's: keys named
    ``final_obs``/``final_info`` there are the env's own info, batched as Sync batches them,
    and the rollout's final observations stay the step's."""
    env_fns = fns(FinalKeysInfoEnv, 4)
    with make(env_fns, workers, AutoresetMode.SAME_STEP) as envs:
        envs.reset(seed=SEED)
        got = envs.rollout(7)
    want = sync_reference(env_fns, AutoresetMode.SAME_STEP, SEED, got.actions, 7)
    assert_matches_sync(got, want)
    ended = got.terminations | got.truncations
    assert ended.sum() >= 4
    following = got.next_observations()
    for t in np.flatnonzero(ended.any(axis=1)):
        # env i's last observation of an episode is (i, 2 + i), one step on from the row's
        finals = got.observations[t][ended[t]] + np.float32([0, 1])
        np.testing.assert_array_equal(finals[:, 1], finals[:, 0] + 2)
        np.testing.assert_array_equal(got.final_observations[t][ended[t]], finals)
        np.testing.assert_array_equal(following[t][ended[t]], finals)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("copy", [True, False], ids=["copy", "views"])
@pytest.mark.parametrize("workers", [0, 1, 3, "inline"], ids=lambda w: f"w={w}")
def test_same_step_rollout_infos_are_syncs_whatever_each_end_reports(workers: int | str, copy: bool) -> None:
    """Under SAME_STEP, ends with an empty ``final_info`` and ends with one, final
    observations in the space's dtype and in float64, reset infos after the final entry of the
    same env: the infos of two rollouts in a row are Sync's, the first's still after the second
    has written the block again (its final observations are not views of the block)."""
    env_fns = fns(MixedEndsEnv, N)
    with make(env_fns, workers, AutoresetMode.SAME_STEP, copy=copy) as envs:
        envs.reset(seed=SEED)
        first, second = envs.rollout(20), envs.rollout(20)
    actions = np.concatenate([first.actions, second.actions])
    want = sync_reference(env_fns, AutoresetMode.SAME_STEP, SEED, actions, 40)
    for t, got in enumerate(first.infos + second.infos):
        assert_same(got, want["infos"][t], f"infos[{t}]")
    plain = other = 0  # ends with an empty final info and a float32 observation, and the rest
    for infos in want["infos"]:
        for i in np.flatnonzero(infos.get("_final_obs", np.zeros(N, bool))):
            simple = not infos["final_info"].get("_draw", np.zeros(N, bool))[i]
            simple = simple and infos["final_obs"][i].dtype == np.float32
            plain, other = plain + simple, other + (not simple)
    assert plain >= 5 and other >= 5, (plain, other)


def _cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


class EpisodeLength(gym.Wrapper):
    """CartPole with an info at each episode's end: its length."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        self.length = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.length += 1
        return obs, reward, terminated, truncated, {"length": self.length} if terminated or truncated else info


def _cartpole_with_episode_infos() -> gym.Env:
    return EpisodeLength(gym.make("CartPole-v1"))


def _lean_left_policy(observations: np.ndarray) -> np.ndarray:
    return (observations[:, 2] < -0.05).astype(np.int64)  # falls over within ~10-30 steps


@pytest.mark.timeout(90)
@pytest.mark.skipif(not fastpath.SUPPORTED, reason="the shared words run on x86-64 Linux only")
@pytest.mark.parametrize("mode", [m for m in MODES if m.values[0] is not AutoresetMode.DISABLED])
@pytest.mark.parametrize("infos", [False, True], ids=["no-infos", "episode-infos"])
def test_rollouts_with_nothing_to_report_are_answered_in_the_done_words(
    mode: AutoresetMode, infos: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a worker holds the block, a rollout whose envs had no infos (under SAME_STEP: ends
    whose infos are their final observations alone, which the block holds) is answered in the
    worker's done word, not on its pipe; one with infos on the pipe. Either way the rollouts
    are Sync's, infos included."""
    decoded: list[Any] = []

    def decode(data: bytes) -> Any:
        decoded.append(reply := decode_reply(data))
        return reply

    monkeypatch.setattr(process_transport, "decode_reply", decode)
    env_fns = [_cartpole_with_episode_infos if infos else _cartpole] * 4
    steps, rounds = 40, 3
    with make(env_fns, 2, mode) as envs:
        envs.reset(seed=SEED)
        got = [envs.rollout(steps, FunctionPolicy(_lean_left_policy))]  # sent after the block
        del decoded[:]
        for _ in range(rounds - 1):
            got.append(envs.rollout(steps, FunctionPolicy(_lean_left_policy)))
            answered = done_words(envs)
        on_pipe = [reply.call_id for reply in decoded if isinstance(reply.result, RolloutReply)]
    ends = [int((r.terminations | r.truncations).sum()) for r in got]
    assert min(ends) >= 4, f"episodes must end in every rollout: {ends}"
    if infos:
        assert len(on_pipe) == 2 * (rounds - 1) and not set(on_pipe) & set(answered), (on_pipe, answered)
    else:
        assert not on_pipe, f"replies went through the pipes: {decoded}"
        assert answered[0] == answered[1] - 1 > 0, f"the last rollout was not answered in the done words: {answered}"
    actions = np.concatenate([r.actions for r in got])
    want = sync_reference(env_fns, mode, SEED, actions, steps * rounds)
    for k, r in enumerate(got):
        part = {key: value[k * steps : (k + 1) * steps] for key, value in want.items() if key != "last_observations"}
        last = (k + 1) * steps
        part["last_observations"] = want["observations"][last] if k + 1 < rounds else want["last_observations"]
        assert_matches_sync(r, part, f"rollout {k}: ")


def test_next_observations_hold_the_true_final_observations() -> None:
    obs = np.arange(4 * 2, dtype=np.float32).reshape(4, 2)
    ended = np.zeros((4, 2), bool)
    ended[1, 0] = True
    finals = np.full((4, 2), -1.0, np.float32)
    rollout = vecenv.Rollout(obs, obs, obs, ended, ~ended & False, [{}] * 4, np.array([9.0, 9.0], np.float32), finals)
    nxt = rollout.next_observations()
    np.testing.assert_array_equal(nxt[:3], np.where(ended[:3], -1.0, obs[1:]))
    np.testing.assert_array_equal(nxt[3], [9.0, 9.0])
    assert tree_leaves(nxt)[0] is not obs


# -- faults: as in step ----------------------------------------------------------------------

FAULT_N, FAULT_TARGET = 4, 3  # worker 1 (of 2) hosts envs 2 and 3
RAISE_S = 3.0  # a fault surfaces within this on a loaded 2-core machine


def _healthy_reference(
    actions: np.ndarray, envs: Sequence[int], reset_seeds: Sequence[int], mode: AutoresetMode = AutoresetMode.NEXT_STEP
) -> dict:
    """Healthy FaultEnvs ``envs`` reset with ``reset_seeds`` and stepped with the rows of ``actions``."""
    sync = SyncVectorEnv([functools.partial(FaultEnv, index=i) for i in envs], autoreset_mode=mode)
    try:
        obs, _ = sync.reset(seed=list(reset_seeds))
        seen: dict[str, list] = {"observations": [], "rewards": [], "terminations": []}
        for t in range(len(actions)):
            seen["observations"].append(obs)
            obs, rewards, terms, _, _ = sync.step(actions[t])
            seen["rewards"].append(rewards)
            seen["terminations"].append(terms)
        return {k: np.stack(v) for k, v in seen.items()}
    finally:
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [2, "inline"], ids=lambda w: f"w={w}")
def test_env_error_at_step_k_names_the_env_and_the_step(workers: int | str) -> None:
    fns = fault_fns(FAULT_N, "raise", "step", FAULT_TARGET, at=5)
    with make(fns, workers) as envs:
        envs.reset(seed=SEED)
        start = time.monotonic()
        with pytest.raises(ValueError, match=f"injected fault in step of env {FAULT_TARGET}") as info:
            envs.rollout(8)
        assert time.monotonic() - start < RAISE_S
        notes = " ".join(info.value.__notes__)
        assert (
            f"raised in env {FAULT_TARGET} (worker 1) during `rollout_wait`, at step 4 of the rollout (steps 0..7)"
            in notes
        )
        assert isinstance(info.value.__cause__, RemoteTraceback) and "fire" in str(info.value.__cause__)
        with pytest.raises(vecenv.NeedsResetError, match="rollout_async"):
            envs.rollout(8)
        envs.reset(seed=SEED)  # the env raised once; it carries on
        got = envs.rollout(8)
        want = _healthy_reference(got.actions, range(FAULT_N), [SEED + i for i in range(FAULT_N)])
        for key, value in want.items():
            np.testing.assert_array_equal(getattr(got, key), value, err_msg=key)


class _FailsAt(gym.Env):
    """Observes ``[index, steps since reset]``; raises ``ValueError`` at its step ``fuse``."""

    observation_space = gym.spaces.Box(0.0, 100.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index: int, fuse: int | None) -> None:
        self.index, self.fuse = index, fuse

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.index, 0], np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.t == self.fuse:
            raise ValueError(f"env {self.index} raised at its step {self.t}")
        self.t += 1
        return np.array([self.index, self.t], np.float32), 0.0, False, False, {}


def _zeros(obs: np.ndarray) -> np.ndarray:
    return np.zeros(len(obs), np.int64)


def _zeros_unless_env_2_at_step_1(obs: np.ndarray) -> np.ndarray:
    """Zeros; raises where it acts for env 2 at its step 1 (in the copy of env 2's worker)."""
    if ((obs[:, 0] == 2) & (obs[:, 1] == 1)).any():
        raise RuntimeError("the policy raised for env 2 at step 1")
    return np.zeros(len(obs), np.int64)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("fuses", "expected"),
    [
        ((1, None, 0, None), "env 2 raised at its step 0"),  # a later worker, an earlier step
        ((None, 2, None, 2), "env 1 raised at its step 2"),  # the same step: the lower env
        ((None, 1, None, None), "the policy raised for env 2 at step 1"),  # the policy acts first
    ],
    ids=["earlier-step", "same-step", "policy-first"],
)
@pytest.mark.parametrize("workers", [2, "inline"], ids=lambda w: f"w={w}")
def test_of_errors_in_several_workers_a_rollout_raises_the_one_a_step_loop_meets_first(
    workers: int | str, fuses: tuple, expected: str
) -> None:
    """Each worker runs its own steps; the error raised is the one stepping the vector env a
    step at a time meets first: the earliest step (its policy call before its env steps), then
    the lowest env, whichever worker reports first."""
    fns = [functools.partial(_FailsAt, i, fuse) for i, fuse in enumerate(fuses)]
    with make(fns, workers) as envs:
        envs.reset(seed=SEED)
        policy, error = (_zeros_unless_env_2_at_step_1, RuntimeError) if "policy" in expected else (_zeros, ValueError)
        with pytest.raises(error, match=expected):
            envs.rollout(4, policy)


@pytest.mark.timeout(60)
def test_worker_killed_mid_rollout_is_worker_died() -> None:
    envs = make(fault_fns(FAULT_N, "exit", "step", FAULT_TARGET, at=4), 2)
    try:
        envs.reset(seed=SEED)
        start = time.monotonic()
        with pytest.raises(WorkerDiedError, match=r"worker 1 \(envs 2\.\.3\) exited with code 3 during `rollout_wait`"):
            envs.rollout(10)
        assert time.monotonic() - start < RAISE_S
        with pytest.raises(WorkerDiedError):
            envs.rollout(10)
    finally:
        start = time.monotonic()
        envs.close()
        assert time.monotonic() - start < 5


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", MODES)
def test_worker_killed_mid_rollout_with_restart_runs_the_rest_again(mode: AutoresetMode, tmp_path: Any) -> None:
    once = str(tmp_path / "died")
    fns = fault_fns(FAULT_N, "exit", "step", FAULT_TARGET, at=4, once=once)
    steps, victims, others = 10, [2, 3], [0, 1]
    with make(fns, 2, mode, on_worker_death="restart") as envs:
        envs.reset(seed=SEED)
        policy = FunctionPolicy(_half_actions)
        got = envs.rollout(steps, policy)
        assert envs.restart_count == 1
        # The restarted group: its first step is the restarted step, as `step` reports it.
        assert got.truncations[0, victims].all() and not got.terminations[0, victims].any()
        assert (got.rewards[0, victims] == 0).all()
        assert got.infos[0]["worker_restarted"][victims].all()
        assert got.infos[0]["_worker_restarted"].tolist() == [False, False, True, True]
        reseeded = [SEED + i + FAULT_N for i in victims]
        fresh_obs = np.stack([FaultEnv(index=i).reset(seed=s)[0] for i, s in zip(victims, reseeded)])
        if mode is AutoresetMode.DISABLED:
            # That step ended their episodes: they wait, unstepped, at the fresh reset's observation.
            assert not got.stepped[1:, victims].any() and (got.rewards[1:, victims] == 0).all()
            np.testing.assert_array_equal(got.last_observations[victims], fresh_obs)
            np.testing.assert_array_equal(got.observations[1:, victims], np.broadcast_to(fresh_obs, (steps - 1, 2, 3)))
            with pytest.raises(vecenv.NeedsResetError, match=r"envs \[(0, 1, )?2, 3\]"):
                envs.rollout(3)
            _reset_ended_then_roll_out(envs, got, victims, policy)
            return
        # Its final observation (SAME_STEP), or the next row (NEXT_STEP): the fresh reset's.
        np.testing.assert_array_equal(got.next_observations()[0, victims], fresh_obs)
        # The other group's envs: untouched, exactly Sync's.
        want = _healthy_reference(got.actions[:, others], others, [SEED + i for i in others], mode)
        for key, value in want.items():
            np.testing.assert_array_equal(getattr(got, key)[:, others], value, err_msg=key)
        # The rest: a rollout of the restarted envs' fresh reset.
        np.testing.assert_array_equal(got.observations[1, victims], fresh_obs)
        fresh = _healthy_reference(got.actions[1:, victims], victims, reseeded, mode)
        for key, value in fresh.items():
            np.testing.assert_array_equal(getattr(got, key)[1:, victims], value, err_msg=key)
        assert envs.rollout(3).num_steps == 3  # and it goes on


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", MODES)
def test_worker_killed_while_idle_before_the_first_rollout_is_reported_as_restarted(mode: AutoresetMode) -> None:
    """Found dead while it is sent its first rollout block (a message nobody waits for): the
    rollout still reports the restarted step in row 0, as when the block already exists."""
    steps, victims = 6, [2, 3]
    with make(healthy_fns(FAULT_N), 2, mode, on_worker_death="restart") as envs:
        envs.reset(seed=SEED)
        before, *_ = envs.step(np.full((FAULT_N, 2), 0.5, np.float32))
        victim = transport_of(envs).processes[1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(5.0)  # dead before the rollout: the worker was idle
        assert victim.exitcode == -signal.SIGKILL
        policy = FunctionPolicy(_half_actions)
        got = envs.rollout(steps, policy)
        assert envs.restart_count == 1
        np.testing.assert_array_equal(got.observations[0], before)  # the old episode's, for every env
        assert got.truncations[0, victims].all() and (got.rewards[0, victims] == 0).all()
        assert got.infos[0]["_worker_restarted"].tolist() == [False, False, True, True]
        reseeded = [SEED + i + FAULT_N for i in victims]
        fresh_obs = np.stack([FaultEnv(index=i).reset(seed=s)[0] for i, s in zip(victims, reseeded)])
        if mode is AutoresetMode.DISABLED:
            assert not got.stepped[1:, victims].any()
            np.testing.assert_array_equal(got.last_observations[victims], fresh_obs)
            _reset_ended_then_roll_out(envs, got, victims, policy)
        else:
            np.testing.assert_array_equal(got.observations[1, victims], fresh_obs)
            np.testing.assert_array_equal(got.next_observations()[0, victims], fresh_obs)
            assert not got.truncations[1:, victims].any()
            assert envs.rollout(3).num_steps == 3  # and it goes on


def _half_actions(observations: Any) -> np.ndarray:
    return np.full((len(observations), 2), 0.5, np.float32)


def _reset_ended_then_roll_out(envs: Any, got: Any, victims: list[int], policy: Any) -> None:
    """DISABLED, after a rollout whose group was restarted (it never ran the rollout): once the
    ended envs are reset, the next rollout with the same policy acts in the replacement too."""
    envs.reset(options={"reset_mask": (got.terminations | got.truncations).any(axis=0)})
    again = envs.rollout(3, policy)
    assert again.stepped[0, victims].all() and (again.actions[0, victims] == 0.5).all()


@pytest.mark.timeout(60)
def test_timeout_then_the_late_reply_is_dropped() -> None:
    fns = fault_fns(FAULT_N, "sleep", "step", FAULT_TARGET, at=3, duration=1.5)
    with make(fns, 2) as envs:
        envs.reset(seed=SEED)
        start = time.monotonic()
        with pytest.raises(vecenv.VecEnvTimeoutError, match=r"`rollout_wait` has timed out after 0.3 second"):
            envs.rollout(6, timeout=0.3)
        assert 0.3 <= time.monotonic() - start < 0.3 + RAISE_S
        with pytest.raises(vecenv.NeedsResetError):
            envs.rollout(6)
        envs.reset(seed=SEED)  # waits for worker 1's late rollout; its reply is dropped
        got = envs.rollout(6)
        want = _healthy_reference(got.actions, range(FAULT_N), [SEED + i for i in range(FAULT_N)])
        for key, value in want.items():
            np.testing.assert_array_equal(getattr(got, key), value, err_msg=key)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", ["sleep", "exit"])
def test_a_fault_in_a_rollout_answered_in_the_done_words_is_reported_as_on_the_pipe(fault: str) -> None:
    """A rollout of envs without infos, whose reply would be posted in the done word: a worker
    that dies in it is a WorkerDiedError within the wait; one that runs late times out, and its
    late reply is dropped before the next call is answered."""
    env_fns = silent_fns(fault_fns(FAULT_N, fault, "step", FAULT_TARGET, at=8, duration=1.5))
    with make(env_fns, 2) as envs:
        envs.reset(seed=SEED)
        envs.rollout(6)  # the block is mapped: the next rollout may be answered in the words
        start = time.monotonic()
        if fault == "exit":
            died = r"worker 1 \(envs 2\.\.3\) exited with code 3 during `rollout_wait`"
            with pytest.raises(WorkerDiedError, match=died):
                envs.rollout(6)
            assert time.monotonic() - start < RAISE_S
            return
        with pytest.raises(vecenv.VecEnvTimeoutError, match=r"`rollout_wait` has timed out after 0.3 second"):
            envs.rollout(6, timeout=0.3)
        assert 0.3 <= time.monotonic() - start < 0.3 + RAISE_S
        done = done_words(envs)
        envs.reset(seed=SEED)  # waits for worker 1's late rollout, answered in its done word
        assert done_words(envs)[1] > done[1], "the late rollout was not answered in the done word"
        got = envs.rollout(6)
        want = _healthy_reference(got.actions, range(FAULT_N), [SEED + i for i in range(FAULT_N)])
        for key, value in want.items():
            np.testing.assert_array_equal(getattr(got, key), value, err_msg=key)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [2, "inline"], ids=lambda w: f"w={w}")
def test_interrupt_while_waiting_leaves_a_usable_vector_env(workers: int | str) -> None:
    fns = healthy_fns(FAULT_N)
    with make(fns, workers) as envs:
        transport = transport_of(envs)
        envs.reset(seed=SEED)
        envs.rollout(5)  # the block is mapped: the interrupt comes while the envs step

        def interrupted(*args: Any) -> Any:
            del transport.poll  # once
            raise KeyboardInterrupt

        transport.poll = interrupted
        with pytest.raises(KeyboardInterrupt):
            envs.rollout(5)
        with pytest.raises(vecenv.NeedsResetError):
            envs.rollout(5)
        envs.reset(seed=SEED)
        got = envs.rollout(5)
        want = _healthy_reference(got.actions, range(FAULT_N), [SEED + i for i in range(FAULT_N)])
        for key, value in want.items():
            np.testing.assert_array_equal(getattr(got, key), value, err_msg=key)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call", ["rollout", "step"])
@pytest.mark.parametrize("workers", [0, 2, "inline"], ids=lambda w: f"w={w}")
def test_an_interrupt_once_the_envs_stepped_refuses_what_follows_until_a_reset(
    call: str, workers: int | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl+C that lands after every reply was taken, while the rollout (or the step) is put
    together: the caller never gets what the envs did, so the next step or rollout raises
    NeedsResetError, as after an interrupt during the wait; after a reset all is Sync's."""
    fns = healthy_fns(FAULT_N)  # (infos at every step: a step's are batched)
    left = [0]

    def interrupted_once(real: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            if left[0]:
                left[0] -= 1
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        return run

    if call == "rollout":
        monkeypatch.setattr(rollouts_module, "_with_plain_ends", interrupted_once(rollouts_module._with_plain_ends))
    else:
        monkeypatch.setattr(InfoMerger, "batch", interrupted_once(InfoMerger.batch))
    actions = np.full((FAULT_N, 2), 0.5, np.float32)
    with make(fns, workers) as envs:
        envs.reset(seed=SEED)
        envs.rollout(2)
        left[0] = 1
        with pytest.raises(KeyboardInterrupt):
            envs.rollout(3) if call == "rollout" else envs.step(actions)
        assert not left[0], "the interrupt did not come where the test meant it to"
        refused = rf"after `{call}(_wait)?` was interrupted \(KeyboardInterrupt\)"
        for again in (lambda: envs.rollout(3), lambda: envs.step(actions)):
            with pytest.raises(vecenv.NeedsResetError, match=refused):
                again()
        envs.reset(seed=SEED)
        got = envs.rollout(5)
    want = _healthy_reference(got.actions, range(FAULT_N), [SEED + i for i in range(FAULT_N)])
    for key, value in want.items():
        np.testing.assert_array_equal(getattr(got, key), value, err_msg=key)


class PathEnv(gym.Env):
    """Keeps the positions it visited in one list, appended to in place and returned in every
    info: a record kept past the step shows later values unless it was copied at the step."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (1,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.path: list[float] = []
        return np.zeros(1), {"path": self.path}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.path.append(float(len(self.path) + 1))
        return np.array([len(self.path)], np.float64), 1.0, len(self.path) == 3, False, {"path": self.path}


class PathAndLockEnv(PathEnv):
    """:class:`PathEnv` whose infos also hold a lock, which no pickle takes."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "lock": LOCK}


LOCK = threading.Lock()


class BoxedPathEnv(PathEnv):
    """:class:`PathEnv` whose info holds its list inside an array of objects, which copying
    the array does not copy."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        obs, info = super().reset(seed=seed, options=options)
        return obs, {"path": _boxed(info["path"])}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {"path": _boxed(info["path"])}


def _boxed(value: Any) -> np.ndarray:
    box = np.empty(1, dtype=object)
    box[0] = value
    return box


@pytest.mark.timeout(60)
def test_rollout_infos_snapshot_the_values_beside_one_that_cannot_be_pickled() -> None:
    """In the parent's own group (nothing pickled), a list beside a lock is still each step's."""
    with make([PathAndLockEnv], 0) as envs:
        envs.reset(seed=0)
        batch = envs.rollout(3, lambda obs: np.zeros(len(obs), np.int64))
    assert [list(batch.infos[t]["path"][0]) for t in range(3)] == [[1.0], [1.0, 2.0], [1.0, 2.0, 3.0]]
    assert all(batch.infos[t]["lock"][0] is LOCK for t in range(3))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("env", [PathEnv, BoxedPathEnv], ids=["list", "list-in-object-array"])
def test_rollout_infos_are_each_steps_own_values(env: type[PathEnv], workers: int, mode: AutoresetMode) -> None:
    """An env that changes a list of its info in place at its next step: each step's infos in
    the rollout hold that step's values, as ``step`` returned them at that step."""
    import copy

    fns = [env, env]
    sync = SyncVectorEnv(fns, autoreset_mode=mode)
    envs = make(fns, workers, mode)
    try:
        sync.reset(seed=0)
        envs.reset(seed=0)
        batch = envs.rollout(7, lambda obs: np.zeros(len(obs), np.int64))
        for t in range(7):
            want = copy.deepcopy(sync.step(batch.actions[t])[4])  # what Sync returned at step t
            assert_same(batch.infos[t], want, f"infos of step {t}")
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
def test_a_rollout_cut_short_after_taking_its_replies_never_steps_ended_envs_silently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under DISABLED a rollout records which envs ended, so that stepping them raises. A
    ``SystemExit`` raised once the replies were taken, while their rows were stored, skipped
    that record: the next step stepped ended envs past their episode's end. It is refused
    with ``NeedsResetError`` until a reset."""
    from tests.helpers.envs import PayEnv
    from vecenv.wire.rollout_buffers import RolloutBuffers

    real = RolloutBuffers.receive

    def receive(self: RolloutBuffers, *args: Any) -> None:
        monkeypatch.setattr(RolloutBuffers, "receive", real)  # once
        raise SystemExit("cut")

    env_fns = [functools.partial(PayEnv, i, horizon=1) for i in range(2)]
    with vecenv.SubprocVectorEnv(
        env_fns, 2, autoreset_mode=AutoresetMode.DISABLED, shared_memory=False, context="fork"
    ) as envs:
        envs.reset(seed=0)
        monkeypatch.setattr(RolloutBuffers, "receive", receive)
        with pytest.raises(SystemExit, match="cut"):
            envs.rollout(1)
        with pytest.raises(vecenv.NeedsResetError, match=r"\(SystemExit\).*reset\(\)"):
            envs.step(np.zeros(2, np.int64))
        envs.reset(seed=1)
        assert envs.rollout(1).truncations.tolist() == [[True, True]]
