"""Hand-written SQL for the hot paths of ``DatabaseWorkerStore``.

The ORM builds the same statements with far more Python per row. These are
the paths every task takes, and the reads of tasks, written once per vendor
where it pays:

- inserting records: COPY on PostgreSQL for batches, one multi-row INSERT
  elsewhere;
- claiming on PostgreSQL: one ``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP
  LOCKED) RETURNING`` in autocommit, so a claim is a single round trip;
- ending runs on PostgreSQL: one ``UPDATE ... FROM (VALUES ...)`` per group,
  each row still fenced on its run id, worker and RUNNING status;
- a workflow's new state and the promotions it makes, on PostgreSQL in one
  statement;
- reading tasks on PostgreSQL and SQLite: one task, or a user's own and
  watched tasks, with their watchers in one statement, where the ORM took two
  or three queries and most of the time building them and converting their
  rows; workflows likewise, each with what its status shows of its task
  records.

Every statement keeps the precondition in its WHERE clause; nothing is
decided in Python between a read and a write.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_workers.info import TaskStatus
from django_workers.lifecycle import TaskEnd, fields_of
from django_workers.models import (
    CLAIM_ORDER,
    HeldSlot,
    QueueLock,
    TaskRecord,
    TaskWatcher,
    WorkflowRecord,
)
from django_workers.stores.base import NewTask
from django_workers.stores.rows import row_of
from django_workers.stores.sql.columns import _COLUMNS, _FIELDS, JSON_COLUMNS, _target
from django_workers.stores.sql.copy import _copy_lines, _copy_statement, _write_lines
from django_workers.stores.sql.cursor import (
    _statements_cursor,
    kept_cursor,
    kept_fetch,
)
from django_workers.stores.sql.cursor import (
    psycopg_client_cursor as psycopg_client_cursor,
)
from django_workers.stores.sql.decode import (
    NODE_COLUMNS as NODE_COLUMNS,
)
from django_workers.stores.sql.decode import (
    WORKFLOW_COLUMNS as WORKFLOW_COLUMNS,
)
from django_workers.stores.sql.decode import (
    _records,
    _sqlite_datetimes,
    _workflows,
)
from django_workers.stores.sql.encode import (
    _BOUND,
    _BOUND_ARGS,
    _BOUND_DATETIME_AT,
    _BOUND_KWARGS,
    _BOUND_OPTIONS,
    _FRESH_LITERALS,
    _arguments_text,
    _bound_of,
    _db_value,
    _json_text,
)

#: Below this many rows a plain INSERT beats setting up a COPY.
COPY_MIN_ROWS = 50
#: Rows per multi-row INSERT (keeps every vendor under its bound-parameter limit).
INSERT_CHUNK = 400

_CLAIM_ORDER_SQL = ", ".join(
    f"{name[1:]} DESC" if name.startswith("-") else name for name in CLAIM_ORDER
)


def _q(connection: BaseDatabaseWrapper, name: str) -> str:
    return connection.ops.quote_name(name)


def copies(connection: BaseDatabaseWrapper, count: int) -> bool:
    """Whether ``insert_records`` writes ``count`` records with one COPY."""
    return connection.vendor == "postgresql" and count >= COPY_MIN_ROWS


def insert_records(connection: BaseDatabaseWrapper, news: Sequence[NewTask]) -> None:
    """Insert fresh task rows in as few statements as possible.

    A COPY reads ``news`` once, in order, while it streams; if reading raises, the
    COPY is abandoned and writes nothing.
    """
    table, columns = _target(connection.vendor, connection.ops.quote_name)
    with connection.cursor() as cursor:
        if copies(connection, len(news)):
            # Past Django's cursor wrapper, so its errors are mapped here (a taken id is
            # an IntegrityError, as from an INSERT).
            statement = _copy_statement(connection.vendor, connection.ops.quote_name)
            with connection.wrap_database_errors, cursor.cursor.copy(statement) as copy:
                _write_lines(copy, _copy_lines(news))
            return
        records = [row_of(new) for new in news]
        row_sql = "(" + ", ".join(["%s"] * len(_FIELDS)) + ")"
        for start in range(0, len(records), INSERT_CHUNK):
            chunk = records[start : start + INSERT_CHUNK]
            params = [_db_value(connection, f, r[f]) for r in chunk for f in _FIELDS]
            values = ", ".join([row_sql] * len(chunk))
            cursor.execute(f"INSERT INTO {table} ({columns}) VALUES {values}", params)


#: The PostgreSQL function (migration 0009) that inserts one fresh record, taking the
#: ``_BOUND`` columns in order: the server plans its INSERT once per session instead of
#: on every submit.
INSERT_FUNCTION = "django_workers_insert_task"


@functools.cache
def _insert_if_new_sql(vendor: str, quote: Callable[[str], str]) -> str:
    if vendor == "postgresql":
        return f"SELECT {INSERT_FUNCTION}({', '.join(['%s'] * len(_BOUND))})"
    table, columns = _target(vendor, quote)
    values = ", ".join(_FRESH_LITERALS.get(f, "%s") for f in _FIELDS)
    return f"INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT (id) DO NOTHING"


def insert_if_new(connection: BaseDatabaseWrapper, new: NewTask) -> bool:
    """Insert one fresh task row unless its id is taken; True if it was inserted.

    One statement that never raises on the id (``ON CONFLICT DO NOTHING``, PostgreSQL
    and SQLite), so inside a transaction it needs no savepoint to survive a taken id.
    The columns that are the same in every fresh record are literals in the statement;
    on PostgreSQL it calls ``INSERT_FUNCTION``, whose plan the server keeps, with its
    values bound on the server (see ``kept_cursor``). The args and kwargs go as the
    JSON text the submission's check made of them.
    """
    params = list(_bound_of(new))
    params[_BOUND_ARGS], params[_BOUND_KWARGS] = _arguments_text(new)
    if new.options is not None:
        params[_BOUND_OPTIONS] = _json_text(new.options, shared=True)
    for at in _BOUND_DATETIME_AT:
        if params[at] is not None:
            params[at] = connection.ops.adapt_datetimefield_value(params[at])
    statement = _insert_if_new_sql(connection.vendor, connection.ops.quote_name)
    if connection.vendor == "postgresql":
        return bool(kept_fetch(connection, statement, params, one=True)[0])
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return bool(cursor.rowcount == 1)


def any_ready(connection: BaseDatabaseWrapper, queues: Sequence[str] | None, now: datetime) -> bool:
    """Whether any task is ready to claim: the cheap read an idle poll makes.

    On PostgreSQL in claim order: without it the planner, expecting one row in ten
    to be pending, scanned the table from its oldest rows for the first pending
    one, 15 ms with 100,000 rows; the pending index in claim order finds it in
    0.2 ms.
    """
    table = _q(connection, TaskRecord._meta.db_table)
    ready, params = _ready(connection, queues, now)
    order = f"ORDER BY {_CLAIM_ORDER_SQL} " if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} WHERE {ready} {order}LIMIT 1", params)
        return cursor.fetchone() is not None


def _ready(
    connection: BaseDatabaseWrapper, queues: Sequence[str] | None, now: datetime
) -> tuple[str, list[Any]]:
    """The condition of a ready row (pending, due, in ``queues``), and its parameters."""
    queue_filter = f" AND queue IN ({', '.join(['%s'] * len(queues))})" if queues else ""
    at = connection.ops.adapt_datetimefield_value(now)
    sql = f"status = %s AND (run_after IS NULL OR run_after <= %s){queue_filter}"
    return sql, [TaskStatus.PENDING.value, at, *(queues or ())]


def claim_postgres(
    connection: BaseDatabaseWrapper,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    now: datetime,
    *,
    autocommit: bool,
) -> list[dict[str, Any]]:
    """Claim up to ``limit`` ready rows in one statement; rows come back as column dicts.

    In ``autocommit`` (no caller's transaction open) the claim is a transaction of
    its own, whose commit need not wait for the disk (``_OWN_COMMIT``). Inside a
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
) -> list[dict[str, Any]]:
    """Claim up to ``limit`` ready rows on SQLite: two statements, no ORM query built.

    One ``UPDATE ... RETURNING`` takes the ready rows in claim order and returns
    their ids (SQLite has one writer, so the rows it reads as PENDING are the rows it
    updates), then one read returns them with their watchers. For the caller's
    transaction: the store's write transaction, which holds SQLite's write lock.
    Building the ORM's three queries for each claim was most of a claim's time.
    """
    table = TaskRecord._meta.db_table
    at = connection.ops.adapt_datetimefield_value(now)
    ready, ready_params = _ready(connection, queues, now)
    update = f"""
        UPDATE {table}
        SET status = %s, worker_id = %s, started_at = COALESCE(started_at, MAX(%s, created_at)),
            attempts = attempts + 1
        WHERE id IN (
            SELECT id FROM {table} WHERE {ready} ORDER BY {_CLAIM_ORDER_SQL} LIMIT %s
        )
        RETURNING id
    """
    params = [TaskStatus.RUNNING.value, worker_id, at, *ready_params, limit]
    with connection.cursor() as cursor:
        cursor.execute(update, params)
        ids = [task_id for (task_id,) in cursor.fetchall()]
        if not ids:
            return []
        cursor.execute(
            f"SELECT {_RECORD_SELECT_SQLITE} FROM {table} t "
            f"WHERE t.id IN ({', '.join(['%s'] * len(ids))})",
            ids,
        )
        return _records(cursor.fetchall(), _sqlite_datetimes(connection))


