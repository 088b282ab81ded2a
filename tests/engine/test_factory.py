"""``vecenv.make`` (``vecenv.factory``): ids, ``"module:ID"``, ``make_vec``'s arguments
(``wrappers``, ``vector_kwargs``, env kwargs) and the spec it sets, checked against
``gymnasium.make_vec``; bad arguments are refused naming themselves."""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import TransformObservation, TransformReward

import vecenv
from tests.engine.test_differential import assert_same, same_steps

SAME = AutoresetMode.SAME_STEP
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(60)
def test_make_module_id_imports_the_module_in_spawned_workers() -> None:
    """'module:ID' must reach the workers whole: a spawned worker imports the module itself."""
    with vecenv.make("tests.helpers.envs:RolloutCounter-v0", 2, 2, context="spawn") as envs:
        obs, _ = envs.reset(seed=0)
        assert envs.spec is not None and envs.spec.id == "RolloutCounter-v0"
        assert obs.shape[0] == 2


@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_make_an_id_registered_at_run_time_in_workers_that_never_saw_it(context: str) -> None:
    """As make_vec: the workers make the envs from the spec, so an id registered in this process
    only (as a script's main() would) needs no registry entry in a spawned worker."""
    env_id = f"RunTimeCartPole-{context}-v0"
    gym.register(env_id, entry_point="gymnasium.envs.classic_control:CartPoleEnv", max_episode_steps=5)
    try:
        with vecenv.make(env_id, 2, 2, context=context, env_kwargs={"sutton_barto_reward": True}) as envs:
            sync = gym.make_vec(env_id, 2, vectorization_mode="sync", sutton_barto_reward=True)
            assert_same(envs.reset(seed=3), sync.reset(seed=3))
            for t in range(6):  # through the registered step limit
                actions = np.ones(2, np.int64)
                assert_same(envs.step(actions), sync.step(actions), f"step {t}")
            assert envs.get_attr("spec") == sync.get_attr("spec")
            sync.close()
    finally:
        del gym.registry[env_id]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_get_attr_returns_what_only_cloudpickle_carries(context: str) -> None:
    """An id whose entry point is a lambda (or a script's function, which the workers hold by
    value): ``get_attr("spec")`` gives its spec, as Sync's does; and an attribute holding
    lambdas comes back with lambdas that work. Plain pickle refused both replies."""
    env_id = f"LambdaEntry-{context}-v0"
    gym.register(env_id, entry_point=lambda **kwargs: gym.make("CartPole-v1", **kwargs).unwrapped)
    try:
        with vecenv.make(env_id, 2, 2, context=context) as envs:
            sync = gym.make_vec(env_id, 2, vectorization_mode="sync")
            assert [spec.id for spec in envs.get_attr("spec")] == [spec.id for spec in sync.get_attr("spec")]
            assert all(callable(spec.entry_point) for spec in envs.get_attr("spec"))
            sync.close()
            envs.set_attr("scale", [{"by": lambda x: 2 * x}, {"by": lambda x: 3 * x}])
            assert [held["by"](5) for held in envs.get_attr("scale")] == [10, 15]
    finally:
        del gym.registry[env_id]


# A notebook cell, as `python -c` runs it: __main__ has no file, so a worker started with spawn
# or forkserver has a __main__ of its own, without the class the entry point string names.
MAIN_ENTRY_POINT = """
import threading
import gymnasium as gym, numpy as np, vecenv

class NotebookEnv(gym.Env):
    {extra}
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {{}}

    def step(self, action):
        return np.ones(2, np.float32), 1.0, False, False, {{}}

gym.register("NotebookEnv-v0", entry_point="__main__:NotebookEnv")
with vecenv.make("NotebookEnv-v0", 2, 2, context={context!r}) as envs:
    envs.reset(seed=0)
    obs = envs.step(np.zeros(2, np.int64))[0]
    spec = envs.get_attr("spec")[0]
print(obs.tolist(), spec.entry_point)
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["spawn", "forkserver", "fork"])
def test_make_an_entry_point_string_into_a_notebooks_main(context: str) -> None:
    """`gym.register(id, entry_point="__main__:Cls")` in a notebook or `python -c`: a worker that
    was not forked has no such class in its own __main__ ("module '__main__' has no attribute"
    before); it gets this process's, and the env's spec keeps the string, as make_vec's does."""
    code = MAIN_ENTRY_POINT.format(context=context, extra="")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=80, cwd=str(ROOT), env=_env()
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[[1.0,", "1.0],", "[1.0,", "1.0]]", "__main__:NotebookEnv"], proc.stdout


