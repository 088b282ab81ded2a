"""``vecenv.transports.inline``: the group the parent hosts itself (``inline_group``, and every
env with ``num_workers=0``), against SyncVectorEnv; its env errors surface as any env's."""

from __future__ import annotations

import os
import signal
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import error as gym_error
from gymnasium.vector import SyncVectorEnv

import vecenv
from tests.engine.test_buffers import memfd_mappings
from tests.engine.test_differential import assert_same
from tests.helpers.envs import diff_env_fns
from tests.helpers.faults import open_fds
from vecenv import SubprocVectorEnv


@pytest.mark.timeout(60)
def test_num_workers_zero_starts_no_process() -> None:
    import multiprocessing

    fns = diff_env_fns(4)
    sync = SyncVectorEnv(fns)
    try:
        with SubprocVectorEnv(fns, 0) as sub:
            assert multiprocessing.active_children() == []
            assert sub.num_workers == 1 and sub.worker_pids == [None]
            assert_same(sub.reset(seed=3), sync.reset(seed=3))
            actions = np.zeros(4, dtype=np.int64)
            assert_same(sub.step(actions), sync.step(actions))
    finally:
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("target", [0, 3], ids=["inline-env", "worker-env"])
def test_inline_group_env_errors_surface_as_any_env_error(target: int) -> None:
    """An env of the parent's group raising in step: its own type, the remote-style traceback as
    cause, a note naming the env; the vector env stays usable after a reset."""
    from tests.helpers.faults import fault_fns

    fns = fault_fns(4, "raise", "step", target, at=2)
    with SubprocVectorEnv(fns, 2, inline_group=True) as sub:
        assert sub.worker_pids[0] is None and sub.worker_pids[1] is not None
        sub.reset(seed=0)
        actions = np.zeros((4, 2), dtype=np.float32)
        sub.step(actions)
        with pytest.raises(ValueError, match=f"env {target}") as excinfo:
            sub.step(actions)
        assert isinstance(excinfo.value.__cause__, vecenv.errors.RemoteTraceback)
        assert any(f"env {target} (worker {target // 2})" in note for note in excinfo.value.__notes__)
        with pytest.raises(vecenv.NeedsResetError):
            sub.step(actions)
        sub.reset(seed=1)
        sub.step(actions)  # usable again (the fault fires once)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 1], ids=["every-env-in-parent", "one-worker"])
def test_every_env_in_the_parent_reports_an_env_error_as_a_worker_does(num_workers: int) -> None:
    """With every env in the parent a step runs the group directly; an env error there is the
    same error, with the same note and the same poisoning, as from a worker process."""
    from tests.helpers.faults import fault_fns

    fns = fault_fns(3, "raise", "step", 1, at=2)
    with SubprocVectorEnv(fns, num_workers) as sub:
        assert (sub._pool.transport.sole_core() is not None) == (num_workers == 0)
        sub.reset(seed=0)
        actions = np.zeros((3, 2), dtype=np.float32)
        sub.step(actions)
        with pytest.raises(ValueError, match="env 1") as excinfo:
            sub.step(actions)
        assert isinstance(excinfo.value.__cause__, vecenv.errors.RemoteTraceback)
        assert any("env 1 (worker 0)" in note and "`step_wait`" in note for note in excinfo.value.__notes__)
        with pytest.raises(vecenv.NeedsResetError, match="`step_wait` failed \\(ValueError\\)"):
            sub.step(actions)
        sub.reset(seed=1)
        sub.step(actions)
        sub.step_async(actions)  # the two halves still go through the pending call
        with pytest.raises(gym_error.AlreadyPendingCallError):
            sub.step(actions)
        assert len(sub.step_wait()) == 5


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore:.*Calling `close` while waiting")
@pytest.mark.parametrize(
    ("num_workers", "inline_group"), [(0, False), (2, True)], ids=["all-in-parent", "inline-group"]
)
def test_close_after_step_async_never_runs_the_step_in_the_parents_group(num_workers: int, inline_group: bool) -> None:
    """A step sent (``step_async``) and never waited for, to an env of the parent's own group
    that would hang in it: close() does not run it (as SyncVectorEnv, which steps in
    ``step_wait``) and returns."""
    import time

    from tests.helpers.faults import fault_fns

    envs = SubprocVectorEnv(fault_fns(4, "hang", "step", 0), num_workers, context="fork", inline_group=inline_group)
    envs.reset(seed=0)
    envs.step_async(np.zeros((4, 2), np.float32))
    start = time.monotonic()
    envs.close()
    assert envs.closed and time.monotonic() - start < vecenv.DEFAULT_CLOSE_TIMEOUT + 5.0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inline_group", [False, True], ids=["num_workers-0", "inline_group"])
