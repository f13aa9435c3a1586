"""Task handles: status, wait, result and cancel of one run, from this process or another."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from django_workers import (
    CancelReason,
    Owner,
    RemoteTaskError,
    System,
    TaskAlreadyFinished,
    TaskHandle,
    TaskNotFound,
    TaskStatus,
    cancel_task,
    get_task_status,
    open_task,
    submit,
    submit_task,
)
from django_workers import handles as handles_module
from django_workers.stores import WorkerStore
from django_workers.stores.database import DatabaseWorkerStore
from tests import tasks as t
from tests.helpers import RuntimeThread, start_runtime, wait_for_status, wait_until
from tests.worker_processes import finish, output_of, start_burst, start_handle_script

ALICE, BOB, SVC = Owner("alice"), Owner("bob"), Owner("svc")
CANCELLED_TYPE = "django_workers.exceptions.TaskCancelled"

on_postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="LISTEN/NOTIFY needs PostgreSQL"
)


@pytest.fixture(autouse=True, scope="module")
def _close_listeners() -> Iterator[None]:
    # The LISTEN connection must be gone before pytest-django drops the test database.
    yield
    handles_module.close_listeners()


@pytest.fixture(autouse=True)
def _release_held_runs() -> Iterator[None]:
    yield
    t.reset_coordination()


@pytest.fixture
def worker(tx_store: WorkerStore) -> Iterator[RuntimeThread]:
    thread = start_runtime(tx_store)
    yield thread
    thread.stop()


def running(handle: TaskHandle) -> None:
    """Wait until the handle's run is executing."""
    wait_until(lambda: handle.status().status == TaskStatus.RUNNING)


# -- opening -----------------------------------------------------------------------------


def test_open_task_binds_the_current_run(tx_store: WorkerStore) -> None:
    task_id = submit_task("k", t.add, ALICE, args=[1, 2], store=tx_store)

    handle = open_task(task_id, ALICE, store=tx_store)

    info = get_task_status(task_id, ALICE, store=tx_store)
    assert (handle.id, handle.run_id) == (task_id, info.run_id)
    assert handle.status() == info
    assert handle.superseded is False
    assert repr(handle) == f"<TaskHandle 'alice::k' run {info.run_id}>"


def test_submit_returns_a_handle_on_the_new_run(tx_store: WorkerStore) -> None:
    handle = submit("k", t.add, ALICE, args=[1, 2], queue="q", priority=5, store=tx_store)

    info = handle.status()
    assert (handle.id, info.args, info.queue, info.priority) == ("alice::k", [1, 2], "q", 5)


def test_only_who_may_see_a_task_opens_it(tx_store: WorkerStore) -> None:
    task_id = submit_task("k", t.add, ALICE, args=[1, 2], watchers=[SVC], store=tx_store)

    with pytest.raises(TaskNotFound):
        open_task(task_id, BOB, store=tx_store)
    with pytest.raises(TaskNotFound):
        open_task("alice::missing", ALICE, store=tx_store)
    with pytest.raises(TypeError, match="authority must be"):
        open_task(task_id, "alice", store=tx_store)  # type: ignore[arg-type]
    assert (
        open_task(task_id, SVC, store=tx_store).run_id
        == open_task(task_id, System(), store=tx_store).run_id
    )


# -- wait and result ------------------------------------------------------------------------


def test_wait_returns_the_end_and_result_the_value(
    tx_store: WorkerStore, worker: RuntimeThread
) -> None:
    handle = submit("k", t.add, ALICE, args=[2, 3], store=tx_store)

    info = handle.wait(timeout=10)

    assert info.status == TaskStatus.COMPLETED
    assert info.run_id == handle.run_id
    assert handle.result() == 5
    assert handle.status() == info


def test_result_raises_the_tasks_error(tx_store: WorkerStore, worker: RuntimeThread) -> None:
    handle = submit("k", t.fail, ALICE, store=tx_store)

    with pytest.raises(RemoteTaskError) as raised:
        handle.result(timeout=10)

    error = raised.value
    assert (error.type_name, error.message) == ("builtins.ValueError", "boom")
    assert error.traceback.endswith("ValueError: boom\n")
    assert str(error) == "builtins.ValueError: boom"


