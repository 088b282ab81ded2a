"""``vecenv.parent.pool.WorkerPool`` (and the worker records of ``vecenv.parent.records``).

Almost everything here runs the pool on :class:`~tests.helpers.fakes.FakeTransport`, in this
process: no worker is started, and time is a fake clock, so a timeout takes no time. The last
section checks one pool behaviour end to end, through real worker processes.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import vecenv.parent.pool
from tests.helpers.envs import MarkerEnv, fns
from tests.helpers.fakes import ACT_SPACE, OBS_SPACE, FakeClock, FakeTransport, Sent, use_clock
from tests.helpers.faults import late_replies_arrived
from vecenv import SubprocVectorEnv, VecEnvTimeoutError, WorkerDiedError
from vecenv.errors import PackedException, RemoteTraceback
from vecenv.parent.groups import split_groups
from vecenv.parent.pool import WorkerPool
from vecenv.parent.records import OwedCall, StatusError, WorkerRecord, WorkerStatus
from vecenv.wire.buffers import BufferSpec
from vecenv.wire.protocol import Attach, CallArgs, Command, StepReply

STARTING, IDLE, BUSY, READY, LATE, DEAD = (
    WorkerStatus.STARTING,
    WorkerStatus.IDLE,
    WorkerStatus.BUSY,
    WorkerStatus.READY,
    WorkerStatus.LATE,
    WorkerStatus.DEAD,
)
NEXT = AutoresetMode.NEXT_STEP


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The pool's deadlines and the fake transport's waits on one fake clock."""
    fake = FakeClock()
    use_clock(monkeypatch, fake, vecenv.parent.pool)
    return fake


def _sizes(*sizes: int) -> list[Any]:
    return [lambda n=n: n for n in sizes]


def _pool(clock: FakeClock, *sizes: int) -> tuple[WorkerPool, FakeTransport]:
    transport = FakeTransport(clock)
    return WorkerPool(transport, _sizes(*sizes)), transport


def _started(clock: FakeClock, *sizes: int) -> tuple[WorkerPool, FakeTransport]:
    """A pool past its handshake: every worker IDLE with its rows."""
    pool, transport = _pool(clock, *sizes)
    hellos = pool.hellos(None)
    spec = BufferSpec.plan(sum(sizes), OBS_SPACE, ACT_SPACE, False)
    pool.attach([h.num_envs for h in hellos], spec, NEXT)
    return pool, transport


def _statuses(pool: WorkerPool) -> list[WorkerStatus]:
    return [w.status for w in pool.workers]


def _answer_with_call_id(worker: int, sent: Sent) -> tuple[bool, Any]:
    """Each reply says which call and worker it answers, so a reply left over shows."""
    return True, (sent.call_id, worker)


def _step(pool: WorkerPool) -> None:
    pool.send(pool.workers, Command.STEP, [None] * len(pool.workers), "step")


# -- start-up ----------------------------------------------------------------------------------


def test_workers_start_then_idle_and_attach_gives_each_its_rows(clock: FakeClock) -> None:
    pool, transport = _pool(clock, 2, 1, 3)
    assert _statuses(pool) == [STARTING] * 3 and transport.launches == [0, 1, 2]
    assert pool.in_flight() is False  # a Hello owed is not a call in flight
    hellos = pool.hellos(None)
    assert [h.num_envs for h in hellos] == [2, 1, 3]
    assert _statuses(pool) == [IDLE] * 3
    spec = BufferSpec.plan(6, OBS_SPACE, ACT_SPACE, False)
    buffers = pool.attach([2, 1, 3], spec, NEXT)
    assert [w.envs for w in pool.workers] == [range(0, 2), range(2, 3), range(3, 6)]
    assert transport.attached == [
        (0, Attach(0, 2, NEXT, spec)),
        (1, Attach(2, 1, NEXT, spec)),
        (2, Attach(3, 3, NEXT, spec)),
    ]
    assert buffers is pool.buffers and buffers.rewards.shape == (6,)


def test_hellos_that_arrive_in_reverse_come_back_in_worker_order(clock: FakeClock) -> None:
    pool, transport = _pool(clock, 1, 2, 3)
    transport.queue.reverse()
    assert [h.num_envs for h in pool.hellos(None)] == [1, 2, 3]
    assert [polled for polled, _ in transport.polls] == [[0, 1, 2], [0, 1], [0]]


