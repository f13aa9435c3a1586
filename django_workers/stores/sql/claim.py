"""Claiming ready task records: one round trip on PostgreSQL, two statements on SQLite.

The statements are in ``statements/``; what is built here is the part a call
varies: the condition on the queues (none, one, or an IN list of any length),
and which statements a limited claim sends before its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_workers.conf import served_fair
from django_workers.core import GrantedTaskRow
from django_workers.info import TaskStatus
from django_workers.stores.sql.cursor import _statements_cursor, kept_fetch
from django_workers.stores.sql.decode import _records, _sqlite_datetimes
from django_workers.stores.sql.queries import statement

#: The PostgreSQL function that claims for a worker from every queue or from one,
#: returning the rows it took; the server plans its statement once per session.
CLAIM_FUNCTION = "django_workers_claim"
#: The PostgreSQL function that claims through ``CLAIM_FUNCTION`` and returns the rows
#: as ``record_select`` selects them: the statement around the claim is planned once
#: per session instead of at every claim.
CLAIM_RECORDS_FUNCTION = "django_workers_claim_records"
#: A claim's worker id, queues (None: every queue), most rows, and the time it claims at.
ClaimArgs = tuple[str, Sequence[str] | None, int, datetime]

_PG = "postgresql"
_OWN_COMMIT = statement(_PG, "own_commit") + ";\n"


def any_ready(connection: BaseDatabaseWrapper, queues: Sequence[str] | None, now: datetime) -> bool:
    """Whether any task is ready to claim: the cheap read an idle poll makes."""
    ready = statement(connection.vendor, "any_ready", queue_filter=_in_queues(queues))
    params = [TaskStatus.PENDING.value, connection.ops.adapt_datetimefield_value(now)]
    with connection.cursor() as cursor:
        cursor.execute(ready, [*params, *(queues or ())])
        return cursor.fetchone() is not None


def pending_queues(connection: BaseDatabaseWrapper) -> list[str]:
    """The queues with a PENDING row, in name order: one index probe for each."""
    with connection.cursor() as cursor:
        cursor.execute(
            statement(connection.vendor, "pending_queues"), [TaskStatus.PENDING.value] * 2
        )
        return [name for (name,) in cursor.fetchall()]


def ready_in_queues(
    connection: BaseDatabaseWrapper, rooms: Sequence[tuple[str, int]], limit: int, now: datetime
) -> list[tuple[str, str]]:
    """The first ``limit`` ready rows (id, queue) in claim order, no queue past its room.

    ``rooms``: (queue, most rows) for each queue served; one read, each queue's rows
    from its own part of the index of PENDING rows. Nothing is locked.
    """
    if not rooms:
        return []
    vendor = connection.vendor
    parts = " UNION ALL ".join(
        statement(vendor, "ready_in_queue", n=str(n)) for n in range(len(rooms))
    )
    at = connection.ops.adapt_datetimefield_value(now)
    params: list[Any] = []
    for queue, room in rooms:
        params += [TaskStatus.PENDING.value, queue, at, room]
    with connection.cursor() as cursor:
        cursor.execute(statement(vendor, "ready_in_queues", queues=parts), [*params, limit])
        return [(task_id, queue) for task_id, queue in cursor.fetchall()]


def _in_queues(queues: Sequence[str] | None) -> str:
    """The condition on the queue as an IN list, one placeholder a queue."""
    return f" AND queue IN ({', '.join(['%s'] * len(queues))})" if queues else ""


def claim_postgres(
    connection: BaseDatabaseWrapper,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    now: datetime,
    *,
    autocommit: bool,
) -> list[GrantedTaskRow]:
    """Claim up to ``limit`` ready rows in one statement; rows come back as column dicts.

    In ``autocommit`` (no caller's transaction open) the claim is a transaction of
    its own, whose commit need not wait for the disk (``own_commit``). Inside a
    caller's transaction that setting would outlive the claim, so it is left as it
    is there. Every queue or one: a call of ``CLAIM_RECORDS_FUNCTION`` with its
    values bound on the server. For queues with concurrency limits, see
    ``claim_limited_postgres``.
    """
    sql, params = _claim(worker_id, queues, limit, now, own_commit=autocommit)
    if autocommit and queues and len(queues) > 1:
        with _statements_cursor(connection) as cursor:
            if cursor is not None:
                cursor.execute(_OWN_COMMIT + sql, params)
                cursor.nextset()
                return _records(cursor.fetchall())
    return _records(kept_fetch(connection, sql, params))


def claim_sqlite(
    connection: BaseDatabaseWrapper,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    now: datetime,
) -> list[GrantedTaskRow]:
    """Claim up to ``limit`` ready rows on SQLite: two statements, no ORM query built.

    One ``UPDATE ... RETURNING`` takes the ready rows in claim order and returns
    their ids (SQLite has one writer, so the rows it reads as PENDING are the rows it
    updates), then one read returns them with their watchers. For the caller's
    transaction: the store's write transaction, which holds SQLite's write lock.
    Building the ORM's three queries for each claim was most of a claim's time.
    """
    at = connection.ops.adapt_datetimefield_value(now)
    update = statement("sqlite", "claim", queue_filter=_in_queues(queues))
    params = [TaskStatus.RUNNING.value, worker_id, at, TaskStatus.PENDING.value, at]
    with connection.cursor() as cursor:
        cursor.execute(update, [*params, *(queues or ()), limit])
        ids = [task_id for (task_id,) in cursor.fetchall()]
        if not ids:
            return []
        read = statement("sqlite", "claimed_records", ids=", ".join(["%s"] * len(ids)))
        cursor.execute(read, ids)
        return _records(cursor.fetchall(), _sqlite_datetimes(connection))


def claim_limited_postgres(
    connection: BaseDatabaseWrapper,
    claim: ClaimArgs,
    limits: Mapping[str, int],
    *,
    cramped: bool = False,
) -> list[GrantedTaskRow] | None:
    """Claim with per-queue concurrency limits (``limits``: queue -> most RUNNING): one round trip.

    For a connection in autocommit; ``own_commit`` and the statements of
    ``_limited_claim_sql`` go as one simple query, one transaction. ``cramped``:
    a limited queue was seen with less room than the claim (``ready_within_limits``).
    Returns the claimed rows, or None where the cursor binds parameters on the
    server (one statement a call; nothing is sent).
    """
    sql, params, leading = _limited_claim_sql(*claim, limits, cramped=cramped)
    with _statements_cursor(connection) as cursor:
        if cursor is None:
            return None
        cursor.execute(_OWN_COMMIT + sql, params)
        for _ in range(leading + 1):
            cursor.nextset()
        return _records(cursor.fetchall())


def ready_within_limits(
    connection: BaseDatabaseWrapper,
    queues: Sequence[str] | None,
    limit: int,
    now: datetime,
    limits: Mapping[str, int],
) -> tuple[bool, bool]:
    """Whether a task is ready, and whether a limited queue has less room than ``limit``.

    One read on PostgreSQL, without the queues' locks: the second answer only picks
    the shape of the claim's statement (``_limited_claim_sql``'s ``cramped``); each
    shape takes no more than the room it counts under the locks. Where a limit is
    below ``limit`` the answer is known: the read is ``any_ready``'s.
    """
    if _cramped(limit, limits):
        return any_ready(connection, queues, now), True
    names = sorted(limits)
    ready = statement(_PG, "ready_within_limits", queue_filter=_in_queues(queues))
    params: list[Any] = [
        TaskStatus.PENDING.value,
        now,
        *(queues or ()),
        names,
        [limits[name] for name in names],
        TaskStatus.RUNNING.value,
        limit,
    ]
    with connection.cursor() as cursor:
        cursor.execute(ready, params)
        found, cramped = cursor.fetchone()
        return bool(found), bool(cramped)


def _cramped(limit: int, limits: Mapping[str, int]) -> bool:
    """Whether a limited queue has less room than the claim whatever runs: a limit below it."""
    return any(most < limit for most in limits.values())


def _limited_claim_sql(
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    now: datetime,
    limits: Mapping[str, int],
    *,
    cramped: bool = False,
) -> tuple[str, list[Any], int]:
    """A claim within queue limits: its statements, their parameters, the results before its own.

    First the limited queues' lock rows are made if missing and locked in name
    order, as every claimer of those queues takes them (the ORM's claim too).
    Then JIT and, for every queue or one, sorting are turned off for the
    transaction, and the claim runs as a statement of its own: ``limited_claim``,
    in claim order; or, where a limited queue may have less room than the claim
    (``cramped``, or a limit below the claim's), ``limited_claim_by_queue``, which
    reads each served queue's first rows instead of walking past a full queue's
    backlog.
    """
    names = sorted(limits)
    by_queue = cramped or _cramped(limit, limits)
    leading = [
        statement(_PG, "make_queue_locks"),
        statement(_PG, "lock_queues"),
        statement(_PG, "no_jit"),
        *_ordered_claim(queues),
    ]
    params: list[Any] = [
        names,
        names,
        TaskStatus.RUNNING.value,
        names,
        names,
        names,
        [limits[name] for name in names],
    ]
    if by_queue:
        claim = statement(_PG, "limited_claim_by_queue", served=_served(queues))
        params += [
            TaskStatus.PENDING.value,
            TaskStatus.PENDING.value,
            TaskStatus.RUNNING.value,
            worker_id,
            now,
            *_queue_params(queues),
            TaskStatus.PENDING.value,
            now,
            limit,
            limit,
        ]
    else:
        claim = statement(_PG, "limited_claim", queue_filter=_queue_filter(queues))
        params += [
            TaskStatus.RUNNING.value,
            worker_id,
            now,
            TaskStatus.PENDING.value,
            now,
            *_queue_params(queues),
            limit,
        ]
    return ";\n".join([*leading, claim]), params, len(leading)


def _claim_sql(
    worker_id: str, queues: Sequence[str] | None, limit: int, now: datetime
) -> tuple[str, list[Any]]:
    """The claim as one ``UPDATE``, which the planner sees whole (``claim``)."""
    sql = statement(_PG, "claim", queue_filter=_queue_filter(queues))
    params: list[Any] = [TaskStatus.RUNNING.value, worker_id, now, TaskStatus.PENDING.value, now]
    return sql, [*params, *_queue_params(queues), limit]


def _claim(
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    now: datetime,
    own_commit: bool = False,
) -> tuple[str, list[Any]]:
    """A claim of queues without limits: one statement, its rows as ``record_select``'s.

    Every queue or one: a call of ``CLAIM_RECORDS_FUNCTION``, which claims through
    ``CLAIM_FUNCTION`` (the rows in claim order from the PENDING index, sorting off)
    and, with ``own_commit``, lets the claim's own transaction commit without
    waiting for the disk. Several queues have no index in that order:
    ``_claim_sql``'s statement, which the planner sees whole (``own_commit`` is then
    the caller's to send). A worker that serves fair queues: a call of
    ``django_workers_claim_fair``, which takes their claimers' turns on their lock
    rows and the owners' turns in its one statement.
    """
    fair = served_fair(queues)
    if fair:
        names = sorted(fair)
        params = [worker_id, now, limit, list(queues) if queues else None, names]
        return statement(_PG, "claim_fair"), [*params, [fair[n] for n in names], own_commit]
    if queues and len(queues) > 1:
        return _claim_sql(worker_id, queues, limit, now)
    sql = statement(_PG, "claim_records")
    return sql, [worker_id, now, limit, queues[0] if queues else None, own_commit]


def _queue_filter(queues: Sequence[str] | None) -> str:
    """The claim's condition on the queue (one queue as an equality: its index is in order)."""
    if not queues:
        return ""
    return "AND queue = %s" if len(queues) == 1 else "AND queue = ANY(%s)"


def _queue_params(queues: Sequence[str] | None) -> list[Any]:
    """The parameter of ``_queue_filter``'s condition, if it has one."""
    if not queues:
        return []
    return [queues[0] if len(queues) == 1 else list(queues)]


def _served(queues: Sequence[str] | None) -> str:
    """The queues a limited claim serves, as a one-column table ``name``.

    Every queue: those with a PENDING row (the statement's ``pending_queues``); one
    or several: those given (``_queue_params``'s parameter).
    """
    if not queues:
        return "SELECT name FROM pending_queues WHERE name IS NOT NULL"
    return "SELECT %s::text AS name" if len(queues) == 1 else "SELECT unnest(%s::text[]) AS name"


def _ordered_claim(queues: Sequence[str] | None) -> list[str]:
    """What to send before a limited claim for its rows to come in index order.

    Sorting off (``ordered_claim``) for every queue or one; several queues have
    no index in claim order, so they are left to the planner. (``CLAIM_FUNCTION``
    turns sorting off for its own statement.)
    """
    if queues and len(queues) > 1:
        return []
    return [statement(_PG, "ordered_claim")]


#: Owners whose first tasks one statement of ``fair_candidates`` reads.
FAIR_BRANCHES = 100


def fair_candidates(
    connection: BaseDatabaseWrapper, queue: str, now: datetime, slots: int, per_owner: int | None
) -> tuple[list[dict[str, Any]], dict[str | None, int]]:
    """A fair queue's candidates (each owner's first ready tasks) and its RUNNING by owner.

    The statuses are in the statements' text, not parameters, so that a plan the
    server keeps for them still uses the partial indexes.

    Reads only: the caller holds the queue's lock row, and its UPDATE keeps the
    condition that each row is still PENDING. Each owner's rows come from an index
    range in claim order, at most ``slots`` (and no more than ``per_owner`` allows),
    whatever the owner has queued.
    """
    at = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(statement(connection.vendor, "fair_running"), [queue])
        running: dict[str | None, int] = {owner: n for owner, n in cursor.fetchall()}
        cursor.execute(statement(connection.vendor, "fair_owners"), [queue, queue])
        owners: list[str | None] = [None, *(owner for (owner,) in cursor.fetchall())]
        wanted = []
        for owner in owners:
            take = slots if per_owner is None else min(slots, per_owner - running.get(owner, 0))
            if take > 0:
                wanted.append((owner, take))
        found: list[dict[str, Any]] = []
        columns = ("id", "owner", "priority", "created_at", "queue")
        for first in range(0, len(wanted), FAIR_BRANCHES):
            branches, params = [], []
            for n, (owner, take) in enumerate(wanted[first : first + FAIR_BRANCHES]):
                where = "owner IS NULL" if owner is None else "owner = %s"
                branches.append(statement(connection.vendor, "fair_heads", owner=where, n=str(n)))
                params += [queue, *([] if owner is None else [owner]), at, take]
            cursor.execute("\nUNION ALL\n".join(branches), params)
            found += [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    # As the ORM reads them (aware), so they sort with the other queues' candidates.
    convert = getattr(connection.ops, "convert_datetimefield_value", None)
    if convert is not None:
        for row in found:
            row["created_at"] = convert(row["created_at"], None, connection)
    return found, running
