"""factory-boy factories: store-level ``NewTask`` values and raw database rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import factory
from factory.django import DjangoModelFactory

from django_workers import clock
from django_workers.authority import Owner, System, scoped_task_key
from django_workers.core import new_run_id
from django_workers.models import TaskRecord, TaskWatcher
from django_workers.stores.base import NewTask


def _task_id(new: Any) -> str:
    authority = Owner(new.owner) if new.owner else System()
    return scoped_task_key(new.key, authority, new.scope)


class NewTaskFactory(factory.Factory[NewTask]):
    """A record as ``submit_task`` would hand it to a store; user-scoped to alice by default.

    ``NewTaskFactory(global_scope=True, watchers=("alice",))`` builds a global task.
    """

    if TYPE_CHECKING:
        # Calling a factory builds its model (factory-boy's own __new__ is untyped).
        def __new__(cls, *args: Any, **kwargs: Any) -> NewTask: ...  # type: ignore[misc]

    class Meta:
        model = NewTask

    class Params:
        global_scope = factory.Trait(scope="global", owner=None)

    key = factory.Sequence(lambda n: f"key-{n}")
    owner = "alice"
    scope = "user"
    id = factory.LazyAttribute(_task_id)
    task_path = "tests.tasks.add"
    args = factory.List([1, 2])
    kwargs = factory.Dict({})
    queue = "default"
    priority = 0
    run_after = None
    options = factory.Dict({})
    run_id = factory.LazyFunction(new_run_id)
    created_at = factory.LazyFunction(clock.now)
    # The submitter watches what it submits; _task_id covers the owner half.
    watchers = factory.LazyAttribute(lambda new: (new.owner,) if new.owner else ())


class TaskRecordFactory(DjangoModelFactory[TaskRecord]):
    """A task row written straight to the table (database-only tests)."""

    if TYPE_CHECKING:
        # Calling a factory creates its model (factory-boy's own __new__ is untyped).
        def __new__(cls, *args: Any, **kwargs: Any) -> TaskRecord: ...  # type: ignore[misc]

    class Meta:
        model = TaskRecord

    key = factory.Sequence(lambda n: f"row-{n}")
    owner = "alice"
    id = factory.LazyAttribute(lambda row: f"{row.owner}::{row.key}" if row.owner else row.key)
    scope = factory.LazyAttribute(lambda row: "user" if row.owner else "global")
    task_path = "tests.tasks.add"
    args = factory.List([1, 2])
    run_id = factory.LazyFunction(new_run_id)
    created_at = factory.LazyFunction(clock.now)


class TaskWatcherFactory(DjangoModelFactory[TaskWatcher]):
    """A grant of read/list/cancel on a task row."""

    if TYPE_CHECKING:
        # Calling a factory creates its model (factory-boy's own __new__ is untyped).
        def __new__(cls, *args: Any, **kwargs: Any) -> TaskWatcher: ...  # type: ignore[misc]

    class Meta:
        model = TaskWatcher

    task = factory.SubFactory(TaskRecordFactory)
    user_id = factory.Sequence(lambda n: f"watcher-{n}")
