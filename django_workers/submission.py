"""From a submission to a record: every field checked, then written in one call.

The public ``submit_task``/``submit_tasks`` and the ``django.tasks`` backend
both build their records here, so a task is validated the same way whichever
door it comes in by. A batch is written whole or not at all: on PostgreSQL
its records are built while the ``COPY`` that writes them streams, and a
submission that fails then abandons the ``COPY``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.tasks import Task
from django.utils import timezone

from django_workers import clock
from django_workers.authority import (
    SCOPES,
    Authority,
    Owner,
    Scope,
    key_scoper,
    scoped_task_key,
    user_id_of,
)
from django_workers.bounds import QUEUE_MAX_LENGTH, RUN_AFTER_MAX
from django_workers.conf import listed_queues, workers_settings
from django_workers.core import new_run_id, new_run_ids
from django_workers.exceptions import (
    ArgumentsTooLarge,
    AuthorizationError,
    DatabaseUnavailable,
    InvalidTaskKey,
    InvalidTaskOptions,
)
from django_workers.options import TaskOptions
from django_workers.references import TaskRef, ids_and_names_json, task_reference, to_json_text
from django_workers.stores import NewTask, Submitted, WorkerStore
from django_workers.stores.base import AllCreated, RecordStream, grants_of

DEFAULT_QUEUE = "default"
MIN_PRIORITY, MAX_PRIORITY = -100, 100
DEFAULT_OPTIONS = TaskOptions()


@dataclass(slots=True, kw_only=True)
class TaskSubmission:
    """One task of a ``submit_tasks`` batch; the fields mirror ``submit_task``'s arguments.

    :param key: the task's key, unique among the owner's tasks (or the site's, with
        ``scope="global"``); submitting a live key again joins it.
    :param task: the task: a ``@django_workers.task`` or Django ``@task``, a function,
        or its dotted path.
    :param args: positional arguments, stored as JSON.
    :param kwargs: keyword arguments, stored as JSON.
    :param scope: ``"user"`` (the default) or ``"global"``.
    :param watchers: other owners who may read and cancel the task.
    :param queue: the queue; the task's own, else ``"default"``.
    :param priority: from -100 to 100, higher first; the task's own, else 0.
    :param run_after: the earliest start, as a time or a delay.
    :param options: ``TaskOptions`` (timeout, retries...) over the task's own.

    The batch reads each submission once, when it is submitted.
    """

    # Not frozen: a batch makes one per task, and a frozen dataclass's __init__ pays a
    # setattr call per field (two thirds of the cost of making one).

    key: str
    task: TaskRef
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] | None = None
    scope: Scope = "user"
    watchers: Sequence[Owner] = ()
    queue: str | None = None
    priority: int | None = None
    run_after: datetime | timedelta | None = None
    options: TaskOptions | None = None


def write_tasks(
    news: Sequence[NewTask], authority: Authority, store: WorkerStore
) -> Sequence[Submitted]:
    """Write records ``build_task`` made, then wake the workers of the queues that got runs."""
    if not news:
        return []
    try:
        done = store.submit_many(news, user_id_of(authority))
    except (OperationalError, InterfaceError) as e:
        raise DatabaseUnavailable("submit the tasks", e) from e
    if isinstance(done, AllCreated):
        created = done.queues()
    else:
        created = {new.queue for new, sub in zip(news, done, strict=True) if sub.created}
    if created:
        store.notify_enqueued(created)
    return done


#: What a submission shares with the first alike it: that one's record and key scoper.
_Shared = tuple[NewTask, Callable[[str], str]]


def build_tasks(
    specs: Iterable[TaskSubmission], authority: Authority, store: WorkerStore
) -> Sequence[NewTask]:
    """Validate a batch and build its records, in the order given.

    Submissions alike in task, queue, options, priority, run_after and scope share
    what those fields resolve to: the first of them is checked whole here (the
    queue authorizer is asked then), and the rest check only their own key,
    arguments and watchers, as their records are read from the ``RecordStream``
    returned. The first submission of the batch that fails raises, wherever it is
    found. The batch is stamped with one read of the clock and one of the random
    source for its run ids.
    """
    specs = list(specs)
    if len(specs) == 1:  # nothing to share: the way submit_task comes in
        return [build_task(specs[0], authority, store)]
    stamps = clock.now_series(len(specs))
    run_ids = new_run_ids(len(specs))
    firsts: dict[tuple[Any, ...], _Shared] = {}
    # Per submission: its record if it was built whole, else what it shares with a first.
    plan: list[NewTask | _Shared] = []
    plain = True
    for index, spec in enumerate(specs):
        shared = shape = None
        if type(spec) is TaskSubmission:
            # The types too: True == 1 as a key, but a bool priority is refused.
            shape = (
                spec.task,
                spec.queue,
                spec.options,
                # Equal options that set other fields override a task's defaults otherwise.
                getattr(spec.options, "given", None),
                spec.priority,
                type(spec.priority),
                spec.run_after,
                type(spec.run_after),
                spec.scope,
            )
            try:
                shared = firsts.get(shape)
            except TypeError:  # an unhashable field: checked whole, shared with none
                shape = None
        if shared is None:
            try:
                new = build_task(
                    spec, authority, store, run_id=run_ids[index], created_at=stamps[index]
                )
            except Exception:
                # A submission before this one that checks only its own fields may be
                # bad too, and the first bad one of the batch is the one reported.
                _check_alike(authority, specs, plan, stamps, run_ids)
                raise
            plain = plain and not grants_of(new)
            if shape is not None:
                firsts[shape] = (new, key_scoper(authority, spec.scope))
            plan.append(new)
        else:
            plain = plain and type(spec.watchers) is tuple and not spec.watchers
            plan.append(shared)
    records = _records(authority, specs, plan, stamps, run_ids)
    return RecordStream(len(specs), records, plain=plain)


def _records(
    authority: Authority,
    specs: list[TaskSubmission],
    plan: list[NewTask | _Shared],
    stamps: list[datetime],
    run_ids: list[str],
) -> Iterator[NewTask]:
    """The batch's records in order: those built whole as they are, the rest built now."""
    alike = _Alike(authority)
    # Not strict: a plan cut short at a failed submission stops there.
    for spec, planned, created_at, run_id in zip(specs, plan, stamps, run_ids, strict=False):
        if isinstance(planned, NewTask):
            yield planned
        else:
            yield alike.record(spec, *planned, run_id, created_at)


