"""Applying the state machine to stored workflows: the one routine every store runs.

A store calls these inside its own transaction, through a ``WorkflowBook``: the
few row operations a store offers for it. ``react`` runs where task records
end (``end_tasks``) and ``cancel`` is a workflow's cancel; ``pre_run`` is the
check a worker makes, without any lock, before it starts a claimed node.
The first two lock the workflow rows first (in id order, so two writers never
wait on each other in a cycle),
applies the machine to every event, carries out the effects, and writes the
new state back, all before the store commits. A node that becomes PENDING
does so in the transaction that ended its last dependency.

``rerun`` sets an ended workflow running again, in the same kind of
transaction: it locks the row, checks its state and plan hash under the lock,
gives the nodes that run again fresh records (new run ids; their ``errors``
kept) and writes the new state.

The rules are the machine's; this module only turns ends into events and
effects into row writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from django_workers import lifecycle
from django_workers.cancellation import CancelReason
from django_workers.core import (
    LiveNodeRow,
    NewTask,
    StoredUndo,
    WorkflowColumns,
    WorkflowRow,
    new_run_id,
)
from django_workers.engine import machine
from django_workers.engine.machine import (
    CancelWaiting,
    CancelWorkflow,
    Effect,
    Event,
    Finished,
    NodeEnded,
    NodeStarted,
    Outcome,
    Promote,
    RefuseQueued,
    StartUndo,
    StopRunning,
    UndoEnded,
    WorkflowState,
)
from django_workers.engine.records import (
    UNDO_RETRIES,
    granted,
    node_key,
    node_label,
    node_task_id,
    read_label,
    row_fields,
    state_of,
)
from django_workers.exceptions import WorkflowCancelNarrows, WorkflowCannotRerun
from django_workers.info import TaskInfo, TaskStatus
from django_workers.lifecycle import TaskEnd

#: The record columns the effects read before ending a node's record (a ``LiveNodeRow``).
RECORD_COLUMNS = (
    "id",
    "run_id",
    "status",
    "worker_id",
    "queue",
    "workflow",
    "node",
    "cancel_reason",
)


class WorkflowBook(Protocol):
    """What a store offers the workflow routine, each call inside the store's transaction."""

    def lock_workflows(self, ids: Sequence[str]) -> dict[str, WorkflowRow]:
        """Lock the rows of these workflows (in id order) and return them by id."""
        ...

    def save_workflow(self, workflow_id: str, fields: WorkflowColumns) -> None:
        """Write these columns of a locked workflow row."""
        ...

    def node_records(self, task_ids: Sequence[str]) -> list[LiveNodeRow]:
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

    def reset_nodes(self, task_ids: Sequence[str]) -> int:
        """Make these ended records WAITING for a new run; return how many were ended.

        Each gets a new run id and a fresh run (attempts, result, error, times,
        cancel reason cleared) and keeps its ``errors``.
        """
        ...


def workflows_of(ends: Iterable[TaskEnd]) -> list[str]:
    """The workflows that ``ends`` may change, in the order their rows are locked."""
    return sorted({e.workflow for e in ends if e.workflow and e.is_terminal})


def react(book: WorkflowBook, ends: Sequence[TaskEnd], now: datetime) -> None:
    """Apply the ends that won to their workflows (the store locked them before the ends)."""
    events = events_of(ends)
    rows = book.lock_workflows(sorted(events))
    for workflow_id in sorted(events):
        if workflow_id in rows:  # else deleted, with its nodes, by retention
            _settle(book, rows[workflow_id], events[workflow_id], now)


def events_of(ends: Iterable[TaskEnd]) -> dict[str, list[Event]]:
    """The machine events of the ends (that won), by workflow id."""
    events: dict[str, list[Event]] = {}
    for end in ends:
        if end.workflow and end.node and end.is_terminal:
            events.setdefault(end.workflow, []).append(_ended(end.node, end.status))
    return events


def plain_outcome(
    row: WorkflowRow, events: Iterable[Event], now: datetime
) -> tuple[WorkflowColumns, list[str]] | None:
    """The new columns of a workflow and the task ids it promotes, when that is all it does.

    None when an event has any other effect (a refusal, a stop, an undo to queue):
    those go through ``react``. Pure: a store may write the answer in one statement.
    """
    state = state_of(row)
    promote: list[str] = []
    for event in events:
        transition = machine.apply(state, event)
        for effect in transition.effects:
            if isinstance(effect, Promote):
                promote.append(_task_id(row, effect.node))
            elif not isinstance(effect, Finished):
                return None
        state = transition.state
    return _columns_of(row, state, now), promote


