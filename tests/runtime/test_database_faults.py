"""A runtime facing its database's faults: dropped connections, a database away, late timeouts.

In-process runtimes on the test database. A dropped connection is made with
``pg_terminate_backend`` (what a PostgreSQL restart, a failover or a pooler's
idle timeout does to a client); a database that is away, by pointing the
runtime's connections at one that does not answer. The fault suite in
``tests/faults`` does the same to real worker processes and a real server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, OperationalError, connection

from django_workers import (
    DatabaseUnavailable,
    System,
    TaskOptions,
    TaskStatus,
    Workflow,
    submit_task,
)
from django_workers.cancellation import CancelReason
from django_workers.handles import close_listeners
from django_workers.info import TaskInfo
from django_workers.models import WorkerProcess
from django_workers.stores import WorkerStore
from django_workers.stores.database import DatabaseWorkerStore
from tests import tasks
from tests.helpers import RuntimeThread, start_runtime, wait_for_status, wait_until
from tests.models import Execution

COMPLETED, FAILED, RUNNING = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.RUNNING

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="pg_terminate_backend is PostgreSQL's"
)

pytestmark = pytest.mark.usefixtures("coordination")


@pytest.fixture
def served(db_store: DatabaseWorkerStore) -> Iterator[list[RuntimeThread]]:
    started: list[RuntimeThread] = []
    yield started
    tasks.reset_coordination()
    for runtime in started:
        if runtime.alive:
            runtime.stop()
    close_listeners()  # a handle's wait listens on a connection of its own


def submit(key: str, task: Any, **kwargs: Any) -> str:
    return submit_task(key, task, System(), scope="global", **kwargs)


def cut_every_other_connection() -> int:
    """Terminate every backend of the test database but this thread's; how many went."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


# -- a dropped connection ----------------------------------------------------------------------


@postgres_only
@pytest.mark.parametrize(
    ("max_age", "health_checks", "retries"),
    [
        pytest.param(0, False, 0, id="closed-after-each-task"),
        pytest.param(None, True, 0, id="persistent-with-health-checks"),
        # Without health checks the first query finds the connection dead, as in a view:
        # that attempt fails, and the next starts on a new connection.
        pytest.param(None, False, 1, id="persistent-without-health-checks"),
    ],
)
def test_orm_tasks_run_on_after_their_connections_were_cut(
    db_store: DatabaseWorkerStore,
    served: list[RuntimeThread],
    monkeypatch: pytest.MonkeyPatch,
    max_age: int | None,
    health_checks: bool,
    retries: int,
) -> None:
    # The runtime's threads open their connections from these settings.
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", max_age)
    monkeypatch.setitem(connection.settings_dict, "CONN_HEALTH_CHECKS", health_checks)
    served.append(start_runtime(db_store, concurrency=2))
    options = TaskOptions(retries=retries, retry_backoff=0.01)
    before = [submit(f"before-{n}", tasks.record_execution, options=options) for n in range(4)]
    for task_id in before:
        wait_for_status(db_store, task_id, COMPLETED)
    assert cut_every_other_connection() >= 3  # the run threads', the loop's, the listener's
    after = [submit(f"after-{n}", tasks.record_execution, options=options) for n in range(6)]
    ends = [wait_for_status(db_store, t, COMPLETED, FAILED, timeout=15.0) for t in after]
    assert [(end.status, end.error) for end in ends] == [(COMPLETED, None)] * 6
    assert Execution.objects.filter(task_id__in=after, finished_at__isnull=False).count() == 6
    assert served[0].alive


# -- a database that is away -------------------------------------------------------------------


@pytest.fixture
def database_away(
    transactional_db: None, tmp_path: Path
) -> Iterator[Callable[[], Callable[[], None]]]:
    """``away()`` points new connections at a database that cannot be reached; returns the undo.

    Undone at the latest before the test database is flushed.
    """
    patch = pytest.MonkeyPatch()

    def away() -> Callable[[], None]:
        if connection.vendor == "sqlite":
            patch.setitem(connection.settings_dict, "NAME", str(tmp_path / "gone" / "db"))
        else:
            # Port 9 (discard) on the loopback: refused at once, as by a stopped server.
            patch.setitem(connection.settings_dict, "HOST", "127.0.0.1")
            patch.setitem(connection.settings_dict, "PORT", "9")
        return patch.undo

    yield away
    patch.undo()


