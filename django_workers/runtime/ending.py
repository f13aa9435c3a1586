"""Ending: the end writer that stores the ends of runs in groups, and its fallbacks."""

from __future__ import annotations

import contextlib
import queue
import time
from dataclasses import replace

from django.db import DatabaseError, connections

from django_workers import clock
from django_workers.bounds import ERROR_MESSAGE_MAX_LENGTH, fit
from django_workers.conf import queue_limits
from django_workers.info import TaskFailure, TaskInfo, TaskStatus, class_path
from django_workers.lifecycle import TaskEnd
from django_workers.live import live_runs
from django_workers.runtime.base import logger
from django_workers.runtime.claiming import Claiming
from django_workers.runtime.outage import unreachable
from django_workers.runtime.reporter import EndItem, report_ends, worth_reporting
from django_workers.runtime.run import RunHandle

#: Most run ends written in one transaction.
FINISH_BATCH = 200
#: While other runs are still executing, the end writer waits this long (seconds) for
#: one more end before writing its batch, and at most FINISH_LINGER in all: runs
#: claimed together end together, and one write (and one refill claim) serves them all.
FINISH_GAP = 0.0005
FINISH_LINGER = 0.002


class Ending(Claiming):
    """Writes the ends of runs, claims for their slots in the same write, frees the rest."""

    def _give_back(self, handles: list[RunHandle]) -> None:
        """Put runs that never started back in their queue, their attempt not counted."""
        if not handles:
            return
        try:
            self.store.end_tasks([h.release_end() for h in handles])
        except DatabaseError as e:
            # The records stay RUNNING under this worker: the zombie sweep requeues them.
            self._report(logger.warning, "Could not give back %d runs (%s)", len(handles), e)
        for handle in handles:
            self._release(handle)

    def _finisher_loop(self) -> None:
        while (first := self._ends.get()) is not None:
            batch = [first]
            linger = time.monotonic() + FINISH_LINGER
            while len(batch) < FINISH_BATCH:
                try:
                    item = self._ends.get_nowait()
                except queue.Empty:
                    wait = min(FINISH_GAP, linger - time.monotonic())
                    if wait <= 0 or not self._runs_executing(batch):
                        break
                    try:
                        item = self._ends.get(timeout=wait)
                    except queue.Empty:
                        break
                if item is None:
                    self._ends.put(None)
                    break
                batch.append(item)
            self._finisher_since = time.monotonic()
            try:
                self._write_ends(batch)
            except Exception as e:  # never lose the finisher; the sweep recovers what it held
                self._report(logger.error, "Could not record %d run ends: %r", len(batch), e)
                for _end, handle, release in batch:
                    if release:
                        self._release(handle)
            self._finisher_since = None
        connections.close_all()

    def _runs_executing(self, batch: list[EndItem]) -> bool:
        """Whether a run of this runtime is still executing (its end is yet to come)."""
        returned = sum(1 for _end, _handle, release in batch if release)
        with self._lock:
            return self._busy > returned

    def _write_ends(self, batch: list[EndItem]) -> None:
        returned = [handle for _end, handle, release in batch if release]
        # The slots of the runs that returned are refilled with the same write: their ends
        # are stored first, so this worker never holds more RUNNING records than slots.
        refill = 0 if self._stopping.is_set() else len(returned)
        with self._claiming() if refill else contextlib.nullcontext():
            won, claimed = self._end_with_retry([end for end, _h, _r in batch], refill)
            started = self._begin(claimed)
            self._release(*returned, kept=len(started))
            for info in started:
                self._dispatch(info, slot_held=True)
        # Logging and signal receivers can block: never on this thread. A batch with
        # nothing to say costs no hand-off at all.
        if worth_reporting(batch, won):
            self._report(report_ends, batch, won)

    def _end_with_retry(
        self, ends: list[TaskEnd], refill: int = 0
    ) -> tuple[list[bool], list[TaskInfo]]:
        """Store ``ends``; with ``refill``, also claim up to that many runs (first try only)."""
        try:
            return self._store_ends(ends, refill)
        except DatabaseError as e:
            # The database refuses the data itself: retrying would block every other end.
            return self._end_one_by_one(ends, e), []

    def _store_ends(
        self, ends: list[TaskEnd], refill: int = 0
    ) -> tuple[list[bool], list[TaskInfo]]:
        """Store ``ends`` (and claim), retrying while the database cannot be reached."""
        errors = 0
        while True:
            try:
                if refill > 0:
                    written = self.store.end_and_claim(
                        ends, self.worker_id, self.queues, refill, clock.now(), queue_limits()
                    )
                else:
                    written = self.store.end_tasks(ends), []
            except DatabaseError as e:
                if not unreachable(e):
                    raise
                # A terminal state is never dropped: keep trying until the database answers.
                if refill:
                    self._claims_unsure = True  # the claim may have committed all the same
                refill = 0
                errors += 1
                self.database.failed(f"writing {len(ends)} run ends", e)
                self.store.reset_connection()
                time.sleep(self._retry_delay(errors))
                self._finisher_since = time.monotonic()
                continue
            if errors:
                self.database.reached()
            return written

    def _end_one_by_one(self, ends: list[TaskEnd], error: DatabaseError) -> list[bool]:
        """Store each end alone: one the database refuses ends its record FAILED, saying why."""
        if len(ends) == 1:
            return [self._end_refused(ends[0], error)]
        won = []
        for end in ends:
            try:
                won.append(self._store_ends([end])[0][0])
            except DatabaseError as e:
                won.append(self._end_refused(end, e))
        return won

    def _end_refused(self, end: TaskEnd, error: DatabaseError) -> bool:
        """Store ``end`` as FAILED with the database's refusal, once; else leave it to the sweep."""
        failure = TaskFailure(
            class_path(type(error)),
            fit(
                f"The task ended {end.status} but the database refused to store its outcome: "
                f"{error}",
                ERROR_MESSAGE_MAX_LENGTH,
            ),
        )
        fallback = replace(
            end, status=TaskStatus.FAILED, result=None, error=failure.to_json(), errors=None
        )
        try:
            won = self._store_ends([fallback])[0][0]
        except DatabaseError as again:
            # Never a loop: the record stays as it is, for the zombie sweep once this
            # worker is gone.
            self._report(
                logger.error,
                "The database refused the end of task %s (%s), and its FAILED end too (%s); "
                "it is left to the zombie sweep",
                end.task_id,
                error,
                again,
            )
            return False
        self._report(
            logger.error,
            "The database refused the end of task %s; it ended FAILED instead: %s",
            end.task_id,
            error,
        )
        return won

    def _release(self, *handles: RunHandle, kept: int = 0) -> None:
        """Forget runs whose function returned; ``kept`` of their slots stay taken (refilled)."""
        for handle in handles:
            live_runs.discard(handle)
            if handle.info.options.timeout is not None:
                self._watchdog.unwatch(handle)
        with self._lock:
            for handle in handles:
                if self._active.get(handle.run_id) is handle:
                    del self._active[handle.run_id]
            self._busy -= len(handles) - kept
            self._lock.notify_all()
        if len(handles) > kept:
            self._wake.set()
