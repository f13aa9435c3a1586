"""One run of one task in this process: its token, its progress, and how it ends.

``RunHandle`` is the live object behind ``current_run()``. ``execute`` calls
the task, retries it with capped exponential backoff while the token allows,
and returns the run's terminal write as a ``RunEnd``; it never raises, so a
misbehaving task cannot take its worker thread down.
"""

from __future__ import annotations

import logging
import random
import time
import traceback
from dataclasses import replace
from typing import Any

from django_workers import clock
from django_workers.cancellation import CancelReason, CancelToken, cancel_message
from django_workers.conf import workers_settings
from django_workers.exceptions import (
    ArgumentsNotSerializable,
    ResultTooLarge,
    TaskCancelled,
    TaskTimeoutError,
)
from django_workers.info import TaskFailure, TaskInfo, TaskStatus
from django_workers.references import json_size, to_json
from django_workers.runtime import invoke as invoking
from django_workers.runtime.registry import bind_current, unbind_current
from django_workers.stores.base import RunEnd, WorkerStore

logger = logging.getLogger(__name__)


class RunHandle:
    """The live state of one run; keyed by its run id, never by task id."""

    def __init__(self, info: TaskInfo, store: WorkerStore, worker_id: str) -> None:
        self.info = info
        self.run_id = info.run_id
        self.task_id = info.id
        self.store = store
        self.worker_id = worker_id
        self.token = CancelToken()
        # Set by the run thread once the task returned (its end may not be written yet).
        self.returned = False
        self.started = time.monotonic()
        self._progress = info.progress
        self._attempts = info.attempts
        self._last_progress_write = 0.0

    def snapshot(self) -> TaskInfo:
        """The run as its task sees it now, carrying its token."""
        return replace(
            self.info,
            progress=self._progress,
            attempts=self._attempts,
            cancel_reason=self.token.reason,
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

    def end(self, status: TaskStatus, **fields: Any) -> RunEnd:
        """The terminal write of this run."""
        return RunEnd(
            task_id=self.task_id,
            run_id=self.run_id,
            worker_id=self.worker_id,
            status=status,
            finished_at=clock.now(),
            **fields,
        )

    def cancelled_end(self, reason: CancelReason) -> RunEnd:
        message = cancel_message(reason, self.info.options.timeout)
        if reason is CancelReason.TIMEOUT:
            return self.timed_out_end()
        return self.end(
            TaskStatus.CANCELLED,
            cancel_reason=reason,
            error=TaskFailure(_path(TaskCancelled), message).to_json(),
        )

    def timed_out_end(self) -> RunEnd:
        """FAILED with TaskTimeoutError: what the watchdog writes when the deadline passes."""
        message = cancel_message(CancelReason.TIMEOUT, self.info.options.timeout)
        return self.end(
            TaskStatus.FAILED,
            cancel_reason=CancelReason.TIMEOUT,
            error=TaskFailure(_path(TaskTimeoutError), message).to_json(),
        )


def execute(handle: RunHandle) -> RunEnd | None:
    """Run the task to its end (retries included); None if it lost its run on the way."""
    bound = bind_current(handle)
    try:
        while True:
            try:
                value = invoking.invoke(handle.snapshot())
            except TaskCancelled as e:
                reason = handle.token.reason if handle.token.requested else CancelReason(e.reason)
                return handle.cancelled_end(reason)
            except BaseException as e:  # a task may raise anything, SystemExit included
                failure = failure_of(e)
                if handle.token.requested or not _retries_left(handle):
                    return handle.end(TaskStatus.FAILED, error=failure.to_json())
                if not _wait_to_retry(handle, failure):
                    return _end_after_wait(handle)
                continue
            return _completed(handle, value)
    finally:
        unbind_current(bound)


def _completed(handle: RunHandle, value: Any) -> RunEnd:
    try:
        result = to_json(value, "The task's return value")
        size = json_size(result)
    except ArgumentsNotSerializable as e:
        return handle.end(TaskStatus.FAILED, error=failure_of(e).to_json())
    limit = workers_settings.RESULT_MAX_BYTES
    if size > limit:
        error = ResultTooLarge(
            f"The result is {size} bytes of JSON; at most {limit} are stored "
            "(DJANGO_WORKERS['RESULT_MAX_BYTES']). Store large data elsewhere and return a "
            "reference to it."
        )
        return handle.end(TaskStatus.FAILED, error=failure_of(error).to_json())
    return handle.end(TaskStatus.COMPLETED, result=result, progress=100.0)


def _retries_left(handle: RunHandle) -> bool:
    return handle._attempts <= handle.info.options.retries


def _wait_to_retry(handle: RunHandle, failure: TaskFailure) -> bool:
    """Back off, then count the next attempt; False if the token or the fence stops us."""
    delay = backoff(handle.info.options, handle._attempts)
    logger.info(
        "Task %s attempt %d failed (%s); retrying in %.2f s",
        handle.task_id,
        handle._attempts,
        failure.type,
        delay,
    )
    if handle.token.wait(delay):
        return False
    attempts = handle._attempts + 1
    if not handle.write_while_running(attempts=attempts, error=failure.to_json()):
        return False
    handle._attempts = attempts
    return True


def _end_after_wait(handle: RunHandle) -> RunEnd | None:
    """A backoff cut short: by the token (the run ends CANCELLED) or by a lost fence (None)."""
    if handle.token.requested:
        return handle.cancelled_end(handle.token.reason)
    return None


def backoff(options: Any, attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``: exponential, capped, with jitter."""
    base = options.retry_backoff
    cap = options.retry_backoff_max
    base = workers_settings.RETRY_BACKOFF if base is None else base
    cap = workers_settings.RETRY_BACKOFF_MAX if cap is None else cap
    delay = min(cap, base * 2 ** max(attempt - 1, 0))
    if options.retry_jitter:
        delay = delay / 2 + random.uniform(0, delay / 2)
    return delay


def failure_of(error: BaseException) -> TaskFailure:
    """Record an exception as its type's dotted name, its message and its traceback."""
    return TaskFailure(
        _path(type(error)),
        _storable(str(error)),
        _storable("".join(traceback.format_exception(error))),
    )


def _storable(text: str) -> str:
    """Text every database can keep in JSON (PostgreSQL refuses NUL characters)."""
    return text.replace("\x00", "\\x00")


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
