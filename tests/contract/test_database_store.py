"""What only the database store has: query counts on hot paths, and plan-proof reads."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from pytest_django import DjangoAssertNumQueries

from django_workers import (
    Owner,
    System,
    TaskOptions,
    TaskStatus,
    TaskSubmission,
    cancel_task,
    clock,
    get_all_tasks,
    get_task_status,
    lifecycle,
    submit_task,
    submit_tasks,
)
from django_workers.core import GrantedTaskRow
from django_workers.models import TaskRecord, TaskWatcher
from django_workers.references import json_size
from django_workers.stores import rows, sql
from django_workers.stores.database import WORKFLOW_COLUMNS, DatabaseWorkerStore
from django_workers.stores.sql import claim as sql_claim
from django_workers.stores.sql import columns as sql_columns
from django_workers.stores.sql import cursor as kept
from django_workers.stores.sql import decode, encode
from django_workers.submission import build_task, build_tasks
from django_workers.workflows import Workflow
from tests.factories import NewTaskFactory, TaskRecordFactory, TaskWatcherFactory
from tests.helpers import answer_in_forked_child
from tests.tasks import add

ALICE, SVC = Owner("alice"), Owner("svc")

# Counts include the BEGIN/COMMIT Django logs. On PostgreSQL a large batch goes
# through COPY, which runs on the driver's cursor and is not logged.
# No read of existing ids first: a taken id fails the insert. PostgreSQL's COPY goes
# past Django's cursor wrapper, so it is not counted there.
BULK_QUERIES = {"postgresql": 3}
#: Whether this database reads tasks and workflows with one hand-written statement.
ONE_STATEMENT = connection.vendor in sql.ONE_STATEMENT_READS
BULK_QUERIES_DEFAULT = 4  # BEGIN, INSERT tasks, INSERT watchers, COMMIT


def test_get_task_info_is_one_query_and_two_through_the_orm(
    db_store: DatabaseWorkerStore, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], watchers=[SVC], store=db_store)
    # The row with its watchers; through the ORM (MySQL, MariaDB) the row, then its watchers.
    with django_assert_num_queries(1 if ONE_STATEMENT else 2):
        info = get_task_status(task_id, ALICE, store=db_store)
    assert info.watchers == ("alice", "svc")
    assert info.args == [1, 2]
    assert db_store.get_task_info("alice::missing") is None


def test_submit_of_a_new_task_is_one_insert(
    db_store: DatabaseWorkerStore, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(1):
        task_id = submit_task("k", add, ALICE, args=[1, 2], store=db_store)
    assert TaskRecord.objects.get(pk=task_id).args == [1, 2]


@pytest.mark.skipif(
    connection.vendor == "mysql", reason="MySQL has no INSERT that ignores only a taken id"
)
def test_submit_inside_a_transaction_is_one_insert_and_a_taken_id_still_joins(
    db_store: DatabaseWorkerStore, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    from django.db import transaction

    with transaction.atomic():
        # One INSERT: no savepoint, no lock, no second statement.
        with django_assert_num_queries(1):
            task_id = submit_task("k", add, ALICE, args=[1, 2], store=db_store)
        # The same id again inside the same transaction joins the run, and the
        # transaction is still fine afterwards.
        again = submit_task("k", add, ALICE, args=[1, 2], store=db_store)
        assert again == task_id
        assert TaskRecord.objects.filter(pk=task_id).count() == 1
    info = db_store.get_task_info(task_id)
    assert info is not None
    assert info.status == "PENDING"


def test_submit_with_watchers_is_one_short_transaction(
    db_store: DatabaseWorkerStore, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    # BEGIN, lock the id, SAVEPOINT, INSERT task, INSERT watcher, RELEASE, COMMIT.
    with django_assert_num_queries(7):
        task_id = submit_task("k", add, ALICE, args=[1, 2], watchers=[SVC], store=db_store)
    assert list(TaskWatcher.objects.filter(task_id=task_id).values_list("user_id", flat=True)) == [
        "svc"
    ]


def test_a_join_reads_and_writes_nothing_new(
    db_store: DatabaseWorkerStore, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=db_store)
    # The refused INSERT, then BEGIN, lock the row, read its watchers, COMMIT.
    with django_assert_num_queries(5):
        assert submit_task("k", add, ALICE, args=[1, 2], store=db_store) == task_id
    assert TaskRecord.objects.count() == 1


def test_bulk_submit_is_a_constant_number_of_queries(
    db_store: DatabaseWorkerStore, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    batch = [TaskSubmission(key=f"k{i}", task=add, args=[i, i], watchers=[SVC]) for i in range(100)]
    with django_assert_num_queries(BULK_QUERIES.get(connection.vendor, BULK_QUERIES_DEFAULT)):
        ids = submit_tasks(batch, ALICE, store=db_store)
    assert len(set(ids)) == 100
    assert TaskRecord.objects.count() == 100
    assert TaskWatcher.objects.filter(user_id="svc").count() == 100


@pytest.mark.django_db
def test_listing_reads_watchers_in_one_query(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    for row in TaskRecordFactory.create_batch(30):
        TaskWatcherFactory.create_batch(2, task=row)
    TaskRecordFactory.create_batch(5, owner="bob")
    # The owned rows and the watched rows (each along its own index) with their watchers,
    # in one statement; through the ORM (MySQL, MariaDB) three queries.
    with django_assert_num_queries(1 if ONE_STATEMENT else 3):
        page = get_all_tasks(ALICE, limit=1000, store=DatabaseWorkerStore())
    assert len(page) == 30
    assert all(len(info.watchers) == 3 and info.watchers[0] == "alice" for info in page)
    with django_assert_num_queries(1 if ONE_STATEMENT else 2):
        everything = get_all_tasks(System(), limit=1000, store=DatabaseWorkerStore())
    assert len(everything) == 35
    assert {len(info.watchers) for info in everything} == {1, 3}


@pytest.mark.django_db
def test_cancel_is_a_fenced_update_between_two_reads(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    store = DatabaseWorkerStore()
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=store)
    # Read, UPDATE, read again (through the ORM each read is two queries).
    with django_assert_num_queries(3 if ONE_STATEMENT else 5):
        assert cancel_task(task_id, ALICE, store=store).status == "CANCELLED"


def _drop_task_id_indexes() -> None:
    """Leave the unique (task, user_id) index as the only way to find a task's watchers."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, TaskWatcher._meta.db_table)
        for name, info in constraints.items():
            if info["index"] and info["columns"] == ["task_id"] and not info["unique"]:
                cursor.execute(f"DROP INDEX {connection.ops.quote_name(name)}")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")


