"""Every refusal django-workers makes, as one exception hierarchy.

Each exception says what was wrong and how to fix it; data a caller may need
is carried as attributes. Subclasses also derive from the built-in or Django
exception whose meaning matches, so generic handlers keep working.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.db import OperationalError

from django_workers.bounds import SECONDS_MAX


class WorkersError(Exception):
    """Base class of every django-workers error."""

    code = "workers_error"


class AuthorizationError(WorkersError, PermissionDenied):
    """The authority given may not do this."""

    code = "forbidden"


class TaskNotFound(WorkersError, ObjectDoesNotExist, LookupError):
    """No such task, or one the caller may not see (the two look the same)."""

    code = "not_found"

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(
            f"No task with id {task_id!r} is visible to this authority. Check the id "
            "returned by submit_task (it is not the key you passed) and the authority."
        )


class TaskAlreadyFinished(WorkersError):
    """The task has ended; it can no longer be cancelled."""

    code = "already_finished"

    def __init__(self, task_id: str, status: str) -> None:
        self.task_id = task_id
        self.status = status
        super().__init__(
            f"Task {task_id!r} has already ended ({status}); there is nothing to cancel."
        )


class TaskNotRetryable(WorkersError):
    """An operator's retry met a task that is live, or COMPLETED without being allowed."""

    code = "not_retryable"

    def __init__(self, task_id: str, status: str) -> None:
        self.task_id = task_id
        self.status = status
        hint = (
            "pass --completed to run it again"
            if status == "COMPLETED"
            else "it has not ended; cancel it first to run it afresh"
        )
        super().__init__(f"Task {task_id!r} is {status}, not FAILED or CANCELLED; {hint}.")


class InvalidTaskKey(WorkersError, ValueError):
    """A task key, id, owner id or scope is malformed."""

    code = "invalid_key"


class InvalidTaskOptions(WorkersError, ValueError):
    """A submit option (queue, priority, run_after, TaskOptions, paging) is out of range."""

    code = "invalid_options"


class TaskNotImportable(WorkersError, ValueError):
    """The task callable cannot be referenced by a dotted path a worker can import."""

    code = "not_importable"


class TaskNotAllowed(TaskNotImportable):
    """The path names no task a worker may run: it is outside the modules tasks live in.

    Raised at submit, and by a worker for a record that names such a path, which
    then ends FAILED without its module being imported (and is never retried).
    """

    code = "not_allowed"


class ArgumentsNotSerializable(WorkersError, TypeError):
    """Task arguments (or a result) cannot be stored as JSON."""

    code = "not_serializable"


class ArgumentsTooLarge(WorkersError, ValueError):
    """A task's args and kwargs are more JSON than DJANGO_WORKERS["ARGS_MAX_BYTES"] allows."""

    code = "arguments_too_large"

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"The task's args and kwargs are {size} bytes of JSON; at most {limit} are accepted "
            "(DJANGO_WORKERS['ARGS_MAX_BYTES']). Store large data elsewhere (a file, a model "
            "row) and pass its id or path."
        )


class InvalidSchedule(WorkersError, ValueError):
    """A periodic schedule is malformed: its key, cron, interval, time zone or catch-up policy."""

    code = "invalid_schedule"


class TaskTimeoutError(WorkersError, TimeoutError):
    """A run outlived its TaskOptions(timeout=...)."""

    code = "timeout"


class TaskCancelled(WorkersError):
    """The run's cancellation token was set; raised by info.raise_if_cancelled()."""

    code = "cancelled"

    def __init__(self, message: str = "Cancelled", reason: str = "user") -> None:
        self.reason = reason
        super().__init__(message)


class Retry(WorkersError):
    """Raised inside a task: end this attempt, and try again in ``after`` seconds.

    The attempt counts against the task's ``retries``; with none left, the task
    ends FAILED with the error this one was raised from (``raise Retry(...) from
    e``), or with this one. ``after`` (seconds or a ``timedelta``; None takes the
    task's backoff) is at most ten years.
    """

    code = "retry"

    def __init__(self, message: str = "", *, after: float | timedelta | None = None) -> None:
        if isinstance(after, timedelta):
            after = after.total_seconds()
        if after is not None and (
            isinstance(after, bool)
            or not isinstance(after, int | float)
            or not 0 <= after <= SECONDS_MAX
        ):
            raise ValueError(
                f"Retry(after=...) takes seconds from 0 to {SECONDS_MAX} (ten years) or a "
                f"timedelta, got {after!r}."
            )
        self.after = None if after is None else float(after)
        super().__init__(message or "The task asked to be tried again")


class ResultTooLarge(WorkersError, ValueError):
    """A run returned more JSON than DJANGO_WORKERS["RESULT_MAX_BYTES"] allows."""

    code = "result_too_large"


class WorkerLost(WorkersError):
    """The worker running a task ended or lost its lease first; the run was declared dead."""

    code = "worker_lost"


