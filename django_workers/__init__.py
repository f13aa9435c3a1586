"""django-workers: durable background tasks for Django, stored in the site's own database."""

from __future__ import annotations

from importlib import metadata

from django_workers.api import (
    asubmit_task,
    asubmit_tasks,
    aupdate_progress,
    cancel_task,
    get_all_tasks,
    get_task_status,
    submit_task,
    submit_tasks,
    update_progress,
)
from django_workers.authority import Owner, System, owner_of, scoped_task_key
from django_workers.cancellation import CancelReason
from django_workers.decorator import task
from django_workers.exceptions import (
    ArgumentsNotSerializable,
    ArgumentsTooLarge,
    AuthorizationError,
    DatabaseUnavailable,
    InvalidSchedule,
    InvalidTaskKey,
    InvalidTaskOptions,
    InvalidWorkflow,
    RemoteTaskError,
    ResultTooLarge,
    Retry,
    RuntimeInTransaction,
    TaskAlreadyFinished,
    TaskCancelled,
    TaskNotAllowed,
    TaskNotFound,
    TaskNotImportable,
    TaskTimeoutError,
    WorkerLost,
    WorkersError,
    WorkflowExists,
)
from django_workers.handles import TaskHandle, asubmit, open_task, submit
from django_workers.info import TaskFailure, TaskInfo, TaskStatus, cancel_reason, cancel_requested
from django_workers.live import current_run
from django_workers.options import TaskOptions
from django_workers.periodic import periodic
from django_workers.stores import default_store, set_queue_authorizer, set_watch_authorizer
from django_workers.submission import TaskSubmission
from django_workers.workflows import (
    Workflow,
    WorkflowAlreadyFinished,
    WorkflowCancelNarrows,
    WorkflowCannotRerun,
    WorkflowHandle,
    WorkflowInfo,
    WorkflowNotFound,
    cancel_workflow,
    get_all_workflows,
    get_workflow_status,
    open_workflow,
    rerun_workflow,
)

try:
    # pyproject.toml is the one place the version is written; this reads what pip installed.
    __version__ = metadata.version("django-workers-db")
except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "ArgumentsNotSerializable",
    "ArgumentsTooLarge",
    "AuthorizationError",
    "CancelReason",
    "DatabaseUnavailable",
    "InvalidSchedule",
    "InvalidTaskKey",
    "InvalidTaskOptions",
    "InvalidWorkflow",
    "Owner",
    "RemoteTaskError",
    "ResultTooLarge",
    "Retry",
    "RuntimeInTransaction",
    "System",
    "TaskAlreadyFinished",
    "TaskCancelled",
    "TaskFailure",
    "TaskHandle",
    "TaskInfo",
    "TaskNotAllowed",
    "TaskNotFound",
    "TaskNotImportable",
    "TaskOptions",
    "TaskStatus",
    "TaskSubmission",
    "TaskTimeoutError",
    "WorkerLost",
    "WorkersError",
    "Workflow",
    "WorkflowAlreadyFinished",
    "WorkflowCancelNarrows",
    "WorkflowCannotRerun",
    "WorkflowExists",
    "WorkflowHandle",
    "WorkflowInfo",
    "WorkflowNotFound",
    "asubmit",
    "asubmit_task",
    "asubmit_tasks",
    "aupdate_progress",
    "cancel_reason",
    "cancel_requested",
    "cancel_task",
    "cancel_workflow",
    "current_run",
    "default_store",
    "get_all_tasks",
    "get_all_workflows",
    "get_task_status",
    "get_workflow_status",
    "open_task",
    "open_workflow",
    "owner_of",
    "periodic",
    "rerun_workflow",
    "scoped_task_key",
    "set_queue_authorizer",
    "set_watch_authorizer",
    "submit",
    "submit_task",
    "submit_tasks",
    "task",
    "update_progress",
]
