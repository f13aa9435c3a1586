"""Real ``runworkers`` behind a real PgBouncer in transaction mode, in front of the test database.

Through a transaction pool LISTEN succeeds and nothing arrives: the workers and
the handles must find that out, say it once and poll; with LISTEN_DATABASE on a
direct alias they are woken at once; and prepared statements must not collide
on the pool's shared server sessions.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from django_workers import Owner, System, TaskStatus, cancel_task, submit_task
from django_workers.stores.database import DatabaseWorkerStore
from tests.helpers import CHILD_SETTINGS, WorkerProcesses, wait_for_status, wait_until
from tests.pgbouncer import BINARY, TRANSACTION, PgBouncer
from tests.worker_processes import HANDLE_SCRIPT, ROOT, process_env

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PgBouncer pools PostgreSQL"),
    pytest.mark.skipif(
        BINARY is None,
        reason="the pgbouncer binary is missing: apt-get install -y pgbouncer (.ci/run does)",
    ),
]

DEAF_WARNING = "does not receive notices sent through alias 'default'"
NOT_PREPARED = "already exists"

#: Submits from several threads at once through ``default``; prints the errors as JSON.
SUBMIT_SCRIPT = """
import json, sys, threading
import django
django.setup()
from django.db import connections
from django_workers import System, submit_task
threads, each = int(sys.argv[1]), int(sys.argv[2])
errors, ids = [], []
def submit(n):
    try:
        for i in range(each):
            ids.append(submit_task(f"pooled-{n}-{i}", "tests.tasks.add", System(),
                                   args=[n, i], scope="global"))
    except Exception as e:
        errors.append(repr(e))
    finally:
        connections.close_all()
workers = [threading.Thread(target=submit, args=(n,)) for n in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
print(json.dumps({"errors": errors, "ids": ids}))
"""


@pytest.fixture
def pgbouncer(transactional_db: None) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(pool_size=2)
    yield bouncer
    bouncer.stop()


def pooled_env(bouncer: PgBouncer, **settings: Any) -> dict[str, str]:
    """A child's environment whose ``default`` goes through the transaction pool."""
    env = {
        "DATABASE_URL": bouncer.url(TRANSACTION),
        "WORKERS_TEST_SETTINGS": json.dumps({**CHILD_SETTINGS, **settings}),
    }
    return env


def direct_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def status_of_workers() -> list[dict[str, Any]]:
    out = io.StringIO()
    call_command("workers", "status", "--json", stdout=out)
    workers: list[dict[str, Any]] = json.loads(out.getvalue())["workers"]
    return workers


def start_script(script: str, args: list[str], env: dict[str, str], log: Path) -> Any:
    """``python -c script args`` on the test database as ``env`` says; stderr to ``log``."""
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", script, *args],
            env={**process_env(), **env},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )


def output(process: Any, log: Path, timeout: float = 60.0) -> dict[str, Any]:
    out, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, log.read_text()
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def submit(key: str, task: str, **kwargs: Any) -> str:
    return submit_task(key, task, System(), scope="global", **kwargs)


def test_without_listen_database_workers_and_handles_warn_poll_and_still_finish(
    pgbouncer: PgBouncer, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    env = pooled_env(pgbouncer, POLL_INTERVAL=0.1)
    worker = worker_processes.start("--concurrency", "2", env=env)
    worker.wait_for_log("wake-up:     polling every 0.1 s (LISTEN receives no notices)", 20.0)
    worker.wait_for_log(DEAF_WARNING)
    assert "pool_mode = transaction" in worker.log()
    assert "LISTEN_DATABASE" in worker.log()
    wait_until(
        lambda: (
            status_of_workers()[0]["wake_up"] == "polling every 0.1 s (LISTEN receives no notices)"
        )
    )

    store = DatabaseWorkerStore()
    ids = [submit(f"polled-{n}", "tests.tasks.add", args=[n, 1]) for n in range(5)]
    for n, task_id in enumerate(ids):
        assert wait_for_status(store, task_id, TaskStatus.COMPLETED).result == n + 1

    # A handle waiting through the pool: its LISTEN hears nothing either, so it polls; a
    # cancel (sent from this process, directly) reaches the task by the worker's poll.
    waited = submit_task("waited", "tests.tasks.wait_for_cancel", Owner("alice"))
    wait_for_status(store, waited, TaskStatus.RUNNING)
    log = tmp_path / "handle.log"
    handle = start_script(HANDLE_SCRIPT, [waited, "alice", "wait"], env, log)
    wait_until(lambda: "Handles waiting in this process poll instead" in log.read_text(), 20.0)
    cancel_task(waited, Owner("alice"))
    assert output(handle, log)["status"] == "CANCELLED"
    assert log.read_text().count(DEAF_WARNING) == 1
    assert worker.log().count(DEAF_WARNING) == 1


def test_with_listen_database_on_a_direct_alias_a_task_starts_without_waiting_for_a_poll(
    pgbouncer: PgBouncer, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    # A poll every 5 s (and a lease long enough not to shorten it): only a notice can
    # start a task within 2 s of its submit, three times in a row.
    settings = {"POLL_INTERVAL": 5.0, "LEASE_TIMEOUT": 60.0, "LISTEN_DATABASE": "direct"}
    env = {
        **pooled_env(pgbouncer, **settings),
        "WORKERS_TEST_DATABASES": json.dumps({"direct": direct_url()}),
    }
    worker = worker_processes.start("--concurrency", "2", env=env)
    worker.wait_for_log("wake-up:     LISTEN/NOTIFY on alias 'direct'", 20.0)
    [seen] = status_of_workers()
    assert seen["wake_up"] == "LISTEN/NOTIFY on alias 'direct'"

    store = DatabaseWorkerStore()
    for n in range(3):
        task_id = submit(f"woken-{n}", "tests.tasks.add", args=[n, 2])
        assert wait_for_status(store, task_id, TaskStatus.COMPLETED, timeout=2.0).result == n + 2

    # A handle waits the same way.
    waited = submit_task("waited", "tests.tasks.wait_for_cancel", Owner("alice"))
    wait_for_status(store, waited, TaskStatus.RUNNING, timeout=2.0)
    log = tmp_path / "handle.log"
    handle = start_script(HANDLE_SCRIPT, [waited, "alice", "cancel"], env, log)
    assert output(handle, log)["status"] == "CANCELLED"
    assert DEAF_WARNING not in log.read_text()
    assert DEAF_WARNING not in worker.log()


def test_prepared_statements_do_not_collide_on_the_pools_sessions(
    pgbouncer: PgBouncer, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    # psycopg prepares a statement run twice on a connection; eight clients take turns
    # on two server sessions, where each would find another's "_pg3_0" already there.
    env = {
        **pooled_env(pgbouncer, POLL_INTERVAL=0.1),
        "WORKERS_TEST_DB_OPTIONS": json.dumps({"prepare_threshold": 1}),
    }
    worker = worker_processes.start("--concurrency", "4", env=env)
    worker_processes.wait_registered(1)
    log = tmp_path / "submit.log"
    result = output(start_script(SUBMIT_SCRIPT, ["8", "10"], env, log), log, timeout=120.0)
    assert result["errors"] == []
    assert len(result["ids"]) == 80
    store = DatabaseWorkerStore()
    for task_id in result["ids"]:
        wait_for_status(store, task_id, TaskStatus.COMPLETED, timeout=60.0)
    assert NOT_PREPARED not in worker.log()
