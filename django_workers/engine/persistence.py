"""The workflow engine's answer to what ended: data in, the writes a store makes out.

Pure: no store, no database, no clock. A store locks the workflow rows (in id
order, so two writers never wait on each other in a cycle), then calls one of
these with what it read and gets back a ``WorkflowWrites``: the workflow
columns to save, the nodes to promote, the undos to add, the records to refuse,
the runs to ask to stop and the records to reset. It writes them in the same
transaction, so a node that becomes PENDING does so in the transaction that
ended its last dependency.

``react`` answers the ends of nodes (``end_tasks``), ``cancel`` a workflow's
cancel and ``rerun`` a re-run of an ended workflow. ``pre_run`` is the check a
worker makes, without any lock, before it starts a claimed node.

A refusal needs the record it ends (its run id and status, for the fence). The
engine is given the node records the store has read so far; when a refusal
needs one it was not given, its answer only lists the records it ``needs``,
and the store reads them and asks again. A node refused as queued may have been
claimed by a worker meanwhile (claims do not lock the workflow row): given its
record RUNNING, the engine takes the node as started and, for a cancel, asks it
to stop. When a refusal's fenced write loses, the store reads the refused
records again and asks again (``stores.workflow_writes``).

The rules are the machine's; this module only turns ends into events and
effects into writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, cast

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
    Event,
    NodeEnded,
    NodeStarted,
    Outcome,
    Promote,
    RefuseQueued,
    StartUndo,
    StopRunning,
    Transition,
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

#: The record columns the engine reads of a node before refusing it (a ``LiveNodeRow``).
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

#: Node records by task id, as a store read them; None for an id it read and did not find.
type NodeRecords = Mapping[str, LiveNodeRow | None]

NO_RECORDS: Final[NodeRecords] = {}

_UNSTARTED: Final = (TaskStatus.WAITING, TaskStatus.PENDING)
#: The effects that end a node's record before it runs.
_REFUSALS: Final = (CancelWaiting, RefuseQueued)


@dataclass(frozen=True, slots=True)
class WorkflowSave:
    """A workflow's new columns and the nodes it makes PENDING: written together."""

    workflow_id: str
    columns: WorkflowColumns
    #: Task ids of WAITING node records to make PENDING.
    promote: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkflowWrites:
    """Everything one answer of the engine asks a store to write, in one transaction.

    A store writes the ``refusals`` first (fenced ends, each with its reason,
    applied without reacting to them again: ``stores.workflow_writes`` writes them
    while it asks), then the ``resets``, the ``undos``, the ``stops`` and, last,
    each workflow's ``saves`` with its promotions. No answer has both refusals and
    resets: resets are a re-run's, refusals a reaction's or a cancel's.
    When ``needs`` is not empty the answer is not whole and holds nothing else:
    the store reads those node records and asks again.
    """

    saves: tuple[WorkflowSave, ...] = ()
    refusals: tuple[TaskEnd, ...] = ()
    #: Undo records to write, replacing any record under the same id.
    undos: tuple[NewTask, ...] = ()
    #: (task id, reason): RUNNING records whose runs are asked to stop.
    stops: tuple[tuple[str, CancelReason], ...] = ()
    #: Ended records to make WAITING for a new run (a re-run); every one must be ended.
    resets: tuple[str, ...] = ()
    #: Task ids of node records to read before the engine can answer.
    needs: tuple[str, ...] = ()

    @property
    def plain(self) -> bool:
        """Whether the answer only saves workflows and promotes: the usual end of a node."""
        return not (self.needs or self.refusals or self.undos or self.stops or self.resets)

    @property
    def queues_work(self) -> bool:
        """Whether writing it makes work ready to claim (a promotion or an undo)."""
        return bool(self.undos) or any(save.promote for save in self.saves)


def workflows_of(ends: Iterable[TaskEnd]) -> list[str]:
    """The workflows that ``ends`` may change, in the order their rows are locked."""
    return sorted({e.workflow for e in ends if e.workflow and e.is_terminal})


