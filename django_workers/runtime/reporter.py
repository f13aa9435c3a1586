"""What a runtime hands off because it can block: log lines and signal receivers.

A log handler writing to a pipe nobody reads, or a slow ``run_finished``
receiver, blocks the thread that calls it. The claim loop, the end writer and
the housekeeper therefore never call them; they queue the call here, and one
reporter thread per runtime makes it. The ends of runs are logged, and their
signals sent, only after the ends are stored.

The reporter takes what was queued in one go, then waits ``GATHER`` seconds
before its next wake-up: a busy worker ends a batch of runs every few hundred
microseconds, and a thread woken for each batch took the interpreter lock
from the claim loop and the end writer as often (about a tenth of the time
of a one-process drain of no-op tasks). A line is therefore at most
``GATHER`` late.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections

from django_workers import clock, lifecycle
from django_workers.cancellation import CancelReason
from django_workers.info import TaskStatus
from django_workers.lifecycle import EndKind, TaskEnd
from django_workers.runtime.run import RunHandle, task_logger
from django_workers.signals import run_finished
from django_workers.stores import WorkerStore

logger = logging.getLogger(__name__)

#: One end the finisher wrote: the end, its run, and whether the function had returned.
EndItem = tuple[TaskEnd, RunHandle, bool]

#: Seconds the reporter lets calls gather after making the queued ones.
GATHER = 0.02


class Reporter:
    """One thread that makes the calls its runtime must not wait on, in order."""

    def __init__(self, gather: float = GATHER) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._gather = gather
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="workers-reporter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def report(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` on the reporter thread; never blocks."""
        self._calls.put(functools.partial(fn, *args))

    def stop(self, wait: float) -> bool:
        """Finish what is queued, then end; wait up to ``wait`` seconds for that.

        Returns whether the thread has ended (with ``wait`` 0 it is not waited for).
        """
        self._stopping.set()  # no more gathering: what is queued goes out now
        self._calls.put(None)
        if wait > 0:
            self._thread.join(timeout=wait)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                call()
            except Exception:
                logger.exception("Reporting failed; continuing")
            if self._calls.empty():
                self._stopping.wait(self._gather)
        connections.close_all()


def worth_reporting(batch: Sequence[EndItem], won: Sequence[bool]) -> bool:
    """Whether ``report_ends`` would log or signal anything for this batch."""
    if task_logger.isEnabledFor(logging.INFO) or run_finished.has_listeners():
        return True
    return task_logger.isEnabledFor(logging.WARNING) and any(
        _is_warning(end, handle, ok) for (end, handle, _r), ok in zip(batch, won, strict=True)
    )


def report_ends(batch: Sequence[EndItem], won: Sequence[bool]) -> None:
    """Log each end the finisher wrote, and send ``run_finished`` for records that ended."""
    # Without receivers (no TASKS alias uses the backend, none of the site's own), the
    # ended snapshot is not even built: this runs once per task.
    listening = run_finished.has_listeners()
    for (end, handle, returned), ok in zip(batch, won, strict=True):
        _log_end(handle, end, ok, returned)
        if not listening:
            continue
        if ok and end.is_terminal:
            run_finished.send_robust(Reporter, info=lifecycle.ended_info(handle.info, end))
        elif returned and not ok and handle.token.reason is CancelReason.USER:
            # cancel_task recorded this run's end before the run stopped: the run still
            # finished, as the record says.
            stored = lifecycle.cancel_end(handle.info, end.finished_at or clock.now())
            run_finished.send_robust(Reporter, info=lifecycle.ended_info(handle.info, stored))


def report_recovered(store: WorkerStore, recovered: Sequence[TaskEnd]) -> None:
    """Log what the zombie sweep did, and send ``run_finished`` for the runs it ended."""
    for end in recovered:
        status = lifecycle.fields_of(end)["status"]
        logger.warning("Recovered task %s of a dead worker: now %s", end.task_id, status)
        if end.is_terminal:
            info = store.get_task_info(end.task_id)
            if info is not None and info.run_id == end.run_id:
                run_finished.send_robust(Reporter, info=info)


def _is_warning(end: TaskEnd, handle: RunHandle, won: bool) -> bool:
    """A failure of the task's own code, or a run another worker took over."""
    if not won:
        return handle.token.reason is CancelReason.SUPERSEDED
    return end.status == TaskStatus.FAILED and not _timed_out(end)


def _timed_out(end: TaskEnd) -> bool:
    return end.kind is EndKind.TIMEOUT or end.cancel_reason is CancelReason.TIMEOUT


def _log_end(handle: RunHandle, end: TaskEnd, won: bool, returned: bool) -> None:
    """Log one line per end: INFO for the normal ones, WARNING for failures and takeovers."""
    warning = _is_warning(end, handle, won)
    if not task_logger.isEnabledFor(logging.WARNING if warning else logging.INFO):
        return
    took = time.monotonic() - handle.started
    if won:
        _log_won(handle, end, took)
    elif handle.token.reason is CancelReason.SUPERSEDED:
        task_logger.warning(
            "Task %s run %s ended %s after %.3f s, but this worker had lost its lease and "
            "another worker recovered the task; this run's end was not written",
            handle.task_id,
            handle.run_id,
            end.status,
            took,
        )
    elif returned and handle.token.reason is CancelReason.USER:
        task_logger.info("Task %s cancelled after %.3f s", handle.task_id, took)
    elif returned and handle.token.requested:
        # The stop request's own end (a timeout) was logged when it was written.
        task_logger.debug(
            "Task %s returned %.3f s after it was asked to stop (%s)",
            handle.task_id,
            took,
            handle.token.reason,
        )
    else:
        task_logger.info(
            "Task %s ended %s after %.3f s, but its record had already ended (cancelled or "
            "recovered meanwhile); this run's end was not written",
            handle.task_id,
            end.status,
            took,
        )


def _log_won(handle: RunHandle, end: TaskEnd, took: float) -> None:
    if end.kind is EndKind.RETRY:
        error = end.error or {}
        wait = (end.run_after - clock.now()).total_seconds() if end.run_after else 0.0
        task_logger.info(
            "Task %s attempt %d of %d failed after %.3f s (%s: %s); retrying in %.2f s",
            handle.task_id,
            handle.info.attempts,
            handle.info.options.retries + 1,
            took,
            error.get("type", ""),
            error.get("message", ""),
            max(wait, 0.0),
        )
    elif end.kind is EndKind.RELEASE:
        task_logger.info(
            "Task %s given back to its queue after %.3f s: it stopped for the shutdown",
            handle.task_id,
            took,
        )
    elif _timed_out(end):
        task_logger.info(
            "Task %s timed out after %g s; ended FAILED",
            handle.task_id,
            handle.info.options.timeout,
        )
    elif end.status == TaskStatus.FAILED:
        error = end.error or {}
        task_logger.warning(
            "Task %s failed after %.3f s: %s: %s",
            handle.task_id,
            took,
            error.get("type", ""),
            error.get("message", ""),
        )
        if error.get("traceback") and task_logger.isEnabledFor(logging.DEBUG):
            task_logger.debug("Task %s traceback:\n%s", handle.task_id, error["traceback"])
    else:
        task_logger.info("Task %s %s in %.3f s", handle.task_id, end.status.lower(), took)
