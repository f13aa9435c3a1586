"""Hostile input, table by table: each value gets its specific error and writes nothing.

Ids and keys at and past every width, ``::``, control characters and lone
surrogates, huge, deep and non-JSON arguments, unimportable and overlong task
paths, and numbers past every bound (bounds.py), through the Python API and the
``manage.py workers`` command. The values at each bound are accepted. Then the
machinery itself: a value past a bound that reaches it (a stored record, a
setting, a task's exception) is carried within the bound, and kills nothing.
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from collections.abc import Callable
from io import StringIO
from typing import Any, cast

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_workers import (
    ArgumentsNotSerializable,
    ArgumentsTooLarge,
    InvalidTaskKey,
    InvalidTaskOptions,
    Owner,
    System,
    TaskNotFound,
    TaskNotImportable,
    TaskOptions,
    TaskStatus,
    TaskSubmission,
    cancel_task,
    get_all_tasks,
    get_task_status,
    open_task,
    submit_task,
    submit_tasks,
)
from django_workers.authority import KEY_MAX_LENGTH, OWNER_MAX_LENGTH, TASK_ID_MAX_LENGTH
from django_workers.bounds import (
    ERROR_MESSAGE_MAX_LENGTH,
    QUEUE_MAX_LENGTH,
    SECONDS_MAX,
    TASK_PATH_MAX_LENGTH,
    TRACEBACK_MAX_LENGTH,
)
from django_workers.models import TaskRecord, TaskWatcher, WorkflowRecord
from django_workers.options import MAX_RETRIES
from django_workers.runtime.run import RunHandle, backoff, failure_of
from django_workers.runtime.watchdog import Watchdog
from django_workers.stores import WorkerStore
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.stores.rows import options_of
from django_workers.submission import MAX_PRIORITY, MIN_PRIORITY
from django_workers.workflows import InvalidWorkflow, Workflow
from tests.helpers import end_record
from tests.tasks import add, noop

ALICE = Owner("alice")
NOW = dt.datetime.now(dt.UTC)
YEAR = dt.timedelta(days=365)


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _assert_nothing_written(store: WorkerStore) -> None:
    assert store.list_tasks(user_id=None) == []
    assert store.list_workflows(user_id=None) == []
    if isinstance(store, DatabaseWorkerStore):
        assert TaskRecord.objects.count() == 0
        assert TaskWatcher.objects.count() == 0
        assert WorkflowRecord.objects.count() == 0


# -- submits ----------------------------------------------------------------------------------

# Each case gives the fields that differ from a good submit, built lazily: building may
# itself raise (Owner and TaskOptions check what they are given).
HOSTILE_SUBMITS: dict[str, tuple[type[Exception], Callable[[], dict[str, Any]]]] = {
    # keys, owners and ids, at and past every width
    "key-past-width": (InvalidTaskKey, lambda: {"key": "k" * (KEY_MAX_LENGTH + 1)}),
    "key-a-megabyte": (InvalidTaskKey, lambda: {"key": "k" * 2**20}),
    "key-tab": (InvalidTaskKey, lambda: {"key": "a\tb"}),
    "key-delete": (InvalidTaskKey, lambda: {"key": "a\x7fb"}),
    "key-nul": (InvalidTaskKey, lambda: {"key": "\x00"}),
    "key-lone-surrogate": (InvalidTaskKey, lambda: {"key": "a\ud800"}),
    "key-right-to-left-override": (InvalidTaskKey, lambda: {"key": "a\u202eb"}),
    "global-key-separator": (InvalidTaskKey, lambda: {"key": "a::b", "scope": "global"}),
    "owner-past-width": (
        InvalidTaskKey,
        lambda: {"authority": Owner("o" * (OWNER_MAX_LENGTH + 1))},
    ),
    "owner-separator": (InvalidTaskKey, lambda: {"authority": Owner("a::b")}),
    "owner-ends-with-colon": (InvalidTaskKey, lambda: {"authority": Owner("a:")}),
    "owner-escape": (InvalidTaskKey, lambda: {"authority": Owner("a\x1b[31m")}),
    "owner-lone-surrogate": (InvalidTaskKey, lambda: {"authority": Owner("\udc80")}),
    # queues
    "queue-past-width": (InvalidTaskOptions, lambda: {"queue": "q" * (QUEUE_MAX_LENGTH + 1)}),
    "queue-nul": (InvalidTaskOptions, lambda: {"queue": "q\x00"}),
    "queue-lone-surrogate": (InvalidTaskOptions, lambda: {"queue": "q\ud800"}),
    # task paths
    "path-past-width": (
        TaskNotImportable,
        lambda: {"task": "tests." + "t" * (TASK_PATH_MAX_LENGTH - 5)},
    ),
    "path-of-148-parts": (TaskNotImportable, lambda: {"task": ".".join(["tests"] + ["a"] * 147)}),
    "path-space": (TaskNotImportable, lambda: {"task": "tests.tasks.add "}),
    "path-nul": (TaskNotImportable, lambda: {"task": "tests.tasks\x00.add"}),
    "path-empty-part": (TaskNotImportable, lambda: {"task": "tests..add"}),
    "path-not-a-str": (TaskNotImportable, lambda: {"task": b"tests.tasks.add"}),
    # arguments
    "args-lone-surrogate": (ArgumentsNotSerializable, lambda: {"args": ["\ud800"]}),
    "kwargs-lone-surrogate-key": (ArgumentsNotSerializable, lambda: {"kwargs": {"\udfff": 1}}),
    "kwargs-nested-surrogate": (
        ArgumentsNotSerializable,
        lambda: {"kwargs": {"a": [{"b": "ok \udc00"}]}},
    ),
    "args-nul": (ArgumentsNotSerializable, lambda: {"args": ["\x00"]}),
    "args-nested-too-deep": (ArgumentsNotSerializable, lambda: {"args": [_nested(100_000)]}),
    "args-circular": (ArgumentsNotSerializable, lambda: {"args": _circular()}),
    "args-int-of-5000-digits": (ArgumentsNotSerializable, lambda: {"args": [10**5000]}),
    "args-bytes": (ArgumentsNotSerializable, lambda: {"args": [b"\xff"]}),
    "args-a-generator": (InvalidTaskOptions, lambda: {"args": (n for n in range(2))}),
    "args-twenty-megabytes": (ArgumentsTooLarge, lambda: {"args": ["x" * 20 * 2**20]}),
    # numbers past their bounds
    "priority-huge": (InvalidTaskOptions, lambda: {"priority": 10**20}),
    "priority-below": (InvalidTaskOptions, lambda: {"priority": MIN_PRIORITY - 1}),
    "priority-nan": (InvalidTaskOptions, lambda: {"priority": float("nan")}),
    "run-after-a-hundred-million-days": (
        InvalidTaskOptions,
        lambda: {"run_after": dt.timedelta(days=10**8)},
    ),
    "run-after-eleven-years": (InvalidTaskOptions, lambda: {"run_after": 11 * YEAR}),
    "run-after-eleven-years-ago": (InvalidTaskOptions, lambda: {"run_after": -11 * YEAR}),
    "run-after-the-last-datetime": (
        InvalidTaskOptions,
        lambda: {"run_after": dt.datetime.max.replace(tzinfo=dt.UTC)},
    ),
    "run-after-the-first-datetime": (
        InvalidTaskOptions,
        lambda: {"run_after": dt.datetime.min.replace(tzinfo=dt.UTC)},
    ),
    "run-after-the-last-datetime-east": (
        InvalidTaskOptions,
        lambda: {"run_after": dt.datetime.max.replace(tzinfo=dt.timezone(-dt.timedelta(hours=5)))},
    ),
    "timeout-1e10": (InvalidTaskOptions, lambda: {"options": TaskOptions(timeout=1e10)}),
    "timeout-past-bound": (
        InvalidTaskOptions,
        lambda: {"options": TaskOptions(timeout=SECONDS_MAX + 1)},
    ),
    "timeout-infinite": (
        InvalidTaskOptions,
        lambda: {"options": TaskOptions(timeout=float("inf"))},
    ),
    "backoff-1e300": (InvalidTaskOptions, lambda: {"options": TaskOptions(retry_backoff=1e300)}),
    "backoff-cap-1e300": (
        InvalidTaskOptions,
        lambda: {"options": TaskOptions(retry_backoff_max=1e300)},
    ),
    "retries-a-million": (InvalidTaskOptions, lambda: {"options": TaskOptions(retries=10**6)}),
}


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _submit(via: str, store: WorkerStore, hostile: Callable[[], dict[str, Any]]) -> None:
    spec: dict[str, Any] = {"key": "k", "task": add, "args": [1, 2], **hostile()}
    authority = spec.pop("authority", ALICE)
    if spec.get("scope") == "global":
        authority = System()
    if via == "submit_task":
        submit_task(spec.pop("key"), spec.pop("task"), authority, store=store, **spec)
    else:
        good = TaskSubmission(key="good", task=add, args=[1, 2], scope=spec.get("scope", "user"))
        submit_tasks([good, TaskSubmission(**spec)], authority, store=store)


@pytest.mark.parametrize("via", ["submit_task", "submit_tasks"])
@pytest.mark.parametrize(("error", "hostile"), HOSTILE_SUBMITS.values(), ids=HOSTILE_SUBMITS.keys())
def test_a_hostile_submit_gets_its_error_and_writes_nothing(
    store: WorkerStore, via: str, error: type[Exception], hostile: Callable[[], dict[str, Any]]
) -> None:
    with pytest.raises(error) as caught:
        _submit(via, store, hostile)
    assert type(caught.value) is error
    assert str(caught.value)
    _assert_nothing_written(store)


def test_the_bounds_themselves_are_accepted(store: WorkerStore) -> None:
    owner = Owner("o" * OWNER_MAX_LENGTH)
    options = TaskOptions(
        timeout=SECONDS_MAX,
        retries=MAX_RETRIES,
        retry_backoff=SECONDS_MAX,
        retry_backoff_max=SECONDS_MAX,
    )
    common: dict[str, Any] = {"queue": "q" * QUEUE_MAX_LENGTH, "options": options, "store": store}
    ids = [
        submit_task("k" * KEY_MAX_LENGTH, add, owner, priority=MAX_PRIORITY, **common),
        submit_task("early", add, owner, run_after=-YEAR * 9, priority=MIN_PRIORITY, **common),
        submit_task("late", add, owner, run_after=NOW + YEAR * 9, **common),
        submit_task("pair", add, owner, args=["\U0001f600", "\\ud800"], **common),
    ]
    assert len(ids[0]) == TASK_ID_MAX_LENGTH
    infos = [get_task_status(task_id, owner, store=store) for task_id in ids]
    assert infos[0].options == options
    assert infos[3].args == ["\U0001f600", "\\ud800"]


def test_a_path_of_many_parts_is_refused_even_deep_in_a_stack(store: WorkerStore) -> None:
    # Importing a.a.(...).a imported each parent from within the import of its child: a
    # hundred and fifty parts, called from deep in a stack (a view, a signal), recursed
    # past the limit and raised RecursionError. (Under "tests": a worker imports only there.)
    path = ".".join(["tests"] + ["a"] * 147)  # in an installed app: it is imported

    def deep(n: int) -> str:
        return deep(n - 1) if n else submit_task("k", path, ALICE, store=store)

    with pytest.raises(TaskNotImportable, match="Cannot import task"):
        deep(sys.getrecursionlimit() // 2)
    _assert_nothing_written(store)


# -- workflows -----------------------------------------------------------------------------


def _workflow(
    *, wid: str = "wf", name: str = "n", node: dict[str, Any] | None = None, undo: Any = None
) -> Workflow:
    wf = Workflow(wid, ALICE)
    added = wf.add(name, **({"task": noop} | (node or {})))
    if undo is not None:
        added.undo(**undo)
    return wf


HOSTILE_WORKFLOWS: dict[str, Callable[[], Workflow]] = {
    "id-past-width": lambda: _workflow(wid="w" * 129),
    "id-separator": lambda: _workflow(wid="a::b"),
    "id-colon": lambda: _workflow(wid="a:b"),
    "id-lone-surrogate": lambda: _workflow(wid="\ud800"),
    "id-reserved": lambda: _workflow(wid="index"),
    "node-name-past-width": lambda: _workflow(name="n" * 65),
    "node-name-colon": lambda: _workflow(name="a:undo"),
    "node-name-newline": lambda: _workflow(name="a\n"),
    "node-name-not-ascii": lambda: _workflow(name="nœud"),
    "node-path-past-width": lambda: _workflow(node={"task": "a." + "b" * 299}),
    "node-args-surrogate": lambda: _workflow(node={"args": ["\ud800"]}),
    "node-args-too-deep": lambda: _workflow(node={"args": [_nested(100_000)]}),
    "node-queue-past-width": lambda: _workflow(node={"queue": "q" * 101}),
    "undo-path-unimportable": lambda: _workflow(undo={"task": "tests.tasks.nope"}),
    "undo-args-surrogate": lambda: _workflow(undo={"task": noop, "args": ["\udfff"]}),
    "undo-queue-control": lambda: _workflow(undo={"task": noop, "queue": "u\x07"}),
    "node-priority-huge": lambda: _priority(10**9),
}


def _priority(priority: int) -> Workflow:
    wf = Workflow("wf", ALICE)
    wf.add("n", noop).priority(priority)
    return wf


@pytest.mark.parametrize("build", HOSTILE_WORKFLOWS.values(), ids=HOSTILE_WORKFLOWS.keys())
def test_a_hostile_workflow_is_invalid_and_writes_nothing(
    store: WorkerStore, build: Callable[[], Workflow]
) -> None:
    with pytest.raises(InvalidWorkflow) as caught:
        build().submit(store=store)
    assert caught.value.problems
    _assert_nothing_written(store)


def test_a_node_with_hostile_options_is_refused_as_they_are_made() -> None:
    with pytest.raises(InvalidTaskOptions, match="ten years"):
        _workflow(node={"options": TaskOptions(timeout=1e10)})


# -- reading and cancelling -------------------------------------------------------------------

MALFORMED_IDS: dict[str, Any] = {
    "empty": "",
    "not-a-str": 5,
    "none": None,
    "past-width": "x" * (TASK_ID_MAX_LENGTH + 1),
    "a-megabyte": "x" * 2**20,
    "nul": "alice::a\x00b",
    "escape": "alice::\x1b[2J",
    "lone-surrogate": "alice::\ud800",
}
UNKNOWN_IDS = ["alice::" + "k" * KEY_MAX_LENGTH, "a::b::c", "::", "alice::", "🙂::k"]

READS: dict[str, Callable[[Any, WorkerStore], Any]] = {
    "get_task_status": lambda task_id, store: get_task_status(task_id, ALICE, store=store),
    "open_task": lambda task_id, store: open_task(task_id, ALICE, store=store),
    "cancel_task": lambda task_id, store: cancel_task(task_id, ALICE, store=store),
}


@pytest.mark.parametrize("call", READS.values(), ids=READS.keys())
@pytest.mark.parametrize("task_id", MALFORMED_IDS.values(), ids=MALFORMED_IDS.keys())
def test_a_malformed_id_is_refused_before_any_query(
    store: WorkerStore, call: Callable[[Any, WorkerStore], Any], task_id: Any
) -> None:
    with pytest.raises(InvalidTaskKey):
        call(task_id, store)
    _assert_nothing_written(store)


@pytest.mark.parametrize("call", READS.values(), ids=READS.keys())
@pytest.mark.parametrize("task_id", UNKNOWN_IDS)
def test_a_well_formed_unknown_id_is_not_found(
    store: WorkerStore, call: Callable[[Any, WorkerStore], Any], task_id: str
) -> None:
    with pytest.raises(TaskNotFound):
        call(task_id, store)
    _assert_nothing_written(store)


@pytest.mark.parametrize("queue", ["q\x00", "q\ud800", 5])
def test_listing_by_a_queue_no_task_can_have_is_refused(store: WorkerStore, queue: Any) -> None:
    with pytest.raises(InvalidTaskOptions, match="queue"):
        get_all_tasks(System(), queue=queue, store=store)


# -- manage.py workers ----------------------------------------------------------------------


def _command(*args: str) -> tuple[str, CommandError | None]:
    out = StringIO()
    try:
        call_command("workers", *args, stdout=out)
    except CommandError as e:
        return out.getvalue(), e
    return out.getvalue(), None


HOSTILE_COMMANDS: dict[str, tuple[list[str], str]] = {
    # (arguments, what the error or the output says)
    "show-past-width": (["show", "x" * 300], "at most 255 printable characters"),
    "show-escape": (["show", "alice::\x1b[2J"], "control one"),
    "show-empty": (["show", ""], "non-empty string"),
    "show-unknown": (["show", "a::b::c"], "No task 'a::b::c'"),
    "cancel-past-width": (["cancel", "x" * 300], "invalid id"),
    "cancel-escape": (["cancel", "\x1b[2J"], "invalid id"),
    "retry-past-width": (["retry", "x" * 300], "invalid id"),
    "retry-unknown": (["retry", "alice::nope"], "not found"),
    "list-limit-huge": (["list", "--limit", str(10**20)], "must be from 1 to 1000"),
    "list-limit-word": (["list", "--limit", "many"], "invalid limit value"),
    "list-owner-separator": (["list", "--owner", "a::b"], "'::'"),
    "list-owner-past-width": (["list", "--owner", "o" * 54], "at most 53"),
    "list-status-unknown": (["list", "--status", "DONE"], "not a status"),
    "purge-older-than-infinite": (["purge", "--older-than", "inf"], "ten years"),
    "purge-older-than-nan": (["purge", "--older-than", "nan"], "ten years"),
    "purge-older-than-1e400": (["purge", "--older-than", "1e400"], "ten years"),
    "purge-older-than-huge": (["purge", "--older-than", "1e12", "--yes"], "ten years"),
    "purge-older-than-negative": (["purge", "--older-than", "-1", "--yes"], "from 0"),
    "purge-status-live": (["purge", "--status", "RUNNING", "--yes"], "Only finished tasks"),
}


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "said"), HOSTILE_COMMANDS.values(), ids=HOSTILE_COMMANDS.keys())
def test_a_hostile_workers_command_says_what_is_wrong_and_changes_nothing(
    args: list[str], said: str
) -> None:
    store = DatabaseWorkerStore()
    live = submit_task("live", add, ALICE, args=[1, 2])
    done = submit_task("done", add, ALICE, args=[1, 2])
    end_record(store, done, TaskStatus.FAILED, finished_at=NOW - 2 * YEAR)
    before = {info.id: (info.status, info.run_id) for info in store.list_tasks(user_id=None)}
    out, error = _command(*args)
    assert error is not None
    assert said in f"{out}\n{error}"
    after = {info.id: (info.status, info.run_id) for info in store.list_tasks(user_id=None)}
    assert after == before
    assert set(after) == {live, done}


# -- the machinery carries what gets past -----------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ({"timeout": 1e10}, TaskOptions(timeout=SECONDS_MAX)),
        ({"retry_backoff": 1e300, "retries": 3}, TaskOptions(retry_backoff=SECONDS_MAX, retries=3)),
        ({"retry_backoff_max": 10**400}, TaskOptions(retry_backoff_max=SECONDS_MAX)),
        ({"retries": 10**6}, TaskOptions(retries=MAX_RETRIES)),
        ({"timeout": "soon", "retry_jitter": "yes"}, TaskOptions()),
        ({"timeout": -5, "retries": -1}, TaskOptions()),
    ],
)
def test_options_stored_past_their_bounds_read_within_them(
    stored: dict[str, Any], expected: TaskOptions
) -> None:
    # Earlier versions accepted any finite number: such a record must stay readable.
    assert TaskOptions.from_json(stored) == expected
    assert options_of(stored) == expected


@pytest.mark.django_db
def test_a_record_stored_with_options_past_their_bounds_is_read_claimed_and_run() -> None:
    store = DatabaseWorkerStore()
    task_id = submit_task("k", add, ALICE, args=[1, 2])
    TaskRecord.objects.filter(pk=task_id).update(options={"timeout": 1e10, "retry_backoff": 1e300})
    assert get_task_status(task_id, ALICE).options.timeout == SECONDS_MAX
    [claimed] = store.claim("w", None, 1, NOW)
    assert claimed.options.retry_backoff == SECONDS_MAX


class _Run:
    """What the watchdog reads of a run: when it started, and its task."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.started = time.monotonic()


