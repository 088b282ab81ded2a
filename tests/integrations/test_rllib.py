"""RLlib's EnvRunners over vecenv (``vecenv.integrations.rllib``), on a real local Ray.

RLlib (``ray[rllib]``) pins its own Gymnasium, so these tests run in a venv of
``.[test-rllib]`` (docs/rllib.md, "Tests"), not in the ``.[test]`` one: the tests that need
RLlib are marked ``rllib``, and ``conftest.py`` deselects them where the Gymnasium is not the
one RLlib pins. The differential test trains PPO for a few iterations twice with one seed, once
with RLlib's own ``SYNC`` vectorization and once with vecenv's workers inside the EnvRunner, and
compares every sampled episode array.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from vecenv.integrations import rllib as vecenv_rllib
from vecenv.integrations.rllib import EnvCreator, RLlibConfigError

try:  # the Ray fixtures need Ray (in both venvs); the creator tests need neither
    from tests.helpers.ray_sessions import _ray_sessions, ray_local  # noqa: F401
except pytest.skip.Exception:
    pass

#: The tests that need RLlib: conftest.py deselects them where the Gymnasium is not RLlib's.
needs_rllib = pytest.mark.rllib


# -- the creator, without Ray ------------------------------------------------------------------------


def test_creator_makes_num_envs_envs_with_the_env_config_as_env_kwargs() -> None:
    creator = pickle.loads(pickle.dumps(EnvCreator("CartPole-v1", num_workers=2, batch_size=2)))
    envs = creator({"num_envs": 4, "max_episode_steps": 7})
    try:
        assert isinstance(envs, vecenv.SubprocVectorEnv)
        assert envs.num_envs == 4 and envs.num_workers == 2
        assert envs.batch_size == 2  # make_kwargs reached make
        envs.reset(seed=0)
        for _ in range(7):  # every episode ends at the 7th step: the env config reached gym.make
            _, _, terminations, truncations, _ = envs.step(np.zeros(4, dtype=np.int64))
        assert (terminations | truncations).all()
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_the_env_config_overrides_env_kwargs_given_by_name() -> None:
    """An evaluation config may change an env kwarg the creator was registered with, given by
    name or in env_kwargs."""
    for creator in (
        EnvCreator("Pendulum-v1", 1, g=1.0, max_episode_steps=100, batch_size=1),
        EnvCreator("Pendulum-v1", 1, env_kwargs={"g": 1.0, "max_episode_steps": 100}, batch_size=1),
    ):
        with creator({"num_envs": 1, "g": 4.0}) as envs:
            assert envs.batch_size == 1
            assert envs.get_attr("g") == (4.0,)
            assert envs.get_attr("spec")[0].max_episode_steps == 100


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["argument", "vector_kwargs", "spec"])
def test_an_env_runner_with_fewer_envs_than_workers_starts_one_worker_per_env(where: str) -> None:
    if where == "argument":
        creator = EnvCreator("CartPole-v1", num_workers=3)
    elif where == "vector_kwargs":
        creator = EnvCreator("CartPole-v1", vector_kwargs={"num_workers": 3})
    else:  # a vector env's spec: its 5 envs do not count, RLlib gives the number
        with vecenv.make("CartPole-v1", 5, 3, context="fork") as made:
            creator = EnvCreator(made.spec)
    with creator({"num_envs": 2}) as envs:  # an evaluation EnvRunner with 2 envs
        assert envs.num_envs == 2 and envs.num_workers == 2
        envs.reset(seed=0)
    with creator({"num_envs": 5}) as envs:
        assert envs.num_workers == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"autoreset_mode": "SameStep"},
        {"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
        {"vector_kwargs": {"autoreset_mode": "SameStep"}},
        {"copy": False},
        {"vector_kwargs": {"copy": False}},
    ],
)
def test_creator_refuses_settings_under_which_rllib_records_wrong_episodes(kwargs: dict[str, Any]) -> None:
    with pytest.raises(RLlibConfigError, match="autoreset mode is NEXT_STEP|copy=False"):
        EnvCreator("CartPole-v1", **kwargs)
    spec = gym.spec("CartPole-v1")  # the same settings carried by a vector env's spec
    vector_kwargs = kwargs.get("vector_kwargs", kwargs)
    carried = dataclasses.replace(spec, kwargs={"vectorization_mode": "vecenv", "vector_kwargs": vector_kwargs})
    with pytest.raises(RLlibConfigError, match="autoreset mode is NEXT_STEP|copy=False"):
        EnvCreator(carried)
    EnvCreator("CartPole-v1", autoreset_mode="NextStep", copy=True)  # what RLlib reads: accepted


@pytest.mark.timeout(60)
def test_num_workers_is_read_from_one_place() -> None:
    """Given as the argument and in the creator's own vector_kwargs: refused at once, not in the
    EnvRunner; a spec's num_workers yields to the argument."""
    with pytest.raises(vecenv.errors.ArgumentTypeError, match="`num_workers` given twice, as 1 and in `vector_kwargs`"):
        EnvCreator("CartPole-v1", 1, vector_kwargs={"num_workers": 3})
    with vecenv.make("CartPole-v1", 3, 3, context="fork") as made:
        creator = EnvCreator(made.spec, num_workers=1)
    with creator({"num_envs": 3}) as envs:
        assert envs.num_envs == 3 and envs.num_workers == 1