def cancel(
    book: WorkflowBook,
    workflow_id: str,
    undo: bool | None,
    now: datetime,
    drop_undo: bool = False,
    reason: CancelReason = CancelReason.USER,
) -> bool | None:
    """Cancel a workflow; None if there is none, False if it had already ended.

    ``undo=False`` after a cancel that compensates drops that compensation only
    with ``drop_undo``; else WorkflowCancelNarrows, read under the row's lock.
    A ``deadline`` cancel applies only to a run whose deadline has passed at
    ``now`` and that no cancel has reached: the first cancel's reason stays.
    """
    row = book.lock_workflows([workflow_id]).get(workflow_id)
    if row is None:
        return None
    if machine.WorkflowStatus(row["state"]) is not machine.WorkflowStatus.RUNNING:
        return False
    if reason is CancelReason.DEADLINE and not _overdue(row, now):
        return False
    if undo is False and row["cancel_undo"] and not drop_undo:
        raise WorkflowCancelNarrows(workflow_id, _undoable(row))
    first = {} if row.get("cancel_reason") else {"cancel_reason": reason.value}
    _settle(book, row, [CancelWorkflow(undo)], now, reason, first)
    return True


def _overdue(row: Mapping[str, Any], now: datetime) -> bool:
    deadline_at = row.get("deadline_at")
    return row["cancel_undo"] is None and deadline_at is not None and deadline_at <= now


def rerun(
    book: WorkflowBook, workflow_id: str, plan_hash: str | None, now: datetime
) -> bool | None:
    """Run an ended workflow again from where it failed; None if there is none.

    Its state and plan hash (when given) are read under the row's lock; a
    workflow that cannot be re-run raises WorkflowCannotRerun and nothing changes.
    """
    row = book.lock_workflows([workflow_id]).get(workflow_id)
    if row is None:
        return None
    if plan_hash is not None and row["plan_hash"] != plan_hash:
        raise WorkflowCannotRerun(workflow_id, row["state"], plan_hash=plan_hash)
    status = machine.WorkflowStatus(row["state"])
    if status not in machine.RERUNNABLE:
        raise WorkflowCannotRerun(workflow_id, status.value)
    transition = machine.rerun(state_of(row))
    again = [
        _task_id(row, node.name)
        for node in transition.state.nodes
        if node.status is not machine.NodeStatus.COMPLETED
    ]
    if book.reset_nodes(again) != len(again):
        # A node's record did not end with its workflow: a store's mistake, never a user's.
        raise machine.InvalidEvent(f"Workflow {workflow_id!r} has a node record still live.")
    _carry_out(book, row, transition.effects, now)
    fields = _columns_of(row, transition.state, now)
    deadline = row.get("deadline")
    fields["finished_at"] = now if transition.state.ended else None
    fields["cancel_reason"] = None
    fields["runs"] = row.get("runs", 1) + 1
    fields["deadline_at"] = None if deadline is None else now + timedelta(seconds=deadline)
    book.save_workflow(workflow_id, fields)
    return True


def _undoable(row: WorkflowRow) -> list[str]:
    """The completed nodes whose undo a compensating cancel would run."""
    return [
        node["name"]
        for node in row["nodes"]
        if node["undo"] is not None and node["status"] == machine.NodeStatus.COMPLETED
    ]


def pre_run(
    runs: Sequence[TaskInfo], records: Mapping[str, LiveNodeRow], now: datetime
) -> tuple[list[bool], list[TaskEnd]]:
    """The pre-run check of claimed node runs, read from their records: which may start.

    A claimed node counts as started for its workflow: a refusal that meets it
    asks its run to stop instead (``request_stop``), which this check reads. A
    run whose record asks it to stop, or is no longer its claim, does not start;
    the first kind is ended CANCELLED by the returned ends (the store writes them,
    and the workflow reacts to them like to any end).
    """
    allowed: list[bool] = []
    refusals: list[TaskEnd] = []
    for info in runs:
        record = records.get(info.id)
        ours = (
            record is not None
            and record["run_id"] == info.run_id
            and record["status"] == TaskStatus.RUNNING
            and record["worker_id"] == info.worker_id
        )
        # ``ours`` implies a record; the checker cannot follow that through the name.
        stop = CancelReason(record["cancel_reason"]) if ours else CancelReason.NONE  # type: ignore[index]
        allowed.append(ours and stop is CancelReason.NONE)
        if ours and stop is not CancelReason.NONE:
            refusals.append(lifecycle.refuse_end(record, stop, now))  # type: ignore[arg-type]
    return allowed, refusals