def test_a_wait_that_times_out_leaves_the_task_alone(
    tx_store: WorkerStore, worker: RuntimeThread
) -> None:
    handle = submit("k", t.held, ALICE, args=["slow"], store=tx_store)
    running(handle)

    with pytest.raises(TimeoutError, match=r"did not end within 0\.05 s"):
        handle.wait(timeout=0.05)
    with pytest.raises(TimeoutError):
        handle.result(timeout=0)

    info = get_task_status(handle.id, ALICE, store=tx_store)
    assert info.status == TaskStatus.RUNNING
    assert [run.cancel_requested for run in worker.runtime.active_runs()] == [False]
    t.gate("slow").set()
    assert handle.result(timeout=10) == "released"


def test_wait_refuses_a_negative_timeout(tx_store: WorkerStore) -> None:
    handle = submit("k", t.add, ALICE, args=[1, 2], store=tx_store)

    with pytest.raises(ValueError, match="timeout must be"):
        handle.wait(timeout=-1)


# -- cancel ------------------------------------------------------------------------------


def test_cancel_a_running_task(tx_store: WorkerStore, worker: RuntimeThread) -> None:
    handle = submit("k", t.wait_for_cancel, ALICE, store=tx_store)
    running(handle)

    info = handle.cancel()

    assert (info.status, info.cancel_reason) == (TaskStatus.CANCELLED, CancelReason.USER)
    assert handle.wait(timeout=10) == info
    with pytest.raises(RemoteTaskError) as raised:
        handle.result()
    assert (raised.value.type_name, raised.value.message) == (CANCELLED_TYPE, "Cancelled by user")
    wait_until(lambda: not worker.runtime.active_runs())  # the run itself stopped
    with pytest.raises(TaskAlreadyFinished):
        handle.cancel()


def test_cancel_a_pending_task(tx_store: WorkerStore) -> None:
    handle = submit("k", t.add, ALICE, args=[1, 2], store=tx_store)

    assert handle.cancel().status == TaskStatus.CANCELLED
    assert handle.wait(timeout=0).status == TaskStatus.CANCELLED


# -- a re-run ------------------------------------------------------------------------------


def test_a_handle_reports_its_run_superseded_never_the_newer_result(
    tx_store: WorkerStore,
) -> None:
    old = submit("k", t.add, ALICE, args=[1, 2], store=tx_store)
    cancel_task(old.id, ALICE, store=tx_store)  # ends without the handle seeing it
    new = submit("k", t.add, ALICE, args=[10, 20], store=tx_store)  # the re-run
    assert new.run_id != old.run_id

    info = old.status()

    assert old.superseded is True
    assert (info.run_id, info.status) == (old.run_id, TaskStatus.CANCELLED)
    assert info.cancel_reason == CancelReason.SUPERSEDED
    assert info.error is not None
    assert info.error.message == "Superseded by a re-run"
    with pytest.raises(TaskAlreadyFinished):
        old.cancel()
    assert new.status().status == TaskStatus.PENDING  # the refused cancel left it alone

    thread = start_runtime(tx_store)
    try:
        assert new.result(timeout=10) == 30
    finally:
        thread.stop()
    assert old.wait(timeout=0) == info
    with pytest.raises(RemoteTaskError, match="Superseded by a re-run"):
        old.result()


def test_a_handle_keeps_the_end_of_its_own_run_after_a_rerun(
    tx_store: WorkerStore, worker: RuntimeThread
) -> None:
    first = submit("k", t.add, ALICE, args=[1, 2], store=tx_store)
    assert first.result(timeout=10) == 3

    second = submit("k", t.add, ALICE, args=[10, 20], store=tx_store)

    assert second.result(timeout=10) == 30
    assert first.result() == 3
    assert first.status().run_id == first.run_id
    assert first.superseded is False


# -- async twins -----------------------------------------------------------------------------