def test_ctrl_c_while_the_parents_group_maps_a_rollout_block_is_raised_and_leaks_nothing(
    inline_group: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl+C while the parent's own group maps a new rollout block (a command nobody waits
    for): it waits until the block is mapped, then the rollout raises ``KeyboardInterrupt``.
    It used to be packed as the block command's dropped reply, so the rollout went on and
    failed with "a rollout came before its rollout block", with the block's descriptor open
    for good. After a reset, rollouts give what they give without the interrupt."""
    import signal

    from tests.helpers.faults import healthy_fns
    from vecenv.wire.rollout_buffers import RolloutBuffers

    before = open_fds()
    fns = healthy_fns(4)
    kwargs = {"inline_group": True, "context": "fork"} if inline_group else {}
    with SubprocVectorEnv(fns, 2 if inline_group else 0, **kwargs) as sub, SubprocVectorEnv(fns, 0) as plain:
        sub.reset(seed=1)
        attach = RolloutBuffers.attach.__func__  # type: ignore[attr-defined]

        def attach_with_ctrl_c(cls: type, *args: object, **kw: object) -> RolloutBuffers:
            monkeypatch.setattr(RolloutBuffers, "attach", classmethod(attach))  # once
            signal.raise_signal(signal.SIGINT)  # Ctrl+C while the block is mapped
            return attach(cls, *args, **kw)

        monkeypatch.setattr(RolloutBuffers, "attach", classmethod(attach_with_ctrl_c))
        with pytest.raises(KeyboardInterrupt):
            sub.rollout(3)
        monkeypatch.undo()
        with pytest.raises(vecenv.NeedsResetError):
            sub.rollout(3)
        sub.reset(seed=2)
        plain.reset(seed=2)
        assert_same(
            sub.rollout(3, lambda obs: np.zeros((len(obs), 2), np.float32)).observations,
            plain.rollout(3, lambda obs: np.zeros((len(obs), 2), np.float32)).observations,
        )
    assert open_fds() == before


class _CtrlCInParent(gym.Env):
    """Steps as a counter; while ``ARMED`` names this process, its step is cut by a Ctrl+C."""

    ARMED: int | None = None
    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if _CtrlCInParent.ARMED == os.getpid():
            _CtrlCInParent.ARMED = None
            signal.raise_signal(signal.SIGINT)
        return np.ones(1, np.float32), 1.0, False, False, {}

    def interrupt(self) -> None:
        """A method that Ctrl+C cuts (in a worker process, which ignores SIGINT, it returns)."""
        signal.raise_signal(signal.SIGINT)


@pytest.mark.timeout(60)
def test_ctrl_c_in_the_parents_group_during_recv_is_raised_once_then_asks_for_a_reset() -> None:
    """``recv`` with the parent stepping a group: a Ctrl+C that cuts that group's step is raised
    at once; the next ``recv`` says the batch is lost (``NeedsResetError`` naming
    ``async_reset()``), rather than raising the same Ctrl+C again from the group's reply."""
    with SubprocVectorEnv([_CtrlCInParent] * 4, 2, inline_group=True, context="fork") as envs:
        envs.async_reset(seed=0)
        assert envs.recv()[-1].tolist() == [0, 1, 2, 3]
        _CtrlCInParent.ARMED = os.getpid()
        envs.send(np.zeros(4, np.int64), np.arange(4))
        with pytest.raises(KeyboardInterrupt):
            envs.recv()
        for _ in range(2):
            with pytest.raises(vecenv.NeedsResetError, match=r"after `recv` was interrupted.*`async_reset\(\)`"):
                envs.recv()
        envs.async_reset(seed=1)
        assert envs.recv()[-1].tolist() == [0, 1, 2, 3]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cut", ["step", "call"])