@pytest.mark.timeout(60)
def test_a_main_entry_point_class_that_cannot_be_pickled_still_works_with_fork() -> None:
    """The class an entry point string into __main__ names travels only when it pickles: one
    holding a lock stays behind, and forked workers, which have it, build the env as before."""
    code = MAIN_ENTRY_POINT.format(context="fork", extra="lock = threading.Lock()")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, cwd=str(ROOT), env=_env()
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "__main__:NotebookEnv", proc.stdout


def _make_by_id(env_id: str) -> gym.Env:
    return gym.make(env_id)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_an_id_registered_here_only_is_named_when_a_constructor_makes_it_in_a_worker(context: str) -> None:
    """A constructor of one's own that calls gym.make(id) for an id registered in this process
    only: a worker that was not forked does not know it. Gymnasium's NameNotFound comes with a
    note naming the id, why the worker lacks it, and the ways out (it said only "doesn't exist")."""
    env_id = f"HereOnlyCartPole-{context}-v0"
    gym.register(env_id, entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        with pytest.raises(gym.error.NameNotFound) as info:
            vecenv.SubprocVectorEnv([functools.partial(_make_by_id, env_id)] * 2, 2, context=context)
    finally:
        del gym.registry[env_id]
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert re.search(f"env id {env_id!r} is registered in this process but not in worker [01]:", notes), notes
    assert "vecenv.make" in notes and "'fork'" in notes, notes


def _env() -> dict[str, str]:
    """This environment, with the project first on the child's path (it runs from the checkout)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["spawn", "fork"])
def test_make_builds_what_this_process_registered_whatever_the_workers_registry_holds(context: str) -> None:
    """An id re-registered here with other kwargs (the module the worker imports registers the
    original): every start method builds this process's registration, as make_vec does."""
    original = gym.registry["RolloutCounter-v0"]
    gym.registry["RolloutCounter-v0"] = dataclasses.replace(original, kwargs={"max_length": 3})
    try:
        with vecenv.make("tests.helpers.envs:RolloutCounter-v0", 2, 2, context=context) as envs:
            assert envs.get_attr("max_length") == (3, 3)
    finally:
        gym.registry["RolloutCounter-v0"] = original


@pytest.mark.timeout(60)
def test_make_warns_of_an_old_version_in_this_process() -> None:
    with pytest.warns(DeprecationWarning, match="CartPole-v0 is out of date"):
        with vecenv.make("CartPole-v0", 2, 0) as envs:  # the warning is this process's: no workers needed
            assert envs.num_envs == 2


@pytest.mark.timeout(30)
def test_make_unknown_id_suggests_close_matches() -> None:
    with pytest.raises(gym.error.VersionNotFound, match=r"provides versioned environments: \[ `v0`, `v1` \]"):
        vecenv.make("CartPole-v2", 2)
    with pytest.raises(gym.error.NameNotFound, match="did you mean 'CartPole-v1'"):
        vecenv.make("CartPol-v1", 2)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", ["kwarg", "wrapper"])
def test_make_names_the_env_kwarg_or_wrapper_that_cannot_be_pickled(where: str) -> None:
    """Pickling's own error names the lock, not whose it was: the note names the argument."""
    lock = threading.Lock()
    given: dict[str, Any] = (
        {"env_kwargs": {"render_mode": None, "lock": lock}}
        if where == "kwarg"
        else {"wrappers": [lambda env: env, lambda env: lock and env]}
    )
    with pytest.raises(TypeError, match="pickle") as info:
        vecenv.make("CartPole-v1", num_envs=2, num_workers=1, context="fork", **given)
    named = "the env kwarg `lock`" if where == "kwarg" else "`wrappers[1]`"
    assert f"{named} cannot be pickled" in " ".join(info.value.__notes__), info.value.__notes__
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(60)
def test_make_with_lambda_wrappers_sets_spec() -> None:
    def wrappers() -> list[Any]:
        return [
            lambda env: TransformReward(env, lambda r: 2.0 * r),
            lambda env: TransformObservation(env, lambda o: o + 1.0, env.observation_space),
        ]

    envs = vecenv.make("CartPole-v1", num_envs=3, num_workers=2, wrappers=wrappers())
    sync = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync", wrappers=wrappers())
    try:
        assert envs.spec is not None and envs.spec.id == "CartPole-v1"
        assert len(envs.spec.kwargs["wrappers"]) == 2
        same_steps(envs, sync, 4, [np.array([1, 0, 1])] * 5)
    finally:
        envs.close()
        sync.close()


# -- make_vec's arguments --------------------------------------------------------------------------


def _clip_half(env: gym.Env) -> gym.Env:
    return gym.wrappers.ClipReward(env, 0.0, 0.5)


@pytest.mark.timeout(60)
def test_make_takes_make_vec_arguments_and_sets_its_spec() -> None:
    args: dict[str, Any] = dict(vector_kwargs={"autoreset_mode": SAME}, wrappers=[_clip_half], sutton_barto_reward=True)
    want = gym.make_vec("CartPole-v1", 3, vectorization_mode="sync", **args)
    with vecenv.make("CartPole-v1", 3, 2, **args) as envs:
        assert_same(envs.reset(seed=0), want.reset(seed=0))
        for _ in range(40):
            assert_same(envs.step(np.ones(3, dtype=np.int64)), want.step(np.ones(3, dtype=np.int64)))
        assert envs.metadata["autoreset_mode"] == SAME
        # The spec is make_vec's, but for the vectorization mode and our num_workers.
        expected = dict(
            want.spec.kwargs, vectorization_mode="vecenv", vector_kwargs={"autoreset_mode": SAME, "num_workers": 2}
        )
        assert envs.spec.kwargs == expected
        assert dataclasses.replace(envs.spec, kwargs={}) == dataclasses.replace(want.spec, kwargs={})
        # The spec rebuilds the same vector env, as gymnasium.make_vec(spec) does for its own.
        with vecenv.make(envs.spec) as again:
            assert again.num_envs == 3 and again.spec == envs.spec
            assert_same(again.reset(seed=0), want.reset(seed=0))
    want.close()


@pytest.mark.timeout(30)
def test_make_finds_ids_as_make_vec_does() -> None:
    """An id without a version is its latest (with Gymnasium's warning); a registered name with a
    version that does not exist, or an unknown namespace, raises Gymnasium's own error."""
    with pytest.warns(UserWarning, match="Using the latest versioned environment `CartPole-v1`"):
        with vecenv.make("CartPole", 2, 0) as envs:
            assert envs.spec.id == "CartPole-v1"
    with pytest.warns(UserWarning, match="latest versioned environment `CartPole-v1`"):
        with vecenv.make("gymnasium.envs.classic_control:CartPole", 2, 0) as envs:
            assert envs.spec.id == "CartPole-v1"
    with pytest.raises(gym.error.VersionNotFound, match="`v9` for environment `CartPole` doesn't exist"):
        vecenv.make("CartPole-v9", 2)
    with pytest.raises(gym.error.NamespaceNotFound, match="Namespace nowhere not found"):
        vecenv.make("nowhere/CartPole-v1", 2)


@pytest.mark.timeout(30)
def test_make_takes_make_vec_call_forms() -> None:
    """``id=`` (make_vec's name for the first argument) and ``vectorization_mode=None``
    (make_vec's default) work as with make_vec."""
    with vecenv.make(id="CartPole-v1", num_envs=2, vectorization_mode=None, num_workers=0) as envs:
        assert envs.spec.id == "CartPole-v1" and envs.num_envs == 2
    with pytest.raises(TypeError, match="`id` is make_vec's name of `env_id`: give one of them"):
        vecenv.make("CartPole-v1", 2, id="CartPole-v1")


@pytest.mark.timeout(60)
def test_make_takes_make_vec_modes_of_single_envs() -> None:
    """Code written for ``make_vec(..., vectorization_mode="sync")`` (or ``"async"``, or the
    enum) runs unchanged: the envs are single envs, with SyncVectorEnv's results. A vector entry
    point, or a mode make_vec lacks, is refused by name."""
    sync = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    want = sync.reset(seed=4)
    for mode in ("sync", "async", gym.VectorizeMode.SYNC, gym.VectorizeMode.ASYNC):
        with vecenv.make("CartPole-v1", 2, vectorization_mode=mode, num_workers=1) as envs:
            assert envs.spec.kwargs["vectorization_mode"] == "vecenv"
            assert_same(envs.reset(seed=4), want, str(mode))
    sync.close()
    for mode in ("vector_entry_point", gym.VectorizeMode.VECTOR_ENTRY_POINT, "bogus", 1):
        with pytest.raises(
            ValueError, match=r"`vectorization_mode` must be None, 'vecenv', 'sync' or 'async'.*from_groups"
        ):
            vecenv.make("CartPole-v1", 2, vectorization_mode=mode)


@pytest.mark.timeout(30)
def test_a_specs_vector_arguments_take_precedence_as_in_make_vec() -> None:
    with vecenv.make("CartPole-v1", 2, 0, copy=False) as first:
        spec = first.spec
    with vecenv.make(spec, num_workers=1, copy=True) as again:  # the spec's own are kept
        assert again.spec.kwargs["vector_kwargs"] == {"copy": False, "num_workers": 0}
        assert again.worker_pids == [None]


@pytest.mark.timeout(60)
def test_make_accepts_a_make_vec_spec() -> None:
    want = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync", vector_kwargs={"copy": False}, max_episode_steps=7)
    with vecenv.make(want.spec) as envs:
        assert envs.num_envs == 2
        assert envs.spec.kwargs == dict(want.spec.kwargs, vectorization_mode="vecenv")
        assert envs.spec.max_episode_steps == 7
        assert_same(envs.reset(seed=5), want.reset(seed=5))
        for _ in range(8):
            assert_same(envs.step(np.zeros(2, dtype=np.int64)), want.step(np.zeros(2, dtype=np.int64)))
    want.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vector_kwargs": {"bogus": 1}}, "`vector_kwargs` keys must be SubprocVectorEnv arguments .* unknown 'bogus'"),
        ({"vector_kwargs": {"copy": True}, "copy": False}, "'copy' given twice: in `vector_kwargs` and as a keyword"),
        (
            {"env_kwargs": {"sutton_barto_reward": True}, "sutton_barto_reward": False},
            "'sutton_barto_reward' given twice",
        ),
        ({"vector_kwargs": {"num_workers": 1}, "num_workers": 2}, "'num_workers' given twice"),
        ({"vector_kwargs": [1]}, r"`vector_kwargs` must be a dict or None, got \[1\]"),
        ({"wrappers": "ClipReward"}, "`wrappers` must be a sequence of callables .* got 'ClipReward'"),
        ({"wrappers": _clip_half}, "`wrappers` must be a sequence of callables"),
        ({"wrappers": [_clip_half, 3]}, r"`wrappers\[1\]` must be callable .* got 3"),
    ],
    ids=[
        "unknown-vector-kwarg",
        "vector-twice",
        "env-twice",
        "workers-twice",
        "vector-not-dict",
        "wrappers-str",
        "wrappers-callable",
        "wrapper-not-callable",
    ],
)
def test_make_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        vecenv.make("CartPole-v1", 2, **kwargs)


