"""``WorkersBackend``: django-workers as a backend of Django's Tasks framework.

``TASKS = {"default": {"BACKEND": "django_workers.backends.WorkersBackend"}}``
makes ``.enqueue()`` of every ``@task`` write a task record that ``runworkers``
executes. Such records are global-scope, System-authority tasks with a
generated id. The backend alias is kept in the record's options (``backend``):
that is how a worker knows to send Django's task signals, and how
``get_result`` tells these records from tasks submitted with ``submit_task``.
The system check ``django_workers.W002`` warns when no ``TASKS`` alias is it.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, cast

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from django_workers.api import get_task_status
from django_workers.authority import System
from django_workers.cancellation import cancel_message
from django_workers.documentation import docs_url
from django_workers.exceptions import (
    ArgumentsTooLarge,
    InvalidTaskKey,
    InvalidTaskOptions,
    TaskCancelled,
    TaskNotFound,
    TaskNotImportable,
)
from django_workers.info import TaskFailure, TaskInfo, TaskStatus, class_path
from django_workers.references import resolve
from django_workers.stores import default_store
from django_workers.submission import TaskSubmission, build_task, write_tasks

logger = logging.getLogger(__name__)

#: The key of a record's options that holds the alias it was enqueued through.
BACKEND_OPTION = "backend"

INSTALL_HINT = (
    "Add 'django_workers' to INSTALLED_APPS, run 'python manage.py migrate', and start "
    "'python manage.py runworkers' to execute the tasks."
)

#: How our statuses read in Django's vocabulary.
STATUSES: Mapping[TaskStatus, TaskResultStatus] = {
    TaskStatus.WAITING: TaskResultStatus.READY,
    TaskStatus.PENDING: TaskResultStatus.READY,
    TaskStatus.RUNNING: TaskResultStatus.RUNNING,
    TaskStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    TaskStatus.FAILED: TaskResultStatus.FAILED,
    TaskStatus.CANCELLED: TaskResultStatus.FAILED,
}


class WorkersBackend(BaseTaskBackend):
    """Enqueue ``@task`` functions as django-workers records; read them back as TaskResults."""

    # run_after is stored on the record, and the claim skips a task until then.
    supports_defer = True
    # The worker runs ``async def`` task functions to completion on its run thread.
    supports_async_task = True
    # Results live in the database, so any process can read them.
    supports_get_result = True
    # The claim takes the highest priority first, then the oldest.
    supports_priority = True

    def validate_task(self, task: Task[..., Any]) -> None:
        """Refuse, with InvalidTask, a task a worker in another process could not run."""
        super().validate_task(task)
        name = task.func.__qualname__
        if "<lambda>" in name:
            raise InvalidTask(
                "Task function must be a named function; a lambda cannot be imported."
            )
        if task.func.__module__ == "__main__":
            raise InvalidTask(
                f"Task function {name!r} is defined in __main__, which a worker cannot import; "
                "move it to a module of your project."
            )

    def enqueue[**P, T](
        self, task: Task[P, T], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> TaskResult[P, T]:
        """Write a global-scope record for ``task`` and return its READY TaskResult."""
        self._require_app()
        self.validate_task(task)
        # Refuse what Django's TaskResult would refuse, before anything is written.
        args = cast(list[Any], normalize_json(args))
        kwargs = cast(dict[str, Any], normalize_json(kwargs))
        spec = TaskSubmission(
            key=uuid.uuid4().hex, task=task, args=args, kwargs=kwargs, scope="global"
        )
        store = default_store()
        try:
            new = build_task(spec, System(), store)
        except (TaskNotImportable, InvalidTaskOptions, ArgumentsTooLarge) as e:
            raise InvalidTask(str(e)) from e
        new = dataclasses.replace(new, options={**new.options, BACKEND_OPTION: self.alias})
        write_tasks([new], System(), store)
        result: TaskResult[P, T] = TaskResult(
            task=task,
            id=new.id,
            status=TaskResultStatus.READY,
            enqueued_at=new.created_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=new.args,
            kwargs=new.kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The TaskResult of a record enqueued through a django.tasks backend."""
        self._require_app()
        try:
            info = get_task_status(str(result_id), System())
        except (TaskNotFound, InvalidTaskKey):
            raise TaskResultDoesNotExist(result_id) from None
        if info.backend is None:
            # Submitted with submit_task: reading it takes an authority, which Django's
            # API does not carry, so it stays out of django.tasks' reach.
            raise TaskResultDoesNotExist(result_id)
        return task_result_of(info)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        if apps.is_installed("django_workers"):
            return []
        return [
            Error(
                f"TASKS[{self.alias!r}] uses WorkersBackend, but django_workers is not installed.",
                hint=INSTALL_HINT,
                id="django_workers.E010",
            )
        ]

    def _require_app(self) -> None:
        # The records are this app's models: without it Django fails deep in the ORM.
        if not apps.is_installed("django_workers"):
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}] uses django_workers.backends.WorkersBackend, but "
                f"'django_workers' is not in INSTALLED_APPS. {INSTALL_HINT}"
            )