@pytest.mark.django_db
@pytest.mark.parametrize("use_tz", [True, False])
def test_reads_give_datetimes_as_the_orm_does(settings: Any, use_tz: bool) -> None:
    store = DatabaseWorkerStore()
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=store)
    settings.USE_TZ = use_tz
    by_orm = TaskRecord.objects.values("created_at", "run_after", "finished_at").get(pk=task_id)
    for info in (store.get_task_info(task_id), *store.list_tasks(user_id="alice")):
        assert info is not None
        assert info.created_at == by_orm["created_at"]
        assert info.created_at.tzinfo == by_orm["created_at"].tzinfo
        assert (info.run_after, info.finished_at) == (None, None)


@pytest.mark.django_db
def test_reads_list_watchers_in_grant_order() -> None:
    # Not by user id, as an index of (task, user_id) would return them.
    store = DatabaseWorkerStore()
    new = NewTaskFactory(watchers=("alice", "zed", "amy", "mo"))
    store.submit(new, "alice")
    assert store.get_task_info(new.id).watchers == ("alice", "zed", "amy", "mo")  # type: ignore[union-attr]
    [listed] = store.list_tasks(user_id="amy")
    assert listed.watchers == ("alice", "zed", "amy", "mo")
    [everyone] = store.list_tasks(user_id=None)
    assert everyone.watchers == ("alice", "zed", "amy", "mo")