#: Sent first in a claim that is a transaction of its own: its commit does not wait for
#: the WAL flush, about a sixth of the time an idle worker takes to start a task.
#: A claim is no end: should PostgreSQL crash before its WAL writer flushed it (within
#: a fraction of a second), the record is back to PENDING under the same run id, and
#: the runtime that runs it keeps running it (``rows.stop_reason``) or takes the claim
#: again as its own. Every write that ends a run, the finisher's claim included, stays
#: in a transaction that waits for the disk.
_OWN_COMMIT = "SELECT set_config('synchronous_commit', 'off', true);\n"

#: A claim's worker id, queues (None: every queue), most rows, and the time it claims at.
ClaimArgs = tuple[str, Sequence[str] | None, int, datetime]


def claim_limited_postgres(
    connection: BaseDatabaseWrapper, claim: ClaimArgs, limits: Mapping[str, int]
) -> list[dict[str, Any]] | None:
    """Claim with per-queue concurrency limits (``limits``: queue -> most RUNNING): one round trip.

    For a connection in autocommit; ``_OWN_COMMIT`` and the statements of
    ``_limited_claim_sql`` go as one simple query, one transaction. Returns the
    claimed rows, or None where the cursor binds parameters on the server (one
    statement a call; nothing is sent).
    """
    sql, params, leading = _limited_claim_sql(*claim, limits)
    with _statements_cursor(connection) as cursor:
        if cursor is None:
            return None
        cursor.execute(_OWN_COMMIT + sql, params)
        for _ in range(leading + 1):
            cursor.nextset()
        return _records(cursor.fetchall())