def _wraps_in_place(env: gym.Env) -> None:
    """A wrapper written as a function that changes the env and returns nothing."""
    env.unwrapped.spec_note = "wrapped"  # type: ignore[attr-defined]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_wrapper_that_returns_no_env_is_named(num_workers: int) -> None:
    """It was reported as `env_fns[1]` must return a gymnasium.Env: make's caller gave no env_fns."""
    with pytest.raises(TypeError, match=r"^`wrappers\[1\]` must return a gymnasium.Env \(the wrapped env\).*got None"):
        vecenv.make("CartPole-v1", 2, num_workers, wrappers=[_clip_half, _wraps_in_place])


class _FailsOnThirdEnv:
    """A wrapper that raises while wrapping the third env it is given in its process."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, env: gym.Env) -> gym.Env:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("cannot wrap this env")
        return env


def _always_fails(env: gym.Env) -> gym.Env:
    raise RuntimeError("cannot wrap this env")


def test_an_env_that_make_cannot_build_is_named_by_its_id_and_index() -> None:
    """It was noted as `raised by env_fns[2] (env 2)`: make's caller gave an id, no env_fns."""
    with pytest.raises(RuntimeError, match="cannot wrap this env") as info:
        vecenv.make("CartPole-v1", 4, 0, wrappers=[_FailsOnThirdEnv()])
    notes = getattr(info.value, "__notes__", [])
    assert "raised by env 2 of vecenv.make('CartPole-v1')" in notes, notes
    assert not any("env_fns" in note for note in notes), notes


