"""Ending runs and writing workflows on PostgreSQL, each in one round trip.

The ends go to one PL/pgSQL function (``schema.sql``) as one JSON array;
several statements go as one simple query where the cursor binds on the client.
What is built here: a workflow's assignments (the columns it changed) and the
lock of the columns the caller reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from django.db.backends.base.base import BaseDatabaseWrapper

from django_workers.core import GrantedTaskRow, WorkflowRow
from django_workers.info import TaskStatus
from django_workers.lifecycle import TaskEnd, fields_of
from django_workers.stores.sql.claim import ClaimArgs, _claim, _limited_claim_sql
from django_workers.stores.sql.cursor import _statements_cursor, kept_cursor
from django_workers.stores.sql.decode import _WORKFLOW_JSON, _records
from django_workers.stores.sql.queries import statement

#: The PostgreSQL function that writes runs' ends given as a JSON array of objects
#: (``_finish_sql``), fenced on each run id; it returns the (task id, run id) of every
#: record it ended.
END_FUNCTION = "django_workers_end_runs"

_PG = "postgresql"
_FINISH_SQL = statement(_PG, "end_runs")


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


def finish_and_claim_postgres(
    connection: BaseDatabaseWrapper,
    ends: Sequence[TaskEnd],
    claim: ClaimArgs,
    limits: Mapping[str, int] | None = None,
) -> tuple[set[tuple[str, str]], list[GrantedTaskRow]] | None:
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


def lock_and_finish_postgres(
    connection: BaseDatabaseWrapper,
    workflow_ids: Sequence[str],
    columns: Sequence[str],
    ends: Sequence[TaskEnd],
    *,
    begin: bool = False,
) -> tuple[list[WorkflowRow], set[tuple[str, str]]] | None:
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
) -> tuple[list[WorkflowRow], set[tuple[str, str]]]:
    lock = _lock_sql(connection, tuple(columns))
    finish, params = _finish_sql(ends)
    cursor.execute(f"{'BEGIN;' if begin else ''}{lock};\n{finish}", [list(workflow_ids), *params])
    if begin:
        cursor.nextset()  # BEGIN's empty result
    rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    cursor.nextset()
    winners = {(task_id, run_id) for task_id, run_id in cursor.fetchall()}
    for row in rows:
        for name in _WORKFLOW_JSON.intersection(row):
            if isinstance(row[name], str):  # jsonb arrives as text through Django's loaders
                row[name] = json.loads(row[name])
    # The locked rows' ``columns`` are WORKFLOW_COLUMNS, decoded: workflow rows.
    return cast(list[WorkflowRow], rows), winners


def commit_workflows_postgres(
    connection: BaseDatabaseWrapper,
    saves: Sequence[tuple[str, Mapping[str, Any], Sequence[str]]],
    claim: ClaimArgs | None = None,
) -> list[GrantedTaskRow]:
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
        f"{connection.ops.quote_name(name)} = %s" + ("::jsonb" if name == "nodes" else "")
        for name in names
    )
    values = [json.dumps(fields[n]) if n == "nodes" else fields[n] for n in names]
    sql = statement(_PG, "save_workflow", assignments=assignments)
    params = [TaskStatus.PENDING.value, list(promote), TaskStatus.WAITING.value, *values]
    return sql, [*params, workflow_id]


def _lock_sql(connection: BaseDatabaseWrapper, columns: tuple[str, ...]) -> str:
    """``lock_workflows`` reading ``columns`` (quoted: the caller names them)."""
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    return statement(_PG, "lock_workflows", columns=names)
