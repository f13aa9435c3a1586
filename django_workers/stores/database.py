"""``DatabaseWorkerStore``: the store contract on the Django ORM (the default store).

Every write is one conditional UPDATE checked by row count, or one short
transaction that locks what it decides on (``select_for_update``; SKIP LOCKED
when claiming). No transaction here ever spans user code.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, DateTimeField, F, Q, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from django_workers import clock, lifecycle, local_wake
from django_workers.bounds import HOST_MAX_LENGTH, fit
from django_workers.cancellation import CancelReason
from django_workers.conf import served_limits, workers_settings
from django_workers.exceptions import InvalidWorkflow, RuntimeInTransaction
from django_workers.info import LIVE_STATUSES, TaskInfo, TaskStatus
from django_workers.lifecycle import EndKind, TaskEnd
from django_workers.models import (
    HeldSlot,
    QueueLock,
    TaskRecord,
    TaskWatcher,
    WorkerProcess,
    WorkflowRecord,
    record_fields,
)
from django_workers.stores import rows, sql
from django_workers.stores.base import (
    ANY_RUN,
    AllCreated,
    EndedCounts,
    NewTask,
    NewWorkflow,
    QueueCounts,
    RecordStream,
    RunId,
    Submitted,
    WorkerRegistration,
    WorkerStore,
    grants_of,
)
from django_workers.stores.zombies import (
    UNREACHABLE,
    Refused,
    end_each,
    log_refused,
    zombie_ends,
)
from django_workers.workflows import persistence
from django_workers.workflows.machine import WORKFLOW_ENDS
from django_workers.workflows.records import WorkflowInfo, info_of, state_columns

#: The columns a TaskInfo is built from, read with .values() (no model instances).
COLUMNS = tuple(record_fields())
#: The columns of a workflow row, read with .values().
WORKFLOW_COLUMNS = sql.WORKFLOW_COLUMNS
#: Records deleted per transaction by retention cleanup on SQLite, whose only write
#: lock every claim waits for.
SQLITE_DELETE_CHUNK = 100
#: Seconds SQLite's write lock is left free after each of those transactions. A writer
#: that found the lock taken retries at most 25 ms apart for its first 100 ms (SQLite's
#: busy handler), so a pause longer than that lets any waiting claim in.
SQLITE_DELETE_PAUSE = 0.03

#: One lock per SQLite database file in this process, taken around each write.
_SQLITE_WRITERS: dict[str, threading.RLock] = {}
# A forked child starts with fresh locks: one its parent's thread held at the fork
# would never be released there.
os.register_at_fork(after_in_child=_SQLITE_WRITERS.clear)


def _one_writer[Method: Callable[..., Any]](method: Method) -> Method:
    """Run a store method that writes as this process's only SQLite writer of the moment.

    SQLite has one write lock, and a thread that finds it taken sleeps in the busy
    handler (up to 100 ms between tries) rather than queueing: with a claim loop and
    an end writer taking it back to back, a third thread (the heartbeat) could lose
    every try for seconds and the worker would stop, its lease not renewed. Threads of
    one process therefore take turns on a lock of their own first.
    """

    @functools.wraps(method)
    def one_writer(self: DatabaseWorkerStore, *args: Any, **kwargs: Any) -> Any:
        with self._writing():
            return method(self, *args, **kwargs)

    return one_writer  # type: ignore[return-value]


def _in_autocommit(connection: BaseDatabaseWrapper) -> bool:
    """The connection commits each statement: in autocommit, outside any atomic block."""
    # get_autocommit() connects first if need be.
    return not connection.in_atomic_block and bool(connection.get_autocommit())


def _claimed(found: list[dict[str, Any]]) -> list[TaskInfo]:
    """Claimed records with their watchers under ``grants``, as snapshots in claim order."""
    if len(found) > 1:
        found.sort(key=rows.claim_order)
    return [rows.info_of(r, r.pop("grants")) for r in found]


def _newest_page(found: Sequence[dict[str, Any]], offset: int, limit: int) -> list[dict[str, Any]]:
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
) -> list[WorkflowInfo]:
    """``sql.read_workflows``'s workflows as snapshots."""
    found = sql.read_workflows(connection, filters, offset, limit, any_of)
    return [info_of(row, {r["id"]: rows.node_record(r) for r in records}) for row, records in found]


