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
    CLAIM_FUNCTION as CLAIM_FUNCTION,
)
from django_workers.stores.sql.claim import (
    CLAIM_RECORDS_FUNCTION as CLAIM_RECORDS_FUNCTION,
)
from django_workers.stores.sql.claim import (
    ClaimArgs as ClaimArgs,
)
from django_workers.stores.sql.claim import (
    _claim as _claim,
)
from django_workers.stores.sql.claim import (
    _claim_sql as _claim_sql,
)
from django_workers.stores.sql.claim import (
    _limited_claim_sql as _limited_claim_sql,
)
from django_workers.stores.sql.claim import (
    any_ready as any_ready,
)
from django_workers.stores.sql.claim import (
    claim_limited_postgres as claim_limited_postgres,
)
from django_workers.stores.sql.claim import (
    claim_postgres as claim_postgres,
)
from django_workers.stores.sql.claim import (
    claim_sqlite as claim_sqlite,
)
from django_workers.stores.sql.columns import (
    _COLUMNS as _COLUMNS,
)
from django_workers.stores.sql.columns import (
    _FIELDS as _FIELDS,
)
from django_workers.stores.sql.columns import (
    DATETIME_COLUMNS as DATETIME_COLUMNS,
)
from django_workers.stores.sql.columns import (
    JSON_COLUMNS as JSON_COLUMNS,
)
from django_workers.stores.sql.columns import (
    _target as _target,
)
from django_workers.stores.sql.cursor import (
    kept_cursor as kept_cursor,
)
from django_workers.stores.sql.cursor import (
    kept_fetch as kept_fetch,
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
    _records as _records,
)
from django_workers.stores.sql.encode import (
    _FRESH_LITERALS as _FRESH_LITERALS,
)
from django_workers.stores.sql.ends import (
    END_FUNCTION as END_FUNCTION,
)
from django_workers.stores.sql.ends import (
    commit_workflows_postgres as commit_workflows_postgres,
)
from django_workers.stores.sql.ends import (
    finish_and_claim_postgres as finish_and_claim_postgres,
)
from django_workers.stores.sql.ends import (
    finish_postgres as finish_postgres,
)
from django_workers.stores.sql.ends import (
    lock_and_finish_postgres as lock_and_finish_postgres,
)
from django_workers.stores.sql.ends import (
    rollback_postgres as rollback_postgres,
)
from django_workers.stores.sql.ends import (
    save_workflow_postgres as save_workflow_postgres,
)
from django_workers.stores.sql.insert import (
    COPY_MIN_ROWS as COPY_MIN_ROWS,
)
from django_workers.stores.sql.insert import (
    INSERT_CHUNK as INSERT_CHUNK,
)
from django_workers.stores.sql.insert import (
    INSERT_FUNCTION as INSERT_FUNCTION,
)
from django_workers.stores.sql.insert import (
    copies as copies,
)
from django_workers.stores.sql.insert import (
    insert_if_new as insert_if_new,
)
from django_workers.stores.sql.insert import (
    insert_records as insert_records,
)
from django_workers.stores.sql.reads import (
    ONE_STATEMENT_READS as ONE_STATEMENT_READS,
)
from django_workers.stores.sql.reads import (
    list_records as list_records,
)
from django_workers.stores.sql.reads import (
    read_record as read_record,
)
from django_workers.stores.sql.reads import (
    read_workflows as read_workflows,
)
