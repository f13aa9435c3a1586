"""``WorkerRuntime``: what this process is doing right now.

One runtime = one claim loop + ``concurrency`` run threads + a finisher that
writes the ends of runs in groups + a watchdog for deadlines + a housekeeping
thread (heartbeat, cancel delivery, zombie sweep, cleanup, liveness, the
scheduler pass of periodic tasks) + a
reporter that logs and sends ``run_finished`` + on PostgreSQL a LISTEN thread.
The store only answers questions; everything that runs is here.

Nothing that can block (a log handler writing to a full pipe, a signal
receiver) runs on the claim loop, the finisher or the housekeeper: they hand
it to the reporter. The lease is renewed only while the claim loop and the
finisher make progress, so a worker that is stuck is declared dead and its
runs are recovered, instead of holding them forever behind a fresh heartbeat.

Threads and their database connections: the claim loop, the finisher, the
housekeeper and the reporter each keep one persistent connection (Django's
are per thread), dropped after an error and opened again with backoff. Each
run thread gets what Django gives a request: before and after each task
function, a connection that is broken or past ``CONN_MAX_AGE`` is closed, so
a connection the server dropped fails one attempt at most. When the database
is away the runtime waits for it (see ``outage``), however long.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import timedelta

from django.db import DatabaseError, connections
from django.utils import timezone

from django_workers import clock, lifecycle
from django_workers.bounds import ERROR_MESSAGE_MAX_LENGTH, fit, storable
from django_workers.cancellation import CancelReason
from django_workers.conf import queue_limits, served_limits, workers_settings
from django_workers.info import TaskFailure, TaskInfo, TaskStatus, class_path
from django_workers.lifecycle import TaskEnd
from django_workers.live import live_runs
from django_workers.local_wake import runtime_socket_name
from django_workers.notices import CANCELLED, PROBE_TIMEOUT, Listener, deaf_warning, parse_notice
from django_workers.runtime.flag import SignalSafeEvent
from django_workers.runtime.invoke import ContextFactory
from django_workers.runtime.outage import DatabaseWatch, LeaseWitness, backoff_delay, unreachable
from django_workers.runtime.reporter import (
    EndItem,
    Reporter,
    report_ends,
    report_recovered,
    worth_reporting,
)
from django_workers.runtime.run import (
    RunHandle,
    execute,
    failure_of,
    fresh_connections,
    task_logger,
)
from django_workers.runtime.scheduler import Scheduler
from django_workers.runtime.wakeup import LocalListener, wake_up_text
from django_workers.runtime.watchdog import Watchdog
from django_workers.signals import run_started
from django_workers.stores import WorkerStore, default_store
from django_workers.stores.base import WorkerRegistration

logger = logging.getLogger(__name__)

#: Seconds between two polls for cancels of this process's runs (without NOTIFY).
CANCEL_POLL = 0.5
#: Most run ends written in one transaction.
FINISH_BATCH = 200
#: While other runs are still executing, the end writer waits this long (seconds) for
#: one more end before writing its batch, and at most FINISH_LINGER in all: runs
#: claimed together end together, and one write (and one refill claim) serves them all.
FINISH_GAP = 0.0005
FINISH_LINGER = 0.002
#: How many of the latest dispatched attempts (run id, attempt) a runtime remembers: a
#: RUNNING record of this worker in an attempt it never dispatched is a claim whose
#: answer was lost.
DISPATCHED_KEPT = 4096
#: Exit codes of ``run()``: stopped cleanly; runs outlived the drain; a part of the
#: runtime was stuck; another worker took the lease while runs were executing here.
EXIT_OK, EXIT_DRAIN_TIMEOUT, EXIT_STALLED, EXIT_LEASE_TAKEN = 0, 3, 4, 5


class WorkerRuntime:
    """Claims tasks from a store and runs them on a pool of threads, until stopped."""

    def __init__(
        self,
        store: WorkerStore | None = None,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 4,
        recover_zombies: bool = True,
        burst: bool = False,
        poll_interval: float | None = None,
        heartbeat_interval: float | None = None,
        lease_timeout: float | None = None,
        owns_process: bool = False,
        context_factory: ContextFactory | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}.")
        self.store = store or default_store()
        self.queues = tuple(queues) if queues else None
        self.concurrency = concurrency
        self.recover_zombies = recover_zombies
        self.burst = burst
        # True when this runtime is its process (runworkers): a stuck runtime then exits,
        # and runs that outlive the drain die with the process.
        self.owns_process = owns_process
        #: Builds a ``takes_context`` task's first argument (Django's TaskContext when
        #: ``runworkers`` builds the runtime); without it such a task fails.
        self.context_factory = context_factory
        self.poll_interval = workers_settings.seconds("POLL_INTERVAL", poll_interval)
        self.heartbeat_interval = workers_settings.seconds("HEARTBEAT_INTERVAL", heartbeat_interval)
        self.lease_timeout = workers_settings.seconds("LEASE_TIMEOUT", lease_timeout)
        if self.heartbeat_interval * 2 > self.lease_timeout:
            # Else the lease can run out between two heartbeats, and this runtime's own
            # sweep declares it dead and recovers its runs while they still run.
            raise ValueError(
                f"heartbeat_interval ({self.heartbeat_interval:g} s) must be at most half of "
                f"lease_timeout ({self.lease_timeout:g} s); lower "
                "DJANGO_WORKERS['HEARTBEAT_INTERVAL'] or raise 'LEASE_TIMEOUT'."
            )
        self.host = storable(socket.gethostname())[:200]
        self.pid = os.getpid()
        self.worker_id = f"{self.host[:40]}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self._active: dict[str, RunHandle] = {}
        # Claimed runs whose function has not returned (or whose end is not written
        # yet): a thread and a slot stay taken until then, whatever the record says.
        self._busy = 0
        self._lock = threading.Condition()
        # Set by the stop signals' handlers, which may run while this thread holds them.
        self._wake = SignalSafeEvent()
        # Held by whoever claims (the claim loop, or the listener for a notice), from
        # counting the free slots until the claimed runs hold theirs.
        self._claim_turn = threading.Lock()
        self._stopping = SignalSafeEvent()
        self._closed = threading.Event()
        # Held while the lease is given back, and while a lost lease is taken again:
        # a heartbeat in flight as the runtime closes must not register it anew.
        self._lease_turn = threading.Lock()
        self._check_cancels = threading.Event()
        self._jobs: queue.SimpleQueue[RunHandle | None] = queue.SimpleQueue()
        self._ends: queue.SimpleQueue[EndItem | None] = queue.SimpleQueue()
        self._reporter = Reporter()
        self._report = self._reporter.report
        # Heartbeats go out on the housekeeper's ticks: one late by a tick is no break.
        max_gap = max(2 * self.heartbeat_interval, self.lease_timeout / 2) + CANCEL_POLL
        self._witness = LeaseWitness(self.lease_timeout, max_gap)
        self.database = DatabaseWatch(self._report, on_lost=self._witness.broken)
        self._threads: list[threading.Thread] = []
        # Claims under way, how many have begun, and whether one failed since the last
        # look for records it may have claimed anyway; the runs dispatched lately.
        self._claims_in_flight = 0
        self._claim_generation = 0
        self._claims_unsure = False
        self._dispatched: collections.deque[tuple[str, int]] = collections.deque(
            maxlen=DISPATCHED_KEPT
        )
        self._watchdog = Watchdog(self._expire)
        # Every runtime runs the scheduler pass: no leader, no separate beat process.
        self.scheduler = Scheduler(self.store, self._report)
        self._listener: Listener | None = None
        self._local: LocalListener | None = None
        # What the lease row says of how this runtime is woken (``wake_up``).
        self._recorded_wake_up = ""
        # Liveness: when the claim loop last went round, since when the finisher has been
        # writing its current batch (None: idle).
        self._claim_beat = time.monotonic()
        self._finisher_since: float | None = None
        #: Why this runtime stopped renewing its lease (a stuck part), or None.
        self.stalled: str | None = None
        #: True once another worker took this runtime's lease while its runs executed.
        self.lease_taken = False
        self.started = threading.Event()

    # -- public --

    @property
    def listening(self) -> bool:
        """True when LISTEN/NOTIFY wakes this runtime: LISTEN is up and heard its probe."""
        return self._listener is not None and self._listener.ready.is_set()

    @property
    def wake_up(self) -> str:
        """How this runtime learns of new work, as the banner and ``workers status`` say it."""
        deaf = self._listener is not None and self._listener.deaf.is_set()
        return wake_up_text(self.store, self.poll_interval, deaf=deaf)

    def active_runs(self) -> list[TaskInfo]:
        """Live snapshots of the runs executing in this runtime."""
        with self._lock:
            return [h.snapshot() for h in self._active.values()]

    def request_stop(self) -> None:
        """Stop claiming and begin the drain (what SIGTERM does).

        Safe from a signal handler, even one that interrupts this thread inside it.
        """
        self._stopping.set()
        self._wake.set()

    def run(
        self, drain_timeout: float = 30.0, *, on_started: Callable[[], None] | None = None
    ) -> int:
        """Serve until ``request_stop()`` (or, in burst mode, until no work is left).

        ``on_started`` is called once the runtime serves and knows how it is woken
        (``wake_up``), before ``run()`` returns: at once, or, while the listener still
        waits for its probe (up to ``PROBE_TIMEOUT``), on a thread of its own as soon
        as it heard it or gave up. The claim loop never waits for it.
        """
        self._start()
        announcing: threading.Thread | None = None
        try:
            if on_started is not None:
                announcing = self._announce(on_started)
            self._claim_loop()
        finally:
            settled = self.shutdown(drain_timeout)
            if announcing is not None:
                announcing.join(PROBE_TIMEOUT + 5.0)
        if self.lease_taken:
            return EXIT_LEASE_TAKEN
        if self.stalled:
            return EXIT_STALLED
        return EXIT_OK if settled else EXIT_DRAIN_TIMEOUT

    # -- start-up --

    def _register(self) -> None:
        now = clock.now()
        wake_up = self.wake_up
        self.store.register_worker(
            WorkerRegistration(
                id=self.worker_id,
                host=self.host,
                pid=self.pid,
                queues=self.queues or (),
                concurrency=self.concurrency,
                started_at=now,
                heartbeat_at=now,
                wake_up=wake_up,
            )
        )
        self._recorded_wake_up = wake_up

    def _start(self) -> None:
        self.store.check_runtime_start()
        self._reporter.start()
        self._until_reached("start-up", self._first_contact)
        if self.recover_zombies:
            self._until_reached("start-up", self._sweep_zombies)
        # The claim loop starts now: a start that waited for the database was no stall.
        self._claim_beat = time.monotonic()
        self._spawn(self._finisher_loop, "workers-finisher")
        for n in range(self.concurrency):
            self._spawn(self._run_loop, f"workers-run-{n}")
        self._spawn(self._housekeeping_loop, "workers-housekeeping")
        self._watchdog.start()
        params = self.store.listen_params()
        if params is not None:
            self._listener = Listener(
                params,
                self._on_listened,
                connect=self.store.listening_connection,
                probe=self.store.send_notice,
                on_deaf=self._on_deaf,
            )
            self._listener.start()
            # A direct connection hears its probe within milliseconds; a deaf one is
            # told after PROBE_TIMEOUT, while the claim loop, started, polls.
            self._listener.settled.wait(min(PROBE_TIMEOUT, self.lease_timeout / 4))
        elif (wake_file := self.store.wake_file()) is not None:
            # SQLite: writers on this machine wake us through a socket; polling stays.
            self._local = LocalListener(wake_file, runtime_socket_name(), self._on_notify)
            self._local.start()
        self.store.subscribe(self._wake.set)
        self.started.set()

    def _first_contact(self) -> None:
        self._sync_clock()
        self._register()
        self._witness.renewed(clock.now())

    def _until_reached(self, what: str, step: Callable[[], None]) -> None:
        """Make ``step`` (a database call) once the database answers; wait while it is away.

        A stop request ends the wait: there is nothing to drain yet.
        """
        errors = 0
        while not self._stopping.is_set():
            try:
                step()
            except DatabaseError as e:
                if not unreachable(e):
                    raise
                errors += 1
                self._after_db_error(what, e, errors)
                continue
            self.database.reached()
            return

    def _announce(self, call: Callable[[], None]) -> threading.Thread | None:
        """``call()`` now if how this runtime is woken is known, else once it is (a thread)."""
        listener = self._listener
        if listener is None or listener.settled.is_set():
            call()
            return None

        def when_known() -> None:
            listener.settled.wait(PROBE_TIMEOUT + 5.0)
            try:
                call()
            except Exception as e:  # the caller's announcement must not end the runtime
                self._report(logger.error, "The start-up callback failed: %r", e)

        thread = threading.Thread(target=when_known, name="workers-announce", daemon=True)
        thread.start()
        return thread

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _sync_clock(self) -> None:
        """Stamp with the database's clock: measure how far this host's clock is from it."""
        before = timezone.now()
        database = self.store.database_now()
        after = timezone.now()
        if database is not None:
            clock.set_offset(database - (before + (after - before) / 2))

    # -- claiming --

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

    def _after_db_error(self, what: str, error: Exception, errors: int) -> None:
        """Log a failed database call once per outage, drop the connection, back off."""
        delay = self._retry_delay(errors)
        if unreachable(error):
            self.database.failed(what, error)
        else:
            self._report(
                logger.warning,
                "Database error during %s (%s); retrying in %.1f s",
                what,
                error,
                delay,
            )
        self.store.reset_connection()
        self._stopping.wait(delay)

    def _retry_delay(self, errors: int) -> float:
        # Retrying is progress, not a stall: keep each wait well inside the lease.
        return backoff_delay(errors, min(10.0, self.lease_timeout / 4))

    # -- running --

    def _run_loop(self) -> None:
        while (handle := self._jobs.get()) is not None:
            if self._stopping.is_set() and handle.try_release():
                self._give_back([handle])
                continue
            if not handle.try_start():
                continue  # given back by the shutdown, which freed its slot
            if task_logger.isEnabledFor(logging.DEBUG):
                self._report(
                    task_logger.debug,
                    "Task %s started: %s, attempt %d, queue %s",
                    handle.task_id,
                    handle.info.task_path,
                    handle.info.attempts,
                    handle.info.queue,
                )
            run_started.send_robust(type(self), info=handle.info)
            try:
                # As Django does before a request: the attempt starts on a healthy connection.
                fresh_connections()
                end = execute(handle)
            except BaseException as e:  # execute never raises; a worker thread must not die anyway
                logger.exception("Unexpected error running %s", handle.task_id)
                end = handle.failed_end(failure_of(e))
            handle.returned = True
            self._ends.put((end, handle, True))
            # What Django does after a request: the next task starts on a healthy connection.
            fresh_connections()
        connections.close_all()

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

    def _expire(self, handle: RunHandle) -> None:
        """The watchdog's call: the deadline passed while the function runs; end it FAILED.

        The token keeps its first cause: a run asked to stop earlier (its workflow
        cancelled, a shutdown) keeps that reason, but its record still ends at the
        deadline if the function has not returned. A record that ended already (a
        user's cancel) refuses this end, as it refuses any other.
        """
        with self._lock:
            live = self._active.get(handle.run_id) is handle and not handle.returned
        if live:
            handle.request_cancel(CancelReason.TIMEOUT)
            # Logged by the reporter once written, as one line with the task's other ends.
            self._ends.put((handle.timed_out_end(), handle, False))

    # -- finishing --

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

    # -- housekeeping --

    def _housekeeping_loop(self) -> None:
        due = {"heartbeat": 0.0, "zombies": 0.0, "cleanup": 0.0, "cancels": 0.0}
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

    def _on_notify(self, payload: str) -> None:
        notice = parse_notice(payload)
        if notice.is_work_for(self.queues):
            self._wake.set()
        elif notice.kind == CANCELLED:
            self._check_cancels.set()

    # -- shutdown --

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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["EXIT_DRAIN_TIMEOUT", "EXIT_OK", "EXIT_STALLED", "WorkerRuntime"]