def events_of(ends: Iterable[TaskEnd]) -> dict[str, list[Event]]:
    """The machine events of the ends (that won), by workflow id."""
    events: dict[str, list[Event]] = {}
    for end in ends:
        if end.workflow and end.node and end.is_terminal:
            events.setdefault(end.workflow, []).append(_ended(end.node, end.status))
    return events


def react(
    rows: Mapping[str, WorkflowRow],
    ends: Sequence[TaskEnd],
    now: datetime,
    records: NodeRecords = NO_RECORDS,
) -> WorkflowWrites:
    """What the ends that won write to their workflows, whose locked ``rows`` are given by id.

    A workflow with no row was deleted, with its nodes, by retention: nothing is written.
    """
    answer = _Answer(records, now)
    events = events_of(ends)
    for workflow_id in sorted(events):
        if (row := rows.get(workflow_id)) is not None:
            answer.settle(row, events[workflow_id])
    return answer.writes()


def cancel(
    row: WorkflowRow,
    undo: bool | None,
    now: datetime,
    drop_undo: bool = False,
    reason: CancelReason = CancelReason.USER,
    records: NodeRecords = NO_RECORDS,
) -> WorkflowWrites | None:
    """What a cancel of the locked workflow ``row`` writes; None if it had already ended.

    ``undo=False`` after a cancel that compensates drops that compensation only
    with ``drop_undo``; else WorkflowCancelNarrows. A ``deadline`` cancel applies
    only to a run whose deadline has passed at ``now`` and that no cancel has
    reached (else None): the first cancel's reason stays.
    """
    if machine.WorkflowStatus(row["state"]) is not machine.WorkflowStatus.RUNNING:
        return None
    if reason is CancelReason.DEADLINE and not _overdue(row, now):
        return None
    if undo is False and row["cancel_undo"] and not drop_undo:
        raise WorkflowCancelNarrows(row["id"], _undoable(row))
    first: Mapping[str, Any] = {} if row.get("cancel_reason") else {"cancel_reason": reason.value}
    answer = _Answer(records, now, reason)
    answer.settle(row, [CancelWorkflow(undo)], first)
    return answer.writes()


def _overdue(row: Mapping[str, Any], now: datetime) -> bool:
    deadline_at = row.get("deadline_at")
    return row["cancel_undo"] is None and deadline_at is not None and deadline_at <= now


def rerun(row: WorkflowRow, plan_hash: str | None, now: datetime) -> WorkflowWrites:
    """What running the ended workflow ``row`` again from where it failed writes.

    Its state and plan hash (when given) are checked on the locked row; a workflow
    that cannot be re-run raises WorkflowCannotRerun. The nodes that run again are
    ``resets`` (new run ids; their ``errors`` kept); the store checks that each
    was ended.
    """
    workflow_id = row["id"]
    if plan_hash is not None and row["plan_hash"] != plan_hash:
        raise WorkflowCannotRerun(workflow_id, row["state"], plan_hash=plan_hash)
    status = machine.WorkflowStatus(row["state"])
    if status not in machine.RERUNNABLE:
        raise WorkflowCannotRerun(workflow_id, status.value)
    transition = machine.rerun(state_of(row))
    again = tuple(
        _task_id(row, node.name)
        for node in transition.state.nodes
        if node.status is not machine.NodeStatus.COMPLETED
    )
    promote = tuple(_task_id(row, e.node) for e in transition.effects if isinstance(e, Promote))
    fields = _columns_of(row, transition.state, now)
    deadline = row.get("deadline")
    fields["finished_at"] = now if transition.state.ended else None
    fields["cancel_reason"] = None
    fields["runs"] = row.get("runs", 1) + 1
    fields["deadline_at"] = None if deadline is None else now + timedelta(seconds=deadline)
    return WorkflowWrites(saves=(WorkflowSave(workflow_id, fields, promote),), resets=again)


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
    asks its run to stop instead (a stop request), which this check reads. A
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