def _check_alike(
    authority: Authority,
    specs: list[TaskSubmission],
    plan: list[NewTask | _Shared],
    stamps: list[datetime],
    run_ids: list[str],
) -> None:
    """Raise the error of the first submission in ``plan`` that fails its own checks."""
    for _ in _records(authority, specs, plan, stamps, run_ids):
        pass


class _Alike:
    """Builds the records of submissions whose shared fields a first one had checked."""

    def __init__(self, authority: Authority) -> None:
        self.authority = authority
        self.alone = _watcher_ids(authority, ())
        self.max_bytes = workers_settings.ARGS_MAX_BYTES

    def record(
        self,
        spec: TaskSubmission,
        first: NewTask,
        scoped: Callable[[str], str],
        run_id: str,
        created_at: datetime,
    ) -> NewTask:
        task_id = scoped(spec.key)
        arguments = _check_arguments(spec, self.max_bytes)
        watchers = spec.watchers
        return NewTask(
            id=task_id,
            key=spec.key,
            owner=first.owner,
            scope=first.scope,
            task_path=first.task_path,
            args=arguments[0],
            kwargs=arguments[1],
            queue=first.queue,
            priority=first.priority,
            run_after=first.run_after,
            options=first.options,
            run_id=run_id,
            created_at=created_at,
            watchers=self.alone if watchers == () else _watcher_ids(self.authority, watchers),
            arguments_json=arguments,
        )