def _limited_claim_sql(
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    now: datetime,
    limits: Mapping[str, int],
) -> tuple[str, list[Any], int]:
    """A claim within queue limits: its statements, their parameters, the results before its own.

    First the limited queues' lock rows are made if missing and locked in name
    order, as every claimer of those queues takes them (the ORM's claim too).
    Then the claim, a statement of its own: PostgreSQL takes a new snapshot for
    each statement, so the claim sees the runs of every claimer that held the
    locks before it and counts them. Of each limited queue it takes no more rows
    than its limit less its RUNNING records and held slots (a function whose
    record was ended from outside still holds its slot); a full queue is left
    out of the rows it looks at. Its start time is ``now`` plus the time the
    statements waited for the locks, so a sequential queue's next run starts
    after the previous run's end was written.
    """
    table = TaskRecord._meta.db_table
    names = sorted(limits)
    order = ", ".join(f"c.{column}" for column in _CLAIM_ORDER_SQL.split(", "))
    locks = QueueLock._meta.db_table
    sql = f"""
        INSERT INTO {locks} (name) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING;
        SELECT name FROM {locks} WHERE name = ANY(%s) ORDER BY name FOR UPDATE;
        {_NO_JIT}{_ordered_claim(queues)}WITH busy AS (
            SELECT queue FROM {table} WHERE status = %s AND queue = ANY(%s)
            UNION ALL
            SELECT queue FROM {HeldSlot._meta.db_table} WHERE queue = ANY(%s)
        ), free AS (
            SELECT l.name, l.slots - (SELECT count(*) FROM busy b WHERE b.queue = l.name) AS slots
            FROM unnest(%s::text[], %s::integer[]) AS l(name, slots)
        )
        UPDATE {table} AS t
        SET status = %s, worker_id = %s,
            started_at = COALESCE(t.started_at, GREATEST(
                %s::timestamptz + (clock_timestamp() - statement_timestamp()), t.created_at
            )),
            attempts = t.attempts + 1
        FROM (
            SELECT c.id, c.queue,
                row_number() OVER (PARTITION BY c.queue ORDER BY {order}) AS place
            FROM (
                SELECT id, queue, priority, created_at FROM {table}
                WHERE status = %s AND (run_after IS NULL OR run_after <= %s) {_queue_filter(queues)}
                    AND queue <> ALL(ARRAY(SELECT name FROM free WHERE slots <= 0))
                ORDER BY {_CLAIM_ORDER_SQL}
                LIMIT %s
                FOR UPDATE SKIP LOCKED
            ) AS c
        ) AS ready
        LEFT JOIN free ON free.name = ready.queue
        WHERE t.id = ready.id AND (free.name IS NULL OR ready.place <= free.slots)
        {_CLAIM_RETURNING}
    """
    params: list[Any] = [
        names,
        names,
        TaskStatus.RUNNING.value,
        names,
        names,
        names,
        [limits[name] for name in names],
        TaskStatus.RUNNING.value,
        worker_id,
        now,
        TaskStatus.PENDING.value,
        now,
        *_queue_params(queues),
        limit,
    ]
    return sql, params, 4 if _ordered_claim(queues) else 3