@pytest.mark.parametrize("num_workers", [0, 2], ids=["num_workers-0", "inline_group"])
def test_a_ctrl_c_kept_after_it_cut_the_parents_group_holds_no_block_past_close(num_workers: int, cut: str) -> None:
    """A Ctrl+C that cuts env code of the group the parent hosts goes up with that code's frames,
    whose locals and closures view the group's own mapping of the parent's blocks (the step
    buffers, a rollout block). Kept after ``close()`` (``except ... as err``, ``sys.last_value``
    in a REPL), it kept the block mapped in this process for as long as it lived: ``close()``
    could not unmap a mapping still viewed. That mapping now gives its pages back at close."""
    before, before_fds = memfd_mappings("self"), open_fds()
    envs = SubprocVectorEnv([_CtrlCInParent] * 4, num_workers, inline_group=num_workers > 0, context="fork")
    envs.reset(seed=0)
    envs.rollout(2)  # a rollout block too, mapped by the parent and by its group
    assert memfd_mappings("self") - before, "nothing mapped: the test checks nothing"
    kept = None
    try:
        if cut == "step":
            _CtrlCInParent.ARMED = os.getpid()
            envs.step(np.zeros(4, np.int64))
        else:
            envs.call("interrupt")
    except KeyboardInterrupt as err:
        kept = err
    assert kept is not None, "the Ctrl+C was not raised"
    envs.close()
    assert not memfd_mappings("self") - before, "a block is still mapped after close()"
    assert kept.__traceback__ is not None  # held until here: it is what viewed the rows
    del kept  # its traceback refers to this frame: a cycle the next test would find uncollected
    assert open_fds() == before_fds