def test_a_runtime_started_while_the_database_is_away_waits_for_it(
    db_store: DatabaseWorkerStore,
    served: list[RuntimeThread],
    database_away: Callable[[], Callable[[], None]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    task_id = submit("waiting", tasks.add, args=[2, 3])
    back = database_away()
    caplog.set_level(logging.DEBUG, logger="django_workers")
    from django_workers.runtime.runtime import WorkerRuntime

    runtime = WorkerRuntime(
        db_store, concurrency=1, poll_interval=0.02, heartbeat_interval=0.1, lease_timeout=1.0
    )
    waiting = RuntimeThread(runtime, drain_timeout=5.0)
    served.append(waiting)
    waiting._thread.start()
    wait_until(lambda: "Database unavailable (start-up" in caplog.text, timeout=10.0)
    # Longer than the lease: a start that waits is no stall.
    with pytest.raises(AssertionError):
        wait_until(lambda: runtime.started.is_set() or not waiting.alive, timeout=2.5)
    back()
    assert runtime.started.wait(10.0)
    assert wait_for_status(db_store, task_id, COMPLETED).result == 5
    with pytest.raises(AssertionError):
        wait_until(lambda: runtime.stalled or not waiting.alive, timeout=1.5)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(" (")[0] for r in warnings] == ["Database unavailable"]
    assert "Database reachable again after" in caplog.text


@postgres_only  # an SQLite file stays open to the connections that have it open
def test_a_serving_runtime_waits_out_an_outage_longer_than_its_lease(
    db_store: DatabaseWorkerStore,
    served: list[RuntimeThread],
    database_away: Callable[[], Callable[[], None]],
    caplog: pytest.LogCaptureFixture,
    name: str,
) -> None:
    caplog.set_level(logging.INFO, logger="django_workers")
    runtime = start_runtime(db_store, concurrency=2, heartbeat_interval=0.1, lease_timeout=1.0)
    served.append(runtime)
    held = submit("held", tasks.held, args=[name])
    wait_until(lambda: tasks.calls[name] == 1)
    back = database_away()
    cut_every_other_connection()  # open connections fail too, as the server's would
    wait_until(lambda: "Database unavailable" in caplog.text, timeout=10.0)
    tasks.gate(name).set()  # the function returns during the outage
    # Three leases long: the runtime neither exits nor takes itself for stuck.
    with pytest.raises(AssertionError):
        wait_until(lambda: runtime.runtime.stalled or not runtime.alive, timeout=3.0)
    back()
    # Its end, written once the database is back: never "worker lost".
    end = wait_for_status(db_store, held, COMPLETED, FAILED, timeout=15.0)
    assert (end.status, end.result) == (COMPLETED, "released")
    assert WorkerProcess.objects.filter(pk=runtime.runtime.worker_id).exists()
    after = submit("after", tasks.add, args=[1, 1])
    assert wait_for_status(db_store, after, COMPLETED).result == 2
    assert "Database reachable again after" in caplog.text


def test_a_submit_while_the_database_is_away_raises_a_clear_error(
    database_away: Callable[[], Callable[[], None]],
) -> None:
    database_away()
    connection.close()
    with pytest.raises(DatabaseUnavailable, match="database is unavailable") as raised:
        submit("lost", tasks.add, args=[1, 1])
    assert isinstance(raised.value, DatabaseError)  # generic handlers keep working
    assert "submit it again once the database is back" in str(raised.value)


# -- a timeout after the token was taken ------------------------------------------------------


def test_a_node_that_ignores_its_workflows_cancel_still_ends_at_its_timeout(
    db_store: DatabaseWorkerStore, served: list[RuntimeThread], name: str
) -> None:
    served.append(start_runtime(db_store, concurrency=2))
    wf = Workflow("slow", System())
    # held() never looks at its token: it runs until the test's end opens its gate.
    wf.add("stubborn", tasks.held, args=[name], options=TaskOptions(timeout=2))
    handle = wf.submit()
    [node] = handle.status().nodes
    wait_until(lambda: tasks.calls[name] == 1)
    handle.cancel()  # the run's token takes the reason "workflow"
    end = wait_for_status(db_store, node.task_id, FAILED, timeout=5.0)
    assert end.cancel_reason == CancelReason.TIMEOUT
    assert end.error is not None
    assert end.error.type.endswith("TaskTimeoutError")
    # The workflow ends with it, while the function still runs.
    assert handle.wait(5.0).state in {"failed", "cancelled"}
    assert tasks.calls[name] == 1


# -- a claim whose answer was lost --------------------------------------------------------------


def test_records_a_claim_took_whose_answer_was_lost_go_back_and_run(
    tx_store: WorkerStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="django_workers")
    original = tx_store.claim
    lost: list[str] = []

    def claim_then_lose_the_answer(*args: Any, **kwargs: Any) -> list[TaskInfo]:
        claimed = original(*args, **kwargs)
        if claimed and not lost:
            lost.extend(info.id for info in claimed)
            # As a connection cut between the claim's commit and its answer.
            raise OperationalError("server closed the connection unexpectedly")
        return claimed

    tx_store.claim = claim_then_lose_the_answer  # type: ignore[method-assign]
    task_ids = [
        submit_task(f"t{n}", tasks.add, System(), args=[n, n], scope="global", store=tx_store)
        for n in range(3)
    ]
    runtime = start_runtime(tx_store, concurrency=4)
    try:
        ends = [wait_for_status(tx_store, t, COMPLETED, timeout=10.0) for t in task_ids]
    finally:
        runtime.stop()
    assert lost
    assert [end.result for end in ends] == [0, 2, 4]
    assert all(end.attempts == 1 for end in ends)  # given back, not counted as an attempt
    assert "committed but whose answer was lost" in caplog.text
