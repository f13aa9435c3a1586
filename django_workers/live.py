"""The runs live in this process, by run id, and the run the current thread executes.

Entries are keyed by run id, never task id: a task id outlives its runs, and
only the run that registered an entry may remove it.
"""

from __future__ import annotations

import contextvars
import threading
from typing import TYPE_CHECKING, Protocol

from django_workers.cancellation import CancelReason

if TYPE_CHECKING:
    from django_workers.info import TaskInfo


class LiveRun(Protocol):
    """What a running task exposes to the rest of the process."""

    run_id: str

    def snapshot(self) -> TaskInfo: ...

    def report_progress(self, pct: float) -> None: ...

    def request_cancel(self, reason: CancelReason) -> bool: ...


class LiveRuns:
    """Thread-safe index of the runs executing in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, LiveRun] = {}

    def add(self, run: LiveRun) -> None:
        with self._lock:
            self._runs[run.run_id] = run

    def discard(self, run: LiveRun) -> None:
        """Remove ``run`` if it is still the registered entry of its run id."""
        with self._lock:
            if self._runs.get(run.run_id) is run:
                del self._runs[run.run_id]

    def get(self, run_id: str) -> LiveRun | None:
        with self._lock:
            return self._runs.get(run_id)

    def request_cancel(self, run_id: str, reason: CancelReason) -> bool:
        """Set the token of a run of this process; False if it does not run here."""
        run = self.get(run_id)
        if run is None:
            return False
        run.request_cancel(reason)
        return True


live_runs = LiveRuns()

_current: contextvars.ContextVar[LiveRun | None] = contextvars.ContextVar(
    "django_workers_current_run", default=None
)


def current_run() -> TaskInfo:
    """Return the live snapshot of the run executing in this thread (inside a task only)."""
    run = _current.get()
    if run is None:
        raise RuntimeError(
            "current_run() is only available inside a task run by a django-workers runtime."
        )
    return run.snapshot()


def bind_current(run: LiveRun | None) -> contextvars.Token[LiveRun | None]:
    """Make ``run`` the current thread's run; returns the token to reset it."""
    return _current.set(run)


def unbind_current(token: contextvars.Token[LiveRun | None]) -> None:
    _current.reset(token)
