"""The SuperSuit drop-in against SuperSuit itself: for the same seed and actions,
``vecenv.supersuit.concat_vec_envs_v1`` must return what SuperSuit's in-process path
(``num_cpus=0``) returns, value for value and dtype for dtype, for any ``num_cpus``."""

from __future__ import annotations

import functools
import pickle
import subprocess
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

ss = pytest.importorskip("supersuit", reason="the drop-in's tests need supersuit: pip install -e '.[test]'")
pytest.importorskip("mpe2", reason="simple_spread_v3 needs mpe2: pip install -e '.[test]'")
pytest.importorskip("pymunk", reason="the butterfly envs need pymunk: pip install -e '.[test]'")

import vecenv.supersuit as vs  # noqa: E402
from tests.helpers.multiagent import ToyParallelEnv, assert_tree_equal, pistonball, simple_spread  # noqa: E402
from tests.helpers.multiagent import kaz as kaz_line_death  # noqa: E402
from tests.helpers.threads import take_turns  # noqa: E402
from vecenv.errors import ClosedEnvironmentError  # noqa: E402
from vecenv.multiagent import AgentDeathError, AgentSpaceMismatchError  # noqa: E402


def kaz_black_death() -> Any:
    """KAZ whose agents die, wrapped in SuperSuit's black_death_v3 (SuperSuit needs it)."""
    return ss.black_death_v3(kaz_line_death(max_cycles=80))


#: (parallel env constructor, copies, steps): runs that end episodes on every copy.
ENVS = {
    "simple_spread": (functools.partial(simple_spread, max_cycles=20), 3, 45),
    "pistonball": (functools.partial(pistonball, max_cycles=10), 2, 25),
    "kaz": (kaz_black_death, 2, 100),
}


def run_both(make: Any, copies: int, steps: int, seed: int = 21, **ours: Any) -> int:
    """SuperSuit in-process and the drop-in, same seed and actions; returns the slots that ended."""
    reference = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(make()), copies, num_cpus=0)
    drop_in = vs.concat_vec_envs_v1(vs.pettingzoo_env_to_vec_env_v1(make()), copies, **ours)
    ended = 0
    try:
        assert drop_in.observation_space == reference.observation_space and drop_in.num_envs == reference.num_envs
        assert_tree_equal(drop_in.reset(seed=seed), reference.reset(seed=seed), "reset")
        space = reference.action_space
        space.seed(seed)
        for t in range(steps):
            actions = [space.sample() for _ in range(reference.num_envs)]
            want = reference.step(actions)
            assert_tree_equal(drop_in.step(actions), want, f"step {t}")
            ended += int((want[2] | want[3]).sum())
    finally:
        drop_in.close()
        reference.close()
    return ended


def case(env: str, num_cpus: int, context: str = "fork", slow: bool = False) -> Any:
    return pytest.param(
        env, num_cpus, context, id=f"{env}-cpus{num_cpus}-{context}", marks=[pytest.mark.slow] if slow else []
    )


CASES = [
    case("simple_spread", 0),
    case("simple_spread", 2),
    case("simple_spread", 3, "spawn"),
    case("pistonball", 1),
    case("pistonball", 2),
    case("pistonball", 2, "spawn", slow=True),
    case("kaz", 0),
    case("kaz", 2),
    case("kaz", 3, slow=True),
    case("kaz", 2, "spawn"),
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("env", "num_cpus", "context"), CASES)
def test_matches_supersuit_in_process(env: str, num_cpus: int, context: str) -> None:
    make, copies, steps = ENVS[env]
    if env == "kaz" and copies < num_cpus:
        copies = num_cpus
    assert run_both(make, copies, steps, num_cpus=num_cpus, context=context) >= copies


