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

import contextlib
import functools
import json
import json.scanner
import operator
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, cast

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from django_workers.cancellation import CancelReason
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
from django_workers.references import JSON_SCALARS
from django_workers.stores.base import NewTask
from django_workers.stores.rows import FRESH_VALUES, row_of

JSON_COLUMNS = frozenset({"args", "kwargs", "options", "result", "error", "errors"})
DATETIME_COLUMNS = frozenset({"run_after", "created_at", "started_at", "finished_at"})
#: Below this many rows a plain INSERT beats setting up a COPY.
COPY_MIN_ROWS = 50
#: Rows per multi-row INSERT (keeps every vendor under its bound-parameter limit).
INSERT_CHUNK = 400

_FIELDS = [f.attname for f in TaskRecord._meta.concrete_fields]
# A concrete field is one with a column, so none of these is None.
_COLUMNS = [cast(str, f.column) for f in TaskRecord._meta.concrete_fields]
_dumps = json.dumps
_CLAIM_ORDER_SQL = ", ".join(
    f"{name[1:]} DESC" if name.startswith("-") else name for name in CLAIM_ORDER
)


def _q(connection: BaseDatabaseWrapper, name: str) -> str:
    return connection.ops.quote_name(name)


def _db_value(connection: BaseDatabaseWrapper, name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in JSON_COLUMNS:
        return json.dumps(value)
    if name in DATETIME_COLUMNS:
        return connection.ops.adapt_datetimefield_value(value)
    return value


def _copy_lines(news: Iterable[NewTask]) -> Iterator[str]:
    """Fresh records as lines of COPY's text format, their columns in ``_COPY_FIELDS`` order.

    Each line is the record's own values, then a text made once for the values the
    records of one shape share (``build_tasks`` gives them the same objects), then the
    values every fresh record holds: past the first record of a shape, a line is six
    values and a join, where psycopg's ``write_row`` converted all 25 columns a row.
    """
    shared: tuple[Any, ...] | None = None
    shared_text = ""
    second: datetime | None = None
    head = tail = ""
    for new in news:
        # Equal values make equal texts, so a tuple compare (identity first) decides.
        values = _shared_of(new)
        if values != shared:
            shared = values
            shared_text = "\t".join(map(_copy_text, values))
        args, kwargs = _arguments_text(new)
        # A batch's times are a microsecond apart: its second's text is made once, then
        # each line writes its microseconds (an aware isoformat() was a tenth of a line).
        created_at = new.created_at
        whole = created_at.replace(microsecond=0)
        if whole != second or whole.tzinfo is not second.tzinfo:
            second = whole
            text = whole.isoformat()
            head, tail = text[:19], text[19:]
        task_id = _cell(new.id)
        key = task_id if new.key is new.id else _cell(new.key)  # a global key is its id
        yield (
            f"{task_id}\t{key}\t{_cell(new.run_id)}\t"
            f"{head}.{created_at.microsecond:06d}{tail}\t"
            f"{args if args == '[]' else _cell(args)}\t"
            f"{kwargs if kwargs == '{}' else _cell(kwargs)}\t"
            f"{shared_text}\t{_COPY_FRESH_TEXT}\n"
        )


#: What COPY's text format escapes in a value: the backslash, the column and row ends.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _cell(text: str) -> str:
    """``text`` as a value of COPY's text format."""
    # A printable text holds no tab, newline or carriage return: most need nothing.
    if "\\" in text or not text.isprintable():
        return text.translate(_COPY_ESCAPES)
    return text


def _copy_text(value: Any) -> str:
    """A column value as COPY's text format reads it: JSON columns' values as JSON."""
    if value is None:
        return "\\N"
    if isinstance(value, list | dict):
        return _cell(_json_text(value, shared=True))
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        value = value.value
    return _cell(str(value))


@functools.cache
def _target(vendor: str, quote: Callable[[str], str]) -> tuple[str, str]:
    """The quoted table and column list of an insert (built once per database vendor)."""
    return quote(TaskRecord._meta.db_table), ", ".join(quote(c) for c in _COLUMNS)


@functools.cache
def _copy_statement(vendor: str, quote: Callable[[str], str]) -> str:
    """The COPY of fresh records, its columns in ``_COPY_FIELDS`` order (built once)."""
    table = _target(vendor, quote)[0]
    return f"COPY {table} ({', '.join(quote(c) for c in _COPY_COLUMNS)}) FROM STDIN"


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


#: Lines a COPY sends at once: the first few soon, so the server starts writing while
#: the rest are built, then more a message.
_COPY_FIRST_LINES, _COPY_LINES = 32, 128


def _write_lines(copy: Any, lines: Iterable[str]) -> None:
    """Send ``lines`` through a psycopg ``Copy``, a chunk of them a message."""
    chunk: list[str] = []
    size = _COPY_FIRST_LINES
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            copy.write("".join(chunk))
            chunk = []
            size = _COPY_LINES
    if chunk:
        copy.write("".join(chunk))


#: The columns every fresh record holds the same value in (``rows.row_of``), written as
#: literals by ``insert_if_new`` so a submit binds only the columns that vary.
_FRESH_LITERALS = {
    "progress": "0",
    "attempts": "0",
    "result": "NULL",
    "error": "NULL",
    "errors": "'[]'",
    "cancel_reason": f"'{CancelReason.NONE.value}'",
    "worker_id": "NULL",
    "started_at": "NULL",
    "finished_at": "NULL",
}
_BOUND = [f for f in _FIELDS if f not in _FRESH_LITERALS]
_BOUND_DATETIME = frozenset(f for f in _BOUND if f in DATETIME_COLUMNS)
#: A COPY names first the columns each record holds alone, then those the records of one
#: shape share, then those every fresh record holds alike (see ``_copy_lines``).
_OWN_FIELDS = ("id", "key", "run_id", "created_at", "args", "kwargs")
_SHARED_FIELDS = tuple(f for f in _BOUND if f not in _OWN_FIELDS)
_COPY_FIELDS = [*_OWN_FIELDS, *_SHARED_FIELDS, *_FRESH_LITERALS]
_COPY_COLUMNS = [_COLUMNS[_FIELDS.index(f)] for f in _COPY_FIELDS]
_shared_of = operator.attrgetter(*_SHARED_FIELDS)


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


#: The JSON text of the options dicts submits wrote last, by identity: the records built
#: from one ``TaskOptions`` share one dict, which nothing changes.
_SHARED_JSON: dict[int, tuple[Any, str]] = {}
_SHARED_JSON_MAX = 64


def _json_text(value: Any, shared: bool) -> str:
    """``json.dumps(value)``, without encoding an empty list or dict, or a shared dict again."""
    if value == []:
        return "[]"
    if value == {}:
        return "{}"
    if not shared:
        return _dumps(value)
    seen = _SHARED_JSON.get(id(value))
    if seen is not None and seen[0] is value:
        return seen[1]
    text = _dumps(value)
    if len(_SHARED_JSON) >= _SHARED_JSON_MAX:
        _SHARED_JSON.clear()
    # The entry holds the value, so its id cannot be reused while the entry exists.
    _SHARED_JSON[id(value)] = (value, text)
    return text


def _arguments_text(new: NewTask) -> tuple[str, str]:
    """A record's args and kwargs as JSON text: as its check encoded them, while still those."""
    known = new.arguments_json
    if known is not None and known[0] is new.args and known[1] is new.kwargs:
        return known[2], known[3]
    return _json_text(new.args, shared=False), _json_text(new.kwargs, shared=False)


#: The values every fresh record holds, as the end of each line ``_copy_lines`` makes.
_COPY_FRESH_TEXT = "\t".join(_copy_text(FRESH_VALUES[f]) for f in _FRESH_LITERALS)


#: A fresh record's ``_BOUND`` values, read off its ``NewTask`` (same names) in one call;
#: where its JSON and datetime values sit among them.
_bound_of = operator.attrgetter(*_BOUND)
_BOUND_ARGS, _BOUND_KWARGS, _BOUND_OPTIONS = (
    _BOUND.index(f) for f in ("args", "kwargs", "options")
)
_BOUND_DATETIME_AT = tuple(i for i, f in enumerate(_BOUND) if f in _BOUND_DATETIME)


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
_DATETIME_AT = [i for i, name in enumerate(_FIELDS) if name in DATETIME_COLUMNS]


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


def _records(
    fetched: Sequence[Sequence[Any]], convert: Callable[[Any], Any] | None = None
) -> list[dict[str, Any]]:
    """Rows of ``_RECORD_SELECT`` (or ``_RECORD_SELECT_SQLITE``) as records.

    Their watchers go under ``grants``; ``convert``, where the driver's datetimes
    are not what the ORM returns, converts each datetime column.
    """
    records = []
    for values in fetched:
        if convert is not None:
            values = list(values)
            for at in _DATETIME_AT:
                values[at] = convert(values[at])
        record = dict(zip(_FIELDS, values[:-1], strict=True))
        for name in JSON_COLUMNS:
            text = record[name]
            if isinstance(text, str):
                record[name] = _options_value(text) if name == "options" else _json_value(text)
        grants = values[-1]
        if isinstance(grants, str):
            grants = [user_id for _grant, user_id in sorted(json.loads(grants))]
        record["grants"] = list(grants)
        records.append(record)
    return records


#: The C scanner ``json.loads`` ends in, called directly. An idle worker's wake-up
#: decodes a claimed record's JSON columns: ``json.loads`` also runs three functions of
#: Python and a regular expression, which cost tens of microseconds when their code is no
#: longer in the processor's caches.
_scan_json = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))
#: Options texts decoded already (records of one site hold few distinct ones): flat dicts,
#: of which each record gets its own copy.
_OPTIONS_VALUES: dict[str, dict[str, Any]] = {}
_OPTIONS_VALUES_MAX = 256