#: Sent before a limited claim, for its transaction. Its window function needs a sort;
#: with ``_ordered_claim``'s setting that sort's cost is enormous, which put the plan
#: over ``jit_above_cost``: 360 ms of JIT compilation for a claim that ran in 0.3 ms.
_NO_JIT = "SELECT set_config('jit', 'off', true);\n"


def finish_and_claim_postgres(
    connection: BaseDatabaseWrapper,
    ends: Sequence[TaskEnd],
    claim: ClaimArgs,
    limits: Mapping[str, int] | None = None,
) -> tuple[set[tuple[str, str]], list[dict[str, Any]]] | None:
    """Write runs' ends (distinct tasks), then claim up to ``limit`` rows: one round trip.

    The statements go as one simple query, which PostgreSQL runs as one
    transaction with one commit: the ends are written before the claim, and
    neither is stored without the other. With ``limits`` (queue -> most RUNNING)
    the claim is ``_limited_claim_sql``'s, which sees the ends just written. For
    a connection in autocommit. Returns the winning (task id, run id) pairs and
    the claimed rows, or None where the cursor binds parameters on the server
    (one statement a call; nothing is sent).
    """
    finish, finish_params = _finish_sql(ends)
    if limits:
        claim_sql, claim_params, leading = _limited_claim_sql(*claim, limits)
    else:
        claim_sql, claim_params = _claim(*claim)
        leading = 0
    with _statements_cursor(connection) as cursor:
        if cursor is None:
            return None
        cursor.execute(f"{finish};\n{claim_sql}", [*finish_params, *claim_params])
        winners = {(task_id, run_id) for task_id, run_id in cursor.fetchall()}
        cursor.nextset()
        for _ in range(leading):
            cursor.nextset()
        return winners, _records(cursor.fetchall())


