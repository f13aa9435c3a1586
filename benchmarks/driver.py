"""The in-process half of the django-workers benchmark: enqueue, prefill, read results.

``python -m benchmarks.driver ACTION '{...}'`` with DJANGO_SETTINGS_MODULE=benchmarks.settings
and DATABASE_URL set; run.py starts it and reads the JSON answer it prints last.
Everything goes through the public API (``submit_task``, ``submit_tasks``) as
a site would call it, with ``System()`` authority and global keys.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import DatabaseError, connection  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.tasks import noop, probe  # noqa: E402
from django_workers import System, TaskSubmission, submit_task, submit_tasks  # noqa: E402

TABLES = (
    "django_workers_taskwatcher",
    "django_workers_taskrecord",
    "django_workers_workerprocess",
    "django_workers_queuelock",
)
SYSTEM = System()


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


def enqueue_single(count: int) -> dict[str, Any]:
    """``submit_task`` in a loop, each in autocommit, as a view would call it."""
    reset()
    run = uuid.uuid4().hex[:8]
    for n in range(20):  # warm-up: connection, imports, statement caches
        submit_task(_key(f"warm-{run}", n), noop, SYSTEM, scope="global")
    return common.timed_loop(
        lambda n: submit_task(_key(f"one-{run}", n), noop, SYSTEM, scope="global"), count
    )


def enqueue_bulk(count: int, batch: int) -> dict[str, Any]:
    """``submit_tasks`` of ``count`` tasks in batches of ``batch`` (building them included)."""
    reset()
    run = uuid.uuid4().hex[:8]
    submit_tasks([TaskSubmission(key=f"warm-{run}", task=noop, scope="global")], SYSTEM)
    batches = range(0, count, batch)

    def one_batch(n: int) -> None:
        first = batches[n]
        submit_tasks(
            [
                TaskSubmission(key=_key(f"bulk-{run}", i), task=noop, scope="global")
                for i in range(first, min(first + batch, count))
            ],
            SYSTEM,
        )

    answer = common.timed_loop(one_batch, len(batches))
    return {"count": count, "seconds": answer["seconds"], "per_second": count / answer["seconds"]}


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


ACTIONS = {
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
