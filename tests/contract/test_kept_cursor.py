"""PostgreSQL: the hot statements share one psycopg cursor per connection, still Django's.

A single submit, a claim and a batch of ends each used to make a new cursor,
whose adapters psycopg sets up again on its first statement. The store keeps
one cursor per connection and wraps it the way Django wraps any cursor, so
query logging, execute wrappers, error translation and Django's async and
thread checks all still apply. A single submit's cursor binds its values on the
server (one statement, no quoting of the values into the text), kept the same way.
A submit and a claim skip the wrapper itself while nothing watches it, and still
refuse a broken transaction and translate errors as it would.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import SynchronousOnlyOperation
from django.db import DEFAULT_DB_ALIAS, ProgrammingError, connections, transaction
from django.db.backends.utils import CursorWrapper
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from django_workers import clock
from django_workers.models import TaskRecord
from django_workers.stores import sql
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.stores.sql import cursor as kept
from django_workers.submission import MAX_PRIORITY, MIN_PRIORITY
from tests.factories import NewTaskFactory

connection = connections[DEFAULT_DB_ALIAS]  # the wrapper itself, which the store keys on

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the kept cursor is PostgreSQL's"),
]


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The psycopg cursors the store makes while the test runs, from no kept one."""
    kept._KEPT.pop(connection, None)
    kept._KEPT_BOUND.pop(connection, None)
    cursors: list[Any] = []
    create = connection.create_cursor
    bound = kept._server_bound_cursor

    def spy(name: str | None = None) -> Any:
        cursors.append(create(name))
        return cursors[-1]

    def spy_bound(wrapper: Any) -> Any:
        cursors.append(bound(wrapper))
        return cursors[-1]

    monkeypatch.setattr(connection, "create_cursor", spy)
    monkeypatch.setattr(kept, "_server_bound_cursor", spy_bound)
    return cursors


def submit(store: DatabaseWorkerStore) -> None:
    new = NewTaskFactory(global_scope=True)
    assert store.submit(new, None).created


def test_one_cursor_serves_every_submit(made: list[Any]) -> None:
    store = DatabaseWorkerStore()
    for _ in range(3):
        submit(store)
    assert len(made) == 1
    assert not made[0].closed
    # Server-side binding, though Django's connection binds on the client.
    assert not isinstance(made[0], sql.psycopg_client_cursor())
    with connection.connection.cursor() as djangos_kind:
        assert isinstance(djangos_kind, sql.psycopg_client_cursor())


def test_values_bound_on_the_server_reach_every_column(made: list[Any]) -> None:
    store = DatabaseWorkerStore()
    news = [
        NewTaskFactory(priority=MIN_PRIORITY, args=["x'); --", {"b": None}], kwargs={"k": [1.5]}),
        NewTaskFactory(
            global_scope=True,
            priority=MAX_PRIORITY,
            run_after=clock.now() + timedelta(hours=1),
            options={"timeout": 2.5, "max_retries": 3},
            queue="q-\u00e9",
        ),
    ]
    for new in news:
        assert store.submit(new, new.owner).created
    assert len(made) == 1
    assert not isinstance(made[0], sql.psycopg_client_cursor())
    for new in news:
        row = TaskRecord.objects.get(pk=new.id)
        assert (row.owner, row.scope, row.priority, row.queue) == (
            new.owner,
            new.scope,
            new.priority,
            new.queue,
        )
        assert (row.args, row.kwargs, row.options) == (new.args, new.kwargs, new.options)
        assert (row.run_after, row.created_at, row.run_id) == (
            new.run_after,
            new.created_at,
            new.run_id,
        )


def test_where_django_binds_on_the_server_one_kept_cursor_serves(
    made: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection.features, "uses_server_side_binding", True)
    submit(DatabaseWorkerStore())
    assert len(made) == 1
    assert kept._KEPT[connection][1] is made[0]
    assert connection not in kept._KEPT_BOUND


