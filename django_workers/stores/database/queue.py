"""The run queue role of ``DatabaseWorkerStore``: claims, ends and workflows' reactions.

Every end goes through ``end_tasks`` (or ``end_and_claim``); how it is written on
this database is the store's ``EndWriter`` (``ends``), chosen once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Coalesce, Greatest

from django_workers import clock
from django_workers.cancellation import CancelReason
from django_workers.conf import served_fair, served_limits
from django_workers.engine import persistence
from django_workers.info import TaskInfo, TaskStatus
from django_workers.lifecycle import TaskEnd
from django_workers.models import QueueLock
from django_workers.stores import rows, sql
from django_workers.stores.database.access import (
    COLUMNS,
    DatabaseAccess,
    _claimed,
    _in_autocommit,
    _one_writer,
)
from django_workers.stores.database.ends import EndWriter, end_writer
from django_workers.stores.database.reactions import Reactions, node_records
from django_workers.stores.fairness import fair_pick, merged


class DatabaseRunQueue(DatabaseAccess):
    """Claims that lock what they take, and every end in its fenced write."""

    def __init__(self, using: str | None = None, **policy: Any) -> None:
        super().__init__(using, **policy)
        self._end_writers: dict[str, EndWriter] = {}

    def _ends(self) -> EndWriter:
        """How ends are written on this store's database: chosen once per alias, then kept."""
        alias = self.using
        writer = self._end_writers.get(alias)
        if writer is None:
            writer = self._end_writers.setdefault(alias, end_writer(self, alias))
        return writer

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
        fair = served_fair(queues)
        connection = connections[self.using]
        if not limits and connection.vendor == "postgresql":
            # The wake-up's path: one statement, no writer lock (SQLite's alone); with
            # fair queues, a function that takes their lock rows first.
            found = sql.claim_postgres(
                connection, worker_id, queues, limit, now, autocommit=_in_autocommit(connection)
            )
            return _claimed(found)
        return self._claim_other(worker_id, queues, limit, now, queue_limits, limits or {}, fair)

    @_one_writer
    def _claim_other(
        self,
        worker_id: str,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        queue_limits: Mapping[str, int] | None,
        limits: dict[str, int],
        fair: Mapping[str, int | None],
    ) -> list[TaskInfo]:
        """``claim`` on SQLite and MariaDB, and of limited or fair queues (the writer lock held)."""
        connection = connections[self.using]
        one_round_trip = self.vendor == "postgresql" and not fair and self._autocommit()
        # A plain read first: an idle poll takes no lock and writes nothing (and on
        # SQLite does not take its one write lock). Before PostgreSQL's limited claim
        # it also tells whether a limited queue has less room than the claim, which
        # picks the shape of the claim's statement.
        if one_round_trip:
            ready, cramped = sql.ready_within_limits(connection, queues, limit, now, limits)
        else:
            ready, cramped = sql.any_ready(connection, queues, now), False
        if not ready:
            return []
        if self.vendor == "sqlite" and not limits and not fair:
            with self._atomic():
                found = sql.claim_sqlite(connection, worker_id, queues, limit, now)
            return _claimed(found)
        if one_round_trip:
            claimed_rows = sql.claim_limited_postgres(
                connection, (worker_id, queues, limit, now), limits, cramped=cramped
            )
            if claimed_rows is not None:
                return _claimed(claimed_rows)
        self._make_queue_locks(sorted({*limits, *fair}))
        with self._atomic():
            free = self._lock_limited_queues(queues, queue_limits or {}, fair)
            # Stamped after the queue locks: a sequential queue's next run starts after
            # the previous one's end was written.
            now = max(now, clock.now())
            if fair:
                candidates = self._with_fair_queues(queues, limit, now, free, fair)
            elif any(slots < limit for slots in free.values()):
                candidates = self._ready_by_queue(queues, limit, now, free)
            else:
                pending = self._records().ready(list(queues) if queues else None, now)
                if connections[self.using].features.has_select_for_update_skip_locked:
                    pending = pending.select_for_update(skip_locked=True)
                candidates = list(pending.values_list("id", "queue")[:limit])
            ids = _within_limits(candidates, free)[:limit]
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
            running = self._records().filter(
                pk__in=ids, status=TaskStatus.RUNNING, worker_id=worker_id
            )
            claimed = list(running.values(*COLUMNS))
        claimed.sort(key=rows.claim_order)
        return self._infos(claimed)

    def _with_fair_queues(
        self,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        free: Mapping[str, int],
        fair: Mapping[str, int | None],
    ) -> list[tuple[str, str]]:
        """The other queues' first ready rows merged with each fair queue's, taken in turns.

        The other queues' rows are read as ``_ready_by_queue`` reads them (each queue
        from its own index range, no more than its room), so a fair queue's backlog
        is never read past.
        """
        connection = connections[self.using]
        ordinary = self._first_rows_by_queue(queues, limit, now, free, leave_out=fair)
        keys = self._records().filter(pk__in=[i for i, _ in ordinary])
        rows_of = {r["id"]: r for r in keys.values("id", "queue", "priority", "created_at")}
        picks = []
        for queue, per_owner in sorted(fair.items()):
            slots = min(limit, free.get(queue, limit))
            if slots <= 0:
                continue
            found, running = sql.fair_candidates(connection, queue, now, slots, per_owner)
            picks.append(fair_pick(found, running, slots, per_owner))
        chosen = merged([rows_of[i] for i, _ in ordinary if i in rows_of], picks)
        return [(row["id"], row["queue"]) for row in chosen]

    def _first_rows_by_queue(
        self,
        queues: Sequence[str] | None,
        limit: int,
        now: datetime,
        free: Mapping[str, int],
        leave_out: Collection[str] = (),
    ) -> list[tuple[str, str]]:
        """The first ``limit`` ready rows (id, queue) of the queues served but ``leave_out``,
        in claim order, each queue's no more than its room; nothing locked."""
        connection = connections[self.using]
        served = list(queues) if queues else sql.pending_queues(connection)
        rooms = [(q, min(limit, free.get(q, limit))) for q in served if q not in leave_out]
        return sql.ready_in_queues(connection, [(q, n) for q, n in rooms if n > 0], limit, now)

    def _ready_by_queue(
        self, queues: Sequence[str] | None, limit: int, now: datetime, free: Mapping[str, int]
    ) -> list[tuple[str, str]]:
        """The first ``limit`` ready rows in claim order, each queue's no more than its room.

        For a claim where a limited queue has less room than the claim (full, or
        nearly): read in claim order across queues, the rows of that queue would be
        read past one by one, its whole backlog. Each queue served gives instead its
        first rows from the index of PENDING rows by queue, then the claim keeps the
        first of them and locks those (skipping rows another claimer holds).
        """
        connection = connections[self.using]
        chosen = self._first_rows_by_queue(queues, limit, now, free)
        if chosen and connection.features.has_select_for_update_skip_locked:
            pending = self._records().filter(
                pk__in=[i for i, _ in chosen], status=TaskStatus.PENDING
            )
            locked = set(pending.select_for_update(skip_locked=True).values_list("id", flat=True))
            chosen = [(i, queue) for i, queue in chosen if i in locked]
        return chosen

    def _make_queue_locks(self, limits: Sequence[str]) -> None:
        """Create the lock rows of limited queues that have none, before the claim's transaction.

        Outside it (in autocommit) where it can be: on MariaDB and MySQL, claimers that
        insert the same missing rows inside their transactions each keep a shared lock
        on the duplicate and then all ask for the exclusive one, a deadlock.
        """
        locks = QueueLock.objects.using(self.using)
        if limits and locks.filter(name__in=list(limits)).count() < len(limits):
            locks.bulk_create([QueueLock(name=q) for q in sorted(limits)], ignore_conflicts=True)

    def _lock_limited_queues(
        self,
        queues: Sequence[str] | None,
        queue_limits: Mapping[str, int],
        fair: Mapping[str, int | None] | None = None,
    ) -> dict[str, int]:
        """Lock the rows of the limited and fair queues served; the limited ones' free slots.

        A fair queue's claimers take turns on its lock row, so each counts what the one
        before it claimed.
        """
        limited = sorted(q for q in queue_limits if not queues or q in queues)
        locked = sorted({*limited, *(fair or ())})
        if not locked:
            return {}
        locks = QueueLock.objects.using(self.using)
        # Locked in name order, so two claimers never wait on each other in a cycle.
        list(locks.select_for_update().filter(name__in=locked).order_by("name"))
        if not limited:
            return {}
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
        writer = self._ends()
        with nullcontext() if writer.alone(ends) else self._atomic():
            won = writer.write(ends)
        writer.release_slots([e for e, ok in zip(ends, won, strict=True) if not ok])
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
        # PostgreSQL's claim with the ends is a limited claim or one with fair queues,
        # not both: a worker that serves both claims through the ORM.
        if limit > 0 and not (limits and served_fair(queues)):
            written = self._ends().end_and_claim(ends, (worker_id, queues, limit, now), limits)
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

    def _one_transaction(self, ends: Sequence[TaskEnd]) -> bool:
        """Ends of plain tasks in autocommit: one transaction with the claim.

        Workflow nodes' ends wake other workers when their transaction commits, so
        they keep their own.
        """
        if persistence.workflows_of(ends):
            return False
        return not connections[self.using].in_atomic_block

    def _end_in_workflows(self, ends: Sequence[TaskEnd], flows: list[str]) -> list[bool]:
        """Ends of workflow nodes: their workflows react in the same transaction."""
        writer = self._ends()
        written = writer.in_two_round_trips(ends, flows)
        if written is not None:
            return written[0]
        reactions = Reactions(self, writer)
        with self._atomic():
            # Workflow rows before task rows: the order every writer here takes.
            found = writer.lock_and_finish(ends, flows)
            if found is None:
                rows_by_id = reactions.lock(flows)
                won = writer.write(ends)
            else:
                rows_by_id = {row["id"]: row for row in found[0]}
                won = found[1]
            writer.release_slots([e for e, ok in zip(ends, won, strict=True) if not ok])
            winners = [e for e, ok in zip(ends, won, strict=True) if ok]
            now = clock.now()
            reactions.write(lambda records: persistence.react(rows_by_id, winners, now, records))
        reactions.wake()
        return won

    @_one_writer
    def cancel_workflow(
        self,
        workflow_id: str,
        undo: bool | None,
        drop_undo: bool = False,
        reason: CancelReason = CancelReason.USER,
        now: datetime | None = None,
    ) -> bool | None:
        reactions = Reactions(self, self._ends())
        with self._atomic():
            at = now or clock.now()
            row = reactions.lock([workflow_id]).get(workflow_id)
            if row is None:
                return None
            answer = reactions.write(
                lambda records: persistence.cancel(row, undo, at, drop_undo, reason, records)
            )
            if answer is None:
                return False
        reactions.wake()
        return True

    @_one_writer
    def rerun_workflow(self, workflow_id: str, plan_hash: str | None) -> bool | None:
        reactions = Reactions(self, self._ends())
        with self._atomic():
            row = reactions.lock([workflow_id]).get(workflow_id)
            if row is None:
                return None
            writes = persistence.rerun(row, plan_hash, clock.now())
            reactions.write(lambda _records: writes)
        reactions.wake()
        return True

    def overdue_workflows(self, now: datetime, limit: int) -> list[str]:
        overdue = self._flows().overdue(now).order_by("deadline_at", "id")
        return list(overdue.values_list("id", flat=True)[:limit])

    @_one_writer
    def begin_runs(self, runs: Sequence[TaskInfo]) -> list[bool]:
        if not runs:
            return []
        found = node_records(self, [info.id for info in runs])
        allowed, refusals = persistence.pre_run(runs, {r["id"]: r for r in found}, clock.now())
        if refusals:
            self.end_tasks(refusals)
        return allowed

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
