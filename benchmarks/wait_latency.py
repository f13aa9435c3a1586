"""How soon after a task ends does ``TaskHandle.wait()`` return? (PostgreSQL, issue 4)

    .venv/bin/python benchmarks/wait_latency.py --database-url postgres://postgres@127.0.0.1:5432/test

The URL names the server (and a database to connect to first); the benchmark
creates and migrates its own database (``bench_wait`` by default) next to it,
so neither the test database nor the throughput benchmark's is touched.

One ``runworkers`` subprocess serves the tasks. The benchmark process submits
a task, opens a handle and waits on it. The task sleeps a little (so the
waiter is surely parked before the end), then returns ``time.time()``: the
end, stamped by the task just before it returns. The waiter stamps
``time.time()`` when ``wait()`` returns. Both stamps come from the same
machine's wall clock, so their difference is the wait latency: the run's end
write, its commit, the ``d:<id>`` NOTIFY, the listener waking the handle and
the handle's final read. Records' ``finished_at`` (stamped by the worker after
the return) gives a second, slightly shorter figure.

``--compare-polling`` repeats the run with NOTIFY switched off in the waiter,
to show what the polling fallback (10 ms doubling to 500 ms) costs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The task the worker runs, by the path a worker imports (not ``__main__``).
STAMP_TASK = "benchmarks.wait_latency.stamp_end"


def stamp_end(delay: float) -> float:
    """The benchmark task: work for ``delay`` seconds, then return the wall-clock end."""
    time.sleep(delay)
    return time.time()


# -- set-up ----------------------------------------------------------------------------


def bench_url(url: str, database: str) -> str:
    """``url`` pointed at ``database``, dropped and created afresh on the server.

    Afresh, so the schema (triggers included) is always the current migrations'.
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        name = sql.Identifier(database)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


def configure_django(url: str) -> None:
    """Settings of a minimal site on ``url``; the worker subprocess builds the same ones."""
    import dj_database_url
    import django
    from django.conf import settings

    database = dj_database_url.parse(url)
    if database["ENGINE"] != "django.db.backends.postgresql":
        raise SystemExit("This benchmark measures LISTEN/NOTIFY: give a postgres:// URL.")
    database["CONN_MAX_AGE"] = None
    settings.configure(
        SECRET_KEY="wait-latency",
        USE_TZ=True,
        TIME_ZONE="UTC",
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_workers"],
        DATABASES={"default": database},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        TASKS={"default": {"BACKEND": "django_workers.backends.WorkersBackend"}},
        # Its tasks live here, in no installed app.
        DJANGO_WORKERS={"TASK_MODULES": ["benchmarks"]},
        LOGGING_CONFIG=None,
    )
    django.setup()


def serve(url: str, concurrency: int) -> None:
    """The worker subprocess: ``manage.py runworkers`` on the benchmark database."""
    configure_django(url)
    from django.core.management import call_command

    call_command("runworkers", concurrency=concurrency, verbosity=0)


def start_worker(url: str, concurrency: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, __file__, "--serve", "--database-url", url]
    return subprocess.Popen([*command, "--concurrency", str(concurrency)], cwd=ROOT)


# -- measuring -------------------------------------------------------------------------


def measure(tasks: int, delay: float, warmup: int) -> dict[str, Any]:
    """Submit ``tasks`` one at a time and time each wait against the task's own end stamp."""
    from django_workers import System, submit

    by_return, by_finished = [], []
    for n in range(warmup + tasks):
        handle = submit(
            f"wait-{uuid.uuid4().hex}", STAMP_TASK, System(), args=[delay], scope="global"
        )
        info = handle.wait(timeout=30)
        returned = time.time()
        if info.status != "COMPLETED":
            raise SystemExit(f"Task {handle.id} ended {info.status}: {info.error}")
        if n >= warmup:
            assert info.finished_at is not None  # a COMPLETED task has ended
            by_return.append(returned - info.result)
            by_finished.append(returned - info.finished_at.timestamp())
    return {"after_return": summary(by_return), "after_finished_at": summary(by_finished)}


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    cuts = statistics.quantiles(ms, n=100, method="inclusive")
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(cuts[94], 2),
        "p99_ms": round(cuts[98], 2),
        "max_ms": round(ms[-1], 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def wait_for_worker(process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Block until the worker has registered its lease (it is claiming by then)."""
    from django_workers.models import WorkerProcess

    deadline = time.monotonic() + timeout
    while not WorkerProcess.objects.exists():
        if process.poll() is not None:
            raise SystemExit(f"The worker exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit("The worker did not start")
        time.sleep(0.05)


def machine() -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server = cursor.fetchone()[0]
        cursor.execute("SHOW fsync")
        fsync = cursor.fetchone()[0]
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "postgresql": server,
        "fsync": fsync,
        "platform": platform.platform(),
    }


def report(name: str, figures: dict[str, Any]) -> None:
    for what, row in figures.items():
        print(
            f"{name:<8} wait() after {what.replace('_', ' ').removeprefix('after '):<12}"
            f" n={row['n']}  p50 {row['p50_ms']:6.2f} ms  p95 {row['p95_ms']:6.2f} ms"
            f"  p99 {row['p99_ms']:6.2f} ms  max {row['max_ms']:7.2f} ms"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", required=True, help="postgres:// URL of the server to use"
    )
    parser.add_argument("--database", default="bench_wait", help="database to create and use")
    parser.add_argument("--tasks", type=int, default=200, help="measured tasks (default 200)")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured tasks first")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds each task works")
    parser.add_argument("--concurrency", type=int, default=4, help="worker run threads")
    parser.add_argument("--compare-polling", action="store_true", help="also measure polling")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.serve:  # the worker subprocess, started below
        serve(args.database_url, args.concurrency)
        return 0

    url = bench_url(args.database_url, args.database)
    configure_django(url)
    from django.core.management import call_command

    from django_workers import handles
    from django_workers.models import TaskRecord, WorkerProcess

    call_command("migrate", verbosity=0)
    TaskRecord.objects.all().delete()
    WorkerProcess.objects.all().delete()
    worker = start_worker(url, args.concurrency)
    try:
        wait_for_worker(worker)
        results = {"notify": measure(args.tasks, args.delay, args.warmup)}
        if args.compare_polling:
            handles.close_listeners()
            handles._task_ends = lambda store: None  # the waiter falls back to polling
            results["polling"] = measure(args.tasks, args.delay, args.warmup)
    finally:
        worker.terminate()
        worker.wait(30)
    figures = {"machine": machine(), "tasks": args.tasks, "delay_s": args.delay, **results}
    print(f"machine: {json.dumps(figures['machine'])}")
    for name in results:
        report(name, results[name])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
