"""Drains of a queue with a concurrency limit, against the same queue without one.

    .venv/bin/python benchmarks/limited_drain.py --db postgres   # or sqlite, or all

On a fresh database (PostgreSQL ``bench_limited`` next to ``BENCH_PG_URL``,
default ``postgres://postgres@127.0.0.1:5432``; SQLite a file in a temporary
directory): ``--count`` no-op tasks (5,000) are queued in bulk, then one
``runworkers --burst --concurrency C`` drains them, once with
``QUEUES = {"default": {"concurrency": L}}`` and once without, taking turns for
``--rounds`` rounds (3). Each drain's rate is from its first run's start to its
last run's end (the records' ``started_at`` and ``finished_at``); the figures
are the medians, and the limited drain's share of the plain one.

With ``--history N`` the table also holds N finished tasks of the same queue
before each drain, as a site's table does: what a limited claim counts must not
read them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PG_BASE = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432")
#: This module as the workers import it (never ``__main__``).
MODULE = "benchmarks.limited_drain"


def noop() -> None:
    """Do nothing: the figure measures the claims, not work."""


def database_url(db: str, workdir: Path) -> str:
    if db == "sqlite":
        return f"sqlite:///{workdir / 'bench_limited.sqlite3'}"
    from benchmarks.wait_latency import bench_url

    return bench_url(f"{PG_BASE}/postgres", "bench_limited")


def configure_django(url: str, limit: int) -> None:
    from benchmarks.dbconfig import configure_site

    queues = {"QUEUES": {"default": {"concurrency": limit}}} if limit else {}
    configure_site(url, "limited-bench", queues)


def fill(count: int, history: int) -> None:
    """Empty the tables, queue ``count`` no-op tasks, and write ``history`` finished ones."""
    from django.db import connection
    from django.utils import timezone

    from django_workers import System, TaskSubmission, submit_tasks
    from django_workers.models import TaskRecord

    TaskRecord.objects.all().delete()
    if history:
        ids = submit_tasks(
            [
                TaskSubmission(key=f"old-{n}", task=f"{MODULE}.noop", scope="global")
                for n in range(history)
            ],
            System(),
        )
        TaskRecord.objects.filter(pk__in=ids).update(status="COMPLETED", finished_at=timezone.now())
    submit_tasks(
        [
            TaskSubmission(key=f"task-{n}", task=f"{MODULE}.noop", scope="global")
            for n in range(count)
        ],
        System(),
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {TaskRecord._meta.db_table}")


def drain(url: str, limit: int, concurrency: int, count: int) -> float:
    """Run one burst worker (with or without the limit); its tasks a second."""
    from django.db.models import Max, Min

    from django_workers.models import TaskRecord

    command = [sys.executable, "-m", MODULE, "--serve", url, str(limit)]
    command += ["--burst", "--concurrency", str(concurrency)]
    if subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, check=False).returncode:
        raise SystemExit("runworkers --burst failed")
    done = TaskRecord.objects.filter(status="COMPLETED", key__startswith="task-")
    if done.count() != count:
        raise SystemExit(f"{count - done.count()} tasks did not complete")
    span = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
    return count / (span["last"] - span["first"]).total_seconds()


def one(db: str, workdir: str, args: argparse.Namespace) -> dict[str, Any]:
    url = database_url(db, Path(workdir))
    configure_django(url, 0)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    rates: dict[str, list[float]] = {"plain": [], "limited": []}
    for _round in range(args.rounds):
        for kind, limit in (("plain", 0), ("limited", args.limit)):
            fill(args.count, args.history)
            rates[kind].append(drain(url, limit, args.concurrency, args.count))
    plain, limited = (statistics.median(rates[k]) for k in ("plain", "limited"))
    return {
        "plain_per_s": round(plain),
        "limited_per_s": round(limited),
        "share": round(limited / plain, 2),
        "rounds": rates,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "all"), default="postgres")
    parser.add_argument("--count", type=int, default=5000, help="tasks to drain")
    parser.add_argument("--limit", type=int, default=10, help="the queue's concurrency limit")
    parser.add_argument("--concurrency", type=int, default=10, help="the worker's threads")
    parser.add_argument("--history", type=int, default=0, help="finished tasks in the table")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:  # a worker subprocess: URL, limit, then runworkers' options
        configure_django(args.serve[0], int(args.serve[1]))
        from django.core.management import call_command

        call_command("runworkers", *args.serve[2:], verbosity=0)
        return 0
    if args.db == "all":  # Django is configured once per process: one each
        for db in ("sqlite", "postgres"):
            subprocess.run([sys.executable, "-m", MODULE, *(argv or sys.argv[1:]), "--db", db])
        return 0
    with tempfile.TemporaryDirectory() as workdir:
        for db in [args.db]:
            found = one(db, workdir, args)
            print(
                f"{db:<9} {args.count} tasks, --concurrency {args.concurrency}, "
                f"history {args.history}: {found['plain_per_s']}/s without a limit, "
                f"{found['limited_per_s']}/s with a limit of {args.limit} "
                f"({found['share']:.0%}); rounds {json.dumps(found['rounds'])}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
