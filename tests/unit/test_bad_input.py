"""Every bad input raises its specific exception and writes nothing."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.test import override_settings

from django_workers import (
    ArgumentsNotSerializable,
    ArgumentsTooLarge,
    InvalidTaskKey,
    InvalidTaskOptions,
    Owner,
    System,
    TaskNotAllowed,
    TaskNotImportable,
    TaskOptions,
    TaskSubmission,
    get_all_tasks,
    get_task_status,
    submit_task,
    submit_tasks,
)
from django_workers.models import TaskRecord, TaskWatcher
from django_workers.stores import WorkerStore
from django_workers.stores.database import DatabaseWorkerStore
from tests.tasks import add

ALICE = Owner("alice")


def _closure() -> Callable[[], None]:
    def inner() -> None:
        return None

    return inner


class _Jobs:
    def run(self) -> None:
        return None

    @classmethod
    def build(cls) -> None:
        return None


# Each case builds the submit arguments that differ from a good submit; building
# may itself raise (TaskOptions validates when it is made).
BAD_SUBMITS: dict[str, tuple[type[Exception], Callable[[], dict[str, Any]]]] = {
    # the task
    "lambda": (TaskNotImportable, lambda: {"task": lambda: None}),
    "closure": (TaskNotImportable, lambda: {"task": _closure()}),
    "bound-method": (TaskNotImportable, lambda: {"task": _Jobs().run}),
    "classmethod": (TaskNotImportable, lambda: {"task": _Jobs.build}),
    "path-missing-attribute": (TaskNotImportable, lambda: {"task": "tests.tasks.nope"}),
    "path-missing-module": (TaskNotImportable, lambda: {"task": "tests.no_such_module.run"}),
    "path-outside-task-modules": (TaskNotAllowed, lambda: {"task": "os.getcwd"}),
    "builtin-callable": (TaskNotAllowed, lambda: {"task": print}),
    "function-imported-into-an-app": (TaskNotAllowed, lambda: {"task": "tests.tasks.getoutput"}),
    "path-without-dot": (TaskNotImportable, lambda: {"task": "add"}),
    "path-empty": (TaskNotImportable, lambda: {"task": ""}),
    "path-not-callable": (TaskNotImportable, lambda: {"task": "django_workers.api.MAX_LIMIT"}),
    "not-a-task": (TaskNotImportable, lambda: {"task": 42}),
    # arguments
    "args-object": (ArgumentsNotSerializable, lambda: {"args": [object()]}),
    "args-set": (ArgumentsNotSerializable, lambda: {"args": [{1, 2}]}),
    "args-nan": (ArgumentsNotSerializable, lambda: {"args": [float("nan")]}),
    "args-infinity": (ArgumentsNotSerializable, lambda: {"args": [float("-inf")]}),
    "args-bytes": (ArgumentsNotSerializable, lambda: {"args": [b"raw"]}),
    "kwargs-nested-object": (ArgumentsNotSerializable, lambda: {"kwargs": {"a": [object()]}}),
    "args-not-a-sequence": (InvalidTaskOptions, lambda: {"args": "ab"}),
    "args-a-dict": (InvalidTaskOptions, lambda: {"args": {"a": 1}}),
    "kwargs-int-key": (InvalidTaskOptions, lambda: {"kwargs": {1: "a"}}),
    "kwargs-tuple-key": (InvalidTaskOptions, lambda: {"kwargs": {("a",): 1}}),
    "kwargs-a-list": (InvalidTaskOptions, lambda: {"kwargs": [("a", 1)]}),
    # queue
    "queue-empty": (InvalidTaskOptions, lambda: {"queue": ""}),
    "queue-space": (InvalidTaskOptions, lambda: {"queue": "my queue"}),
    "queue-newline": (InvalidTaskOptions, lambda: {"queue": "q\n"}),
    "queue-too-long": (InvalidTaskOptions, lambda: {"queue": "q" * 101}),
    "queue-not-str": (InvalidTaskOptions, lambda: {"queue": 5}),
    # priority
    "priority-too-high": (InvalidTaskOptions, lambda: {"priority": 101}),
    "priority-too-low": (InvalidTaskOptions, lambda: {"priority": -101}),
    "priority-bool": (InvalidTaskOptions, lambda: {"priority": True}),
    "priority-float": (InvalidTaskOptions, lambda: {"priority": 1.5}),
    "priority-str": (InvalidTaskOptions, lambda: {"priority": "1"}),
    # run_after
    "run-after-naive": (InvalidTaskOptions, lambda: {"run_after": dt.datetime(2030, 1, 1)}),
    "run-after-str": (InvalidTaskOptions, lambda: {"run_after": "tomorrow"}),
    "run-after-seconds": (InvalidTaskOptions, lambda: {"run_after": 60}),
    # options
    "timeout-negative": (InvalidTaskOptions, lambda: {"options": TaskOptions(timeout=-1)}),
    "timeout-zero": (InvalidTaskOptions, lambda: {"options": TaskOptions(timeout=0)}),
    "timeout-nan": (InvalidTaskOptions, lambda: {"options": TaskOptions(timeout=float("nan"))}),
    "timeout-str": (InvalidTaskOptions, lambda: {"options": TaskOptions(timeout="5")}),  # type: ignore[arg-type]
    "retries-negative": (InvalidTaskOptions, lambda: {"options": TaskOptions(retries=-1)}),
    "retries-too-many": (InvalidTaskOptions, lambda: {"options": TaskOptions(retries=101)}),
    "retries-bool": (InvalidTaskOptions, lambda: {"options": TaskOptions(retries=True)}),
    "retries-float": (InvalidTaskOptions, lambda: {"options": TaskOptions(retries=1.5)}),  # type: ignore[arg-type]
    "backoff-negative": (InvalidTaskOptions, lambda: {"options": TaskOptions(retry_backoff=-1)}),
    "jitter-not-bool": (InvalidTaskOptions, lambda: {"options": TaskOptions(retry_jitter=1)}),  # type: ignore[arg-type]
    "options-a-dict": (InvalidTaskOptions, lambda: {"options": {"timeout": 5}}),
    # watchers
    "watchers-str": (TypeError, lambda: {"watchers": ["bob"]}),
    "watchers-bare-owner": (TypeError, lambda: {"watchers": Owner("bob")}),
    "watchers-system": (TypeError, lambda: {"watchers": [System()]}),
    "watchers-none": (TypeError, lambda: {"watchers": [Owner("bob"), None]}),
    # key and scope
    "key-int": (InvalidTaskKey, lambda: {"key": 0}),
    "key-none": (InvalidTaskKey, lambda: {"key": None}),
    "key-empty": (InvalidTaskKey, lambda: {"key": ""}),
    "key-201-chars": (InvalidTaskKey, lambda: {"key": "k" * 201}),
    "key-nul": (InvalidTaskKey, lambda: {"key": "a\x00b"}),
    "key-newline": (InvalidTaskKey, lambda: {"key": "a\nb"}),
    "key-escape": (InvalidTaskKey, lambda: {"key": "a\x1bb"}),
    "global-key-separator": (InvalidTaskKey, lambda: {"key": "a::b", "scope": "global"}),
    "scope-unknown": (InvalidTaskKey, lambda: {"scope": "team"}),
}


def _submit(via: str, store: WorkerStore, bad: Callable[[], dict[str, Any]]) -> None:
    spec: dict[str, Any] = {"key": "k", "task": add, "args": [1, 2], **bad()}
    if via == "submit_task":
        submit_task(spec.pop("key"), spec.pop("task"), ALICE, store=store, **spec)
    else:
        good = TaskSubmission(key="good", task=add, args=[1, 2])
        submit_tasks([good, TaskSubmission(**spec)], ALICE, store=store)


def assert_nothing_written(store: WorkerStore) -> None:
    assert store.list_tasks(user_id=None) == []
    if isinstance(store, DatabaseWorkerStore):
        assert TaskRecord.objects.count() == 0
        assert TaskWatcher.objects.count() == 0


@pytest.mark.parametrize("via", ["submit_task", "submit_tasks"])
@pytest.mark.parametrize(("error", "bad"), BAD_SUBMITS.values(), ids=BAD_SUBMITS.keys())
def test_a_bad_submit_is_refused_and_writes_nothing(
    store: WorkerStore, via: str, error: type[Exception], bad: Callable[[], dict[str, Any]]
) -> None:
    with pytest.raises(error) as caught:
        _submit(via, store, bad)
    assert type(caught.value) is error
    assert str(caught.value)
    assert_nothing_written(store)


@pytest.mark.parametrize(
    ("good", "bad"),
    [({"priority": 1}, {"priority": True}), ({"priority": 1}, {"priority": 1.0})],
    ids=["bool-after-int", "float-after-int"],
)
def test_a_batch_checks_a_field_equal_to_an_earlier_ones_but_of_another_type(
    store: WorkerStore, good: dict[str, Any], bad: dict[str, Any]
) -> None:
    # Tasks alike share the first one's checks; True == 1 == 1.0, but only 1 is a priority.
    batch = [
        TaskSubmission(key="good", task=add, **good),
        TaskSubmission(key="bad", task=add, **bad),
    ]
    with pytest.raises(InvalidTaskOptions, match="priority must be an int"):
        submit_tasks(batch, ALICE, store=store)
    assert_nothing_written(store)


def test_a_bad_submit_says_what_was_wrong(store: WorkerStore) -> None:
    with pytest.raises(TaskNotImportable, match="closure"):
        submit_task("k", _closure(), ALICE, store=store)
    with pytest.raises(TaskNotImportable, match="bound method"):
        submit_task("k", _Jobs().run, ALICE, store=store)
    with pytest.raises(ArgumentsNotSerializable, match="JSON"):
        submit_task("k", add, ALICE, args=[object()], store=store)
    with pytest.raises(InvalidTaskOptions, match="timezone-aware"):
        submit_task("k", add, ALICE, args=[1, 2], run_after=dt.datetime(2030, 1, 1), store=store)
    with pytest.raises(InvalidTaskKey, match="1 to 200"):
        submit_task("k" * 201, add, ALICE, store=store)
    assert_nothing_written(store)


def test_system_cannot_submit_a_user_scoped_task(store: WorkerStore) -> None:
    with pytest.raises(InvalidTaskKey, match="scope='global'"):
        submit_task("k", add, System(), args=[1, 2], store=store)
    assert_nothing_written(store)


def test_the_django_json_range_is_accepted(store: WorkerStore) -> None:
    when = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    token = uuid.UUID(int=7)
    task_id = submit_task(
        "k", add, ALICE, args=[Decimal("1.5"), token, (1, 2)], kwargs={"at": when}, store=store
    )
    info = get_task_status(task_id, ALICE, store=store)
    assert info.args == ["1.5", str(token), [1, 2]]
    assert info.kwargs == {"at": "2030-01-02T03:04:05Z"}


BAD_LISTS: dict[str, dict[str, Any]] = {
    "limit-zero": {"limit": 0},
    "limit-too-big": {"limit": 1001},
    "limit-bool": {"limit": True},
    "limit-str": {"limit": "10"},
    "offset-negative": {"offset": -1},
    "offset-bool": {"offset": False},
    "offset-float": {"offset": 1.5},
    "status-unknown": {"status": "BOGUS"},
    "status-lowercase": {"status": "pending"},
}


@pytest.mark.parametrize("bad", BAD_LISTS.values(), ids=BAD_LISTS.keys())
def test_get_all_tasks_refuses_bad_paging_and_filters(
    store: WorkerStore, bad: dict[str, Any]
) -> None:
    submit_task("k", add, ALICE, args=[1, 2], store=store)
    with pytest.raises(InvalidTaskOptions):
        get_all_tasks(ALICE, store=store, **bad)


def test_get_all_tasks_accepts_the_edges_of_its_range(store: WorkerStore) -> None:
    submit_task("k", add, ALICE, args=[1, 2], store=store)
    assert len(get_all_tasks(ALICE, limit=1, store=store)) == 1
    assert len(get_all_tasks(ALICE, limit=1000, offset=0, store=store)) == 1
    assert get_all_tasks(ALICE, offset=1, store=store) == []


@pytest.mark.parametrize("task_id", ["", 5, None])
def test_get_task_status_refuses_a_malformed_id(store: WorkerStore, task_id: Any) -> None:
    with pytest.raises(InvalidTaskKey):
        get_task_status(task_id, ALICE, store=store)


# -- input bounds --------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["submit_task", "submit_tasks"])
def test_fifty_megabytes_of_arguments_are_refused(store: WorkerStore, via: str) -> None:
    with pytest.raises(ArgumentsTooLarge) as caught:
        _submit(via, store, lambda: {"args": ["x" * (50 * 1024 * 1024)]})
    assert caught.value.limit == 1024 * 1024
    assert caught.value.size > 50 * 1024 * 1024
    assert "ARGS_MAX_BYTES" in str(caught.value)
    assert_nothing_written(store)


@override_settings(DJANGO_WORKERS={"ARGS_MAX_BYTES": 20})
def test_the_argument_cap_counts_args_and_kwargs_together(store: WorkerStore) -> None:
    # ["aaaa"] is 8 bytes of JSON and {"b": "cccc"} is 13: 21 together.
    with pytest.raises(ArgumentsTooLarge, match="are 21 bytes of JSON; at most 20"):
        submit_task("k", add, ALICE, args=["aaaa"], kwargs={"b": "cccc"}, store=store)
    assert_nothing_written(store)
    submit_task("k", add, ALICE, args=["aaa"], kwargs={"b": "cccc"}, store=store)  # 20 bytes


LISTED = {"QUEUES": {"reports": {"concurrency": 1}}, "ONLY_LISTED_QUEUES": True}


@pytest.mark.parametrize("via", ["submit_task", "submit_tasks"])
@override_settings(DJANGO_WORKERS=LISTED)
def test_only_listed_queues_refuses_an_unlisted_queue(store: WorkerStore, via: str) -> None:
    with pytest.raises(InvalidTaskOptions) as caught:
        _submit(via, store, lambda: {"queue": "reprots"})
    assert "'reprots' is not named in DJANGO_WORKERS['QUEUES']" in str(caught.value)
    assert "'default', 'reports'" in str(caught.value)
    assert_nothing_written(store)


@override_settings(DJANGO_WORKERS=LISTED)
def test_only_listed_queues_accepts_the_listed_ones_and_default(store: WorkerStore) -> None:
    submit_task("a", add, ALICE, args=[1, 2], queue="reports", store=store)
    submit_task("b", add, ALICE, args=[1, 2], store=store)
    assert sorted(info.queue for info in get_all_tasks(ALICE, store=store)) == [
        "default",
        "reports",
    ]


def test_every_queue_is_accepted_unless_the_site_opts_in(store: WorkerStore) -> None:
    submit_task("a", add, ALICE, args=[1, 2], queue="anything", store=store)