def _json_value(text: str) -> Any:
    """``json.loads(text)`` for the JSON text a column holds."""
    # Most records hold empty args, kwargs and errors: no parser needed for those.
    if text == "[]":
        return []
    if text == "{}":
        return {}
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):  # space around it, or not JSON: json.loads says what it is
        return json.loads(text)
    return value


def _options_value(text: str) -> Any:
    """``_json_value`` for an options column: decoded once for each distinct text."""
    known = _OPTIONS_VALUES.get(text)
    if known is not None:
        return known.copy()
    value = _json_value(text)
    if isinstance(value, dict) and all(type(v) in JSON_SCALARS for v in value.values()):
        if len(_OPTIONS_VALUES) >= _OPTIONS_VALUES_MAX:
            _OPTIONS_VALUES.clear()
        _OPTIONS_VALUES[text] = value.copy()
    return value


def _sqlite_datetimes(connection: BaseDatabaseWrapper) -> Callable[[Any], Any] | None:
    """Django's conversion of SQLite's datetime columns, as the ORM makes it; None elsewhere.

    SQLite gives text (or, for a plain column, a naive datetime); with ``USE_TZ`` the ORM
    makes it aware in the connection's time zone.
    """
    if connection.vendor != "sqlite":
        return None
    convert = connection.ops.convert_datetimefield_value  # type: ignore[attr-defined]
    return lambda value: convert(value, None, connection)


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


