"""``vecenv.parent.state``: the call state's transitions and checks, and the seed book.

No process: :class:`~vecenv.parent.state.CallState` is driven directly, with a stand-in for the
pool it reads (``broken``, ``in_flight``). The checks' messages are Gymnasium's
(``AsyncVectorEnv``'s), since user code matches on them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector.async_vector_env import AsyncState

from vecenv.errors import NeedsResetError, WorkerDiedError
from vecenv.parent.records import WorkerRecord
from vecenv.parent.state import CallState, SeedBook, State

pytestmark = pytest.mark.timeout(30)


class FakePool:
    """What the checks read of a pool."""

    def __init__(self) -> None:
        self.broken: WorkerDiedError | None = None
        self.busy = False

    def in_flight(self) -> bool:
        return self.busy


def _calls(num_envs: int = 4) -> tuple[CallState, FakePool]:
    calls, pool = CallState("SubprocVectorEnv"), FakePool()
    calls.bind(pool, num_envs)
    return calls, pool


def _snapshot(calls: CallState) -> tuple:
    return calls.state, calls.waiting, list(calls.pending), calls.reset_mask, calls.ended.tolist(), calls.closed


def test_states_name_their_calls_as_gymnasiums_async_states() -> None:
    for name in ("DEFAULT", "WAITING_RESET", "WAITING_STEP", "WAITING_CALL"):
        assert State[name].value == AsyncState[name].value
    assert State.POOL is State.WAITING_RECV and State.WAITING_RECV.value == "recv"


def test_a_call_begins_and_finishes() -> None:
    calls, _ = _calls()
    workers = [WorkerRecord(0), WorkerRecord(1)]
    assert calls.state is State.DEFAULT and calls.pending == []
    calls.check_can_start("step_async")
    mask = np.array([True, False, False, True])
    calls.begin(State.WAITING_RESET, workers, mask)
    assert calls.state is State.WAITING_RESET and calls.pending == workers and calls.reset_mask is mask
    calls.check_waiting(State.WAITING_RESET, "reset_wait", "reset_async")
    calls.finish()
    assert calls.state is State.DEFAULT
    calls.check_can_start("step_async")


def test_a_second_call_while_one_is_pending_is_refused_as_gymnasium_refuses_it() -> None:
    calls, _ = _calls()
    calls.begin(State.WAITING_STEP, [WorkerRecord(0)])
    before = _snapshot(calls)
    with pytest.raises(AlreadyPendingCallError) as excinfo:
        calls.check_can_start("step_async")
    assert str(excinfo.value) == "Calling `step_async` while waiting for a pending call to `step` to complete."
    assert excinfo.value.name == "step"
    assert _snapshot(calls) == before  # a check changes nothing


def test_a_wait_without_its_call_is_refused_as_gymnasium_refuses_it() -> None:
    calls, _ = _calls()
    with pytest.raises(NoAsyncCallError) as excinfo:
        calls.check_waiting(State.WAITING_STEP, "step_wait", "step_async")
    assert str(excinfo.value) == "Calling `step_wait` without any prior call to `step_async`."
    assert excinfo.value.name == "step"
    calls.begin(State.WAITING_CALL, [])
    with pytest.raises(
        NoAsyncCallError, match=re.escape("Calling `reset_wait` without any prior call to `reset_async`.")
    ):
        calls.check_waiting(State.WAITING_RESET, "reset_wait", "reset_async")


def test_a_wait_for_another_call_than_the_pending_one_names_the_pending_one() -> None:
    calls, _ = _calls()
    calls.begin(State.WAITING_STEP, [WorkerRecord(0)])
    with pytest.raises(NoAsyncCallError) as excinfo:
        calls.check_waiting(State.WAITING_RECV, "recv", "async_reset")
    assert str(excinfo.value) == (
        "Calling `recv` without any prior call to `async_reset`. A `step` call is pending; complete it first."
    )


def test_after_close_every_check_raises_gymnasiums_closed_error() -> None:
    calls, _ = _calls()
    calls.begin(State.WAITING_STEP, [])
    calls.mark_closed()
    assert calls.closed and calls.state is State.CLOSED and calls.waiting is State.CLOSED
    message = "Trying to operate on `SubprocVectorEnv`, after a call to `close()`."
    for check in (
        lambda: calls.check_open("step"),
        lambda: calls.check_can_start("step_async"),
        lambda: calls.check_waiting(State.WAITING_STEP, "step_wait", "step_async"),
    ):
        with pytest.raises(ClosedEnvironmentError) as excinfo:
            check()
        assert str(excinfo.value) == message


def test_a_broken_pool_makes_the_state_broken_and_the_checks_raise_its_death() -> None:
    calls, pool = _calls()
    calls.begin(State.WAITING_STEP, [])
    pool.broken = WorkerDiedError("worker 1 (envs 2..3) was killed", worker=1, envs=range(2, 4), exitcode=-9)
    assert calls.state is State.BROKEN and calls.waiting is State.WAITING_STEP  # close() warns of the step
    with pytest.raises(WorkerDiedError) as excinfo:
        calls.check_can_start("reset")
    error = excinfo.value
    assert str(error) == "`reset` cannot run: worker 1 (envs 2..3) was killed"
    assert (error.worker, error.envs, error.exitcode) == (1, range(2, 4), -9) and error.__cause__ is pool.broken
    calls.mark_closed()
    assert calls.state is State.CLOSED  # closed wins over broken


def test_envs_of_a_finished_async_batch_count_as_idle() -> None:
    calls, pool = _calls()
    calls.poison("`step` failed (ValueError)")
    calls.batches_started()
    assert calls.state is State.WAITING_RECV and calls.pending == []
    calls.check_steppable("recv", "async_reset()")  # async_reset resets every env
    pool.busy = True
    with pytest.raises(AlreadyPendingCallError, match="pending call to `recv`"):
        calls.check_can_start("reset")
    pool.busy = False
    calls.check_can_start("reset")


def test_a_poisoned_state_refuses_steps_until_a_full_reset() -> None:
    calls, _ = _calls()
    calls.poison("`step` failed (VecEnvTimeoutError)")
    with pytest.raises(NeedsResetError) as excinfo:
        calls.check_steppable("step", "reset()")
    assert str(excinfo.value) == (
        "Calling `step` after `step` failed (VecEnvTimeoutError): call `reset()` first without a reset_mask "
        "(which envs it reached is not known)."
    )
    calls.begin(State.WAITING_RESET, [], np.array([True, False, True, True]))
    calls.reset_done()  # a masked reset leaves some envs as they were
    with pytest.raises(NeedsResetError):
        calls.check_steppable("step", "reset()")
    calls.begin(State.WAITING_RESET, [], None)
    calls.reset_done()
    calls.check_steppable("step", "reset()")


def test_ended_envs_are_named_until_they_are_reset() -> None:
    calls, _ = _calls(4)
    calls.check_none_ended("step")
    calls.step_done(np.array([False, True, False, False]), np.array([False, False, True, False]))
    assert calls.ended.tolist() == [False, True, True, False]
    with pytest.raises(NeedsResetError) as excinfo:
        calls.check_none_ended("step")
    assert str(excinfo.value) == (
        "Calling `step` with autoreset_mode=DISABLED while envs [1, 2] have terminated or truncated: "
        "reset them first, e.g. reset(options={'reset_mask': mask})."
    )
    calls.begin(State.WAITING_RESET, [], np.array([False, True, False, False]))
    calls.reset_done()
    with pytest.raises(NeedsResetError, match=r"envs \[2\] have"):
        calls.check_none_ended("step")
    calls.step_done(np.zeros(4, bool), np.zeros(4, bool))  # a step overwrites what ended
    calls.check_none_ended("step")
    calls.step_done(np.ones(4, bool), np.zeros(4, bool))
    calls.begin(State.WAITING_RESET, [], None)
    calls.reset_done()
    assert not calls.ended.any()


def test_before_bind_no_pool_is_read() -> None:
    calls = CallState("RayVectorEnv")
    assert calls.state is State.DEFAULT and calls.ended.shape == (0,)
    calls.check_can_start("reset")
    calls.mark_closed()
    with pytest.raises(ClosedEnvironmentError, match="`RayVectorEnv`"):
        calls.check_open("reset")


# -- SeedBook ------------------------------------------------------------------------------------


def test_seed_book_remembers_the_last_seed_of_each_env() -> None:
    book = SeedBook(4)
    assert book.seeds == [None] * 4
    book.remember([10, 11, 12, 13], None)
    book.remember([None, 21, 22, 23], np.array([True, True, False, False]))  # only masked envs
    assert book.seeds == [10, 21, 12, 13]  # an unseeded reset keeps the env's last seed


def test_seed_book_reseeds_a_restarted_range_reproducibly() -> None:
    book = SeedBook(6)
    book.remember([100, 101, None, 103, 104, 105], None)
    assert book.reseeded(0, 3, 1) == [106, 107, None]  # s + restart * num_envs; unseeded stays so
    assert book.reseeded(3, 6, 2) == [115, 116, 117]
    assert book.reseeded(3, 6, 2) == book.reseeded(3, 6, 2)  # the same crash, the same seeds
    assert book.seeds == [100, 101, None, 103, 104, 105]  # reading changes nothing


def _raised(check) -> tuple[type, str] | None:
    try:
        check()
    except Exception as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("disabled", [False, True], ids=["next-step", "disabled"])
def test_check_step_is_the_three_checks_of_a_step_in_order(disabled: bool) -> None:
    """The step's one check raises what check_can_start, check_steppable and (DISABLED)
    check_none_ended raise, in that order, in every state that can refuse a step."""

    def sequence(calls: CallState) -> None:
        calls.check_can_start("step_async")
        calls.check_steppable("step_async", "reset()")
        if disabled:
            calls.check_none_ended("step_async")

    def fresh() -> tuple[CallState, FakePool]:
        return _calls()

    cases = []
    calls, _ = fresh()
    cases.append(calls)  # nothing to refuse
    calls, _ = fresh()
    calls.ended[2] = True
    cases.append(calls)
    calls, _ = fresh()
    calls.poison("`step_wait` failed (ValueError)")
    cases.append(calls)
    calls, _ = fresh()
    calls.begin(State.WAITING_RESET, [])
    cases.append(calls)
    calls, pool = fresh()
    calls.batches_started()
    pool.busy = True
    cases.append(calls)
    calls, pool = fresh()
    pool.broken = WorkerDiedError("worker 0 died", worker=0, envs=range(2), exitcode=-9)
    cases.append(calls)
    calls, _ = fresh()
    calls.mark_closed()
    cases.append(calls)
    outcomes = [_raised(lambda c=c: c.check_step("step_async", disabled)) for c in cases]
    assert outcomes == [_raised(lambda c=c: sequence(c)) for c in cases]
    assert outcomes[0] is None and sum(o is not None for o in outcomes) == 5 + disabled