def task_result_of(info: TaskInfo) -> TaskResult[..., Any]:
    """Django's view of a task record (or of a live run's snapshot)."""
    task = _task_of(info)
    result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=info.id,
        status=STATUSES[info.status],
        enqueued_at=info.created_at,
        started_at=info.started_at,
        finished_at=info.finished_at,
        # One started_at per run; retries of a run happen inside it.
        last_attempted_at=info.started_at,
        args=info.args,
        kwargs=info.kwargs,
        backend=info.backend or task.backend,
        errors=_errors_of(info),
        # Django counts attempts as worker ids; a retry runs on the same worker.
        worker_ids=[info.worker_id or ""] * info.attempts,
    )
    if info.status == TaskStatus.COMPLETED:
        object.__setattr__(result, "_return_value", info.result)
    return result


def _task_of(info: TaskInfo) -> Task[..., Any]:
    target = resolve(info.task_path)
    if not isinstance(target, Task):
        raise TaskNotImportable(
            f"{info.task_path!r} is no longer a django.tasks Task (was its @task removed?); "
            "read this record with get_task_status instead."
        )
    try:
        return dataclasses.replace(
            target,
            priority=info.priority,
            queue_name=info.queue,
            run_after=info.run_after,
            backend=info.backend or target.backend,
        )
    except (InvalidTask, InvalidTaskBackend):
        # The TASKS settings changed since the enqueue (queue or alias gone): the
        # record still reads, with the task as it is declared now.
        return target


def _errors_of(info: TaskInfo) -> list[TaskError]:
    """Every failed attempt's error, oldest first, then how the run ended if it did not fail."""
    failures = list(info.errors)
    if info.status == TaskStatus.CANCELLED:
        message = info.error.message if info.error else cancel_message(info.cancel_reason)
        failures.append(TaskFailure(class_path(TaskCancelled), message))
    elif info.error is not None and (not failures or failures[-1] != info.error):
        failures.append(info.error)
    return [_task_error(f) for f in failures]


def _task_error(failure: TaskFailure) -> TaskError:
    # Ends the worker writes itself (cancel, timeout, worker lost) have no traceback;
    # give them the last line a traceback would have, so the message is not lost.
    text = failure.traceback or f"{failure.type}: {failure.message}\n"
    return TaskError(exception_class_path=failure.type, traceback=text)


# -- the worker side ------------------------------------------------------------------


def context_of(info: TaskInfo, task: Task[..., Any]) -> TaskContext[..., Any]:
    """The first argument of a ``takes_context=True`` task: Django's TaskContext of this run."""
    return TaskContext(task_result=task_result_of(info))


def configured() -> bool:
    """Whether any TASKS alias uses WorkersBackend (or a subclass of it)."""
    for config in (getattr(settings, "TASKS", None) or {}).values():
        try:
            backend = import_string(str(config.get("BACKEND", "")))
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, WorkersBackend):
            return True
    return False


@register()
def check_tasks_backend(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when no alias of Django's ``TASKS`` is django-workers' backend.

    Then ``.enqueue()`` of every task, ``django_workers.task`` ones included, goes
    to another backend (Django's default runs it at once, in the caller), and no
    worker ever sees it.
    """
    tasks = getattr(settings, "TASKS", None)
    # A TASKS of the wrong shape is Django's own checks' to report.
    if not isinstance(tasks, dict) or not all(isinstance(v, dict) for v in tasks.values()):
        return []
    if configured():
        return []
    used = tasks.get("default", {}).get("BACKEND")
    return [
        Warning(
            "No TASKS backend is django-workers' WorkersBackend: .enqueue() of a task "
            f"runs on {used or 'another backend'}, not on your workers.",
            hint='Set TASKS = {"default": {"BACKEND": "django_workers.backends.WorkersBackend"}} '
            f"(see {docs_url('django-tasks-backend', 'settings')}). If you only submit with "
            'submit_task(), add "django_workers.W002" to SILENCED_SYSTEM_CHECKS.',
            id="django_workers.W002",
        )
    ]


def send_task_started(sender: object, *, info: TaskInfo, **kwargs: Any) -> None:
    """``run_started`` receiver: Django's task_started, for records enqueued through a backend."""
    if info.backend is not None:
        task_started.send(_backend_class(info.backend), task_result=task_result_of(info))


def send_task_finished(sender: object, *, info: TaskInfo, **kwargs: Any) -> None:
    """``run_finished`` receiver: Django's task_finished, for records enqueued through a backend."""
    if info.backend is not None:
        task_finished.send(_backend_class(info.backend), task_result=task_result_of(info))


def _backend_class(alias: str) -> type[BaseTaskBackend]:
    try:
        return type(task_backends[alias])
    except InvalidTaskBackend:
        return WorkersBackend