def _settle(
    book: WorkflowBook,
    row: WorkflowRow,
    events: Iterable[Event],
    now: datetime,
    reason: CancelReason = CancelReason.USER,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Apply ``events`` in turn, carrying out each one's effects; write the state once.

    ``reason`` is what a cancel among the events gives the nodes it stops.
    """
    state = state_of(row)
    for event in events:
        state = _apply(book, row, state, event, now, reason)
    fields = _columns_of(row, state, now)
    fields.update(cast(WorkflowColumns, extra or {}))
    book.save_workflow(row["id"], fields)
    # WorkflowColumns are a part of WorkflowRow; mypy's update() takes only a partial row.
    row.update(fields)  # type: ignore[typeddict-item]


def _columns_of(row: WorkflowRow, state: WorkflowState, now: datetime) -> WorkflowColumns:
    """The columns that make ``row`` hold ``state``; an end stamps ``finished_at`` once."""
    fields = row_fields(row, state)
    if state.ended and row.get("finished_at") is None:
        fields["finished_at"] = now
    return fields


def _apply(
    book: WorkflowBook,
    row: WorkflowRow,
    state: WorkflowState,
    event: Event,
    now: datetime,
    cancel_reason: CancelReason,
) -> WorkflowState:
    """Apply one event and carry out its effects; return the new state.

    A node the machine would refuse as queued may already be claimed by a worker
    (claims do not lock the workflow): for the workflow it has started, so the
    event is applied again after its ``NodeStarted``, and the node is asked to stop.
    """
    reason = cancel_reason if isinstance(event, CancelWorkflow) else CancelReason.WORKFLOW
    claimed: list[str] = []
    while True:
        before = state
        for name in claimed:
            before = machine.apply(before, NodeStarted(name)).state
        transition = machine.apply(before, event)
        found = _refuse(book, row, transition.effects, reason, now)
        if not found:
            break
        claimed += found
    _carry_out(book, row, transition.effects, now, cancel_reason)
    return transition.state


def _task_id(row: WorkflowRow, name: str) -> str:
    return node_task_id(row["id"], row["key"], node_label(name))


def _refuse(
    book: WorkflowBook,
    row: WorkflowRow,
    effects: Sequence[Effect],
    reason: CancelReason,
    now: datetime,
) -> list[str]:
    """End the records of refused nodes; return the refused nodes a worker has claimed."""
    names = [e.node for e in effects if isinstance(e, CancelWaiting | RefuseQueued)]
    if not names:
        return []
    records = book.node_records([_task_id(row, name) for name in names])
    claimed = [r for r in records if r["status"] == TaskStatus.RUNNING]
    if not claimed:
        unstarted = [r for r in records if r["status"] in (TaskStatus.WAITING, TaskStatus.PENDING)]
        won = book.write_ends([lifecycle.refuse_end(r, reason, now) for r in unstarted])
        lost = [r["id"] for r, ok in zip(unstarted, won, strict=True) if not ok]
        # A refusal loses its fence only to a claim that came in between.
        claimed = [r for r in book.node_records(lost) if r["status"] == TaskStatus.RUNNING]
    return [read_label(r["node"])[0] for r in claimed]


def _carry_out(
    book: WorkflowBook,
    row: WorkflowRow,
    effects: Sequence[Effect],
    now: datetime,
    reason: CancelReason = CancelReason.USER,
) -> None:
    """Do what the machine asked besides refusals (done first, by ``_refuse``)."""
    if promote := [_task_id(row, e.node) for e in effects if isinstance(e, Promote)]:
        book.promote(promote)
    if undos := [e.node for e in effects if isinstance(e, StartUndo)]:
        book.add_tasks([_undo_task(row, name, now) for name in undos])
    if stop := [_task_id(row, e.node) for e in effects if isinstance(e, StopRunning)]:
        # The record stays RUNNING: the node ends when its function returns (or when
        # its worker's pre-run check reads the request), so one that completes anyway
        # is still compensated.
        book.request_stop(stop, reason)


def _ended(label: str, status: TaskStatus) -> Event:
    name, undo = read_label(label)
    outcome = Outcome(str(status).lower())
    return UndoEnded(name, outcome) if undo else NodeEnded(name, outcome)


def _undo_task(row: WorkflowRow, name: str, now: datetime) -> NewTask:
    # Only a node that has an undo has one to queue.
    undo = cast(StoredUndo, next(node["undo"] for node in row["nodes"] if node["name"] == name))
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
        # An undo given no options of its own still retries: compensation is at least once.
        options={"retries": UNDO_RETRIES, **undo["options"]},
        run_id=new_run_id(),
        created_at=now,
        # Whoever may see the workflow sees its undo steps.
        watchers=granted(row),
        workflow=row["id"],
        node=node_label(name, undo=True),
    )