class DatabaseWorkerStore(WorkerStore):
    """Task records in the site's database, shared by every process that reaches it."""

    durable = True

    def __init__(self, using: str | None = None, **policy: Any) -> None:
        super().__init__(**policy)
        self._using = using

    @property
    def using(self) -> str:
        """The database alias this store reads and writes."""
        return self._using or workers_settings.DATABASE

    @property
    def vendor(self) -> str:
        return connections[self.using].vendor

    def _records(self) -> Any:
        return TaskRecord.objects.using(self.using)

    def _watchers(self) -> Any:
        return TaskWatcher.objects.using(self.using)

    def _atomic(self) -> Any:
        return transaction.atomic(using=self.using)

    def _writing(self) -> Any:
        """This process's SQLite writer lock, or nothing to wait for (see ``_one_writer``)."""
        connection = connections[self.using]
        # Inside a transaction this thread may hold SQLite's own lock already: waiting
        # for a thread that waits for that lock would stall both until the busy timeout.
        if connection.vendor != "sqlite" or connection.in_atomic_block:
            return nullcontext()
        name = str(connection.settings_dict["NAME"])
        return _SQLITE_WRITERS.get(name) or _SQLITE_WRITERS.setdefault(name, threading.RLock())

    def _slots(self) -> Any:
        return HeldSlot.objects.using(self.using)

    def _workers(self) -> Any:
        return WorkerProcess.objects.using(self.using)

    def _flows(self) -> Any:
        return WorkflowRecord.objects.using(self.using)

    # -- submitting --

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

    def _lock_row(self, task_id: str) -> dict[str, Any] | None:
        return (
            self._records()
            .select_for_update()
            .filter(pk=task_id)
            .values("status", "run_id", "workflow")
            .first()
        )

    def _grants(self, task_id: str) -> list[str]:
        # In grant order, like the memory store: without ORDER BY the plan decides.
        grants = self._watchers().filter(task_id=task_id).order_by("pk")
        return list(grants.values_list("user_id", flat=True))

    def _resubmit(self, new: NewTask, caller: str | None, row: dict[str, Any]) -> Submitted:
        rows.refuse_node_key(new.id, row["workflow"])
        grants = self._grants(new.id)
        joining = not rows.watches(new.id, caller, grants)
        if joining:
            rows.authorize_join(new.id, caller, grants, self.watch_authorizer)  # type: ignore[arg-type]
        if row["status"] in LIVE_STATUSES:
            if joining:
                self.add_watcher(new.id, caller)  # type: ignore[arg-type]
            return Submitted(new.id, row["run_id"], created=False)
        self.replace_task(new)
        return Submitted(new.id, new.run_id, created=True, replaced_run_id=row["run_id"])

    def _insert(self, news: Sequence[NewTask]) -> None:
        sql.insert_records(connections[self.using], news)
        self._grant(news)

    def _grant(self, news: Sequence[NewTask]) -> None:
        grants = [TaskWatcher(task_id=n.id, user_id=u) for n in news for u in grants_of(n)]
        if grants:
            self._watchers().bulk_create(grants)

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

    # -- reading --

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
        # A user's own tasks and the ones it watches are read apart, each newest first
        # along its own index, then merged: one query with "owner = u OR watched" walks
        # the whole table newest first until it has found a page.
        end = offset + limit
        owned = qs.filter(owner=user_id).newest_first().values(*COLUMNS)[:end]
        watched = qs.filter(watcher_rows__user_id=user_id).newest_first().values(*COLUMNS)[:end]
        return self._infos(_newest_page([*owned, *watched], offset, limit))

    def _infos(self, found: list[dict[str, Any]]) -> list[TaskInfo]:
        grants: dict[str, list[str]] = {}
        if found:
            pairs = self._watchers().filter(task_id__in=[r["id"] for r in found]).order_by("pk")
            for task_id, user_id in pairs.values_list("task_id", "user_id"):
                grants.setdefault(task_id, []).append(user_id)
        return [rows.info_of(row, grants.get(row["id"], ())) for row in found]

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
            # A user sees the workflows it owns, as ``visible_to`` says.
            return _workflow_infos_sql(
                connection,
                {} if user_id is None else {"owner": user_id},
                offset,
                limit,
                [] if state is None else state_columns(state),
            )
        qs = self._flows().visible_to(user_id)
        if state is not None:
            qs = qs.in_state(state)
        return self._workflow_infos(
            list(qs.newest_first().values(*WORKFLOW_COLUMNS)[offset : offset + limit])
        )

    def _workflow_infos(self, found: list[dict[str, Any]]) -> list[WorkflowInfo]:
        if not found:
            return []
        records = self._records().filter(workflow__in=[row["id"] for row in found])
        nodes = {r["id"]: rows.node_record(r) for r in records.values(*sql.NODE_COLUMNS)}
        return [info_of(row, nodes) for row in found]

    # -- state changes --

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

    def _fenced(self, task_id: str, run_id: RunId) -> Any:
        qs = self._records().filter(pk=task_id)
        return qs if run_id is ANY_RUN else qs.filter(run_id=run_id)

    # -- the runtime's questions --

    def claim(
        self,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        queue_limits: Mapping[str, int] | None = None,
    ) -> list[TaskInfo]:
        if limit <= 0:
            return []
        limits = served_limits(queues, queue_limits) if queue_limits else None
        connection = connections[self.using]
        if not limits and connection.vendor == "postgresql":
            # The wake-up's path: one statement, no writer lock (SQLite's alone).
            found = sql.claim_postgres(
                connection, worker_id, queues, limit, now, autocommit=_in_autocommit(connection)
            )
            return _claimed(found)
        return self._claim_other(worker_id, queues, limit, now, queue_limits, limits or {})

    @_one_writer
    def _claim_other(
        self,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        queue_limits: Mapping[str, int] | None,
        limits: dict[str, int],
    ) -> list[TaskInfo]:
        """``claim`` on SQLite and MariaDB, and of queues with limits (the writer lock held)."""
        if not sql.any_ready(connections[self.using], queues, now):
            # A plain read first: an idle poll takes no lock and writes nothing (and on
            # SQLite does not take its one write lock).
            return []
        if self.vendor == "sqlite" and not limits:
            with self._atomic():
                found = sql.claim_sqlite(connections[self.using], worker_id, queues, limit, now)
            return _claimed(found)
        if self.vendor == "postgresql" and self._autocommit():
            claimed_rows = sql.claim_limited_postgres(
                connections[self.using], (worker_id, queues, limit, now), limits
            )
            if claimed_rows is not None:
                return _claimed(claimed_rows)
        self._make_queue_locks(limits)
        with self._atomic():
            free = self._lock_limited_queues(queues, queue_limits or {})
            # Stamped after the queue locks: a sequential queue's next run starts after
            # the previous one's end was written.
            now = max(now, clock.now())
            ready = self._records().ready(list(queues) if queues else None, now)
            full = [name for name, slots in free.items() if slots <= 0]
            if full:
                ready = ready.exclude(queue__in=full)
            if connections[self.using].features.has_select_for_update_skip_locked:
                ready = ready.select_for_update(skip_locked=True)
            ids = _within_limits(list(ready.values_list("id", "queue")[:limit]), free)
            if not ids:
                return []
            self._records().filter(pk__in=ids, status=TaskStatus.PENDING).update(
                status=TaskStatus.RUNNING,
                worker_id=worker_id,
                # Never before the record's creation (submitted after our clock read); a
                # retry keeps its first start, which its timeout counts from.
                started_at=Coalesce(
                    F("started_at"), Greatest(Value(now, DateTimeField()), F("created_at"))
                ),
                attempts=F("attempts") + 1,
            )
            # The ids were PENDING under this transaction's locks, so RUNNING for us now
            # means claimed by this statement.
            found = self._records().filter(
                pk__in=ids, status=TaskStatus.RUNNING, worker_id=worker_id
            )
            claimed = list(found.values(*COLUMNS))
        claimed.sort(key=rows.claim_order)
        return self._infos(claimed)

    def _make_queue_locks(self, limits: Mapping[str, int]) -> None:
        """Create the lock rows of limited queues that have none, before the claim's transaction.

        Outside it (in autocommit) where it can be: on MariaDB and MySQL, claimers that
        insert the same missing rows inside their transactions each keep a shared lock
        on the duplicate and then all ask for the exclusive one, a deadlock.
        """
        locks = QueueLock.objects.using(self.using)
        if limits and locks.filter(name__in=list(limits)).count() < len(limits):
            locks.bulk_create([QueueLock(name=q) for q in sorted(limits)], ignore_conflicts=True)

    def _lock_limited_queues(
        self, queues: Sequence[str] | None, queue_limits: Mapping[str, int]
    ) -> dict[str, int]:
        """Lock the rows of the limited queues served and return their free slots."""
        limited = sorted(q for q in queue_limits if not queues or q in queues)
        if not limited:
            return {}
        locks = QueueLock.objects.using(self.using)
        # Locked in name order, so two claimers never wait on each other in a cycle.
        list(locks.select_for_update().filter(name__in=limited).order_by("name"))
        running = (
            self._records()
            .filter(status=TaskStatus.RUNNING, queue__in=limited)
            .order_by()
            .values_list("queue", flat=True)
        )
        # One statement, so a cancel committing between two counts cannot hide a run:
        # a function whose record ended still holds its slot until it returns.
        held = self._slots().filter(queue__in=limited).order_by().values_list("queue", flat=True)
        free = {q: queue_limits[q] for q in limited}
        for q in running.union(held, all=True).order_by():
            free[q] -= 1
        return free

    @_one_writer
    def end_tasks(self, ends: Sequence[TaskEnd]) -> list[bool]:
        if not ends:
            return []
        flows = persistence.workflows_of(ends)
        if flows:
            return self._end_in_workflows(ends, flows)
        if self._postgres_runs(ends):
            # One statement per group of distinct tasks: alone, it is atomic by itself.
            alone = self._one_statement_of_runs(ends)
        else:
            # A lone end that touches no slot is one conditional UPDATE: atomic by itself.
            alone = (
                len(ends) == 1 and not ends[0].holds_slot and ends[0].kind not in lifecycle.RETURNED
            )
        with nullcontext() if alone else self._atomic():
            won = self._write_ends(ends)
        self._release_slots([e for e, ok in zip(ends, won, strict=True) if not ok])
        return won

    @_one_writer
    def end_and_claim(
        self,
        ends: Sequence[TaskEnd],
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        queue_limits: Mapping[str, int] | None = None,
    ) -> tuple[list[bool], list[TaskInfo]]:
        limits = served_limits(queues, queue_limits)
        if limit > 0 and self._claims_with_ends(ends, limits):
            claim = (worker_id, queues, limit, now)
            flows = persistence.workflows_of(ends)
            # Workflow nodes: the claim joins the second round trip, before its COMMIT.
            written = (
                self._end_in_two_round_trips(ends, flows, claim)
                if flows
                else self._finish_and_claim(ends, claim, limits)
            )
            if written is not None:
                won, claimed = written
                return won, _claimed(claimed)
        if limit > 0 and self._one_transaction(ends):
            # One commit for both; a failure stores neither, and the caller retries
            # the ends alone.
            with self._atomic():
                won = self.end_tasks(ends)
                return won, self.claim(worker_id, queues, limit, now, queue_limits)
        return super().end_and_claim(ends, worker_id, queues, limit, now, queue_limits)

    def _finish_and_claim(
        self, ends: Sequence[TaskEnd], claim: sql.ClaimArgs, limits: Mapping[str, int]
    ) -> tuple[list[bool], list[dict[str, Any]]] | None:
        """Plain runs' ends and the claim, in one round trip; None where it cannot be."""
        found = sql.finish_and_claim_postgres(connections[self.using], ends, claim, limits)
        if found is None:
            return None
        won = _won(ends, found[0])
        self._release_slots([e for e, ok in zip(ends, won, strict=True) if not ok])
        return won, found[1]

    def _one_transaction(self, ends: Sequence[TaskEnd]) -> bool:
        """Ends of plain tasks in autocommit: one transaction with the claim.

        Workflow nodes' ends wake other workers when their transaction commits, so
        they keep their own.
        """
        if persistence.workflows_of(ends):
            return False
        return not connections[self.using].in_atomic_block

    def _claims_with_ends(self, ends: Sequence[TaskEnd], limits: Mapping[str, int]) -> bool:
        """Runs' ends on PostgreSQL in autocommit; of workflow nodes, with no limited queue."""
        if limits and persistence.workflows_of(ends):
            return False
        return self._one_statement_of_runs(ends) and self._autocommit()

    def _autocommit(self) -> bool:
        return _in_autocommit(connections[self.using])

    def _postgres_runs(self, ends: Sequence[TaskEnd]) -> bool:
        return self.vendor == "postgresql" and all(e.kind is EndKind.RUN for e in ends)

    def _one_statement_of_runs(self, ends: Sequence[TaskEnd]) -> bool:
        """Runs' ends on PostgreSQL, each of another task: one ``finish_postgres`` statement."""
        return self._postgres_runs(ends) and len(_distinct_task_groups(ends)) == 1

    def _write_ends(self, ends: Sequence[TaskEnd]) -> list[bool]:
        """Apply each end's fenced write (runs' ends on PostgreSQL in one statement a group)."""
        if not self._postgres_runs(ends):
            return [self._end(end) for end in ends]
        # A task id twice in a group (a timeout's end and the run's own) goes to a later
        # statement, so each row is written at most once each.
        won: dict[int, bool] = {}
        for group in _distinct_task_groups(ends):
            winners = sql.finish_postgres(connections[self.using], [e for _, e in group])
            for n, end in group:
                won[n] = (end.task_id, end.run_id) in winners
        return [won[n] for n in range(len(ends))]

    def _end_in_workflows(self, ends: Sequence[TaskEnd], flows: list[str]) -> list[bool]:
        """Ends of workflow nodes: their workflows react in the same transaction."""
        written = self._end_in_two_round_trips(ends, flows)
        if written is not None:
            return written[0]
        book = _Book(self)
        with self._atomic():
            # Workflow rows before task rows: the order every writer here takes.
            won = self._lock_and_finish(book, ends, flows)
            if won is None:
                book.lock_workflows(flows)
                won = self._write_ends(ends)
            self._release_slots([e for e, ok in zip(ends, won, strict=True) if not ok])
            persistence.react(book, [e for e, ok in zip(ends, won, strict=True) if ok], clock.now())
        book.wake()
        return won

    def _end_in_two_round_trips(
        self,
        ends: Sequence[TaskEnd],
        flows: list[str],
        claim: sql.ClaimArgs | None = None,
    ) -> tuple[list[bool], list[dict[str, Any]]] | None:
        """Runs' ends on PostgreSQL whose workflows only promote (the usual case), in autocommit.

        One round trip opens the transaction, locks the workflow rows and writes the
        ends; the machine decides; a second writes each workflow with its promotions
        (and, with ``claim``, claims for the freed slots) and commits. An end that asks
        for more (a refusal, a stop, an undo) rolls back and goes the general way.
        Returns which ends won and the claimed rows; None where this does not apply.
        """
        if not (self._one_statement_of_runs(ends) and self._autocommit()):
            return None
        connection = connections[self.using]
        try:
            # Its BEGIN stays open on the server if a statement after it is refused.
            found = sql.lock_and_finish_postgres(
                connection, flows, WORKFLOW_COLUMNS, ends, begin=True
            )
            if found is None:
                return None
            saves = self._plain_reactions(ends, *found)
            if saves is None:
                sql.rollback_postgres(connection)
                return None
            claimed = sql.commit_workflows_postgres(connection, saves[1], claim)
        except BaseException:
            with contextlib.suppress(DatabaseError):
                sql.rollback_postgres(connection)
            raise
        won = saves[0]
        self._release_slots([e for e, ok in zip(ends, won, strict=True) if not ok])
        return won, claimed

    @staticmethod
    def _plain_reactions(
        ends: Sequence[TaskEnd], rows: list[dict[str, Any]], winners: set[tuple[str, str]]
    ) -> tuple[list[bool], list[tuple[str, dict[str, Any], list[str]]]] | None:
        """Which ends won, and each workflow's new columns and promotions; None if more."""
        won = _won(ends, winners)
        events = persistence.events_of([e for e, ok in zip(ends, won, strict=True) if ok])
        by_id = {row["id"]: row for row in rows}
        now = clock.now()
        saves = []
        for workflow_id in sorted(events):
            if workflow_id not in by_id:
                continue  # deleted, with its nodes, by retention
            outcome = persistence.plain_outcome(by_id[workflow_id], events[workflow_id], now)
            if outcome is None:
                return None
            saves.append((workflow_id, *outcome))
        return won, saves

    def _lock_and_finish(
        self, book: _Book, ends: Sequence[TaskEnd], flows: list[str]
    ) -> list[bool] | None:
        """Runs' ends of distinct tasks on PostgreSQL: the lock and the write in one round trip."""
        if not self._one_statement_of_runs(ends):
            return None
        found = sql.lock_and_finish_postgres(connections[self.using], flows, WORKFLOW_COLUMNS, ends)
        if found is None:
            return None
        rows, winners = found
        book.locked.update((row["id"], row) for row in rows)
        return _won(ends, winners)

    @_one_writer
    def cancel_workflow(
        self, workflow_id: str, undo: bool | None, drop_undo: bool = False
    ) -> bool | None:
        book = _Book(self)
        with self._atomic():
            cancelled = persistence.cancel(book, workflow_id, undo, clock.now(), drop_undo)
        book.wake()
        return cancelled

    @_one_writer
    def begin_runs(self, runs: Sequence[TaskInfo]) -> list[bool]:
        if not runs:
            return []
        found = _Book(self).node_records([info.id for info in runs])
        allowed, refusals = persistence.pre_run(runs, {r["id"]: r for r in found}, clock.now())
        if refusals:
            self.end_tasks(refusals)
        return allowed

    def _end(self, end: TaskEnd) -> bool:
        fenced = self._fenced(end.task_id, end.run_id).filter(status__in=list(end.from_statuses))
        if end.worker_id is not None:
            fenced = fenced.filter(worker_id=end.worker_id)
        fields = lifecycle.fields_of(end)
        if delta := lifecycle.attempts_delta(end):
            fields["attempts"] = F("attempts") + delta
        if end.holds_slot:
            # Locked until commit, so the status read here is the one the update sees.
            row = fenced.select_for_update().values("status", "queue", "worker_id").first()
            if row is None:
                return False
            if row["status"] == TaskStatus.RUNNING:
                self._slots().bulk_create(
                    [
                        HeldSlot(
                            run_id=end.run_id,
                            task_id=end.task_id,
                            queue=row["queue"],
                            worker_id=row["worker_id"],
                            held_since=clock.now(),
                        )
                    ],
                    ignore_conflicts=True,
                )
            fenced = fenced.filter(status=row["status"])
        return fenced.update(**fields) == 1

    def _release_slots(self, lost: Sequence[TaskEnd]) -> None:
        """A run's own end that lost its fence: its function returned, so its slot frees."""
        runs = [e.run_id for e in lost if e.kind in lifecycle.RETURNED]
        if runs:
            workers = {e.worker_id for e in lost if e.kind in lifecycle.RETURNED}
            self._slots().filter(run_id__in=runs, worker_id__in=workers).delete()

    def runs_claimed_by(self, worker_id: str) -> list[TaskInfo]:
        running = self._records().filter(status=TaskStatus.RUNNING, worker_id=worker_id)
        return self._infos(list(running.values(*COLUMNS)))

    def runs_to_stop(self, worker_id: str, runs: Mapping[str, str]) -> dict[str, CancelReason]:
        if not runs:
            return {}
        found = {
            r["id"]: r
            for r in self._records()
            .filter(pk__in=list(runs))
            .values("id", "run_id", "status", "cancel_reason", "worker_id")
        }
        return {
            task_id: reason
            for task_id, run_id in runs.items()
            if (reason := rows.stop_reason(found.get(task_id), worker_id, run_id))
        }

    @_one_writer
    def register_worker(self, worker: WorkerRegistration) -> None:
        self._workers().update_or_create(
            id=worker.id,
            defaults={
                "host": fit(worker.host, HOST_MAX_LENGTH),
                "pid": worker.pid,
                "queues": list(worker.queues),
                "concurrency": worker.concurrency,
                "started_at": worker.started_at,
                "heartbeat_at": worker.heartbeat_at,
                "wake_up": worker.wake_up[:200],
            },
        )

    @_one_writer
    def heartbeat(self, worker_id: str, now: datetime) -> bool:
        return self._workers().filter(pk=worker_id).update(heartbeat_at=now) == 1

    @_one_writer
    def remove_worker(self, worker_id: str) -> None:
        self._workers().filter(pk=worker_id).delete()

    @_one_writer
    def record_wake_up(self, worker_id: str, wake_up: str) -> bool:
        return self._workers().filter(pk=worker_id).update(wake_up=wake_up[:200]) == 1

    def list_workers(self) -> list[WorkerRegistration]:
        held = dict(
            self._slots()
            .values("worker_id")
            .annotate(n=Count("run_id"))
            .values_list("worker_id", "n")
        )
        return [
            WorkerRegistration(
                id=w.id,
                host=w.host,
                pid=w.pid,
                queues=tuple(w.queues),
                concurrency=w.concurrency,
                started_at=w.started_at,
                heartbeat_at=w.heartbeat_at,
                held_slots=held.get(w.id, 0),
                wake_up=w.wake_up,
            )
            for w in self._workers().order_by("started_at")
        ]

    @_one_writer
    def recover_zombies(
        self,
        *,
        now: datetime,
        stale_before: datetime | None,
        dead: Iterable[str] = (),
        refused: Refused = log_refused,
    ) -> list[TaskEnd]:
        try:
            with self._atomic():
                ends = self._zombie_ends(stale_before, dead, now, refused)
                won = self.end_tasks(ends)
        except UNREACHABLE:
            raise
        except Exception:
            # An end refused: all rolled back. Again, each end in its own transaction, so
            # one record that cannot be ended stops the recovery of no other.
            with self._atomic():
                ends = self._zombie_ends(stale_before, dead, now, lambda _id, _error: None)
            won = end_each(self.end_tasks, ends, refused)
        return [end for end, ok in zip(ends, won, strict=True) if ok]

    def _zombie_ends(
        self,
        stale_before: datetime | None,
        dead: Iterable[str],
        now: datetime,
        refused: Refused,
    ) -> list[TaskEnd]:
        """Forget dead workers and their slots; the ends of the runs they left RUNNING."""
        expired = Q(pk__in=list(dead))
        if stale_before is not None:
            expired |= Q(heartbeat_at__lt=stale_before)
        self._workers().filter(expired).delete()
        live = self._workers().values("id")
        self._slots().exclude(worker_id__in=live).delete()
        zombies = (
            self._records()
            .filter(status=TaskStatus.RUNNING)
            .exclude(worker_id__in=live)
            .values(
                "id",
                "run_id",
                "worker_id",
                "queue",
                "attempts",
                "options",
                "errors",
                "workflow",
                "node",
            )
        )
        return zombie_ends(zombies, now, refused)

    def database_now(self) -> datetime | None:
        connection = connections[self.using]
        query = _NOW_SQL.get(connection.vendor)
        if query is None:
            return None  # SQLite: the database's clock is this process's clock
        with connection.cursor() as cursor:
            cursor.execute(query)
            value = cursor.fetchone()[0]
        if timezone.is_naive(value):
            value = value.replace(tzinfo=UTC)
        return value

    def wake_file(self) -> str | None:
        connection = connections[self.using]
        if connection.vendor != "sqlite" or connection.is_in_memory_db():  # type: ignore[attr-defined]
            return None
        return str(connection.settings_dict["NAME"])

    def notify_enqueued(self, queues: Iterable[str]) -> None:
        wake_file = self.wake_file()
        if wake_file is not None:
            woken = list(queues)
            # After the commit: a worker woken earlier would not see the rows yet.
            transaction.on_commit(
                lambda: local_wake.send_enqueued(wake_file, woken), using=self.using
            )

    def listen_params(self) -> dict[str, Any] | None:
        alias = self.listen_alias()
        if alias is None:
            return None
        params = dict(connections[alias].get_connection_params())
        for django_only in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(django_only, None)
        return params

    def listen_alias(self) -> str | None:
        if self.vendor != "postgresql":
            return None
        chosen = workers_settings.LISTEN_DATABASE
        if chosen is False:
            return None
        # LISTEN_DATABASE pairs with DATABASE; a store on another alias listens there.
        if chosen is None or self.using != workers_settings.DATABASE:
            return self.using
        # Another engine cannot LISTEN (the system checks say so): poll.
        return chosen if connections[chosen].vendor == "postgresql" else None

    def send_notice(self, channel: str, payload: str) -> None:
        # Not this thread's connection: that may be the very connection that LISTENs,
        # and a session hears its own notices even where no other session would.
        connection = connections.create_connection(self.using)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, %s)", [channel, payload])
        finally:
            connection.close()

    def check_runtime_start(self) -> None:
        connection = connections[self.using]
        if not connection.in_atomic_block:
            return
        # The runtime's threads have connections of their own: they cannot see the
        # transaction's uncommitted rows, and wait on its locks (SQLite's one write lock,
        # PostgreSQL's row locks) for as long as it stays open, which is forever if the
        # thread that holds it waits for them.
        raise RuntimeInTransaction(
            "A WorkerRuntime cannot run while this thread is inside a transaction (such as "
            "a django.test.TestCase): its threads cannot see the uncommitted tasks "
            "and wait for the transaction's locks forever. In tests, run the tasks in the "
            "test's own thread with django_workers.testing (run_tasks(), the `workers` pytest "
            "fixture or WorkersTestMixin), or use TransactionTestCase / "
            "@pytest.mark.django_db(transaction=True)."
        )

    @contextlib.contextmanager
    def listening_connection(self) -> Iterator[Any]:
        alias = self.listen_alias() or self.using
        connection = connections[alias]
        connection.ensure_connection()
        try:
            yield connection.connection
        finally:
            # The claims made on notice used this thread's connection of the store's alias.
            self.reset_connection()
            if alias != self.using:
                with contextlib.suppress(DatabaseError):
                    connection.close()

    def reset_connection(self) -> None:
        with contextlib.suppress(DatabaseError):
            connections[self.using].close()

    def count_finished(self, status: TaskStatus, before: datetime) -> int:
        return int(self._records().finished_before(status, before).count())

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
        for row in held.values_list("queue", "n"):
            rows.queue_fields(found, row[0])["held_slots"] += row[1]
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

    def delete_finished(self, status: TaskStatus, before: datetime, batch: int) -> int:
        doomed = self._records().finished_before(status, before)
        # Oldest first, the order of the (status, finished_at) index: the read stops
        # after ``batch`` rows instead of sorting every record past its retention.
        ids = list(doomed.order_by("finished_at").values_list("id", flat=True)[:batch])
        if not ids:
            return 0
        # SQLite has one write lock: a long delete would hold every claim up, so the
        # batch goes in short transactions there, each followed by a pause.
        sqlite = self.vendor == "sqlite"
        step = SQLITE_DELETE_CHUNK if sqlite else len(ids)
        deleted = 0
        for start in range(0, len(ids), step):
            chunk = ids[start : start + step]
            # The writer lock per chunk too: the pause after it is for the others.
            with self._writing(), self._atomic():
                self._watchers().filter(task_id__in=chunk).delete()
                # The read's conditions again: a record re-run since then is not deleted.
                deleted += doomed.filter(pk__in=chunk)._raw_delete(self.using)
            if sqlite:
                time.sleep(SQLITE_DELETE_PAUSE)
        return deleted

    @_one_writer
    def delete_finished_workflows(self, before: datetime, batch: int) -> int:
        ended = self._flows().filter(state__in=list(WORKFLOW_ENDS), finished_at__lt=before)
        # In no order: the model's (newest first) would sort every ended workflow.
        ids = list(ended.order_by().values_list("id", flat=True)[:batch])
        if not ids:
            return 0
        with self._atomic():
            doomed = self._records().filter(workflow__in=ids)
            self._watchers().filter(task__in=doomed.values("id")).delete()
            doomed._raw_delete(self.using)
            return int(
                self._flows()
                .filter(pk__in=ids, state__in=list(WORKFLOW_ENDS))
                ._raw_delete(self.using)
            )

    def count_finished_workflows(self, before: datetime) -> int:
        ended = self._flows().filter(state__in=list(WORKFLOW_ENDS), finished_at__lt=before)
        return int(ended.count())