def test_the_watchdog_outlives_a_deadline_too_far_to_wait_for() -> None:
    expired: list[str] = []
    fired = threading.Event()

    def expire(handle: RunHandle) -> None:
        expired.append(handle.task_id)
        fired.set()

    watchdog = Watchdog(expire)
    watchdog.start()
    try:
        # Past threading.TIMEOUT_MAX: a wait for it raised OverflowError, and no later
        # deadline of that worker ever fired.
        watchdog.watch(cast(RunHandle, _Run("far")), 1e10)
        time.sleep(0)  # let the watchdog start its wait for the far deadline
        watchdog.watch(cast(RunHandle, _Run("near")), 0.01)
        assert fired.wait(10.0)
        assert expired == ["near"]
    finally:
        watchdog.stop()


def test_the_watchdog_outlives_a_run_whose_expiry_fails() -> None:
    expired: list[str] = []
    fired = threading.Event()

    def expire(handle: RunHandle) -> None:
        if handle.task_id == "broken":
            raise RuntimeError("an expiry that fails (a test's)")
        expired.append(handle.task_id)
        fired.set()

    watchdog = Watchdog(expire)
    watchdog.start()
    try:
        watchdog.watch(cast(RunHandle, _Run("broken")), 0.0)
        watchdog.watch(cast(RunHandle, _Run("next")), 0.05)
        assert fired.wait(10.0)
        assert expired == ["next"]
    finally:
        watchdog.stop()