def test_a_failed_hello_raises_at_once_naming_the_group(clock: FakeClock) -> None:
    def broken() -> int:
        raise ValueError("cannot build")

    transport = FakeTransport(clock)
    transport.hold(2)  # never answers: fail_fast must not wait for it
    pool = WorkerPool(transport, [lambda: 2, broken, lambda: 2])
    with pytest.raises(ValueError, match="cannot build") as excinfo:
        pool.hellos(None)
    assert excinfo.value.__notes__ == ["raised in its env group (worker 1 on the fake node) during `__init__`"]
    assert isinstance(excinfo.value.__cause__, RemoteTraceback)
    assert _statuses(pool) == [IDLE, IDLE, LATE]  # not waited for: its Hello is dropped on arrival


# -- calls -------------------------------------------------------------------------------------


def test_call_ids_are_unique_and_increasing_and_workers_are_busy_until_taken(clock: FakeClock) -> None:
    pool, transport = _started(clock, 2, 2, 2)
    _step(pool)
    assert [(w, s.call_id, s.command) for w, s in transport.sent] == [
        (0, 1, Command.STEP),
        (1, 2, Command.STEP),
        (2, 3, Command.STEP),
    ]
    assert _statuses(pool) == [BUSY] * 3 and pool.in_flight()
    with pytest.raises(StatusError, match="`reset` sent to worker 0 while it is busy"):
        pool.send(pool.workers[:1], Command.RESET, [None], "reset")
    assert pool.gather(pool.workers, None, "step") == [StepReply([])] * 3
    assert _statuses(pool) == [IDLE] * 3 and not pool.in_flight()
    _step(pool)
    later = [s.call_id for _, s in transport.sent[3:]]
    assert later == sorted(later) and min(later) > 3 and len(set(later)) == 3  # never an id twice


def test_a_payload_that_cannot_be_encoded_sends_nothing(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1, 1)
    payloads = [CallArgs("ping", (), {}), CallArgs("ping", (lambda: None,), {})]
    with pytest.raises((pickle.PicklingError, AttributeError)):  # a local lambda: plain pickle refuses
        pool.send(pool.workers, Command.CALL, payloads, "call")
    assert transport.sent == [] and _statuses(pool) == [IDLE, IDLE]


def test_gather_returns_replies_in_worker_order_whatever_their_arrival(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1, 1, 1)
    transport.respond = _answer_with_call_id
    _step(pool)
    transport.queue.reverse()  # worker 2 answers first
    assert pool.gather(pool.workers, None, "step") == [(1, 0), (2, 1), (3, 2)]


def test_an_error_is_raised_only_after_every_worker_answered(clock: FakeClock) -> None:
    """Workers 1 and 2 fail, worker 2's error arrives first: worker 1's is raised (worker order),
    once worker 0 has answered too, so no reply is left to be taken for a later call's."""
    pool, transport = _started(clock, 2, 2, 2)

    def respond(worker: int, sent: Sent) -> tuple[bool, Any]:
        if worker == 0:
            return True, ("fine", sent.call_id)
        return False, PackedException(ValueError(f"worker {worker} broke"), 1)

    transport.respond = respond
    _step(pool)
    transport.queue = [transport.queue[2], transport.queue[1], transport.queue[0]]
    polls = len(transport.polls)
    with pytest.raises(ValueError, match="worker 1 broke") as excinfo:
        pool.gather(pool.workers, None, "step")
    assert excinfo.value.__notes__ == ["raised in env 3 (worker 1 on the fake node) during `step`"]
    assert len(transport.polls) - polls == 3  # every reply was read before the raise
    assert _statuses(pool) == [IDLE] * 3 and transport.queue == []
    transport.respond = _answer_with_call_id
    _step(pool)
    assert pool.gather(pool.workers, None, "step") == [(4, 0), (5, 1), (6, 2)]


def test_an_error_outside_any_env_names_the_groups_envs(clock: FakeClock) -> None:
    pool, transport = _started(clock, 2, 3)
    transport.respond = lambda w, s: (w == 0, None if w == 0 else PackedException(TypeError("bad payload"), None))
    pool.send(pool.workers, Command.CALL, [CallArgs("x", (), {})] * 2, "call")
    with pytest.raises(TypeError) as excinfo:
        pool.gather(pool.workers, None, "call")
    assert excinfo.value.__notes__ == ["raised in envs 2..4 (worker 1 on the fake node) during `call`"]


