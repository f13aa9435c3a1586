"""The task table's indexes: what migration 0007 builds, on every database."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from django_workers import clock
from django_workers.models import TaskRecord, TaskWatcher
from django_workers.stores.database import DatabaseWorkerStore
from tests.factories import NewTaskFactory

TABLE = TaskRecord._meta.db_table


def indexes() -> dict[str, Any]:
    with connection.cursor() as cursor:
        return connection.introspection.get_constraints(cursor, TABLE)


def definition(name: str) -> str:
    """The index's CREATE statement where the database keeps one ("" on MySQL)."""
    queries = {
        "postgresql": "SELECT indexdef FROM pg_indexes WHERE indexname = %s",
        "sqlite": "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = %s",
    }
    if connection.vendor not in queries:
        return ""
    with connection.cursor() as cursor:
        cursor.execute(queries[connection.vendor], [name])
        return str(cursor.fetchone()[0])


@pytest.mark.django_db
def test_the_claim_indexes_hold_pending_rows_where_the_database_allows() -> None:
    found = indexes()
    # PostgreSQL never bounds a scan of a partial index by what its condition implies,
    # so there the index of a queue's rows leads with the queue.
    by_queue = ["queue", "priority", "created_at", "id"]
    if connection.vendor != "postgresql":
        by_queue.insert(0, "status")

    # PostgreSQL also keeps run_after in it (INCLUDE), so an owner's read needs no row.
    by_owner = ["queue", "owner", "priority", "created_at", "id", "run_after"]
    if connection.vendor != "postgresql":
        by_owner = ["status", *by_owner[:-1]]

    for name, columns in [
        ("workers_task_pending", ["status", "priority", "created_at", "id"]),
        ("workers_task_pending_queue", by_queue),
        ("workers_task_pending_owner", by_owner),
    ]:
        assert found[name]["columns"] == columns
        partial = "WHERE" in definition(name).upper()
        assert partial == (connection.vendor in ("postgresql", "sqlite"))
    assert not {"workers_task_claim", "workers_task_claim_queue"} & set(found)


@pytest.mark.django_db
def test_the_history_indexes_hold_only_the_rows_they_serve() -> None:
    found = indexes()
    for name, columns, condition in [
        ("workers_task_owner_list", ["owner", "created_at"], "owner IS NOT NULL"),
        ("workers_task_ended", ["status", "finished_at"], "finished_at IS NOT NULL"),
        ("workers_task_nodes", ["workflow"], "workflow IS NOT NULL"),
    ]:
        assert found[name]["columns"] == columns
        if connection.vendor in ("postgresql", "sqlite"):
            assert condition in definition(name).replace('"', "")
    gone = {"workers_task_owner", "workers_task_finished", "workers_task_workflow"}
    assert not gone & set(found)


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's varchar_pattern_ops")
def test_postgresql_keeps_no_like_copy_of_the_task_id_indexes() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename IN (%s, %s) AND indexdef LIKE %s",
            [TABLE, "django_workers_taskwatcher", "%pattern_ops%"],
        )
        assert cursor.fetchall() == []


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's planner, bound parameters")
def test_sqlite_claims_through_the_partial_index_with_bound_parameters() -> None:
    store = DatabaseWorkerStore()
    for _ in range(3):
        store.submit(NewTaskFactory(), "alice")
    seen: list[tuple[str, Any]] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        assert len(store.claim("w1", None, 2, clock.now())) == 2
    # The claim's UPDATE, whose rows come from a subquery in claim order.
    sql, params = next((s, p) for s, p in seen if "ORDER BY" in s)
    assert sql.lstrip().startswith("UPDATE")
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "workers_task_pending" in plan
    assert "TEMP B-TREE" not in plan  # the index's order is the claim's


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's claim, sorting off")
def test_a_claim_reads_the_watchers_of_its_rows_only() -> None:
    store = DatabaseWorkerStore()
    for _ in range(3):
        store.submit(NewTaskFactory(global_scope=True, watchers=("alice",)), None)
    watchers = TaskWatcher._meta.db_table
    with connection.cursor() as cursor:
        # Many watchers, as on a site that shares its tasks.
        cursor.execute(
            f"INSERT INTO {watchers} (task_id, user_id) SELECT id, 'u' || n "
            f"FROM {TABLE}, generate_series(1, 5000) AS n"
        )
        cursor.execute(f"ANALYZE {watchers}")
    scans = _watcher_scans()
    claimed = store.claim("w1", None, 2, clock.now())
    # In the order they were granted ("u10" comes after "u9").
    assert [info.watchers for info in claimed] == [
        ("alice", *(f"u{n}" for n in range(1, 5001)))
    ] * 2
    # The claim reads its rows' watchers inside the claim function, where EXPLAIN
    # cannot see: this transaction's scan counters tell which way they were read.
    # Found through the task's index, not a scan of every watcher nor a filter over
    # them in id order (as with sorting off, before the aggregate ordered its own input).
    after = _watcher_scans()
    used = {name for name in after if after[name] > scans[name]}
    assert used, after
    assert all(name.startswith("(task_id") for name in used), after


