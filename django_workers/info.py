"""Task statuses and ``TaskInfo``, the immutable snapshot every read returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import models

from django_workers.cancellation import CancelReason, cancel_message
from django_workers.exceptions import TaskCancelled
from django_workers.options import TaskOptions

if TYPE_CHECKING:
    from django_workers.cancellation import CancelToken


class TaskStatus(models.TextChoices):
    """Where a task is in its life; terminal states change only by a re-run."""

    WAITING = "WAITING", "Waiting"  # a workflow node whose dependencies have not ended
    PENDING = "PENDING", "Pending"
    RUNNING = "RUNNING", "Running"
    COMPLETED = "COMPLETED", "Completed"
    FAILED = "FAILED", "Failed"
    CANCELLED = "CANCELLED", "Cancelled"


LIVE_STATUSES = frozenset({TaskStatus.WAITING, TaskStatus.PENDING, TaskStatus.RUNNING})
TERMINAL_STATUSES = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})


def class_path(cls: type) -> str:
    """The dotted name a failure records for an exception class."""
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True, slots=True)
class TaskFailure:
    """How a run failed: the exception type's dotted name, its message and traceback."""

    type: str
    message: str
    traceback: str = ""

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, "message": self.message, "traceback": self.traceback}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> TaskFailure | None:
        if not data:
            return None
        return cls(data.get("type", ""), data.get("message", ""), data.get("traceback", ""))


@dataclass(frozen=True, kw_only=True)
class TaskInfo:
    """A snapshot of one task record, or of a live run when the runtime made it."""

    id: str
    key: str
    owner: str | None
    scope: str
    queue: str
    task_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    run_after: datetime | None
    options: TaskOptions
    status: TaskStatus
    progress: float
    attempts: int
    result: Any
    error: TaskFailure | None
    cancel_reason: CancelReason
    run_id: str
    worker_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    watchers: tuple[str, ...]
    workflow: str | None = None
    node: str | None = None
    # The django.tasks backend alias it was enqueued through; None for submit_task.
    backend: str | None = None
    # Every failed attempt of this run (oldest first, the last few kept); ``error`` is the last.
    errors: tuple[TaskFailure, ...] = ()
    # The live run's token; only snapshots made by the runtime inside a run carry one.
    _token: CancelToken | None = field(default=None, repr=False, compare=False)

    @property
    def is_finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def retrying(self) -> bool:
        """True while the task waits to run again after a failed (or lost) attempt."""
        return self.status == TaskStatus.PENDING and self.attempts > 0

    @property
    def max_attempts(self) -> int:
        """How many attempts the task may make: its first and its ``retries``."""
        return self.options.retries + 1

    def retry_summary(self) -> str | None:
        """For a retrying task, which attempt comes next and when (UTC), else None."""
        if not self.retrying:
            return None
        summary = f"attempt {self.attempts + 1} of {self.max_attempts}"
        if self.run_after is None:
            return summary
        return f"{summary}, next at {self.run_after.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"

    @property
    def cancel_requested(self) -> bool:
        """True once this run was asked to stop (live runs), or the task ended CANCELLED."""
        if self._token is not None:
            return self._token.seen() is not CancelReason.NONE
        return self.status == TaskStatus.CANCELLED

    def raise_if_cancelled(self) -> None:
        """Raise TaskCancelled if this run was asked to stop; call it between steps."""
        if self._token is not None:
            reason = self._token.seen()
        elif self.status == TaskStatus.CANCELLED:
            reason = self.cancel_reason
        else:
            return
        if reason is not CancelReason.NONE:
            raise TaskCancelled(cancel_message(reason, self.options.timeout), reason=reason)


def cancel_requested(info: TaskInfo) -> bool:
    """Whether the run ``info`` describes was asked to stop (poll it inside a task)."""
    return info.cancel_requested


def cancel_reason(info: TaskInfo) -> CancelReason:
    """Why the run was asked to stop: user, timeout, superseded, shutdown; or none."""
    if info._token is not None:
        return info._token.seen()
    return info.cancel_reason