def test_standalone_vec_env_matches_supersuit() -> None:
    """pettingzoo_env_to_vec_env_v1 on its own (one copy, in this process), as SuperSuit's."""
    reference = ss.pettingzoo_env_to_vec_env_v1(kaz_black_death())
    drop_in = vs.pettingzoo_env_to_vec_env_v1(kaz_black_death())
    assert_tree_equal(drop_in.reset(seed=4), reference.reset(seed=4))
    space = reference.action_space
    space.seed(4)
    for t in range(90):
        actions = [space.sample() for _ in range(reference.num_envs)]
        assert_tree_equal(drop_in.step(actions), reference.step(actions), f"step {t}")
    assert drop_in.par_env.possible_agents == reference.par_env.possible_agents
    assert drop_in.env_is_wrapped(gym.Wrapper) == [False] * 4


@pytest.mark.parametrize("num_cpus", [0, 2], ids=lambda n: f"cpus{n}")
def test_agent_death_without_black_death_raises_as_supersuit(num_cpus: int) -> None:
    """SuperSuit raises AssertionError on agent death without black_death_v3; so does the drop-in,
    at the same step, naming the way out."""
    reference = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(kaz_line_death()), 2)
    drop_in = vs.concat_vec_envs_v1(vs.pettingzoo_env_to_vec_env_v1(kaz_line_death()), 2, num_cpus=num_cpus)
    try:
        reference.reset(seed=3)
        drop_in.reset(seed=3)
        space = reference.action_space
        space.seed(3)
        for _ in range(200):
            actions = [space.sample() for _ in range(reference.num_envs)]
            try:
                reference.step(actions)
            except AssertionError:
                with pytest.raises(AgentDeathError, match="black_death_v3") as info:
                    drop_in.step(actions)
                assert isinstance(info.value, AssertionError)
                break
            drop_in.step(actions)
        else:
            pytest.fail("no agent died: the run does not test agent death")
    finally:
        drop_in.close()
        reference.close()


def test_mismatched_agent_spaces_are_an_assertion_error() -> None:
    with pytest.raises(AgentSpaceMismatchError, match="agent 'a2' has observation space") as info:
        vs.pettingzoo_env_to_vec_env_v1(ToyParallelEnv(obs_shapes={"a2": 4}))
    assert isinstance(info.value, AssertionError)


class OptionsEcho(ToyParallelEnv):
    """The toy env, with agent ``a0``'s reset info naming the options the reset got."""

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = super().reset(seed=seed, options=options)
        infos["a0"] = {"options": None if options is None else sorted(options)}
        return obs, infos


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_cpus", [0, 2], ids=lambda n: f"cpus{n}")
def test_reset_options_reach_every_copy_as_supersuit_passes_them(num_cpus: int) -> None:
    """SuperSuit hands reset's options to every copy as they are: a "reset_mask" among them is
    the envs' to read, not a mask of the copies to reset."""
    from supersuit.vector import MarkovVectorEnv

    def make() -> OptionsEcho:
        return OptionsEcho(agents=("a0", "a1", "a2"), length=50, die_at=99)

    reference = ss.concat_vec_envs_v1(MarkovVectorEnv(make()), 3, num_cpus=0)
    drop_in = vs.concat_vec_envs_v1(vs.pettingzoo_env_to_vec_env_v1(make()), 3, num_cpus=num_cpus, context="fork")
    try:
        assert_tree_equal(drop_in.reset(seed=2), reference.reset(seed=2), "reset")
        actions = [1] * reference.num_envs
        assert_tree_equal(drop_in.step(actions), reference.step(actions), "step")
        options = {"reset_mask": np.array([True, False, False]), "level": 3}
        obs, infos = drop_in.reset(options=options)
        assert_tree_equal((obs, infos), reference.reset(options=options), "reset with a reset_mask option")
        assert (obs[:, 1] == 0).all()  # every copy was reset: its step count is back to 0
        assert [infos[3 * c]["options"] for c in range(3)] == [["level", "reset_mask"]] * 3
        assert list(options) == ["reset_mask", "level"]  # the caller's dict is untouched
        # Options that are not a dict reach the envs as they are too (the env's to refuse).
        assert_tree_equal(drop_in.reset(options=["level"]), reference.reset(options=["level"]), "list options")
    finally:
        drop_in.close()
        reference.close()


