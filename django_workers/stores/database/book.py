"""The rows a workflow's reaction reads and writes, in the ending transaction of the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from django_workers import local_wake
from django_workers.cancellation import CancelReason
from django_workers.core import LiveNodeRow, NewTask, WorkflowRow, new_run_id
from django_workers.engine import persistence
from django_workers.info import TERMINAL_STATUSES, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores import rows, sql

if TYPE_CHECKING:
    from django_workers.stores.database.access import DatabaseAccess
    from django_workers.stores.database.ends import EndWriter

#: The columns of a workflow row, read with .values().
WORKFLOW_COLUMNS = sql.WORKFLOW_COLUMNS


class Book:
    """The row operations the workflow routine runs in this store's transaction."""

    def __init__(self, store: DatabaseAccess, writer: EndWriter) -> None:
        self.store = store
        self.writer = writer
        # Rows locked in this transaction, as the workflow routine last left them.
        self.locked: dict[str, WorkflowRow] = {}
        # Nodes to make PENDING, written with the next statement that needs them.
        self.promotions: list[str] = []
        # Whether this transaction queued work (promotions, undos) to wake workers for.
        self.queued = False

    def lock_workflows(self, ids: Sequence[str]) -> dict[str, WorkflowRow]:
        missing = [i for i in ids if i not in self.locked]
        if missing:
            qs = self.store._flows().filter(pk__in=missing).order_by("pk")
            self.locked.update(
                (row["id"], cast(WorkflowRow, row))
                for row in qs.select_for_update().values(*WORKFLOW_COLUMNS)
            )
        return {i: self.locked[i] for i in ids if i in self.locked}

    def save_workflow(self, workflow_id: str, fields: Mapping[str, Any]) -> None:
        # The promotions this state made go with it.
        promote, self.promotions = self.promotions, []
        self.writer.save_workflow(workflow_id, fields, promote)

    def node_records(self, task_ids: Sequence[str]) -> list[LiveNodeRow]:
        self.promote_now()
        found = self.store._records().filter(pk__in=list(task_ids))
        return cast(list[LiveNodeRow], list(found.values(*persistence.RECORD_COLUMNS)))

    def write_ends(self, ends: Sequence[TaskEnd]) -> list[bool]:
        self.promote_now()
        return [self.writer.end_one(end) for end in ends]

    def promote(self, task_ids: Sequence[str]) -> None:
        # Written with the workflow's row (or before anything reads or ends a record).
        self.promotions += task_ids
        self.queued = True

    def promote_now(self) -> None:
        """Make the nodes promoted so far PENDING now."""
        if self.promotions:
            ids, self.promotions = self.promotions, []
            self.writer.promote(ids)

    def add_tasks(self, news: Sequence[NewTask]) -> None:
        self.promote_now()
        self.queued = True
        self.store._records().filter(pk__in=[new.id for new in news]).delete()
        self.store._insert(news)

    def reset_nodes(self, task_ids: Sequence[str]) -> int:
        self.promote_now()
        ended = self.store._records().filter(status__in=sorted(TERMINAL_STATUSES))
        # One fenced update per record: each run gets its own id.
        return sum(
            ended.filter(pk=task_id).update(**rows.fresh_run(new_run_id())) for task_id in task_ids
        )

    def wake(self) -> None:
        """After the commit: wake this machine's idle workers (SQLite) for what was queued."""
        if self.queued:
            self.store.notify_enqueued([local_wake.EVERY_QUEUE])

    def request_stop(self, task_ids: Sequence[str], reason: CancelReason) -> None:
        self.promote_now()
        # A node waiting for its retry (PENDING again) is refused when claimed.
        live = self.store._records().filter(
            pk__in=list(task_ids),
            status__in=[TaskStatus.RUNNING, TaskStatus.PENDING],
            cancel_reason=CancelReason.NONE,
        )
        live.update(cancel_reason=reason)
