"""Calling a task's function: by dotted path, sync or async, with Django's context if asked."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.tasks import Task

from django_workers.info import TaskInfo
from django_workers.references import resolve

#: Builds the first argument of a ``takes_context=True`` Django task from the run's
#: snapshot: whoever builds a runtime passes it (``django_workers.backends.context_of``
#: gives Django's TaskContext), so the runtime needs no knowledge of the backend.
type ContextFactory = Callable[[TaskInfo, Task[..., Any]], Any]


def invoke(
    info: TaskInfo,
    live: Callable[[], TaskInfo] | None = None,
    context_factory: ContextFactory | None = None,
) -> Any:
    """Run the task ``info`` names in this thread and return what it returns.

    ``live`` builds the run's current snapshot for a ``takes_context`` task's context
    (``info`` itself when not given); other tasks only need the path and arguments,
    so a worker does not build one for each of them. ``context_factory`` makes that
    context; without one a ``takes_context`` task cannot run.
    """
    target = resolve(info.task_path)
    args: Sequence[Any] = info.args
    if isinstance(target, Task):
        func: Callable[..., Any] = target.func
        if target.takes_context:
            snapshot = live() if live is not None else info
            args = [_context(context_factory, snapshot, target), *args]
    else:
        func = target
    if _is_async(func):
        return async_to_sync(func)(*args, **info.kwargs)
    return func(*args, **info.kwargs)


#: ``inspect.iscoroutinefunction``, asked once for each task function: it runs a dozen
#: steps of Python, and a run starts with it.
_async_functions = functools.lru_cache(maxsize=1024)(inspect.iscoroutinefunction)


def _is_async(func: Callable[..., Any]) -> bool:
    try:
        return _async_functions(func)
    except TypeError:  # a callable object that cannot be a key
        return inspect.iscoroutinefunction(func)


def _context(factory: ContextFactory | None, info: TaskInfo, task: Task[..., Any]) -> Any:
    if factory is None:
        raise ImproperlyConfigured(
            f"{info.task_path} takes a context, but this runtime was built without a "
            "context_factory; pass context_factory=django_workers.backends.context_of."
        )
    return factory(info, task)