def build_task(
    spec: TaskSubmission,
    authority: Authority,
    store: WorkerStore,
    *,
    run_id: str | None = None,
    created_at: datetime | None = None,
) -> NewTask:
    """Validate one submission completely and build the record it would write.

    ``run_id`` and ``created_at`` are minted here unless a batch gives them.
    """
    if not isinstance(spec, TaskSubmission):
        raise TypeError(f"submit_tasks takes TaskSubmission objects, got {type(spec).__name__}.")
    if spec.scope not in SCOPES:
        raise InvalidTaskKey(f"scope must be 'user' or 'global', got {spec.scope!r}.")
    task_id = scoped_task_key(spec.key, authority, spec.scope)
    path, declared = task_reference(spec.task)
    django_task = spec.task if isinstance(spec.task, Task) else None
    queue = spec.queue
    if queue is None:  # only None means "the default": an empty name is refused below
        queue = django_task.queue_name if django_task else DEFAULT_QUEUE
    queue = _check_queue(queue)
    _check_listed(queue)
    _authorize_queue(store, queue, authority)
    # Shared by every record of the same options (and never changed), so encoded once in bulk.
    stored_options = _options_json(effective_options(spec.options, declared))
    if django_task is not None and django_task.takes_context:
        stored_options = {**stored_options, "takes_context": True}
    priority = spec.priority if spec.priority is not None else getattr(django_task, "priority", 0)
    run_after = (
        spec.run_after if spec.run_after is not None else getattr(django_task, "run_after", None)
    )
    arguments = _check_arguments(spec, workers_settings.ARGS_MAX_BYTES)
    return NewTask(
        id=task_id,
        key=spec.key,
        owner=user_id_of(authority) if spec.scope == "user" else None,
        scope=spec.scope,
        task_path=path,
        args=arguments[0],
        kwargs=arguments[1],
        queue=queue,
        priority=_check_priority(priority),
        run_after=_check_run_after(run_after),
        options=stored_options,
        run_id=run_id or new_run_id(),
        created_at=created_at or clock.now(),
        watchers=_watcher_ids(authority, spec.watchers),
        arguments_json=arguments,
    )


def effective_options(given: object, declared: TaskOptions | None) -> TaskOptions:
    """A call's options over the task's declared defaults, checked; InvalidTaskOptions if bad."""
    if given is not None and not isinstance(given, TaskOptions):
        raise InvalidTaskOptions(f"options must be a TaskOptions, got {type(given).__name__}.")
    if given is None:
        return declared or DEFAULT_OPTIONS
    return given.over(declared)


@functools.lru_cache(maxsize=64)
def _options_json(options: TaskOptions) -> dict[str, Any]:
    """The options as stored, their exception paths checked (cached: imported once)."""
    return options.checked().to_json()


@functools.lru_cache(maxsize=256)
def _check_queue(queue: object) -> str:
    if not isinstance(queue, str) or not 1 <= len(queue) <= QUEUE_MAX_LENGTH:
        raise InvalidTaskOptions(
            f"queue must be a name of 1 to {QUEUE_MAX_LENGTH} characters, got {queue!r}."
        )
    if not queue.isprintable() or any(c.isspace() for c in queue):
        raise InvalidTaskOptions(
            f"queue name {queue!r} may not contain spaces or control characters."
        )
    return queue


def _check_listed(queue: str) -> None:
    listed = listed_queues()
    if listed is not None and queue not in listed:
        raise InvalidTaskOptions(
            f"queue {queue!r} is not named in DJANGO_WORKERS['QUEUES'], and ONLY_LISTED_QUEUES "
            f"accepts only those (and 'default'): {', '.join(sorted(map(repr, listed)))}. Fix "
            f'the queue name, or add it to QUEUES, e.g. {{"{queue}": {{}}}}.'
        )


