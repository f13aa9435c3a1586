"""Every kind of end goes through ``end_tasks``, fenced as the lifecycle says; on every store."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from django_workers import System, TaskStatus, cancel_task, clock, lifecycle, submit_task
from django_workers.cancellation import CancelReason
from django_workers.info import TaskFailure, TaskInfo
from django_workers.lifecycle import EndKind
from django_workers.options import TaskOptions
from django_workers.stores import WorkerStore
from django_workers.stores.base import WorkerRegistration
from django_workers.workflows import Workflow
from tests.tasks import add

LIMITS = {"seq": 1}
Case = Callable[[WorkerStore], None]
CASES: dict[EndKind, list[Case]] = {}


def case(kind: EndKind) -> Callable[[Case], Case]:
    """Register a test as covering ``kind``, so a kind without a test is caught."""

    def register(fn: Case) -> Case:
        CASES.setdefault(kind, []).append(fn)
        return fn

    return register


def submit(store: WorkerStore, key: str, queue: str = "default", retries: int = 0) -> str:
    options = TaskOptions(retries=retries)
    return submit_task(
        key, add, System(), args=[1, 2], scope="global", queue=queue, options=options, store=store
    )


def claim(store: WorkerStore, worker: str = "w1", queue: str | None = None) -> list[TaskInfo]:
    return store.claim(worker, [queue] if queue else None, 10, clock.now(), LIMITS)


def claim_at(store: WorkerStore, now: datetime, worker: str = "w1") -> list[TaskInfo]:
    return store.claim(worker, None, 10, now, LIMITS)


def info(store: WorkerStore, task_id: str) -> TaskInfo:
    found = store.get_task_info(task_id)
    assert found is not None
    return found


def register(store: WorkerStore, worker_id: str, age: float = 0.0) -> None:
    when = clock.now() - timedelta(seconds=age)
    store.register_worker(
        WorkerRegistration(
            id=worker_id,
            host="elsewhere",
            pid=1,
            queues=(),
            concurrency=1,
            started_at=when,
            heartbeat_at=when,
        )
    )


def held(store: WorkerStore, worker_id: str) -> int:
    return next(w.held_slots for w in store.list_workers() if w.id == worker_id)


def test_every_kind_of_end_has_a_contract_test() -> None:
    assert set(CASES) == set(EndKind)


# -- a run's own end ------------------------------------------------------------------------


@case(EndKind.RUN)
def test_a_run_end_wins_only_on_its_running_record_under_its_worker(store: WorkerStore) -> None:
    task_id = submit(store, "t")
    [running] = claim(store)
    stranger = lifecycle.run_end(running, "w2", TaskStatus.COMPLETED, clock.now(), result=1)
    assert store.end_tasks([stranger]) == [False]
    end = lifecycle.run_end(running, "w1", TaskStatus.COMPLETED, clock.now(), result=3)
    assert store.end_tasks([end]) == [True]
    ended = info(store, task_id)
    assert (ended.status, ended.result, ended.finished_at) == ("COMPLETED", 3, end.finished_at)
    assert store.end_tasks([end]) == [False]  # an ended record is never ended twice


# -- timeout and cancel: the record ends, the function may run on ---------------------------


@case(EndKind.TIMEOUT)
def test_a_timeout_ends_the_record_and_keeps_the_slot_until_the_function_returns(
    store: WorkerStore,
) -> None:
    register(store, "w1")
    first, second = submit(store, "a", "seq"), submit(store, "b", "seq")
    [running] = claim(store, queue="seq")
    timed_out = lifecycle.timeout_end(running, "w1", clock.now(), [])
    assert store.end_tasks([timed_out]) == [True]
    ended = info(store, first)
    assert (ended.status, ended.cancel_reason) == ("FAILED", CancelReason.TIMEOUT)
    assert ended.error is not None
    assert ended.error.type.endswith("TaskTimeoutError")
    assert [e.type for e in ended.errors] == [ended.error.type]
    # The function still runs: the sequential queue stays full.
    assert held(store, "w1") == 1
    assert claim(store, queue="seq") == []
    # It returns; its own end loses the fence and frees the slot.
    own = lifecycle.run_end(running, "w1", TaskStatus.COMPLETED, clock.now(), result=3)
    assert store.end_tasks([own]) == [False]
    assert info(store, first).status == "FAILED"
    assert held(store, "w1") == 0
    assert [t.id for t in claim(store, queue="seq")] == [second]


@case(EndKind.CANCEL)
def test_a_cancel_of_a_running_task_holds_its_slot_until_the_function_returns(
    store: WorkerStore,
) -> None:
    register(store, "w1")
    first, second = submit(store, "a", "seq"), submit(store, "b", "seq")
    [running] = claim(store, queue="seq")
    assert cancel_task(first, System(), store=store).status == "CANCELLED"
    assert held(store, "w1") == 1
    assert claim(store, queue="seq") == []
    own = lifecycle.run_end(running, "w1", TaskStatus.COMPLETED, clock.now(), result=3)
    assert store.end_tasks([own]) == [False]
    assert held(store, "w1") == 0
    assert [t.id for t in claim(store, queue="seq")] == [second]


@case(EndKind.CANCEL)
def test_a_cancel_is_fenced_on_the_status_and_worker_it_read(store: WorkerStore) -> None:
    task_id = submit(store, "t")
    pending = info(store, task_id)
    claim(store)
    # The record moved (claimed) since the read: the cancel built from it loses.
    assert store.end_tasks([lifecycle.cancel_end(pending, clock.now())]) == [False]
    running = info(store, task_id)
    assert store.end_tasks([lifecycle.cancel_end(running, clock.now())]) == [True]
    assert info(store, task_id).status == "CANCELLED"
    assert store.end_tasks([lifecycle.cancel_end(running, clock.now())]) == [False]


# -- the zombie sweep ---------------------------------------------------------------------------


@case(EndKind.REQUEUE)
def test_the_sweep_requeues_a_dead_workers_run_with_retries_left(store: WorkerStore) -> None:
    register(store, "dead", age=60.0)
    task_id = submit(store, "t", retries=1)
    claim(store, worker="dead")
    [end] = store.recover_zombies(now=clock.now(), stale_before=clock.now() - timedelta(seconds=30))
    assert (end.kind, end.task_id) == (EndKind.REQUEUE, task_id)
    back = info(store, task_id)
    assert (back.status, back.worker_id, back.attempts) == ("PENDING", None, 1)
    assert [e.type for e in back.errors] == ["django_workers.exceptions.WorkerLost"]
    assert back.error is None


@case(EndKind.WORKER_LOST)
def test_the_sweep_fails_a_dead_workers_last_attempt_and_frees_its_slots(
    store: WorkerStore,
) -> None:
    register(store, "dead", age=60.0)
    register(store, "alive")
    lost, cancelled = submit(store, "lost"), submit(store, "cancelled", "seq")
    claim(store, worker="dead")
    cancel_task(cancelled, System(), store=store)  # its function "runs on" in the dead worker
    alive = submit(store, "alive")
    claim(store, worker="alive")
    [end] = store.recover_zombies(now=clock.now(), stale_before=clock.now() - timedelta(seconds=30))
    assert (end.kind, end.task_id) == (EndKind.WORKER_LOST, lost)
    failed = info(store, lost)
    assert failed.status == "FAILED"
    assert failed.error is not None
    assert failed.error.type == "django_workers.exceptions.WorkerLost"
    assert info(store, alive).status == "RUNNING"  # a live worker's run is never touched
    assert [w.id for w in store.list_workers()] == ["alive"]
    assert claim(store, worker="alive", queue="seq") == []  # nothing left there, slot free
    submit(store, "next", "seq")
    assert len(claim(store, worker="alive", queue="seq")) == 1


# -- stops ---------------------------------------------------------------------------------------


@case(EndKind.RETRY)
def test_a_retry_goes_back_pending_until_its_time_keeping_its_failure_and_first_start(
    store: WorkerStore,
) -> None:
    task_id = submit(store, "t", retries=2)
    [running] = claim(store)
    failure = TaskFailure("builtins.ValueError", "first", "tb")
    later = clock.now() + timedelta(seconds=60)
    stranger = lifecycle.retry_end(running, "w2", failure, [], later)
    assert store.end_tasks([stranger]) == [False]
    assert store.end_tasks([lifecycle.retry_end(running, "w1", failure, [], later)]) == [True]
    back = info(store, task_id)
    assert (back.status, back.attempts, back.worker_id, back.run_id) == (
        "PENDING",
        1,
        None,
        running.run_id,
    )
    assert (back.run_after, back.started_at, back.finished_at) == (later, running.started_at, None)
    assert back.error == failure
    assert back.errors == (failure,)
    assert claim(store, worker="w2") == []  # not before its time
    [again] = claim_at(store, later, worker="w2")
    # The second attempt is counted and keeps the first start, which its timeout counts from.
    assert (again.attempts, again.started_at, again.run_id) == (
        2,
        running.started_at,
        running.run_id,
    )


@case(EndKind.RELEASE)
def test_a_released_claim_goes_back_pending_without_its_attempt(store: WorkerStore) -> None:
    task_id = submit(store, "t")
    [running] = claim(store)
    assert running.attempts == 1
    assert store.end_tasks([lifecycle.release_end(running, "w2")]) == [False]
    assert store.end_tasks([lifecycle.release_end(running, "w1")]) == [True]
    back = info(store, task_id)
    assert (back.status, back.attempts, back.worker_id, back.started_at) == (
        "PENDING",
        0,
        None,
        None,
    )
    [again] = claim(store, worker="w2")
    assert (again.id, again.attempts, again.run_id) == (task_id, 1, running.run_id)


@case(EndKind.ABANDON)
def test_an_abandon_ends_only_a_pending_task(store: WorkerStore) -> None:
    running = submit(store, "r")
    claim(store)
    pending = submit(store, "p")
    assert store.end_tasks([lifecycle.abandon_end(info(store, running), clock.now())]) == [False]
    assert store.end_tasks([lifecycle.abandon_end(info(store, pending), clock.now())]) == [True]
    ended = info(store, pending)
    assert (ended.status, ended.cancel_reason) == ("CANCELLED", CancelReason.SHUTDOWN)
    assert ended.error is not None
    assert ended.error.message == "Cancelled by worker shutdown"
    assert info(store, running).status == "RUNNING"


@case(EndKind.REFUSE)
def test_a_refusal_ends_a_queued_node_and_a_claimed_one_before_it_starts(
    store: WorkerStore,
) -> None:
    wf = Workflow("wf", System())
    wf.add("a", add, args=[1, 2], queue="qa")
    wf.add("b", add, args=[1, 2], queue="qb")
    wf.add("c", add, args=[1, 2], queue="qc")
    wf.submit(store=store)
    [a] = claim(store, queue="qa")
    [b] = claim(store, queue="qb")
    assert store.begin_runs([a]) == [True]
    assert store.cancel_workflow("wf", None) is True
    # c was queued: refused at once. b was claimed: its worker's pre-run check refuses it.
    c = info(store, "wf:c")
    assert (c.status, c.cancel_reason) == ("CANCELLED", CancelReason.USER)
    assert c.error is not None
    assert c.error.message == "Cancelled by user"
    assert (info(store, "wf:b").status, info(store, "wf:b").cancel_reason) == ("RUNNING", "user")
    assert store.begin_runs([b]) == [False]
    assert info(store, "wf:b").status == "CANCELLED"
    # A refusal is fenced like any end: a second one changes nothing.
    columns = {
        "id": b.id,
        "run_id": b.run_id,
        "status": "RUNNING",
        "worker_id": "w1",
        "queue": "qb",
    }
    refused = lifecycle.refuse_end(columns, CancelReason.USER, clock.now())
    assert store.end_tasks([refused]) == [False]
    # a was running: asked to stop, it ends when its function returns.
    assert info(store, "wf:a").cancel_reason == "user"
    # Until then the workflow shows the cancel (no undo steps, so nothing is undone).
    assert store.get_workflow("wf").state == "cancelling"  # type: ignore[union-attr]
    done = lifecycle.run_end(a, "w1", TaskStatus.CANCELLED, clock.now())
    assert store.end_tasks([done]) == [True]
    assert store.get_workflow("wf").state == "cancelled"  # type: ignore[union-attr]


def test_a_dependency_failure_refuses_a_queued_node_with_the_workflow_reason(
    store: WorkerStore,
) -> None:
    wf = Workflow("ff", System(), fail_fast=True)
    wf.add("a", add, args=[1, 2], queue="qa")
    wf.add("c", add, args=[1, 2], queue="qc")
    wf.submit(store=store)
    [a] = claim(store, queue="qa")
    failed = lifecycle.run_end(a, "w1", TaskStatus.FAILED, clock.now(), error={"message": "x"})
    assert store.end_tasks([failed]) == [True]
    c = info(store, "ff:c")
    assert (c.status, c.cancel_reason) == ("CANCELLED", CancelReason.WORKFLOW)
    assert c.error is not None
    assert c.error.message == "Cancelled by its workflow: a dependency failed or was cancelled"


# -- one transaction, many ends -----------------------------------------------------------------


def test_a_batch_of_ends_reports_each_fence(store: WorkerStore) -> None:
    ids = [submit(store, f"t{i}") for i in range(3)]
    running = {t.id: t for t in claim(store)}
    cancel_task(ids[1], System(), store=store)
    ends = [
        lifecycle.run_end(running[task_id], "w1", TaskStatus.COMPLETED, clock.now(), result=i)
        for i, task_id in enumerate(ids)
    ]
    assert store.end_tasks(ends) == [True, False, True]
    assert [info(store, t).status for t in ids] == ["COMPLETED", "CANCELLED", "COMPLETED"]


@pytest.mark.parametrize("status", [TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED])
def test_no_other_store_call_can_end_a_record(store: WorkerStore, status: TaskStatus) -> None:
    task_id = submit(store, "t")
    [running] = claim(store)
    with pytest.raises(ValueError, match="end_tasks"):
        store.try_transition(task_id, running.run_id, [TaskStatus.RUNNING], status)
    with pytest.raises(ValueError, match="end_tasks"):
        store.set_task_state(task_id, running.run_id, status=status)
    assert info(store, task_id).status == "RUNNING"


# -- a worker's ends and the claim that refills their slots --------------------------------------


def ended(runs: list[TaskInfo]) -> list[lifecycle.TaskEnd]:
    return [lifecycle.run_end(r, "w1", TaskStatus.COMPLETED, clock.now(), result=1) for r in runs]


def test_ends_are_written_before_the_claim_that_refills_their_slots(tx_store: WorkerStore) -> None:
    ids = [submit(tx_store, f"t{i}") for i in range(5)]
    first = tx_store.claim("w1", None, 2, clock.now(), {})
    assert [r.id for r in first] == ids[:2]
    won, claimed = tx_store.end_and_claim(ended(first), "w1", None, 2, clock.now(), {})
    assert won == [True, True]
    assert [r.id for r in claimed] == ids[2:4]  # oldest first, the claim's own order
    assert all(r.status == "RUNNING" and r.worker_id == "w1" for r in claimed)
    assert all(r.attempts == 1 for r in claimed)
    assert [info(tx_store, t).status for t in ids] == [
        "COMPLETED",
        "COMPLETED",
        "RUNNING",
        "RUNNING",
        "PENDING",
    ]


def test_a_lost_end_still_frees_its_slot_for_the_refill(tx_store: WorkerStore) -> None:
    ids = [submit(tx_store, f"t{i}") for i in range(4)]
    first = tx_store.claim("w1", None, 2, clock.now(), {})
    cancel_task(ids[0], System(), store=tx_store)  # the run returns after its record ended
    won, claimed = tx_store.end_and_claim(ended(first), "w1", None, 2, clock.now(), {})
    assert won == [False, True]
    assert [r.id for r in claimed] == ids[2:]
    assert info(tx_store, ids[0]).status == "CANCELLED"


def test_ends_with_nothing_to_refill_claim_nothing(tx_store: WorkerStore) -> None:
    ids = [submit(tx_store, f"t{i}") for i in range(2)]
    first = tx_store.claim("w1", None, 1, clock.now(), {})
    won, claimed = tx_store.end_and_claim(ended(first), "w1", None, 0, clock.now(), {})
    assert (won, claimed) == ([True], [])
    assert [info(tx_store, t).status for t in ids] == ["COMPLETED", "PENDING"]
    won, claimed = tx_store.end_and_claim([], "w1", None, 3, clock.now(), {})
    assert (won, [r.id for r in claimed]) == ([], [ids[1]])


def test_the_refill_respects_queue_limits(tx_store: WorkerStore) -> None:
    ids = [submit(tx_store, f"s{i}", queue="seq") for i in range(3)]
    [first] = claim(tx_store)  # the sequential queue: one at a time
    won, claimed = tx_store.end_and_claim(ended([first]), "w1", None, 5, clock.now(), LIMITS)
    assert won == [True]
    assert [r.id for r in claimed] == [ids[1]]


def test_a_node_end_promotes_its_dependent_before_the_refill_claims(tx_store: WorkerStore) -> None:
    wf = Workflow("chain", System())
    first = wf.add("a", add, args=[1, 2])
    wf.add("b", add, args=[1, 2]).after(first)
    wf.submit(store=tx_store)
    [a] = tx_store.claim("w1", None, 5, clock.now(), {})
    assert a.id == "chain:a"  # b waits for a
    won, claimed = tx_store.end_and_claim(ended([a]), "w1", None, 1, clock.now(), {})
    assert won == [True]
    assert [r.id for r in claimed] == ["chain:b"]
    assert info(tx_store, "chain:a").status == "COMPLETED"
