"""The in-process half of the anchors' benchmark: the same actions as benchmarks/driver.py.

``python -m benchmarks.anchors.driver ACTION '{"system": "dtdb"|"procrastinate", ...}'``,
run by benchmarks/.venv-anchors/bin/python with
DJANGO_SETTINGS_MODULE=benchmarks.anchors.settings. Each system is used
through its documented public API: ``Task.enqueue()`` for django-tasks-db,
``Task.defer()`` / ``Task.batch_defer()`` for Procrastinate.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.anchors.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import DatabaseError, connection, transaction  # noqa: E402
from django_tasks_db.models import DBTaskResult, get_date_max  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.anchors.tasks import dt_noop, dt_probe, pc_noop, pc_probe  # noqa: E402

DTDB, PROCRASTINATE = "dtdb", "procrastinate"
DTDB_TABLE = DBTaskResult._meta.db_table
TABLES = {
    DTDB: (DTDB_TABLE,),
    PROCRASTINATE: (
        "procrastinate_events",
        "procrastinate_periodic_defers",
        "procrastinate_jobs",
        "procrastinate_workers",
    ),
}


def _check(system: str) -> None:
    if system not in TABLES:
        raise SystemExit(f"unknown anchor {system!r}; choose {DTDB} or {PROCRASTINATE}")


def migrate(system: str) -> dict[str, Any]:
    _check(system)
    call_command("migrate", verbosity=0, interactive=False)
    package = "django-tasks-db" if system == DTDB else "procrastinate"
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server = cursor.fetchone()[0].split()[0]
    info = {
        "django": django.get_version(),
        package: version(package),
        "psycopg": version("psycopg"),
        "server_version": server,
    }
    info["describe"] = (
        f"{package} {info[package]}, Django {info['django']}, psycopg {info['psycopg']}, "
        f"PostgreSQL {server}"
    )
    return info


def reset(system: str) -> dict[str, Any]:
    _check(system)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES[system])} CASCADE")
    return {}


def enqueue_single(system: str, count: int, atomic: bool = False) -> dict[str, Any]:
    """One enqueue per call, as a view would call it: each in autocommit, or with
    ``atomic`` all of them in one ``transaction.atomic()`` block (its COMMIT timed too).

    Neither system has owners: there is one kind of enqueue, the figure ours is
    compared with for both its ``System()`` and its ``Owner`` tasks.
    """
    reset(system)
    enqueue = dt_noop.enqueue if system == DTDB else pc_noop.defer
    for _ in range(20):  # warm-up: connection, imports
        enqueue()
    if not atomic:
        return common.timed_loop(lambda n: enqueue(), count)
    _check_joins_transaction(system, enqueue)
    started = time.perf_counter()
    with transaction.atomic():
        for _ in range(count):
            enqueue()
    seconds = time.perf_counter() - started
    return {"count": count, "seconds": seconds, "per_second": count / seconds}


def _check_joins_transaction(system: str, enqueue: Any) -> None:
    """Refuse to time an enqueue that would not run in the Django transaction around it.

    Procrastinate's Django connector and django-tasks-db both write through Django's
    connection; an enqueue rolled back with its block must leave no row behind.
    """
    table = DTDB_TABLE if system == DTDB else "procrastinate_jobs"

    def rows() -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {table}")
            return int(cursor.fetchone()[0])

    before = rows()
    with transaction.atomic():
        enqueue()
        transaction.set_rollback(True)
    if rows() != before:
        raise SystemExit(f"{system}: an enqueue inside transaction.atomic() outlived its rollback")


def enqueue_bulk(system: str, count: int, batch: int) -> dict[str, Any]:
    """Procrastinate's ``batch_defer``; django-tasks-db has no bulk enqueue."""
    reset(system)
    if system == DTDB:
        return {"unsupported": True}
    pc_noop.batch_defer({})
    batches = range(0, count, batch)

    def one_batch(n: int) -> None:
        size = min(batch, count - batches[n])
        pc_noop.batch_defer(*({} for _ in range(size)))

    answer = common.timed_loop(one_batch, len(batches))
    return {"count": count, "seconds": answer["seconds"], "per_second": count / answer["seconds"]}