#: What a workflow's status reads of each of its task records, in this order.
NODE_COLUMNS = ("id", "status", "result", "error", "cancel_reason")
#: The columns of a workflow row, by attribute name.
WORKFLOW_COLUMNS = tuple(f.attname for f in WorkflowRecord._meta.concrete_fields)
_WORKFLOW_JSON = frozenset(
    f.attname for f in WorkflowRecord._meta.concrete_fields if f.get_internal_type() == "JSONField"
)
_WORKFLOW_DATETIMES = frozenset(
    f.attname
    for f in WorkflowRecord._meta.concrete_fields
    if f.get_internal_type() == "DateTimeField"
)
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
    found = []
    for values in fetched:
        row = dict(zip(WORKFLOW_COLUMNS, values[:-1], strict=True))
        for name in _WORKFLOW_JSON:
            if isinstance(row[name], str):
                row[name] = json.loads(row[name])
        if convert is not None:  # SQLite's naive datetimes, made aware as the ORM makes them
            for name in _WORKFLOW_DATETIMES:
                row[name] = convert(row[name])
        records = values[-1]
        if isinstance(records, str):
            records = json.loads(records)
        found.append((row, [dict(zip(NODE_COLUMNS, r, strict=True)) for r in records or ()]))
    return found


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


@contextlib.contextmanager
def _statements_cursor(connection: BaseDatabaseWrapper) -> Iterator[Any | None]:
    """Django's cursor where one query may hold several statements (client-side binding).

    None where psycopg binds on the server, which takes one statement a query.
    """
    with kept_cursor(connection) as cursor:
        yield cursor if isinstance(cursor.cursor, psycopg_client_cursor()) else None


#: For each Django connection to PostgreSQL: the psycopg connection it held when its
#: kept cursor was made, that cursor, and the time zone it reads timestamps in;
#: ``_KEPT_BOUND`` likewise for ``bound=True``.
_Kept = tuple[Any, Any, Any]
_KEPT: weakref.WeakKeyDictionary[BaseDatabaseWrapper, _Kept] = weakref.WeakKeyDictionary()
_KEPT_BOUND: weakref.WeakKeyDictionary[BaseDatabaseWrapper, _Kept] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def kept_cursor(connection: BaseDatabaseWrapper, *, bound: bool = False) -> Iterator[Any]:
    """Django's cursor for the hot statements, on PostgreSQL one psycopg cursor kept open.

    A new psycopg cursor looks up the adapter of every parameter type again on its
    first statement: with Django's wrapper made and closed around it, a quarter of the
    client time of a single submit. The kept cursor is wrapped as Django wraps every
    cursor (the async and thread-sharing checks, query logging, execute wrappers,
    error translation) and replaced once Django has reconnected or its time zone
    setting changed (``USE_TZ``, the database's ``TIME_ZONE``). It keeps its last
    result (at most one claim's rows) until its next statement. Other databases
    get Django's usual cursor.

    ``bound``: for a query of one statement, a cursor that sends the values apart
    from the query text (psycopg's server-side binding) even where the connection
    binds on the client, Django's default. Neither side then quotes the values into,
    or parses them out of, the text: a single submit measured about 7% faster, with
    an eighth less of the client's CPU. Nothing is ever prepared on it, whatever the
    connection's ``prepare_threshold`` (``DATABASES[...]["OPTIONS"]``): behind a
    pooler in transaction mode a statement prepared on one server session is
    missing on the next, or its name is taken there by another client's.
    """
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    yield _wrapped(connection, _kept_psycopg_cursor(connection, bound))


