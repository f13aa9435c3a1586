"""How a task record ends: the kinds of end, which records each may end, what each writes.

Pure: no database, no settings, no I/O, no clock. Both stores apply these rules through
their one ``end_tasks`` method, and the runtime and the task API build their
ends here, so the rules live in one place.

Every end is addressed to a run (``run_id``) and applies only while the
record is in one of the kind's ``from`` statuses (and, for the ends a worker
writes, still names that worker). An end that loses its fence changes
nothing. Some ends leave the function running (a cancel or a timeout of a
RUNNING record): the worker keeps that run's slot until the function returns.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

from django_workers.cancellation import CancelReason, cancel_message
from django_workers.exceptions import TaskCancelled, TaskTimeoutError, WorkerLost
from django_workers.info import TaskFailure, TaskStatus, class_path
from django_workers.options import TaskOptions

if TYPE_CHECKING:
    from django_workers.info import TaskInfo

#: Most failures a record keeps in ``errors`` (the oldest are dropped first).
ERRORS_KEPT: Final = 10

WORKER_LOST_MESSAGE: Final = (
    "Worker lost: the worker running it ended, or stopped renewing its lease, before the "
    "task did (a crash or kill, a drain timeout, or a host cut off from the database)."
)


class EndKind(StrEnum):
    """Why a record stops being this run's."""

    #: The run's own end, written after its function returned.
    RUN = "run"
    #: The deadline passed while the function runs: FAILED with TaskTimeoutError.
    TIMEOUT = "timeout"
    #: ``cancel_task``: a waiting or pending task never runs; a running one ends now.
    CANCEL = "cancel"
    #: A dead worker's run with no retries left: FAILED with WorkerLost.
    WORKER_LOST = "worker_lost"
    #: A dead worker's run with retries left goes back to PENDING.
    REQUEUE = "requeue"
    #: A failed attempt with retries left: back to PENDING until ``run_after``, its
    #: failure kept, its first start kept (the timeout counts from it).
    RETRY = "retry"
    #: A run claimed but never started goes back to PENDING; the attempt does not count.
    RELEASE = "release"
    #: A volatile store shutting down: pending work that nothing will run ends CANCELLED.
    ABANDON = "abandon"
    #: A workflow node that will not run ends CANCELLED: waiting or queued when its
    #: workflow cancels it, or claimed and turned away by the pre-run check.
    REFUSE = "refuse"


_LIVE: Final = frozenset({TaskStatus.WAITING, TaskStatus.PENDING, TaskStatus.RUNNING})
_RUNNING: Final = frozenset({TaskStatus.RUNNING})

#: The statuses a record may be in for each kind of end to apply.
FROM_STATUSES: Final[Mapping[EndKind, frozenset[TaskStatus]]] = {
    EndKind.RUN: _RUNNING,
    EndKind.TIMEOUT: _RUNNING,
    EndKind.CANCEL: _LIVE,
    EndKind.WORKER_LOST: _RUNNING,
    EndKind.REQUEUE: _RUNNING,
    EndKind.RETRY: _RUNNING,
    EndKind.RELEASE: _RUNNING,
    EndKind.ABANDON: frozenset({TaskStatus.PENDING}),
    # RUNNING only with the claiming worker named: its function has not started.
    EndKind.REFUSE: _LIVE,
}

#: The statuses each kind of end may write (a run's own end: however its function ended).
TO_STATUSES: Final[Mapping[EndKind, frozenset[TaskStatus]]] = {
    EndKind.RUN: frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}),
    EndKind.TIMEOUT: frozenset({TaskStatus.FAILED}),
    EndKind.CANCEL: frozenset({TaskStatus.CANCELLED}),
    EndKind.WORKER_LOST: frozenset({TaskStatus.FAILED}),
    EndKind.REQUEUE: frozenset({TaskStatus.PENDING}),
    EndKind.RETRY: frozenset({TaskStatus.PENDING}),
    EndKind.RELEASE: frozenset({TaskStatus.PENDING}),
    EndKind.ABANDON: frozenset({TaskStatus.CANCELLED}),
    EndKind.REFUSE: frozenset({TaskStatus.CANCELLED}),
}

#: Kinds whose function may still be executing when the record ends: the slot stays held.
HOLDS_SLOT: Final = frozenset({EndKind.TIMEOUT, EndKind.CANCEL})

#: Kinds after which the record runs again (not an end a watcher waits for).
REQUEUES: Final = frozenset({EndKind.REQUEUE, EndKind.RETRY, EndKind.RELEASE})

