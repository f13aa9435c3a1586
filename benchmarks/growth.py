"""Growth: do the claim, the enqueue, a user's task list and retention cleanup stay flat
as the task table grows?

    .venv/bin/python benchmarks/growth.py --db all                 # 1k, 100k, 1M rows
    .venv/bin/python benchmarks/growth.py --db postgres --quick    # 1k, 10k, 100k rows
    .venv/bin/python benchmarks/growth.py --db sqlite --sizes 1000,50000
    .venv/bin/python benchmarks/growth.py --db postgres --sizes 1000,1000000 --only claim_past_full

For each size the task table is emptied and filled with that many rows in one
SQL statement (``generate_series`` on PostgreSQL, a recursive CTE on SQLite):
10% PENDING (the newest), the rest finished over the past 60 days (90%
COMPLETED, 7% FAILED, 3% CANCELLED), spread over one owner per 100 rows;
about one task in sixteen is shared with a second user (a watcher row), so
the reads of tasks meet a watchers table that grows with them. One more
user, ``bench-user``, owns 150 tasks and watches 10 at every size, so the
list figure measures the table, not the user. Then the statistics are
refreshed (``VACUUM ANALYZE`` / ``ANALYZE``), the fill's writes are flushed to
disk (SQLite's WAL checkpoint, then ``run.py``'s ``settle_database``: autovacuum
done, ``CHECKPOINT``, sync) and, in this order:

- **claim**: ``store.claim`` of 10 tasks, then ``store.end_tasks`` of their
  ends, timed separately, many times; between two rounds the ten are put back
  at the tail of the queue (not timed), so table and backlog keep their size;
- **claim of a limited queue**: the same, with a concurrency limit (of
  ``LIMIT``, more than a claim takes) on the tasks' queue, so each claim takes
  the queue's lock and counts its running tasks first;
- **claim behind a full limited queue**: the newest ``CLAIM_BATCH`` pending
  tasks move to a queue of their own, and the backlog's queue gets a limit of
  1 that one running task fills; then the claim again, of every queue: it
  must leave the full queue out, and so reads past its backlog to the others;
- **claim with old statistics** (PostgreSQL): the same, after the table was
  analyzed while no task was pending, as after a burst that no ANALYZE has
  seen yet; the statistics are refreshed again after it;
- **list**: ``get_all_tasks(Owner("bench-user"), limit=50)``, many times;
- **enqueue**: ``submit_task`` one by one, each in autocommit;
- **cleanup**: ``store.delete_finished(COMPLETED, 7 days ago, CLEANUP_BATCH)``
  batch after batch, while a thread with its own connection claims and ends
  tasks in a loop; the claim latencies during the cleanup are compared with
  the same loop's just before it.

At the largest size the plans of the claim, the list and the cleanup's read
are printed (PostgreSQL ``EXPLAIN (ANALYZE, BUFFERS)``, SQLite ``EXPLAIN QUERY
PLAN`` with the same bound parameters), taken from the statements the store
really sent.

PostgreSQL: database ``bench_growth`` on ``BENCH_PG_URL`` (default
``postgres://postgres@127.0.0.1:5432``), dropped and recreated by each run.
SQLite: ``benchmarks/results/work/growth.sqlite3``, recreated by each run.
Results: a table on stdout, JSON and markdown in ``benchmarks/results/``
(``growth-<date>`` and ``growth-latest``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import ANSWER, percentile  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
WORK = RESULTS / "work"
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432"
PG_DB = os.environ.get("GROWTH_PG_DB", "bench_growth")
SQLITE_FILE = Path(os.environ.get("GROWTH_SQLITE", WORK / "growth.sqlite3"))
TABLE = "django_workers_taskrecord"
WATCHERS = "django_workers_taskwatcher"
USER = "bench-user"
USER_TASKS = 150
USER_WATCHES = 10
LIST_LIMIT = 50
PENDING_SHARE = 0.10
ROWS_PER_OWNER = 100
CLAIM_BATCH = 10
#: The concurrency limit of the "claim of a limited queue" figure, on the queue every
#: filled row is in.
LIMITS = {"default": 1000}
HISTORY_DAYS = 60
RETENTION_DAYS = 7
#: Claims of that loop measured before the cleanup starts, to compare with.
BASELINE_CLAIMS = 300
#: Seconds between two claims of the loop that runs during the cleanup.
CLAIM_PAUSE = 0.005


# -- the child: one database, every size ---------------------------------------------------


#: The figures a run can be limited to with ``--only``, in the order they are measured.
FIGURES = (
    "claim",
    "claim_limited",
    "claim_past_full",
    "claim_stale",
    "list",
    "enqueue",
    "plans",
    "cleanup",
)


def child(sizes: list[int], quick: bool, only: set[str]) -> dict[str, Any]:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0, interactive=False)
    answer: dict[str, Any] = {"vendor": connection.vendor, "sizes": {}}
    rounds = 100 if quick else 400
    for n in sizes:
        started = time.monotonic()
        fill(n)
        fill_s = time.monotonic() - started
        say(f"{connection.vendor}: {n:,} rows filled in {fill_s:.1f} s")
        figures: dict[str, Any] = {"fill_s": fill_s}
        measures = {
            "claim": lambda: measure_claim(rounds),
            "claim_limited": lambda: measure_claim(rounds, LIMITS),
            "claim_past_full": lambda: measure_claim_past_a_full_queue(rounds),
            "claim_stale": lambda: measure_claim_with_old_statistics(rounds),
            "list": lambda: measure_list(100 if quick else 300),
            "enqueue": lambda: measure_enqueue(500 if quick else 2000),
            "plans": plans,
            "cleanup": lambda: measure_cleanup(10 if quick else 40),
        }
        for name in FIGURES:
            if name not in only:
                continue
            if name == "claim_stale" and connection.vendor != "postgresql":
                continue
            if name == "plans" and n != max(sizes):
                continue  # at the largest size, before the cleanup, which leaves the list's rows
            figures[name] = measures[name]()
        answer["sizes"][str(n)] = figures
        say(f"{connection.vendor}: {n:,} rows done: {summary_line(figures)}")
    return answer


def say(text: str) -> None:
    print(f"[growth] {text}", file=sys.stderr, flush=True)


def summary_line(f: dict[str, Any]) -> str:
    parts = []
    for name in ("claim", "claim_limited", "claim_past_full", "claim_stale"):
        if name in f:
            parts.append(f"{name} p50 {f[name]['claim_p50_ms']:.2f} ms")
    if "list" in f:
        parts.append(f"list p50 {f['list']['p50_ms']:.2f} ms")
    if "enqueue" in f:
        parts.append(f"enqueue {f['enqueue']['per_second']:.0f}/s")
    if "cleanup" in f:
        parts.append(
            f"cleanup batch max {f['cleanup']['batch_max_ms']:.1f} ms, claim max during "
            f"cleanup {f['cleanup']['claim_max_ms']:.1f} ms"
        )
    return ", ".join(parts)


def fill(n: int) -> None:
    """Empty the tables and write ``n`` task rows (see the module's docstring)."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {TABLE}, {WATCHERS} CASCADE")
        else:
            cursor.execute(f"DELETE FROM {WATCHERS}")
            cursor.execute(f"DELETE FROM {TABLE}")
    others = n - USER_TASKS
    owners = max(1, others // ROWS_PER_OWNER)
    base = dt.datetime.now(dt.UTC) - dt.timedelta(days=HISTORY_DAYS)
    span = HISTORY_DAYS * 86400 - 3600  # the newest row an hour ago
    _insert_rows(others, "u", owners, "k", base, span)
    _insert_rows(USER_TASKS, USER, 0, "mine-", base, span)
    # Finished a few days ago: inside every retention, so the cleanup leaves them.
    newest_finished = others - int(others * PENDING_SHARE)
    watched = [
        f"u{g % owners}::k{g}" for g in range(newest_finished - USER_WATCHES, newest_finished)
    ]
    with connection.cursor() as cursor:
        # Shared tasks: those whose (random hex) run id ends in 0, with their owner's teammate.
        cursor.execute(
            f"INSERT INTO {WATCHERS} (task_id, user_id) "
            f"SELECT id, 'mate-' || owner FROM {TABLE} WHERE owner <> %s AND run_id LIKE %s",
            [USER, "%0"],
        )
        cursor.executemany(
            f"INSERT INTO {WATCHERS} (task_id, user_id) VALUES (%s, %s)",
            [(task_id, USER) for task_id in watched],
        )
        if connection.vendor == "postgresql":
            cursor.execute(f"VACUUM ANALYZE {TABLE}")
            cursor.execute(f"VACUUM ANALYZE {WATCHERS}")
        else:
            cursor.execute("ANALYZE")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    # The fill's writes reach the disk now, not while the figures are measured: after
    # the 22-second fill of 1M rows, every PostgreSQL figure at that size, the ends that
    # wait for the disk and the claims alike, once came out half as slow again.
    from benchmarks.run import settle_database

    settle_database(connection.vendor, os.environ["DATABASE_URL"])


def _insert_rows(
    count: int, owner: str, owners: int, prefix: str, base: dt.datetime, span: int
) -> None:
    """``count`` rows in one INSERT ... SELECT: row g is created at base + g * step.

    ``owners`` > 0 spreads the rows over owner0..owner{owners-1}; 0 gives all to ``owner``.
    """
    from django.db import connection

    pg = connection.vendor == "postgresql"
    params: dict[str, Any] = {
        "count": count,
        "owner": owner,
        "owners": max(owners, 1),
        "prefix": prefix,
        "first_pending": count - int(count * PENDING_SHARE),
        "step": span / count,
        "base": base if pg else base.strftime("%Y-%m-%d %H:%M:%S"),
        "path": "benchmarks.tasks.noop",
        "none": "none",
        "worker": "w-old",
    }
    owner_sql = "%(owner)s || (g %% %(owners)s)" if owners else "%(owner)s"
    if pg:
        series = "generate_series(1, %(count)s) AS g"
        created = "%(base)s::timestamptz + g * %(step)s * interval '1 second'"
        plus = "{} + interval '{} second'"
        json_sql = "'{}'::jsonb"
        run_id = "md5(%(prefix)s || g)"
        cte = ""
    else:
        series = "series"
        created = "datetime(%(base)s, '+' || CAST(g * %(step)s AS INTEGER) || ' seconds')"
        plus = "datetime({}, '+{} seconds')"
        json_sql = "'{}'"
        run_id = "lower(hex(randomblob(16)))"
        cte = (
            "WITH RECURSIVE series(g) AS "
            "(SELECT 1 UNION ALL SELECT g + 1 FROM series WHERE g < %(count)s) "
        )
    obj, arr = json_sql.format("{}"), json_sql.format("[]")
    done = "s.status <> 'PENDING'"
    sql = f"""
        {cte}INSERT INTO {TABLE} (
            id, key, owner, scope, task_path, args, kwargs, queue, priority, run_after,
            options, status, progress, attempts, result, error, errors, cancel_reason,
            run_id, worker_id, workflow, node, created_at, started_at, finished_at)
        SELECT s.owner || '::' || s.key, s.key, s.owner, 'user', %(path)s, {arr}, {obj},
            'default', 0, NULL, {obj}, s.status,
            CASE WHEN {done} THEN 1 ELSE 0 END, CASE WHEN {done} THEN 1 ELSE 0 END,
            NULL, NULL, {arr}, %(none)s, s.run_id,
            CASE WHEN {done} THEN %(worker)s END, NULL, NULL, s.created,
            CASE WHEN {done} THEN {plus.format("s.created", 1)} END,
            CASE WHEN {done} THEN {plus.format("s.created", 2)} END
        FROM (
            SELECT %(prefix)s || g AS key, {owner_sql} AS owner, {run_id} AS run_id,
                CASE WHEN g > %(first_pending)s THEN 'PENDING'
                    WHEN g %% 100 < 90 THEN 'COMPLETED'
                    WHEN g %% 100 < 97 THEN 'FAILED'
                    ELSE 'CANCELLED' END AS status,
                {created} AS created
            FROM {series}
        ) AS s
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(values, 50),
        "p99_ms": percentile(values, 99),
        "max_ms": max(values, default=float("nan")),
    }


class Claimer:
    """Claims ``CLAIM_BATCH`` tasks, ends them, and puts them back at the queue's tail."""

    def __init__(self, limits: dict[str, int] | None = None) -> None:
        from django_workers.stores.database import DatabaseWorkerStore

        self.store = DatabaseWorkerStore()
        self.worker_id = f"growth-{uuid.uuid4().hex[:8]}"
        self.limits = limits or {}

    def round(self) -> tuple[float, float]:
        """One claim and the end of what it claimed; their durations in seconds."""
        from django_workers import clock
        from django_workers.info import TaskStatus
        from django_workers.lifecycle import EndKind, TaskEnd

        t0 = time.perf_counter()
        claimed = self.store.claim(self.worker_id, None, CLAIM_BATCH, clock.now(), self.limits)
        t1 = time.perf_counter()
        if not claimed:
            raise RuntimeError("the claim found nothing: the backlog ran out")
        now = clock.now()
        ends = [
            TaskEnd(
                kind=EndKind.RUN,
                task_id=info.id,
                run_id=info.run_id,
                worker_id=self.worker_id,
                queue=info.queue,
                status=TaskStatus.COMPLETED,
                finished_at=now,
            )
            for info in claimed
        ]
        t2 = time.perf_counter()
        won = self.store.end_tasks(ends)
        t3 = time.perf_counter()
        if not all(won):
            raise RuntimeError("an end of a claimed run lost its fence")
        self.requeue([info.id for info in claimed])
        return t1 - t0, t3 - t2

    def requeue(self, ids: list[str]) -> None:
        """Put finished rows back as new PENDING ones at the tail (not timed)."""
        from django.db import connection

        from django_workers import clock

        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {TABLE} SET status = 'PENDING', worker_id = NULL, started_at = NULL, "
                "finished_at = NULL, created_at = %s, run_id = %s "
                f"WHERE id IN ({', '.join(['%s'] * len(ids))}) AND status = 'COMPLETED'",
                [
                    connection.ops.adapt_datetimefield_value(clock.now()),
                    uuid.uuid4().hex,
                    *ids,
                ],
            )


def measure_claim(rounds: int, limits: dict[str, int] | None = None) -> dict[str, Any]:
    claimer = Claimer(limits)
    for _ in range(20):
        claimer.round()
    claims, ends = [], []
    for _ in range(rounds):
        claim_s, end_s = claimer.round()
        claims.append(_ms(claim_s))
        ends.append(_ms(end_s))
    return {
        "rounds": rounds,
        "batch": CLAIM_BATCH,
        "claim_p50_ms": percentile(claims, 50),
        "claim_p99_ms": percentile(claims, 99),
        "end_p50_ms": percentile(ends, 50),
        "end_p99_ms": percentile(ends, 99),
    }


def measure_claim_past_a_full_queue(rounds: int) -> dict[str, Any]:
    """The claim of every queue while the backlog's queue is full (its limit of 1 taken)."""
    from django.db import connection

    from django_workers import clock

    full = {"default": 1}
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TABLE} SET queue = 'other' WHERE id IN (SELECT id FROM {TABLE} "
            f"WHERE status = 'PENDING' ORDER BY created_at DESC LIMIT {CLAIM_BATCH})"
        )
    holder = Claimer(full)
    [held] = holder.store.claim(holder.worker_id, ["default"], 1, clock.now(), full)
    try:
        figures = measure_claim(rounds, full)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {TABLE} SET status = 'PENDING', worker_id = NULL, started_at = NULL "
                "WHERE id = %s",
                [held.id],
            )
            cursor.execute(f"UPDATE {TABLE} SET queue = 'default' WHERE queue = 'other'")
    return figures