@pytest.mark.timeout(60)
def test_a_ctrl_c_kept_after_it_cut_the_parents_group_mapping_its_rows_holds_no_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl+C landing just as the group the parent hosts has mapped the step buffers, before
    that mapping is recorded, went up with the only reference to it: the vector env's clean-up
    could not close what it never saw, and a kept exception kept the block mapped. The
    interrupt now waits until the mapping is recorded, and the clean-up closes it."""
    from vecenv.wire.buffers import Buffers

    attach = Buffers.attach

    def attach_then_ctrl_c(*args: Any, **kwargs: Any) -> Buffers:
        mapped = attach(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # a Ctrl+C as the mapping is made
        return mapped

    monkeypatch.setattr(Buffers, "attach", attach_then_ctrl_c)
    before, before_fds = memfd_mappings("self"), open_fds()
    kept = None
    try:
        SubprocVectorEnv([lambda: gym.make("CartPole-v1")] * 2, 0)
    except KeyboardInterrupt as err:
        kept = err
    assert kept is not None, "the Ctrl+C was not raised"
    assert not memfd_mappings("self") - before, "a block is still mapped after the failed start"
    assert kept.__traceback__ is not None  # held until here
    del kept
    assert open_fds() == before_fds


@pytest.mark.timeout(60)
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning to one core of one changes nothing")
@pytest.mark.parametrize("cut", ["pinning", "unpinning"])
def test_ctrl_c_as_a_pinned_rollout_moves_the_thread_gives_its_cores_back(
    cut: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pin_cpus`` with the parent's group: a Ctrl+C that comes as the parent's thread is
    moved onto the first core, or just before it is moved back, is raised, and the thread is on
    all of its cores afterwards. The first was held while the thread moved, then raised before
    the code that moves it back was entered; the second skipped the move back: either way the
    thread stayed on one core for good. After a reset the vector env rolls out as before."""
    from tests.helpers.faults import healthy_fns

    before_fds = open_fds()
    cores = os.sched_getaffinity(0)
    real_setaffinity = os.sched_setaffinity
    moves: list[set[int]] = []

    def setaffinity_with_ctrl_c(pid: int, cpus: set[int]) -> None:
        moves.append(set(cpus))
        if len(moves) == (1 if cut == "pinning" else 2):
            signal.raise_signal(signal.SIGINT)  # Ctrl+C as this move is made
        real_setaffinity(pid, cpus)

    def zeros(obs: np.ndarray) -> np.ndarray:
        return np.zeros((len(obs), 2), np.float32)

    with SubprocVectorEnv(healthy_fns(4), 2, inline_group=True, context="fork", pin_cpus=True) as envs:
        envs.reset(seed=0)
        expected = envs.rollout(3, zeros).observations.copy()
        envs.reset(seed=0)
        monkeypatch.setattr(os, "sched_setaffinity", setaffinity_with_ctrl_c)
        try:
            with pytest.raises(KeyboardInterrupt):
                envs.rollout(3, zeros)
            after = os.sched_getaffinity(0)
        finally:
            monkeypatch.undo()
            real_setaffinity(0, cores)
        assert moves[0] == {min(cores)}, "the rollout did not pin the thread: the test tests nothing"
        assert after == cores
        with pytest.raises(vecenv.NeedsResetError):
            envs.rollout(3, zeros)
        envs.reset(seed=0)
        assert_same(envs.rollout(3, zeros).observations, expected)
        assert os.sched_getaffinity(0) == cores
    assert open_fds() == before_fds


#: Seconds the parent's own group takes for one step in the test below, past its timeout.
_INLINE_STEP_S = 0.5


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call", ["rollout_wait", "step_wait"])
def test_a_timeout_the_parents_group_ran_past_says_how_long_the_call_took(call: str) -> None:
    """The group this process hosts cannot be cut short: when its step runs past ``timeout``
    and a worker has not replied by then, the error gives the timeout and the seconds that
    actually went by (a monotonic clock's), not the timeout alone, which read as if the call had
    returned at once."""
    import functools
    import re
    import time

    from tests.helpers.faults import FaultEnv

    fns = [
        functools.partial(FaultEnv, index=0, fault="sleep", where="step", target=0, duration=_INLINE_STEP_S),
        functools.partial(FaultEnv, index=1),
        functools.partial(FaultEnv, index=2, fault="hang", where="step", target=2),  # worker 1 never replies
        functools.partial(FaultEnv, index=3),
    ]
    envs = SubprocVectorEnv(fns, 2, inline_group=True, context="fork")
    try:
        envs.reset(seed=0)
        if call == "rollout_wait":
            envs.rollout_async(2, "random")
        else:
            envs.step_async(np.zeros((4, 2), np.float32))
        start = time.monotonic()
        with pytest.raises(vecenv.VecEnvTimeoutError) as raised:
            getattr(envs, call)(timeout=0.1)
        took = time.monotonic() - start
        message = str(raised.value)
        assert message.startswith(f"The call to `{call}` has timed out after 0.1 second(s) ("), message
        assert "No reply yet from worker 1 (envs 2..3)" in message, message
        elapsed = re.search(r"\(([0-9.]+) s elapsed\)", message)
        assert elapsed is not None, message
        assert _INLINE_STEP_S <= float(elapsed.group(1)) <= took + 0.01, (message, took)
    finally:
        envs.close(terminate=True)