class _Answer:
    """The writes of one answer, gathered workflow by workflow."""

    def __init__(
        self, records: NodeRecords, now: datetime, cancel_reason: CancelReason = CancelReason.USER
    ) -> None:
        self.records = records
        self.now = now
        # What a cancel among the events gives the nodes it refuses and stops.
        self.cancel_reason = cancel_reason
        self.saves: list[WorkflowSave] = []
        self.refusals: list[TaskEnd] = []
        self.undos: list[NewTask] = []
        self.stops: list[tuple[str, CancelReason]] = []
        # Dict keys: the ids in the order they were first needed, each once.
        self.needs: dict[str, None] = {}

    def writes(self) -> WorkflowWrites:
        if self.needs:
            return WorkflowWrites(needs=tuple(self.needs))
        return WorkflowWrites(
            saves=tuple(self.saves),
            refusals=tuple(self.refusals),
            undos=tuple(self.undos),
            stops=tuple(self.stops),
        )

    def settle(
        self, row: WorkflowRow, events: Iterable[Event], extra: Mapping[str, Any] | None = None
    ) -> None:
        """Apply ``events`` to ``row`` in turn, gathering each one's writes; save the state once."""
        state = state_of(row)
        promote: list[str] = []
        refused: list[str] = []
        for event in events:
            transition, names = self._apply(row, state, event)
            refused += names
            for effect in transition.effects:
                if isinstance(effect, Promote):
                    promote.append(_task_id(row, effect.node))
                elif isinstance(effect, StartUndo):
                    self.undos.append(_undo_task(row, effect.node, self.now))
                elif isinstance(effect, StopRunning):
                    # The record stays RUNNING: the node ends when its function returns (or
                    # when its worker's pre-run check reads the request), so one that
                    # completes anyway is still compensated.
                    self.stops.append((_task_id(row, effect.node), self.cancel_reason))
            state = transition.state
        if refused:
            # A node promoted by one end and refused by a later one stays refused.
            gone = {_task_id(row, name) for name in refused}
            promote = [task_id for task_id in promote if task_id not in gone]
        fields = _columns_of(row, state, self.now)
        fields.update(cast(WorkflowColumns, extra or {}))
        self.saves.append(WorkflowSave(row["id"], fields, tuple(promote)))

    def _apply(
        self, row: WorkflowRow, state: WorkflowState, event: Event
    ) -> tuple[Transition, list[str]]:
        """Apply one event, gathering the ends of the nodes it refuses; those nodes' names.

        A node the machine would refuse as queued may already be claimed by a worker
        (its record RUNNING): for the workflow it has started, so the event is applied
        again after its ``NodeStarted`` (a cancel then asks it to stop).
        """
        reason = self.cancel_reason if isinstance(event, CancelWorkflow) else CancelReason.WORKFLOW
        claimed: list[str] = []
        while True:
            before = state
            for name in claimed:
                before = machine.apply(before, NodeStarted(name)).state
            transition = machine.apply(before, event)
            refused = [e.node for e in transition.effects if isinstance(e, _REFUSALS)]
            if not refused:
                return transition, refused
            ends, found = self._refuse(row, refused, reason)
            if not found:
                break
            claimed += found
        self.refusals += ends
        return transition, refused

    def _refuse(
        self, row: WorkflowRow, names: Sequence[str], reason: CancelReason
    ) -> tuple[list[TaskEnd], list[str]]:
        """The ends of the refused nodes' records, and the refused nodes a worker has claimed.

        A record not given is needed (and taken, for now, as not started); one read
        and not found, or already ended, is left as it is.
        """
        ends: list[TaskEnd] = []
        claimed: list[str] = []
        for name in names:
            task_id = _task_id(row, name)
            if task_id not in self.records:
                self.needs[task_id] = None
                continue
            record = self.records[task_id]
            if record is None:
                continue
            if record["status"] == TaskStatus.RUNNING:
                claimed.append(name)
            elif record["status"] in _UNSTARTED:
                ends.append(lifecycle.refuse_end(record, reason, self.now))
        return ends, claimed


def _columns_of(row: WorkflowRow, state: WorkflowState, now: datetime) -> WorkflowColumns:
    """The columns that make ``row`` hold ``state``; an end stamps ``finished_at`` once."""
    fields = row_fields(row, state)
    if state.ended and row.get("finished_at") is None:
        fields["finished_at"] = now
    return fields


def _task_id(row: WorkflowRow, name: str) -> str:
    return node_task_id(row["id"], row["key"], node_label(name))


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
