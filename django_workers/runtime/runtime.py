"""``WorkerRuntime``: what this process is doing right now (SPEC §2, §4.3-4.5).

One runtime = one claim loop + ``concurrency`` run threads + a finisher that
writes the ends of runs in groups + a watchdog for deadlines + a housekeeping
thread (heartbeat, cancel delivery, zombie sweep, cleanup) + on PostgreSQL a
LISTEN thread. The store only answers questions; everything that runs is here.

Threads and their database connections: the claim loop, each run thread, the
finisher and the housekeeper each keep one persistent connection (Django's
are per thread); a connection is closed and reopened only after an error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from django_workers import clock
from django_workers.api import cancelled_fields
from django_workers.cancellation import CancelReason
from django_workers.conf import queue_limits, workers_settings
from django_workers.info import TaskFailure, TaskInfo, TaskStatus
from django_workers.runtime.registry import live_runs
from django_workers.runtime.run import RunHandle, execute
from django_workers.runtime.wakeup import CANCELLED, Listener, listen_params, parse_notice
from django_workers.runtime.watchdog import Watchdog
from django_workers.stores import WorkerStore, default_store
from django_workers.stores.base import RunEnd, WorkerRegistration

logger = logging.getLogger(__name__)

#: Seconds between two polls for cancels of this process's runs (without NOTIFY).
CANCEL_POLL = 0.5
#: Most run ends written in one transaction.
FINISH_BATCH = 200
#: Exit codes of ``run()``.
EXIT_OK, EXIT_DRAIN_TIMEOUT = 0, 3

RunObserver = Callable[[str, TaskInfo, RunEnd | None], None]
_observers: list[RunObserver] = []


def add_run_observer(fn: RunObserver) -> None:
    """Call ``fn(event, info, end)`` on "started" and "finished" (the django.tasks signals)."""
    if fn not in _observers:
        _observers.append(fn)


def _notify_observers(event: str, info: TaskInfo, end: RunEnd | None) -> None:
    for fn in list(_observers):
        try:
            fn(event, info, end)
        except Exception:
            logger.exception("Run observer %r failed on %s of %s", fn, event, info.id)


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
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}.")
        self.store = store or default_store()
        self.queues = tuple(queues) if queues else None
        self.concurrency = concurrency
        self.recover_zombies = recover_zombies
        self.burst = burst
        self.poll_interval = _or_setting(poll_interval, "POLL_INTERVAL")
        self.heartbeat_interval = _or_setting(heartbeat_interval, "HEARTBEAT_INTERVAL")
        self.lease_timeout = _or_setting(lease_timeout, "LEASE_TIMEOUT")
        if self.heartbeat_interval * 2 > self.lease_timeout:
            # Else the lease can run out between two heartbeats, and this runtime's own
            # sweep declares it dead and recovers its runs while they still run.
            raise ValueError(
                f"heartbeat_interval ({self.heartbeat_interval:g} s) must be at most half of "
                f"lease_timeout ({self.lease_timeout:g} s); lower "
                "DJANGO_WORKERS['HEARTBEAT_INTERVAL'] or raise 'LEASE_TIMEOUT'."
            )
        self.host = socket.gethostname()[:200]
        self.pid = os.getpid()
        self.worker_id = f"{self.host[:40]}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self._active: dict[str, RunHandle] = {}
        # Claimed runs whose end is not written yet: a slot frees only once the run's end
        # is in the database, so RUNNING rows of this worker never exceed concurrency.
        self._busy = 0
        self._lock = threading.Condition()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._check_cancels = threading.Event()
        self._jobs: queue.SimpleQueue[RunHandle | None] = queue.SimpleQueue()
        self._ends: queue.SimpleQueue[tuple[RunEnd | None, RunHandle, bool] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._watchdog = Watchdog(self._expire)
        self._listener: Listener | None = None
        self.started = threading.Event()

    # -- public --

    @property
    def listening(self) -> bool:
        """True when LISTEN/NOTIFY wakes this runtime (PostgreSQL)."""
        return self._listener is not None and self._listener.ready.is_set()

    def active_runs(self) -> list[TaskInfo]:
        """Live snapshots of the runs executing in this runtime."""
        with self._lock:
            return [h.snapshot() for h in self._active.values()]

    def request_stop(self) -> None:
        """Stop claiming and begin the drain (what SIGTERM does). Safe from a signal handler."""
        self._stopping.set()
        self._wake.set()

    def run(self, drain_timeout: float = 30.0) -> int:
        """Serve until ``request_stop()`` (or, in burst mode, until no work is left)."""
        self._start()
        try:
            self._claim_loop()
        finally:
            settled = self.shutdown(drain_timeout)
        return EXIT_OK if settled else EXIT_DRAIN_TIMEOUT

    # -- start-up --

    def _register(self) -> None:
        now = clock.now()
        self.store.register_worker(
            WorkerRegistration(
                id=self.worker_id,
                host=self.host,
                pid=self.pid,
                queues=self.queues or (),
                concurrency=self.concurrency,
                started_at=now,
                heartbeat_at=now,
            )
        )

    def _start(self) -> None:
        self._register()
        if self.recover_zombies:
            self._sweep_zombies()
        self._spawn(self._finisher_loop, "workers-finisher")
        for n in range(self.concurrency):
            self._spawn(self._run_loop, f"workers-run-{n}")
        self._spawn(self._housekeeping_loop, "workers-housekeeping")
        self._watchdog.start()
        params = listen_params(getattr(self.store, "using", "")) if self.store.durable else None
        if params is not None:
            self._listener = Listener(params, self._on_notify)
            self._listener.start()
            self._listener.ready.wait(5.0)
        subscribe = getattr(self.store, "subscribe", None)
        if subscribe is not None:
            subscribe(self._wake.set)
        self.started.set()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- claiming --

    def _claim_loop(self) -> None:
        errors = 0
        while not self._stopping.is_set():
            self._wake.clear()
            with self._lock:
                free = self.concurrency - self._busy
            claimed: list[TaskInfo] = []
            if free > 0:
                try:
                    claimed = self.store.claim(
                        self.worker_id, self.queues, free, clock.now(), queue_limits()
                    )
                    errors = 0
                except DatabaseError as e:
                    errors += 1
                    self._after_db_error("claim", e, errors)
                    continue
                for info in claimed:
                    self._dispatch(info)
            if self.burst and not claimed and self._idle():
                logger.info("Burst mode: nothing left to run; stopping.")
                break
            if len(claimed) < free or free <= 0:
                self._wake.wait(self._idle_wait())

    def _idle(self) -> bool:
        with self._lock:
            return self._busy == 0

    def _idle_wait(self) -> float:
        # With NOTIFY a poll is only the safety net for run_after and lost notifications.
        return max(self.poll_interval, 1.0) if self.listening else self.poll_interval

    def _dispatch(self, info: TaskInfo) -> None:
        handle = RunHandle(info, self.store, self.worker_id)
        with self._lock:
            self._active[handle.run_id] = handle
            self._busy += 1
        live_runs.add(handle)
        if info.options.timeout is not None:
            self._watchdog.watch(handle, info.options.timeout)
        self._jobs.put(handle)

    def _after_db_error(self, what: str, error: Exception, errors: int) -> None:
        delay = min(0.1 * 2**errors, 10.0)
        logger.warning("Database error during %s (%s); retrying in %.1f s", what, error, delay)
        _reset_connection(self.store)
        self._stopping.wait(delay)

    # -- running --

    def _run_loop(self) -> None:
        while True:
            handle = self._jobs.get()
            if handle is None:
                break
            _notify_observers("started", handle.info, None)
            logger.debug("Task %s started (run %s)", handle.task_id, handle.run_id)
            try:
                end = execute(handle)
            except BaseException:  # execute never raises; a worker thread must not die anyway
                logger.exception("Unexpected error running %s", handle.task_id)
                end = None
            handle.returned = True
            self._ends.put((end, handle, True))
        _close_thread_connections()

    def _expire(self, handle: RunHandle) -> None:
        """The watchdog's call: the deadline passed; end the record FAILED, first cause wins."""
        with self._lock:
            live = self._active.get(handle.run_id) is handle
        if live and handle.request_cancel(CancelReason.TIMEOUT):
            logger.warning(
                "Task %s timed out after %g s", handle.task_id, handle.info.options.timeout
            )
            self._ends.put((handle.timed_out_end(), handle, False))

    # -- finishing --

    def _finisher_loop(self) -> None:
        while True:
            first = self._ends.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < FINISH_BATCH:
                try:
                    item = self._ends.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._ends.put(None)
                    break
                batch.append(item)
            self._write_ends(batch)
        _close_thread_connections()

    def _write_ends(self, batch: list[tuple[RunEnd | None, RunHandle, bool]]) -> None:
        ends = [end for end, _h, _r in batch if end is not None]
        won = self._finish_with_retry(ends) if ends else []
        outcome = dict(zip((id(e) for e in ends), won, strict=True))
        for end, handle, release in batch:
            if end is not None:
                self._log_end(handle, end, outcome[id(end)])
                if outcome[id(end)]:
                    _notify_observers("finished", handle.info, end)
                elif handle.token.reason is CancelReason.USER:
                    # cancel_task recorded this run's end before the run stopped: the
                    # run still finished, as what the record says (django.tasks signals).
                    stored = handle.cancelled_end(CancelReason.USER)
                    _notify_observers("finished", handle.info, stored)
            if release:
                self._release(handle)

    def _finish_with_retry(self, ends: list[RunEnd]) -> list[bool]:
        errors = 0
        while True:
            try:
                return self.store.finish_runs(ends)
            except (OperationalError, InterfaceError) as e:
                # A terminal state is never dropped: keep trying until the database answers.
                errors += 1
                delay = min(0.1 * 2**errors, 10.0)
                logger.warning("Could not record %d run ends (%s); retrying", len(ends), e)
                _reset_connection(self.store)
                time.sleep(delay)
            except DatabaseError as e:
                # The database refuses the data itself: retrying would block every other end.
                return self._finish_one_by_one(ends, e)

    def _finish_one_by_one(self, ends: list[RunEnd], error: DatabaseError) -> list[bool]:
        if len(ends) > 1:
            return [self._finish_with_retry([end])[0] for end in ends]
        end = ends[0]
        logger.error("The database refused the end of task %s: %s", end.task_id, error)
        failure = TaskFailure(
            f"{type(error).__module__}.{type(error).__qualname__}",
            f"The task ended {end.status} but the database refused to store its outcome: "
            + str(error).replace("\x00", "\\x00")[:2000],
        )
        fallback = replace(end, status=TaskStatus.FAILED, result=None, error=failure.to_json())
        return self._finish_with_retry([fallback])

    def _log_end(self, handle: RunHandle, end: RunEnd, won: bool) -> None:
        took = time.monotonic() - handle.started
        if not won:
            logger.info(
                "Task %s run %s ended %s after %.3f s, but its record had moved on "
                "(cancelled, timed out, superseded or recovered); nothing written",
                handle.task_id,
                handle.run_id,
                end.status,
                took,
            )
        elif end.status == TaskStatus.FAILED:
            message = (end.error or {}).get("message", "")
            logger.warning("Task %s failed after %.3f s: %s", handle.task_id, took, message)
        else:
            logger.info("Task %s %s in %.3f s", handle.task_id, end.status.lower(), took)

    def _release(self, handle: RunHandle) -> None:
        live_runs.discard(handle)
        with self._lock:
            if self._active.get(handle.run_id) is handle:
                del self._active[handle.run_id]
            self._busy -= 1
            self._lock.notify_all()
        self._wake.set()

    # -- housekeeping --

    def _housekeeping_loop(self) -> None:
        due = {"heartbeat": 0.0, "zombies": 0.0, "cleanup": 0.0, "cancels": 0.0}
        while not self._stopping.is_set():
            now = time.monotonic()
            try:
                self._housekeeping_tick(now, due)
            except DatabaseError as e:
                logger.warning("Database error during housekeeping (%s)", e)
                _reset_connection(self.store)
            except Exception:
                logger.exception("Housekeeping failed; continuing")
            self._check_cancels.wait(CANCEL_POLL)
        _close_thread_connections()

    def _housekeeping_tick(self, now: float, due: dict[str, float]) -> None:
        if self._check_cancels.is_set() or now >= due["cancels"]:
            self._check_cancels.clear()
            due["cancels"] = now + CANCEL_POLL
            self._deliver_cancels()
        if now >= due["heartbeat"]:
            due["heartbeat"] = now + self.heartbeat_interval
            self._heartbeat()
        if self.recover_zombies and now >= due["zombies"]:
            due["zombies"] = now + self.lease_timeout / 2
            self._sweep_zombies()
        if now >= due["cleanup"]:
            due["cleanup"] = now + workers_settings.CLEANUP_INTERVAL
            self.cleanup()

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
            if handle is not None and handle.request_cancel(reason):
                logger.info("Task %s asked to stop (%s)", task_id, reason)

    def _heartbeat(self) -> None:
        if not self.store.heartbeat(self.worker_id, clock.now()):
            logger.warning(
                "Lease of %s was lost (declared dead); registering again", self.worker_id
            )
            self._register()

    def _sweep_zombies(self) -> None:
        dead = [
            w.id
            for w in self.store.list_workers()
            if w.host == self.host and w.id != self.worker_id and not _pid_alive(w.pid)
        ]
        for found in self.store.recover_zombies(
            lease_timeout=self.lease_timeout, now=clock.now(), dead=dead
        ):
            logger.warning(
                "Recovered task %s of a dead worker: now %s", found.task_id, found.status
            )
        if dead:
            self._wake.set()

    def cleanup(self) -> int:
        """Delete finished records older than their retention, in bounded batches."""
        deleted = 0
        batch = workers_settings.CLEANUP_BATCH
        for status, seconds in (workers_settings.RETENTION or {}).items():
            if seconds is None:
                continue
            before = clock.now() - timedelta(seconds=seconds)
            for _ in range(100):  # at most 100 batches a pass; the next pass goes on
                n = self.store.delete_finished(TaskStatus(status), before, batch)
                deleted += n
                if n < batch:
                    break
        if deleted:
            logger.info("Cleanup deleted %d finished tasks", deleted)
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

        Returns True if every run settled. A run still going at the deadline is
        left RUNNING for the zombie sweep; the drain never writes its state.
        """
        self.request_stop()
        with self._lock:
            in_flight = list(self._active.values())
        for handle in in_flight:
            handle.request_cancel(CancelReason.SHUTDOWN)
        if in_flight:
            logger.info("Draining %d running tasks (up to %g s)", len(in_flight), drain_timeout)
        deadline = time.monotonic() + drain_timeout
        with self._lock:
            while self._busy and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)
            settled = not self._busy
        if not settled:
            logger.warning(
                "%d tasks still running after %g s; leaving them to the zombie sweep",
                self._busy,
                drain_timeout,
            )
        if not self.store.durable:
            self._abandon_pending()
        self._stop_threads(settled)
        try:
            self.store.remove_worker(self.worker_id)
        except DatabaseError as e:
            logger.warning("Could not remove the lease of %s (%s)", self.worker_id, e)
        _close_thread_connections()
        return settled

    def _abandon_pending(self) -> None:
        """In-memory store: nothing will run what is queued, so record it cancelled."""
        for info in self.store.list_tasks(user_id=None, status=TaskStatus.PENDING, limit=10**9):
            if self.queues is None or info.queue in self.queues:
                self.store.try_transition(
                    info.id,
                    info.run_id,
                    [TaskStatus.PENDING],
                    TaskStatus.CANCELLED,
                    **cancelled_fields(CancelReason.SHUTDOWN),
                )

    def _stop_threads(self, settled: bool) -> None:
        for _ in range(self.concurrency):
            self._jobs.put(None)
        self._ends.put(None)
        self._watchdog.stop()
        if self._listener is not None:
            self._listener.stop()
        self._check_cancels.set()
        if settled:
            for thread in self._threads:
                thread.join(timeout=5.0)


def _or_setting(value: float | None, name: str) -> float:
    return float(getattr(workers_settings, name) if value is None else value)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reset_connection(store: WorkerStore) -> None:
    alias = getattr(store, "using", None)
    if alias is None:
        return
    with contextlib.suppress(DatabaseError):
        connections[alias].close()


def _close_thread_connections() -> None:
    connections.close_all()


__all__ = ["WorkerRuntime", "add_run_observer"]
