"""The ``VectorEnv`` API of ``vecenv.parent.vector_env`` (``GroupVectorEnv``, through
``SubprocVectorEnv``): arguments checked at construction, input refused without a change of
state, a bound on every blocking call, the ended envs of ``AutoresetMode.DISABLED``,
``close()`` with a call pending, and no copies."""

from __future__ import annotations

import copy
import functools
import gc
import multiprocessing
import pickle
import re
import time
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.conftest import start_methods
from tests.engine.test_differential import assert_same
from tests.helpers.envs import DiffEnv, PayEnv, diff_env_fns, fns
from tests.helpers.faults import fault_fns, healthy_fns
from vecenv import SubprocVectorEnv, VecEnvTimeoutError
from vecenv.errors import InvalidArgumentError

# -- construction --------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_env_fns_may_be_any_iterable() -> None:
    with SubprocVectorEnv((fn for fn in diff_env_fns(3)), 2, context="fork") as sub:
        assert sub.num_envs == 3


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"autoreset_mode": "Sometimes"}, "autoreset_mode"),
        ({"context": "teleport"}, "context"),
        ({"batch_size": 3}, "batch_size"),
    ],
    ids=["autoreset_mode", "context", "batch_size"],
)
@pytest.mark.timeout(60)
def test_bad_constructor_arguments_name_themselves(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=f"`{argument}`") as excinfo:
        SubprocVectorEnv(diff_env_fns(4), 2, **kwargs)
    assert repr(list(kwargs.values())[0]) in str(excinfo.value)  # the received value


@pytest.mark.timeout(60)
@start_methods("fork", "spawn")
def test_start_timeout_on_a_hanging_constructor(start_method: str) -> None:
    # Worker 1 (envs 2..3) hangs in env 3's constructor; worker 0 is healthy. The error names
    # the worker still building and its envs (worker 0 may be named too, if it was slow).
    make = fault_fns(4, "hang", "init", target=3)
    start = time.monotonic()
    with pytest.raises(
        VecEnvTimeoutError, match=r"^The call to `__init__` has timed out after 0.5 second\(s\)"
    ) as info:
        SubprocVectorEnv(make, num_workers=2, context=start_method, start_timeout=0.5)
    assert "worker 1 (envs 2..3)" in str(info.value) and "still building" in str(info.value), str(info.value)
    elapsed = time.monotonic() - start
    assert elapsed < 0.5 + 4.0, f"start_timeout=0.5 took {elapsed:.2f} s"
    assert multiprocessing.active_children() == []


# -- input refused, state kept ------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("misuse", ["send_unknown_ids", "step_wrong_count", "reset_bad_mask"])
def test_refused_input_leaves_state_as_it_was(misuse: str) -> None:
    """Refused input (unknown env ids, a wrong action count, a bad mask) changes nothing: the calls
    after it give what SyncVectorEnv gives."""
    envs = SubprocVectorEnv(healthy_fns(4), num_workers=2)
    sync = SyncVectorEnv(healthy_fns(4))
    actions = np.full((4, 2), 0.25, np.float32)
    try:
        if misuse == "send_unknown_ids":
            envs.async_reset(seed=2)
            *_, ids = envs.recv(timeout=30)
            with pytest.raises(ValueError):
                envs.send(actions[:2], [0, 99])
            envs.send(actions[ids], ids)
            obs, rewards, *_, ids = envs.recv(timeout=30)
            sync.reset(seed=2)
            sync_obs, sync_rewards, *_ = sync.step(actions)
            np.testing.assert_array_equal(obs, sync_obs[ids])
            np.testing.assert_array_equal(rewards, sync_rewards[ids])
        elif misuse == "step_wrong_count":
            assert_same(envs.reset(seed=2), sync.reset(seed=2))
            with pytest.raises((ValueError, TypeError)):
                envs.step_async(actions[:3])
            assert_same(envs.step(actions), sync.step(actions))
        else:
            assert_same(envs.reset(seed=2), sync.reset(seed=2))
            with pytest.raises((ValueError, TypeError)):
                envs.reset(options={"reset_mask": np.array([True, False])})
            assert_same(envs.step(actions), sync.step(actions))
            mask = np.array([True, False, True, False])
            assert_same(
                envs.reset(seed=[3, None, 4, None], options={"reset_mask": mask}),
                sync.reset(seed=[3, None, 4, None], options={"reset_mask": mask}),
            )
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
def test_disabled_autoreset_refuses_to_step_ended_envs_and_names_them() -> None:
    fns = [functools.partial(DiffEnv, index=i, p_term=1.0 if i else 0.0, p_trunc=0.0) for i in range(3)]
    sync = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
    actions = np.zeros(3, dtype=np.int64)
    try:
        with SubprocVectorEnv(fns, 2, autoreset_mode=AutoresetMode.DISABLED, context="fork") as sub:
            assert_same(sub.reset(seed=3), sync.reset(seed=3))
            first = sub.step(actions)
            assert_same(first, sync.step(actions))
            assert first[2].tolist() == [False, True, True]
            with pytest.raises(vecenv.NeedsResetError, match=r"envs \[1, 2\]"):
                sub.step(actions)
            mask = np.array([False, True, False])
            options = {"reset_mask": mask}
            assert_same(sub.reset(seed=9, options=dict(options)), sync.reset(seed=9, options=dict(options)))
            with pytest.raises(vecenv.NeedsResetError, match=r"envs \[2\]"):
                sub.step(actions)
            options = {"reset_mask": np.array([False, False, True])}
            assert_same(sub.reset(options=dict(options)), sync.reset(options=dict(options)))
            assert_same(sub.step(actions), sync.step(actions))  # nothing was lost on the way
    finally:
        sync.close()


