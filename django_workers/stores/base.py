"""The store contract: what every store answers about task records.

``WorkerStore`` combines the contract's roles (``stores.roles``): task records,
reads, the run queue, worker leases, notification and retention, plus the two
policy hooks (the queue and watch authorizers). The values the roles take and
give live in ``stores.values``; both are importable from here.

Two implementations behave identically: ``DatabaseWorkerStore`` (Django ORM)
and ``InMemoryWorkerStore`` (volatile, thread-safe). One contract test body
runs against both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError

from django_workers.cancellation import CancelReason
from django_workers.core import NewTask
from django_workers.info import TaskInfo
from django_workers.lifecycle import TaskEnd
from django_workers.stores.roles import (
    Notification,
    Retention,
    RunQueue,
    TaskReads,
    TaskRecords,
    WorkerLeases,
)
from django_workers.stores.values import (
    ANY_RUN,
    STATE_FIELDS,
    AllCreated,
    EndedCounts,
    NewWorkflow,
    QueueAuthorizer,
    QueueCounts,
    RecordStream,
    RunId,
    Submitted,
    WatchAuthorizer,
    WorkerRegistration,
    grants_of,
)

__all__ = [
    "ANY_RUN",
    "STATE_FIELDS",
    "AllCreated",
    "EndedCounts",
    "NewTask",
    "NewWorkflow",
    "Notification",
    "QueueAuthorizer",
    "QueueCounts",
    "RecordStream",
    "Retention",
    "RunId",
    "RunQueue",
    "Submitted",
    "TaskReads",
    "TaskRecords",
    "WatchAuthorizer",
    "WorkerLeases",
    "WorkerRegistration",
    "WorkerStore",
    "grants_of",
]


@dataclass(slots=True)
class _Policy:
    queue_authorizer: QueueAuthorizer | None = None
    watch_authorizer: WatchAuthorizer | None = None


class WorkerStore(TaskRecords, TaskReads, RunQueue, WorkerLeases, Notification, Retention):
    """Every role of the contract, plus the queue and watch authorizers; see ``roles``."""

    #: True when records outlive this process (another process may run them).
    durable: bool = False

    def __init__(
        self,
        *,
        queue_authorizer: QueueAuthorizer | None = None,
        watch_authorizer: WatchAuthorizer | None = None,
    ) -> None:
        self._policy = _Policy(queue_authorizer, watch_authorizer)

    @property
    def queue_authorizer(self) -> QueueAuthorizer | None:
        """``fn(queue_name, user_id) -> bool`` consulted on every Owner submit."""
        return self._policy.queue_authorizer

    @property
    def watch_authorizer(self) -> WatchAuthorizer | None:
        """``fn(task_id, watchers, user_id) -> bool`` for joining a task one does not watch."""
        return self._policy.watch_authorizer

    def set_queue_authorizer(self, fn: QueueAuthorizer | None) -> None:
        """Replace the queue authorizer; None disables the queue check."""
        self._policy.queue_authorizer = fn

    def set_watch_authorizer(self, fn: WatchAuthorizer | None) -> None:
        """Replace the watch authorizer; None denies every cross-user join."""
        self._policy.watch_authorizer = fn

    def cancel_overdue_workflows(self, now: datetime, limit: int = 100) -> list[str]:
        """Cancel (reason ``deadline``) the running workflows past their deadline at ``now``.

        Each cancel checks the deadline again under the workflow's lock, so two
        workers sweeping at once cancel a workflow once. Returns the ones cancelled.
        """
        return [
            workflow_id
            for workflow_id in self.overdue_workflows(now, limit)
            if self.cancel_workflow(workflow_id, None, reason=CancelReason.DEADLINE, now=now)
        ]

    def end_and_claim(
        self,
        ends: Sequence[TaskEnd],
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        queue_limits: Mapping[str, int] | None = None,
    ) -> tuple[list[bool], list[TaskInfo]]:
        """``end_tasks(ends)``, then ``claim(...)`` of up to ``limit`` runs for the freed slots.

        A worker's finished runs and the claim that refills their slots: the ends
        are written first, so the worker never holds more RUNNING records than
        slots. A store may do both in one transaction (one commit): then a failure
        stores neither and raises, and the caller retries the ends alone. This one
        does them one after the other: the ends are stored even when the claim
        fails, whose error is not raised (nothing is claimed then; the worker's
        claim loop claims later).
        """
        won = self.end_tasks(ends)
        if limit <= 0:
            return won, []
        try:
            return won, self.claim(worker_id, queues, limit, now, queue_limits)
        except DatabaseError:
            self.reset_connection()
            return won, []
