"""``vecenv.policies`` without a process: what each policy kind gives a group of envs, and why
the random policy's data cannot depend on how the envs are grouped or on the rollout length."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from vecenv.policies import (
    FunctionPolicy,
    PolicyContext,
    RandomPolicy,
    SB3Policy,
    TorchPolicy,
    WorkerPolicy,
    as_worker_policy,
    policy_seed,
)

pytestmark = pytest.mark.timeout(60)

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTION_SPACES = {
    "discrete": spaces.Discrete(5, start=2),
    "box": spaces.Box(-2.0, 3.0, (2,), np.float32),
    "dict": spaces.Dict(
        {"a": spaces.MultiDiscrete([3, 4]), "b": spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(3)))}
    ),
}


def _context(envs: range, action_space: spaces.Space, seed: int | None = 7) -> PolicyContext:
    return PolicyContext(envs, OBS, action_space, [None if seed is None else seed + i for i in envs])


def _leaves(tree: Any) -> list[np.ndarray]:
    if isinstance(tree, dict):
        return [leaf for value in tree.values() for leaf in _leaves(value)]
    if isinstance(tree, tuple):
        return [leaf for value in tree for leaf in _leaves(value)]
    return [np.asarray(tree)]


def _stream(groups: list[range], space: spaces.Space, steps: int) -> list[np.ndarray]:
    """Each leaf of the actions of every env over ``steps`` steps, ``(steps, envs, ...)``."""
    runners = [RandomPolicy().build(_context(g, space)) for g in groups]
    per_step = []
    for _ in range(steps):
        rows = [_leaves(r.act(None, None)) for r in runners]
        per_step.append([np.concatenate(parts) for parts in zip(*rows)])
    return [np.stack(leaf) for leaf in zip(*per_step)]


@pytest.mark.parametrize("kind", list(ACTION_SPACES))
def test_random_actions_do_not_depend_on_the_grouping_and_lie_in_the_space(kind: str) -> None:
    space = ACTION_SPACES[kind]
    steps = 2100  # past two refills of every block
    one = _stream([range(6)], space, steps)
    for groups in ([range(3), range(3, 6)], [range(1), range(1, 2), range(2, 6)]):
        for a, b in zip(one, _stream(groups, space, steps), strict=True):
            np.testing.assert_array_equal(a, b)
    runner = RandomPolicy().build(_context(range(6), space))
    batched = gym.vector.utils.batch_space(space, 6)
    for _ in range(50):
        assert batched.contains(runner.act(None, None))
    assert all(len(np.unique(leaf)) > 1 for leaf in one), "actions must vary"


def test_random_actions_of_an_env_follow_its_seed_only() -> None:
    space = ACTION_SPACES["box"]
    alone = RandomPolicy().build(PolicyContext(range(1), OBS, space, [9]))
    among = RandomPolicy().build(PolicyContext(range(3), OBS, space, [4, 9, 11]))
    for _ in range(100):
        np.testing.assert_array_equal(alone.act(None, None)[0], among.act(None, None)[1])
    unseeded = [RandomPolicy().build(_context(range(2), space, seed=None)).act(None, None) for _ in range(2)]
    assert not np.array_equal(unseeded[0], unseeded[1])
    assert policy_seed(None) is None and policy_seed(3) != policy_seed(4) and policy_seed(3) == policy_seed(3)


def test_reseed_restarts_one_env_and_inactive_envs_keep_their_place() -> None:
    space = ACTION_SPACES["discrete"]
    runner = RandomPolicy().build(_context(range(3), space))
    fresh = RandomPolicy().build(_context(range(3), space))
    first = [runner.act(None, None) for _ in range(5)]
    runner.reseed(1, 8)  # env 1 was reset with seed 8, as it was at first
    again = [runner.act(None, None) for _ in range(5)]
    np.testing.assert_array_equal(np.array(again)[:, 1], np.array(first)[:, 1])
    assert not np.array_equal(np.array(again)[:, 0], np.array(first)[:, 0])
    # Envs left out (active False) draw nothing: their next action is the one they would have had.
    expected = [fresh.act(None, None) for _ in range(3)]
    other = RandomPolicy().build(_context(range(3), space))
    other.act(None, None)
    other.act(None, np.array([True, False, True]))
    third = other.act(None, None)
    assert third[1] == expected[1][1] and third[0] == expected[2][0]


def _double(observations: np.ndarray) -> np.ndarray:
    return (observations[:, 0] > 0).astype(np.int64)


def test_function_policy_travels_with_cloudpickle_and_calls_on_the_rows() -> None:
    policy = FunctionPolicy(lambda obs: obs.sum(axis=1) > 0, name="sign")
    copy = pickle.loads(pickle.dumps(policy))
    runner = copy.build(_context(range(2), spaces.Discrete(2)))
    assert runner.act(np.array([[1.0, 0, 0], [-1.0, 0, 0]]), None).tolist() == [True, False]
    assert copy.name == "sign" and FunctionPolicy(_double).name == "tests.engine.test_policies:_double"
    with pytest.raises(TypeError, match="has no weights"):
        copy.weights()
    with pytest.raises(TypeError, match="must be callable"):
        FunctionPolicy(3)  # type: ignore[arg-type]


def test_torch_policy_copies_the_module_and_reads_weights_from_the_original() -> None:
    torch = pytest.importorskip("torch")
    module = torch.nn.Linear(3, 2)
    policy = TorchPolicy(module)
    runner = cloudpickle.loads(cloudpickle.dumps(policy)).build(_context(range(2), spaces.Box(-9, 9, (2,))))
    obs = np.ones((2, 3), np.float32)
    with torch.no_grad():
        want = module(torch.as_tensor(obs)).numpy()
        module.weight.add_(1.0)
    np.testing.assert_array_equal(runner.act(obs, None), want)  # the copy kept the old weights
    runner.load_weights(policy.weights())
    with torch.no_grad():
        np.testing.assert_array_equal(runner.act(obs, None), module(torch.as_tensor(obs)).numpy())
    with pytest.raises(TypeError, match="original module"):
        pickle.loads(pickle.dumps(policy)).weights()
    assert isinstance(as_worker_policy(module), TorchPolicy)


@pytest.mark.parametrize("kind", ["torch", "sb3"])
@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_weights_of_a_copy_name_the_call_and_where_to_make_it(kind: str, how: str) -> None:
    """A copy (a worker's, or one made by pickling or copying) holds no module or model: the
    error says which call failed, on what, and to call it on the original."""
    if kind == "torch":
        torch = pytest.importorskip("torch")
        policy: Any = TorchPolicy(torch.nn.Linear(3, 2), name="mine")
        cls, original = "TorchPolicy", "module"
    else:
        sb3 = pytest.importorskip("stable_baselines3")
        policy = SB3Policy(sb3.PPO("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu"), name="mine")
        cls, original = "SB3Policy", "model"
    copied = {"pickle": lambda p: pickle.loads(pickle.dumps(p)), "copy": copy.copy, "deepcopy": copy.deepcopy}[how]
    assert policy.weights() is not None
    with pytest.raises(TypeError, match=rf"^`{cls}\.weights\(\)` was called on a copy of policy mine .*") as info:
        copied(policy).weights()
    assert f"holds no {original}" in str(info.value) and "call it on the policy made from it" in str(info.value)


def test_torch_policy_hands_float_observations_over_in_the_modules_dtype() -> None:
    """float64 observations (MuJoCo's) reach a float32 module as float32, as CleanRL's
    ``torch.Tensor(obs)`` gives them (torch refused the float64 batch); a float64 module gets
    them as they are, and integer observations (indices for an embedding) stay integers."""
    torch = pytest.importorskip("torch")
    context = _context(range(2), spaces.Box(-9, 9, (2,)))
    obs = np.array([[0.1, -2.0, 3.3], [1.0, 0.5, -0.25]], np.float64)
    module = torch.nn.Linear(3, 2)
    with torch.no_grad():
        want = module(torch.Tensor(obs)).numpy()
    np.testing.assert_array_equal(TorchPolicy(module).build(context).act(obs, None), want)
    double = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        want = double(torch.as_tensor(obs)).numpy()
    assert want.dtype == np.float64
    np.testing.assert_array_equal(TorchPolicy(double).build(context).act(obs, None), want)
    embed = torch.nn.Sequential(torch.nn.Embedding(5, 2), torch.nn.Flatten())
    indices = np.array([[0, 4, 2], [1, 1, 3]], np.int64)
    with torch.no_grad():
        want = embed(torch.as_tensor(indices)).numpy()
    np.testing.assert_array_equal(TorchPolicy(embed).build(context).act(indices, None), want)


def test_sb3_policy_loads_the_saved_model_and_samples_reproducibly() -> None:
    sb3 = pytest.importorskip("stable_baselines3")
    model = sb3.PPO("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu")
    obs = np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32)
    deterministic = SB3Policy(model, deterministic=True).build(_context(range(4), spaces.Discrete(2)))
    actions, extras = deterministic.act(obs, None)
    np.testing.assert_array_equal(actions, model.predict(obs, deterministic=True)[0])
    import torch

    # An actor-critic model also gives the log-probability of each action and the value.
    with torch.no_grad():
        values, log_prob, _ = model.policy.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    np.testing.assert_allclose(extras["log_prob"], log_prob.numpy(), rtol=1e-6)
    np.testing.assert_allclose(extras["value"], values.numpy().reshape(-1), rtol=1e-6)
    assert extras["log_prob"].dtype == np.float32 and extras["value"].shape == (4,)
    stochastic = pickle.loads(pickle.dumps(SB3Policy(model)))
    runs = [
        [stochastic.build(_context(range(4), spaces.Discrete(2))).act(obs, None)[0] for _ in range(3)] for _ in range(2)
    ]
    np.testing.assert_array_equal(np.array(runs[0]), np.array(runs[1]))

    state = torch.get_rng_state()
    stochastic.build(_context(range(4), spaces.Discrete(2))).act(obs, None)
    assert torch.equal(torch.get_rng_state(), state), "the process's generator is left as it was"
    assert isinstance(as_worker_policy(model), SB3Policy)


class _AnyActionEnv(gym.Env[np.ndarray, Any]):
    """A 3-float observation and any action space: models of every action distribution."""

    observation_space = spaces.Box(-1, 1, (3,), np.float32)

    def __init__(self, action_space: spaces.Space) -> None:
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(3, np.float32), 0.0, False, False, {}


def test_a_sampling_sb3_policy_gives_each_env_the_same_actions_in_any_group() -> None:
    """SB3 samples a batch from one generator, so an env's sampled action depended on how
    many envs shared its copy and where it was among them. Each env now samples from its own
    stream: split into groups of 1, 3 and 2 envs, every env gets the same actions as in one
    group of 6, for every family of SB3's action distributions and DQN's exploration."""
    sb3 = pytest.importorskip("stable_baselines3")
    dqn = sb3.DQN("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu", buffer_size=100)
    dqn.exploration_rate = 0.5
    models = {
        "categorical": sb3.PPO("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu"),
        "gaussian": sb3.A2C("MlpPolicy", gym.make("Pendulum-v1"), seed=0, device="cpu"),
        "multi-categorical": sb3.PPO("MlpPolicy", _AnyActionEnv(spaces.MultiDiscrete([3, 4])), seed=0, device="cpu"),
        "bernoulli": sb3.PPO("MlpPolicy", _AnyActionEnv(spaces.MultiBinary(3)), seed=0, device="cpu"),
        "squashed gaussian": sb3.SAC("MlpPolicy", gym.make("Pendulum-v1"), seed=0, device="cpu", buffer_size=100),
        "epsilon-greedy": dqn,
    }
    groups = [range(0, 1), range(1, 4), range(4, 6)]
    for family, model in models.items():
        policy = SB3Policy(model)
        obs = np.random.default_rng(1).normal(size=(6, *model.observation_space.shape)).astype(np.float32)

        def build(envs: range, model: Any = model, policy: SB3Policy = policy) -> Any:
            seeds = [10 + i for i in envs]
            return policy.build(PolicyContext(envs, model.observation_space, model.action_space, seeds))

        def actions(runner: Any, rows: Any, active: np.ndarray | None = None) -> np.ndarray:
            output = runner.act(rows, active)
            return np.asarray(output[0] if isinstance(output, tuple) else output)

        whole, parts = build(range(6)), [build(envs) for envs in groups]
        steps = [actions(whole, obs) for _ in range(12)]
        for t, want in enumerate(steps):
            got = np.concatenate([actions(part, obs[envs.start : envs.stop]) for part, envs in zip(parts, groups)])
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{family}, step {t}")
        assert any(not np.array_equal(steps[0], later) for later in steps[1:]), f"{family}: nothing sampled"
        # An env left out of a step (``active``) keeps its stream where it was.
        runner = build(range(6))
        actions(runner, obs, np.array([False, True, True, True, True, True]))
        np.testing.assert_allclose(actions(runner, obs)[0], steps[0][0], rtol=1e-6, err_msg=family)
    # A copy that takes over after k steps (the collector's, after rollouts in the workers)
    # skips them: its next actions are those of a copy that took them.
    for family in ("categorical", "gaussian"):
        model = models[family]
        obs = np.random.default_rng(1).normal(size=(6, *model.observation_space.shape)).astype(np.float32)
        stepped, skipped = (
            SB3Policy(model).build(PolicyContext(range(6), model.observation_space, model.action_space, list(range(6))))
            for _ in range(2)
        )
        for _ in range(300):  # more than a block of draws
            stepped.act(obs, None)
        skipped.skip(300)
        np.testing.assert_array_equal(stepped.act(obs, None)[0], skipped.act(obs, None)[0], err_msg=family)
    # DQN: half the actions explore, uniform over two actions: a quarter differ from the greedy ones.
    obs = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    runner = SB3Policy(dqn).build(PolicyContext(range(6), dqn.observation_space, dqn.action_space, list(range(6))))
    explored = np.array([runner.act(obs, None) for _ in range(200)]) != dqn.predict(obs, deterministic=True)[0]
    assert 0.15 < explored.mean() < 0.35, "each env explores on its own: a quarter of the actions differ"
    assert not all(row.all() or not row.any() for row in explored), "not one decision for the whole batch"


class _ImageEnv(gym.Env[np.ndarray, np.int64]):
    """A channel-last uint8 image env: SB3 gives its models the channel-first space."""

    observation_space = spaces.Box(0, 255, (36, 36, 3), np.uint8)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros((36, 36, 3), np.uint8), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros((36, 36, 3), np.uint8), 0.0, True, False, {}


def test_sb3_policy_refuses_a_model_made_for_other_spaces() -> None:
    """A model on spaces it was not trained on failed only in the workers, with SB3's bare
    ValueError (or a one-hot's RuntimeError for a Discrete of another size, or nothing at all
    while the observations stayed below it): it is refused in the parent, naming both spaces."""
    sb3 = pytest.importorskip("stable_baselines3")
    from vecenv.errors import VecEnvError

    def outputs(model: Any, observation_space: spaces.Space, action_space: spaces.Space) -> Any:
        context = PolicyContext(range(2), observation_space, action_space, [None, None])
        observations = np.stack([observation_space.sample() for _ in range(2)])
        return SB3Policy(model, deterministic=True).outputs(context, observations)

    cartpole = sb3.PPO("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu")
    assert {name for name, *_ in outputs(cartpole, cartpole.observation_space, cartpole.action_space).extras} == {
        "log_prob",
        "value",
    }
    pendulum = gym.make("Pendulum-v1").observation_space
    with pytest.raises(VecEnvError, match=r"policy sb3:PPO \(deterministic\) was made for the observation space Box"):
        outputs(cartpole, pendulum, cartpole.action_space)
    with pytest.raises(ValueError, match=r"the envs' action space is Discrete\(3\)"):
        outputs(cartpole, cartpole.observation_space, spaces.Discrete(3))
    frozen = sb3.PPO("MlpPolicy", gym.make("FrozenLake-v1"), seed=0, device="cpu")
    with pytest.raises(
        VecEnvError, match=r"observation space Discrete\(16\), the envs' observation space is Discrete\(64\)"
    ):
        outputs(frozen, spaces.Discrete(64), frozen.action_space)
    # A channel-last image env's model holds the channel-first space: the envs' own fits it.
    image = sb3.PPO("CnnPolicy", _ImageEnv(), seed=0, device="cpu", n_steps=8, batch_size=8)
    assert image.observation_space.shape == (3, 36, 36)
    assert len(outputs(image, _ImageEnv.observation_space, _ImageEnv.action_space).extras) == 2


def test_sb3_policy_refuses_models_whose_predict_is_not_how_they_act() -> None:
    """A model trained on VecNormalize'd observations: predict does not normalise, so its copies
    acted silently on raw observations. Refused when it is passed, as is a recurrent model."""
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from vecenv.errors import VecEnvError

    normalised = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]))
    with pytest.raises(VecEnvError, match=r"this PPO was trained on observations normalised by its VecNormalize"):
        SB3Policy(sb3.PPO("MlpPolicy", normalised, seed=0, device="cpu"))
    rewards_only = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]), norm_obs=False)
    assert SB3Policy(sb3.PPO("MlpPolicy", rewards_only, seed=0, device="cpu")).name == "sb3:PPO"


def test_sb3_policy_refuses_a_recurrent_model() -> None:
    """sb3-contrib's RecurrentPPO failed in the workers with a bare TypeError (forward's missing
    LSTM states). vecenv-collect's sb3: policies refuse it by the same test."""
    from types import SimpleNamespace

    from vecenv.errors import PolicySpecError
    from vecenv.integrations.sb3.saved_model import SavedModelPolicy
    from vecenv.policies import sb3_is_recurrent

    fake = SimpleNamespace(policy=SimpleNamespace(lstm_hidden_state_shape=(1, 1, 64)))
    assert sb3_is_recurrent(fake) and not sb3_is_recurrent(SimpleNamespace(policy=SimpleNamespace()))
    with pytest.raises(
        PolicySpecError, match=r"^--policy sb3:m.zip \(RecurrentPPO\): expected a model whose policy acts"
    ):
        SavedModelPolicy(fake, "m.zip", "RecurrentPPO", False)
    pytest.importorskip("stable_baselines3")
    contrib = pytest.importorskip("sb3_contrib")
    from vecenv.errors import VecEnvError

    model = contrib.RecurrentPPO("MlpLstmPolicy", gym.make("CartPole-v1"), seed=0, device="cpu")
    with pytest.raises(VecEnvError, match="got a RecurrentPPO with the recurrent policy RecurrentActorCriticPolicy"):
        SB3Policy(model)


def test_sb3_policy_gives_the_unclipped_action_its_log_prob_is_of() -> None:
    """On a Box, the copies clip the sampled action for the envs, but SB3 records the log-prob
    of the action before clipping (and its PPO stores that one): the unclipped action is an
    extra, so that a learner's evaluate_actions gives back the recorded log-prob. Checked
    against SB3's own distribution, each env's noise drawn from its own stream."""
    sb3 = pytest.importorskip("stable_baselines3")
    import torch

    model = sb3.PPO("MlpPolicy", gym.make("MountainCarContinuous-v0"), seed=0, device="cpu")
    obs = np.random.default_rng(0).normal(size=(16, 2)).astype(np.float32)
    context = PolicyContext(range(16), model.observation_space, model.action_space, [7 + i for i in range(16)])
    actions, extras = SB3Policy(model).build(context).act(obs, None)
    # Env i's noise: the first normal of its own stream, seeded from its reset seed 7 + i.
    eps = np.array([np.random.default_rng(policy_seed(7 + i)).standard_normal(1) for i in range(16)])
    with torch.no_grad():
        normal = model.policy.get_distribution(torch.as_tensor(obs)).distribution
        sampled = normal.loc + torch.as_tensor(eps, dtype=torch.float32) * normal.scale
        log_prob = normal.log_prob(sampled).sum(-1)
        values = model.policy.predict_values(torch.as_tensor(obs))
    sampled = sampled.numpy()
    assert (np.abs(sampled) > 1).any(), "some actions leave the Box, or nothing is clipped"
    np.testing.assert_array_equal(extras["unclipped_actions"], sampled)
    np.testing.assert_array_equal(actions, np.clip(sampled, -1, 1))  # what the envs receive
    np.testing.assert_array_equal(extras["log_prob"], log_prob.numpy())
    np.testing.assert_array_equal(extras["value"], values.numpy().reshape(-1))
    with torch.no_grad():
        _, relearned, _ = model.policy.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(sampled))
        _, of_clipped, _ = model.policy.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    np.testing.assert_allclose(relearned.numpy(), extras["log_prob"], rtol=1e-5, atol=1e-6)
    assert not np.allclose(of_clipped.numpy(), extras["log_prob"]), "the clipped action's log-prob is another"
    # A Discrete space clips nothing: no such extra.
    cartpole = sb3.PPO("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu")
    assert set(
        SB3Policy(cartpole).build(_context(range(2), spaces.Discrete(2))).act(obs[:2, :1].repeat(4, 1), None)[1]
    ) == {
        "log_prob",
        "value",
    }