@pytest.mark.parametrize("num_cpus", [0, 2], ids=lambda n: f"cpus{n}")
def test_gymnasium_env_copies(num_cpus: int) -> None:
    """A plain gymnasium env: one slot per copy, seeded seed + c, reset at the end of an episode
    with the last observation in "terminal_observation"; env_is_wrapped sees its wrappers."""
    env = gym.wrappers.TimeLimit(gym.make("CartPole-v1"), 8)
    venv = vs.concat_vec_envs_v1(env, 3, num_cpus=num_cpus)
    try:
        assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [True] * 3
        assert venv.env_is_wrapped(gym.wrappers.RecordVideo) == [False] * 3
        obs, infos = venv.reset(seed=5)
        for c in range(3):
            assert np.array_equal(obs[c], gym.make("CartPole-v1").reset(seed=5 + c)[0])
        assert infos == [{}, {}, {}]
        for _ in range(8):
            obs, rewards, terms, truncs, infos = venv.step([0, 1, 0])
        assert rewards.dtype == np.float32 and truncs.dtype == np.uint8 and (terms | truncs).all()
        assert all("terminal_observation" in info for info in infos)
    finally:
        venv.close()


class _SlowStep(gym.Wrapper):
    """A step that takes 2 ms: the parent's wait sleeps on the pipes, so other threads run
    between a step's send and its reply."""

    def step(self, action: Any) -> Any:
        time.sleep(0.002)
        return super().step(action)


@pytest.mark.timeout(90)
def test_threads_stepping_it_take_turns() -> None:
    """Two threads stepping the concatenated env (a step is the engine's send, then its wait)
    and one reading an attribute take turns, as over the engine's vector env: another thread's
    call between the two halves of a step used to be refused as a call already pending."""
    venv = vs.concat_vec_envs_v1(_SlowStep(gym.make("CartPole-v1")), 4, num_cpus=2)
    steps = 100
    try:
        venv.reset(seed=0)
        take_turns([lambda: venv.step([0, 1, 0, 1])] * 2 + [lambda: venv.get_attr("spec")], steps)
    finally:
        venv.close()


@pytest.mark.parametrize("base_class", ["gymnasium", "stable_baselines3"])
def test_the_concatenated_env_cannot_be_copied(base_class: str) -> None:
    """A copy would share the workers and close them under the original: refused, as the
    engine's vector env refuses it."""
    import copy

    from vecenv.errors import NotCopyableError

    if base_class == "stable_baselines3":
        pytest.importorskip("stable_baselines3")
    venv = vs.concat_vec_envs_v1(gym.make("CartPole-v1"), 2, num_cpus=2, base_class=base_class)
    try:
        for duplicate in (copy.copy, copy.deepcopy, lambda v: pickle.dumps(v)):
            with pytest.raises(NotCopyableError):
                duplicate(venv)
        venv.reset()  # untouched
    finally:
        venv.close()


def test_stable_baselines3_base_class_matches_supersuit() -> None:
    pytest.importorskip("stable_baselines3")
    make, copies, _ = ENVS["simple_spread"]
    reference = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(make()), copies, base_class="stable_baselines3")
    drop_in = vs.concat_vec_envs_v1(
        vs.pettingzoo_env_to_vec_env_v1(make()), copies, num_cpus=2, base_class="stable_baselines3"
    )
    try:
        # SuperSuit's SB3 wrapper drops reset seeds: seed both underneath, then reset through SB3.
        reference.venv.reset(seed=8)
        drop_in.venv.reset(seed=8)
        assert_tree_equal(drop_in.reset(), reference.reset())
        assert_tree_equal(drop_in.reset_infos, reference.reset_infos)
        space = reference.action_space
        space.seed(8)
        for t in range(30):
            actions = np.stack([space.sample() for _ in range(reference.num_envs)])
            drop_in.step_async(actions)
            reference.step_async(actions)
            assert_tree_equal(drop_in.step_wait(), reference.step_wait(), f"step {t}")
        assert drop_in.get_attr("render_mode") == [None] * drop_in.num_envs
        seeds = drop_in.seed(8)  # the drop-in's wrapper seeds its next reset, as SB3's own VecEnvs do
        per_copy = drop_in.num_envs // copies  # one seed per env (SB3's VecEnv.seed), its copy's
        assert seeds == [8 + c for c in range(copies) for _ in range(per_copy)] and len(seeds) == drop_in.num_envs
        assert_tree_equal(drop_in.reset(), drop_in.venv.reset(seed=8)[0])
    finally:
        drop_in.close()
        reference.close()


