"""One run of one task in this process: its token, its progress, and how it ends.

``RunHandle`` is the live object behind ``current_run()``. ``execute`` calls
the task once and returns the attempt's end as a ``TaskEnd``; it never raises,
so a misbehaving task cannot take its worker thread down. A failed attempt
with retries left ends as a retry: its record goes back to PENDING until the
backoff has passed, and any worker takes the next attempt; this thread does
not wait. The runtime starts each attempt as Django starts a request: a
connection of the thread that is broken or past its ``CONN_MAX_AGE`` is closed
first (``fresh_connections``); ``run_tasks`` in tests leaves the test's
connections alone, as Django's test client does.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.db import connections

from django_workers import clock, lifecycle
from django_workers.bounds import (
    ERROR_MESSAGE_MAX_LENGTH,
    SECONDS_MAX,
    TRACEBACK_MAX_LENGTH,
    fit,
)
from django_workers.cancellation import CancelReason, CancelToken
from django_workers.conf import workers_settings
from django_workers.engine.context import WorkflowContext
from django_workers.engine.records import UNDO_SUFFIX
from django_workers.exceptions import (
    ArgumentsNotSerializable,
    ResultTooLarge,
    Retry,
    TaskCancelled,
    TaskNotAllowed,
    TaskTimeoutError,
)
from django_workers.info import TaskFailure, TaskInfo, TaskStatus, class_path
from django_workers.lifecycle import TaskEnd
from django_workers.live import bind_current, unbind_current
from django_workers.options import MAX_RETRIES
from django_workers.references import to_sized_json
from django_workers.runtime import invoke as invoking
from django_workers.stores.base import WorkerStore

#: The per-task lines (started, retried, ended), so that a site can silence them alone.
task_logger = logging.getLogger("django_workers.runtime.tasks")

#: A claimed run's life in this process: queued for a thread, started, or given back.
QUEUED, STARTED, RELEASED = "queued", "started", "released"


class RunHandle:
    """The live state of one run; keyed by its run id, never by task id."""

    def __init__(
        self,
        info: TaskInfo,
        store: WorkerStore,
        worker_id: str,
        context_factory: invoking.ContextFactory | None = None,
    ) -> None:
        self.info = info
        self.run_id = info.run_id
        self.task_id = info.id
        self.store = store
        self.worker_id = worker_id
        #: Builds the first argument of a ``takes_context`` task (its owner's choice).
        self.context_factory = context_factory
        self.token = CancelToken()
        # Set by the run thread once the task returned (its end may not be written yet).
        self.returned = False
        self.started = time.monotonic()
        self._progress = info.progress
        self._attempts = info.attempts
        self._errors = [f.to_json() for f in info.errors]
        self._last_progress_write = 0.0
        self._state = QUEUED
        self._state_lock = threading.Lock()
        self._workflow = WorkflowContext(info, store) if info.workflow else None
        #: When the task's timeout runs out (the database's clock): it counts from the
        #: task's first start and bounds all its attempts; None without a timeout.
        self.deadline: datetime | None = None
        if info.options.timeout is not None and info.started_at is not None:
            self.deadline = info.started_at + timedelta(seconds=info.options.timeout)

    def seconds_left(self) -> float | None:
        """Seconds until the deadline (0 if it passed); None without a timeout."""
        if self.deadline is None:
            return None
        return max((self.deadline - clock.now()).total_seconds(), 0.0)

    def _move(self, to: str) -> bool:
        with self._state_lock:
            if self._state != QUEUED:
                return False
            self._state = to
            return True

    def try_start(self) -> bool:
        """Claim the run for a run thread; False if a stop gave it back first."""
        return self._move(STARTED)

    def try_release(self) -> bool:
        """Give a run that never started back to its queue; False if it has started."""
        return self._move(RELEASED)

    def pre_run_check(self) -> bool:
        """Whether this run may call its function: a workflow's node asks its workflow first.

        A node its workflow no longer wants (failed fast, cancelled) ends CANCELLED here.
        """
        return not self.info.workflow or self.store.begin_runs([self.info])[0]

    def snapshot(self) -> TaskInfo:
        """The run as its task sees it now, carrying its token."""
        return replace(
            self.info,
            progress=self._progress,
            attempts=self._attempts,
            errors=lifecycle.failures_of(self._errors),
            cancel_reason=self.token.reason,
            workflow=self._workflow,
            _token=self.token,
        )

    def report_progress(self, pct: float) -> None:
        """Keep ``pct`` live and store it, at most once per PROGRESS_THROTTLE seconds."""
        self._progress = pct
        now = time.monotonic()
        if pct < 100 and now - self._last_progress_write < workers_settings.PROGRESS_THROTTLE:
            return
        self._last_progress_write = now
        self.write_while_running(progress=pct)

    def write_while_running(self, **fields: Any) -> bool:
        """Write state fields while the record is still this run's claim; False if it is not."""
        return self.store.try_transition(
            self.task_id,
            self.run_id,
            [TaskStatus.RUNNING],
            TaskStatus.RUNNING,
            claimed_by=self.worker_id,
            **fields,
        )

    def request_cancel(self, reason: CancelReason) -> bool:
        """Set the token's reason if none is set yet (first cause wins)."""
        return self.token._request(reason)

    def end(self, status: TaskStatus, **fields: Any) -> TaskEnd:
        """This run's own end, once its function returned."""
        return lifecycle.run_end(self.info, self.worker_id, status, clock.now(), **fields)

    def failed_end(self, failure: TaskFailure) -> TaskEnd:
        errors = lifecycle.with_failure(self._errors, failure)
        return self.end(TaskStatus.FAILED, error=failure.to_json(), errors=errors)

    def cancelled_end(self, reason: CancelReason) -> TaskEnd:
        """The run's own end after it stopped for ``reason``."""
        if reason is CancelReason.TIMEOUT:
            failure = lifecycle.timeout_failure(self.info.options.timeout)
            return self.end(
                TaskStatus.FAILED,
                cancel_reason=CancelReason.TIMEOUT,
                error=failure.to_json(),
                errors=lifecycle.with_failure(self._errors, failure),
            )
        return self.end(
            TaskStatus.CANCELLED,
            cancel_reason=reason,
            error=lifecycle.cancelled_error(reason),
        )

    def timed_out_end(self) -> TaskEnd:
        """FAILED with TaskTimeoutError, written by the watchdog while the function runs."""
        return lifecycle.timeout_end(self.info, self.worker_id, clock.now(), self._errors)

    def release_end(self) -> TaskEnd:
        return lifecycle.release_end(self.info, self.worker_id)

    def retry_end(self, failure: TaskFailure, delay: float) -> TaskEnd:
        """This attempt failed: PENDING again in ``delay`` seconds, or FAILED past the deadline."""
        run_after = clock.now() + timedelta(seconds=delay)
        if self.deadline is not None and run_after >= self.deadline:
            # The next attempt could not start before the timeout: end it now instead.
            self._errors = lifecycle.with_failure(self._errors, failure)
            return self.cancelled_end(CancelReason.TIMEOUT)
        return lifecycle.retry_end(self.info, self.worker_id, failure, self._errors, run_after)


