"""Hand-written SQL for the hot paths of ``DatabaseWorkerStore``, by concern.

The ORM builds the same statements with far more Python per row. These are
the paths every task takes, and the reads of tasks, written once per vendor
where it pays:

- ``insert``: COPY on PostgreSQL for batches, one multi-row INSERT elsewhere,
  and a single submit through a function whose plan the server keeps;
- ``claim``: on PostgreSQL one round trip, in autocommit, through a function
  or one ``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``;
  on SQLite two statements, no ORM query built;
- ``ends``: runs' ends on PostgreSQL through one function call, each row
  still fenced on its run id, worker and RUNNING status; a workflow's new
  state and the promotions it makes in one statement;
- ``reads``: one task, a user's own and watched tasks, or workflows with what
  their status shows of their records, each in one statement.

The statements themselves are in ``statements/<vendor>.sql`` (``queries``
reads them); the tables, functions and triggers they use in ``schema.sql``.
Below them: ``cursor`` (the kept psycopg cursor), ``copy`` and ``encode``
(values as COPY text and as parameters), ``decode`` (rows as records).

Every statement keeps the precondition in its WHERE clause; nothing is
decided in Python between a read and a write.
"""

from __future__ import annotations

from django_workers.stores.sql.claim import (
    CLAIM_FUNCTION,
    CLAIM_RECORDS_FUNCTION,
    ClaimArgs,
    any_ready,
    claim_limited_postgres,
    claim_postgres,
    claim_sqlite,
    fair_candidates,
    pending_queues,
    ready_in_queues,
    ready_within_limits,
)
from django_workers.stores.sql.columns import DATETIME_COLUMNS, JSON_COLUMNS
from django_workers.stores.sql.cursor import kept_cursor, kept_fetch, psycopg_client_cursor
from django_workers.stores.sql.decode import NODE_COLUMNS, WORKFLOW_COLUMNS
from django_workers.stores.sql.ends import (
    END_FUNCTION,
    commit_workflows_postgres,
    finish_and_claim_postgres,
    finish_postgres,
    lock_and_finish_postgres,
    rollback_postgres,
    save_workflow_postgres,
)
from django_workers.stores.sql.insert import (
    COPY_MIN_ROWS,
    INSERT_CHUNK,
    INSERT_FUNCTION,
    copies,
    insert_if_new,
    insert_records,
)
from django_workers.stores.sql.reads import (
    ONE_STATEMENT_READS,
    list_records,
    read_record,
    read_workflows,
)

__all__ = [
    "CLAIM_FUNCTION",
    "CLAIM_RECORDS_FUNCTION",
    "COPY_MIN_ROWS",
    "DATETIME_COLUMNS",
    "END_FUNCTION",
    "INSERT_CHUNK",
    "INSERT_FUNCTION",
    "JSON_COLUMNS",
    "NODE_COLUMNS",
    "ONE_STATEMENT_READS",
    "WORKFLOW_COLUMNS",
    "ClaimArgs",
    "any_ready",
    "claim_limited_postgres",
    "claim_postgres",
    "claim_sqlite",
    "commit_workflows_postgres",
    "copies",
    "fair_candidates",
    "finish_and_claim_postgres",
    "finish_postgres",
    "insert_if_new",
    "insert_records",
    "kept_cursor",
    "kept_fetch",
    "list_records",
    "lock_and_finish_postgres",
    "pending_queues",
    "psycopg_client_cursor",
    "read_record",
    "read_workflows",
    "ready_in_queues",
    "ready_within_limits",
    "rollback_postgres",
    "save_workflow_postgres",
]
