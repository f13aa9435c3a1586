"""Re-runs and deadlines of workflows on every store.

A re-run is played on each store from every ended case of the machine's table
and must leave the store exactly where ``machine.rerun`` says; completed nodes
keep their runs (and results), the others get new runs that keep their errors.
A deadline cancel is the store's own cancel, checked again under the lock, so
two sweeps cancel a workflow once and an earlier cancel's reason stays.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections

from django_workers import Owner, System, TaskStatus, clock, lifecycle
from django_workers.cancellation import CancelReason
from django_workers.engine import machine as wm
from django_workers.engine.machine import Outcome
from django_workers.exceptions import WorkflowCannotRerun, WorkflowNotFound
from django_workers.info import TaskFailure
from django_workers.stores import WorkerStore
from django_workers.workflows import Workflow, open_workflow, rerun_workflow
from tests.contract.test_workflow_store import WORKER, Driver
from tests.tasks import noop, wf_value
from tests.unit.test_workflow_machine import CASES, Case, nodes_of

ENDED = [c for c in CASES if c.status in wm.RERUNNABLE]
STEPS = ("s1", "s2", "s3", "s4", "s5", "s6")


def _played(store: WorkerStore, c: Case) -> tuple[Driver, wm.WorkflowState]:
    driver = Driver(store)
    driver.submit(c)
    expected = wm.start(
        nodes_of(*c.plan), fail_fast=c.fail_fast, undo_on_cancel=c.undo_on_cancel
    ).state
    for event, _effects in c.steps:
        expected = wm.apply(expected, event).state
        driver.play(event)
    return driver, expected


@pytest.mark.parametrize("c", ENDED, ids=[c.id for c in ENDED])
def test_the_store_reruns_as_the_machine_says(c: Case, store: WorkerStore) -> None:
    driver, ended = _played(store, c)
    before = {node.name: driver.record(node.name, undo=False) for node in ended.nodes}

    assert store.rerun_workflow("wf", None) is True

    expected = wm.rerun(ended).state
    info = store.get_workflow("wf")
    assert info is not None
    # Undo records of the ended run stay (its history); an idle undo's record is not read.
    assert info.state == expected.status.value
    for node in expected.nodes:
        shown = info.node(node.name)
        assert shown.state == node.status.value, node.name
        assert shown.undo is None or (shown.undo.state, shown.undo.task_id) == ("idle", None)
        record = driver.record(node.name, undo=False)
        assert record is not None
        assert record.status == node.status.value.upper(), node.name
    assert info.runs == 2
    assert info.cancel_reason is None
    assert (info.finished_at is None) == (not expected.ended)
    for node in expected.nodes:
        record = driver.record(node.name, undo=False)
        old = before[node.name]
        assert record is not None
        assert old is not None
        if node.status is wm.NodeStatus.COMPLETED:
            assert record.run_id == old.run_id, node.name
        else:
            assert record.run_id != old.run_id, node.name
            assert record.attempts == 0, node.name
            assert record.worker_id is None, node.name


def _chain(store: WorkerStore, authority: System | Owner | None = None) -> Driver:
    wf = Workflow("wf", authority or System())
    previous = None
    for number, name in enumerate(STEPS, 1):
        node = wf.add(name, wf_value, args=[number], queue=f"q.{name}")
        if previous is not None:
            node.after(previous)
        previous = node
    wf.submit(store=store)
    return Driver(store)


def _fail(driver: Driver, name: str, message: str) -> None:
    run = driver.start(name, undo=False)
    assert run is not None
    failure = TaskFailure("builtins.RuntimeError", message)
    end = lifecycle.run_end(
        run,
        WORKER,
        TaskStatus.FAILED,
        clock.now(),
        error=failure.to_json(),
        errors=lifecycle.with_failure([], failure),
    )
    assert driver.store.end_tasks([end]) == [True]


def _complete(driver: Driver, name: str, result: int) -> None:
    run = driver.start(name, undo=False)
    assert run is not None
    end = lifecycle.run_end(run, WORKER, TaskStatus.COMPLETED, clock.now(), result=result)
    assert driver.store.end_tasks([end]) == [True]


def test_a_chain_failed_at_its_fourth_step_reruns_four_to_six_keeping_one_to_three(
    store: WorkerStore,
) -> None:
    driver = _chain(store)
    for number, name in enumerate(STEPS[:3], 1):
        _complete(driver, name, number * 10)
    _fail(driver, "s4", "disk full")
    assert open_workflow("wf", System(), store=store).status().state == "failed"

    info = rerun_workflow("wf", System(), store=store)

    assert info.state == "running"
    assert info.runs == 2
    assert [n.state for n in info.nodes] == [
        "completed",
        "completed",
        "completed",
        "pending",
        "waiting",
        "waiting",
    ]
    for number, name in enumerate(STEPS[:3], 1):
        kept = driver.record(name, undo=False)
        assert kept is not None
        assert kept.result == number * 10
    s4 = driver.record("s4", undo=False)
    assert s4 is not None
    assert s4.status == TaskStatus.PENDING
    assert s4.error is None
    assert [f.message for f in s4.errors] == ["disk full"]
    for number, name in enumerate(STEPS[3:], 4):
        _complete(driver, name, number * 10)
    assert open_workflow("wf", System(), store=store).status().state == "completed"


def test_a_compensated_workflow_cannot_be_rerun_and_says_why(store: WorkerStore) -> None:
    wf = Workflow("wf", System())
    a = wf.add("a", noop, queue="q.a")
    a.undo(noop, queue="u.a")
    wf.add("b", noop, queue="q.b").after(a)
    wf.submit(store=store)
    driver = Driver(store)
    driver.play(wm.NodeEnded("a", Outcome.COMPLETED))
    driver.play(wm.NodeEnded("b", Outcome.FAILED))
    driver.play(wm.UndoEnded("a", Outcome.COMPLETED))
    assert store.get_workflow("wf").state == "compensated"  # type: ignore[union-attr]

    with pytest.raises(WorkflowCannotRerun, match=r"compensated.*undone") as refused:
        rerun_workflow("wf", System(), store=store)

    assert refused.value.state == "compensated"
    info = store.get_workflow("wf")
    assert info is not None
    assert info.state == "compensated"
    assert info.runs == 1


@pytest.mark.parametrize("ended", [False, True])
def test_a_running_or_completed_workflow_cannot_be_rerun(store: WorkerStore, ended: bool) -> None:
    driver = _chain(store)
    if ended:
        for number, name in enumerate(STEPS, 1):
            _complete(driver, name, number)
    why = "it completed; there is nothing" if ended else "it is running.*wait for it to end"
    with pytest.raises(WorkflowCannotRerun, match=f"Workflow 'wf' cannot be re-run: {why}"):
        store.rerun_workflow("wf", None)


def test_a_rerun_naming_another_plan_changes_nothing(store: WorkerStore) -> None:
    driver = _chain(store)
    _fail(driver, "s1", "boom")
    with pytest.raises(WorkflowCannotRerun, match="not the one with hash 0000"):
        rerun_workflow("wf", System(), plan_hash="0" * 64, store=store)
    info = store.get_workflow("wf")
    assert info is not None
    assert info.state == "failed"
    assert info.runs == 1

    again = rerun_workflow("wf", System(), plan_hash=info.plan_hash, store=store)
    assert again.state == "running"


def test_only_the_owner_or_system_reruns(store: WorkerStore) -> None:
    driver = _chain(store, Owner("alice"))
    _fail(driver, "s1", "boom")
    with pytest.raises(WorkflowNotFound):
        rerun_workflow("alice::wf", Owner("bob"), store=store)
    assert rerun_workflow("wf", Owner("alice"), store=store).runs == 2
    assert store.rerun_workflow("missing", None) is None


def _with_deadline(store: WorkerStore, seconds: float) -> None:
    wf = Workflow("wf", System(), deadline=seconds)
    a = wf.add("a", noop, queue="q.a")
    wf.add("b", noop, queue="q.b").after(a)
    wf.submit(store=store)


def test_a_deadline_cancels_once_at_the_deadline(store: WorkerStore) -> None:
    _with_deadline(store, 60)
    running = Driver(store).start("a", undo=False)
    assert running is not None
    info = store.get_workflow("wf")
    assert info is not None
    assert info.deadline_at is not None
    assert info.deadline_at - info.created_at == timedelta(seconds=60)

    assert store.cancel_overdue_workflows(info.deadline_at - timedelta(seconds=1)) == []
    assert store.cancel_overdue_workflows(info.deadline_at) == ["wf"]
    assert store.cancel_overdue_workflows(info.deadline_at) == []

    after = store.get_workflow("wf")
    assert after is not None
    assert after.cancel_reason == "deadline"
    assert after.state == "cancelling"
    assert after.node("b").state == "cancelled"
    assert store.runs_to_stop(WORKER, {running.id: running.run_id}) == {running.id: "deadline"}


def test_a_users_cancel_before_the_deadline_keeps_its_reason(store: WorkerStore) -> None:
    _with_deadline(store, 60)
    store.cancel_workflow("wf", None)
    info = store.get_workflow("wf")
    assert info is not None
    assert info.deadline_at is not None
    assert store.cancel_overdue_workflows(info.deadline_at) == []
    late = info.deadline_at
    assert store.cancel_workflow("wf", None, reason=CancelReason.DEADLINE, now=late) is False
    assert store.get_workflow("wf").cancel_reason == "user"  # type: ignore[union-attr]


def test_a_rerun_gets_its_whole_deadline_again(store: WorkerStore) -> None:
    _with_deadline(store, 60)
    first = store.get_workflow("wf")
    assert first is not None
    assert first.deadline_at is not None
    assert store.cancel_overdue_workflows(first.deadline_at) == ["wf"]
    assert store.get_workflow("wf").state == "cancelled"  # type: ignore[union-attr]

    assert store.rerun_workflow("wf", None) is True

    again = store.get_workflow("wf")
    assert again is not None
    assert again.deadline_at is not None
    assert again.deadline_at > first.deadline_at
    assert again.cancel_reason is None
    assert store.cancel_overdue_workflows(first.deadline_at) == []


def test_two_sweeps_at_once_cancel_an_overdue_workflow_once(tx_store: WorkerStore) -> None:
    _with_deadline(tx_store, 1)
    # With a node running, the first cancel leaves the workflow running until it stops.
    assert Driver(tx_store).start("a", undo=False) is not None
    info = tx_store.get_workflow("wf")
    assert info is not None
    assert info.deadline_at is not None
    barrier = threading.Barrier(2)
    found: list[list[str]] = []

    def sweep() -> None:
        barrier.wait()
        try:
            found.append(tx_store.cancel_overdue_workflows(info.deadline_at))  # type: ignore[arg-type]
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(found) == [[], ["wf"]]
    assert tx_store.get_workflow("wf").cancel_reason == "deadline"  # type: ignore[union-attr]