@pytest.mark.timeout(60)
@pytest.mark.parametrize("given", ["id", "spec"])
def test_an_env_that_make_cannot_build_in_a_worker_is_named_by_its_id(given: str) -> None:
    env_id: str | gym.envs.registration.EnvSpec = "CartPole-v1" if given == "id" else gym.spec("CartPole-v1")
    with pytest.raises(RuntimeError, match="cannot wrap this env") as info:
        vecenv.make(env_id, 4, 2, wrappers=[_always_fails])
    notes = getattr(info.value, "__notes__", [])
    # Both workers fail on their first env (env 0, env 2); the failure reported is the one that
    # arrives first, either: the note names that env as the caller gave it, and its worker.
    named = re.search(r"raised by env (\d) of vecenv\.make\('CartPole-v1'\)", " ".join(notes))
    assert named is not None, notes
    env = int(named[1])
    assert env in (0, 2) and f"(worker {env // 2})" in " ".join(notes), notes
    assert not any("env_fns" in note for note in notes), notes


def test_an_env_id_whose_module_cannot_be_imported_says_what_the_module_is_for() -> None:
    with pytest.raises(ModuleNotFoundError, match="No module named 'vecenv_no_such_module'") as info:
        vecenv.make("vecenv_no_such_module:Foo-v0", 2, num_workers=0)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "env_id 'vecenv_no_such_module:Foo-v0': the part before ':' is a module imported to register" in notes
    assert "registers 'Foo-v0'" in notes, notes


def test_make_rejects_an_unknown_backend() -> None:
    with pytest.raises(ValueError, match="`backend` must be one of 'process', 'ray', got 'threads'"):
        vecenv.make("CartPole-v1", 2, backend="threads")


def test_each_backends_own_keywords_are_what_the_other_lacks() -> None:
    """OWN_KEYWORDS (kept by hand, so that make need not import Ray) against the signatures."""
    pytest.importorskip("ray")
    import inspect

    from vecenv.backends import OWN_KEYWORDS, vector_class

    def keywords(backend: str) -> set[str]:
        parameters = inspect.signature(vector_class(backend)).parameters.values()
        return {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}

    assert OWN_KEYWORDS["process"] == keywords("process") - keywords("ray")
    assert OWN_KEYWORDS["ray"] == keywords("ray") - keywords("process")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "ray", "context": "fork"}, "`context` is a keyword of backend='process', not of backend='ray'"),
        ({"address": "auto"}, "`address` is a keyword of backend='ray', not of backend='process', got address='auto'"),
    ],
)
def test_a_keyword_of_the_other_backend_is_refused_not_passed_to_the_envs(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        vecenv.make("CartPole-v1", 2, 1, **kwargs)
    assert multiprocessing.active_children() == []
