"""``WorkerRuntime`` in this process, over each store where it makes sense.

Runtimes serve on background threads, exactly as ``runworkers`` serves; tasks
coordinate with the test through events in ``tests.tasks`` (``gate``,
``calls``, ``seen``), and the test waits on them or polls with a deadline.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connections
from django.test import override_settings

from django_workers import (
    CancelReason,
    System,
    TaskOptions,
    TaskStatus,
    cancel_task,
    clock,
    current_run,
    lifecycle,
    submit_task,
)
from django_workers.cancellation import CancelToken
from django_workers.info import TaskInfo
from django_workers.lifecycle import WORKER_LOST_MESSAGE
from django_workers.live import live_runs
from django_workers.notices import CHANNEL
from django_workers.runtime.run import RunHandle, backoff
from django_workers.runtime.runtime import EXIT_DRAIN_TIMEOUT, EXIT_OK, WorkerRuntime
from django_workers.stores import WorkerStore
from django_workers.stores.base import WorkerRegistration
from django_workers.stores.memory import InMemoryWorkerStore
from tests import tasks
from tests.helpers import (
    RuntimeThread,
    end_record,
    runtime_threads,
    start_runtime,
    wait_for_status,
    wait_until,
)

COMPLETED, FAILED, CANCELLED = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED
RUNNING, PENDING = TaskStatus.RUNNING, TaskStatus.PENDING
HOST = socket.gethostname()[:200]

Start = Callable[..., RuntimeThread]


pytestmark = pytest.mark.usefixtures("coordination")


@pytest.fixture
def runtimes() -> Iterator[Start]:
    """``start(store, **options)`` serves a runtime on a thread; all are stopped afterwards."""
    started: list[RuntimeThread] = []

    def start(store: WorkerStore, **options: Any) -> RuntimeThread:
        served = start_runtime(store, **options)
        started.append(served)
        return served

    yield start
    tasks.reset_coordination()  # release held runs so that their threads can end
    for served in started:
        if served.alive:
            served.stop()
    wait_until(lambda: not runtime_threads(), timeout=10.0)


def submit(store: WorkerStore, key: str, task: Any, **kwargs: Any) -> str:
    return submit_task(key, task, System(), scope="global", store=store, **kwargs)


def idle(served: RuntimeThread) -> Callable[[], bool]:
    return lambda: not served.runtime.active_runs()


def info_of(store: WorkerStore, task_id: str) -> TaskInfo:
    info = store.get_task_info(task_id)
    assert info is not None
    return info


def error_of(info: TaskInfo) -> tuple[str, str]:
    assert info.error is not None
    return info.error.type, info.error.message


# -- a run's end ----------------------------------------------------------------------------


@pytest.mark.parametrize("task", [tasks.add, tasks.django_add, tasks.async_add])
def test_a_task_completes_and_its_result_is_stored(
    tx_store: WorkerStore, runtimes: Start, task: Any
) -> None:
    served = runtimes(tx_store)
    task_id = submit(tx_store, "add", task, args=[2, 3])
    info = wait_for_status(tx_store, task_id, COMPLETED)
    assert (info.result, info.progress, info.attempts, info.error) == (5, 100.0, 1, None)
    assert info.worker_id == served.runtime.worker_id
    assert info.started_at is not None
    assert info.finished_at is not None
    assert info.started_at <= info.finished_at


def test_progress_reported_by_a_task_is_stored(tx_store: WorkerStore, runtimes: Start) -> None:
    runtimes(tx_store)
    task_id = submit(tx_store, "progress", tasks.with_progress, args=[4])
    info = wait_for_status(tx_store, task_id, COMPLETED)
    assert (info.result, info.progress) == (4, 100.0)


def test_a_failure_records_type_message_and_traceback(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    runtimes(tx_store)
    task_id = submit(tx_store, "fail", tasks.fail)
    info = wait_for_status(tx_store, task_id, FAILED)
    assert error_of(info) == ("builtins.ValueError", "boom")
    assert info.error is not None
    assert 'raise ValueError("boom")' in info.error.traceback
    assert (info.attempts, info.result, info.cancel_reason) == (1, None, CancelReason.NONE)


def test_a_result_over_the_size_cap_fails_the_run(tx_store: WorkerStore, runtimes: Start) -> None:
    with override_settings(DJANGO_WORKERS={"RESULT_MAX_BYTES": 100}):
        runtimes(tx_store)
        too_big = submit(tx_store, "big", tasks.big_result, args=[200])
        fits = submit(tx_store, "small", tasks.big_result, args=[50])
        info = wait_for_status(tx_store, too_big, FAILED)
        assert wait_for_status(tx_store, fits, COMPLETED).result == "x" * 50
    kind, message = error_of(info)
    assert kind == "django_workers.exceptions.ResultTooLarge"
    assert "202 bytes" in message
    assert "RESULT_MAX_BYTES" in message
    assert info.result is None


def test_a_wrong_result_cap_setting_fails_the_run_with_its_cause(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    with override_settings(DJANGO_WORKERS={"RESULT_MAX_BYTES": "big"}):
        runtimes(tx_store)
        task_id = submit(tx_store, "capped", tasks.big_result, args=[10])
        info = wait_for_status(tx_store, task_id, FAILED)
    kind, message = error_of(info)
    assert kind == "builtins.TypeError"
    assert "'>' not supported" in message
    assert info.error is not None
    assert "_completed" in info.error.traceback


def test_an_error_out_of_the_run_path_fails_the_run_with_its_cause(
    tx_store: WorkerStore, runtimes: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(handle: RunHandle) -> Any:
        raise RuntimeError("the run path broke")

    monkeypatch.setattr("django_workers.runtime.runtime.execute", broken)
    runtimes(tx_store, concurrency=1)
    task_id = submit(tx_store, "broken", tasks.noop)
    info = wait_for_status(tx_store, task_id, FAILED)
    assert error_of(info) == ("builtins.RuntimeError", "the run path broke")
    assert info.cancel_reason is CancelReason.NONE  # not passed off as a supersede
    # The one run thread lived on: the next task runs on it.
    monkeypatch.undo()
    wait_for_status(tx_store, submit(tx_store, "after", tasks.noop), COMPLETED)


def test_an_unserializable_result_fails_the_run(tx_store: WorkerStore, runtimes: Start) -> None:
    runtimes(tx_store)
    task_id = submit(tx_store, "object", tasks.returns_unserializable)
    kind, message = error_of(wait_for_status(tx_store, task_id, FAILED))
    assert kind == "django_workers.exceptions.ArgumentsNotSerializable"
    assert "return value" in message


def test_sys_exit_in_a_task_does_not_stop_the_worker(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    served = runtimes(tx_store, concurrency=1)
    exiting = submit(tx_store, "exit", tasks.exits)
    assert error_of(wait_for_status(tx_store, exiting, FAILED)) == ("builtins.SystemExit", "3")
    after = submit(tx_store, "after", tasks.add, args=[1, 1])
    assert wait_for_status(tx_store, after, COMPLETED).result == 2
    assert served.alive


def test_a_message_no_database_can_store_still_ends_the_run(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    runtimes(tx_store, concurrency=1)
    broken = submit(tx_store, "nul-error", tasks.fails_with_nul)
    nul_result = submit(tx_store, "nul-result", tasks.returns_nul)
    after = submit(tx_store, "after", tasks.add, args=[1, 1])
    wait_for_status(tx_store, broken, FAILED)
    wait_for_status(tx_store, nul_result, COMPLETED, FAILED)
    assert wait_for_status(tx_store, after, COMPLETED).result == 2


def test_current_run_outside_a_task_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="only available inside a task"):
        current_run()


# -- retries ----------------------------------------------------------------------------------


def test_retries_back_off_then_succeed(tx_store: WorkerStore, runtimes: Start, name: str) -> None:
    runtimes(tx_store)
    options = TaskOptions(retries=3, retry_backoff=0.05, retry_jitter=False)
    task_id = submit(tx_store, "flaky", tasks.flaky, args=[name, 2], options=options)
    info = wait_for_status(tx_store, task_id, COMPLETED)
    assert (info.result, info.attempts) == ("ok after 3", 3)
    assert info.started_at is not None
    assert info.finished_at is not None
    # Two waits, 0.05 s then 0.1 s, passed between the first attempt and the end.
    assert info.finished_at - info.started_at >= timedelta(seconds=0.15)


def test_a_task_that_keeps_failing_ends_failed_after_its_retries(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    runtimes(tx_store)
    options = TaskOptions(retries=2, retry_backoff=0.01)
    task_id = submit(tx_store, "failing", tasks.fail_counting, args=[name], options=options)
    info = wait_for_status(tx_store, task_id, FAILED)
    assert error_of(info) == ("builtins.ValueError", f"{name} failed")
    assert (info.attempts, tasks.calls[name]) == (3, 3)


def test_a_retry_claimed_before_its_last_attempt_is_forgotten_runs_as_a_new_attempt(
    tx_store: WorkerStore, runtimes: Start, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    served = runtimes(tx_store, concurrency=2)
    runtime = served.runtime
    second_attempt = threading.Event()
    forget = runtime._release

    def slow_release(*handles: RunHandle, kept: int = 0) -> None:
        # The first attempt's bookkeeping lags until the retry has been claimed and run:
        # a retry keeps its run id, and a free slot claims it meanwhile.
        if any(h.info.attempts == 1 for h in handles):
            second_attempt.wait(10)
        forget(*handles, kept=kept)

    runtime._release = slow_release  # type: ignore[method-assign]
    options = TaskOptions(retries=1, retry_backoff=0.01)
    task_id = submit(tx_store, "retried", tasks.fail_counting, args=[name], options=options)
    wait_until(lambda: tasks.calls[name] == 2, timeout=8)
    second_attempt.set()
    info = wait_for_status(tx_store, task_id, FAILED)
    assert (info.attempts, tasks.calls[name]) == (2, 2)
    assert "was claimed again while its run" not in caplog.text
    wait_until(idle(served))


def test_backoff_is_exponential_and_capped_with_jitter_below_it() -> None:
    options = TaskOptions(retry_backoff=1.0, retry_backoff_max=5.0, retry_jitter=False)
    assert [backoff(options, n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    jittered = TaskOptions(retry_backoff=1.0, retry_backoff_max=5.0)
    for n, full in zip(range(1, 6), [1.0, 2.0, 4.0, 5.0, 5.0], strict=True):
        assert full / 2 <= backoff(jittered, n) <= full


def test_a_cancel_during_the_retry_backoff_ends_cancelled(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(tx_store)
    options = TaskOptions(retries=3, retry_backoff=60.0, retry_jitter=False)
    task_id = submit(tx_store, "backoff", tasks.fail_counting, args=[name], options=options)
    wait_until(lambda: tasks.calls[name] == 1)
    assert cancel_task(task_id, System(), store=tx_store).status == CANCELLED
    wait_until(idle(served), timeout=5.0)  # the 60 s wait was cut short
    info = info_of(tx_store, task_id)
    assert (info.status, info.cancel_reason, info.attempts) == (CANCELLED, CancelReason.USER, 1)
    assert error_of(info)[1] == "Cancelled by user"
    assert tasks.calls[name] == 1


# -- timeouts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["return", "raise"])
def test_a_timeout_fails_the_task_and_is_never_retried(
    tx_store: WorkerStore, runtimes: Start, name: str, outcome: str
) -> None:
    served = runtimes(tx_store)
    options = TaskOptions(timeout=0.2, retries=3, retry_backoff=0.01)
    task_id = submit(tx_store, "slow", tasks.held, args=[name, outcome], options=options)
    info = wait_for_status(tx_store, task_id, FAILED)
    timed_out = ("django_workers.exceptions.TaskTimeoutError", "Timed out after 0.2 s")
    assert error_of(info) == timed_out
    assert (info.cancel_reason, info.attempts) == (CancelReason.TIMEOUT, 1)
    # The run ignored its token and is still going; when it ends, its write loses.
    assert [run.id for run in served.runtime.active_runs()] == [task_id]
    tasks.gate(name).set()
    wait_until(idle(served))
    after = info_of(tx_store, task_id)
    assert (after.status, error_of(after), after.result) == (FAILED, timed_out, None)
    assert tasks.calls[name] == 1


def test_a_run_that_stops_on_its_timeout_token_ends_failed(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    served = runtimes(tx_store)
    options = TaskOptions(timeout=0.2, retries=2)
    task_id = submit(tx_store, "slow", tasks.wait_for_cancel, options=options)
    info = wait_for_status(tx_store, task_id, FAILED)
    assert error_of(info) == ("django_workers.exceptions.TaskTimeoutError", "Timed out after 0.2 s")
    wait_until(idle(served))
    assert info_of(tx_store, task_id).attempts == 1


def test_runs_that_ended_leave_nothing_behind_in_the_runtime(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    # What a worker holds per run must go when the run ends, or a long drain grows it:
    # a run with a timeout used to stay with the watchdog until its deadline.
    served = runtimes(tx_store)
    options = TaskOptions(timeout=3600)
    ids = [submit(tx_store, f"add-{n}", tasks.add, args=[n, 1], options=options) for n in range(20)]
    run_ids = [wait_for_status(tx_store, task_id, COMPLETED).run_id for task_id in ids]
    wait_until(idle(served))
    runtime = served.runtime
    assert len(runtime._watchdog) == 0
    assert runtime._active == {}
    assert [run_id for run_id in run_ids if live_runs.get(run_id) is not None] == []


# -- cancelling a running task ----------------------------------------------------------------


def test_cancel_of_a_running_task_sets_its_token(tx_store: WorkerStore, runtimes: Start) -> None:
    served = runtimes(tx_store)
    task_id = submit(tx_store, "wait", tasks.wait_for_cancel)
    wait_for_status(tx_store, task_id, RUNNING)
    assert cancel_task(task_id, System(), store=tx_store).status == CANCELLED
    wait_until(idle(served), timeout=2.0)
    info = info_of(tx_store, task_id)
    assert (info.status, info.cancel_reason, info.result) == (CANCELLED, CancelReason.USER, None)
    assert error_of(info) == ("django_workers.exceptions.TaskCancelled", "Cancelled by user")


def test_a_cancel_written_by_another_process_reaches_the_run(
    tx_store: WorkerStore, runtimes: Start, tmp_path: Any
) -> None:
    served = runtimes(tx_store)
    marker = tmp_path / "reason"
    task_id = submit(tx_store, "wait", tasks.wait_for_cancel_marked, args=[str(marker)])
    running = wait_for_status(tx_store, task_id, RUNNING)
    # What cancel_task does in another process: claim the record, with no live run to poke.
    assert tx_store.end_tasks([lifecycle.cancel_end(running, clock.now())]) == [True]
    # The poll (every 0.5 s) delivered it; the file exists a moment before its text does.
    assert wait_until(lambda: marker.exists() and marker.read_text(), timeout=5.0) == "user"
    wait_until(idle(served))


def test_a_run_that_ignores_the_cancel_runs_on_but_its_late_write_loses(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(tx_store)
    task_id = submit(tx_store, "ignores", tasks.held, args=[name])
    wait_until(lambda: tasks.calls[name] == 1)
    cancel_task(task_id, System(), store=tx_store)
    [live] = served.runtime.active_runs()
    assert live.id == task_id
    assert live.cancel_requested
    tasks.gate(name).set()
    wait_until(idle(served))
    info = info_of(tx_store, task_id)
    assert (info.status, info.result, error_of(info)[1]) == (CANCELLED, None, "Cancelled by user")


def test_the_first_cancel_reason_wins_over_a_later_shutdown(
    tx_store: WorkerStore, runtimes: Start, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="django_workers")
    served = runtimes(tx_store, drain_timeout=10.0)
    task_id = submit(tx_store, "held", tasks.held, args=[name, "check"])
    wait_until(lambda: tasks.calls[name] == 1)
    cancel_task(task_id, System(), store=tx_store)
    served.runtime.request_stop()
    wait_until(lambda: "Draining 1 running tasks" in caplog.text)  # shutdown asked it too
    tasks.gate(name).set()
    assert served.join() == EXIT_OK
    assert tasks.seen[name] == [CancelReason.USER]
    info = info_of(tx_store, task_id)
    assert (info.cancel_reason, error_of(info)[1]) == (CancelReason.USER, "Cancelled by user")


def test_a_token_keeps_its_first_reason() -> None:
    store = InMemoryWorkerStore()
    submit(store, "t", tasks.add, args=[1, 2])
    [info] = store.claim("w", None, 1, clock.now())
    handle = RunHandle(info, store, "w")
    assert handle.request_cancel(CancelReason.USER)
    assert not handle.request_cancel(CancelReason.SHUTDOWN)
    assert not handle.request_cancel(CancelReason.TIMEOUT)
    assert handle.token.reason is CancelReason.USER
    assert handle.snapshot().cancel_requested


def test_a_tokens_wait_sees_a_request_made_before_or_during_it() -> None:
    before = CancelToken()
    assert before._request(CancelReason.USER)
    assert before.wait(0)  # its event made after the request: set at once

    during = CancelToken()
    waited: list[bool] = []
    waiter = threading.Thread(target=lambda: waited.append(during.wait(30)))
    waiter.start()
    wait_until(lambda: during._event is not None)
    assert during._request(CancelReason.SHUTDOWN)
    waiter.join(timeout=30)
    assert waited == [True]
    assert not CancelToken().wait(0)


# -- shutdown -------------------------------------------------------------------------------


def test_shutdown_gives_a_cooperating_run_back_to_its_queue(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(tx_store, drain_timeout=10.0)
    task_id = submit(tx_store, "wait", tasks.counted_wait_for_cancel, args=[name])
    wait_until(lambda: tasks.calls[name] == 1)  # started, not only claimed
    assert served.stop() == EXIT_OK
    info = info_of(tx_store, task_id)
    if tx_store.durable:
        # Its attempt does not count: the next worker runs it as if it never started.
        assert (info.status, info.attempts, info.worker_id, info.error) == (PENDING, 0, None, None)
    else:
        # Nothing is left to run what an in-memory store holds.
        assert (info.status, info.cancel_reason) == (CANCELLED, CancelReason.SHUTDOWN)
        assert error_of(info)[1] == "Cancelled by worker shutdown"
    assert served.runtime.worker_id not in {w.id for w in tx_store.list_workers()}


def test_a_run_that_outlives_the_drain_of_a_worker_process_is_left_for_the_sweep(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(
        tx_store, drain_timeout=0.2, owns_process=True, lease_timeout=1.0, heartbeat_interval=0.1
    )
    task_id = submit(tx_store, "ignores", tasks.held, args=[name])
    wait_until(lambda: tasks.calls[name] == 1)
    assert served.stop() == EXIT_DRAIN_TIMEOUT
    left = info_of(tx_store, task_id)
    assert (left.status, left.finished_at, left.error) == (RUNNING, None, None)
    # The process would exit now, its run with it: nothing records the run's end.
    tasks.gate(name).set()
    wait_until(lambda: not runtime_threads())
    assert info_of(tx_store, task_id).status == RUNNING
    # Its lease lapses, and the next worker's sweep recovers the run.
    runtimes(tx_store, lease_timeout=1.0, heartbeat_interval=0.1)
    info = wait_for_status(tx_store, task_id, FAILED)
    assert error_of(info)[0] == "django_workers.exceptions.WorkerLost"
    assert error_of(info)[1].startswith("Worker lost")


def test_an_embedded_runtime_keeps_its_lease_until_a_run_past_the_drain_returns(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(tx_store, drain_timeout=0.2, lease_timeout=1.0, heartbeat_interval=0.1)
    worker_id = served.runtime.worker_id
    task_id = submit(tx_store, "ignores", tasks.held, args=[name])
    wait_until(lambda: tasks.calls[name] == 1)
    assert served.stop() == EXIT_DRAIN_TIMEOUT
    # The process goes on, and so does the run: its lease stays fresh, so no sweep takes it.
    first = next(w for w in tx_store.list_workers() if w.id == worker_id)
    wait_until(lambda: any(w.heartbeat_at > first.heartbeat_at for w in tx_store.list_workers()))
    assert info_of(tx_store, task_id).status == RUNNING
    tasks.gate(name).set()
    # Its end is written when it returns (it returned normally: COMPLETED); then the lease goes.
    assert wait_for_status(tx_store, task_id, COMPLETED).result == "released"
    wait_until(lambda: worker_id not in {w.id for w in tx_store.list_workers()})


def test_shutdown_leaves_what_never_started_to_the_store(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    served = runtimes(tx_store, concurrency=1)
    running = submit(tx_store, "wait", tasks.wait_for_cancel)
    wait_for_status(tx_store, running, RUNNING)
    queued = submit(tx_store, "queued", tasks.add, args=[1, 2])
    deferred = submit(tx_store, "later", tasks.add, args=[1, 2], run_after=timedelta(hours=1))
    assert served.stop() == EXIT_OK
    for task_id in (queued, deferred):
        info = info_of(tx_store, task_id)
        if tx_store.durable:  # another worker will run it
            assert (info.status, info.error) == (PENDING, None)
        else:  # nothing ever will: say so
            assert (info.status, info.cancel_reason) == (CANCELLED, CancelReason.SHUTDOWN)
            assert error_of(info)[1] == "Cancelled by worker shutdown"


def test_burst_mode_returns_once_nothing_is_left(tx_store: WorkerStore) -> None:
    ids = [submit(tx_store, f"t{i}", tasks.add, args=[i, i]) for i in range(5)]
    runtime = WorkerRuntime(tx_store, burst=True, poll_interval=0.02, concurrency=2)
    assert runtime.run(drain_timeout=5.0) == EXIT_OK
    assert [info_of(tx_store, i).result for i in ids] == [0, 2, 4, 6, 8]
    wait_until(lambda: not runtime_threads())
    connections.close_all()


# -- claiming ---------------------------------------------------------------------------------


def test_claims_take_the_highest_priority_first_then_the_oldest(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    order = [("low-old", 0), ("high-old", 5), ("low-new", 0), ("high-new", 5), ("top", 9)]
    ids = [
        submit(tx_store, label, tasks.record, args=[name, label], priority=priority)
        for label, priority in order
    ]
    runtimes(tx_store, concurrency=1)
    for task_id in ids:
        wait_for_status(tx_store, task_id, COMPLETED)
    assert tasks.seen[name] == ["top", "high-old", "high-new", "low-old", "low-new"]


def test_run_after_holds_a_task_until_its_time(tx_store: WorkerStore, runtimes: Start) -> None:
    runtimes(tx_store)
    far = submit(tx_store, "far", tasks.add, args=[1, 1], run_after=timedelta(hours=1))
    soon = submit(tx_store, "soon", tasks.add, args=[1, 1], run_after=timedelta(seconds=0.3))
    now = submit(tx_store, "now", tasks.add, args=[1, 1])
    wait_for_status(tx_store, now, COMPLETED)
    info = wait_for_status(tx_store, soon, COMPLETED)
    assert info.started_at is not None
    assert info.run_after is not None
    assert info.started_at >= info.run_after
    assert info_of(tx_store, far).status == PENDING


def test_a_claim_never_takes_more_than_the_free_slots(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    claims: list[tuple[int, int, int]] = []
    original = tx_store.claim

    def spy(worker_id: str, *args: Any, **kwargs: Any) -> list[TaskInfo]:
        found = original(worker_id, *args, **kwargs)
        mine = [t for t in running_tasks() if t.worker_id == worker_id]
        claims.append((args[1], len(found), len(mine)))
        return found

    def running_tasks() -> list[TaskInfo]:
        return tx_store.list_tasks(user_id=None, status=RUNNING, limit=1000)

    tx_store.claim = spy  # type: ignore[method-assign]
    names = [f"{name}-{i}" for i in range(5)]
    for i, n in enumerate(names):
        submit(tx_store, f"held-{i}", tasks.held, args=[n])
    served = runtimes(tx_store, concurrency=2)
    for done, n in enumerate(names, start=1):
        # mypy infers no lambda with a default argument.
        wait_until(lambda n=n: tasks.calls[n] == 1)  # type: ignore[misc]
        if done < 2:
            continue
        assert len(running_tasks()) == 2
        assert len(served.runtime.active_runs()) == 2
        tasks.gate(names[done - 2]).set()
    for n in names[-2:]:
        tasks.gate(n).set()
    wait_until(lambda: len(tx_store.list_tasks(user_id=None, status=COMPLETED)) == 5)
    assert claims
    assert all(found <= limit <= 2 and mine <= 2 for limit, found, mine in claims)


@override_settings(DJANGO_WORKERS={"QUEUES": {"seq": {"concurrency": 1}}})
def test_a_sequential_queue_runs_one_at_a_time_in_submission_order(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    labels = [f"t{i}" for i in range(8)]
    ids = [
        submit(tx_store, f"seq-{label}", tasks.record, args=[name, label, 0.02], queue="seq")
        for label in labels
    ]
    others = [
        submit(tx_store, f"other-{i}", tasks.record, args=[f"{name}-other", str(i), 0.05])
        for i in range(4)
    ]
    runtimes(tx_store, concurrency=3)
    runtimes(tx_store, concurrency=3)
    for task_id in ids + others:
        wait_for_status(tx_store, task_id, COMPLETED)
    assert tasks.seen[name] == labels
    assert tasks.peak[name] == 1
    assert tasks.peak[f"{name}-other"] > 1  # the other queue was not held back


@override_settings(DJANGO_WORKERS={"QUEUES": {"pair": {"concurrency": 2}}})
def test_a_queue_limit_holds_across_runtimes(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    limited = [
        submit(tx_store, f"pair-{i}", tasks.held, args=[name], queue="pair") for i in range(5)
    ]
    runtimes(tx_store, concurrency=3)
    runtimes(tx_store, concurrency=3)
    wait_until(lambda: tasks.calls[name] == 2)
    # Free slots are left, and taken by other queues, but never by "pair".
    other = submit(tx_store, "other", tasks.add, args=[1, 1])
    wait_for_status(tx_store, other, COMPLETED)
    statuses = sorted(info_of(tx_store, task_id).status for task_id in limited)
    assert statuses == [PENDING, PENDING, PENDING, RUNNING, RUNNING]
    tasks.gate(name).set()
    for task_id in limited:
        wait_for_status(tx_store, task_id, COMPLETED)


@override_settings(DJANGO_WORKERS={"QUEUES": {"pair": {"concurrency": 2}}})
def test_a_backlog_of_a_limited_queue_does_not_keep_free_slots_from_other_queues(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    # The limited queue's tasks are the oldest, so they fill the first claim's window:
    # the claim takes two of them (the limit) and must go on to the other queue at once,
    # not leave four slots empty until the next poll.
    limited = [
        submit(tx_store, f"pair-{i}", tasks.held, args=[name], queue="pair") for i in range(8)
    ]
    others = [submit(tx_store, f"other-{i}", tasks.held, args=[f"{name}-o"]) for i in range(4)]
    runtimes(
        tx_store, concurrency=6, poll_interval=30.0, lease_timeout=60.0, heartbeat_interval=1.0
    )
    wait_until(lambda: tasks.calls[name] == 2 and tasks.calls[f"{name}-o"] == 4, timeout=5.0)
    assert sorted(info_of(tx_store, task_id).status for task_id in others) == [RUNNING] * 4
    tasks.gate(name).set()
    tasks.gate(f"{name}-o").set()
    for task_id in limited + others:
        wait_for_status(tx_store, task_id, COMPLETED)


def test_an_idle_runtime_wakes_on_enqueue_without_polling(runtimes: Start) -> None:
    store = InMemoryWorkerStore()
    runtimes(store, poll_interval=60.0)
    task_id = submit(store, "wake", tasks.add, args=[1, 2])
    assert wait_for_status(store, task_id, COMPLETED, timeout=3.0).result == 3


@pytest.mark.postgres_only
def test_an_idle_runtime_wakes_on_notify(db_store: WorkerStore, runtimes: Start) -> None:
    if connections["default"].vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY needs PostgreSQL")
    served = runtimes(db_store, poll_interval=60.0)
    wait_until(lambda: served.runtime.listening)
    task_id = submit(db_store, "wake", tasks.add, args=[1, 2])
    assert wait_for_status(db_store, task_id, COMPLETED, timeout=3.0).result == 3


def _spy_claims(store: WorkerStore, fail_on_listener: int = 0) -> list[tuple[str, list[str]]]:
    """Record each claim that took runs: its thread, and the channels its connection LISTENs on.

    The first ``fail_on_listener`` claims made on the listener's thread raise a
    database error instead.
    """
    seen: list[tuple[str, list[str]]] = []
    claim = store.claim
    failures = [fail_on_listener]

    def spied(*args: Any, **kwargs: Any) -> list[TaskInfo]:
        thread = threading.current_thread().name
        if thread == "workers-listener" and failures[0] > 0:
            failures[0] -= 1
            raise OperationalError("the connection was lost (a test's)")
        found = claim(*args, **kwargs)
        if found:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_listening_channels()")
                seen.append((thread, [row[0] for row in cursor.fetchall()]))
        return found

    store.claim = spied  # type: ignore[method-assign]
    return seen


@pytest.mark.postgres_only
def test_a_notice_of_work_is_claimed_on_the_connection_that_received_it(
    db_store: WorkerStore, runtimes: Start
) -> None:
    # The listener's thread claims at once through its LISTEN connection, rather than
    # waking the claim loop to claim through another. (A notice that comes while the
    # loop is claiming is left to the loop: three tasks, one after the other.)
    if connections["default"].vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY needs PostgreSQL")
    claims = _spy_claims(db_store)
    served = runtimes(db_store, poll_interval=60.0)
    wait_until(lambda: served.runtime.listening)
    for n in range(3):
        task_id = submit(db_store, f"wake-{n}", tasks.add, args=[n, 1])
        assert wait_for_status(db_store, task_id, COMPLETED, timeout=3.0).result == n + 1
    assert ("workers-listener", [CHANNEL]) in claims
    assert all(channels == [CHANNEL] for thread, channels in claims if thread == "workers-listener")


@pytest.mark.postgres_only
def test_a_claim_on_notice_that_fails_leaves_the_work_to_the_claim_loop(
    db_store: WorkerStore, runtimes: Start, caplog: pytest.LogCaptureFixture
) -> None:
    if connections["default"].vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY needs PostgreSQL")
    claims = _spy_claims(db_store, fail_on_listener=1)
    served = runtimes(db_store, poll_interval=60.0)
    wait_until(lambda: served.runtime.listening)
    first = submit(db_store, "first", tasks.add, args=[1, 1])
    # Claimed at once by the loop, not at its next poll a minute later.
    assert wait_for_status(db_store, first, COMPLETED, timeout=3.0).result == 2
    assert [thread for thread, _ in claims] != ["workers-listener"]
    assert "Claim on notice failed" in caplog.text
    # The listener dropped its connection, listens again on a new one, and claims on it.
    assert wait_until(lambda: served.runtime.listening, timeout=5.0)
    second = submit(db_store, "second", tasks.add, args=[2, 2])
    assert wait_for_status(db_store, second, COMPLETED, timeout=3.0).result == 4


def test_claims_on_notice_and_the_claim_loop_never_take_more_runs_than_slots(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    # Submitted one by one to a running runtime: on PostgreSQL each notice is claimed
    # on the listener's thread while the loop and the ends' refills claim too.
    served = runtimes(tx_store, concurrency=2, poll_interval=0.05)
    ids = [submit(tx_store, f"held-{i}", tasks.held, args=[name]) for i in range(8)]
    wait_until(lambda: tasks.calls[name] == 2)
    running = tx_store.list_tasks(user_id=None, status=TaskStatus.RUNNING, limit=100)
    assert len([r for r in running if r.worker_id == served.runtime.worker_id]) == 2
    tasks.gate(name).set()
    for task_id in ids:
        wait_for_status(tx_store, task_id, COMPLETED)
    assert tasks.calls[name] == 8


def test_ends_refill_their_slots_and_never_hold_more_running_records_than_slots(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    refills: list[tuple[int, int]] = []
    write = tx_store.end_and_claim

    def counted(ends: Any, worker_id: str, *args: Any, **kwargs: Any) -> Any:
        won, claimed = write(ends, worker_id, *args, **kwargs)
        running = tx_store.list_tasks(user_id=None, status=TaskStatus.RUNNING, limit=1000)
        refills.append((len(claimed), sum(1 for r in running if r.worker_id == worker_id)))
        return won, claimed

    tx_store.end_and_claim = counted  # type: ignore[method-assign]
    ids = [submit(tx_store, f"t{i}", tasks.add, args=[i, 1]) for i in range(40)]
    runtimes(tx_store, concurrency=3)
    for task_id in ids:
        wait_for_status(tx_store, task_id, COMPLETED)
    assert sum(n for n, _ in refills) > 0  # the ends' write claimed the next runs
    assert max(running for _, running in refills) <= 3


# -- leases and zombies ----------------------------------------------------------------------


def register(store: WorkerStore, worker_id: str, *, host: str, pid: int, age: float) -> None:
    """Write the lease of a worker that is not in this test, heartbeat ``age`` seconds ago."""
    at = clock.now() - timedelta(seconds=age)
    store.register_worker(
        WorkerRegistration(
            id=worker_id,
            host=host,
            pid=pid,
            queues=(),
            concurrency=1,
            started_at=at,
            heartbeat_at=at,
        )
    )


def claim_for(store: WorkerStore, worker_id: str, task_id: str) -> TaskInfo:
    [info] = store.claim(worker_id, None, 1, clock.now())
    assert info.id == task_id
    return info


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("retries", [0, 1])
def test_a_run_of_a_worker_with_a_stale_lease_is_recovered_at_start_up(
    tx_store: WorkerStore, runtimes: Start, retries: int
) -> None:
    task_id = submit(tx_store, "t", tasks.add, args=[1, 1], options=TaskOptions(retries=retries))
    register(tx_store, "ghost", host="elsewhere", pid=1, age=3600)
    claim_for(tx_store, "ghost", task_id)
    served = runtimes(tx_store)
    if retries:
        info = wait_for_status(tx_store, task_id, COMPLETED)
        assert (info.attempts, info.worker_id) == (2, served.runtime.worker_id)
    else:
        info = wait_for_status(tx_store, task_id, FAILED)
        assert error_of(info) == (
            "django_workers.exceptions.WorkerLost",
            WORKER_LOST_MESSAGE,
        )
        assert info.attempts == 1
    assert "ghost" not in {w.id for w in tx_store.list_workers()}


def test_a_run_of_a_dead_process_on_this_host_is_recovered_at_once(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    task_id = submit(tx_store, "t", tasks.add, args=[1, 1])
    register(tx_store, "gone", host=HOST, pid=dead_pid(), age=0)
    claim_for(tx_store, "gone", task_id)
    runtimes(tx_store, lease_timeout=3600.0)
    assert error_of(wait_for_status(tx_store, task_id, FAILED))[0].endswith("WorkerLost")


def test_a_live_workers_run_is_never_touched(tx_store: WorkerStore, runtimes: Start) -> None:
    remote = submit(tx_store, "remote", tasks.add, args=[1, 1])
    local = submit(tx_store, "local", tasks.add, args=[1, 1])
    register(tx_store, "remote-worker", host="elsewhere", pid=1, age=0)
    register(tx_store, "local-worker", host=HOST, pid=os.getpid(), age=0)
    claim_for(tx_store, "remote-worker", remote)
    claim_for(tx_store, "local-worker", local)
    sweeps = []
    original = tx_store.recover_zombies

    def spy(**kwargs: Any) -> Any:
        sweeps.append(kwargs["now"])
        return original(**kwargs)

    tx_store.recover_zombies = spy  # type: ignore[method-assign]

    def heartbeats_while_sweeping() -> bool:
        for worker_id in ("remote-worker", "local-worker"):
            assert tx_store.heartbeat(worker_id, clock.now())
        return len(sweeps) >= 3

    runtimes(tx_store, lease_timeout=1.5, heartbeat_interval=0.1)
    wait_until(heartbeats_while_sweeping, timeout=10.0, interval=0.05)
    assert [info_of(tx_store, t).status for t in (remote, local)] == [RUNNING, RUNNING]
    # Once their heartbeats stop, their leases run out and the periodic sweep recovers both.
    for task_id in (remote, local):
        assert error_of(wait_for_status(tx_store, task_id, FAILED))[0].endswith("WorkerLost")


def test_the_runtime_heartbeats_and_takes_back_a_lost_lease(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    served = runtimes(tx_store, heartbeat_interval=0.05)
    worker_id = served.runtime.worker_id

    def lease() -> WorkerRegistration | None:
        return next((w for w in tx_store.list_workers() if w.id == worker_id), None)

    first = lease()
    assert first is not None
    assert (first.host, first.pid, first.concurrency) == (
        HOST,
        os.getpid(),
        2,
    )
    wait_until(lambda: (now := lease()) is not None and now.heartbeat_at > first.heartbeat_at)
    tx_store.remove_worker(worker_id)  # declared dead by someone's sweep
    wait_until(lease)
    served.stop()
    assert lease() is None


def test_a_heartbeat_in_flight_as_the_runtime_closes_does_not_take_the_lease_again(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    held, in_flight, removed = threading.Event(), threading.Event(), threading.Event()
    heartbeat, remove_worker = tx_store.heartbeat, tx_store.remove_worker

    def late_heartbeat(worker_id: str, now: Any) -> bool:
        if held.is_set():
            in_flight.set()
            removed.wait(5.0)  # lands just after the runtime gave its lease back
        return heartbeat(worker_id, now)

    def spied_removal(worker_id: str) -> None:
        remove_worker(worker_id)
        removed.set()

    tx_store.heartbeat = late_heartbeat  # type: ignore[method-assign]
    tx_store.remove_worker = spied_removal  # type: ignore[method-assign]
    served = runtimes(tx_store, heartbeat_interval=0.05)
    held.set()
    assert in_flight.wait(5.0)
    assert served.stop() == EXIT_OK
    wait_until(lambda: not runtime_threads(), timeout=10.0)
    assert removed.is_set()
    assert tx_store.list_workers() == []


# -- cleanup ----------------------------------------------------------------------------------


def finished(store: WorkerStore, key: str, status: TaskStatus, days_ago: float) -> str:
    task_id = submit(store, key, tasks.add, args=[1, 1])
    when = clock.now() - timedelta(days=days_ago)
    end_record(store, task_id, status, finished_at=when)
    return task_id


def test_cleanup_deletes_only_finished_records_past_their_retention(
    tx_store: WorkerStore,
) -> None:
    doomed = [
        finished(tx_store, "completed-old", COMPLETED, 8),
        finished(tx_store, "cancelled-old", CANCELLED, 8),
        finished(tx_store, "failed-ancient", FAILED, 31),
    ]
    kept = [
        finished(tx_store, "completed-new", COMPLETED, 6),
        finished(tx_store, "failed-old", FAILED, 8),
        submit(tx_store, "pending", tasks.add, args=[1, 1]),
    ]
    assert WorkerRuntime(tx_store).cleanup() == 3
    assert [tx_store.get_task_info(t) for t in doomed] == [None, None, None]
    assert all(tx_store.get_task_info(t) is not None for t in kept)


@override_settings(
    DJANGO_WORKERS={
        "RETENTION": {"COMPLETED": 60, "FAILED": None, "CANCELLED": None},
        "CLEANUP_BATCH": 2,
    }
)
def test_cleanup_goes_batch_by_batch_and_keeps_what_is_kept_forever(
    tx_store: WorkerStore,
) -> None:
    doomed = [finished(tx_store, f"c{i}", COMPLETED, 1) for i in range(5)]
    kept = [finished(tx_store, "failed", FAILED, 400), finished(tx_store, "x", CANCELLED, 400)]
    assert WorkerRuntime(tx_store).cleanup() == 5
    assert all(tx_store.get_task_info(t) is None for t in doomed)
    assert all(tx_store.get_task_info(t) is not None for t in kept)


def test_a_serving_runtime_cleans_up_on_its_schedule(
    tx_store: WorkerStore, runtimes: Start
) -> None:
    old = finished(tx_store, "old", COMPLETED, 30)
    runtimes(tx_store)
    wait_until(lambda: tx_store.get_task_info(old) is None)


# -- progress ---------------------------------------------------------------------------------


def test_progress_writes_are_fenced_on_the_run(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(tx_store)
    task_id = submit(tx_store, "p", tasks.progress_then_hold, args=[name, 40, 90])
    wait_until(lambda: info_of(tx_store, task_id).progress == 40)
    assert [run.progress for run in served.runtime.active_runs()] == [40]
    cancel_task(task_id, System(), store=tx_store)
    tasks.gate(name).set()
    wait_until(idle(served))
    info = info_of(tx_store, task_id)
    assert (info.status, info.progress) == (CANCELLED, 40)


def test_progress_of_a_superseded_run_never_reaches_the_new_run(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(tx_store)
    task_id = submit(tx_store, "p", tasks.progress_then_hold, args=[name, 40, 90])
    wait_until(lambda: tasks.calls[name] == 1)
    cancel_task(task_id, System(), store=tx_store)
    rerun = submit(tx_store, "p", tasks.add, args=[1, 1], run_after=timedelta(hours=1))
    assert rerun == task_id
    new_run = info_of(tx_store, task_id)
    tasks.gate(name).set()
    wait_until(idle(served))
    info = info_of(tx_store, task_id)
    assert (info.run_id, info.status, info.progress) == (new_run.run_id, PENDING, 0.0)


# -- a run that lost its claim ------------------------------------------------------------------


def _lose_claim(store: WorkerStore, served: RuntimeThread, task_id: str) -> TaskInfo:
    """Declare ``served`` dead (as a sweep would) and let a live worker claim the task again."""
    store.recover_zombies(now=clock.now(), stale_before=None, dead=[served.runtime.worker_id])
    register(store, "successor", host="elsewhere", pid=1, age=0)
    again = claim_for(store, "successor", task_id)
    assert again.run_id == info_of(store, task_id).run_id  # a re-claim keeps the run id
    return again


def test_a_failure_of_a_run_that_lost_its_claim_never_puts_the_task_back_for_a_retry(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(tx_store, concurrency=1)
    options = TaskOptions(retries=5, retry_backoff=0.2, retry_jitter=False)
    task_id = submit(tx_store, "retrying", tasks.held, args=[name, "raise"], options=options)
    wait_until(lambda: tasks.calls[name] == 1)
    again = _lose_claim(tx_store, served, task_id)
    tasks.gate(name).set()  # it fails now: its retry's write loses the run-id fence
    wait_until(idle(served), timeout=5.0)
    assert tasks.calls[name] == 1
    info = info_of(tx_store, task_id)
    assert (info.status, info.worker_id, info.attempts) == (RUNNING, "successor", again.attempts)
    # The sweep's "worker lost", and nothing of the failure that came after it.
    assert [e.type for e in info.errors] == ["django_workers.exceptions.WorkerLost"]


def test_progress_of_a_run_that_lost_its_claim_never_reaches_the_new_claim(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(tx_store, concurrency=1)
    options = TaskOptions(retries=1)
    task_id = submit(tx_store, "p", tasks.progress_then_hold, args=[name, 40, 90], options=options)
    wait_until(lambda: tasks.calls[name] == 1)
    _lose_claim(tx_store, served, task_id)
    tasks.gate(name).set()
    wait_until(idle(served))
    info = info_of(tx_store, task_id)
    assert (info.status, info.worker_id, info.progress) == (RUNNING, "successor", 40)


def _forget_claim(store: WorkerStore, task_id: str, worker_id: str) -> None:
    """What a PostgreSQL crash does to a claim it had not flushed: the record is PENDING again.

    A runtime with a free slot may claim it again at once: read nothing back here.
    """
    [won] = store.end_tasks([lifecycle.release_end(info_of(store, task_id), worker_id)])
    assert won


def test_a_run_whose_claim_was_lost_goes_on_and_its_own_worker_takes_the_claim_back(
    tx_store: WorkerStore, runtimes: Start, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    served = runtimes(tx_store, concurrency=2)
    task_id = submit(tx_store, "lost", tasks.held, args=[name])
    wait_until(lambda: tasks.calls[name] == 1)
    worker_id = served.runtime.worker_id
    # Nobody holds the record: the run is not asked to stop.
    _forget_claim(tx_store, task_id, worker_id)
    assert tx_store.runs_to_stop(worker_id, {task_id: info_of(tx_store, task_id).run_id}) == {}

    # The worker claims it again, and starts no second copy.
    info = wait_until(lambda: (i := info_of(tx_store, task_id)).status == RUNNING and i)
    assert (info.worker_id, info.attempts) == (worker_id, 1)
    wait_until(lambda: "was claimed again while its run" in caplog.text)
    [live] = served.runtime.active_runs()
    assert (live.id, live.cancel_requested) == (task_id, False)
    tasks.gate(name).set()
    info = wait_for_status(tx_store, task_id, COMPLETED)
    assert (info.result, tasks.calls[name]) == ("released", 1)

    # Both slots are free again.
    wait_until(idle(served))
    both = [submit(tx_store, f"next-{n}", tasks.held, args=[f"{name}-next"]) for n in range(2)]
    wait_until(lambda: tasks.calls[f"{name}-next"] == 2)
    tasks.gate(f"{name}-next").set()
    for task in both:
        wait_for_status(tx_store, task, COMPLETED)


def test_a_lost_claim_taken_back_by_a_refill_frees_the_refills_slot(
    tx_store: WorkerStore, runtimes: Start, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    served = runtimes(tx_store, concurrency=2)
    lost = submit(tx_store, "lost", tasks.held, args=[name])
    other = submit(tx_store, "other", tasks.held, args=[f"{name}-other"])
    wait_until(lambda: tasks.calls[name] == 1 and tasks.calls[f"{name}-other"] == 1)
    _forget_claim(tx_store, lost, served.runtime.worker_id)
    # Both slots are taken: only the end of the other run, refilling its slot, claims.
    tasks.gate(f"{name}-other").set()
    wait_for_status(tx_store, other, COMPLETED)
    wait_until(lambda: "was claimed again while its run" in caplog.text)
    assert info_of(tx_store, lost).status == RUNNING
    assert [r.id for r in served.runtime.active_runs()] == [lost]

    # The refill's slot was given back: a new task runs beside the held one.
    fresh = submit(tx_store, "fresh", tasks.add, args=[1, 2])
    assert wait_for_status(tx_store, fresh, COMPLETED).result == 3
    tasks.gate(name).set()
    assert wait_for_status(tx_store, lost, COMPLETED).result == "released"
    assert tasks.calls[name] == 1


def test_a_run_whose_lost_claim_another_worker_made_is_superseded(
    tx_store: WorkerStore, runtimes: Start, name: str
) -> None:
    served = runtimes(tx_store, concurrency=1)
    task_id = submit(tx_store, "lost", tasks.held, args=[name])
    wait_until(lambda: tasks.calls[name] == 1)
    _forget_claim(tx_store, task_id, served.runtime.worker_id)
    register(tx_store, "successor", host="elsewhere", pid=1, age=0)
    claim_for(tx_store, "successor", task_id)
    [live] = wait_until(lambda: [r for r in served.runtime.active_runs() if r.cancel_requested])
    assert live.cancel_reason == CancelReason.SUPERSEDED
    tasks.gate(name).set()
    wait_until(idle(served))
    info = info_of(tx_store, task_id)
    assert (info.status, info.worker_id) == (RUNNING, "successor")


@pytest.mark.parametrize(("heartbeat", "lease"), [(5.0, 1.0), (20.0, 30.0)])
def test_a_heartbeat_that_could_miss_the_lease_is_refused(heartbeat: float, lease: float) -> None:
    # Its own sweep would declare it dead and fail its runs as "Worker lost" mid-run.
    with pytest.raises(ValueError, match="must be at most half of lease_timeout"):
        WorkerRuntime(InMemoryWorkerStore(), heartbeat_interval=heartbeat, lease_timeout=lease)
    with (
        override_settings(DJANGO_WORKERS={"HEARTBEAT_INTERVAL": heartbeat, "LEASE_TIMEOUT": lease}),
        pytest.raises(ValueError, match="must be at most half of lease_timeout"),
    ):
        WorkerRuntime(InMemoryWorkerStore())
    assert WorkerRuntime(InMemoryWorkerStore(), heartbeat_interval=lease / 2, lease_timeout=lease)