def test_stable_baselines3_base_class_answers_for_the_slots_indices_select() -> None:
    """get_attr and env_is_wrapped answer for the slots ``indices`` selects, as SB3's VecEnv
    does: one slot, a list in its order, negative indices from the end; an index out of range
    is named."""
    pytest.importorskip("stable_baselines3")
    from vecenv.errors import EnvIndexError

    env = gym.wrappers.TimeLimit(gym.make("CartPole-v1"), 8)
    venv = vs.concat_vec_envs_v1(env, 3, num_cpus=2, base_class="stable_baselines3")
    try:
        venv.seed(5)
        venv.reset()
        assert venv.get_attr("np_random_seed") == [5, 6, 7]
        assert venv.get_attr("np_random_seed", indices=[2, 0]) == [7, 5]
        assert venv.get_attr("np_random_seed", indices=-1) == [7]
        assert venv.get_attr("render_mode", indices=1) == [None]
        assert venv.env_is_wrapped(gym.wrappers.TimeLimit, indices=[1]) == [True]
        assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [True] * 3
        with pytest.raises(EnvIndexError, match="env index 3 is out of range for 3 envs"):
            venv.get_attr("np_random_seed", indices=[3])
    finally:
        venv.close()


def test_bad_arguments_are_named() -> None:
    venv = vs.pettingzoo_env_to_vec_env_v1(ToyParallelEnv())
    with pytest.raises(ValueError, match="`base_class` must be one of 'gymnasium', 'stable_baselines3'"):
        vs.concat_vec_envs_v1(venv, 2, base_class="stable_baselines")
    with pytest.raises(ValueError, match="`num_cpus` must be an int >= 0, got -1"):
        vs.concat_vec_envs_v1(venv, 2, num_cpus=-1)
    with pytest.raises(TypeError, match="`num_vec_envs` must be a positive int, got 2.0"):
        vs.concat_vec_envs_v1(venv, 2.0)
    # NumPy ints, as SuperSuit takes them: they were refused.
    concat = vs.concat_vec_envs_v1(venv, np.int64(2), num_cpus=np.int64(0))
    try:
        assert concat.num_envs == 2 * venv.num_envs and type(concat.num_envs) is int
    finally:
        concat.close()
    with pytest.raises(TypeError, match="`vec_env` must be what pettingzoo_env_to_vec_env_v1 returned"):
        vs.concat_vec_envs_v1(object(), 2)
    with pytest.raises(TypeError, match="takes a PettingZoo ParallelEnv"):
        vs.pettingzoo_env_to_vec_env_v1(gym.make("CartPole-v1"))


def test_an_aec_env_is_refused_saying_how_to_make_a_parallel_one() -> None:
    """An AEC env (``simple_spread_v3.env()``, a common slip for ``parallel_env()``) has
    ``possible_agents`` and per-agent spaces, so it was taken for a parallel env; its
    ``reset`` returns None and the first reset failed with "cannot unpack non-iterable
    NoneType object"."""
    from mpe2 import simple_spread_v3

    with pytest.raises(TypeError, match=r"got an AEC env .*parallel_env\(\).*aec_to_parallel"):
        vs.pettingzoo_env_to_vec_env_v1(simple_spread_v3.env(max_cycles=5))


