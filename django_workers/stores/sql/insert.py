"""Inserting fresh task records: COPY for batches on PostgreSQL, INSERTs elsewhere."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.backends.base.base import BaseDatabaseWrapper

from django_workers.stores.base import NewTask
from django_workers.stores.rows import row_of
from django_workers.stores.sql.columns import _FIELDS, _target
from django_workers.stores.sql.copy import _copy_lines, _copy_statement, _write_lines
from django_workers.stores.sql.cursor import kept_fetch
from django_workers.stores.sql.encode import (
    _BOUND_ARGS,
    _BOUND_DATETIME_AT,
    _BOUND_KWARGS,
    _BOUND_OPTIONS,
    _arguments_text,
    _bound_of,
    _db_value,
    _json_text,
)
from django_workers.stores.sql.queries import statement

#: Below this many rows a plain INSERT beats setting up a COPY.
COPY_MIN_ROWS = 50
#: Rows per multi-row INSERT (keeps every vendor under its bound-parameter limit).
INSERT_CHUNK = 400
#: The PostgreSQL function that inserts one fresh record (``statements/postgresql.sql``,
#: ``insert_task``): the server plans its INSERT once per session instead of on every submit.
INSERT_FUNCTION = "django_workers_insert_task"


def copies(connection: BaseDatabaseWrapper, count: int) -> bool:
    """Whether ``insert_records`` writes ``count`` records with one COPY."""
    return connection.vendor == "postgresql" and count >= COPY_MIN_ROWS


def insert_records(connection: BaseDatabaseWrapper, news: Sequence[NewTask]) -> None:
    """Insert fresh task rows in as few statements as possible.

    A COPY reads ``news`` once, in order, while it streams; if reading raises, the
    COPY is abandoned and writes nothing. Elsewhere a multi-row INSERT, built here:
    its number of rows varies, and every vendor quotes its columns its own way.
    """
    table, columns = _target(connection.vendor, connection.ops.quote_name)
    with connection.cursor() as cursor:
        if copies(connection, len(news)):
            # Past Django's cursor wrapper, so its errors are mapped here (a taken id is
            # an IntegrityError, as from an INSERT).
            copying = _copy_statement(connection.vendor, connection.ops.quote_name)
            with connection.wrap_database_errors, cursor.cursor.copy(copying) as copy:
                _write_lines(copy, _copy_lines(news))
            return
        records = [row_of(new) for new in news]
        row_sql = "(" + ", ".join(["%s"] * len(_FIELDS)) + ")"
        for start in range(0, len(records), INSERT_CHUNK):
            chunk = records[start : start + INSERT_CHUNK]
            params = [_db_value(connection, f, r[f]) for r in chunk for f in _FIELDS]
            values = ", ".join([row_sql] * len(chunk))
            cursor.execute(f"INSERT INTO {table} ({columns}) VALUES {values}", params)


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
    insert = statement(connection.vendor, "insert_task")
    if connection.vendor == "postgresql":
        return bool(kept_fetch(connection, insert, params, one=True)[0])
    with connection.cursor() as cursor:
        cursor.execute(insert, params)
        return bool(cursor.rowcount == 1)
