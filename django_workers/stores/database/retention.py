"""Deleting what ended long ago: the retention role of ``DatabaseWorkerStore``."""

from __future__ import annotations

import time
from datetime import datetime

from django_workers.engine.machine import WORKFLOW_ENDS
from django_workers.info import TaskStatus
from django_workers.stores.database.access import DatabaseAccess, _one_writer

#: Records deleted per transaction by retention cleanup on SQLite, whose only write
#: lock every claim waits for.
SQLITE_DELETE_CHUNK = 100
#: Seconds SQLite's write lock is left free after each of those transactions. A writer
#: that found the lock taken retries at most 25 ms apart for its first 100 ms (SQLite's
#: busy handler), so a pause longer than that lets any waiting claim in.
SQLITE_DELETE_PAUSE = 0.03


class DatabaseRetention(DatabaseAccess):
    """Deletes in short batches; SQLite's in shorter ones, each followed by a pause."""

    def count_finished(self, status: TaskStatus, before: datetime) -> int:
        return int(self._records().finished_before(status, before).count())

    def count_finished_workflows(self, before: datetime) -> int:
        ended = self._flows().filter(state__in=list(WORKFLOW_ENDS), finished_at__lt=before)
        return int(ended.count())

    def delete_finished(self, status: TaskStatus, before: datetime, batch: int) -> int:
        doomed = self._records().finished_before(status, before)
        # Oldest first, the order of the (status, finished_at) index: the read stops
        # after ``batch`` rows instead of sorting every record past its retention.
        ids = list(doomed.order_by("finished_at").values_list("id", flat=True)[:batch])
        if not ids:
            return 0
        # SQLite has one write lock: a long delete would hold every claim up, so the
        # batch goes in short transactions there, each followed by a pause.
        sqlite = self.vendor == "sqlite"
        step = SQLITE_DELETE_CHUNK if sqlite else len(ids)
        deleted = 0
        for start in range(0, len(ids), step):
            chunk = ids[start : start + step]
            # The writer lock per chunk too: the pause after it is for the others.
            with self._writing(), self._atomic():
                self._watchers().filter(task_id__in=chunk).delete()
                # The read's conditions again: a record re-run since then is not deleted.
                deleted += doomed.filter(pk__in=chunk)._raw_delete(self.using)
            if sqlite:
                time.sleep(SQLITE_DELETE_PAUSE)
        return deleted

    @_one_writer
    def delete_finished_workflows(self, before: datetime, batch: int) -> int:
        ended = self._flows().filter(state__in=list(WORKFLOW_ENDS), finished_at__lt=before)
        # In no order: the model's (newest first) would sort every ended workflow.
        ids = list(ended.order_by().values_list("id", flat=True)[:batch])
        if not ids:
            return 0
        with self._atomic():
            doomed = self._records().filter(workflow__in=ids)
            self._watchers().filter(task__in=doomed.values("id")).delete()
            doomed._raw_delete(self.using)
            return int(
                self._flows()
                .filter(pk__in=ids, state__in=list(WORKFLOW_ENDS))
                ._raw_delete(self.using)
            )
