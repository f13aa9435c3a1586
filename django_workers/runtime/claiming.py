"""Claiming: the claim loop, the claim on a notice, and the hand-off of runs to threads."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from django.db import DatabaseError

from django_workers import clock, lifecycle
from django_workers.cancellation import CancelReason
from django_workers.conf import queue_limits, served_limits
from django_workers.info import TaskInfo
from django_workers.live import live_runs
from django_workers.notices import deaf_warning, parse_notice
from django_workers.runtime.base import RuntimeBase, logger
from django_workers.runtime.run import RunHandle, task_logger


class Claiming(RuntimeBase):
    """Claims runs for the free slots and dispatches them to the run threads."""

    def _claim_loop(self) -> None:
        errors = 0
        while not self._stopping.is_set():
            self._claim_beat = time.monotonic()
            self._wake.clear()
            limits = queue_limits()
            try:
                with self._claim_turn:
                    claimed, free = self._claim_free_slots(limits)
                if errors:
                    errors = 0
                    self.database.reached()
            except DatabaseError as e:
                errors += 1
                self._after_db_error("claim", e, errors)
                continue
            if self.burst and not claimed and self._idle():
                self._report(logger.info, "Burst mode: nothing left to run; stopping.")
                break
            if claimed and len(claimed) < free and served_limits(self.queues, limits):
                # A queue's limit may have cut this claim short while other queues had
                # ready tasks: the queues it filled are left out of the next claim.
                continue
            if len(claimed) < free or free <= 0:
                self._wake.wait(self._idle_wait())

    def _claim_free_slots(self, limits: dict[str, int]) -> tuple[list[TaskInfo], int]:
        """Claim for every free slot and hand the runs to threads; the claimed runs, the slots.

        Under ``_claim_turn``: the slots counted here are taken by ``_dispatch`` before
        another claim counts them.
        """
        with self._lock:
            free = self.concurrency - self._busy
        if free <= 0:
            return [], free
        with self._claiming():
            claimed = self.store.claim(self.worker_id, self.queues, free, clock.now(), limits)
            for info in self._begin(claimed):
                self._dispatch(info)
        return claimed, free

    @contextlib.contextmanager
    def _claiming(self) -> Iterator[None]:
        """Around a claim and the hand-off of its runs; a claim that fails may have committed.

        A connection lost after the database committed a claim, before its answer
        came back, leaves records RUNNING under this worker that no thread runs:
        ``_give_back_lost_claims`` finds them once no claim is in flight.
        """
        with self._lock:
            self._claims_in_flight += 1
            self._claim_generation += 1
        try:
            yield
        except BaseException:
            self._claims_unsure = True
            raise
        finally:
            with self._lock:
                self._claims_in_flight -= 1

    def _on_listened(self, payload: str) -> None:
        """A notice on the LISTEN connection: new work is claimed here, on the listener's thread.

        The listener's thread claims at once, instead of waking the claim loop to
        claim: on an idle worker that saves a thread's wake-up and, where LISTEN goes
        through the store's alias, a round trip to a database process that was asleep,
        since the claim then runs on the very connection that received the notice
        (about 0.25 ms of the wake-up on a two-core machine). With a LISTEN_DATABASE
        of its own the claim goes through this thread's connection of the store's
        alias: the listening one may reach the server another way. The claim loop is
        woken as before whenever this claim cannot settle the notice: the loop is
        claiming already, there may be more to claim, or the claim failed.
        """
        notice = parse_notice(payload)
        if notice.is_work_for(self.queues) and not notice.reconnected and self._claimed_here():
            return
        self._on_notify(payload)

    def _claimed_here(self) -> bool:
        """Claim on this thread if the claim loop is not claiming; True if nothing is left."""
        if self._stopping.is_set() or not self._claim_turn.acquire(blocking=False):
            return False
        try:
            limits = queue_limits()
            claimed, free = self._claim_free_slots(limits)
        except Exception as e:  # the listener must go on listening, whatever the claim met
            self._report(
                logger.warning, "Claim on notice failed (%s); the claim loop claims instead", e
            )
            self.store.reset_connection()  # the listener reconnects and listens again
            return False
        finally:
            self._claim_turn.release()
        return free > 0 and len(claimed) < free and not served_limits(self.queues, limits)

    def _on_deaf(self) -> None:
        """The listener's probe never came: it stopped, and this runtime polls; say so once."""
        alias = self.store.listen_alias() or "?"
        instead = f"This worker polls every {self.poll_interval:g} s instead."
        warning = deaf_warning(alias, getattr(self.store, "using", alias), instead)
        self._report(logger.warning, warning)
        self._wake.set()  # the claim loop's wait was a LISTEN's: wait a poll's from now on
        try:
            self._record_wake_up()
        finally:
            self.store.reset_connection()  # the listener's thread ends here

    def _record_wake_up(self) -> None:
        """Store in the lease row how this runtime is woken, if that changed."""
        wake_up = self.wake_up
        if wake_up == self._recorded_wake_up:
            return
        try:
            if self.store.record_wake_up(self.worker_id, wake_up):
                self._recorded_wake_up = wake_up
        except DatabaseError as e:
            self._report(logger.warning, "Could not record how %s is woken (%s)", self.worker_id, e)

    def _idle(self) -> bool:
        with self._lock:
            return self._busy == 0

    def _idle_wait(self) -> float:
        # With NOTIFY a poll is only the safety net for run_after and lost notifications.
        wait = max(self.poll_interval, 1.0) if self.listening else self.poll_interval
        # Short enough that an idle loop still proves it is alive well within the lease.
        return min(wait, self.lease_timeout / 4)

    def _dispatch(self, info: TaskInfo, *, slot_held: bool = False) -> None:
        """Hand a claimed run to a thread; ``slot_held``: its slot is counted already."""
        handle = RunHandle(info, self.store, self.worker_id, self.context_factory)
        with self._lock:
            # A run executing here whose claim the database lost (see ``own_commit`` in
            # the PostgreSQL statements) and this claim made again: the record is that
            # run's once more. A retry keeps its run id too, but its claim counts the next
            # attempt: that is a new attempt, even while the last one's bookkeeping lags.
            executing = self._active.get(info.run_id)
            again = executing is not None and executing.info.attempts >= info.attempts
            if again:
                if slot_held:
                    self._busy -= 1  # the refill's slot is free after all
            else:
                self._active[handle.run_id] = handle
                self._dispatched.append((handle.run_id, info.attempts))
                if not slot_held:
                    self._busy += 1
        if again:
            self._report(
                task_logger.warning,
                "Task %s was claimed again while its run %s executes here (the database "
                "lost the first claim); that run goes on",
                info.id,
                info.run_id,
            )
            self._wake.set()
            return
        live_runs.add(handle)
        if (left := handle.seconds_left()) is not None:
            self._watchdog.watch(handle, left)
        self._jobs.put(handle)

    def _begin(self, claimed: list[TaskInfo]) -> list[TaskInfo]:
        """The pre-run check of claimed workflow nodes: a run its claim found asked to stop.

        The claim returned each record as it wrote it, so a node whose record asks it
        to stop (a cancel of its workflow met it, claimed or requeued) is known without
        another read; the check ends those CANCELLED, in one call. A stop asked after
        the claim reaches the run as its token, like any cancel. A node the database
        could not check goes back to its queue.
        """
        nodes = [
            info for info in claimed if info.workflow and info.cancel_reason != CancelReason.NONE
        ]
        if not nodes:
            return claimed
        try:
            allowed = self.store.begin_runs(nodes)
        except DatabaseError as e:
            self._report(logger.warning, "Pre-run check of %d runs failed (%s)", len(nodes), e)
            self.store.reset_connection()
            try:
                self.store.end_tasks([lifecycle.release_end(i, self.worker_id) for i in nodes])
            except DatabaseError:
                self._claims_unsure = True  # given back later, by _give_back_lost_claims
            checked = {info.run_id for info in nodes}
            return [info for info in claimed if info.run_id not in checked]
        refused = {info.run_id for info, ok in zip(nodes, allowed, strict=True) if not ok}
        for info in nodes:
            if info.run_id in refused:
                self._report(
                    task_logger.info, "Task %s not started: its workflow refused it", info.id
                )
        return [info for info in claimed if info.run_id not in refused]