def test_a_timeout_makes_the_unanswered_late_and_their_replies_are_dropped(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1, 1, 1)
    transport.respond = _answer_with_call_id
    transport.hold(1)
    start = clock.now
    _step(pool)
    # Gymnasium's message and the seconds that went by, then the one worker that did not reply
    # (workers 0 and 2 did).
    expected = (
        r"^The call to `step` has timed out after 2.5 second\(s\) \(2.5 s elapsed\)\. "
        r"No reply yet from worker 1 \(envs 1..1 on the fake node\)\.$"
    )
    with pytest.raises(VecEnvTimeoutError, match=expected):
        pool.gather(pool.workers, 2.5, "step")
    assert clock.now == start + 2.5  # waited until the deadline, and not past it
    assert _statuses(pool) == [IDLE, LATE, IDLE] and not pool.in_flight()
    transport.release(1)  # the late reply to call 2 arrives
    _step(pool)  # a LATE worker takes new calls
    assert _statuses(pool) == [BUSY] * 3
    assert pool.gather(pool.workers, None, "step") == [(4, 0), (5, 1), (6, 2)]
    assert _statuses(pool) == [IDLE] * 3 and transport.queue == []


def test_an_interrupt_while_replies_are_taken_drops_those_not_taken(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl+C between two replies taken from the workers: the others are dropped (a reply left
    READY made the next command refuse that worker)."""
    pool, transport = _started(clock, 1, 1, 1)
    transport.respond = _answer_with_call_id
    transport.batches = True  # every reply found in one wait
    real = WorkerRecord.take
    taken: list[int] = []

    def take(self: WorkerRecord) -> Any:
        if len(taken) == 1:
            raise KeyboardInterrupt
        taken.append(self.index)
        return real(self)

    monkeypatch.setattr(WorkerRecord, "take", take)
    _step(pool)
    with pytest.raises(KeyboardInterrupt):
        pool.gather(pool.workers, None, "step")
    monkeypatch.setattr(WorkerRecord, "take", real)
    assert taken == [0] and _statuses(pool) == [IDLE] * 3 and not pool.in_flight()
    _step(pool)
    assert pool.gather(pool.workers, None, "step") == [(4, 0), (5, 1), (6, 2)]


def test_a_deadline_already_past_raises_without_waiting(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1)
    transport.hold(0)
    _step(pool)
    start = clock.now
    with pytest.raises(VecEnvTimeoutError, match="after 0 second"):
        pool.gather(pool.workers, 0, "step")
    assert clock.now == start and transport.polls[-1] == ([0], 0.0)


def test_drain_reads_late_replies_that_arrived_and_makes_the_worker_idle(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1, 1)
    transport.hold(0)
    _step(pool)
    with pytest.raises(VecEnvTimeoutError):
        pool.gather(pool.workers, 1.0, "step")
    assert _statuses(pool) == [LATE, IDLE]
    pool.drain()  # nothing arrived: returns at once
    assert _statuses(pool) == [LATE, IDLE]
    transport.release(0)
    pool.drain()
    assert _statuses(pool) == [IDLE, IDLE] and transport.queue == []


# -- deaths ------------------------------------------------------------------------------------


def test_a_death_breaks_the_pool_and_ends_every_worker(clock: FakeClock) -> None:
    pool, transport = _started(clock, 2, 2, 2)
    transport.hold(1)
    transport.hold(2)
    _step(pool)
    transport.die(1)
    with pytest.raises(WorkerDiedError) as excinfo:
        pool.gather(pool.workers, None, "step")
    error = excinfo.value
    assert str(error) == (
        "worker 1 (envs 2..3 on the fake node) was killed by signal SIGKILL during `step`; "
        "the vector env is unusable, close it and make a new one"
    )
    assert (error.worker, error.envs, error.exitcode) == (1, range(2, 4), -9)
    # The pool keeps an equal error that was never raised: no traceback, so no frame (and no
    # vector env) is kept alive through it.
    broken = pool.broken
    assert broken is not None and broken is not error and broken.__traceback__ is None
    assert (str(broken), broken.worker, broken.envs, broken.exitcode) == (str(error), 1, range(2, 4), -9)
    assert transport.killed == 1
    assert _statuses(pool) == [DEAD] * 3 and not pool.in_flight()


def test_a_send_to_a_worker_that_is_gone_breaks_the_pool(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1, 1, 1)
    transport.dead.add(1)  # gone without a word: the send finds out
    with pytest.raises(WorkerDiedError, match=r"worker 1 \(envs 1..1 on the fake node\) .* during `reset`"):
        pool.send(pool.workers, Command.RESET, [None] * 3, "reset")
    assert [w for w, _ in transport.sent] == [0]  # nothing was sent after the death
    assert pool.broken is not None and _statuses(pool) == [DEAD] * 3


def test_a_death_during_start_up_names_no_envs(clock: FakeClock) -> None:
    pool, transport = _pool(clock, 2, 2)
    transport.queue.clear()
    transport.die(0)
    with pytest.raises(WorkerDiedError, match=r"^worker 0 \(envs not yet assigned on the fake node\) .* `__init__`"):
        pool.hellos(None)


def test_a_death_during_start_up_names_the_envs_its_builder_was_to_build(clock: FakeClock) -> None:
    transport = FakeTransport(clock)
    pool = WorkerPool(transport, split_groups([lambda: 1] * 5, 2))  # envs 0..2 and 3..4
    transport.queue.clear()
    transport.die(1)
    with pytest.raises(WorkerDiedError, match=r"^worker 1 \(envs 3..4 on the fake node\) .* `__init__`") as info:
        pool.hellos(None)
    assert info.value.envs == range(3, 5)


# -- shutdown ----------------------------------------------------------------------------------


def test_shutdown_closes_every_idle_worker_politely_then_stops(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1, 2)
    assert pool.shutdown(3.0, wait_late=False) is None
    assert transport.commands() == [Command.CLOSE, Command.CLOSE]
    assert transport.stopped == [(clock.now + 3.0, [0, 1])]
    assert pool.buffers is not None and pool.buffers.block is None


@pytest.mark.parametrize("wait_late", [False, True], ids=["skip-late", "wait-late"])
def test_shutdown_closes_a_late_worker_politely_only_when_asked(clock: FakeClock, wait_late: bool) -> None:
    pool, transport = _started(clock, 1, 1, 1)
    transport.hold(1)  # stuck in its step for good
    _step(pool)
    with pytest.raises(VecEnvTimeoutError):
        pool.gather(pool.workers, 1.0, "step")
    start = clock.now
    assert pool.shutdown(2.0, wait_late=wait_late) is None
    closed = [w for w, s in transport.sent if s.command is Command.CLOSE]
    assert closed == ([0, 1, 2] if wait_late else [0, 2])
    assert transport.stopped == [(start + 2.0, closed)]
    # Waiting for the stuck worker's close took the whole timeout, and no more.
    assert clock.now == (start + 2.0 if wait_late else start)


def test_shutdown_first_reads_late_replies_so_those_workers_close_politely(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1, 1)
    transport.hold(1)
    _step(pool)
    with pytest.raises(VecEnvTimeoutError):
        pool.gather(pool.workers, 0.5, "step")
    transport.release(1)  # the late reply has arrived by the time close() runs
    pool.shutdown(3.0, wait_late=False)
    assert [w for w, s in transport.sent if s.command is Command.CLOSE] == [0, 1]


def test_shutdown_returns_an_envs_close_error_and_still_stops(clock: FakeClock) -> None:
    pool, transport = _started(clock, 2, 2)

    def respond(worker: int, sent: Sent) -> tuple[bool, Any]:
        if sent.command is Command.CLOSE and worker == 1:
            return False, PackedException(RuntimeError("close failed"), 0)
        return True, None

    transport.respond = respond
    error = pool.shutdown(3.0, wait_late=False)
    assert isinstance(error, RuntimeError) and str(error) == "close failed"
    assert error.__notes__ == ["raised in env 2 (worker 1 on the fake node) during `close`"]
    assert transport.stopped == [(clock.now + 3.0, [0, 1])]


def test_shutdown_of_a_broken_pool_sends_nothing(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1, 1)
    transport.hold(0)
    _step(pool)
    transport.die(0)
    with pytest.raises(WorkerDiedError):
        pool.gather(pool.workers, None, "step")
    sent_before = len(transport.sent)
    assert pool.shutdown(3.0, wait_late=True) is None
    assert len(transport.sent) == sent_before and transport.stopped == [(clock.now + 3.0, [])]


def test_shutdown_with_no_time_sends_nothing(clock: FakeClock) -> None:
    pool, transport = _started(clock, 1, 1)
    pool.shutdown(0.0, wait_late=False)
    assert transport.sent == [] and transport.stopped == [(clock.now, [])]


# -- the worker record's transitions -----------------------------------------------------------


def test_record_transitions() -> None:
    w = WorkerRecord(3)
    assert w.status is STARTING and w.owes
    with pytest.raises(StatusError, match="`step` sent to worker 3 while it is starting"):
        w.check_sendable("step")  # the pool checks every worker before it sends anything
    w.answered(0, True, "hello", order=0)
    assert w.status is READY and w.in_flight
    assert w.take() == (True, "hello") and w.status is IDLE and not w.owes
    with pytest.raises(StatusError, match="worker 3 has no reply to take: it is idle"):
        w.take()
    w.sent(OwedCall(1, "step", True, Command.STEP, "message 1"))
    w.answered(99, True, "not ours", order=1)  # an id it does not owe changes nothing
    assert w.status is BUSY
    w.abandon()
    assert w.status is LATE and w.owes and not w.in_flight
    w.sent(OwedCall(2, "reset", True, Command.RESET, "message 2"))  # a late worker takes a new call
    w.answered(1, True, "late", order=2)  # the late reply: dropped
    assert w.status is BUSY and w.reply is None
    w.answered(2, True, "fresh", order=3)
    assert w.status is READY and w.ready_at == 3 and w.take() == (True, "fresh")


def test_abandon_drops_a_reply_not_taken_and_relaunch_gives_back_the_wanted_call() -> None:
    w = WorkerRecord(0)
    w.answered(0, True, "hello", order=0)
    w.take()
    w.sent(OwedCall(1, "step", True, Command.STEP, "m1"))
    w.answered(1, True, "r1", order=1)
    w.abandon()  # a new async reset: the held reply is dropped
    assert w.status is IDLE and w.reply is None
    w.sent(OwedCall(2, "step", True, Command.STEP, "m2"))
    w.abandon()
    w.sent(OwedCall(3, "call", True, Command.CALL, "m3"))
    owed = w.relaunched()
    assert owed is not None and (owed.call_id, owed.command, owed.message) == (3, Command.CALL, "m3")
    assert w.status is STARTING
    w.died()
    assert w.status is DEAD and not w.owes and w.relaunched() is None


def test_a_restarts_report_is_kept_on_the_record_until_a_call_reports_it() -> None:
    w = WorkerRecord(1)
    w.restart_unreported("reset reply", "observations before")
    assert (w.unreported_restart, w.restart_observations) == ("reset reply", "observations before")
    w.restart_reported()
    assert (w.unreported_restart, w.restart_observations) == (None, None)
    w.mark_restart_in(7)
    assert not w.marks_restart(6)  # another call's reply is not marked
    assert w.marks_restart(7) and not w.marks_restart(7)  # the mark is used once
    w.restart_unreported("reset reply", "observations before")
    w.relaunched()  # a new replacement: what the old one had to report is gone with it
    assert (w.unreported_restart, w.restart_observations) == (None, None)


# -- end to end, through worker processes ------------------------------------------------------


@pytest.mark.timeout(60)
def test_close_after_a_late_reply_arrived_closes_the_envs(tmp_path: Any) -> None:
    envs = SubprocVectorEnv(fns(MarkerEnv, 4, marker_dir=str(tmp_path), delay=0.5), num_workers=2)
    try:
        envs.reset(seed=0)
        envs.step_async(np.zeros(4, np.int64))
        with pytest.raises(VecEnvTimeoutError):
            envs.step_wait(timeout=0.1)  # every step sleeps 0.5 s
        assert late_replies_arrived(envs, 20), "the late reply never arrived"
    finally:
        envs.close()
    assert sorted(os.listdir(tmp_path)) == [f"closed-{i}" for i in range(4)]