#: Kinds written once the run's function returned: a lost fence frees the run's slot.
RETURNED: Final = frozenset({EndKind.RUN, EndKind.RETRY})


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskEnd:
    """One end of one run, fenced on ``run_id`` (and on ``worker_id`` when given)."""

    kind: EndKind
    task_id: str
    run_id: str
    #: The record must name this worker (the ends a worker writes); None: any or none.
    worker_id: str | None = None
    #: Narrows the fence to the status the caller read (a cancel), else the kind's statuses.
    from_status: TaskStatus | None = None
    #: The queue of the run, for the slot a running function keeps.
    queue: str = ""
    status: TaskStatus = TaskStatus.FAILED
    finished_at: datetime | None = None
    result: Any = None
    error: dict[str, str] | None = None
    #: The run's failures so far (oldest first); None leaves the stored list as it is.
    errors: list[dict[str, str]] | None = None
    cancel_reason: CancelReason = CancelReason.NONE
    progress: float | None = None
    #: A retry's next attempt: not before this time (the database's clock).
    run_after: datetime | None = None
    #: The workflow whose node (or undo) the record is, which reacts to the end.
    workflow: str | None = None
    node: str | None = None

    def __post_init__(self) -> None:
        if self.status not in TO_STATUSES[self.kind]:
            raise ValueError(f"A {self.kind} end cannot write {self.status}.")

    @property
    def from_statuses(self) -> frozenset[TaskStatus]:
        allowed = FROM_STATUSES[self.kind]
        if self.from_status is None:
            return allowed
        return allowed & {self.from_status}

    @property
    def holds_slot(self) -> bool:
        """Whether winning this end leaves a running function behind (its slot stays held)."""
        return self.kind in HOLDS_SLOT and TaskStatus.RUNNING in self.from_statuses

    @property
    def is_terminal(self) -> bool:
        return self.kind not in REQUEUES


def fields_of(end: TaskEnd) -> dict[str, Any]:
    """The column values an end writes when it wins its fence."""
    if end.kind is EndKind.RETRY:
        return {
            "status": TaskStatus.PENDING,
            "worker_id": None,
            "run_after": end.run_after,
            "progress": 0.0,
            "error": end.error,
            "errors": end.errors,
        }
    if end.kind in REQUEUES:
        fields: dict[str, Any] = {
            "status": TaskStatus.PENDING,
            "worker_id": None,
            "started_at": None,
        }
        if end.errors is not None:
            fields["errors"] = end.errors
        return fields
    fields = {
        "status": end.status,
        "finished_at": end.finished_at,
        "result": end.result,
        "error": end.error,
        "cancel_reason": end.cancel_reason,
    }
    if end.errors is not None:
        fields["errors"] = end.errors
    if end.progress is not None:
        fields["progress"] = end.progress
    return fields


def attempts_delta(end: TaskEnd) -> int:
    """How the end changes ``attempts``: a released claim gives its attempt back."""
    return -1 if end.kind is EndKind.RELEASE else 0


def with_failure(errors: Sequence[dict[str, str]], failure: TaskFailure) -> list[dict[str, str]]:
    """``errors`` with ``failure`` appended, keeping the last ``ERRORS_KEPT``."""
    return [*errors, failure.to_json()][-ERRORS_KEPT:]


# -- building ends ---------------------------------------------------------------------------


def run_end(
    info: TaskInfo,
    worker_id: str,
    status: TaskStatus,
    finished_at: datetime,
    **fields: Any,
) -> TaskEnd:
    """A run's own end, after its function returned."""
    return TaskEnd(
        kind=EndKind.RUN,
        task_id=info.id,
        run_id=info.run_id,
        worker_id=worker_id,
        queue=info.queue,
        status=status,
        finished_at=finished_at,
        workflow=info.workflow,
        node=info.node,
        **fields,
    )


def timeout_end(
    info: TaskInfo, worker_id: str, finished_at: datetime, errors: Sequence[dict[str, str]]
) -> TaskEnd:
    """FAILED with TaskTimeoutError, written while the function may still run."""
    failure = timeout_failure(info.options.timeout)
    return TaskEnd(
        kind=EndKind.TIMEOUT,
        task_id=info.id,
        run_id=info.run_id,
        worker_id=worker_id,
        queue=info.queue,
        status=TaskStatus.FAILED,
        finished_at=finished_at,
        error=failure.to_json(),
        errors=with_failure(errors, failure),
        cancel_reason=CancelReason.TIMEOUT,
        workflow=info.workflow,
        node=info.node,
    )


def retry_end(
    info: TaskInfo,
    worker_id: str,
    failure: TaskFailure,
    errors: Sequence[dict[str, str]],
    run_after: datetime,
) -> TaskEnd:
    """A failed attempt with retries left: PENDING again, not before ``run_after``."""
    return TaskEnd(
        kind=EndKind.RETRY,
        task_id=info.id,
        run_id=info.run_id,
        worker_id=worker_id,
        queue=info.queue,
        status=TaskStatus.PENDING,
        error=failure.to_json(),
        errors=with_failure(errors, failure),
        run_after=run_after,
        workflow=info.workflow,
        node=info.node,
    )


def timeout_failure(timeout: float | None) -> TaskFailure:
    """The failure a run records when its deadline passed."""
    return TaskFailure(class_path(TaskTimeoutError), cancel_message(CancelReason.TIMEOUT, timeout))