def test_async_twins(tx_store: WorkerStore, worker: RuntimeThread) -> None:
    done = submit("done", t.add, ALICE, args=[2, 3], store=tx_store)
    slow = submit("slow", t.wait_for_cancel, ALICE, store=tx_store)

    async def scenario() -> None:
        assert (await done.await_(timeout=10)).status == TaskStatus.COMPLETED
        assert await done.aresult() == 5
        with pytest.raises(TimeoutError):
            await slow.await_(timeout=0.05)
        assert (await slow.acancel()).status == TaskStatus.CANCELLED
        assert (await slow.astatus()).status == TaskStatus.CANCELLED
        with pytest.raises(RemoteTaskError, match="Cancelled by user"):
            await slow.aresult(timeout=10)

    async_to_sync(scenario)()


# -- PostgreSQL: woken by NOTIFY ---------------------------------------------------------------


@on_postgres_only
def test_on_postgres_wait_wakes_on_notify_not_on_a_poll(
    db_store: DatabaseWorkerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With every poll a minute away, only the d:<id> notification can end the wait soon.
    monkeypatch.setattr(handles_module, "POLL_FIRST", 60.0)
    monkeypatch.setattr(handles_module, "POLL_MAX", 60.0)
    monkeypatch.setattr(handles_module, "NOTIFY_SAFETY_POLL", 60.0)
    thread = start_runtime(db_store, concurrency=3)
    try:
        handles = [submit(f"k{i}", t.held, ALICE, args=[f"g{i}"]) for i in range(3)]
        for handle in handles:
            running(handle)
        for i, handle in enumerate(handles):
            t.gate(f"g{i}").set()
            started = time.monotonic()
            assert handle.result(timeout=30) == "released"
            assert time.monotonic() - started < 5.0
    finally:
        thread.stop()
    listeners = [ends for ends in handles_module._ends.values() if ends is not None]
    assert len(listeners) == 1  # one LISTEN connection serves every handle of the process


# -- other processes ---------------------------------------------------------------------------


@pytest.mark.integration
def test_another_process_cancels_and_waits_for_a_task_it_did_not_submit(
    db_store: DatabaseWorkerStore,
) -> None:
    thread = start_runtime(db_store)
    try:
        handle = submit("k", t.wait_for_cancel, ALICE, watchers=[SVC])
        running(handle)

        seen = output_of(start_handle_script(handle.id, SVC.user_id, "cancel"))

        assert seen == {
            "status": "CANCELLED",
            "run_id": handle.run_id,
            "result": None,
            "error": CANCELLED_TYPE,
            "cancel_reason": "user",
        }
        assert handle.wait(timeout=10).status == TaskStatus.CANCELLED
        wait_until(lambda: not thread.runtime.active_runs())  # the run in this process stopped
    finally:
        thread.stop()


@pytest.mark.integration
def test_another_process_waits_for_a_run_in_this_one(db_store: DatabaseWorkerStore) -> None:
    handle = submit("k", t.held, ALICE, args=["remote"], watchers=[SVC])
    thread = start_runtime(db_store)
    try:
        running(handle)
        waiter = start_handle_script(handle.id, SVC.user_id)
        t.gate("remote").set()
        seen = output_of(waiter)
    finally:
        thread.stop()

    assert (seen["status"], seen["result"], seen["run_id"]) == (
        "COMPLETED",
        "released",
        handle.run_id,
    )


@pytest.mark.integration
def test_this_process_waits_for_a_run_in_runworkers(db_store: DatabaseWorkerStore) -> None:
    handle = submit("k", t.add, ALICE, args=[20, 22])
    failing = submit("f", t.fail, ALICE)

    worker = start_burst()
    try:
        assert handle.result(timeout=60) == 42
        with pytest.raises(RemoteTaskError, match="boom"):
            failing.result(timeout=60)
    finally:
        finish(worker)
    assert get_task_status(handle.id, ALICE).worker_id is not None


def test_a_stranger_in_another_process_sees_nothing(db_store: DatabaseWorkerStore) -> None:
    task_id = submit_task("k", t.add, ALICE, args=[1, 2])

    stranger = start_handle_script(task_id, "mallory")
    _out, err = stranger.communicate(timeout=60)

    assert stranger.returncode != 0
    assert "TaskNotFound" in err
    wait_for_status(db_store, task_id, TaskStatus.PENDING)