def prefill(system: str, count: int, fresh: bool = True) -> dict[str, Any]:
    """Queue ``count`` no-op tasks for a drain (not timed), then settle the database.

    ``fresh`` empties the tables first (not under a running worker: its registration
    would go with them).
    """
    _check(system)
    if fresh:
        reset(system)
    if system == DTDB:
        # Rows exactly as DatabaseBackend.enqueue writes them, in bulk to save time.
        backend = dt_noop.get_backend()
        rows = [
            DBTaskResult(
                id=uuid.uuid4(),
                args_kwargs={"args": [], "kwargs": {}},
                priority=dt_noop.priority,
                task_path=dt_noop.module_path,
                queue_name=dt_noop.queue_name,
                run_after=get_date_max(),
                backend_name=backend.alias,
            )
            for _ in range(count)
        ]
        DBTaskResult.objects.bulk_create(rows, batch_size=1000)
    else:
        for first in range(0, count, 1000):
            pc_noop.batch_defer(*({} for _ in range(min(1000, count - first))))
    with connection.cursor() as cursor:
        for table in TABLES[system]:
            cursor.execute(f"ANALYZE {table}")
        # Not a superuser: no checkpoint, and the figures are a little noisier.
        with contextlib.suppress(DatabaseError):
            cursor.execute("CHECKPOINT")
    return {"count": count}


def drain_stats(system: str) -> dict[str, Any]:
    """How many tasks succeeded, and when the first started and the last finished (epoch s)."""
    _check(system)
    with connection.cursor() as cursor:
        if system == DTDB:
            cursor.execute(f"SELECT status, COUNT(*) FROM {DTDB_TABLE} GROUP BY status")
            statuses = dict(cursor.fetchall())
            cursor.execute(
                "SELECT EXTRACT(EPOCH FROM MIN(started_at)), EXTRACT(EPOCH FROM MAX(finished_at))"
                f" FROM {DTDB_TABLE} WHERE status = 'SUCCESSFUL'"
            )
            completed = statuses.get("SUCCESSFUL", 0)
        else:
            cursor.execute("SELECT status::text, COUNT(*) FROM procrastinate_jobs GROUP BY status")
            statuses = dict(cursor.fetchall())
            cursor.execute(
                "SELECT EXTRACT(EPOCH FROM MIN(at) FILTER (WHERE type = 'started')),"
                " EXTRACT(EPOCH FROM MAX(at) FILTER (WHERE type = 'succeeded'))"
                " FROM procrastinate_events"
            )
            completed = statuses.get("succeeded", 0)
        first, last = cursor.fetchone()
    return {
        "statuses": statuses,
        "completed": completed,
        "first_start": float(first) if first is not None else None,
        "last_finish": float(last) if last is not None else None,
    }


def latency(
    system: str, path: str, samples: int, gap: list[float], timeout: float
) -> dict[str, Any]:
    """Enqueue -> start on the idle worker run.py started (see common.measure_latency)."""
    _check(system)
    if system == DTDB:

        def submit(probe_path: str, tag: str) -> None:
            dt_probe.enqueue(probe_path, tag)

    else:

        def submit(probe_path: str, tag: str) -> None:
            pc_probe.defer(path=probe_path, tag=tag)

    return common.measure_latency(submit, path, samples, (gap[0], gap[1]), timeout)


ACTIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "migrate": migrate,
    "reset": reset,
    "enqueue_single": enqueue_single,
    "enqueue_bulk": enqueue_bulk,
    "prefill": prefill,
    "drain_stats": drain_stats,
    "latency": latency,
}

if __name__ == "__main__":
    common.driver_main(ACTIONS)
