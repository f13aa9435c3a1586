"""Submitting and the live state writes: the task records role of ``DatabaseWorkerStore``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import IntegrityError, connections

from django_workers import visibility
from django_workers.exceptions import InvalidWorkflow
from django_workers.info import LIVE_STATUSES, TaskStatus
from django_workers.stores import rows, sql
from django_workers.stores.base import (
    AllCreated,
    NewTask,
    NewWorkflow,
    RecordStream,
    RunId,
    Submitted,
    grants_of,
)
from django_workers.stores.database.access import DatabaseAccess, _one_writer


class DatabaseRecords(DatabaseAccess):
    """Writes a record, its watchers and workflows; each a statement or a short transaction."""

    def _submit_one(self, new: NewTask, caller: str | None) -> Submitted:
        """One record's submit; ``submit`` takes the writer lock (``_one_writer``) around it."""
        if not grants_of(new):
            # Fast path: one INSERT. Only a taken id needs the locking path below.
            connection = connections[self.using]
            if connection.vendor in ("postgresql", "sqlite"):
                # Never an error on a taken id, so also one statement inside a transaction.
                if sql.insert_if_new(connection, new):
                    return Submitted(new.id, new.run_id, created=True)
            elif not connection.in_atomic_block:
                try:
                    self._insert([new])
                    return Submitted(new.id, new.run_id, created=True)
                except IntegrityError:
                    pass
        with self._atomic():
            row = self._lock_row(new.id)
            if row is None:
                try:
                    with self._atomic():
                        self._insert([new])
                    return Submitted(new.id, new.run_id, created=True)
                except IntegrityError:
                    # Another submit inserted this id since our read; decide against it.
                    row = self._lock_row(new.id)
                    if row is None:
                        raise
            return self._resubmit(new, caller, row)

    submit = _one_writer(_submit_one)

    @_one_writer
    def submit_many(self, news: Sequence[NewTask], caller: str | None) -> Sequence[Submitted]:
        if len(news) == 1:
            return [self._submit_one(news[0], caller)]
        # A batch its COPY reads as it is built is not read first for repeated ids: a
        # repeat fails the COPY as a taken id does.
        if self._streams(news) or _distinct([new.id for new in news]):
            try:
                self._insert_fresh(news)
                return AllCreated(news)
            except IntegrityError:
                pass  # an id is taken: the insert wrote nothing; each task is decided below
        # One transaction, so a refusal part-way (after a repeated key, a join or a
        # re-run of the same batch) leaves nothing of the batch written.
        with self._atomic():
            return super().submit_many(news, caller)

    def _insert_fresh(self, news: Sequence[NewTask]) -> None:
        """Insert new records whose ids are expected free; IntegrityError if one is taken.

        No read first: a taken id fails the insert, which then wrote nothing. One
        statement (a COPY on PostgreSQL, one INSERT up to ``sql.INSERT_CHUNK`` rows)
        with no watcher rows needs no transaction of its own in autocommit.
        """
        connection = connections[self.using]
        single = connection.vendor == "postgresql" or len(news) <= sql.INSERT_CHUNK
        # A stream says so before its records are built.
        plain = news.plain if isinstance(news, RecordStream) else not any(map(grants_of, news))
        if single and plain and connection.get_autocommit():
            # A record that fails its checks part-way through a COPY fails the COPY.
            sql.insert_records(connection, news)
            return
        with self._atomic():
            self._insert(news)

    def _streams(self, news: Sequence[NewTask]) -> bool:
        """Whether ``news`` is written by a COPY that reads its records as they are built."""
        return isinstance(news, RecordStream) and sql.copies(connections[self.using], len(news))

    def _lock_row(self, task_id: str) -> Mapping[str, Any] | None:
        return (
            self._records()
            .select_for_update()
            .filter(pk=task_id)
            .values("status", "run_id", "workflow")
            .first()
        )

    def _resubmit(self, new: NewTask, caller: str | None, row: Mapping[str, Any]) -> Submitted:
        rows.refuse_node_key(new.id, row["workflow"])
        grants = self._grants(new.id)
        joining = not visibility.sees_task(caller, new.id, grants)
        # Only a caller (never System, None) can be joining: the checker cannot tell.
        if joining:
            rows.authorize_join(new.id, caller, grants, self.watch_authorizer)  # type: ignore[arg-type]
        if row["status"] in LIVE_STATUSES:
            if joining:
                self.add_watcher(new.id, caller)  # type: ignore[arg-type]
            return Submitted(new.id, row["run_id"], created=False)
        self.replace_task(new)
        return Submitted(new.id, new.run_id, created=True, replaced_run_id=row["run_id"])

    @_one_writer
    def replace_task(self, new: NewTask) -> None:
        row = rows.row_of(new)
        with self._atomic():
            self._records().filter(pk=new.id).update(**{k: v for k, v in row.items() if k != "id"})
            self._watchers().filter(task_id=new.id).delete()
            self._grant([new])

    @_one_writer
    def add_watcher(self, task_id: str, user_id: str) -> bool:
        try:
            with self._atomic():
                # The foreign key is deferred to the outermost commit, which may be the
                # caller's; so check the task here, locked against a concurrent delete.
                if not self._records().select_for_update().filter(pk=task_id).exists():
                    return False
                self._watchers().create(task_id=task_id, user_id=user_id)
        except IntegrityError:
            return False  # already watching (unique constraint)
        return True

    @_one_writer
    def submit_workflow(self, workflow: NewWorkflow, tasks: Sequence[NewTask]) -> str | None:
        with self._atomic():
            try:
                with self._atomic():
                    self._flows().create(
                        id=workflow.id,
                        key=workflow.key,
                        owner=workflow.owner,
                        plan_hash=workflow.plan_hash,
                        fail_fast=workflow.fail_fast,
                        undo_on_cancel=workflow.undo_on_cancel,
                        created_at=workflow.created_at,
                        deadline=workflow.deadline,
                        deadline_at=workflow.deadline_at,
                        watchers=list(workflow.watchers),
                        **workflow.state,
                    )
            except IntegrityError:
                # Another submit of this id got there first (we waited for its commit).
                found = self._flows().filter(pk=workflow.id).values("plan_hash").first()
                if found is None:
                    raise
                return str(found["plan_hash"])
            try:
                with self._atomic():
                    self._insert(tasks)
            except IntegrityError:
                taken = self._records().filter(pk__in=[t.id for t in tasks])
                raise InvalidWorkflow(
                    [
                        f"Task id {task_id!r} is taken by another task; a workflow's node ids "
                        "are its own. Choose another workflow id."
                        for task_id in taken.values_list("id", flat=True)
                    ]
                    or ["A node's task id is taken; choose another workflow id."]
                ) from None
        return None

    @_one_writer
    def try_transition(
        self,
        task_id: str,
        run_id: RunId,
        from_states: Iterable[TaskStatus],
        to_state: TaskStatus,
        *,
        claimed_by: str | None = None,
        **fields: Any,
    ) -> bool:
        rows.check_state_fields(fields, transition=True, to_state=to_state)
        qs = self._fenced(task_id, run_id).filter(status__in=list(from_states))
        if claimed_by is not None:
            qs = qs.filter(worker_id=claimed_by)
        return qs.update(status=to_state, **fields) == 1

    @_one_writer
    def set_task_state(self, task_id: str, run_id: RunId, **fields: Any) -> bool:
        rows.check_state_fields(fields)
        return self._fenced(task_id, run_id).update(**fields) == 1


def _distinct(ids: list[str]) -> bool:
    return len(set(ids)) == len(ids)