def test_supersuit_own_vec_env_is_accepted_and_copies_are_independent() -> None:
    """SuperSuit's MarkovVectorEnv goes in too; each copy is a pickled copy, as in SuperSuit."""
    from supersuit.vector import MarkovVectorEnv

    theirs = MarkovVectorEnv(ToyParallelEnv(agents=("a0", "a1", "a2")))  # what SuperSuit's function returns
    venv = vs.concat_vec_envs_v1(theirs, 2, num_cpus=2)
    try:
        obs, infos = venv.reset(seed=1)
        assert obs.shape == (6, 3) and infos[1] == infos[4] == {"reset_note": 1}
        assert not np.array_equal(obs[0], obs[3])  # copy 1 is seeded 2
        assert pickle.loads(pickle.dumps(infos)) == infos
    finally:
        venv.close()


def test_other_names_are_supersuit_own() -> None:
    """Only the import changes: SuperSuit's wrappers are reachable through vecenv.supersuit."""
    assert vs.color_reduction_v0 is ss.color_reduction_v0 and vs.black_death_v3 is ss.black_death_v3
    assert vs.concat_vec_envs_v1 is not ss.concat_vec_envs_v1
    with pytest.raises(AttributeError):
        vs.no_such_wrapper_v0  # noqa: B018 - the lookup is the test