def test_creator_refuses_a_single_env_with_the_setting_to_change() -> None:
    with pytest.raises(RLlibConfigError, match="gym_env_vectorize_mode='vector_entry_point'") as info:
        EnvCreator("CartPole-v1")({"some_kwarg": 1})
    assert "some_kwarg" in str(info.value) and isinstance(info.value, vecenv.errors.VecEnvError)
    with pytest.raises(vecenv.errors.ArgumentTypeError, match="num_envs_per_env_runner"):
        EnvCreator("CartPole-v1", num_envs=8)


def test_importing_the_integration_imports_no_ray() -> None:
    """Ray is imported by register_env only (a plain vecenv user pays nothing for it)."""
    code = "import sys; import vecenv.integrations.rllib; assert 'ray' not in sys.modules, 'ray imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("missing", ["ray", "ray.tune"])
def test_register_env_without_rllib_names_the_extra(missing: str) -> None:
    """Without Ray, or with the Ray of the ray extra (no Tune, no RLlib), register_env says what
    to install: it raised ModuleNotFoundError, or Ray's ImportError naming ray[tune]."""
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "import vecenv.errors\nfrom vecenv.integrations import rllib\n"
        "try:\n    rllib.register_env('vecenv-CartPole', 'CartPole-v1')\n"
        "except vecenv.errors.MissingDependencyError as e:\n    print(e)\n"
        "else:\n    raise SystemExit('no error')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True).stdout
    assert out.count("\n") == 1 and "register_env needs RLlib: pip install 'vecenv[rllib]'" in out, out


# -- RLlib ------------------------------------------------------------------------------------------


@pytest.fixture
def rllib(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A connected local Ray, and RLlib's PPO module."""
    from ray.rllib.algorithms import ppo

    request.getfixturevalue("ray_local")
    yield ppo


#: Episode arrays sampled by the local EnvRunner, appended by ``_record`` (it runs in this process).
RECORDED: list[list[dict[str, Any]]] = []


def _record(*, samples: list[Any], **_: Any) -> None:
    """``on_sample_end``: keep every sampled episode chunk's arrays, in the order returned."""
    RECORDED.append(
        [
            {
                "observations": np.asarray(episode.get_observations()),
                "actions": np.asarray(episode.get_actions()),
                "rewards": np.asarray(episode.get_rewards()),
                "terminated": episode.is_terminated,
                "truncated": episode.is_truncated,
            }
            for episode in samples
        ]
    )


def _ppo_config(ppo: Any, env: str | Callable, mode: str, *, num_envs: int = 4, num_env_runners: int = 0) -> Any:
    return (
        ppo.PPOConfig()
        .environment(env)
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=num_envs,
            gym_env_vectorize_mode=mode,
            rollout_fragment_length=50,
        )
        .training(train_batch_size_per_learner=num_envs * 50, minibatch_size=100, num_epochs=2)
        .callbacks(on_sample_end=_record)
        .debugging(seed=7)
    )


def _sampled(config: Any, iterations: int) -> tuple[list[list[dict[str, Any]]], list[float]]:
    """Train ``iterations`` times; the episodes each sample gave, and the learner's losses."""
    RECORDED.clear()
    algo = config.build_algo()
    losses = []
    try:
        for _ in range(iterations):
            result = algo.train()
            losses.append(float(result["learners"]["default_policy"]["total_loss"]))
    finally:
        algo.stop()
    return list(RECORDED), losses


@needs_rllib
def test_ppo_samples_the_episodes_of_rllibs_sync_vectorization(rllib: Any) -> None:
    """Same seed: the same episodes in every iteration (so the same updates), vecenv or SYNC."""
    vecenv_rllib.register_env("vecenv-CartPole-test", "CartPole-v1", num_workers=2)
    sync, sync_losses = _sampled(_ppo_config(rllib, "CartPole-v1", "sync"), 3)
    ours, our_losses = _sampled(_ppo_config(rllib, "vecenv-CartPole-test", "vector_entry_point"), 3)
    assert len(sync) == 3 and sum(len(chunks) for chunks in sync) > 12  # episodes ended and began
    assert [len(chunks) for chunks in ours] == [len(chunks) for chunks in sync]
    for iteration, (theirs, mine) in enumerate(zip(sync, ours, strict=True)):
        for index, (a, b) in enumerate(zip(theirs, mine, strict=True)):
            for key in a:
                np.testing.assert_array_equal(b[key], a[key], err_msg=f"iteration {iteration}, episode {index}: {key}")
    assert our_losses == sync_losses