def measure_claim_with_old_statistics(rounds: int) -> dict[str, Any]:
    """The claim again, its table analyzed while no task was pending (PostgreSQL).

    A backlog that arrived after the last ANALYZE: the pending rows are parked
    as WAITING (which no claim takes), the table is analyzed, and they become
    PENDING again; autovacuum is off for the table meanwhile, so no ANALYZE
    catches up before the claims are measured. A fresh ANALYZE afterwards puts
    the statistics back for the figures after this one.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TABLE} SET (autovacuum_enabled = false)")
        try:
            cursor.execute(f"UPDATE {TABLE} SET status = 'WAITING' WHERE status = 'PENDING'")
            cursor.execute(f"ANALYZE {TABLE}")
            cursor.execute(f"UPDATE {TABLE} SET status = 'PENDING' WHERE status = 'WAITING'")
            cursor.execute(f"VACUUM {TABLE}")  # the dead rows go; the statistics stay old
            figures = measure_claim(rounds)
        finally:
            cursor.execute(f"ALTER TABLE {TABLE} RESET (autovacuum_enabled)")
            cursor.execute(f"VACUUM ANALYZE {TABLE}")
    return figures


def measure_list(repeats: int) -> dict[str, Any]:
    from django_workers import Owner, get_all_tasks

    user = Owner(USER)
    found = get_all_tasks(user, limit=LIST_LIMIT)
    if len(found) != LIST_LIMIT:
        raise RuntimeError(f"the list found {len(found)} tasks, not {LIST_LIMIT}")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        get_all_tasks(user, limit=LIST_LIMIT)
        times.append(_ms(time.perf_counter() - t0))
    return {"repeats": repeats, "limit": LIST_LIMIT, **_stats(times)}


def measure_enqueue(count: int) -> dict[str, Any]:
    from benchmarks.tasks import noop
    from django_workers import Owner, submit_task

    owner = Owner("bench-enqueuer")
    run = uuid.uuid4().hex[:8]
    for i in range(20):
        submit_task(f"warm-{run}-{i}", noop, owner)
    t0 = time.perf_counter()
    for i in range(count):
        submit_task(f"one-{run}-{i}", noop, owner)
    seconds = time.perf_counter() - t0
    return {"count": count, "seconds": seconds, "per_second": count / seconds}


def measure_cleanup(max_batches: int) -> dict[str, Any]:
    """Batches of retention cleanup while another connection claims; both timed."""
    from django.db import connection

    from django_workers import clock
    from django_workers.conf import workers_settings
    from django_workers.info import TaskStatus
    from django_workers.stores.database import DatabaseWorkerStore

    batch = workers_settings.CLEANUP_BATCH
    store = DatabaseWorkerStore()
    before = clock.now() - dt.timedelta(days=RETENTION_DAYS)
    eligible = store.count_finished(TaskStatus.COMPLETED, before)
    phase = {"name": "baseline"}
    latencies: dict[str, list[float]] = {"baseline": [], "cleanup": []}
    stop = threading.Event()
    failure: list[BaseException] = []

    def claim_loop() -> None:
        from django.db import connection as own

        try:
            claimer = Claimer()
            while not stop.is_set():
                claim_s, _ = claimer.round()
                latencies[phase["name"]].append(_ms(claim_s))
                # A busy worker, not a spin: on SQLite a loop that never lets go of the
                # write lock would starve the cleanup instead of the other way round.
                time.sleep(CLAIM_PAUSE)
        except BaseException as e:  # reported by the main thread
            failure.append(e)
        finally:
            own.close()

    thread = threading.Thread(target=claim_loop, name="growth-claims")
    thread.start()
    deadline = time.monotonic() + 60
    while (
        len(latencies["baseline"]) < BASELINE_CLAIMS and time.monotonic() < deadline and not failure
    ):
        time.sleep(0.01)
    phase["name"] = "cleanup"
    batches, deleted = [], 0
    started = time.perf_counter()
    for _ in range(max_batches):
        t0 = time.perf_counter()
        n = store.delete_finished(TaskStatus.COMPLETED, before, batch)
        batches.append(_ms(time.perf_counter() - t0))
        deleted += n
        if n < batch:
            break
    seconds = time.perf_counter() - started
    stop.set()
    thread.join()
    if failure:
        raise failure[0]
    connection.close()  # the next fill starts afresh
    during = latencies["cleanup"]
    return {
        "eligible": eligible,
        "batch": batch,
        "batches": len(batches),
        "deleted": deleted,
        "rows_per_second": deleted / seconds if seconds else float("nan"),
        "batch_p50_ms": percentile(batches, 50),
        "batch_max_ms": max(batches, default=float("nan")),
        "claims_during": len(during),
        "claim_p50_ms": percentile(during, 50),
        "claim_p99_ms": percentile(during, 99),
        "claim_max_ms": max(during, default=float("nan")),
        "baseline_claims": len(latencies["baseline"]),
        "baseline_p50_ms": percentile(latencies["baseline"], 50),
        "baseline_max_ms": max(latencies["baseline"], default=float("nan")),
    }


def plans() -> dict[str, list[str]]:
    """The plans of the statements the claim, the list and the cleanup's read send."""
    from django.db import connection, transaction

    from django_workers import Owner, clock, get_all_tasks
    from django_workers.info import TaskStatus
    from django_workers.stores.database import DatabaseWorkerStore

    def capture(fn: Any) -> list[tuple[str, Any]]:
        seen: list[tuple[str, Any]] = []

        def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            seen.append((sql, params))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(wrapper):
            fn()
        return seen

    store = DatabaseWorkerStore()
    before = clock.now() - dt.timedelta(days=RETENTION_DAYS)
    worker = f"growth-plan-{uuid.uuid4().hex[:6]}"
    wanted = {
        "claim": capture(lambda: store.claim(worker, None, CLAIM_BATCH, clock.now())),
        "list": capture(lambda: get_all_tasks(Owner(USER), limit=LIST_LIMIT)),
        "cleanup read": capture(lambda: store.delete_finished(TaskStatus.COMPLETED, before, 500)),
    }
    found: dict[str, list[str]] = {}
    pg = connection.vendor == "postgresql"
    for name, statements in wanted.items():
        for i, (sql, params) in enumerate(statements):
            head = sql.lstrip().lstrip("(").split(None, 1)[0].upper()
            if head not in ("SELECT", "UPDATE", "DELETE", "WITH"):
                continue
            if name == "cleanup read" and head != "SELECT":
                continue
            if head == "SELECT" and not re.search(rf"\bFROM {TABLE}\b", sql.replace('"', "")):
                continue  # the watchers of the rows found, by task id
            prefix = "EXPLAIN (ANALYZE, BUFFERS) " if pg else "EXPLAIN QUERY PLAN "
            # Inside a transaction rolled back: an analysed UPDATE really runs.
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute(prefix + sql, params)
                    rows = cursor.fetchall()
                transaction.set_rollback(True)
            text = [r[0] for r in rows] if pg else [f"{r[0]} {r[1]} {r[3]}" for r in rows]
            found[f"{name} #{i + 1}: {' '.join(sql.split())[:120]}"] = text
    return found


