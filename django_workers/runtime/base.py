"""The state a ``WorkerRuntime``'s parts share, and the helpers they all use.

The runtime is one object whose parts (claiming, ending, housekeeping,
draining) are classes in modules of their own, each built on ``RuntimeBase``:
they share its fields, its ``_lock`` above all, which guards ``_active``,
``_busy`` and the claim counters, whichever part's thread holds it.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence

from django.utils import timezone

from django_workers import clock
from django_workers.bounds import storable
from django_workers.cancellation import CancelReason
from django_workers.conf import workers_settings
from django_workers.info import TaskInfo
from django_workers.notices import CANCELLED, Listener, parse_notice
from django_workers.runtime.flag import SignalSafeEvent
from django_workers.runtime.invoke import ContextFactory
from django_workers.runtime.outage import DatabaseWatch, LeaseWitness, backoff_delay, unreachable
from django_workers.runtime.reporter import EndItem, Reporter
from django_workers.runtime.run import RunHandle
from django_workers.runtime.scheduler import Scheduler
from django_workers.runtime.wakeup import LocalListener, wake_up_text
from django_workers.runtime.watchdog import Watchdog
from django_workers.stores import WorkerStore, default_store
from django_workers.stores.base import WorkerRegistration

#: The runtime's parts all log under the runtime's name, as docs/runtime.md says.
logger = logging.getLogger("django_workers.runtime.runtime")

#: Seconds between two polls for cancels of this process's runs (without NOTIFY).
CANCEL_POLL = 0.5
#: How many of the latest dispatched attempts (run id, attempt) a runtime remembers: a
#: RUNNING record of this worker in an attempt it never dispatched is a claim whose
#: answer was lost.
DISPATCHED_KEPT = 4096
#: Exit codes of ``run()``: stopped cleanly; runs outlived the drain; a part of the
#: runtime was stuck; another worker took the lease while runs were executing here.
EXIT_OK, EXIT_DRAIN_TIMEOUT, EXIT_STALLED, EXIT_LEASE_TAKEN = 0, 3, 4, 5


class RuntimeBase:
    """The fields of a runtime and what every part of it calls."""

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

    def _on_notify(self, payload: str) -> None:
        notice = parse_notice(payload)
        if notice.is_work_for(self.queues):
            self._wake.set()
        elif notice.kind == CANCELLED:
            self._check_cancels.set()

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
