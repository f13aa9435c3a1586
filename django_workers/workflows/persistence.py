"""Applying the state machine to stored workflows: the one routine every store runs.

A store calls these inside its own transaction, through a ``WorkflowBook``: the
few row operations a store offers for it. ``react`` runs where task records
end (``end_tasks``), ``begin`` is the pre-run check a worker makes before it
starts a node, ``cancel`` is a workflow's cancel. Each locks the workflow rows
first (in id order, so two writers never wait on each other in a cycle),
applies the machine to every event, carries out the effects, and writes the
new state back, all before the store commits. A node that becomes PENDING
does so in the transaction that ended its last dependency.

The rules are the machine's; this module only turns ends into events and
effects into row writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from django_workers import lifecycle
from django_workers.cancellation import CancelReason
from django_workers.info import TaskInfo, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores.base import NewTask
from django_workers.workflows import machine
from django_workers.workflows.machine import (
    CancelWaiting,
    CancelWorkflow,
    Effect,
    Event,
    NodeEnded,
    NodeStarted,
    Outcome,
    Promote,
    RefuseQueued,
    StartUndo,
    StopRunning,
    UndoEnded,
    UndoStarted,
)
from django_workers.workflows.records import (
    node_key,
    node_label,
    node_task_id,
    read_label,
    row_fields,
    state_of,
)

#: The record columns the effects read before ending a node's record.
RECORD_COLUMNS = ("id", "run_id", "status", "worker_id", "queue", "workflow", "node")


class WorkflowBook(Protocol):
    """What a store offers the workflow routine, each call inside the store's transaction."""

    def lock_workflows(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Lock the rows of these workflows (in id order) and return them by id."""
        ...

    def save_workflow(self, workflow_id: str, fields: Mapping[str, Any]) -> None:
        """Write these columns of a locked workflow row."""
        ...

    def node_records(self, task_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The ``RECORD_COLUMNS`` of these task records (those that exist)."""
        ...

    def write_ends(self, ends: Sequence[TaskEnd]) -> list[bool]:
        """Apply ends through the store's end rules, without reacting to them again."""
        ...

    def promote(self, task_ids: Sequence[str]) -> None:
        """Make these WAITING records PENDING in their queues."""
        ...

    def add_tasks(self, news: Sequence[NewTask]) -> None:
        """Write these records, replacing any record under the same id."""
        ...

    def request_stop(self, task_ids: Sequence[str], reason: CancelReason) -> None:
        """Ask the runs of these RUNNING records to stop (their workers set the token)."""
        ...


def workflows_of(ends: Iterable[TaskEnd]) -> list[str]:
    """The workflows that ``ends`` may change, in the order their rows are locked."""
    return sorted({e.workflow for e in ends if e.workflow and e.is_terminal})


def react(book: WorkflowBook, ends: Sequence[TaskEnd], now: datetime) -> None:
    """Apply the ends that won to their workflows (the store locked them before the ends)."""
    events: dict[str, list[Event]] = {}
    for end in ends:
        if end.workflow and end.node and end.is_terminal:
            events.setdefault(end.workflow, []).append(_ended(end.node, end.status))
    rows = book.lock_workflows(sorted(events))
    for workflow_id in sorted(events):
        if workflow_id in rows:  # else deleted, with its nodes, by retention
            _settle(book, rows[workflow_id], events[workflow_id], now)


def cancel(book: WorkflowBook, workflow_id: str, undo: bool | None, now: datetime) -> bool | None:
    """Cancel a workflow; None if there is none, False if it had already ended."""
    row = book.lock_workflows([workflow_id]).get(workflow_id)
    if row is None:
        return None
    if machine.WorkflowStatus(row["state"]) is not machine.WorkflowStatus.RUNNING:
        return False
    _settle(book, row, [CancelWorkflow(undo)], now)
    return True


def begin(book: WorkflowBook, runs: Sequence[TaskInfo], now: datetime) -> list[bool]:
    """The pre-run check of claimed node runs: which may start; the others end CANCELLED."""
    rows = book.lock_workflows(sorted({info.workflow for info in runs if info.workflow}))
    allowed: list[bool] = []
    refused: list[TaskEnd] = []
    for info in runs:
        row = rows.get(info.workflow or "")
        name, undo = read_label(info.node or "")
        state = state_of(row) if row is not None else None
        if row is not None and state is not None and machine.may_start(state, name, undo=undo):
            started = UndoStarted(name) if undo else NodeStarted(name)
            row.update(row_fields(row, machine.apply(state, started).state))
            allowed.append(True)
            continue
        cancelled = state is not None and state.cancel_undo is not None
        reason = CancelReason.USER if cancelled else CancelReason.WORKFLOW
        refused.append(lifecycle.refuse_end(_columns(info), reason, now))
        allowed.append(False)
    won = book.write_ends(refused)
    for workflow_id, row in rows.items():
        events = [
            _ended(end.node or "", TaskStatus.CANCELLED)
            for end, ok in zip(refused, won, strict=True)
            if ok and end.workflow == workflow_id
        ]
        _settle(book, row, events, now)
    return allowed


def _settle(
    book: WorkflowBook, row: dict[str, Any], events: Iterable[Event], now: datetime
) -> None:
    """Apply ``events`` in turn, carrying out each one's effects; write the state once."""
    state = state_of(row)
    for event in events:
        transition = machine.apply(state, event)
        state = transition.state
        reason = CancelReason.USER if isinstance(event, CancelWorkflow) else CancelReason.WORKFLOW
        _carry_out(book, row, transition.effects, reason, now)
    fields = row_fields(row, state)
    if state.ended and row.get("finished_at") is None:
        fields["finished_at"] = now
    book.save_workflow(row["id"], fields)
    row.update(fields)


def _carry_out(
    book: WorkflowBook,
    row: Mapping[str, Any],
    effects: Sequence[Effect],
    reason: CancelReason,
    now: datetime,
) -> None:
    """Do what the machine asked; what the writes end, the machine has already ended."""

    def task_ids(kinds: type | tuple[type, ...]) -> list[str]:
        return [
            node_task_id(row["id"], row["key"], node_label(e.node))  # type: ignore[union-attr]
            for e in effects
            if isinstance(e, kinds)
        ]

    if promote := task_ids(Promote):
        book.promote(promote)
    if undos := [e.node for e in effects if isinstance(e, StartUndo)]:
        book.add_tasks([_undo_task(row, name, now) for name in undos])
    if stop := task_ids(StopRunning):
        # The record stays RUNNING: the node ends when its function returns, so one that
        # completes anyway is still compensated.
        book.request_stop(stop, CancelReason.USER)
    if refuse := task_ids((CancelWaiting, RefuseQueued)):
        # A claimed record is turned away by its worker's pre-run check instead.
        unstarted = (TaskStatus.WAITING, TaskStatus.PENDING)
        book.write_ends(
            [
                lifecycle.refuse_end(record, reason, now)
                for record in book.node_records(refuse)
                if record["status"] in unstarted
            ]
        )


def _ended(label: str, status: TaskStatus) -> Event:
    name, undo = read_label(label)
    outcome = Outcome(str(status).lower())
    return UndoEnded(name, outcome) if undo else NodeEnded(name, outcome)


def _columns(info: TaskInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "run_id": info.run_id,
        "status": info.status,
        "worker_id": info.worker_id,
        "queue": info.queue,
        "workflow": info.workflow,
        "node": info.node,
    }


def _undo_task(row: Mapping[str, Any], name: str, now: datetime) -> NewTask:
    undo = next(node["undo"] for node in row["nodes"] if node["name"] == name)
    owner = row["owner"]
    key = node_key(row["key"], name, undo=True)
    return NewTask(
        id=node_task_id(row["id"], row["key"], node_label(name, undo=True)),
        key=key,
        owner=owner,
        scope="user" if owner else "global",
        task_path=undo["task"],
        args=list(undo["args"]),
        kwargs=dict(undo["kwargs"]),
        queue=undo["queue"],
        priority=0,
        run_after=None,
        options=dict(undo["options"]),
        run_id=uuid.uuid4().hex,
        created_at=now,
        workflow=row["id"],
        node=node_label(name, undo=True),
    )
