"""Snapshots of records and workflows, and the operators' counts: the store's reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count

from django_workers import visibility
from django_workers.core import GrantedTaskRow, NodeRow, WorkflowRow
from django_workers.engine.records import WorkflowInfo, info_of, state_columns
from django_workers.info import TaskInfo, TaskStatus
from django_workers.stores import rows, sql
from django_workers.stores.base import EndedCounts, QueueCounts
from django_workers.stores.database.access import COLUMNS, WORKFLOW_COLUMNS, DatabaseAccess


def _newest_page(found: Sequence[GrantedTaskRow], offset: int, limit: int) -> list[GrantedTaskRow]:
    """A page of a user's owned and watched rows, newest first, each row once."""
    merged = {row["id"]: row for row in found}
    newest = sorted(merged.values(), key=lambda r: (r["created_at"], r["id"]), reverse=True)
    return newest[offset : offset + limit]


def _workflow_infos_sql(
    connection: BaseDatabaseWrapper,
    filters: Mapping[str, str],
    offset: int,
    limit: int,
    any_of: Sequence[Mapping[str, Any]] = (),
    user_id: str | None = None,
) -> list[WorkflowInfo]:
    """``sql.read_workflows``'s workflows as snapshots."""
    found = sql.read_workflows(connection, filters, offset, limit, any_of, user_id)
    return [info_of(row, {r["id"]: rows.node_record(r) for r in records}) for row, records in found]


class DatabaseReads(DatabaseAccess):
    """Reads that take no lock: one statement where the database can, else a few."""

    def get_task_info(self, task_id: str) -> TaskInfo | None:
        connection = connections[self.using]
        if connection.vendor in sql.ONE_STATEMENT_READS:
            # One statement, the row with its watchers.
            found = sql.read_record(connection, task_id)
            return None if found is None else rows.info_of(found, found["grants"])
        row = self._records().filter(pk=task_id).values(*COLUMNS).first()
        return None if row is None else rows.info_of(row, self._grants(task_id))

    def list_tasks(
        self,
        *,
        user_id: str | None,
        status: TaskStatus | None = None,
        queue: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[TaskInfo]:
        filters = {
            name: value
            for name, value in (
                ("status", None if status is None else TaskStatus(status).value),
                ("queue", queue),
            )
            if value is not None
        }
        connection = connections[self.using]
        if connection.vendor in sql.ONE_STATEMENT_READS:
            # One statement, each row with its watchers.
            found = sql.list_records(connection, user_id, filters, offset, limit)
            if user_id is not None:
                found = _newest_page(found, offset, limit)
            return [rows.info_of(row, row["grants"]) for row in found]
        qs = self._records().filter(**filters)
        if user_id is None:
            return self._infos(list(qs.newest_first().values(*COLUMNS)[offset : offset + limit]))
        # The two halves of what a user sees are read apart, each newest first along
        # its own index, then merged: one query with "owned OR watched" walks the
        # whole table newest first until it has found a page.
        end = offset + limit
        owned = qs.filter(visibility.owned_tasks(user_id))
        watched = qs.filter(visibility.watched_tasks(user_id))
        owned = owned.newest_first().values(*COLUMNS)[:end]
        watched = watched.newest_first().values(*COLUMNS)[:end]
        return self._infos(_newest_page([*owned, *watched], offset, limit))

    def get_workflow(self, workflow_id: str) -> WorkflowInfo | None:
        connection = connections[self.using]
        if connection.vendor in sql.ONE_STATEMENT_READS:
            # One statement, the row with its task records.
            found = _workflow_infos_sql(connection, {"id": workflow_id}, 0, 1)
            return found[0] if found else None
        row = self._flows().filter(pk=workflow_id).values(*WORKFLOW_COLUMNS).first()
        return None if row is None else self._workflow_infos([row])[0]

    def list_workflows(
        self,
        *,
        user_id: str | None,
        state: str | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[WorkflowInfo]:
        connection = connections[self.using]
        if connection.vendor in sql.ONE_STATEMENT_READS:
            return _workflow_infos_sql(
                connection,
                {},
                offset,
                limit,
                [] if state is None else state_columns(state),
                user_id,
            )
        qs = self._flows().filter(visibility.workflows(user_id))
        if state is not None:
            qs = qs.in_state(state)
        return self._workflow_infos(
            list(qs.newest_first().values(*WORKFLOW_COLUMNS)[offset : offset + limit])
        )

    def _workflow_infos(self, found: Sequence[Mapping[str, Any]]) -> list[WorkflowInfo]:
        """Snapshots of rows the ORM read with ``WORKFLOW_COLUMNS``: workflow rows."""
        if not found:
            return []
        records = self._records().filter(workflow__in=[row["id"] for row in found])
        nodes = {
            r["id"]: rows.node_record(cast(NodeRow, r)) for r in records.values(*sql.NODE_COLUMNS)
        }
        return [info_of(cast(WorkflowRow, row), nodes) for row in found]

    def queue_counts(self) -> list[QueueCounts]:
        found: dict[str, dict[str, Any]] = {}
        for row in self._records().queue_counts():
            rows.add_queue_count(
                found,
                row["queue"],
                row["status"],
                row["worker_id"],
                row["count"],
                row["oldest"],
                row["retrying"],
            )
        held = self._slots().order_by().values("queue").annotate(n=Count("run_id"))
        for queue, n in held.values_list("queue", "n"):
            rows.queue_fields(found, queue)["held_slots"] += n
        return [QueueCounts(**found[name]) for name in sorted(found)]

    def ended_counts(self, since: Sequence[datetime]) -> list[EndedCounts]:
        found: dict[str, dict[str, list[int]]] = {}
        for row in self._records().ended_counts(since):
            counts = [row[f"n{i}"] for i in range(len(since))]
            rows.add_ended_count(found, row["queue"], row["status"], counts)
        return [
            EndedCounts(queue=name, completed=tuple(f["completed"]), failed=tuple(f["failed"]))
            for name, f in sorted(found.items())
        ]
