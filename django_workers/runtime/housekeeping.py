"""Housekeeping: the lease (heartbeat, stalls, a lease lost), cancels, zombies, cleanup."""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta

from django.db import DatabaseError, connections

from django_workers import clock, lifecycle
from django_workers.cancellation import CancelReason
from django_workers.conf import workers_settings
from django_workers.info import TaskStatus
from django_workers.runtime.base import (
    CANCEL_POLL,
    EXIT_LEASE_TAKEN,
    EXIT_STALLED,
    RuntimeBase,
    logger,
)
from django_workers.runtime.outage import unreachable
from django_workers.runtime.reporter import report_recovered
from django_workers.runtime.run import task_logger

#: How often a worker looks for workflows past their deadline (seconds).
DEADLINE_POLL = 1.0


class Housekeeping(RuntimeBase):
    """The housekeeping thread: keeps the lease while the runtime progresses, and tidies up."""

    def _housekeeping_loop(self) -> None:
        due = {"heartbeat": 0.0, "zombies": 0.0, "cleanup": 0.0, "cancels": 0.0, "deadlines": 0.0}
        errors = 0
        # Until the last run returned: the lease and cancel delivery cover the drain.
        while not self._closed.is_set():
            now = time.monotonic()
            wait = CANCEL_POLL
            try:
                self._housekeeping_tick(now, due)
                errors = 0
            except DatabaseError as e:
                errors += 1
                if unreachable(e):
                    self.database.failed("housekeeping", e)
                    wait = max(wait, self._retry_delay(errors))
                else:
                    self._report(logger.warning, "Database error during housekeeping (%s)", e)
                self.store.reset_connection()
            except Exception as e:
                self._report(logger.error, "Housekeeping failed (%r); continuing", e)
            self._check_cancels.wait(wait)
        connections.close_all()

    def _housekeeping_tick(self, now: float, due: dict[str, float]) -> None:
        if self._check_cancels.is_set() or now >= due["cancels"]:
            self._check_cancels.clear()
            due["cancels"] = now + CANCEL_POLL
            self._deliver_cancels()
        if now >= due["heartbeat"]:
            due["heartbeat"] = now + self.heartbeat_interval
            self._heartbeat()
        if self._stopping.is_set():
            return
        if self._claims_unsure:
            self._give_back_lost_claims()
        if self.recover_zombies and now >= due["zombies"]:
            due["zombies"] = now + self.lease_timeout / 2
            self._sweep_zombies()
        if now >= due["deadlines"]:
            due["deadlines"] = now + DEADLINE_POLL
            self._cancel_overdue_workflows()
        if now >= due["cleanup"]:
            due["cleanup"] = now + workers_settings.CLEANUP_INTERVAL
            self.cleanup()
        self.scheduler.run_pass()

    def _deliver_cancels(self) -> None:
        with self._lock:
            # A run that returned is only waiting for its end to be written: nothing to stop.
            runs = {
                h.task_id: h.run_id
                for h in self._active.values()
                if not h.token.requested and not h.returned
            }
        if not runs:
            return
        for task_id, reason in self.store.runs_to_stop(self.worker_id, runs).items():
            handle = self._active.get(runs[task_id])
            if (
                handle is not None
                and handle.request_cancel(reason)
                and task_logger.isEnabledFor(logging.DEBUG)
            ):
                self._report(task_logger.debug, "Task %s asked to stop (%s)", task_id, reason)

    def _cancel_overdue_workflows(self) -> None:
        """Cancel the workflows past their deadline, as a user's cancel would (reason deadline)."""
        cancelled = self.store.cancel_overdue_workflows(clock.now())
        for workflow_id in cancelled:
            self._report(logger.info, "Workflow %s passed its deadline: cancelled", workflow_id)
        if cancelled:
            # Its running nodes here are told at once; other workers read it when they poll.
            self._check_cancels.set()
            self._wake.set()

    def _heartbeat(self) -> None:
        if self.stalled:
            return  # a stuck runtime lets its lease lapse, so its runs are recovered
        stuck = self._stuck_part()
        if stuck is not None:
            self._stall(stuck)
            return
        self._sync_clock()
        now = clock.now()
        if self.store.heartbeat(self.worker_id, now):
            self._witness.renewed(now)
            self.database.reached()
            return
        self._lease_lost()

    def _stuck_part(self) -> str | None:
        """The part of this runtime that made no progress for longer than the lease."""
        now = time.monotonic()
        if not self._stopping.is_set() and now - self._claim_beat > self.lease_timeout:
            return "the claim loop"
        since = self._finisher_since
        if since is not None and now - since > self.lease_timeout:
            return "the end writer"
        return None

    def _stall(self, part: str) -> None:
        """Stop renewing the lease and stop; a process of its own exits (its runs with it)."""
        if self.stalled:
            return
        self.stalled = part
        self._report(
            logger.error,
            "%s of worker %s made no progress for more than %g s (the lease timeout); "
            "no longer renewing its lease so that its %d running tasks are recovered "
            "elsewhere, and %s (exit code %d)",
            part.capitalize(),
            self.worker_id,
            self.lease_timeout,
            self._executing(),
            "exiting" if self.owns_process else "stopping",
            EXIT_STALLED,
        )
        self._stop_for_good(EXIT_STALLED)

    def _stop_for_good(self, code: int) -> None:
        self.request_stop()
        if self.owns_process:
            self._spawn(lambda: self._exit_if_stuck(code), "workers-exit")

    def _exit_if_stuck(self, code: int) -> None:
        # A stuck part may never let run() return: give the shutdown a moment, then exit,
        # after the reporter has written what it holds (the line that says why).
        if not self._closed.wait(max(self.heartbeat_interval, 2.0)):
            self._reporter.stop(wait=1.0)
            os._exit(code)

    def _executing(self) -> int:
        """How many functions of this runtime have not returned yet."""
        with self._lock:
            return sum(1 for h in self._active.values() if not h.returned)

    def _lease_lost(self) -> None:
        """Another worker declared this one dead: its runs were recovered and may run again."""
        if self._closed.is_set():
            return  # it gave its lease back itself
        with self._lock:
            running = [h for h in self._active.values() if not h.returned]
        for handle in running:
            handle.request_cancel(CancelReason.SUPERSEDED)
        if running and self.owns_process:
            # Their records moved on (the fence refuses these runs' writes) and may run
            # elsewhere already: an exit stops these copies now, whatever they poll.
            self.lease_taken = True
            self._report(
                logger.error,
                "The lease of worker %s was taken by another worker's sweep (it could not "
                "heartbeat for longer than the lease timeout, %g s, while the database was "
                "up for others) with %d tasks running here; their records were recovered, "
                "so this process exits (exit code %d) for its service manager to start it "
                "again",
                self.worker_id,
                self.lease_timeout,
                len(running),
                EXIT_LEASE_TAKEN,
            )
            self._stop_for_good(EXIT_LEASE_TAKEN)
            return
        self._report(
            logger.warning,
            "The lease of worker %s was taken by another worker's sweep (declared dead); "
            "no task was running here, so it registers again and goes on",
            self.worker_id,
        )
        with self._lease_turn:
            if not self._closed.is_set():
                self._register()

    def _give_back_lost_claims(self) -> None:
        """Put back in their queues the records a failed claim took for this worker.

        Read while no claim is under way, and used only if none began meanwhile: a
        record RUNNING under this worker whose run it never dispatched was claimed by
        a statement whose answer never came back. Each goes back fenced on its run.
        """
        with self._lock:
            if self._claims_in_flight:
                return
            generation = self._claim_generation
        held = self.store.runs_claimed_by(self.worker_id)
        with self._lock:
            if self._claims_in_flight or self._claim_generation != generation:
                return
            self._claims_unsure = False
            known = {(h.run_id, h.info.attempts) for h in self._active.values()}
            known.update(self._dispatched)
        # A retry keeps its run id: a later attempt of a run dispatched here is another claim.
        lost = [info for info in held if (info.run_id, info.attempts) not in known]
        if not lost:
            return
        won = self.store.end_tasks([lifecycle.release_end(info, self.worker_id) for info in lost])
        # The runtime healing itself after a connection was lost, which was logged then.
        self._report(
            logger.info,
            "Gave back %d tasks whose claim by this worker committed but whose answer was "
            "lost with the connection: %s",
            sum(won),
            ", ".join(info.id for info in lost[:10]),
        )
        self._wake.set()

    def _sweep_zombies(self) -> None:
        """Recover the runs of dead workers; whatever fails is logged, and the next sweep tries."""
        try:
            dead = [
                w.id
                for w in self.store.list_workers()
                if w.host == self.host and w.id != self.worker_id and not _pid_alive(w.pid)
            ]
            recovered = self.store.recover_zombies(
                now=clock.now(),
                stale_before=self._witness.stale_before(),
                dead=dead,
                refused=self._zombie_refused,
            )
        except Exception as e:  # never a reason to stop serving, nor not to start
            if isinstance(e, DatabaseError) and unreachable(e):
                self.database.failed("zombie sweep", e)
            else:
                self._report(
                    logger.error, "The zombie sweep failed (%r); the next one tries again", e
                )
            if isinstance(e, DatabaseError):
                self.store.reset_connection()
            return
        if recovered:
            self._report(report_recovered, self.store, recovered)
        if dead or recovered:
            self._wake.set()

    def _zombie_refused(self, task_id: str, error: Exception) -> None:
        self._report(
            logger.error,
            "The zombie sweep could not end task %s (%r); it goes on with the others",
            task_id,
            error,
        )

    def cleanup(self) -> int:
        """Delete finished records older than their retention, in bounded batches."""
        deleted = 0
        batch = workers_settings.CLEANUP_BATCH
        for status, seconds in (workers_settings.RETENTION or {}).items():
            if seconds is None:
                continue
            before = clock.now() - timedelta(seconds=seconds)
            for _ in range(100):  # at most 100 batches a pass; the next pass goes on
                if status == "WORKFLOWS":
                    n = self.store.delete_finished_workflows(before, batch)
                else:
                    n = self.store.delete_finished(TaskStatus(status), before, batch)
                deleted += n
                if n < batch:
                    break
        if deleted:
            self._report(logger.info, "Cleanup deleted %d finished tasks", deleted)
        return deleted


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
