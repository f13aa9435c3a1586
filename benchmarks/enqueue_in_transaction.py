"""``submit_task`` inside ``transaction.atomic()`` against autocommit, on one database.

    .venv/bin/python benchmarks/enqueue_in_transaction.py --db postgres   # or sqlite

A fresh database (PostgreSQL ``bench_workflow`` next to ``BENCH_PG_URL``, or a
SQLite file in a temporary folder, with the options the other benchmarks use),
then, taking turns, ``--count`` submits of new global tasks in autocommit and
``--count`` submits each wrapped in its own ``transaction.atomic()`` block (as a
view under ``ATOMIC_REQUESTS`` submits), ``--runs`` times each; the median rate
of each. The atomic figure includes the ``BEGIN`` and ``COMMIT`` of each block,
which a site running the view in a transaction pays anyway.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TASK = "benchmarks.workflow_bench.noop"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)

    from benchmarks import workflow_bench

    url = workflow_bench.database_url(args.db, Path(tempfile.mkdtemp()))
    workflow_bench.configure_django(url)
    from django.core.management import call_command
    from django.db import transaction

    from django_workers import System, submit_task

    call_command("migrate", verbosity=0)
    run = uuid.uuid4().hex[:8]
    for n in range(50):  # warm-up: connection, imports, statement caches
        submit_task(f"warm-{run}-{n}", TASK, System(), scope="global")

    def autocommit(key: str) -> None:
        submit_task(key, TASK, System(), scope="global")

    def atomic(key: str) -> None:
        with transaction.atomic():
            submit_task(key, TASK, System(), scope="global")

    rates: dict[str, list[float]] = {"autocommit": [], "atomic": []}
    for turn in range(args.runs):
        for name, submit in (("autocommit", autocommit), ("atomic", atomic)):
            started = time.perf_counter()
            for n in range(args.count):
                submit(f"{name}-{run}-{turn}-{n}")
            rates[name].append(args.count / (time.perf_counter() - started))
    for name, values in rates.items():
        shown = ", ".join(f"{v:,.0f}" for v in values)
        print(f"{args.db:<9} {name:<11} median {statistics.median(values):,.0f}/s  ({shown})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
