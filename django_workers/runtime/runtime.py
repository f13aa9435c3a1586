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

Each part is a class of its own module that ``WorkerRuntime`` inherits, all
sharing the fields of ``base.RuntimeBase`` (one ``_lock``): ``claiming``,
``ending`` (the finisher), ``housekeeping`` (lease, cancels, zombies, cleanup)
and ``draining`` (the stop). This module starts them and runs the run threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError, connections

from django_workers import clock
from django_workers.local_wake import runtime_socket_name
from django_workers.notices import PROBE_TIMEOUT, Listener
from django_workers.runtime.base import (
    EXIT_DRAIN_TIMEOUT,
    EXIT_LEASE_TAKEN,
    EXIT_OK,
    EXIT_STALLED,
    logger,
)
from django_workers.runtime.draining import Draining
from django_workers.runtime.outage import unreachable
from django_workers.runtime.run import execute, failure_of, fresh_connections, task_logger
from django_workers.runtime.wakeup import LocalListener
from django_workers.signals import run_started


class WorkerRuntime(Draining):
    """Claims tasks from a store and runs them on a pool of threads, until stopped."""

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


__all__ = ["EXIT_DRAIN_TIMEOUT", "EXIT_LEASE_TAKEN", "EXIT_OK", "EXIT_STALLED", "WorkerRuntime"]
