"""Reading tasks and workflows in one statement on PostgreSQL and SQLite.

The ORM took two or three queries for a task with its watchers, and most of
the time building them and converting their rows. What is built here: the
optional equality filters a caller passes, which SQL has no placeholder for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_workers.core import GrantedTaskRow, NodeRow, WorkflowRow
from django_workers.stores.sql.cursor import kept_cursor
from django_workers.stores.sql.decode import _records, _sqlite_datetimes, _workflows
from django_workers.stores.sql.queries import statement

#: The vendors whose reads of tasks and workflows are one statement of this module's;
#: the others read through the ORM (two or three queries).
ONE_STATEMENT_READS = frozenset({"postgresql", "sqlite"})


def read_record(connection: BaseDatabaseWrapper, task_id: str) -> GrantedTaskRow | None:
    """One record with its watchers under ``grants``, or None: one statement."""
    with kept_cursor(connection, bound=True) as cursor:
        cursor.execute(statement(connection.vendor, "read_record"), [task_id])
        found = _records(cursor.fetchall(), _sqlite_datetimes(connection))
    return found[0] if found else None


def read_workflows(
    connection: BaseDatabaseWrapper,
    filters: Mapping[str, str],
    offset: int,
    limit: int,
    any_of: Sequence[Mapping[str, Any]] = (),
    user_id: str | None = None,
) -> list[tuple[WorkflowRow, list[NodeRow]]]:
    """Workflows newest first, each with what its status reads of its records: one statement.

    ``filters``: column -> value, each an equality (``id`` for one workflow).
    ``any_of``: if given, a row also matches one of these, each column -> value
    (an equality, or IS NULL for None). ``user_id``: only the workflows that user
    may see (``visibility.workflows``); None: every one.
    """
    where = "".join(f" AND f.{column} = %s" for column in filters)
    values: list[Any] = list(filters.values())
    if any_of:
        alternatives = []
        for columns in any_of:
            tests = [f"f.{c} IS NULL" if v is None else f"f.{c} = %s" for c, v in columns.items()]
            values.extend(v for v in columns.values() if v is not None)
            alternatives.append(f"({' AND '.join(tests)})")
        where += f" AND ({' OR '.join(alternatives)})"
    if user_id is not None:
        where += f" AND {statement(connection.vendor, 'visible_workflows')}"
        values.extend([user_id, user_id])
    sql = statement(connection.vendor, "read_workflows", filters=where)
    with kept_cursor(connection, bound=True) as cursor:
        cursor.execute(sql, [*values, limit, offset])
        fetched = cursor.fetchall()
    return _workflows(fetched, _sqlite_datetimes(connection))


def list_records(
    connection: BaseDatabaseWrapper,
    user_id: str | None,
    filters: Mapping[str, str],
    offset: int,
    limit: int,
) -> list[GrantedTaskRow]:
    """The newest records, each with its watchers under ``grants``: one statement.

    ``filters``: column -> value, each an equality. For a user (``user_id``), the
    records it owns and the ones it watches are read apart, each newest first
    along its own index, up to ``offset + limit`` of each (one query with "owner
    = u OR watched" would walk the whole table newest first to fill a page); the
    caller merges them. Else every record, that page of them.
    """
    where = "".join(f" AND t.{column} = %s" for column in filters)
    values = list(filters.values())
    if user_id is None:
        sql = statement(connection.vendor, "list_records", filters=where)
        params = [*values, limit, offset]
    else:
        sql = statement(connection.vendor, "list_users_records", filters=where)
        params = [user_id, *values, offset + limit, user_id, *values, offset + limit]
    with kept_cursor(connection, bound=True) as cursor:
        cursor.execute(sql, params)
        return _records(cursor.fetchall(), _sqlite_datetimes(connection))
