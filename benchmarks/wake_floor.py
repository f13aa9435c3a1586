"""The wake-up figure's floor: our two round trips with nothing of ours around them.

    python -m benchmarks.wake_floor PATH        (DATABASE_URL: the benchmark's PostgreSQL)

``run.py`` starts this process in place of ``runworkers`` for the
``latency_floor`` figure, and its driver submits each probe by calling the
insert function through a bare psycopg cursor (see ``driver.latency_floor``).
This process holds one psycopg connection that LISTENs for the insert
trigger's NOTIFY and, as soon as one arrives, claims through the claim
function on that same connection, in one query with the claim's own setting
(its commit does not wait for the disk), as the worker's claim does (the
worker's goes through ``django_workers_claim_records``, which calls the same
function and also returns every column and the watchers). For each
row claimed it appends the row's id and the time to ``PATH``, as the probe
task does when it starts.

So the figure is what the database, the machine and psycopg take for the
submit's commit, the NOTIFY and the claim, without Django, the worker's
threads or its decoding of the rows: the least an idle worker's wake-up can
cost on that machine with these statements. The claimed rows are never ended;
the benchmark empties the tables before each run.
"""

from __future__ import annotations

import os
import signal
import sys

import psycopg

from benchmarks.common import record_start

#: The worker's claim, its columns cut to the id: the claim function itself, with the
#: setting the worker's claim records function makes for its own commit.
CLAIM = """SELECT set_config('synchronous_commit', 'off', true);
SELECT t.id FROM django_workers_claim(%s, now(), 10, NULL) AS t"""
WORKER_ID = f"wake-floor:{os.getpid()}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.exit("usage: python -m benchmarks.wake_floor PATH")
    path = argv[0]
    stopped = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute("LISTEN django_workers")
        cursor = psycopg.ClientCursor(conn)

        def claim() -> None:
            cursor.execute(CLAIM, (WORKER_ID,))
            cursor.nextset()
            for (task_id,) in cursor.fetchall():
                record_start(path, task_id)

        claim()  # a probe submitted before the LISTEN took effect
        while not stopped:
            # Leave the generator before claiming: it holds the connection. (Probes
            # come one at a time, so no NOTIFY is due while a claim runs.)
            if list(conn.notifies(timeout=0.5, stop_after=1)):
                claim()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