@pytest.mark.django_db
def test_watchers_keep_grant_order_whatever_plan_the_database_picks() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("forcing an index-only plan needs PostgreSQL (DDL in the test transaction)")
    store = DatabaseWorkerStore()
    new = NewTaskFactory(watchers=("alice", "zed", "amy", "mo"))
    store.submit(new, "alice")
    _drop_task_id_indexes()
    # An index-only scan of (task, user_id) returns user ids sorted; grants keep their order.
    assert store.get_task_info(new.id).watchers == ("alice", "zed", "amy", "mo")  # type: ignore[union-attr]
    [listed] = store.list_tasks(user_id="amy")
    assert listed.watchers == ("alice", "zed", "amy", "mo")


@pytest.mark.django_db(transaction=True)
def test_on_postgresql_ends_and_their_refill_are_one_statement_in_one_commit() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the one-round-trip end and refill is PostgreSQL's")
    store = DatabaseWorkerStore()
    ids = [
        submit_task(f"t{i}", add, System(), args=[1, 2], scope="global", store=store)
        for i in range(3)
    ]
    first = store.claim("w1", None, 1, clock.now())
    ends = [lifecycle.run_end(first[0], "w1", TaskStatus.COMPLETED, clock.now(), result=3)]
    with CaptureQueriesContext(connection) as queries:
        won, claimed = store.end_and_claim(ends, "w1", None, 2, clock.now())
    assert (won, [r.id for r in claimed]) == ([True], ids[1:])
    assert len(queries) == 1, [q["sql"] for q in queries]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("queues", "taken"),
    [
        (None, [("other", 9), ("mail", 5), ("default", 5)]),
        (["mail"], [("mail", 5), ("mail", 1), ("mail", 0)]),
    ],
)
def test_on_postgresql_the_claim_function_takes_what_the_claim_statement_takes(
    queues: list[str] | None, taken: list[tuple[str, int]]
) -> None:
    # The claim of every queue or of one calls a PL/pgSQL function whose statement is
    # planned once per session. It must take what the plain statement takes, in claim
    # order, and return every column and watcher alike.
    if connection.vendor != "postgresql":
        pytest.skip("the claim function is PostgreSQL's")
    now = clock.now()
    for n, (queue, priority) in enumerate(
        [("mail", 0), ("default", 5), ("mail", 5), ("other", 9), ("default", 0), ("mail", 1)]
    ):
        row = TaskRecordFactory(queue=queue, priority=priority, created_at=now - timedelta(n))
        TaskWatcherFactory(task=row, user_id=f"w{n}b")
        TaskWatcherFactory(task=row, user_id=f"w{n}a")
    TaskRecordFactory(queue="mail", priority=9, run_after=now + timedelta(hours=1))
    TaskRecordFactory(queue="mail", priority=9, status=TaskStatus.RUNNING.value)

    def claim(statement: tuple[str, list[Any]]) -> list[GrantedTaskRow]:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(*statement)
            # Named as the model's columns, then the watchers: a column added to the
            # table needs a new version of the claim records function.
            assert [c.name for c in cursor.description][:-1] == sql_columns._COLUMNS
            claimed = decode._records(cursor.fetchall())
            transaction.set_rollback(True)
        return sorted(claimed, key=rows.claim_order)

    call = sql_claim._claim("w1", queues, 3, now)
    assert sql.CLAIM_RECORDS_FUNCTION in call[0]
    through_function = claim(call)
    assert through_function == claim(sql_claim._claim_sql("w1", queues, 3, now))
    assert [(r["queue"], r["priority"]) for r in through_function] == taken
    assert {r["status"] for r in through_function} == {TaskStatus.RUNNING.value}
    assert all(r["worker_id"] == "w1" and r["attempts"] == 1 for r in through_function)
    assert [len(r["grants"]) for r in through_function] == [2, 2, 2]