@needs_rllib
def test_each_remote_env_runner_steps_a_vecenv(rllib: Any) -> None:
    """``num_env_runners=1``: the EnvRunner actor holds a vecenv vector env, and its samples are
    those of RLlib's SYNC EnvRunner with the same seed."""
    vecenv_rllib.register_env("vecenv-CartPole-remote", "CartPole-v1", num_workers=1)

    def sample(config: Any) -> tuple[str, list[list[np.ndarray]]]:
        algo = config.build_algo()
        try:
            (kind, episodes), *_ = algo.env_runner_group.foreach_env_runner(
                lambda runner: (
                    type(runner.env.unwrapped).__name__,
                    [[np.asarray(e.get_observations()), np.asarray(e.get_actions())] for e in runner.sample()],
                ),
                local_env_runner=False,
            )
        finally:
            algo.stop()
        return kind, episodes

    theirs = sample(_ppo_config(rllib, "CartPole-v1", "sync", num_env_runners=1))
    ours = sample(_ppo_config(rllib, "vecenv-CartPole-remote", "vector_entry_point", num_env_runners=1))
    assert (theirs[0], ours[0]) == ("SyncVectorEnv", "SubprocVectorEnv")
    assert len(ours[1]) == len(theirs[1]) >= 4
    for mine, their in zip(ours[1], theirs[1], strict=True):
        for b, a in zip(mine, their, strict=True):
            np.testing.assert_array_equal(b, a)


@needs_rllib
@pytest.mark.timeout(300)
# RLlib registers each local EnvRunner's creator under one Gymnasium id, again in every test.
@pytest.mark.filterwarnings("ignore:.*Overriding environment rllib-single-agent-env-v0")
def test_a_dead_worker_reaches_algo_train_as_worker_died_error(rllib: Any) -> None:
    """A vecenv worker that exits in ``step``: ``algo.train()`` raises Tune's copy of the
    EnvRunner's error with the ``WorkerDiedError`` as its cause (it raised a ``TypeError`` from
    copying the error instead), and ``algo.stop()`` leaves no worker behind (conftest checks)."""
    spec = gym.envs.registration.EnvSpec(
        "vecenv-rllib-dies-v0",
        entry_point="tests.helpers.faults:FaultEnv",
        kwargs={"fault": "exit", "where": "step", "target": 0, "at": 3},
    )
    vecenv_rllib.register_env("vecenv-dies-test", spec, num_workers=1)
    algo = _ppo_config(rllib, "vecenv-dies-test", "vector_entry_point", num_envs=2).build_algo()
    try:
        with pytest.raises(Exception) as info:
            algo.train()
    finally:
        algo.stop()
    chain = [info.value]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    died = [error for error in chain if isinstance(error, vecenv.errors.WorkerDiedError)]
    assert died, [f"{type(error).__name__}: {error}" for error in chain]
    assert died[0].exitcode == 3 and died[0].worker == 0 and died[0].envs == range(2)


@needs_rllib
def test_docs_example_trains(rllib: Any) -> None:
    """docs/rllib.md's example (tests/test_docs.py leaves it to this test), at a size that fits
    CI: one remote EnvRunner of 4 envs in 1 worker, one small training iteration."""
    page = Path(__file__).resolve().parents[2] / "docs" / "rllib.md"
    found = re.search(r"tested-by tests/integrations/test_rllib.py -->\n```python\n(.*?)```", page.read_text(), re.S)
    assert found, "docs/rllib.md has no example for this test"
    example = found.group(1)
    for big, small in [
        ("num_workers=2", "num_workers=1"),
        ("num_env_runners=2", "num_env_runners=1"),
        ("num_envs_per_env_runner=64", "num_envs_per_env_runner=4"),
        ("range(20)", "range(1)"),
        (".env_runners(", ".training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1).env_runners("),
    ]:
        assert big in example, big
        example = example.replace(big, small)
    exec(compile(example, str(page), "exec"), {"__name__": "__main__"})


@needs_rllib
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ppo_through_vecenv_learns_cartpole(rllib: Any) -> None:
    """RLlib's PPO, one remote EnvRunner with 16 envs in 2 vecenv workers: CartPole's mean return
    goes past 150 (random play: about 22) within 40 iterations of 4,000 steps."""
    vecenv_rllib.register_env("vecenv-CartPole-learn", "CartPole-v1", num_workers=2)
    config = (
        rllib.PPOConfig()
        .environment("vecenv-CartPole-learn")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=16, gym_env_vectorize_mode="vector_entry_point")
        .training(lr=3e-4, train_batch_size_per_learner=4000, minibatch_size=256, num_epochs=10, vf_loss_coeff=0.01)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    returns = []
    try:
        for _ in range(40):
            result = algo.train()
            returns.append(result["env_runners"].get("episode_return_mean", np.nan))
            if returns[-1] > 150:
                break
    finally:
        algo.stop()
    assert returns[0] < 60, returns
    assert max(returns) > 150, returns


@needs_rllib
def test_gymnasium_is_the_version_rllib_pins(rllib: Any) -> None:
    """The RLlib venv has the Gymnasium that ray[rllib] requires (so the core subset that CI runs
    there, docs/rllib.md's "Tests", checks that version)."""
    from importlib.metadata import requires

    pins = [r.split(";")[0].strip() for r in requires("ray") or [] if r.startswith("gymnasium") and "rllib" in r]
    assert pins == [f"gymnasium=={gym.__version__}"], pins
