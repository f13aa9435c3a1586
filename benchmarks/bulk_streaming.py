"""How much a bulk submit gains by building its records while its COPY streams.

    export DJANGO_SETTINGS_MODULE=benchmarks.settings
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench   # migrated by run.py
    .venv/bin/python benchmarks/bulk_streaming.py [--arguments] [--runs 3]

On PostgreSQL ``submit_tasks`` checks what a batch's alike submissions share
before its ``COPY`` starts, and builds each record (its key, arguments and
watchers checked) as the ``COPY`` reads it, so the server writes while Python
builds. This measures, taking turns in one process, the time per task of three
ways to write the same ``--count`` tasks in batches of ``--batch``:

- ``submit_tasks``: the public call, its ``TaskSubmission`` objects made in the
  timed loop as the benchmark's bulk figure makes them;
- ``built first``: the same objects, every record of the batch built before the
  ``COPY`` starts and then written by the same store call (how ``submit_tasks``
  wrote a batch before 5 December 2026);
- ``raw COPY``: the rows built before the clock starts, then the ``COPY`` alone
  (``benchmarks.driver.copy_raw``'s floor).

It empties the task tables of the database it is given: give it a benchmark
database. PostgreSQL only. Each figure starts from emptied tables on a settled
server, as ``run.py``'s bulk figures do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--arguments", action="store_true", help="two args and a kwarg a task")
    args = parser.parse_args(argv)

    from django.db import connection

    from benchmarks import driver
    from benchmarks.run import settle_database
    from django_workers import api, submission
    from django_workers.stores import default_store, rows
    from django_workers.stores.sql import columns

    if connection.vendor != "postgresql":
        parser.error("PostgreSQL only: set DATABASE_URL to a migrated benchmark database.")
    store = default_store()
    system = driver.SYSTEM

    def make(prefix: str, first: int) -> list[submission.TaskSubmission]:
        last = min(first + args.batch, args.count)
        return [
            driver._bulk_task(driver._key(prefix, i), i, args.arguments) for i in range(first, last)
        ]

    def public(prefix: str, first: int) -> None:
        api.submit_tasks(make(prefix, first), system, store=store)

    def built_first(prefix: str, first: int) -> None:
        news = list(submission.build_tasks(make(prefix, first), system, store))
        submission.write_tasks(news, system, store)

    def raw_copy(prefix: str, first: int) -> Callable[[], None]:
        # The rows as ``driver.copy_raw`` writes them: every column's value, ready.
        news = submission.build_tasks(make(prefix, first), system, store)
        ready = [
            [json.dumps(r[f]) if isinstance(r[f], list | dict) else r[f] for f in columns._FIELDS]
            for r in map(rows.row_of, news)
        ]
        statement = f"COPY {columns._target(connection.vendor, connection.ops.quote_name)[0]} "
        statement += f"({', '.join(columns._COLUMNS)}) FROM STDIN"

        def write() -> None:
            with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
                for row in ready:
                    copy.write_row(row)

        return write

    def per_task(way: str) -> float:
        driver.reset()
        settle_database("postgresql", os.environ["DATABASE_URL"])
        prefix = f"{way}-{uuid.uuid4().hex[:8]}"
        spent = 0.0
        for first in range(0, args.count, args.batch):
            if way == "raw COPY":
                write = raw_copy(prefix, first)
                started = time.perf_counter()
                write()
            else:
                started = time.perf_counter()
                (public if way == "submit_tasks" else built_first)(prefix, first)
            spent += time.perf_counter() - started
        return spent / args.count * 1e6

    connection.ensure_connection()
    public("warm", 0)
    ways = ("submit_tasks", "built first", "raw COPY")
    seen: dict[str, list[float]] = {way: [] for way in ways}
    for run in range(args.runs):
        for way in ways:
            seen[way].append(per_task(way))
            print(
                f"run {run + 1}/{args.runs}  {way:<13} {seen[way][-1]:6.2f} µs a task", flush=True
            )
    floor = statistics.median(seen["raw COPY"])
    for way in ways:
        middle = statistics.median(seen[way])
        share = floor / middle
        print(f"{way:<13} median {middle:6.2f} µs a task = {share:.2f} of the raw COPY's rate")
    driver.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