def execute(handle: RunHandle) -> TaskEnd:
    """Run one attempt of the task and return how it ended: its end, or a retry."""
    if handle.seconds_left() == 0.0:
        # Claimed after its deadline (a retry's, or one given back): it does not start.
        return handle.cancelled_end(CancelReason.TIMEOUT)
    bound = bind_current(handle)
    try:
        try:
            value = invoking.invoke(handle.info, handle.snapshot, handle.context_factory)
        except TaskCancelled as e:
            reason = handle.token.reason if handle.token.requested else CancelReason(e.reason)
            if reason is CancelReason.SHUTDOWN:
                return handle.release_end()  # stopped by the drain: the next worker runs it
            return handle.cancelled_end(reason)
        except BaseException as e:  # a task may raise anything, SystemExit included
            return _failed(handle, e)
        if handle.token.reason is CancelReason.SHUTDOWN and handle.token.observed:
            # It saw the drain's request and returned early: its work is not done.
            return handle.release_end()
        try:
            return _completed(handle, value)
        except Exception as e:  # a wrong setting or a bug: FAILED with the cause, not RUNNING
            return handle.failed_end(failure_of(e))
    finally:
        unbind_current(bound)


def _failed(handle: RunHandle, error: BaseException) -> TaskEnd:
    """The end of an attempt that raised: a retry if the task may have another, else FAILED."""
    if not _may_retry(handle, error):
        # With no retry left, a Retry fails the task with the error it was raised from.
        if isinstance(error, Retry) and error.__cause__ is not None:
            error = error.__cause__
        return handle.failed_end(failure_of(error))
    asked = error.after if isinstance(error, Retry) else None
    delay = backoff(handle.info.options, handle._attempts) if asked is None else asked
    return handle.retry_end(failure_of(error), delay)


