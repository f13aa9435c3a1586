"""``DatabaseWorkerStore``: the store contract on the Django ORM (the default store).

Every write is one conditional UPDATE checked by row count, or one short
transaction that locks what it decides on (``select_for_update``; SKIP LOCKED
when claiming). No transaction here ever spans user code.

One module per role of the contract: ``records`` (submitting, live state
writes), ``reads``, ``queue`` (claims and ends, written by the ``ends`` writer
chosen for the database, with the engine's answers to workflows written by
``reactions``), ``leases``
(workers and the zombie sweep), ``notices`` (wake-ups) and ``retention``; all
stand on ``access``.
"""

from __future__ import annotations

from django_workers.stores.database.access import COLUMNS, WORKFLOW_COLUMNS
from django_workers.stores.database.leases import DatabaseLeases
from django_workers.stores.database.notices import DatabaseNotices
from django_workers.stores.database.queue import DatabaseRunQueue
from django_workers.stores.database.reads import DatabaseReads
from django_workers.stores.database.records import DatabaseRecords
from django_workers.stores.database.retention import DatabaseRetention

__all__ = ["COLUMNS", "WORKFLOW_COLUMNS", "DatabaseWorkerStore"]


class DatabaseWorkerStore(
    DatabaseRecords,
    DatabaseReads,
    DatabaseRunQueue,
    DatabaseLeases,
    DatabaseNotices,
    DatabaseRetention,
):
    """Task records in the site's database, shared by every process that reaches it."""
