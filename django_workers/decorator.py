"""``django_workers.task``: Django's ``@task``, with this project's run options as defaults.

The function becomes a ``django.tasks`` Task, so ``.enqueue()`` works, and
carries a ``TaskOptions`` of the options given here. Wherever it is submitted
(``submit_task``, ``submit``, a workflow node, ``.enqueue()``), those are its
defaults; options given with a call override them field by field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Literal, cast, overload

from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, DEFAULT_TASK_QUEUE_NAME, Task, TaskContext
from django.tasks import task as django_task
from django.tasks.base import DEFAULT_TASK_PRIORITY

from django_workers.options import _UNSET, ExceptionRefs, TaskOptions
from django_workers.references import DECLARED_OPTIONS


@overload
def task[**P, T](function: Callable[P, T], /) -> Task[P, T]: ...


@overload
def task[**P, T](
    function: None = None,
    /,
    *,
    priority: int = DEFAULT_TASK_PRIORITY,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: Literal[True],
    timeout: float | None = ...,
    retries: int = ...,
    retry_backoff: float | None = ...,
    retry_backoff_max: float | None = ...,
    retry_jitter: bool = ...,
    retry_on: ExceptionRefs = ...,
    retry_never: ExceptionRefs = ...,
    **kwargs: Any,
) -> Callable[[Callable[Concatenate[TaskContext[Any, Any], P], T]], Task[P, T]]: ...


@overload
def task[**P, T](
    function: None = None,
    /,
    *,
    priority: int = DEFAULT_TASK_PRIORITY,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: Literal[False] = False,
    timeout: float | None = ...,
    retries: int = ...,
    retry_backoff: float | None = ...,
    retry_backoff_max: float | None = ...,
    retry_jitter: bool = ...,
    retry_on: ExceptionRefs = ...,
    retry_never: ExceptionRefs = ...,
    **kwargs: Any,
) -> Callable[[Callable[P, T]], Task[P, T]]: ...


def task(
    function: Callable[..., Any] | None = None,
    /,
    *,
    priority: int = DEFAULT_TASK_PRIORITY,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: bool = False,
    timeout: float | None = _UNSET,
    retries: int = _UNSET,
    retry_backoff: float | None = _UNSET,
    retry_backoff_max: float | None = _UNSET,
    retry_jitter: bool = _UNSET,
    retry_on: ExceptionRefs = _UNSET,
    retry_never: ExceptionRefs = _UNSET,
    **kwargs: Any,
) -> Task[..., Any] | Callable[[Callable[..., Any]], Task[..., Any]]:
    """Declare a task: Django's ``@task`` arguments, and its default run options.

    InvalidTaskOptions, at import, for an option out of range; the exception
    paths of ``retry_on``/``retry_never`` are imported when it is submitted.
    """
    # Checked now, so a wrong option fails the import that declares it.
    options = TaskOptions(
        timeout=timeout,
        retries=retries,
        retry_backoff=retry_backoff,
        retry_backoff_max=retry_backoff_max,
        retry_jitter=retry_jitter,
        retry_on=retry_on,
        retry_never=retry_never,
    )
    # Any: the stubs' overloads take takes_context as a literal, ours is a plain bool.
    declare = cast(Any, django_task)(
        priority=priority,
        queue_name=queue_name,
        backend=backend,
        takes_context=takes_context,
        **kwargs,
    )

    def wrapper(func: Callable[..., Any]) -> Task[..., Any]:
        if isinstance(func, Task) or not callable(func):
            raise TypeError(
                f"django_workers.task decorates a function, got {type(func).__name__}; use it "
                "instead of django.tasks' @task, not on top of it."
            )
        try:
            setattr(func, DECLARED_OPTIONS, options)
        except AttributeError:
            raise TypeError(
                f"django_workers.task cannot mark {func!r}; decorate a module-level function."
            ) from None
        declared: Task[..., Any] = declare(func)
        return declared

    if function is not None:
        return wrapper(function)
    return wrapper
