"""What a runtime hands off because it can block: log lines and signal receivers.

A log handler writing to a pipe nobody reads, or a slow ``run_finished``
receiver, blocks the thread that calls it. The claim loop, the end writer and
the housekeeper therefore never call them; they queue the call here, and one
reporter thread per runtime makes it. The ends of runs are logged, and their
signals sent, only after the ends are stored.
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
from django_workers.lifecycle import TaskEnd
from django_workers.runtime.run import RunHandle
from django_workers.signals import run_finished
from django_workers.stores import WorkerStore

logger = logging.getLogger(__name__)

#: One end the finisher wrote: the end, its run, and whether the function had returned.
EndItem = tuple[TaskEnd, RunHandle, bool]


class Reporter:
    """One thread that makes the calls its runtime must not wait on, in order."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="workers-reporter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def report(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` on the reporter thread; never blocks."""
        self._calls.put(functools.partial(fn, *args))

    def stop(self, wait: float) -> None:
        """Finish what is queued, then end; wait up to ``wait`` seconds for that."""
        self._calls.put(None)
        if wait > 0:
            self._thread.join(timeout=wait)

    def _loop(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                call()
            except Exception:
                logger.exception("Reporting failed; continuing")
        connections.close_all()


def worth_reporting(batch: Sequence[EndItem], won: Sequence[bool]) -> bool:
    """Whether ``report_ends`` would log or signal anything for this batch."""
    if logger.isEnabledFor(logging.INFO) or run_finished.has_listeners():
        return True
    return logger.isEnabledFor(logging.WARNING) and any(
        ok and end.status == TaskStatus.FAILED for (end, _h, _r), ok in zip(batch, won, strict=True)
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


def _log_end(handle: RunHandle, end: TaskEnd, won: bool, returned: bool) -> None:
    failed = won and end.status == TaskStatus.FAILED
    if not logger.isEnabledFor(logging.WARNING if failed else logging.INFO):
        return
    took = time.monotonic() - handle.started
    if not won and returned and handle.token.requested:
        logger.info(
            "Task %s returned %.3f s after it was asked to stop (%s); its record already "
            "shows that end",
            handle.task_id,
            took,
            handle.token.reason,
        )
    elif not won:
        logger.info(
            "Task %s run %s ended %s after %.3f s, but its record had moved on "
            "(cancelled, timed out, superseded or recovered); nothing written",
            handle.task_id,
            handle.run_id,
            end.status,
            took,
        )
    elif end.status == TaskStatus.FAILED:
        error = end.error or {}
        logger.warning(
            "Task %s failed after %.3f s: %s: %s",
            handle.task_id,
            took,
            error.get("type", ""),
            error.get("message", ""),
        )
    else:
        logger.info("Task %s %s in %.3f s", handle.task_id, end.status.lower(), took)