class DatabaseUnavailable(WorkersError, OperationalError):
    """The database could not be reached (down, restarting, or cut off) during a submit."""

    code = "database_unavailable"

    def __init__(self, action: str, cause: BaseException) -> None:
        self.action = action
        self.cause = cause
        first_line = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        super().__init__(
            f"Could not {action}: the database is unavailable ({first_line}). The submission "
            "may not have been stored: submit it again once the database is back (the same "
            "key joins a task that was stored, and starts no second one). To bound how long "
            "a call waits for a server that does not answer, set a connect timeout in "
            "DATABASES (for PostgreSQL, OPTIONS {'connect_timeout': 5})."
        )


class RuntimeInTransaction(WorkersError, RuntimeError):
    """A runtime was started where its threads cannot reach the caller's uncommitted data."""

    code = "runtime_in_transaction"


class TasksKeepComing(WorkersError, AssertionError):
    """``testing.run_tasks`` ran its most rounds and tasks still kept submitting tasks."""

    code = "tasks_keep_coming"


class WorkflowNotFound(WorkersError, ObjectDoesNotExist, LookupError):
    """No such workflow, or one the caller may not see (the two look the same)."""

    code = "not_found"

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        super().__init__(
            f"No workflow with id {workflow_id!r} is visible to this authority. Check the id "
            "the plan was scoped to (it is not the id you passed) and the authority."
        )


class WorkflowAlreadyFinished(WorkersError):
    """The workflow has ended (or is compensating); it can no longer be cancelled."""

    code = "already_finished"

    def __init__(self, workflow_id: str, state: str) -> None:
        self.workflow_id = workflow_id
        self.state = state
        super().__init__(
            f"Workflow {workflow_id!r} is {state}; only a running workflow can be cancelled."
        )


class WorkflowCancelNarrows(WorkersError):
    """A cancel without undo met an accepted cancel that undoes completed steps."""

    code = "cancel_narrows"

    def __init__(self, workflow_id: str, undos: Iterable[str]) -> None:
        self.workflow_id = workflow_id
        #: The nodes whose undo steps that cancel would drop.
        self.undos = tuple(undos)
        named = ", ".join(self.undos) or "none has completed yet"
        super().__init__(
            f"Workflow {workflow_id!r} is already being cancelled with undo; the undo steps of "
            f"its completed nodes ({named}) are to run. A cancel without undo would drop them: "
            "ask for that explicitly (drop_undo=True) if that is what you want."
        )


class WorkflowCannotRerun(WorkersError):
    """The workflow is not in an end it can be re-run from, or its plan is not the one named."""

    code = "cannot_rerun"

    def __init__(self, workflow_id: str, state: str, *, plan_hash: str | None = None) -> None:
        self.workflow_id = workflow_id
        self.state = state
        self.plan_hash = plan_hash
        super().__init__(f"Workflow {workflow_id!r} cannot be re-run: {self._why()}")

    def _why(self) -> str:
        if self.plan_hash is not None:
            return (
                f"its plan is not the one with hash {self.plan_hash[:12]} (the id was reused "
                "for another plan). Read its status again and re-run what it holds now."
            )
        if self.state == "compensated":
            return (
                "it was compensated, so the work of its completed steps was undone. Submit "
                "it again (under a new id, or after retention deletes it) to run every step."
            )
        if self.state == "completed":
            return "it completed; there is nothing to run again."
        return (
            f"it is {self.state}. Only a workflow that ended failed, cancelled or "
            "compensation_failed can be re-run; wait for it to end (handle.wait())."
        )


class WorkflowExists(WorkersError):
    """A different workflow plan was already submitted under this id."""

    code = "workflow_exists"

    def __init__(self, workflow_id: str, plan_hash: str, existing_hash: str) -> None:
        self.workflow_id = workflow_id
        self.plan_hash = plan_hash
        self.existing_hash = existing_hash
        super().__init__(
            f"Workflow {workflow_id!r} already exists with a different plan (hash "
            f"{existing_hash[:12]}, this one {plan_hash[:12]}). Submit the same plan to get its "
            "handle, or use a new workflow id."
        )


class InvalidWorkflow(WorkersError, ValueError):
    """A workflow plan is malformed; ``problems`` lists every mistake found, in order."""

    code = "invalid_workflow"

    def __init__(self, problems: str | Iterable[str]) -> None:
        self.problems = (problems,) if isinstance(problems, str) else tuple(problems)
        listed = "\n".join(f"- {problem}" for problem in self.problems)
        count = len(self.problems)
        super().__init__(
            f"The workflow is invalid ({count} problem{'' if count == 1 else 's'}):\n{listed}"
        )


class RemoteTaskError(WorkersError):
    """A task ended FAILED or CANCELLED; carries its exception type, message and traceback."""

    code = "remote_error"

    def __init__(self, type_name: str, message: str, traceback: str = "") -> None:
        self.type_name = type_name
        self.message = message
        self.traceback = traceback
        super().__init__(f"{type_name}: {message}")
