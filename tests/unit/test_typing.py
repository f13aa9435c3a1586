"""The public API's types: mypy checks this file over tests/ (scripts/lint); pytest runs it.

``assert_type`` does nothing at run time: a change that loses a type fails the
lint, and one that breaks the call fails here.
"""

from __future__ import annotations

from typing import Any, assert_type

from django.tasks import Task

from django_workers import System, TaskHandle, open_task, submit
from django_workers.conf import DEFAULTS, WorkersSettings, workers_settings
from django_workers.stores.memory import InMemoryWorkerStore
from tests import tasks


def test_a_declared_task_keeps_its_parameters_and_return_type() -> None:
    declared: Task[[int, int], int] = tasks.declared_add
    assert declared.call(1, 2) == 3
    assert_type(declared.call(1, 2), int)


def test_a_handle_carries_the_submitted_tasks_return_type() -> None:
    store = InMemoryWorkerStore()
    handle = submit("typed", tasks.declared_add, System(), args=(1, 2), scope="global", store=store)
    assert_type(handle, TaskHandle[int])
    by_function = submit("typed-fn", tasks.add, System(), args=(1, 2), scope="global", store=store)
    assert_type(by_function, TaskHandle[int])
    assert handle.status().task_path == "tests.tasks.declared_add"


def test_a_handle_on_a_path_or_an_id_carries_any() -> None:
    store = InMemoryWorkerStore()
    handle = submit("typed", "tests.tasks.add", System(), args=(1, 2), scope="global", store=store)
    assert_type(handle, TaskHandle[Any])
    opened = open_task(handle.id, System(), store=store)
    assert_type(opened, TaskHandle[Any])
    assert opened.run_id == handle.run_id


def test_every_setting_is_declared_with_its_type() -> None:
    assert set(WorkersSettings.__annotations__) == set(DEFAULTS)
    assert_type(workers_settings.LEASE_TIMEOUT, float)
    assert_type(workers_settings.QUEUES, dict[str, dict[str, Any]])
    assert DEFAULTS["LEASE_TIMEOUT"] == workers_settings.LEASE_TIMEOUT