def _claim_sql(
    worker_id: str, queues: Sequence[str] | None, limit: int, now: datetime
) -> tuple[str, list[Any]]:
    table = TaskRecord._meta.db_table
    sql = f"""
        UPDATE {table} AS t
        SET status = %s, worker_id = %s,
            started_at = COALESCE(t.started_at, GREATEST(%s, t.created_at)),
            attempts = t.attempts + 1
        FROM (
            SELECT id FROM {table}
            WHERE status = %s AND (run_after IS NULL OR run_after <= %s) {_queue_filter(queues)}
            ORDER BY {_CLAIM_ORDER_SQL}
            LIMIT %s
            FOR UPDATE SKIP LOCKED
        ) AS ready
        WHERE t.id = ready.id
        {_CLAIM_RETURNING}
    """
    params: list[Any] = [TaskStatus.RUNNING.value, worker_id, now, TaskStatus.PENDING.value, now]
    return sql, [*params, *_queue_params(queues), limit]


#: The PostgreSQL function (migration 0011) that claims for a worker from every queue or
#: from one, returning the rows it took; the server plans its statement once per session.
CLAIM_FUNCTION = "django_workers_claim"
#: The PostgreSQL function (migration 0011) that writes runs' ends given as a JSON array
#: of objects (``_finish_sql``), fenced on each run id; it returns the (task id, run id)
#: of every record it ended.
END_FUNCTION = "django_workers_end_runs"
#: The PostgreSQL function (migration 0012) that claims through ``CLAIM_FUNCTION`` and
#: returns the rows as ``_RECORD_SELECT`` selects them: the statement around the claim
#: is planned once per session instead of at every claim.
CLAIM_RECORDS_FUNCTION = "django_workers_claim_records"


def _claim(
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    now: datetime,
    own_commit: bool = False,
) -> tuple[str, list[Any]]:
    """A claim of queues without limits: one statement, its rows as ``_RECORD_SELECT``'s.

    Every queue or one: a call of ``CLAIM_RECORDS_FUNCTION``, which claims through
    ``CLAIM_FUNCTION`` (the rows in claim order from the PENDING index, sorting off)
    and, with ``own_commit``, lets the claim's own transaction commit without
    waiting for the disk. Several queues have no index in that order:
    ``_claim_sql``'s statement, which the planner sees whole (``own_commit`` is then
    the caller's to send).
    """
    if queues and len(queues) > 1:
        return _claim_sql(worker_id, queues, limit, now)
    sql = f"SELECT * FROM {CLAIM_RECORDS_FUNCTION}(%s, %s, %s, %s, %s)"
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


_RECORD_COLUMNS_SQL = ", ".join(f"t.{c}" for c in _COLUMNS)
#: A record as the claims and the reads of tasks select it (the table as ``t``): its
#: columns, then its watchers (``_records`` decodes it).
#: The watchers are an ordered aggregate, not ``ARRAY(... ORDER BY w.id)``: a limited
#: claim turns sorting off for its transaction (``_ordered_claim``), and the planner then
#: read the watchers in id order through their primary key, filtering on the task, a
#: scan of the whole watchers table for each claimed row (48 ms a row at 258,000
#: watchers). An aggregate orders its own input: the task's index serves it.
_RECORD_SELECT = f"""{_RECORD_COLUMNS_SQL},
            (
                SELECT COALESCE(array_agg(w.user_id ORDER BY w.id), '{{}}')
                FROM {TaskWatcher._meta.db_table} w WHERE w.task_id = t.id
            )"""
#: What a claim returns of each row it took.
_CLAIM_RETURNING = f"RETURNING {_RECORD_SELECT}"
#: The vendors whose reads of tasks and workflows are one statement of this module's;
#: the others read through the ORM (two or three queries).
ONE_STATEMENT_READS = frozenset({"postgresql", "sqlite"})
#: The same select on SQLite, whose watchers come as a JSON array of [grant id, user id]
#: pairs: its aggregates keep no order before SQLite 3.44, so ``_records`` sorts them.
_RECORD_SELECT_SQLITE = f"""{_RECORD_COLUMNS_SQL},
            (
                SELECT json_group_array(json_array(w.id, w.user_id))
                FROM {TaskWatcher._meta.db_table} w WHERE w.task_id = t.id
            )"""