@override_settings(DJANGO_WORKERS={"RETRY_BACKOFF": 1e300, "RETRY_BACKOFF_MAX": 1e300})
def test_a_backoff_never_waits_past_the_bound_whatever_the_settings() -> None:
    for attempt in (1, 2, MAX_RETRIES + 1):
        assert 0 <= backoff(TaskOptions(retries=MAX_RETRIES), attempt) <= SECONDS_MAX


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text (a test's)")


class _Huge(Exception):
    def __str__(self) -> str:
        return "m" * 10**7 + "\ud800\x00"


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as e:
        return e


def test_a_failure_is_recorded_whatever_its_exceptions_text() -> None:
    unprintable = failure_of(_raised(_Unprintable()))
    assert unprintable.type == "tests.unit.test_hostile_input._Unprintable"
    assert unprintable.message == "(its text could not be made: RuntimeError)"
    huge = failure_of(_raised(_Huge()))
    assert len(huge.message) == ERROR_MESSAGE_MAX_LENGTH
    assert huge.message.endswith("[...]")
    assert len(huge.traceback) <= TRACEBACK_MAX_LENGTH
    for text in (huge.message, huge.traceback):
        text.encode()  # no lone surrogate
        assert "\x00" not in text
    # Its middle is cut out: where it was raised, and what, are kept.
    assert huge.traceback.startswith("Traceback (most recent call last):")
    assert "_raised" in huge.traceback
    assert huge.traceback.endswith("m\\ud800\\x00\n")


def test_a_deep_recursions_failure_keeps_the_end_of_its_traceback() -> None:
    def down(n: int) -> int:
        return down(n + 1)

    failure = failure_of(_raised(_catch(lambda: down(0))))
    assert failure.type == "builtins.RecursionError"
    assert len(failure.traceback) <= TRACEBACK_MAX_LENGTH
    assert failure.traceback.rstrip().endswith("maximum recursion depth exceeded")


def _catch(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except BaseException as e:
        return e
    raise AssertionError("it did not raise")