def test_a_wrapper_without_supersuit_says_what_to_install() -> None:
    """SuperSuit's own names (its wrappers) need SuperSuit, which no extra but .[anchors] brings:
    the lookup stays an AttributeError (``hasattr`` is False) that says what to install."""
    code = (
        "import sys; sys.modules['supersuit'] = None\n"
        "import vecenv.supersuit as vs\n"
        "assert not hasattr(vs, 'no_such_wrapper_v0')\n"
        "try:\n    vs.pad_observations_v0\nexcept AttributeError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True, text=True).stdout
    assert "'pad_observations_v0'" in out and "is not installed: pip install supersuit" in out, out


def test_sb3_base_class_without_sb3_names_the_extra_and_starts_nothing() -> None:
    """Without Stable-Baselines3, ``base_class="stable_baselines3"`` is refused before any worker starts."""
    code = (
        "import sys, multiprocessing; sys.modules['stable_baselines3'] = None\n"
        "import gymnasium as gym, vecenv, vecenv.supersuit as vs\n"
        "try:\n"
        "    vs.concat_vec_envs_v1(gym.make('CartPole-v1'), 2, num_cpus=2, base_class='stable_baselines3')\n"
        "except vecenv.errors.MissingDependencyError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
        "print(len(multiprocessing.active_children()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True, text=True).stdout
    message, children = out.splitlines()
    assert "needs Stable-Baselines3: pip install 'vecenv[sb3]'" in message, out
    assert children == "0", out


@pytest.mark.timeout(60)
def test_errors_after_close_name_the_drop_in() -> None:
    """The drop-in's caller never built the SubprocVectorEnv underneath: messages name ConcatVecEnv."""
    concat = vs.concat_vec_envs_v1(vs.pettingzoo_env_to_vec_env_v1(ToyParallelEnv()), 2, num_cpus=2)
    concat.close()
    with pytest.raises(ClosedEnvironmentError) as raised:
        concat.reset()
    assert str(raised.value) == "Trying to operate on `ConcatVecEnv`, after a call to `close()`."


def _native_and_supersuit(make: Any, copies: int, num_workers: int, supersuit_make: Any = None) -> tuple[Any, Any]:
    from gymnasium.vector import AutoresetMode

    from vecenv.multiagent import MultiAgentVectorEnv

    vec = ss.pettingzoo_env_to_vec_env_v1((supersuit_make or make)())
    reference = ss.concat_vec_envs_v1(vec, copies, num_cpus=0)
    native = MultiAgentVectorEnv([make] * copies, num_workers, autoreset_mode=AutoresetMode.SAME_STEP)
    return native, reference


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_workers", [1, 2])
def test_native_same_step_matches_supersuit_in_process_without_agent_death(num_workers: int) -> None:
    """The native API under SAME_STEP and SuperSuit's in-process path, as the multi-agent page
    says: same observations and flags, rewards equal as float32, each ``final_obs`` SuperSuit's
    ``terminal_observation``, across episode ends."""
    native, reference = _native_and_supersuit(functools.partial(simple_spread, max_cycles=10), 3, num_workers)
    ends = 0
    try:
        assert_tree_equal(native.reset(seed=4)[0], reference.reset(seed=4)[0], "reset")
        rng = np.random.default_rng(4)
        for t in range(25):
            actions = rng.integers(0, 5, native.num_envs)
            obs, rewards, terms, truncs, infos = native.step(actions)
            want_obs, want_rewards, want_terms, want_truncs, want_infos = reference.step(actions)
            assert_tree_equal(obs, want_obs, f"observations, step {t}")
            assert np.array_equal(rewards.astype(np.float32), want_rewards), t
            assert np.array_equal(terms, want_terms.astype(bool)), t
            assert np.array_equal(truncs, want_truncs.astype(bool)), t
            for row, info in enumerate(want_infos):
                if "terminal_observation" in info:
                    ends += 1
                    assert_tree_equal(infos["final_obs"][row], info["terminal_observation"], f"final_obs {row}")
    finally:
        native.close()
        reference.close()
    assert ends == 2 * native.num_envs, "two episodes ended on every row"


@pytest.mark.timeout(120)
def test_black_death_ends_a_step_after_the_env_as_documented() -> None:
    """SuperSuit's black_death_v3 calls the env done only when every agent is terminated and
    truncated, so its episodes end a step late, as both flags (docs/multiagent.md); the native API
    ends the copy where the env ends it, truncated only."""
    make = functools.partial(simple_spread, max_cycles=5)
    native, reference = _native_and_supersuit(make, 1, 1, supersuit_make=lambda: ss.black_death_v3(make()))
    try:
        native.reset(seed=0)
        reference.reset(seed=0)
        ends: dict[str, list[tuple[int, bool, bool]]] = {"native": [], "supersuit": []}
        for t in range(1, 7):
            actions = np.zeros(native.num_envs, np.int64)
            for name, envs in (("native", native), ("supersuit", reference)):
                _, _, terms, truncs, _ = envs.step(actions)
                if (np.asarray(terms, bool) | np.asarray(truncs, bool)).all():
                    ends[name].append((t, bool(np.asarray(terms).all()), bool(np.asarray(truncs).all())))
    finally:
        native.close()
        reference.close()
    assert ends == {"native": [(5, False, True)], "supersuit": [(6, True, True)]}


@pytest.mark.parametrize("num_cpus", [0, 2], ids=lambda n: f"cpus{n}")
@pytest.mark.timeout(120)
def test_infos_returned_earlier_do_not_change_at_an_episode_end(num_cpus: int) -> None:
    """SuperSuit writes ``terminal_observation`` into the env's own info dicts, which MPE's reset
    returned too, so SuperSuit's reset infos gain it later; the drop-in's stay as returned."""

    def reset_infos_after_an_end(lib: Any, **kwargs: Any) -> list[list[str]]:
        envs = lib.concat_vec_envs_v1(lib.pettingzoo_env_to_vec_env_v1(simple_spread(max_cycles=3)), 2, **kwargs)
        try:
            _, infos = envs.reset(seed=0)
            for _ in range(3):
                ended = envs.step(np.zeros(envs.num_envs, np.int64))[2:4]
            assert (ended[0] | ended[1]).all()
            return [sorted(info) for info in infos]
        finally:
            envs.close()

    assert reset_infos_after_an_end(vs, num_cpus=num_cpus) == [[]] * 6
    assert reset_infos_after_an_end(ss, num_cpus=0) == [["terminal_observation"]] * 6, "SuperSuit's, documented"
