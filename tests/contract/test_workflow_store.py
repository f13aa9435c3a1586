"""Workflows on every store: the state machine's table, played through real records.

Each case of the machine's transition table is replayed against a store: a
node's start is a claim and its pre-run check, its end a run's end or a
cancel, a workflow cancel the store's own. After every step the store must
say exactly what the pure machine says: the workflow's state, each node's and
undo's state, and each task record's status. So the database store and the
in-memory store reach identical workflow states for the same events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from django_workers import System, TaskStatus, clock, lifecycle
from django_workers.engine import machine as wm
from django_workers.engine.machine import (
    CancelWorkflow,
    Event,
    NodeEnded,
    NodeStarted,
    Outcome,
    StopRunning,
    UndoEnded,
    UndoStarted,
    UndoStatus,
    WorkflowState,
)
from django_workers.engine.records import shown_state
from django_workers.info import TaskInfo
from django_workers.stores import WorkerStore
from django_workers.stores.database import reactions
from django_workers.stores.memory import queue as memory_queue
from django_workers.stores.workflow_writes import answered
from django_workers.workflows import Workflow
from tests.tasks import noop
from tests.unit.test_workflow_machine import CASES, Case, nodes_of

WORKER = "w-parity"
_STATUS = {
    Outcome.COMPLETED: TaskStatus.COMPLETED,
    Outcome.FAILED: TaskStatus.FAILED,
    Outcome.CANCELLED: TaskStatus.CANCELLED,
}


@dataclass
class Driver:
    """Plays machine events on a store as workers and users would cause them."""

    store: WorkerStore
    running: dict[str, TaskInfo] = field(default_factory=dict)

    def submit(self, c: Case) -> None:
        wf = Workflow("wf", System(), fail_fast=c.fail_fast, undo_on_cancel=c.undo_on_cancel)
        added = {}
        for node in nodes_of(*c.plan):
            added[node.name] = wf.add(node.name, noop, queue=f"q.{node.name}")
            added[node.name].after(*(added[dep] for dep in node.deps))
            if node.always:
                added[node.name].always()
            if node.has_undo:
                added[node.name].undo(noop, queue=f"u.{node.name}")
        wf.submit(store=self.store)

    def play(self, event: Event) -> None:
        match event:
            case NodeStarted(name):
                self.start(name, undo=False)
            case UndoStarted(name):
                self.start(name, undo=True)
            case NodeEnded(name, outcome):
                self.end(name, outcome, undo=False)
            case UndoEnded(name, outcome):
                self.end(name, outcome, undo=True)
            case CancelWorkflow(undo):
                # The machine lets a second cancel narrow the first; the store wants it asked.
                self.store.cancel_workflow("wf", undo, drop_undo=True)

    def start(self, name: str, *, undo: bool) -> TaskInfo | None:
        queue = f"{'u' if undo else 'q'}.{name}"
        claimed = self.store.claim(WORKER, [queue], 1, clock.now())
        if not claimed or not self.store.begin_runs(claimed)[0]:
            return None
        self.running[queue] = claimed[0]
        return claimed[0]

    def end(self, name: str, outcome: Outcome, *, undo: bool) -> None:
        queue = f"{'u' if undo else 'q'}.{name}"
        run = self.running.get(queue) or self.start(name, undo=undo)
        if run is not None:
            end = lifecycle.run_end(run, WORKER, _STATUS[outcome], clock.now())
        elif outcome is Outcome.CANCELLED and (record := self.record(name, undo=undo)):
            if record.is_finished:
                return
            end = lifecycle.cancel_end(record, clock.now())
        else:
            return
        self.store.end_tasks([end])

    def record(self, name: str, *, undo: bool) -> TaskInfo | None:
        return self.store.get_task_info(f"wf:{name}{':undo' if undo else ''}")


def assert_same(store: WorkerStore, driver: Driver, state: WorkflowState, where: str) -> None:
    info = store.get_workflow("wf")
    assert info is not None
    assert info.state == shown_state(state.status.value, state.cancel_undo), where
    for node in state.nodes:
        shown = info.node(node.name)
        assert shown.state == node.status.value, f"{where}: node {node.name}"
        record = driver.record(node.name, undo=False)
        assert record is not None
        assert record.status == node.status.value.upper(), f"{where}: record {node.name}"
        if not node.has_undo:
            assert shown.undo is None
            continue
        assert shown.undo is not None
        assert shown.undo.state == node.undo.value, f"{where}: undo of {node.name}"
        undo_record = driver.record(node.name, undo=True)
        if node.undo in (UndoStatus.IDLE, UndoStatus.WAITING):
            assert undo_record is None, f"{where}: undo of {node.name} queued too early"
        else:
            assert undo_record is not None
            assert undo_record.status == node.undo.value.upper(), f"{where}: undo {node.name}"


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_the_store_follows_the_machine(c: Case, store: WorkerStore) -> None:
    driver = Driver(store)
    driver.submit(c)
    state = wm.start(nodes_of(*c.plan), fail_fast=c.fail_fast, undo_on_cancel=c.undo_on_cancel)
    expected = state.state
    assert_same(store, driver, expected, "after submit")
    for number, (event, _effects) in enumerate(c.steps, 1):
        transition = wm.apply(expected, event)
        driver.play(event)
        expected = transition.state
        assert_same(store, driver, expected, f"step {number}: {event}")
        for effect in transition.effects:
            if isinstance(effect, StopRunning):
                # The record runs on; its worker is asked to stop the function.
                run = driver.running[f"q.{effect.node}"]
                assert store.runs_to_stop(WORKER, {run.id: run.run_id}) == {run.id: "user"}
    assert expected.status is c.status


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_the_store_follows_the_machine_committing_each_step(c: Case, db_store: WorkerStore) -> None:
    # Each step commits on its own, as on a worker: on PostgreSQL the ends whose
    # workflows only promote take their two-round-trip path, the others the general one.
    test_the_store_follows_the_machine(c, db_store)


@pytest.mark.parametrize("fail_fast", [False, True], ids=["cancel", "fail-fast"])
def test_a_node_claimed_after_its_record_was_read_runs_on_as_started(
    store: WorkerStore, monkeypatch: pytest.MonkeyPatch, fail_fast: bool
) -> None:
    # Claims do not lock the workflow row: a worker claims b after the store read b's
    # record to refuse it, so the refusal's fenced write loses. The store reads the
    # record again and the engine takes b as started: a cancel asks it to stop.
    wf = Workflow("wf", System(), fail_fast=fail_fast)
    wf.add("a", noop, queue="q.a")
    wf.add("b", noop, queue="q.b")
    wf.submit(store=store)
    [a] = store.claim(WORKER, ["q.a"], 1, clock.now())
    assert store.begin_runs([a]) == [True]
    claims: list[TaskInfo] = []

    def claim_after_first_read(ask: Any, read: Any, refuse: Any) -> Any:
        def read_then_claim(task_ids: Any) -> Any:
            found = read(task_ids)
            if not claims:
                claims.extend(store.claim("w-other", ["q.b"], 1, clock.now()))
            return found

        return answered(ask, read_then_claim, refuse)

    monkeypatch.setattr(reactions, "answered", claim_after_first_read)
    monkeypatch.setattr(memory_queue, "answered", claim_after_first_read)
    if fail_fast:
        store.end_tasks([lifecycle.run_end(a, WORKER, TaskStatus.FAILED, clock.now())])
    else:
        assert store.cancel_workflow("wf", False) is True
    [b] = claims
    info = store.get_workflow("wf")
    assert info is not None
    assert info.node("b").state == "running"
    record = store.get_task_info("wf:b")
    assert record is not None
    assert record.status == TaskStatus.RUNNING
    if fail_fast:
        # A failure lets a started node run on; the workflow waits for it.
        assert store.begin_runs([b]) == [True]
        assert info.state == "running"
        store.end_tasks([lifecycle.run_end(b, "w-other", TaskStatus.COMPLETED, clock.now())])
        ended = store.get_workflow("wf")
        assert ended is not None
        assert ended.state == "failed"
        return
    # Asked to stop: its worker's pre-run check refuses it, and the workflow ends with it.
    assert store.runs_to_stop("w-other", {b.id: b.run_id}) == {b.id: "user"}
    assert store.begin_runs([b]) == [False]
    store.end_tasks([lifecycle.run_end(a, WORKER, TaskStatus.COMPLETED, clock.now())])
    cancelled = store.get_workflow("wf")
    assert cancelled is not None
    assert cancelled.state == "cancelled"
    assert cancelled.node("b").state == "cancelled"