# -- the parent: one child per database, then the table ------------------------------------


def pg_url() -> str:
    parts = urlsplit(os.environ.get("BENCH_PG_URL", DEFAULT_PG))
    return urlunsplit(parts._replace(path=f"/{PG_DB}"))


def recreate_pg() -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(os.environ.get("BENCH_PG_URL", DEFAULT_PG))
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(PG_DB)))
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PG_DB)))


def run_child(db: str, sizes: list[int], quick: bool, only: str) -> dict[str, Any]:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="benchmarks.settings")
    if db == "postgres":
        recreate_pg()
        env["DATABASE_URL"] = pg_url()
    else:
        WORK.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{SQLITE_FILE}{suffix}").unlink(missing_ok=True)
        env["DATABASE_URL"] = f"sqlite:///{SQLITE_FILE}"
    command = [sys.executable, __file__, "--child", "--sizes", ",".join(map(str, sizes))]
    command += ["--only", only]
    if quick:
        command.append("--quick")
    done = subprocess.run(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"growth: the {db} run failed (exit {done.returncode})")
    last = done.stdout.strip().splitlines()[-1]
    return dict(json.loads(last.removeprefix(ANSWER)))


def table(results: dict[str, dict[str, Any]], sizes: list[int]) -> str:
    lines = []
    head = "| figure | db | " + " | ".join(f"{n:,} rows" for n in sizes) + " | top / first |"
    lines += [head, "|---|---|" + "---:|" * (len(sizes) + 1)]
    rows = [
        ("claim 10, p50 ms", "claim", "claim_p50_ms"),
        ("claim 10, p99 ms", "claim", "claim_p99_ms"),
        ("end 10, p50 ms", "claim", "end_p50_ms"),
        ("claim 10 of a limited queue, p50 ms", "claim_limited", "claim_p50_ms"),
        ("claim 10 of a limited queue, p99 ms", "claim_limited", "claim_p99_ms"),
        ("claim 10 behind a full limited queue, p50 ms", "claim_past_full", "claim_p50_ms"),
        ("claim 10 behind a full limited queue, p99 ms", "claim_past_full", "claim_p99_ms"),
        ("claim 10, old statistics, p50 ms", "claim_stale", "claim_p50_ms"),
        ("claim 10, old statistics, p99 ms", "claim_stale", "claim_p99_ms"),
        (f"list {LIST_LIMIT} of one user, p50 ms", "list", "p50_ms"),
        (f"list {LIST_LIMIT} of one user, p99 ms", "list", "p99_ms"),
        ("enqueue one by one, /s", "enqueue", "per_second"),
        ("cleanup batch, p50 ms", "cleanup", "batch_p50_ms"),
        ("cleanup batch, max ms", "cleanup", "batch_max_ms"),
        ("cleanup rows/s", "cleanup", "rows_per_second"),
        ("claim p50 during cleanup, ms", "cleanup", "claim_p50_ms"),
        ("claim max during cleanup, ms", "cleanup", "claim_max_ms"),
        ("claim max before cleanup, ms", "cleanup", "baseline_max_ms"),
        ("fill, s", None, "fill_s"),
    ]
    for label, group, key in rows:
        for db, answer in results.items():
            if group and group not in answer["sizes"][str(sizes[0])]:
                continue  # a figure this database does not have, or left out by --only
            values = []
            for n in sizes:
                figures = answer["sizes"][str(n)]
                values.append((figures[group] if group else figures)[key])
            ratio = values[-1] / values[0] if values[0] else float("nan")
            cells = " | ".join(f"{v:,.0f}" if v >= 100 else f"{v:.2f}" for v in values)
            lines.append(f"| {label} | {db} | {cells} | {ratio:.2f}x |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "all"), default="all")
    parser.add_argument("--sizes", default=None, help="rows, comma-separated")
    parser.add_argument("--quick", action="store_true", help="1k, 10k, 100k; fewer rounds")
    parser.add_argument(
        "--only",
        default=",".join(FIGURES),
        help=f"figures to measure, comma-separated, of: {', '.join(FIGURES)}",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    only = set(args.only.split(","))
    if only - set(FIGURES):
        parser.error(f"unknown figures: {', '.join(sorted(only - set(FIGURES)))}")
    default = "1000,10000,100000" if args.quick else "1000,100000,1000000"
    sizes = sorted(int(s) for s in (args.sizes or default).split(","))
    if min(sizes) <= USER_TASKS * 2:
        parser.error(f"every size must be above {USER_TASKS * 2} rows")
    if args.child:
        answer = child(sizes, args.quick, only)
        sys.stdout.write(ANSWER + json.dumps(answer) + "\n")
        return 0
    started = time.monotonic()
    dbs = ["sqlite", "postgres"] if args.db == "all" else [args.db]
    load = os.getloadavg()[0]
    results = {db: run_child(db, sizes, args.quick, args.only) for db in dbs}
    text = table(results, sizes)
    plans_text = []
    for db, answer in results.items():
        for name, lines in answer["sizes"][str(max(sizes))].get("plans", {}).items():
            plans_text += [f"### {db}, {max(sizes):,} rows: {name}", "", "```"]
            plans_text += [*lines, "```", ""]
    print(text)
    print()
    print("\n".join(plans_text))
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": " ".join(sys.argv),
        "load_at_start": load,
        "load_at_end": os.getloadavg()[0],
        "nproc": os.cpu_count(),
        "elapsed_s": time.monotonic() - started,
        "results": results,
    }
    markdown = f"{text}\n\n" + "\n".join(plans_text)
    for name in (f"growth-{stamp}", "growth-latest"):
        (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
        (RESULTS / f"{name}.md").write_text(markdown)
    say(f"done in {time.monotonic() - started:.0f} s; results in benchmarks/results/growth-*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