def test_a_task_submitted_alone_has_the_fresh_columns_of_any_new_record(
    db_store: DatabaseWorkerStore,
) -> None:
    # The one-statement submit writes these columns as literals; they must be row_of's.
    task_id = submit_task("k", add, ALICE, args=[1, 2], store=db_store)
    fresh = [*encode._FRESH_LITERALS, "status"]
    stored = TaskRecord.objects.filter(pk=task_id).values(*fresh).get()
    new = build_task(TaskSubmission(key="k2", task=add), ALICE, db_store)
    assert stored == {name: rows.row_of(new)[name] for name in fresh}


def test_a_batch_stores_its_arguments_as_checked_or_as_they_were_replaced(
    db_store: DatabaseWorkerStore,
) -> None:
    # The batch COPY sends the JSON text the check made, while the record still holds the
    # values it was made from.
    specs = [
        TaskSubmission(key=f"k{n}", task=add, args=(Decimal("1.10"), n), kwargs={"n": n})
        for n in range(sql.COPY_MIN_ROWS)
    ]
    batch = list(build_tasks(specs, ALICE, db_store))
    batch[0] = replace(batch[0], args=["replaced"])
    batch[1] = replace(batch[1], kwargs={})
    sql.insert_records(connection, batch)
    stored = {
        key: (args, kwargs)
        for key, args, kwargs in TaskRecord.objects.values_list("key", "args", "kwargs")
    }
    assert stored["k0"] == (["replaced"], {"n": 0})
    assert stored["k1"] == (["1.10", 1], {})
    assert stored["k2"] == (["1.10", 2], {"n": 2})


def test_a_batch_stores_what_copy_text_would_escape_unchanged(
    db_store: DatabaseWorkerStore,
) -> None:
    # On PostgreSQL the batch is sent as COPY text, where a backslash, tab, newline or
    # carriage return in a value would end or change it, and "\N" alone reads as NULL.
    odd = ["back\\slash", "tab\there", "new\nline", "cr\rhere", "\\N", "\\.", "é中\u2028"]
    specs = [
        TaskSubmission(
            key=f"k\\{n}\\N",
            task=add,
            args=[odd[n % len(odd)], n],
            kwargs={"k\\\t": odd[(n + 1) % len(odd)]},
            queue="q\\",
        )
        for n in range(sql.COPY_MIN_ROWS)
    ]
    submit_tasks(specs, Owner("o\\ner"), store=db_store)
    stored = {r.key: r for r in TaskRecord.objects.all()}
    assert len(stored) == len(specs)
    for spec in specs:
        record = stored[spec.key]
        assert record.id == f"o\\ner::{spec.key}"
        assert (record.args, record.kwargs) == ([*spec.args], spec.kwargs)
        assert (record.owner, record.queue, record.result) == ("o\\ner", "q\\", None)


def test_a_task_submitted_alone_is_stored_as_the_insert_of_a_batch_stores_it(
    db_store: DatabaseWorkerStore,
) -> None:
    # The one-row path (on PostgreSQL a function with its own column list, on SQLite an
    # INSERT with literals), the batch INSERT and the batch COPY (PostgreSQL, its columns
    # in an order of their own) must store every column alike: a column added to the
    # table but not to one of them, or values in another order, fail. The batch's
    # records come from build_tasks, whose records after the first share its checks.
    options = TaskOptions(timeout=30, retries=2)
    when = clock.now() + timedelta(hours=1)

    def spec(key: str) -> TaskSubmission:
        return TaskSubmission(
            key=key,
            task=add,
            args=[1, {"x": [2]}],
            kwargs={"y": "z"},
            queue="q",
            priority=7,
            run_after=when,
            options=options,
        )

    one, other = (build_task(spec(key), ALICE, db_store) for key in ("one", "other"))
    assert db_store.submit(one, "alice").created
    assert not db_store.submit(one, "alice").created  # the id is taken, the run lives
    sql.insert_records(connection, [other])
    batch = build_tasks([spec(f"copy-{n}") for n in range(sql.COPY_MIN_ROWS)], ALICE, db_store)
    sql.insert_records(connection, batch)
    varying = {"id", "key", "run_id", "created_at"}
    columns = [f for f in sql_columns._FIELDS if f not in varying]
    stored = {r.pop("key"): r for r in TaskRecord.objects.values("key", *columns)}
    assert len(stored) == 2 + sql.COPY_MIN_ROWS
    assert all(row == stored["one"] for row in stored.values())
    assert stored["one"]["owner"] == "alice"
    assert stored["one"]["options"] == options.to_json()
    made = TaskRecord.objects.filter(key__startswith="copy-").order_by("created_at")
    assert [(r.key, r.run_id, r.created_at) for r in made] == [
        (new.key, new.run_id, new.created_at) for new in batch
    ]