def _wrapped(connection: BaseDatabaseWrapper, cursor: Any) -> Any:
    """A psycopg cursor in Django's wrapper, which logs its queries where they are logged."""
    if connection.queries_logged:
        return connection.make_debug_cursor(cursor)
    return connection.make_cursor(cursor)


def kept_fetch(
    connection: BaseDatabaseWrapper, statement: str, params: Sequence[Any], *, one: bool = False
) -> Any:
    """Run one statement on the kept cursor binding on the server (PostgreSQL); its rows.

    ``one``: its first row alone. A submit and a claim, the two statements an idle
    worker's wake-up waits on, come this way. While nothing watches Django's cursors
    (no execute wrapper, no query logging, and ``CursorWrapper.execute`` as Django
    defines it: a monitoring tool that replaces it sees every statement), the
    statement goes to the psycopg cursor with what Django's wrapper would do around
    it: refuse a broken transaction, translate the driver's errors. Django's
    async and thread checks were made when the kept cursor was looked up. The
    wrapper is made and thrown away for each statement, and after an idle wait,
    its code no longer in the processor's caches, each of its steps costs
    several microseconds of the wake-up.
    """
    cursor = _kept_psycopg_cursor(connection, True)
    if (
        connection.execute_wrappers
        or connection.queries_logged
        or CursorWrapper.execute is not _DJANGO_EXECUTE
    ):
        wrapped = _wrapped(connection, cursor)
        wrapped.execute(statement, params)
        return wrapped.fetchone() if one else wrapped.fetchall()
    if connection.needs_rollback:
        connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor.execute(statement, params)
        return cursor.fetchone() if one else cursor.fetchall()


#: Django's own ``CursorWrapper.execute``, to tell whether a tool has replaced it.
_DJANGO_EXECUTE = CursorWrapper.execute


def _kept_psycopg_cursor(connection: BaseDatabaseWrapper, bound: bool) -> Any:
    """The psycopg cursor ``kept_cursor`` wraps, after Django's connection checks."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    # Where Django binds on the server already, its kept cursor binds on the server too.
    server_side = bool(getattr(connection.features, "uses_server_side_binding", False))
    bound = bound and not server_side
    table = _KEPT_BOUND if bound else _KEPT
    kept = table.get(connection)
    zone = connection.timezone
    if kept is None or kept[0] is not raw or kept[1].closed or kept[2] != zone:
        with connection.wrap_database_errors:
            # Django's own server-binding cursor would prepare at the connection's threshold;
            # its client-binding one never prepares.
            if bound or server_side:
                cursor = _server_bound_cursor(connection)
            else:
                cursor = connection.create_cursor()
        kept = table[connection] = (raw, cursor, zone)
    connection.validate_thread_sharing()
    return kept[1]


def _server_bound_cursor(connection: BaseDatabaseWrapper) -> Any:
    """A psycopg cursor binding on the server, reading timestamps as Django's cursors do.

    Django makes a connection read timestamps in its time zone (aware in UTC, or
    naive without ``USE_TZ``) and, where a setting changed since it connected,
    registers that zone on each new cursor; this cursor gets the same.
    """
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    raw = connection.connection
    cursor = _unprepared_cursor_class()(raw)
    timestamptz = raw.adapters.types["timestamptz"].oid
    if connection.timezone != raw.adapters.get_loader(timestamptz, Format.TEXT).timezone:
        register_tzloader(connection.timezone, cursor)
    return cursor


@functools.cache
def _unprepared_cursor_class() -> type:
    """psycopg's server-binding cursor, made never to prepare a statement."""
    import psycopg

    class UnpreparedCursor(psycopg.Cursor[Any]):
        def execute(
            self,
            query: Any,
            params: Any = None,
            *,
            prepare: bool | None = None,
            binary: bool | None = None,
        ) -> Any:
            """Execute, unprepared whatever ``prepare`` or the connection's threshold say."""
            return super().execute(query, params, prepare=False, binary=binary)

    return UnpreparedCursor


@functools.cache
def psycopg_client_cursor() -> type:
    """psycopg's client-side binding cursor class (several statements per execute)."""
    import psycopg

    return psycopg.ClientCursor


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