def _may_retry(handle: RunHandle, error: BaseException) -> bool:
    reason = handle.token.reason
    if reason is not CancelReason.NONE and reason is not CancelReason.SHUTDOWN:
        return False  # cancelled, timed out or superseded: no attempt after this one
    if isinstance(error, TaskTimeoutError | TaskCancelled | TaskNotAllowed):
        return False
    options = handle.info.options
    # A Retry the task raised asks for one; retry_on and retry_never judge the rest.
    if not isinstance(error, Retry) and not options.retries_error(error):
        return False
    return handle._attempts <= options.retries


def _completed(handle: RunHandle, value: Any) -> TaskEnd:
    try:
        result, size = to_sized_json(value, "The task's return value")
    except ArgumentsNotSerializable as e:
        return handle.failed_end(failure_of(e))
    limit = workers_settings.RESULT_MAX_BYTES
    if size > limit and _is_undo(handle.info):
        # Nothing reads an undo's value, and its work is done: it is not kept, not failed.
        return handle.end(TaskStatus.COMPLETED, result=None, progress=100.0)
    if size > limit:
        error = ResultTooLarge(
            f"The result is {size} bytes of JSON; at most {limit} are stored "
            "(DJANGO_WORKERS['RESULT_MAX_BYTES']). Store large data elsewhere and return a "
            "reference to it."
        )
        return handle.failed_end(failure_of(error))
    return handle.end(TaskStatus.COMPLETED, result=result, progress=100.0)


def _is_undo(info: TaskInfo) -> bool:
    return info.node is not None and info.node.endswith(UNDO_SUFFIX)


def fresh_connections() -> None:
    """Close this thread's connections that are broken or past their age, as Django does
    around a request, so that a connection the server dropped fails one attempt at most.

    A connection inside a transaction belongs to the caller (a test running tasks in
    its own thread and transaction) and is left alone.
    """
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def backoff(options: Any, attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``: exponential, capped, with jitter."""
    base = workers_settings.seconds("RETRY_BACKOFF", options.retry_backoff)
    cap = workers_settings.seconds("RETRY_BACKOFF_MAX", options.retry_backoff_max)
    # Never past SECONDS_MAX, whatever the settings say: a longer wait overflows.
    delay = min(cap, base * 2.0 ** min(max(attempt - 1, 0), MAX_RETRIES), SECONDS_MAX)
    if options.retry_jitter:
        delay = delay / 2 + random.uniform(0, delay / 2)
    return delay


def failure_of(error: BaseException) -> TaskFailure:
    """Record an exception as its type's dotted name, its message and its traceback.

    Both are cut to fit (``bounds``) and made storable; an exception whose text
    cannot even be made is recorded as such.
    """
    return TaskFailure(
        class_path(type(error)),
        fit(_text_of(lambda: str(error)), ERROR_MESSAGE_MAX_LENGTH),
        fit(
            _text_of(lambda: "".join(traceback.format_exception(error))),
            TRACEBACK_MAX_LENGTH,
            keep_ends=True,
        ),
    )


def _text_of(make: Callable[[], str]) -> str:
    try:
        return make()
    except Exception as e:  # a task's exception whose __str__ raises, say
        return f"(its text could not be made: {type(e).__name__})"