def _ordered_claim(queues: Sequence[str] | None) -> str:
    """The statement to send before a limited claim of every queue or of one, in its transaction.

    With sorting disabled for the rest of the transaction, the planner takes the
    rows from the index of PENDING rows (or of one queue's) in claim order and
    stops at the limit, whatever its statistics say. With statistics of an empty
    table (a new site, or one whose retention had deleted every task, until
    autoanalyze runs again after a burst) it read and sorted every pending row at
    each claim instead: 9 ms instead of 0.1 ms at 10,000 pending. Several queues
    have no index in that order, so they are left to the planner. (``CLAIM_FUNCTION``
    turns sorting off for its own statement.)
    """
    if queues and len(queues) > 1:
        return ""
    return "SELECT set_config('enable_sort', 'off', true);\n"


def _record_select(connection: BaseDatabaseWrapper) -> str:
    return _RECORD_SELECT_SQLITE if connection.vendor == "sqlite" else _RECORD_SELECT


def read_record(connection: BaseDatabaseWrapper, task_id: str) -> dict[str, Any] | None:
    """One record with its watchers under ``grants``, or None: one statement."""
    select = _record_select(connection)
    with kept_cursor(connection, bound=True) as cursor:
        cursor.execute(
            f"SELECT {select} FROM {TaskRecord._meta.db_table} t WHERE t.id = %s", [task_id]
        )
        found = _records(cursor.fetchall(), _sqlite_datetimes(connection))
    return found[0] if found else None


_WORKFLOW_COLUMNS_SQL = ", ".join(f"f.{f.column}" for f in WorkflowRecord._meta.concrete_fields)
#: A workflow row (the table as ``f``): its columns, then its task records' ``NODE_COLUMNS``
#: as one JSON array of arrays (``read_workflows`` decodes it).
_WORKFLOW_SELECT = f"""{_WORKFLOW_COLUMNS_SQL},
            (
                SELECT json_agg(json_build_array({", ".join(f"t.{n}" for n in NODE_COLUMNS)}))
                FROM {TaskRecord._meta.db_table} t WHERE t.workflow = f.id
            )"""
_SQLITE_NODE = ", ".join(f"json(t.{n})" if n in JSON_COLUMNS else f"t.{n}" for n in NODE_COLUMNS)
#: The same on SQLite, whose JSON columns are text (``json()`` nests them as JSON).
_WORKFLOW_SELECT_SQLITE = f"""{_WORKFLOW_COLUMNS_SQL},
            (
                SELECT json_group_array(json_array({_SQLITE_NODE}))
                FROM {TaskRecord._meta.db_table} t WHERE t.workflow = f.id
            )"""


