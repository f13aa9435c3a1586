"""A fair queue: how soon a second owner's task starts, and its drain against an ordinary queue.

    .venv/bin/python benchmarks/fair_queue.py --db postgres   # or sqlite

On a fresh database (PostgreSQL ``bench_fair`` next to ``BENCH_PG_URL``, default
``postgres://postgres@127.0.0.1:5432``; SQLite a file in a temporary directory):

- **Wait behind a backlog.** ``--backlog`` (10,000) no-op tasks of one owner
  are queued, then one of a second owner; one worker (``--concurrency`` 10)
  runs until the second owner's task has finished. Printed: how many of the
  first owner's tasks started before it, with ``"fair": True`` and without
  (without, the worker drains the whole backlog first).
- **Drain.** ``--count`` (5,000) no-op tasks of ``--owners`` (5) owners,
  queued in turn, drained by one ``runworkers --burst``, with the queue fair
  and not, taking turns for ``--rounds`` rounds (3). Each rate runs from the
  first run's start to the last run's end; printed: the medians and the fair
  drain's share of the ordinary one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PG_BASE = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432")
#: This module as the workers import it (never ``__main__``).
MODULE = "benchmarks.fair_queue"


def noop() -> None:
    """Do nothing: the figures measure the claims, not work."""


def database_url(db: str, workdir: Path) -> str:
    if db == "sqlite":
        return f"sqlite:///{workdir / 'bench_fair.sqlite3'}"
    from benchmarks.wait_latency import bench_url

    return bench_url(f"{PG_BASE}/postgres", "bench_fair")


def configure_django(url: str, fair: bool) -> None:
    from benchmarks.dbconfig import configure_site

    configure_site(url, "fair-bench", {"QUEUES": {"default": {"fair": True}}} if fair else {})


def queue_up(owner: str, count: int, prefix: str) -> None:
    from django_workers import Owner, TaskSubmission, submit_tasks

    for first in range(0, count, 1000):
        submit_tasks(
            [
                TaskSubmission(key=f"{prefix}-{n}", task=f"{MODULE}.noop")
                for n in range(first, min(first + 1000, count))
            ],
            Owner(owner),
        )


def settle() -> None:
    from django.db import connection

    from django_workers.models import TaskRecord

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {TaskRecord._meta.db_table}")


def worker(url: str, fair: bool, *options: str) -> list[str]:
    return [sys.executable, "-m", MODULE, "--serve", url, "1" if fair else "0", *options]


def wait_behind_backlog(url: str, fair: bool, backlog: int, concurrency: int) -> int:
    """Tasks of the first owner that started before the second owner's one task."""
    from django_workers.models import TaskRecord

    TaskRecord.objects.all().delete()
    queue_up("alice", backlog, "backlog")
    queue_up("bob", 1, "late")
    settle()
    proc = subprocess.Popen(
        worker(url, fair, "--concurrency", str(concurrency)), cwd=ROOT, stdout=subprocess.DEVNULL
    )
    late = TaskRecord.objects.filter(owner="bob")
    deadline = time.monotonic() + 600
    try:
        while not late.filter(status="COMPLETED").exists():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the second owner's task did not finish")
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(60)
    started = late.get().started_at
    return TaskRecord.objects.filter(owner="alice", started_at__lt=started).count()


def drain(url: str, fair: bool, count: int, owners: int, concurrency: int) -> float:
    """One burst worker's rate over ``count`` tasks of ``owners`` owners."""
    from django.db.models import Max, Min

    from django_workers.models import TaskRecord

    TaskRecord.objects.all().delete()
    for n in range(owners):
        queue_up(f"user{n}", count // owners, f"drain{n}")
    settle()
    command = worker(url, fair, "--burst", "--concurrency", str(concurrency))
    if subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, check=False).returncode:
        raise SystemExit("runworkers --burst failed")
    done = TaskRecord.objects.filter(status="COMPLETED")
    total = count // owners * owners
    if done.count() != total:
        raise SystemExit(f"{total - done.count()} tasks did not complete")
    span = done.aggregate(first=Min("started_at"), last=Max("finished_at"))
    return total / (span["last"] - span["first"]).total_seconds()


def run(db: str, workdir: str, args: argparse.Namespace) -> None:
    url = database_url(db, Path(workdir))
    configure_django(url, False)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    before = {
        is_fair: wait_behind_backlog(url, is_fair, args.backlog, args.concurrency)
        for is_fair in (True, False)
    }
    rates: dict[bool, list[float]] = {True: [], False: []}
    for _round in range(args.rounds):
        for is_fair in (False, True):
            rates[is_fair].append(drain(url, is_fair, args.count, args.owners, args.concurrency))
    plain, fair = statistics.median(rates[False]), statistics.median(rates[True])
    print(
        f"{db}: behind {args.backlog:,} of one owner's tasks, the second owner's task started "
        f"after {before[True]:,} of them in a fair queue, {before[False]:,} in an ordinary one "
        f"(--concurrency {args.concurrency})\n"
        f"{db}: drain of {args.count:,} tasks of {args.owners} owners: {plain:,.0f}/s ordinary, "
        f"{fair:,.0f}/s fair ({fair / plain:.0%}); rounds: ordinary "
        f"{[round(r) for r in rates[False]]}, fair {[round(r) for r in rates[True]]}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--backlog", type=int, default=10000, help="the first owner's tasks")
    parser.add_argument("--count", type=int, default=5000, help="tasks to drain")
    parser.add_argument("--owners", type=int, default=5, help="owners of the drained tasks")
    parser.add_argument("--concurrency", type=int, default=10, help="the worker's threads")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:  # a worker subprocess: URL, fair (1/0), then runworkers' options
        configure_django(args.serve[0], args.serve[1] == "1")
        from django.core.management import call_command

        call_command("runworkers", *args.serve[2:], verbosity=0)
        return 0
    with tempfile.TemporaryDirectory() as workdir:
        run(args.db, workdir, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