def _authorize_queue(store: WorkerStore, queue: str, authority: Authority) -> None:
    fn = store.queue_authorizer
    if isinstance(authority, Owner) and fn is not None and not fn(queue, authority.user_id):
        raise AuthorizationError(
            f"{authority.user_id!r} may not submit to queue {queue!r} (refused by the queue "
            "authorizer)."
        )


def _check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidTaskOptions(f"priority must be an int, got {priority!r}.")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidTaskOptions(
            f"priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {priority}."
        )
    return priority


def _check_run_after(run_after: object) -> datetime | None:
    if run_after is None:
        return None
    now = timezone.now()
    if isinstance(run_after, timedelta):
        if abs(run_after) > _RUN_AFTER_MAX:
            raise _run_after_out_of_range(run_after)
        return now + run_after
    if not isinstance(run_after, datetime):
        raise InvalidTaskOptions(
            f"run_after must be a datetime or a timedelta, got {type(run_after).__name__}."
        )
    if settings.USE_TZ and timezone.is_naive(run_after):
        raise InvalidTaskOptions(
            "run_after must be timezone-aware when USE_TZ is on; use django.utils.timezone.now() "
            "+ timedelta(...)."
        )
    if timezone.is_aware(run_after) and timezone.is_naive(now):
        now = datetime.now(UTC)
    try:
        far = abs(run_after - now) > _RUN_AFTER_MAX
    except OverflowError:  # at the very ends of datetime's range, in another time zone
        far = True
    if far:
        raise _run_after_out_of_range(run_after)
    return run_after


_RUN_AFTER_MAX = timedelta(seconds=RUN_AFTER_MAX)


def _run_after_out_of_range(run_after: datetime | timedelta) -> InvalidTaskOptions:
    return InvalidTaskOptions(
        f"run_after must be within {RUN_AFTER_MAX} seconds (ten years) of now, either way; got "
        f"{run_after!r}."
    )


def _check_args(args: object) -> tuple[list[Any], str]:
    if type(args) is list or type(args) is tuple:
        if not args:
            return [], "[]"
        text = ids_and_names_json(args)
        if text is not None:
            return list(args), text
    if isinstance(args, str | bytes | Mapping) or not isinstance(args, Sequence):
        raise InvalidTaskOptions(f"args must be a list or tuple, got {type(args).__name__}.")
    return to_json_text(list(args), "Task args")


def _check_kwargs(kwargs: object) -> tuple[dict[str, Any], str]:
    if kwargs is None:
        return {}, "{}"
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidTaskOptions("kwargs must be a dict with string keys.")
    return to_json_text(dict(kwargs), "Task kwargs")


def _check_size(size: int, limit: int | None = None) -> None:
    limit = workers_settings.ARGS_MAX_BYTES if limit is None else limit
    if size > limit:
        raise ArgumentsTooLarge(size, limit)


def _check_arguments(
    spec: TaskSubmission, limit: int
) -> tuple[list[Any], dict[str, Any], str, str]:
    """A submission's args and kwargs as stored, and as JSON text, within ``limit`` bytes."""
    args, args_text = _check_args(spec.args)
    kwargs, kwargs_text = _check_kwargs(spec.kwargs)
    _check_size(len(args_text) + len(kwargs_text), limit)
    return args, kwargs, args_text, kwargs_text


def _watcher_ids(authority: Authority, watchers: Sequence[Owner]) -> tuple[str, ...]:
    if isinstance(watchers, str | Owner) or not isinstance(watchers, Iterable):
        raise TypeError("watchers must be a list of Owner(...) objects.")
    ids: list[str] = []
    if isinstance(authority, Owner):
        ids.append(authority.user_id)
    for watcher in watchers:
        if not isinstance(watcher, Owner):
            raise TypeError(
                f"watchers must be Owner(...) objects, got {type(watcher).__name__}; "
                "System() already sees every task."
            )
        if watcher.user_id not in ids:
            ids.append(watcher.user_id)
    return tuple(ids)