@pytest.mark.parametrize("server_side", [False, True])
def test_nothing_is_prepared_whatever_the_connections_threshold(
    made: list[Any], monkeypatch: pytest.MonkeyPatch, server_side: bool
) -> None:
    # Behind a pooler in transaction mode a prepared statement is missing on the next
    # server session, or its name ("_pg3_0") is taken there by another client's.
    from django.db.backends.postgresql.base import ServerBindingCursor

    monkeypatch.setattr(connection.features, "uses_server_side_binding", server_side)
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", 0)
    if server_side:  # as OPTIONS {"server_side_binding": True} makes Django's connection
        monkeypatch.setattr(connection.connection, "cursor_factory", ServerBindingCursor)
    store = DatabaseWorkerStore()
    for _ in range(3):
        submit(store)
    assert len(store.claim("w1", None, 5, clock.now())) == 3
    with sql.kept_cursor(connection, bound=True) as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE %s", [True])
        assert cursor.fetchone() == (0,)


def test_the_statements_are_logged_and_pass_the_execute_wrappers(made: list[Any]) -> None:
    store = DatabaseWorkerStore()
    seen: list[str] = []

    def keep(execute: Any, statement: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(statement)
        return execute(statement, params, many, context)

    with CaptureQueriesContext(connection) as queries, connection.execute_wrapper(keep):
        submit(store)
        submit(store)
    assert [sql.INSERT_FUNCTION in q["sql"] for q in queries.captured_queries] == [True, True]
    assert [sql.INSERT_FUNCTION in s for s in seen] == [True, True]
    assert len(made) == 1


def test_a_claim_passes_the_execute_wrappers_too(made: list[Any]) -> None:
    store = DatabaseWorkerStore()
    submit(store)
    seen: list[str] = []

    def keep(execute: Any, statement: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(statement)
        return execute(statement, params, many, context)

    with connection.execute_wrapper(keep):
        assert len(store.claim("w1", None, 5, clock.now())) == 1
    assert [sql.CLAIM_RECORDS_FUNCTION in s for s in seen] == [True]


def test_a_tool_that_replaces_djangos_execute_sees_the_submit_and_the_claim(
    made: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Monitoring tools patch ``CursorWrapper.execute``; the store's statements reach it."""
    seen: list[str] = []
    djangos = CursorWrapper.execute

    def traced(self: CursorWrapper, statement: str, params: Any = None) -> Any:
        seen.append(statement)
        return djangos(self, statement, params)

    monkeypatch.setattr(CursorWrapper, "execute", traced)
    store = DatabaseWorkerStore()
    submit(store)
    assert len(store.claim("w1", None, 5, clock.now())) == 1
    assert [sql.INSERT_FUNCTION in s for s in seen] == [True, False]
    assert sql.CLAIM_RECORDS_FUNCTION in seen[1]


def test_a_broken_transaction_is_refused_as_django_refuses_it(made: list[Any]) -> None:
    store = DatabaseWorkerStore()
    with transaction.atomic():
        transaction.set_rollback(True)
        with pytest.raises(TransactionManagementError):
            submit(store)
        with pytest.raises(TransactionManagementError):
            store.claim("w1", None, 5, clock.now())
    assert TaskRecord.objects.count() == 0


def test_a_new_connection_gets_a_new_cursor(made: list[Any]) -> None:
    store = DatabaseWorkerStore()
    submit(store)
    connection.close()
    assert made[0].connection.closed
    submit(store)
    assert len(made) == 2
    assert made[1].connection is connection.connection


def test_errors_are_djangos_and_the_cursor_serves_on(made: list[Any]) -> None:
    store = DatabaseWorkerStore()
    with pytest.raises(ProgrammingError), sql.kept_cursor(connection, bound=True) as cursor:
        cursor.execute("SELECT django_workers_no_such_function()")
    submit(store)
    assert len(made) == 1


def test_django_still_refuses_it_in_async_code(made: list[Any]) -> None:
    store = DatabaseWorkerStore()

    async def submit_from_a_coroutine() -> None:
        submit(store)

    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(submit_from_a_coroutine())


def test_each_thread_keeps_its_own(made: list[Any]) -> None:
    store = DatabaseWorkerStore()
    submit(store)
    errors: list[BaseException] = []

    def in_another_thread() -> None:
        theirs = connections[DEFAULT_DB_ALIAS]
        try:
            submit(store)
            assert kept._KEPT_BOUND[theirs][1] is not made[0]
        except BaseException as error:  # reported to the test's thread below
            errors.append(error)
        finally:
            theirs.close()

    thread = threading.Thread(target=in_another_thread)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert errors == []