def read_workflows(
    connection: BaseDatabaseWrapper,
    filters: Mapping[str, str],
    offset: int,
    limit: int,
    any_of: Sequence[Mapping[str, Any]] = (),
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Workflows newest first, each with what its status reads of its records: one statement.

    ``filters``: column -> value, each an equality (``id`` for one workflow).
    ``any_of``: if given, a row also matches one of these, each column -> value
    (an equality, or IS NULL for None).
    """
    convert = _sqlite_datetimes(connection)
    where = "".join(f" AND f.{column} = %s" for column in filters)
    values: list[Any] = list(filters.values())
    if any_of:
        alternatives = []
        for columns in any_of:
            tests = [f"f.{c} IS NULL" if v is None else f"f.{c} = %s" for c, v in columns.items()]
            values.extend(v for v in columns.values() if v is not None)
            alternatives.append(f"({' AND '.join(tests)})")
        where += f" AND ({' OR '.join(alternatives)})"
    sql = (
        f"SELECT {_WORKFLOW_SELECT if convert is None else _WORKFLOW_SELECT_SQLITE}"
        f" FROM {WorkflowRecord._meta.db_table} f WHERE TRUE{where}"
        " ORDER BY f.created_at DESC, f.id DESC LIMIT %s OFFSET %s"
    )
    with kept_cursor(connection, bound=True) as cursor:
        cursor.execute(sql, [*values, limit, offset])
        fetched = cursor.fetchall()
    return _workflows(fetched, convert)


def list_records(
    connection: BaseDatabaseWrapper,
    user_id: str | None,
    filters: Mapping[str, str],
    offset: int,
    limit: int,
) -> list[dict[str, Any]]:
    """The newest records, each with its watchers under ``grants``: one statement.

    ``filters``: column -> value, each an equality. For a user (``user_id``), the
    records it owns and the ones it watches are read apart, each newest first
    along its own index, up to ``offset + limit`` of each (one query with "owner
    = u OR watched" would walk the whole table newest first to fill a page); the
    caller merges them. Else every record, that page of them.
    """
    select = _record_select(connection)
    table = TaskRecord._meta.db_table
    where = "".join(f" AND t.{column} = %s" for column in filters)
    values = list(filters.values())
    order = "ORDER BY t.created_at DESC, t.id DESC"
    if user_id is None:
        sql = f"SELECT {select} FROM {table} t WHERE TRUE{where} {order} LIMIT %s OFFSET %s"
        params = [*values, limit, offset]
    else:
        owned = f"SELECT {select} FROM {table} t WHERE t.owner = %s{where} {order} LIMIT %s"
        watched = (
            f"SELECT {select} FROM {table} t JOIN {TaskWatcher._meta.db_table} v"
            f" ON v.task_id = t.id WHERE v.user_id = %s{where} {order} LIMIT %s"
        )
        # SQLite takes no parenthesised arm of a UNION; PostgreSQL 15 no unnamed subquery.
        if connection.vendor == "sqlite":
            sql = f"SELECT * FROM ({owned}) UNION ALL SELECT * FROM ({watched})"
        else:
            sql = f"({owned}) UNION ALL ({watched})"
        params = [user_id, *values, offset + limit, user_id, *values, offset + limit]
    with kept_cursor(connection, bound=True) as cursor:
        cursor.execute(sql, params)
        return _records(cursor.fetchall(), _sqlite_datetimes(connection))


def finish_postgres(
    connection: BaseDatabaseWrapper, ends: Sequence[TaskEnd]
) -> set[tuple[str, str]]:
    """Write runs' own ends in one statement; return the (task id, run id) pairs that won."""
    if not ends:
        return set()
    sql, params = _finish_sql(ends)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {(task_id, run_id) for task_id, run_id in cursor.fetchall()}


def _finish_sql(ends: Sequence[TaskEnd]) -> tuple[str, list[Any]]:
    # The ends go as one JSON array of objects, one per end: the statement's text is the
    # same for any number of ends, so psycopg parses it once per process and PostgreSQL
    # sees one shape; and one JSON text costs the client a fraction of what ten column
    # arrays did (psycopg quotes an array's elements one by one, in Python).
    rows = []
    for end in ends:
        fields = fields_of(end)
        rows.append(
            {
                "id": end.task_id,
                "run_id": end.run_id,
                "worker_id": end.worker_id,
                "status": str(fields["status"]),
                "finished_at": fields["finished_at"].isoformat(),
                "result": fields["result"],
                "error": fields["error"],
                "errors": fields.get("errors"),
                "cancel_reason": str(fields["cancel_reason"]),
                "progress": fields.get("progress"),
            }
        )
    return _FINISH_SQL, [json.dumps(rows, separators=(",", ":"))]


# A key whose value is JSON null gives SQL NULL: no result, no error, errors and progress
# as they were. The jsonb columns take their JSON values as they are.
_FINISH_SQL = f"SELECT ended_id, ended_run_id FROM {END_FUNCTION}(%s::json)"


def lock_and_finish_postgres(
    connection: BaseDatabaseWrapper,
    workflow_ids: Sequence[str],
    columns: Sequence[str],
    ends: Sequence[TaskEnd],
    *,
    begin: bool = False,
) -> tuple[list[dict[str, Any]], set[tuple[str, str]]] | None:
    """Lock workflow rows, then write runs' ends (distinct tasks), in one round trip.

    Two statements in one simple query, run in order: the workflow rows are locked
    before any task row, the order every writer takes. Inside the open transaction;
    or, with ``begin``, for a connection in autocommit, after a ``BEGIN`` of its own
    that stays open on the server until ``commit_workflows_postgres`` or
    ``rollback_postgres``. Returns the locked rows (``columns``) and the winning
    (task id, run id) pairs, or None where the cursor binds parameters on the server
    (one statement a call; nothing is sent then).
    """
    with _statements_cursor(connection) as cursor:
        if cursor is None:
            return None
        return _lock_and_finish(connection, cursor, workflow_ids, columns, ends, begin=begin)


def _lock_and_finish(
    connection: BaseDatabaseWrapper,
    cursor: Any,
    workflow_ids: Sequence[str],
    columns: Sequence[str],
    ends: Sequence[TaskEnd],
    *,
    begin: bool,
) -> tuple[list[dict[str, Any]], set[tuple[str, str]]]:
    names = ", ".join(_q(connection, c) for c in columns)
    lock = (
        f"SELECT {names} FROM {WorkflowRecord._meta.db_table} "
        "WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
    )
    finish, params = _finish_sql(ends)
    cursor.execute(f"{'BEGIN;' if begin else ''}{lock};\n{finish}", [list(workflow_ids), *params])
    if begin:
        cursor.nextset()  # BEGIN's empty result
    rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    cursor.nextset()
    winners = {(task_id, run_id) for task_id, run_id in cursor.fetchall()}
    for row in rows:
        if isinstance(row["nodes"], str):  # jsonb arrives as text through Django's loaders
            row["nodes"] = json.loads(row["nodes"])
    return rows, winners


def commit_workflows_postgres(
    connection: BaseDatabaseWrapper,
    saves: Sequence[tuple[str, Mapping[str, Any], Sequence[str]]],
    claim: ClaimArgs | None = None,
) -> list[dict[str, Any]]:
    """Write each workflow's columns with its promotions, then ``COMMIT``: one round trip.

    With ``claim`` (worker id, queues, limit, now), a claim runs after the writes and
    before the ``COMMIT``, and its rows are returned: it may take the nodes just
    promoted.
    """
    statements: list[str] = []
    params: list[Any] = []
    for workflow_id, fields, promote in saves:
        sql, values = _save_workflow_sql(connection, workflow_id, fields, promote)
        statements.append(sql)
        params += values
    if claim is not None:
        sql, values = _claim(*claim)
        statements.append(sql)
        params += values
    statements.append("COMMIT")
    with kept_cursor(connection) as cursor:
        cursor.execute(";\n".join(statements), params)
        if claim is None:
            return []
        for _ in saves:
            cursor.nextset()
        return _records(cursor.fetchall())


def rollback_postgres(connection: BaseDatabaseWrapper) -> None:
    """End an open transaction of ``open_lock_and_finish_postgres`` without its writes."""
    with connection.cursor() as cursor:
        cursor.execute("ROLLBACK")


def save_workflow_postgres(
    connection: BaseDatabaseWrapper,
    workflow_id: str,
    fields: Mapping[str, Any],
    promote: Sequence[str],
) -> None:
    """Write a workflow's columns and make its promoted nodes PENDING, in one round trip.

    The promotion keeps its precondition (the node is WAITING) in its WHERE clause.
    """
    sql, params = _save_workflow_sql(connection, workflow_id, fields, promote)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _save_workflow_sql(
    connection: BaseDatabaseWrapper,
    workflow_id: str,
    fields: Mapping[str, Any],
    promote: Sequence[str],
) -> tuple[str, list[Any]]:
    names = sorted(fields)
    assignments = ", ".join(
        f"{_q(connection, name)} = %s" + ("::jsonb" if name == "nodes" else "") for name in names
    )
    values = [json.dumps(fields[n]) if n == "nodes" else fields[n] for n in names]
    sql = f"""
        WITH promoted AS (
            UPDATE {TaskRecord._meta.db_table} SET status = %s
            WHERE id = ANY(%s) AND status = %s
        )
        UPDATE {WorkflowRecord._meta.db_table} SET {assignments} WHERE id = %s
    """
    params = [TaskStatus.PENDING.value, list(promote), TaskStatus.WAITING.value, *values]
    return sql, [*params, workflow_id]