def test_sb3_gsde_noise_follows_the_copys_seed_and_weights() -> None:
    """gSDE explores with a noise matrix that SB3 samples when the model is loaded, from the
    process's generator (which load also reseeds with the model's seed, the parent's too): the
    copies' noise came from neither the envs' seeds nor the weights' log_std. It is drawn from
    each env's own stream when it is seeded and when new weights arrive."""
    sb3 = pytest.importorskip("stable_baselines3")
    import random

    import torch

    model = sb3.PPO(
        "MlpPolicy",
        gym.make("MountainCarContinuous-v0"),
        device="cpu",
        use_sde=True,
        policy_kwargs={"log_std_init": -3.0},
    )
    obs = np.random.default_rng(0).normal(size=(8, 2)).astype(np.float32)

    def context(seed: int) -> PolicyContext:
        return PolicyContext(range(8), model.observation_space, model.action_space, [seed + i for i in range(8)])

    def unclipped(runner: Any) -> np.ndarray:
        return runner.act(obs, None)[1]["unclipped_actions"]

    policy = SB3Policy(model)
    runs = []
    for burn in (1, 5):
        torch.rand(burn)  # the process's generator elsewhere: the copy's noise does not follow it
        runs.append(unclipped(policy.build(context(3))))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], unclipped(policy.build(context(4)))), "another seed, other noise"
    runner = policy.build(context(3))
    runner.reseed(0, 4)  # env 0's noise follows its own seed; the others keep theirs
    other = unclipped(policy.build(context(4)))
    np.testing.assert_array_equal(unclipped(runner), np.concatenate([other[:1], runs[0][1:]]))
    for i in range(1, 8):
        runner.reseed(i, 4 + i)
    np.testing.assert_array_equal(unclipped(runner), other)

    mean = unclipped(SB3Policy(model, deterministic=True).build(context(3)))
    before = np.abs(unclipped(runner) - mean).max()
    with torch.no_grad():
        model.policy.log_std.fill_(0.0)  # as training moves it: exp(3) times the noise
    runner.load_weights(pickle.loads(pickle.dumps(policy.weights())))
    assert np.abs(unclipped(runner) - mean).max() > 5 * before, "the noise is scaled by the new log_std"

    # Loading a seeded model in a copy leaves the process's generators as they were.
    seeded = SB3Policy(sb3.PPO("MlpPolicy", gym.make("MountainCarContinuous-v0"), seed=0, device="cpu", use_sde=True))
    torch.manual_seed(123), np.random.seed(123), random.seed(123)
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    seeded.build(context(3)).act(obs, None)
    assert torch.equal(torch.get_rng_state(), states[0]) and np.array_equal(np.random.get_state()[1], states[1])
    assert random.getstate() == states[2]


