"""The in-process half of the django-workers benchmark: enqueue, prefill, read results.

``python -m benchmarks.driver ACTION '{...}'`` with DJANGO_SETTINGS_MODULE=benchmarks.settings
and DATABASE_URL set; run.py starts it and reads the JSON answer it prints last.
Everything goes through the public API (``submit_task``, ``submit_tasks``) as
a site would call it: with ``System()`` authority and global keys, or (the
``authority="owner"`` figures) with ``Owner`` authority and the user's own keys.
``copy_raw`` is the reference for the bulk figure: the same rows, built before
the clock starts, written by a bare ``COPY``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import DatabaseError, connection, transaction  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.tasks import noop, probe  # noqa: E402
from django_workers import (  # noqa: E402
    Owner,
    System,
    TaskSubmission,
    submit_task,
    submit_tasks,
)

TABLES = (
    "django_workers_taskwatcher",
    "django_workers_taskrecord",
    "django_workers_workerprocess",
    "django_workers_queuelock",
)
SYSTEM = System()
OWNER = Owner("bench-user")


def migrate() -> dict[str, Any]:
    call_command("migrate", verbosity=0, interactive=False)
    import sqlite3

    info: dict[str, Any] = {"vendor": connection.vendor, "django": django.get_version()}
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for name in ("server_version", "fsync", "synchronous_commit"):
                cursor.execute(f"SHOW {name}")
                info[name] = cursor.fetchone()[0]
        info["describe"] = (
            f"PostgreSQL {info['server_version'].split()[0]} (fsync {info['fsync']}, "
            f"synchronous_commit {info['synchronous_commit']}), Django {info['django']}"
        )
    else:
        info["server_version"] = sqlite3.sqlite_version
        info["describe"] = (
            f"SQLite {sqlite3.sqlite_version} (WAL, IMMEDIATE, timeout 20 s), "
            f"Django {info['django']}"
        )
    return info


def reset() -> dict[str, Any]:
    """Empty the tables, so each run starts from the same state."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {', '.join(TABLES)} CASCADE")
        else:
            for table in TABLES:
                cursor.execute(f"DELETE FROM {table}")
    return {}


def _key(prefix: str, n: int) -> str:
    return f"{prefix}-{n}"


def enqueue_single(count: int, authority: str = "system", atomic: bool = False) -> dict[str, Any]:
    """``submit_task`` in a loop, as a view would call it.

    ``authority``: ``"system"`` (``System()``, global keys) or ``"owner"`` (``Owner``,
    the user's own keys). ``atomic``: every call in one ``transaction.atomic()``
    block, its COMMIT timed too; else each call in autocommit.
    """
    reset()
    run = uuid.uuid4().hex[:8]
    if authority == "owner":
        submit = lambda key: submit_task(key, noop, OWNER)  # noqa: E731
    elif authority == "system":
        submit = lambda key: submit_task(key, noop, SYSTEM, scope="global")  # noqa: E731
    else:
        raise SystemExit(f"unknown authority {authority!r}; choose system or owner")
    for n in range(20):  # warm-up: connection, imports, statement caches
        submit(_key(f"warm-{run}", n))
    keys = [_key(f"one-{run}", n) for n in range(count)]
    if not atomic:
        return common.timed_loop(lambda n: submit(keys[n]), count)
    started = time.perf_counter()
    with transaction.atomic():
        for key in keys:
            submit(key)
    seconds = time.perf_counter() - started
    return {"count": count, "seconds": seconds, "per_second": count / seconds}


def _bulk_task(key: str, n: int, arguments: bool) -> TaskSubmission:
    """One task of the bulk figures; with ``arguments``, args and kwargs as real tasks pass."""
    if not arguments:
        return TaskSubmission(key=key, task=noop, scope="global")
    return TaskSubmission(
        key=key, task=noop, scope="global", args=[n, f"user-{n}"], kwargs={"mode": "fast"}
    )


def enqueue_bulk(count: int, batch: int, arguments: bool = False) -> dict[str, Any]:
    """``submit_tasks`` of ``count`` tasks in batches of ``batch`` (building them included).

    ``arguments``: each task with two args and a kwarg (the figure's tasks take none).
    """
    reset()
    run = uuid.uuid4().hex[:8]
    submit_tasks([TaskSubmission(key=f"warm-{run}", task=noop, scope="global")], SYSTEM)
    batches = range(0, count, batch)

    def one_batch(n: int) -> None:
        first = batches[n]
        submit_tasks(
            [
                _bulk_task(_key(f"bulk-{run}", i), i, arguments)
                for i in range(first, min(first + batch, count))
            ],
            SYSTEM,
        )

    answer = common.timed_loop(one_batch, len(batches))
    return {"count": count, "seconds": answer["seconds"], "per_second": count / answer["seconds"]}


