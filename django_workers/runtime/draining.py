"""Draining: the stop of a runtime, its runs given back or waited for, its threads closed."""

from __future__ import annotations

import time

from django.db import DatabaseError, connections

from django_workers import clock, lifecycle
from django_workers.cancellation import CancelReason
from django_workers.info import TaskStatus
from django_workers.runtime.base import logger
from django_workers.runtime.ending import Ending
from django_workers.runtime.housekeeping import Housekeeping


class Draining(Ending, Housekeeping):
    """Stops claiming, drains the runs, then closes the threads and the lease."""

    def shutdown(self, drain_timeout: float = 30.0) -> bool:
        """Stop claiming, set ``shutdown`` on every run, wait up to ``drain_timeout``; exit.

        Runs claimed but not started go back to their queue, their attempt not
        counted. Returns True if every run settled. A run still going at the
        deadline is left RUNNING; the drain never writes its state. Embedded in a
        process that goes on, the runtime keeps its lease (and writes their ends)
        until those runs return; a process of its own leaves them to the sweep.
        """
        self.request_stop()
        with self._lock:
            in_flight = list(self._active.values())
        unstarted = [h for h in in_flight if h.try_release()]
        for handle in in_flight:
            if handle not in unstarted:
                handle.request_cancel(CancelReason.SHUTDOWN)
        self._give_back(unstarted)
        running = len(in_flight) - len(unstarted)
        if running:
            self._report(
                logger.info, "Draining %d running tasks (up to %g s)", running, drain_timeout
            )
        settled = self._wait_idle(0.0 if self.stalled or self.lease_taken else drain_timeout)
        if not settled and (executing := self._executing()):
            self._report(
                logger.warning,
                "%d tasks still running after the drain timeout (%g s); leaving them "
                "RUNNING for the zombie sweep",
                executing,
                drain_timeout,
            )
        if not self.store.durable:
            self._abandon_pending()
        if settled or self.owns_process:
            self._close(settled)
        else:
            self._spawn(self._close_when_idle, "workers-closer")
        connections.close_all()
        return settled

    def _wait_idle(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._lock.wait(left)
            return not self._busy

    def _close_when_idle(self) -> None:
        self._wait_idle(None)
        self._close(True)
        connections.close_all()

    def _close(self, settled: bool) -> None:
        """Stop the threads; remove the lease unless runs it covers are still going."""
        for _ in range(self.concurrency):
            self._jobs.put(None)
        self._ends.put(None)
        self._watchdog.stop()
        if self._listener is not None:
            self._listener.stop()
        if self._local is not None:
            self._local.stop()
        if settled:
            for thread in self._threads:
                if thread.name.startswith(("workers-run", "workers-finisher")):
                    thread.join(timeout=5.0)
        self._closed.set()
        self._check_cancels.set()
        if settled:
            try:
                with self._lease_turn:
                    self.store.remove_worker(self.worker_id)
            except DatabaseError as e:
                self._report(
                    logger.warning, "Could not remove the lease of %s (%s)", self.worker_id, e
                )
        self._reporter.stop(wait=5.0 if settled else 0.0)

    def _abandon_pending(self) -> None:
        """In-memory store: nothing will run what is queued, so record it cancelled."""
        now = clock.now()
        pending = self.store.list_tasks(user_id=None, status=TaskStatus.PENDING, limit=10**9)
        self.store.end_tasks(
            [
                lifecycle.abandon_end(info, now)
                for info in pending
                if self.queues is None or info.queue in self.queues
            ]
        )