def cancelled_error(reason: CancelReason, timeout: float | None = None) -> dict[str, str]:
    """The stored error of a task ended CANCELLED for ``reason``."""
    return TaskFailure(class_path(TaskCancelled), cancel_message(reason, timeout)).to_json()


def cancel_end(info: TaskInfo, finished_at: datetime) -> TaskEnd:
    """A user's cancel of the live record ``info`` describes, fenced on what was read."""
    return TaskEnd(
        kind=EndKind.CANCEL,
        task_id=info.id,
        run_id=info.run_id,
        worker_id=info.worker_id if info.status == TaskStatus.RUNNING else None,
        from_status=info.status,
        queue=info.queue,
        status=TaskStatus.CANCELLED,
        finished_at=finished_at,
        error=cancelled_error(CancelReason.USER),
        cancel_reason=CancelReason.USER,
        workflow=info.workflow,
        node=info.node,
    )


def abandon_end(info: TaskInfo, finished_at: datetime) -> TaskEnd:
    """A pending task of a volatile store that shuts down: nothing will ever run it."""
    return TaskEnd(
        kind=EndKind.ABANDON,
        task_id=info.id,
        run_id=info.run_id,
        queue=info.queue,
        status=TaskStatus.CANCELLED,
        finished_at=finished_at,
        error=cancelled_error(CancelReason.SHUTDOWN),
        cancel_reason=CancelReason.SHUTDOWN,
        workflow=info.workflow,
        node=info.node,
    )


def release_end(info: TaskInfo, worker_id: str) -> TaskEnd:
    """A claimed run that never started goes back to its queue."""
    return TaskEnd(
        kind=EndKind.RELEASE,
        task_id=info.id,
        run_id=info.run_id,
        worker_id=worker_id,
        queue=info.queue,
        status=TaskStatus.PENDING,
        workflow=info.workflow,
        node=info.node,
    )


def zombie_end(row: Mapping[str, Any], finished_at: datetime) -> TaskEnd:
    """What the sweep writes over a dead worker's run (a record's columns in ``row``)."""
    failure = TaskFailure(class_path(WorkerLost), WORKER_LOST_MESSAGE)
    errors = with_failure(row.get("errors") or [], failure)
    retries = TaskOptions.from_json(row["options"]).retries
    common: dict[str, Any] = {
        "task_id": row["id"],
        "run_id": row["run_id"],
        "worker_id": row["worker_id"],
        "queue": row["queue"],
        "errors": errors,
        "workflow": row.get("workflow"),
        "node": row.get("node"),
    }
    if row["attempts"] <= retries:
        return TaskEnd(kind=EndKind.REQUEUE, status=TaskStatus.PENDING, **common)
    return TaskEnd(
        kind=EndKind.WORKER_LOST,
        status=TaskStatus.FAILED,
        finished_at=finished_at,
        error=failure.to_json(),
        **common,
    )


def refuse_end(row: Mapping[str, Any], reason: CancelReason, finished_at: datetime) -> TaskEnd:
    """A workflow node's record that will not run (its columns in ``row``) ends CANCELLED.

    A RUNNING record is refused only by the worker that claimed it, before it starts
    the function (the pre-run check), so no function is left behind.
    """
    status = TaskStatus(row["status"])
    return TaskEnd(
        kind=EndKind.REFUSE,
        task_id=row["id"],
        run_id=row["run_id"],
        worker_id=row["worker_id"] if status == TaskStatus.RUNNING else None,
        from_status=status,
        queue=row["queue"],
        status=TaskStatus.CANCELLED,
        finished_at=finished_at,
        error=cancelled_error(reason),
        cancel_reason=reason,
        workflow=row.get("workflow"),
        node=row.get("node"),
    )


def ended_info(info: TaskInfo, end: TaskEnd) -> TaskInfo:
    """``info`` as the record reads once ``end`` won (for signals sent after the write)."""
    fields = fields_of(end)
    changes = {
        "status": TaskStatus(fields["status"]),
        "finished_at": fields.get("finished_at"),
        "result": fields.get("result"),
        "error": TaskFailure.from_json(fields.get("error")),
        "cancel_reason": CancelReason(fields.get("cancel_reason", info.cancel_reason)),
        "progress": fields.get("progress", info.progress),
    }
    if "errors" in fields:
        changes["errors"] = failures_of(fields["errors"])
    # A shallow copy with a few fields set: once per ended task, where dataclasses.replace
    # (a full __init__ of the snapshot) showed in profiles of a drain.
    ended = copy.copy(info)
    for name, value in changes.items():
        object.__setattr__(ended, name, value)
    return ended


def failures_of(errors: Sequence[dict[str, str]] | None) -> tuple[TaskFailure, ...]:
    """The stored ``errors`` list as failures, oldest first."""
    return tuple(f for f in map(TaskFailure.from_json, errors or ()) if f is not None)
