"""Snapshots of records and workflows, and the operators' counts, from the memory store."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from django_workers import visibility
from django_workers.core import NodeRow, WorkflowRow
from django_workers.engine.records import WorkflowInfo, in_state, info_of
from django_workers.info import TaskInfo, TaskStatus
from django_workers.stores import rows
from django_workers.stores.base import EndedCounts, QueueCounts
from django_workers.stores.memory.state import MemoryState


class MemoryReads(MemoryState):
    """Copies of the rows, read under the lock."""

    def get_task_info(self, task_id: str) -> TaskInfo | None:
        with self._lock:
            row = self._rows.get(task_id)
            return None if row is None else self._info(row)

    def list_tasks(
        self,
        *,
        user_id: str | None,
        status: TaskStatus | None = None,
        queue: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[TaskInfo]:
        with self._lock:
            found = [
                row
                for row in self._rows.values()
                if visibility.sees_task(user_id, row["id"], self._grants[row["id"]])
                and (status is None or row["status"] == status)
                and (queue is None or row["queue"] == queue)
            ]
            found.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
            return [self._info(row) for row in found[offset : offset + limit]]

    def get_workflow(self, workflow_id: str) -> WorkflowInfo | None:
        with self._lock:
            row = self._flows.get(workflow_id)
            return None if row is None else self._workflow_info(row)

    def list_workflows(
        self,
        *,
        user_id: str | None,
        state: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[WorkflowInfo]:
        with self._lock:
            found = [
                row
                for row in self._flows.values()
                if visibility.sees(user_id, row["owner"], row["watchers"])
                and (state is None or in_state(cast(WorkflowRow, row), state))
            ]
            found.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
            return [self._workflow_info(row) for row in found[offset : offset + limit]]

    def _workflow_info(self, row: dict[str, Any]) -> WorkflowInfo:
        records = {
            task_id: rows.node_record(cast(NodeRow, record))
            for task_id, record in self._rows.items()
            if record["workflow"] == row["id"]
        }
        return info_of(cast(WorkflowRow, copy.deepcopy(row)), records)

    def queue_counts(self) -> list[QueueCounts]:
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            for row in self._rows.values():
                if row["status"] in (TaskStatus.PENDING, TaskStatus.RUNNING):
                    rows.add_queue_count(
                        found,
                        row["queue"],
                        row["status"],
                        row["worker_id"],
                        1,
                        row["created_at"],
                        int(row["attempts"] >= 1),
                    )
            for queue, _worker in self._held.values():
                rows.queue_fields(found, queue)["held_slots"] += 1
        return [QueueCounts(**found[name]) for name in sorted(found)]

    def ended_counts(self, since: Sequence[datetime]) -> list[EndedCounts]:
        found: dict[str, dict[str, list[int]]] = {}
        with self._lock:
            for row in self._rows.values():
                if row["status"] in (TaskStatus.COMPLETED, TaskStatus.FAILED):
                    ended = row["finished_at"]
                    counts = [int(ended is not None and ended >= s) for s in since]
                    if any(counts):
                        rows.add_ended_count(found, row["queue"], row["status"], counts)
        return [
            EndedCounts(queue=name, completed=tuple(f["completed"]), failed=tuple(f["failed"]))
            for name, f in sorted(found.items())
        ]
