"""A retry is a record: the end of a failed attempt, the deadline across attempts, the drain.

In-process runtimes over every store; ``tests/integration/test_retries.py`` does
the same with real worker processes, deploys and crashes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from django_workers import Retry, System, TaskOptions, TaskStatus, cancel_task, submit_task
from django_workers.stores import WorkerStore
from tests import tasks
from tests.helpers import RuntimeThread, start_runtime, wait_for_status, wait_until

PENDING, COMPLETED, FAILED = TaskStatus.PENDING, TaskStatus.COMPLETED, TaskStatus.FAILED

pytestmark = pytest.mark.usefixtures("coordination")


@pytest.fixture
def served(tx_store: WorkerStore) -> Iterator[RuntimeThread]:
    runtime = start_runtime(tx_store, concurrency=2)
    yield runtime
    tasks.reset_coordination()
    if runtime.alive:
        runtime.stop()


def submit(store: WorkerStore, key: str, task: Any, **kwargs: Any) -> str:
    return submit_task(key, task, System(), scope="global", store=store, **kwargs)


def test_a_failed_attempt_waits_as_a_pending_record_and_a_cancel_ends_it_at_once(
    tx_store: WorkerStore, served: RuntimeThread
) -> None:
    options = TaskOptions(retries=3, retry_backoff=60.0, retry_jitter=False)
    task_id = submit(tx_store, "flaky", tasks.fail_until_attempt, args=[2], options=options)
    waiting = wait_until(
        lambda: (i := tx_store.get_task_info(task_id)) is not None and i.retrying and i,
        timeout=10.0,
    )
    assert (waiting.status, waiting.attempts, waiting.worker_id) == (PENDING, 1, None)
    assert waiting.run_after is not None
    assert waiting.started_at is not None
    assert waiting.error is not None
    assert waiting.error.message == "attempt 1 fails"
    summary = waiting.retry_summary()
    assert summary is not None
    assert summary.startswith("attempt 2 of 4, next at ")
    assert not served.runtime.active_runs()  # no thread waits for it
    assert cancel_task(task_id, System(), store=tx_store).status == TaskStatus.CANCELLED


def test_a_retry_runs_once_its_backoff_has_passed(
    tx_store: WorkerStore, served: RuntimeThread
) -> None:
    options = TaskOptions(retries=2, retry_backoff=0.05, retry_jitter=False)
    task_id = submit(tx_store, "flaky", tasks.fail_until_attempt, args=[3], options=options)
    done = wait_for_status(tx_store, task_id, COMPLETED, timeout=10.0)
    assert (done.result, done.attempts, len(done.errors)) == (3, 3, 2)


def test_a_backoff_past_the_timeout_ends_the_task_failed_with_the_timeout(
    tx_store: WorkerStore, served: RuntimeThread
) -> None:
    options = TaskOptions(timeout=1.0, retries=5, retry_backoff=5.0, retry_jitter=False)
    task_id = submit(tx_store, "late", tasks.fail_until_attempt, args=[9], options=options)
    ended = wait_for_status(tx_store, task_id, FAILED, timeout=10.0)
    assert ended.error is not None
    assert ended.error.type == "django_workers.exceptions.TaskTimeoutError"
    assert [e.type for e in ended.errors] == [
        "builtins.RuntimeError",
        "django_workers.exceptions.TaskTimeoutError",
    ]
    assert ended.attempts == 1


def test_a_drain_gives_back_a_run_that_stopped_for_it_and_keeps_one_that_did_not_look(
    tx_store: WorkerStore, name: str
) -> None:
    runtime = start_runtime(tx_store, concurrency=2, drain_timeout=10.0)
    early = submit(tx_store, "early", tasks.return_early_when_asked, args=[f"{name}-early"])
    blind = submit(tx_store, "blind", tasks.held, args=[f"{name}-blind"])
    wait_until(lambda: tasks.calls[f"{name}-early"] == 1 and tasks.calls[f"{name}-blind"] == 1)
    runtime.runtime.request_stop()
    tasks.gate(f"{name}-blind").set()  # it finishes its work during the drain
    runtime.join()
    given_back = tx_store.get_task_info(early)
    done = tx_store.get_task_info(blind)
    assert done is not None
    assert (done.status, done.result) == (COMPLETED, "released")
    assert given_back is not None
    if tx_store.durable:
        assert (given_back.status, given_back.attempts, given_back.result) == (PENDING, 0, None)
    else:  # nothing is left to run what an in-memory store holds
        assert given_back.status == TaskStatus.CANCELLED


@pytest.mark.parametrize("after", [-1, 10**12, float("nan"), True, "5"])
def test_retry_refuses_a_delay_it_cannot_wait(after: Any) -> None:
    with pytest.raises(ValueError, match="Retry"):
        Retry(after=after)


def test_retry_takes_seconds_or_a_timedelta() -> None:
    assert Retry(after=timedelta(minutes=2)).after == 120.0
    assert Retry(after=5).after == 5.0
    assert Retry().after is None
