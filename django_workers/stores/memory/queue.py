"""The run queue role of the memory store: claims, ends and workflows' reactions."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from django_workers import clock, lifecycle
from django_workers.cancellation import CancelReason
from django_workers.core import LiveNodeRow, WorkflowRow
from django_workers.engine import persistence
from django_workers.info import TaskInfo, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.stores import rows
from django_workers.stores.base import NewTask
from django_workers.stores.memory.state import MemoryState


class MemoryRunQueue(MemoryState):
    """Claims and fenced ends under the lock; a workflow reacts through its ``_Book``."""

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        queue_limits: Mapping[str, int] | None = None,
    ) -> list[TaskInfo]:
        with self._lock:
            free = self._free_slots(queue_limits or {})
            ready = sorted(
                (
                    row
                    for row in self._rows.values()
                    if row["status"] == TaskStatus.PENDING
                    and (not queues or row["queue"] in queues)
                    and (row["run_after"] is None or row["run_after"] <= now)
                ),
                key=rows.claim_order,
            )
            claimed: list[TaskInfo] = []
            for row in ready:
                if len(claimed) >= limit:
                    break
                if row["queue"] in free:
                    if free[row["queue"]] <= 0:
                        continue
                    free[row["queue"]] -= 1
                row.update(
                    status=TaskStatus.RUNNING,
                    worker_id=worker_id,
                    started_at=row["started_at"] or max(now, row["created_at"]),
                    attempts=row["attempts"] + 1,
                )
                claimed.append(self._info(row))
            return claimed

    def _free_slots(self, queue_limits: Mapping[str, int]) -> dict[str, int]:
        free = dict(queue_limits)
        running = [r["queue"] for r in self._rows.values() if r["status"] == TaskStatus.RUNNING]
        for queue in running + [queue for queue, _worker in self._held.values()]:
            if queue in free:
                free[queue] -= 1
        return free

    def end_tasks(self, ends: Sequence[TaskEnd]) -> list[bool]:
        book = _Book(self)
        with self._lock:
            won = [self._end(end) for end in ends]
            if persistence.workflows_of(ends):
                winners = [e for e, ok in zip(ends, won, strict=True) if ok]
                persistence.react(book, winners, clock.now())
        book.wake()
        return won

    def cancel_workflow(
        self, workflow_id: str, undo: bool | None, drop_undo: bool = False
    ) -> bool | None:
        book = _Book(self)
        with self._lock:
            cancelled = persistence.cancel(book, workflow_id, undo, clock.now(), drop_undo)
        book.wake()
        return cancelled

    def begin_runs(self, runs: Sequence[TaskInfo]) -> list[bool]:
        with self._lock:
            found = _Book(self).node_records([info.id for info in runs])
        allowed, refusals = persistence.pre_run(runs, {r["id"]: r for r in found}, clock.now())
        if refusals:
            self.end_tasks(refusals)
        return allowed

    def _end(self, end: TaskEnd) -> bool:
        row = self._rows.get(end.task_id)
        if (
            row is None
            or row["status"] not in end.from_statuses
            or row["run_id"] != end.run_id
            or (end.worker_id is not None and row["worker_id"] != end.worker_id)
        ):
            if end.kind in lifecycle.RETURNED:
                self._release_slot(end)
            return False
        if end.holds_slot and row["status"] == TaskStatus.RUNNING:
            self._held.setdefault(end.run_id, (row["queue"], row["worker_id"]))
        row.update(lifecycle.fields_of(end))
        row["attempts"] += lifecycle.attempts_delta(end)
        return True

    def _release_slot(self, end: TaskEnd) -> None:
        held = self._held.get(end.run_id)
        if held is not None and held[1] == end.worker_id:
            del self._held[end.run_id]

    def runs_claimed_by(self, worker_id: str) -> list[TaskInfo]:
        with self._lock:
            return [
                self._info(row)
                for row in self._rows.values()
                if row["status"] == TaskStatus.RUNNING and row["worker_id"] == worker_id
            ]

    def runs_to_stop(self, worker_id: str, runs: Mapping[str, str]) -> dict[str, CancelReason]:
        with self._lock:
            return {
                task_id: reason
                for task_id, run_id in runs.items()
                if (reason := rows.stop_reason(self._rows.get(task_id), worker_id, run_id))
            }


class _Book:
    """The row operations the workflow routine runs under this store's lock."""

    def __init__(self, store: MemoryRunQueue) -> None:
        self.store = store
        self.queues: set[str] = set()

    def lock_workflows(self, ids: Sequence[str]) -> dict[str, WorkflowRow]:
        found = (self.store._flows.get(workflow_id) for workflow_id in ids)
        return {
            row["id"]: cast(WorkflowRow, copy.deepcopy(row)) for row in found if row is not None
        }

    def save_workflow(self, workflow_id: str, fields: Mapping[str, Any]) -> None:
        self.store._flows[workflow_id].update(copy.deepcopy(dict(fields)))

    def node_records(self, task_ids: Sequence[str]) -> list[LiveNodeRow]:
        found = (self.store._rows.get(task_id) for task_id in task_ids)
        return [
            cast(LiveNodeRow, {c: row[c] for c in persistence.RECORD_COLUMNS})
            for row in found
            if row
        ]

    def write_ends(self, ends: Sequence[TaskEnd]) -> list[bool]:
        return [self.store._end(end) for end in ends]

    def promote(self, task_ids: Sequence[str]) -> None:
        for task_id in task_ids:
            row = self.store._rows.get(task_id)
            if row is not None and row["status"] == TaskStatus.WAITING:
                row["status"] = TaskStatus.PENDING
                self.queues.add(row["queue"])

    def add_tasks(self, news: Sequence[NewTask]) -> None:
        for new in news:
            self.store._insert(new)
            self.queues.add(new.queue)

    def request_stop(self, task_ids: Sequence[str], reason: CancelReason) -> None:
        for task_id in task_ids:
            row = self.store._rows.get(task_id)
            # A node waiting for its retry (PENDING again) is refused when claimed.
            if row is None or row["status"] not in (TaskStatus.RUNNING, TaskStatus.PENDING):
                continue
            if row["cancel_reason"] == CancelReason.NONE:
                row["cancel_reason"] = reason

    def wake(self) -> None:
        """Wake this process's idle workers for what became PENDING (after the lock)."""
        if self.queues:
            self.store.notify_enqueued(self.queues)