def copy_raw(count: int, batch: int, arguments: bool = False) -> dict[str, Any]:
    """The bulk figure's reference: the rows ``submit_tasks`` would write, by a bare COPY.

    The rows are built before the clock starts (the same keys, task, queue and
    defaults as ``enqueue_bulk``); then one ``COPY ... FROM STDIN`` per batch of
    ``batch``, each in autocommit, into the same table with its indexes and
    NOTIFY trigger. PostgreSQL only.
    """
    if connection.vendor != "postgresql":
        return {"unsupported": True}
    from django_workers.stores import rows
    from django_workers.stores.sql import columns
    from django_workers.submission import build_task

    reset()
    run = uuid.uuid4().hex[:8]
    table = "django_workers_taskrecord"
    records = [
        rows.row_of(build_task(_bulk_task(_key(f"copy-{run}", i), i, arguments), SYSTEM, _store()))
        for i in range(count)
    ]
    values = [
        [json.dumps(r[f]) if isinstance(r[f], list | dict) else r[f] for f in columns._FIELDS]
        for r in records
    ]
    statement = f"COPY {table} ({', '.join(columns._COLUMNS)}) FROM STDIN"
    connection.ensure_connection()
    raw = connection.connection
    started = time.perf_counter()
    for first in range(0, count, batch):
        with raw.cursor() as cursor, cursor.copy(statement) as copy:
            for row in values[first : first + batch]:
                copy.write_row(row)
    seconds = time.perf_counter() - started
    return {"count": count, "seconds": seconds, "per_second": count / seconds}


def _store() -> Any:
    from django_workers.stores import default_store

    return default_store()


def prefill(count: int, fresh: bool = True) -> dict[str, Any]:
    """Queue ``count`` no-op tasks for a drain (not timed), then settle the database.

    ``fresh`` empties the tables first; the memory benchmark queues for a worker
    already running, whose registration must stay.
    """
    if fresh:
        reset()
    run = uuid.uuid4().hex[:8]
    for first in range(0, count, 1000):
        submit_tasks(
            [
                TaskSubmission(key=_key(f"drain-{run}", i), task=noop, scope="global")
                for i in range(first, min(first + 1000, count))
            ],
            SYSTEM,
        )
    _settle()
    return {"count": count}


def _settle() -> None:
    """Fresh statistics, and a checkpoint so the drain does not pay for the prefill's WAL."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE django_workers_taskrecord")
            # Not a superuser: no checkpoint, and the figures are a little noisier.
            with contextlib.suppress(DatabaseError):
                cursor.execute("CHECKPOINT")
        else:
            cursor.execute("ANALYZE")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def drain_stats() -> dict[str, Any]:
    """How many tasks completed, and when the first started and the last finished (epoch s)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, COUNT(*) FROM django_workers_taskrecord GROUP BY status ORDER BY status"
        )
        statuses = dict(cursor.fetchall())
    from django.db.models import Max, Min

    from django_workers.models import TaskRecord

    span = TaskRecord.objects.filter(status="COMPLETED").aggregate(
        first=Min("started_at"), last=Max("finished_at")
    )
    return {
        "statuses": statuses,
        "completed": statuses.get("COMPLETED", 0),
        "first_start": span["first"].timestamp() if span["first"] else None,
        "last_finish": span["last"].timestamp() if span["last"] else None,
    }


def latency(path: str, samples: int, gap: list[float], timeout: float) -> dict[str, Any]:
    """Enqueue -> start on the idle worker run.py started (see common.measure_latency)."""
    run = uuid.uuid4().hex[:8]

    def submit(probe_path: str, tag: str) -> None:
        submit_task(f"probe-{run}-{tag}", probe, SYSTEM, args=[probe_path, tag], scope="global")

    return common.measure_latency(submit, path, samples, (gap[0], gap[1]), timeout)


def latency_floor(path: str, samples: int, gap: list[float], timeout: float) -> dict[str, Any]:
    """The wake-up's floor: probes submitted by a bare insert-function call (PostgreSQL).

    ``benchmarks.wake_floor``, which run.py started in place of a worker, claims
    them. Each probe's id is its tag, which that process writes to ``path``
    with the time its claim returned. The cursor binds its values on the
    server, as ``submit_task``'s does; the row is a probe's, with no arguments.
    """
    if connection.vendor != "postgresql":
        return {"unsupported": True}
    connection.ensure_connection()
    raw = connection.connection
    from django_workers.stores.sql import INSERT_FUNCTION

    statement = (
        f"SELECT {INSERT_FUNCTION}(%s, %s, NULL, 'global', 'benchmarks.tasks.probe', "
        "'[]', '{}', 'default', 0, NULL, '{}', 'PENDING', %s, NULL, NULL, now())"
    )

    cursor = raw.cursor()  # one cursor for every probe, as submit_task keeps its own

    def submit(_path: str, tag: str) -> None:
        cursor.execute(statement, (tag, tag, uuid.uuid4().hex))

    with cursor:
        return common.measure_latency(submit, path, samples, (gap[0], gap[1]), timeout)


ACTIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "migrate": migrate,
    "reset": reset,
    "enqueue_single": enqueue_single,
    "enqueue_bulk": enqueue_bulk,
    "copy_raw": copy_raw,
    "prefill": prefill,
    "drain_stats": drain_stats,
    "latency": latency,
    "latency_floor": latency_floor,
}

if __name__ == "__main__":
    common.driver_main(ACTIONS)
