"""The workflow rows one transaction of the store locks, and the engine's answers it writes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from django_workers import local_wake
from django_workers.cancellation import CancelReason
from django_workers.core import LiveNodeRow, WorkflowRow, new_run_id
from django_workers.engine import persistence
from django_workers.engine.machine import InvalidEvent
from django_workers.engine.persistence import NodeRecords, WorkflowWrites
from django_workers.info import TERMINAL_STATUSES, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores import rows, sql
from django_workers.stores.workflow_writes import answered

if TYPE_CHECKING:
    from django_workers.stores.database.access import DatabaseAccess
    from django_workers.stores.database.ends import EndWriter

#: The columns of a workflow row, read with .values().
WORKFLOW_COLUMNS = sql.WORKFLOW_COLUMNS


class Reactions:
    """One transaction's workflow writes: rows locked, the engine asked, its answer written."""

    def __init__(self, store: DatabaseAccess, writer: EndWriter) -> None:
        self.store = store
        self.writer = writer
        # Whether this transaction queued work (promotions, undos) to wake workers for.
        self.queued = False

    def lock(self, ids: Sequence[str]) -> dict[str, WorkflowRow]:
        """Lock the rows of these workflows (in id order) and return them by id."""
        qs = self.store._flows().filter(pk__in=list(ids)).order_by("pk")
        return {
            row["id"]: cast(WorkflowRow, row)
            for row in qs.select_for_update().values(*WORKFLOW_COLUMNS)
        }

    def write(self, ask: Callable[[NodeRecords], WorkflowWrites | None]) -> WorkflowWrites | None:
        """Ask the engine until its answer is whole, and write it; None if it answers None."""
        writes = answered(ask, self._node_records, self._refuse)
        if writes is None:
            return None
        if writes.resets and self._reset(writes.resets) != len(writes.resets):
            # A node's record did not end with its workflow: a store's mistake, never a user's.
            raise InvalidEvent("A workflow to re-run has a node record still live.")
        if writes.undos:
            news = list(writes.undos)
            self.store._records().filter(pk__in=[new.id for new in news]).delete()
            self.store._insert(news)
        self._request_stops(writes.stops)
        for save in writes.saves:
            self.writer.save_workflow(save.workflow_id, save.columns, save.promote)
        self.queued = self.queued or writes.queues_work
        return writes

    def wake(self) -> None:
        """After the commit: wake this machine's idle workers (SQLite) for what was queued."""
        if self.queued:
            self.store.notify_enqueued([local_wake.EVERY_QUEUE])

    def _node_records(self, task_ids: Sequence[str]) -> list[LiveNodeRow]:
        return node_records(self.store, task_ids)

    def _refuse(self, ends: Sequence[TaskEnd]) -> list[bool]:
        # Through the store's end rules, without reacting to them again.
        return [self.writer.end_one(end) for end in ends]

    def _reset(self, task_ids: Sequence[str]) -> int:
        """Make these ended records WAITING for a new run; how many were ended.

        Each gets a new run id and a fresh run (attempts, result, error, times,
        cancel reason cleared) and keeps its ``errors``.
        """
        ended = self.store._records().filter(status__in=sorted(TERMINAL_STATUSES))
        # One fenced update per record: each run gets its own id.
        return sum(
            ended.filter(pk=task_id).update(**rows.fresh_run(new_run_id())) for task_id in task_ids
        )

    def _request_stops(self, stops: Sequence[tuple[str, CancelReason]]) -> None:
        """Ask the runs of these RUNNING records to stop (their workers set the token)."""
        by_reason: dict[CancelReason, list[str]] = {}
        for task_id, reason in stops:
            by_reason.setdefault(reason, []).append(task_id)
        for reason, task_ids in by_reason.items():
            # A node waiting for its retry (PENDING again) is refused when claimed.
            live = self.store._records().filter(
                pk__in=task_ids,
                status__in=[TaskStatus.RUNNING, TaskStatus.PENDING],
                cancel_reason=CancelReason.NONE,
            )
            live.update(cancel_reason=reason)


def node_records(store: DatabaseAccess, task_ids: Sequence[str]) -> list[LiveNodeRow]:
    """The ``RECORD_COLUMNS`` of these task records (those that exist)."""
    found = store._records().filter(pk__in=list(task_ids))
    return cast(list[LiveNodeRow], list(found.values(*persistence.RECORD_COLUMNS)))