# -- every blocking call has a bound -------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["get_attr", "set_attr", "render", "step", "reset"])
def test_blocking_calls_take_a_timeout(method: str) -> None:
    envs = SubprocVectorEnv(fault_fns(2, "hang", "call", target=0), num_workers=2)
    try:
        envs.reset(seed=0)
        if method != "get_attr":  # worker 0 is then stuck in `boom` for good
            envs.call_async("boom")
            with pytest.raises(VecEnvTimeoutError):
                envs.call_wait(timeout=0.1)
        calls = {
            "get_attr": lambda: envs.get_attr("boom", timeout=0.3),  # hangs in env 0
            "set_attr": lambda: envs.set_attr("scale", 2.0, timeout=0.3),
            "render": lambda: envs.render(timeout=0.3),
            "step": lambda: envs.step(np.zeros((2, 2), np.float32), timeout=0.3),
            "reset": lambda: envs.reset(seed=1, timeout=0.3),
        }
        start = time.monotonic()
        # Named by the call made (get_attr's said `call_wait`); step and reset as AsyncVectorEnv's say.
        named = {"step": "step_wait", "reset": "reset_wait"}.get(method, method)
        with pytest.raises(VecEnvTimeoutError, match=f"^The call to `{named}` has timed out"):
            calls[method]()
        elapsed = time.monotonic() - start
        assert elapsed < 0.3 + 3.0, f"{method}(timeout=0.3) took {elapsed:.2f} s"
    finally:
        envs.close(terminate=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", [-1, "x"], ids=["negative", "str"])
def test_bad_timeout_is_a_value_error_naming_it(bad: Any) -> None:
    with pytest.raises(ValueError, match="start_timeout"):
        SubprocVectorEnv(healthy_fns(2), num_workers=1, start_timeout=bad)
    envs = SubprocVectorEnv(healthy_fns(2), num_workers=2)
    try:
        envs.reset(seed=0)
        calls = [
            lambda: envs.get_attr("index", timeout=bad),
            lambda: envs.set_attr("index", 5, timeout=bad),
            lambda: envs.render(timeout=bad),
            lambda: envs.step(np.zeros((2, 2), np.float32), timeout=bad),
            lambda: envs.reset(seed=0, timeout=bad),
            lambda: envs.call_wait(timeout=bad),
            lambda: envs.step_wait(timeout=bad),
            lambda: envs.reset_wait(timeout=bad),
        ]
        for call in calls:
            with pytest.raises(ValueError, match="`timeout`"):
                call()
        assert envs.get_attr("index") == (0, 1)  # nothing was sent or changed
    finally:
        envs.close()


# -- close ---------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_close_with_step_pending_warns() -> None:
    envs = SubprocVectorEnv(fns(PayEnv, 2), num_workers=2)
    envs.reset(seed=0)
    envs.step_async(np.zeros(2, np.int64))
    message = "Calling `close` while waiting for a pending call to `step` to complete."
    with pytest.warns(UserWarning, match=re.escape(message)):
        envs.close()
    assert envs.closed


class StartsAt(PayEnv):
    """Starts its episodes at ``options["start"]`` (read with ``.get``, as envs do)."""

    def reset(self, *, seed: int | None = None, options: Any = None):
        obs, info = super().reset(seed=seed)
        start = 0.0 if options is None else options.get("start", 0.0)
        return np.array([self.index + start, self.t], np.float32), {"kind": type(options).__name__}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["UserDict", "MappingProxyType"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_reset_options_may_be_any_mapping_as_in_sync(kind: str, num_workers: int) -> None:
    """``SyncVectorEnv`` hands a mapping that is not a dict to the envs as it is; so do we
    (a copy of it), with or without a ``reset_mask`` in it."""
    import collections
    import types

    make = {"UserDict": collections.UserDict, "MappingProxyType": types.MappingProxyType}[kind]
    env_fns = [functools.partial(StartsAt, i) for i in range(4)]
    ours, ref = SubprocVectorEnv(env_fns, num_workers, context="fork"), SyncVectorEnv(env_fns)
    try:
        assert_same(
            ours.reset(seed=1, options=make({"start": 3.0})), ref.reset(seed=1, options=make({"start": 3.0})), kind
        )
        mask = np.array([True, False, True, False])
        got = ours.reset(options=make({"start": 5.0, "reset_mask": mask}))
        want = ref.reset(options=dict(start=5.0, reset_mask=mask))  # Sync pops the mask: a dict
        assert_same(got[0], want[0], f"{kind} with reset_mask")
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_first_reset_mask_that_leaves_an_env_never_reset_is_refused(num_workers: int) -> None:
    """An env left out of every reset so far has no observation: ``SyncVectorEnv`` fails to
    stack it (``ValueError``); we refuse the reset before sending it, naming the envs, instead
    of returning rows of zeros. A mask that reaches every env not reset yet goes, and so does
    any mask once each env was reset."""
    env_fns = diff_env_fns(4)
    ref = SyncVectorEnv(env_fns)
    with SubprocVectorEnv(env_fns, num_workers, context="fork") as envs:
        some = np.array([True, False, True, False])
        with pytest.raises(ValueError):
            ref.reset(seed=1, options={"reset_mask": some})
        with pytest.raises(InvalidArgumentError, match=r"env\(s\) \[1, 3\] have never been reset"):
            envs.reset(seed=1, options={"reset_mask": some})
        assert envs.state is vecenv.State.DEFAULT
        ref.close()  # its envs 0 and 2 were reset before it failed; ours were not
        ref = SyncVectorEnv(env_fns)
        every = np.ones(4, np.bool_)
        assert_same(
            envs.reset(seed=1, options={"reset_mask": every}),
            ref.reset(seed=1, options={"reset_mask": every}),
            "a first reset whose mask reaches every env",
        )
        assert_same(
            envs.reset(seed=5, options={"reset_mask": some}),
            ref.reset(seed=5, options={"reset_mask": some}),
            "a later masked reset",
        )
    ref.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_pickling_or_copying_is_refused_and_the_vector_env_stays_usable(how: str, num_workers: int) -> None:
    """A copy would share the workers (and close them when collected); a pickle cannot carry
    them: one clear error, and the original goes on as if nothing happened."""
    copier = {"pickle": pickle.dumps, "copy": copy.copy, "deepcopy": copy.deepcopy}[how]
    with vecenv.SubprocVectorEnv(healthy_fns(2), num_workers=num_workers, context="fork") as envs:
        envs.reset(seed=0)
        with pytest.raises(vecenv.errors.NotCopyableError, match="SubprocVectorEnv cannot be") as raised:
            copier(envs)
        assert isinstance(raised.value, TypeError)
        gc.collect()
        obs, *_ = envs.step(envs.action_space.sample())
        assert obs.shape[0] == 2 and not envs.closed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shared", "pipes"])
@pytest.mark.parametrize("split", [False, True], ids=["step", "step_async+wait"])
def test_a_step_cut_short_after_taking_its_replies_never_steps_ended_envs_silently(
    shared_memory: bool, split: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under DISABLED, a step records which envs ended so that stepping them raises, as
    ``SyncVectorEnv`` requires. A ``SystemExit`` (a signal handler's) raised once the replies
    were taken, while their rows were stored, skipped that record: the next step stepped the
    ended envs past their episode's end. It is refused with ``NeedsResetError`` until a reset."""
    from vecenv.parent.replies import InfoMerger

    real = InfoMerger.receive

    def receive(self: InfoMerger, *args: Any) -> None:
        monkeypatch.setattr(InfoMerger, "receive", real)  # once
        raise SystemExit("cut")

    env_fns = [functools.partial(PayEnv, i, horizon=1) for i in range(2)]
    with SubprocVectorEnv(
        env_fns, 2, autoreset_mode=AutoresetMode.DISABLED, shared_memory=shared_memory, context="fork"
    ) as envs:
        envs.reset(seed=0)
        actions = np.zeros(2, np.int64)
        monkeypatch.setattr(InfoMerger, "receive", receive)
        with pytest.raises(SystemExit, match="cut"):
            if split:
                envs.step_async(actions)
                envs.step_wait()
            else:
                envs.step(actions)
        with pytest.raises(vecenv.NeedsResetError, match=r"`step_async` after .*\(SystemExit\).*reset\(\)"):
            envs.step(actions)
        envs.reset(seed=1)
        _, _, _, truncations, _ = envs.step(actions)  # every env ended again, as the first step had them
        assert truncations.tolist() == [True, True]