def _watcher_scans() -> dict[str, int]:
    """This transaction's scans of the watchers table ("table") and of each of its indexes."""
    watchers = TaskWatcher._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT substring(pg_get_indexdef(indexrelid) from '[(].*'), "
            "pg_stat_get_xact_numscans(indexrelid) FROM pg_index WHERE indrelid = %s::regclass",
            [watchers],
        )
        found = dict(cursor.fetchall())
        cursor.execute("SELECT pg_stat_get_xact_numscans(%s::regclass)", [watchers])
        found["table"] = cursor.fetchone()[0]
    return found


@pytest.mark.django_db(transaction=True)
def test_the_migration_goes_back_and_forth() -> None:
    try:
        call_command("migrate", "django_workers", "0006", verbosity=0)
        assert "workers_task_claim" in indexes()
        assert "workers_task_pending" not in indexes()
    finally:
        call_command("migrate", "django_workers", verbosity=0)
    assert "workers_task_pending" in indexes()


@pytest.mark.django_db(transaction=True)
def test_the_queue_index_migration_goes_back_and_forth() -> None:
    leading = "queue" if connection.vendor == "postgresql" else "status"
    try:
        call_command("migrate", "django_workers", "0016", verbosity=0)
        assert indexes()["workers_task_pending_queue"]["columns"][0] == "status"
    finally:
        call_command("migrate", "django_workers", verbosity=0)
    assert indexes()["workers_task_pending_queue"]["columns"][0] == leading


@pytest.mark.django_db(transaction=True)
def test_the_history_index_migration_goes_back_and_forth() -> None:
    try:
        call_command("migrate", "django_workers", "0007", verbosity=0)
        assert {"workers_task_owner", "workers_task_finished"} <= set(indexes())
        assert "workers_task_ended" not in indexes()
    finally:
        call_command("migrate", "django_workers", verbosity=0)
    assert {"workers_task_owner_list", "workers_task_ended", "workers_task_nodes"} <= set(indexes())


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's planner, bound parameters")
def test_sqlite_reads_each_queue_by_index_behind_a_full_queue() -> None:
    store = DatabaseWorkerStore()
    store.submit_many([NewTaskFactory(queue="busy") for _ in range(20)], "alice")
    store.submit_many([NewTaskFactory(queue="idle") for _ in range(3)], "alice")
    limits = {"busy": 1}
    assert len(store.claim("w0", ["busy"], 1, clock.now(), limits)) == 1
    seen: list[tuple[str, Any]] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        claimed = store.claim("w1", None, 10, clock.now(), limits)
    assert [info.queue for info in claimed] == ["idle"] * 3
    plans = []
    for sql, params in seen:
        if "min(queue)" in sql or "AS ready_0" in sql:
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
                plans += [str(row[-1]) for row in cursor.fetchall()]
    text = "\n".join(plans)
    # The queues with pending rows, one probe each (of either index that leads with the
    # status and the queue); then each queue's own first rows.
    assert re.search(r"workers_task_pending_(queue|owner) \(status=\? AND queue>\?\)", text), text
    assert "workers_task_pending_queue (status=? AND queue=?)" in text, text
    assert "SCAN django_workers_taskrecord" not in text, text
