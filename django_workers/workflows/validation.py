"""The checks a workflow's plan makes of each node: the rules of a plain task submission.

``Workflow.plan()`` calls these for every node and undo step, and gathers each
refusal of bad input (as ``submit_task`` would raise it) into one list of
problems, which it raises as one ``InvalidWorkflow``. Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from django.tasks import Task

from django_workers.bounds import SECONDS_MAX
from django_workers.exceptions import (
    ArgumentsNotSerializable,
    ArgumentsTooLarge,
    InvalidTaskKey,
    InvalidTaskOptions,
    TaskNotImportable,
)
from django_workers.options import TaskOptions
from django_workers.references import TaskRef, task_path, task_reference
from django_workers.submission import (
    DEFAULT_QUEUE,
    _check_args,
    _check_kwargs,
    _check_listed,
    _check_queue,
    _check_size,
    _options_json,
    effective_options,
)
from django_workers.workflows.plan import UndoPlan

#: The refusals of a task submission that mean bad input, collected into InvalidWorkflow.
_BAD_INPUT: Final = (
    InvalidTaskKey,
    InvalidTaskOptions,
    TaskNotImportable,
    ArgumentsNotSerializable,
    ArgumentsTooLarge,
)


@dataclass(frozen=True, slots=True)
class Call:
    """A task and its arguments as the caller gave them, checked only by ``plan()``."""

    task: TaskRef
    args: Any
    kwargs: Any
    queue: Any
    #: An undo's own options (a node's are the node's); None: the defaults.
    options: Any = None


def attempt(problems: list[str], where: str, check: Any, *args: Any) -> Any:
    """Return ``check(*args)``, or record its bad-input refusal under ``where`` and return None."""
    try:
        return check(*args)
    except _BAD_INPUT as e:
        problems.append(f"{where}: {e}")
        return None


def check_call(
    call: Call, where: str, problems: list[str]
) -> tuple[str, list[Any], dict[str, Any], str] | None:
    path = attempt(problems, where, task_path, call.task)
    django_task = call.task if isinstance(call.task, Task) else None
    queue = call.queue
    if queue is None:
        queue = django_task.queue_name if django_task else DEFAULT_QUEUE
    queue = attempt(problems, where, _queue_name, queue)
    args = attempt(problems, where, _check_args, call.args)
    kwargs = attempt(problems, where, _check_kwargs, call.kwargs)
    if args is None or kwargs is None:
        return None
    fits = attempt(problems, where, _fits, len(args[1]) + len(kwargs[1]))
    if path is None or queue is None or not fits:
        return None
    return path, args[0], kwargs[0], queue


def _fits(size: int) -> bool:
    _check_size(size)
    return True


def plan_undo(call: Call, where: str, problems: list[str]) -> UndoPlan | None:
    checked = check_call(call, where, problems)
    if checked is None:
        return None
    path, args, kwargs, queue = checked
    django_task = call.task if isinstance(call.task, Task) else None
    declared = task_defaults(call.task)
    try:
        if call.options is None:
            # The options its task declares, else none: the undo's default retries apply
            # when it is queued to what is not set here.
            options = declared_options(declared, django_task)
        else:
            options = stored_options(call.options, declared, django_task)
    except InvalidTaskOptions as e:
        problems.append(f"{where}: {e}")
        return None
    return UndoPlan(task_path=path, args=args, kwargs=kwargs, queue=queue, options=options)


def deadline_seconds(deadline: object, problems: list[str]) -> float | None:
    """The deadline in seconds, or None; a problem is recorded for anything else."""
    if deadline is None:
        return None
    if isinstance(deadline, timedelta):
        seconds: object = deadline.total_seconds()
    elif isinstance(deadline, int | float) and not isinstance(deadline, bool):
        seconds = float(deadline)
    else:
        problems.append(
            f"deadline must be a number of seconds or a timedelta, got {type(deadline).__name__}."
        )
        return None
    assert isinstance(seconds, float)
    if not (0 < seconds <= SECONDS_MAX):  # a NaN fails this too
        problems.append(
            f"deadline must be more than 0 s and at most {SECONDS_MAX} s (ten years), "
            f"got {deadline!r}."
        )
        return None
    return seconds


def _queue_name(queue: object) -> str:
    # _check_queue is cached, so only a hashable value may reach it.
    name = _check_queue(queue) if isinstance(queue, str) else _check_queue.__wrapped__(queue)
    _check_listed(name)
    return name


def task_defaults(task: object) -> TaskOptions | None:
    """The defaults ``django_workers.task`` gave ``task``; None if it has none or is refused
    (the refusal is reported with the node's task)."""
    try:
        # Any object until checked: one task_reference cannot take raises TypeError here.
        return task_reference(task)[1]  # type: ignore[arg-type]
    except (TaskNotImportable, TypeError):
        return None


def stored_options(
    options: object, declared: TaskOptions | None, django_task: Task[..., Any] | None
) -> dict[str, Any]:
    stored = dict(_options_json(effective_options(options, declared)))
    if django_task is not None and django_task.takes_context:
        stored["takes_context"] = True
    return stored


def declared_options(
    declared: TaskOptions | None, django_task: Task[..., Any] | None
) -> dict[str, Any]:
    """An undo's options when it is given none: only those its task's declaration sets."""
    stored: dict[str, Any] = {}
    if declared is not None:
        full = _options_json(declared)
        stored = {name: full[name] for name in declared.given if name in full}
    if django_task is not None and django_task.takes_context:
        stored["takes_context"] = True
    return stored