class _Book:
    """The row operations the workflow routine runs in this store's transaction."""

    def __init__(self, store: DatabaseWorkerStore) -> None:
        self.store = store
        # Rows locked in this transaction, as the workflow routine last left them.
        self.locked: dict[str, dict[str, Any]] = {}
        # Nodes to make PENDING, written with the next statement that needs them.
        self.promotions: list[str] = []
        # Whether this transaction queued work (promotions, undos) to wake workers for.
        self.queued = False

    def lock_workflows(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        missing = [i for i in ids if i not in self.locked]
        if missing:
            qs = self.store._flows().filter(pk__in=missing).order_by("pk")
            self.locked.update(
                (row["id"], row) for row in qs.select_for_update().values(*WORKFLOW_COLUMNS)
            )
        return {i: self.locked[i] for i in ids if i in self.locked}

    def save_workflow(self, workflow_id: str, fields: Mapping[str, Any]) -> None:
        if self.store.vendor == "postgresql":
            # The promotions this state made go in the same round trip.
            promote, self.promotions = self.promotions, []
            sql.save_workflow_postgres(connections[self.store.using], workflow_id, fields, promote)
            return
        self._promote_now()
        self.store._flows().filter(pk=workflow_id).update(**fields)

    def node_records(self, task_ids: Sequence[str]) -> list[dict[str, Any]]:
        self._promote_now()
        found = self.store._records().filter(pk__in=list(task_ids))
        return list(found.values(*persistence.RECORD_COLUMNS))

    def write_ends(self, ends: Sequence[TaskEnd]) -> list[bool]:
        self._promote_now()
        return [self.store._end(end) for end in ends]

    def promote(self, task_ids: Sequence[str]) -> None:
        # Written with the workflow's row (or before anything reads or ends a record).
        self.promotions += task_ids
        self.queued = True

    def _promote_now(self) -> None:
        if self.promotions:
            ids, self.promotions = self.promotions, []
            waiting = self.store._records().filter(pk__in=ids, status=TaskStatus.WAITING)
            waiting.update(status=TaskStatus.PENDING)

    def add_tasks(self, news: Sequence[NewTask]) -> None:
        self._promote_now()
        self.queued = True
        self.store._records().filter(pk__in=[new.id for new in news]).delete()
        self.store._insert(news)

    def wake(self) -> None:
        """After the commit: wake this machine's idle workers (SQLite) for what was queued."""
        if self.queued:
            self.store.notify_enqueued([local_wake.EVERY_QUEUE])

    def request_stop(self, task_ids: Sequence[str], reason: CancelReason) -> None:
        self._promote_now()
        # A node waiting for its retry (PENDING again) is refused when claimed.
        live = self.store._records().filter(
            pk__in=list(task_ids),
            status__in=[TaskStatus.RUNNING, TaskStatus.PENDING],
            cancel_reason=CancelReason.NONE,
        )
        live.update(cancel_reason=reason)


#: The database server's clock, per vendor (UTC); SQLite has none but this process's.
_NOW_SQL = {
    "postgresql": "SELECT statement_timestamp()",
    "mysql": "SELECT UTC_TIMESTAMP(6)",
}


class _Collision(Exception):
    """A bulk submit met an existing id; fall back to one submit per task."""


def _distinct(ids: list[str]) -> bool:
    return len(set(ids)) == len(ids)


def _won(ends: Sequence[TaskEnd], winners: set[tuple[str, str]]) -> list[bool]:
    """Which of ``ends`` won, from the (task id, run id) pairs a statement returned."""
    return [(end.task_id, end.run_id) in winners for end in ends]


def _distinct_task_groups(ends: Sequence[TaskEnd]) -> list[list[tuple[int, TaskEnd]]]:
    """Split ends so no group names a task twice (a timeout's end and the run's own)."""
    groups: list[list[tuple[int, TaskEnd]]] = []
    for n, end in enumerate(ends):
        for group in groups:
            if all(other.task_id != end.task_id for _, other in group):
                group.append((n, end))
                break
        else:
            groups.append([(n, end)])
    return groups


def _within_limits(candidates: list[tuple[str, str]], free: dict[str, int]) -> list[str]:
    """Keep candidates in order while their limited queue still has a free slot."""
    ids = []
    for task_id, queue in candidates:
        if queue in free:
            if free[queue] <= 0:
                continue
            free[queue] -= 1
        ids.append(task_id)
    return ids