@pytest.mark.django_db(transaction=True)
def test_without_client_side_binding_ends_and_their_refill_share_one_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Server-side binding runs one statement a call: the one-round-trip path steps aside.
    monkeypatch.setattr(kept, "psycopg_client_cursor", lambda: type("NoCursor", (), {}))
    store = DatabaseWorkerStore()
    ids = [
        submit_task(f"t{i}", add, System(), args=[1, 2], scope="global", store=store)
        for i in range(3)
    ]
    first = store.claim("w1", None, 1, clock.now())
    ends = [lifecycle.run_end(first[0], "w1", TaskStatus.COMPLETED, clock.now(), result=3)]
    blocks: list[bool] = []

    def note(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not sql.upper().startswith("BEGIN"):  # SQLite's, sent as the block opens
            blocks.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(note):
        won, claimed = store.end_and_claim(ends, "w1", None, 2, clock.now())
    assert (won, [r.id for r in claimed]) == ([True], ids[1:])
    # The ends' write and the claim, inside one atomic block.
    assert len(blocks) >= 2
    assert all(blocks)


def _first_of_a_chain_completed(store: DatabaseWorkerStore) -> list[lifecycle.TaskEnd]:
    """The end of node "a" of the workflow "chain" (a -> b), claimed by worker w1."""
    wf = Workflow("chain", System())
    first = wf.add("a", add, args=[1, 2])
    wf.add("b", add, args=[1, 2]).after(first)
    wf.submit(store=store)
    [a] = store.claim("w1", None, 5, clock.now())
    return [lifecycle.run_end(a, "w1", TaskStatus.COMPLETED, clock.now(), result=3)]


@pytest.mark.django_db(transaction=True)
def test_on_postgresql_node_ends_and_their_refill_take_the_two_round_trips_of_a_node_end() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the two-round-trip node end is PostgreSQL's")
    store = DatabaseWorkerStore()
    ends = _first_of_a_chain_completed(store)
    with CaptureQueriesContext(connection) as queries:
        won, claimed = store.end_and_claim(ends, "w1", None, 1, clock.now())
    assert (won, [r.id for r in claimed]) == ([True], ["chain:b"])  # promoted, then claimed
    assert len(queries) == 2, [q["sql"] for q in queries]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's one write lock")
def test_threads_of_one_process_take_turns_to_write_to_sqlite(
    db_store: DatabaseWorkerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite's busy handler sleeps instead of queueing, so a heartbeat beside a busy claim
    # loop and end writer could lose every try for longer than the lease. Held inside a
    # claim, this process's writer lock makes the heartbeat wait its turn instead.
    inside, release = threading.Event(), threading.Event()
    ready = sql.any_ready

    def held_ready(*args: Any) -> bool:
        inside.set()
        release.wait(10.0)
        return ready(*args)

    def in_thread(fn: Any, *args: Any) -> threading.Thread:
        def run() -> None:
            try:
                fn(*args)
            finally:
                connections.close_all()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    monkeypatch.setattr(sql, "any_ready", held_ready)
    claimer = in_thread(db_store.claim, "w1", None, 1, clock.now())
    try:
        assert inside.wait(10.0)
        beat = in_thread(db_store.heartbeat, "w2", clock.now())
        beat.join(0.3)
        assert beat.is_alive()  # waiting for the claim to finish
        # A thread inside a transaction may hold SQLite's own lock: it never waits here.
        with transaction.atomic():
            assert db_store.heartbeat("w3", clock.now()) is False
        assert beat.is_alive()
    finally:
        release.set()
    claimer.join(10.0)
    beat.join(10.0)
    assert not claimer.is_alive()
    assert not beat.is_alive()


@pytest.mark.skipif(
    connection.vendor != "sqlite" or not hasattr(os, "fork"), reason="SQLite's writer lock, fork"
)
def test_a_forked_child_does_not_inherit_a_held_writer_lock(db_store: DatabaseWorkerStore) -> None:
    writer = db_store._writing()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # another thread holds the lock when the child is forked
        with writer:
            held.set()
            release.wait(10.0)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10.0)
        # In the child that thread does not exist: can it take the lock?
        took = answer_in_forked_child(lambda: db_store._writing().acquire(timeout=2.0))
    finally:
        release.set()
        holder.join(10.0)
    assert took is True


@pytest.mark.django_db
def test_a_workflow_status_reads_as_the_orm_does_in_one_query(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    store = DatabaseWorkerStore()
    wf = Workflow("w1", ALICE)
    first = wf.add("first", add, args=[1, 2])
    second = wf.add("second", add, args=[3, 4]).after(first)
    wf.add("third", add).after(second)
    handle = wf.submit(store=store)
    other = Workflow("w2", Owner("bob"))
    other.add("only", add)
    other.submit(store=store)
    ids = {node.name: node.task_id for node in handle.status().nodes}
    # Records as ends leave them: a result, an error's message, a cancel's reason.
    done = {"sum": 3, "text": "é", "list": [1.5, None]}
    TaskRecord.objects.filter(pk=ids["first"]).update(status="COMPLETED", result=done)
    TaskRecord.objects.filter(pk=ids["second"]).update(
        status="FAILED", error={"type": "builtins.ValueError", "message": "boom", "traceback": ""}
    )
    TaskRecord.objects.filter(pk=ids["third"]).update(status="CANCELLED", cancel_reason="user")
    row = store._flows().filter(pk=handle.id).values(*WORKFLOW_COLUMNS).get()
    by_orm = store._workflow_infos([row])[0]
    # The row with its task records (through the ORM the row, then its records).
    with django_assert_num_queries(1 if ONE_STATEMENT else 2):
        info = store.get_workflow(handle.id)
    assert info == by_orm
    # Equal and of the same types: 0 == False, and naive == aware is simply False.
    assert (type(info.fail_fast), type(info.undo_on_cancel)) == (bool, bool)  # type: ignore[union-attr]
    assert info.created_at.tzinfo == by_orm.created_at.tzinfo  # type: ignore[union-attr]
    # States come from the workflow row (its machine's view), reasons from the records.
    assert [(n.name, n.reason) for n in info.nodes] == [  # type: ignore[union-attr]
        ("first", None),
        ("second", "boom"),
        ("third", "user"),
    ]
    assert info.nodes[0].result_size == json_size(done)  # type: ignore[union-attr]
    assert store.get_workflow("alice::missing") is None
    with django_assert_num_queries(1 if ONE_STATEMENT else 2):
        mine = store.list_workflows(user_id="alice")
    assert mine == [by_orm]
    assert len(store.list_workflows(user_id=None)) == 2
    assert store.list_workflows(user_id="alice", state="completed") == []
    assert (
        store.list_workflows(user_id=None, offset=1, limit=5)
        == store.list_workflows(user_id=None)[1:]
    )


@pytest.mark.django_db(transaction=True)
def test_a_node_end_that_promotes_reads_no_node_record() -> None:
    # The engine answers the usual end from the workflow's row alone: the lock, the end,
    # the promotion and the row (PostgreSQL: in two round trips, tested above).
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL's node end is two round trips")
    store = DatabaseWorkerStore()
    ends = _first_of_a_chain_completed(store)
    with CaptureQueriesContext(connection) as queries:
        assert store.end_tasks(ends) == [True]
    statements = [q["sql"].split()[0].upper() for q in queries]
    assert statements == ["BEGIN", "SELECT", "UPDATE", "UPDATE", "UPDATE", "COMMIT"]
    b = store.get_task_info("chain:b")
    assert b is not None
    assert b.status == TaskStatus.PENDING
