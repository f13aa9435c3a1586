"""A run's end the database refuses: its record ends FAILED saying why, or is left alone.

Never a loop and never a lost end of another run: the runtime writes the
ends of a refused batch one by one, ends a refused record FAILED with the
database's error, and when even that is refused logs once and leaves the
record to the zombie sweep. The store here refuses the ends of chosen tasks,
as a database refuses a value it cannot hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from django.db import DataError

from django_workers import System, TaskStatus, clock, lifecycle, submit_task
from django_workers.info import TaskInfo
from django_workers.lifecycle import TaskEnd
from django_workers.runtime.runtime import WorkerRuntime
from django_workers.stores import WorkerStore
from tests import tasks
from tests.helpers import RuntimeThread, runtime_threads, start_runtime, wait_for_status, wait_until

COMPLETED, FAILED, RUNNING = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.RUNNING
REFUSAL = "value too long for type character varying(64) (a test's)"


class Refusals:
    """Makes ``store`` refuse the ends of chosen tasks; counts the ends tried for each."""

    def __init__(self, store: WorkerStore) -> None:
        self.tasks: set[str] = set()
        #: Also refuse the FAILED end that reports a refusal (any end with an error).
        self.failed_too = False
        self.tried: dict[str, int] = {}
        for name in ("end_tasks", "end_and_claim"):
            setattr(store, name, self._refusing(getattr(store, name)))

    def _refusing(self, write: Callable[..., Any]) -> Callable[..., Any]:
        def refusing(ends: Sequence[TaskEnd], *args: Any, **kwargs: Any) -> Any:
            for end in ends:
                self.tried[end.task_id] = self.tried.get(end.task_id, 0) + 1
            if any(self._refused(end) for end in ends):
                raise DataError(REFUSAL)
            return write(ends, *args, **kwargs)

        return refusing

    def _refused(self, end: TaskEnd) -> bool:
        return end.task_id in self.tasks and (self.failed_too or end.error is None)


@pytest.fixture
def runtime(tx_store: WorkerStore) -> WorkerRuntime:
    """A runtime that is not serving: its end writer is called directly, its logs at once."""
    made = WorkerRuntime(tx_store, concurrency=2, heartbeat_interval=0.2, lease_timeout=5.0)
    made._report = lambda fn, *args: fn(*args)  # type: ignore[method-assign]
    return made


def _claimed_ends(runtime: WorkerRuntime, *keys: str) -> list[TaskEnd]:
    """Submit a task per key, claim them all for ``runtime``, and build their COMPLETED ends."""
    for key in keys:
        submit_task(key, tasks.add, System(), args=[1, 2], scope="global", store=runtime.store)
    claimed: list[TaskInfo] = runtime.store.claim(runtime.worker_id, None, 10, clock.now())
    by_id = {info.id: info for info in claimed}
    return [
        lifecycle.run_end(by_id[key], runtime.worker_id, COMPLETED, clock.now(), result=3)
        for key in keys
    ]


def _status(store: WorkerStore, task_id: str) -> TaskInfo:
    info = store.get_task_info(task_id)
    assert info is not None
    return info


def test_a_refused_end_ends_its_record_failed_and_the_rest_of_the_batch_is_stored(
    runtime: WorkerRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    refusals = Refusals(runtime.store)
    ends = _claimed_ends(runtime, "bad", "good")
    refusals.tasks.add("bad")
    with caplog.at_level(logging.ERROR, logger="django_workers.runtime.runtime"):
        won, claimed = runtime._end_with_retry(ends, refill=1)
    assert (won, claimed) == ([True, True], [])
    bad, good = _status(runtime.store, "bad"), _status(runtime.store, "good")
    assert (good.status, good.result) == (COMPLETED, 3)
    assert (bad.status, bad.result) == (FAILED, None)
    assert bad.error is not None
    assert bad.error.type == "django.db.utils.DataError"
    assert "ended COMPLETED but the database refused to store its outcome" in bad.error.message
    assert REFUSAL in bad.error.message
    assert [r.getMessage() for r in caplog.records] == [
        f"The database refused the end of task bad; it ended FAILED instead: {REFUSAL}"
    ]


@pytest.mark.parametrize("batch", [["bad"], ["bad", "good"]], ids=["alone", "in-a-batch"])
def test_an_end_refused_even_as_failed_is_logged_once_and_left_to_the_sweep(
    runtime: WorkerRuntime, caplog: pytest.LogCaptureFixture, batch: list[str]
) -> None:
    refusals = Refusals(runtime.store)
    ends = _claimed_ends(runtime, *batch)
    refusals.tasks.add("bad")
    refusals.failed_too = True
    with caplog.at_level(logging.ERROR, logger="django_workers.runtime.runtime"):
        won, _claimed = runtime._end_with_retry(ends)
    assert won == [False, True][: len(batch)]
    # The batch, the end alone, its FAILED end: each tried once, never in a loop.
    assert refusals.tried["bad"] == len(batch) + 1
    assert _status(runtime.store, "bad").status == RUNNING
    if "good" in batch:
        assert _status(runtime.store, "good").status == COMPLETED
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("The database refused the end of task bad (")
    assert line.endswith("; it is left to the zombie sweep")


@pytest.fixture
def served() -> Iterator[list[RuntimeThread]]:
    started: list[RuntimeThread] = []
    yield started
    tasks.reset_coordination()
    for runtime in started:
        if runtime.alive:
            runtime.stop()
    wait_until(lambda: not runtime_threads(), timeout=10.0)


def test_a_worker_whose_end_is_refused_keeps_serving(
    tx_store: WorkerStore, served: list[RuntimeThread]
) -> None:
    refusals = Refusals(tx_store)
    refusals.tasks.add("bad")
    refusals.failed_too = True
    served.append(start_runtime(tx_store))
    submit_task("bad", tasks.add, System(), args=[1, 2], scope="global", store=tx_store)
    wait_until(lambda: refusals.tried.get("bad", 0) >= 2)
    later = submit_task("later", tasks.add, System(), args=[2, 3], scope="global", store=tx_store)
    assert wait_for_status(tx_store, later, COMPLETED).result == 5
    assert _status(tx_store, "bad").status == RUNNING
    assert served[0].alive


def test_a_worker_starts_and_serves_when_its_zombie_sweep_fails(
    tx_store: WorkerStore, served: list[RuntimeThread], caplog: pytest.LogCaptureFixture
) -> None:
    def failing(**kwargs: Any) -> list[TaskEnd]:
        raise DataError("a record no end fits (a test's)")

    tx_store.recover_zombies = failing  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="django_workers.runtime.runtime"):
        served.append(start_runtime(tx_store))
        task_id = submit_task("t", tasks.add, System(), args=[1, 2], scope="global", store=tx_store)
        assert wait_for_status(tx_store, task_id, COMPLETED).result == 3
        wait_until(lambda: "The zombie sweep failed" in caplog.text)
    assert served[0].alive