def test_sb3_policy_weights_carry_the_exploration_rate() -> None:
    """DQN's predict explores with the model's exploration_rate, which training changes: new
    weights bring it along, so the copies explore as the trained model does."""
    sb3 = pytest.importorskip("stable_baselines3")
    model = sb3.DQN("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu", buffer_size=100)
    assert model.exploration_rate == 0.0  # before any training: greedy
    policy = SB3Policy(model)
    runner = policy.build(PolicyContext(range(8), model.observation_space, model.action_space, [0] * 8))
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    greedy = model.predict(obs, deterministic=True)[0]
    assert all(np.array_equal(runner.act(obs, None), greedy) for _ in range(5))
    model.exploration_rate = 1.0  # as learn's schedule starts
    runner.load_weights(pickle.loads(pickle.dumps(policy.weights())))
    actions = np.array([runner.act(obs, None) for _ in range(50)])
    assert 0.3 < np.mean(actions != greedy) < 0.7, "uniform actions: half of them differ from the greedy ones"
    # A plain state dict (update_policy_weights(state_dict)) still loads, the rate as it was.
    runner.load_weights(policy.check_weights(model.policy.state_dict()))
    assert np.mean(np.array([runner.act(obs, None) for _ in range(50)]) != greedy) > 0.3


class _Greedy:
    """A policy written as a class, to be made once and then called on the rows."""

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        return np.zeros(len(observations), np.int64)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("greedy", ValueError, "got 'greedy'"),
        (3, TypeError, "got 3"),
        (None, TypeError, "got None"),
        # A class (the module's, the policy's) instead of an instance: it was called on the rows.
        (RandomPolicy, TypeError, r"got the class RandomPolicy: pass an instance of it \(RandomPolicy\(...\)\)"),
        (_Greedy, TypeError, r"got the class _Greedy: pass an instance of it \(_Greedy\(...\)\)"),
    ],
)
def test_as_worker_policy_refuses_what_it_cannot_run(value: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        as_worker_policy(value)
    assert isinstance(as_worker_policy("random"), RandomPolicy)
    assert RandomPolicy() == RandomPolicy() and isinstance(as_worker_policy(RandomPolicy()), WorkerPolicy)


def test_skip_leaves_the_streams_where_as_many_steps_would() -> None:
    space = ACTION_SPACES["box"]
    stepped, skipped = (RandomPolicy().build(_context(range(3), space)) for _ in range(2))
    for steps in (1, 700, 1500):
        for _ in range(steps):
            stepped.act(None, None)
        skipped.skip(steps)
        np.testing.assert_array_equal(stepped.act(None, None), skipped.act(None, None))
