"""What every part of ``DatabaseWorkerStore`` stands on: its alias, querysets and writer lock.

The store is one class made of one mixin per role (``records``, ``reads``,
``queue``, ``leases``, ``notices``, ``retention``); each mixin builds on
``DatabaseAccess`` here, and on nothing of another role.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, cast

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

from django_workers.conf import workers_settings
from django_workers.core import GrantedTaskRow, TaskRow
from django_workers.info import TaskInfo
from django_workers.models import (
    HeldSlot,
    TaskRecord,
    TaskRecordQuerySet,
    TaskWatcher,
    WorkerProcess,
    WorkflowRecord,
    WorkflowRecordQuerySet,
    record_fields,
)
from django_workers.stores import rows, sql
from django_workers.stores.base import ANY_RUN, NewTask, RunId, WorkerStore, grants_of

#: The columns a TaskInfo is built from, read with .values() (no model instances).
COLUMNS = tuple(record_fields())
#: The columns of a workflow row, read with .values().
WORKFLOW_COLUMNS = sql.WORKFLOW_COLUMNS

#: One lock per SQLite database file in this process, taken around each write.
_SQLITE_WRITERS: dict[str, threading.RLock] = {}
# A forked child starts with fresh locks: one its parent's thread held at the fork
# would never be released there.
os.register_at_fork(after_in_child=_SQLITE_WRITERS.clear)


def _one_writer[Method: Callable[..., Any]](method: Method) -> Method:
    """Run a store method that writes as this process's only SQLite writer of the moment.

    SQLite has one write lock, and a thread that finds it taken sleeps in the busy
    handler (up to 100 ms between tries) rather than queueing: with a claim loop and
    an end writer taking it back to back, a third thread (the heartbeat) could lose
    every try for seconds and the worker would stop, its lease not renewed. Threads of
    one process therefore take turns on a lock of their own first.
    """

    @functools.wraps(method)
    def one_writer(self: DatabaseAccess, *args: Any, **kwargs: Any) -> Any:
        with self._writing():
            return method(self, *args, **kwargs)

    # The wrapper takes and returns what ``method`` does (a ParamSpec cannot say so of
    # methods that take **fields: their ``self`` could come by name).
    return one_writer  # type: ignore[return-value]


def _in_autocommit(connection: BaseDatabaseWrapper) -> bool:
    """The connection commits each statement: in autocommit, outside any atomic block."""
    # get_autocommit() connects first if need be.
    return not connection.in_atomic_block and bool(connection.get_autocommit())


def _claimed(found: list[GrantedTaskRow]) -> list[TaskInfo]:
    """Claimed records with their watchers under ``grants``, as snapshots in claim order."""
    if len(found) > 1:
        found.sort(key=rows.claim_order)
    return [rows.info_of(r, r.pop("grants")) for r in found]


class DatabaseAccess(WorkerStore):
    """The alias, querysets, transactions and writer lock every role of the store uses."""

    durable = True

    def __init__(self, using: str | None = None, **policy: Any) -> None:
        super().__init__(**policy)
        self._using = using

    @property
    def using(self) -> str:
        """The database alias this store reads and writes."""
        return self._using or workers_settings.DATABASE

    @property
    def vendor(self) -> str:
        return connections[self.using].vendor

    def _records(self) -> TaskRecordQuerySet:
        return TaskRecord.objects.using(self.using)

    def _watchers(self) -> QuerySet[TaskWatcher]:
        return TaskWatcher.objects.using(self.using)

    def _atomic(self) -> Any:
        return transaction.atomic(using=self.using)

    def _writing(self) -> Any:
        """This process's SQLite writer lock, or nothing to wait for (see ``_one_writer``)."""
        connection = connections[self.using]
        # Inside a transaction this thread may hold SQLite's own lock already: waiting
        # for a thread that waits for that lock would stall both until the busy timeout.
        if connection.vendor != "sqlite" or connection.in_atomic_block:
            return nullcontext()
        name = str(connection.settings_dict["NAME"])
        return _SQLITE_WRITERS.get(name) or _SQLITE_WRITERS.setdefault(name, threading.RLock())

    def _slots(self) -> QuerySet[HeldSlot]:
        return HeldSlot.objects.using(self.using)

    def _workers(self) -> QuerySet[WorkerProcess]:
        return WorkerProcess.objects.using(self.using)

    def _flows(self) -> WorkflowRecordQuerySet:
        return WorkflowRecord.objects.using(self.using)

    def _autocommit(self) -> bool:
        return _in_autocommit(connections[self.using])

    def _fenced(self, task_id: str, run_id: RunId) -> TaskRecordQuerySet:
        qs = self._records().filter(pk=task_id)
        return qs if run_id is ANY_RUN else qs.filter(run_id=run_id)

    def _grants(self, task_id: str) -> list[str]:
        # In grant order, like the memory store: without ORDER BY the plan decides.
        grants = self._watchers().filter(task_id=task_id).order_by("pk")
        return list(grants.values_list("user_id", flat=True))

    def _infos(self, found: Sequence[Mapping[str, Any]]) -> list[TaskInfo]:
        """Snapshots of rows the ORM read with ``COLUMNS``: task rows, with their grants."""
        grants: dict[str, list[str]] = {}
        if found:
            pairs = self._watchers().filter(task_id__in=[r["id"] for r in found]).order_by("pk")
            for task_id, user_id in pairs.values_list("task_id", "user_id"):
                grants.setdefault(task_id, []).append(user_id)
        typed = cast(Sequence[TaskRow], found)
        return [rows.info_of(row, grants.get(row["id"], ())) for row in typed]

    def _insert(self, news: Sequence[NewTask]) -> None:
        sql.insert_records(connections[self.using], news)
        self._grant(news)

    def _grant(self, news: Sequence[NewTask]) -> None:
        grants = [TaskWatcher(task_id=n.id, user_id=u) for n in news for u in grants_of(n)]
        if grants:
            self._watchers().bulk_create(grants)
