"""PostgreSQL: a claim reads the index of PENDING rows in claim order, whatever the statistics.

With statistics of an empty table (a new site, or one whose retention deleted
every task) the planner read and sorted every pending row at each claim until
autoanalyze caught up. The claim of every queue, or of one, calls the claim
function, which runs its statement with sorting off and one generic plan; the
tests plan that statement as the function does.

A claim that is a transaction of its own also commits without waiting for the
disk; every write that ends a run still waits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.db import connection, transaction

from django_workers import TaskStatus, clock, lifecycle
from django_workers.models import TaskRecord
from django_workers.stores.database import DatabaseWorkerStore
from django_workers.stores.sql import CLAIM_FUNCTION, CLAIM_RECORDS_FUNCTION
from django_workers.stores.sql import claim as sql_claim
from tests.factories import NewTaskFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner"),
]

TABLE = TaskRecord._meta.db_table
ORDERED = "SELECT set_config('enable_sort', 'off', true)"
OWN_COMMIT = "SELECT set_config('synchronous_commit', 'off', true)"
Sent = list[tuple[str, Any]]


@pytest.fixture
def store() -> DatabaseWorkerStore:
    """A store whose table was analyzed empty, then given 2,000 pending tasks."""
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {TABLE}")
    store = DatabaseWorkerStore()
    store.submit_many([NewTaskFactory(global_scope=True) for _ in range(2000)], None)
    return store


@pytest.fixture
def sent() -> Iterator[Sent]:
    """The statements (and parameters) sent to the database while the test runs."""
    seen: Sent = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        yield seen


def claim_statement(sent: Sent) -> tuple[str, str, Any]:
    """What was sent before the claim in its query (or ""), the claim, its parameters."""
    sql, params = next(
        (s, p) for s, p in sent if "FOR UPDATE SKIP LOCKED" in s or CLAIM_FUNCTION in s
    )
    before, _, claim = sql.rpartition(";\n")
    return before, claim, list(params)[-claim.count("%s") :]


def function_plan(queue: str | None) -> str:
    """The plan the claim function's statement for ``queue`` runs with.

    The statement is read from the function in the database, its parameters made
    placeholders, and planned under the function's own settings as a generic plan,
    as PL/pgSQL plans it once for a session.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc, proconfig FROM pg_proc WHERE proname = %s", [CLAIM_FUNCTION])
        source, settings = cursor.fetchone()
    assert set(settings) == {
        "enable_sort=off",
        "enable_seqscan=off",
        "plan_cache_mode=force_generic_plan",
    }
    every_queue, one_queue = re.findall(r"RETURN QUERY(.*?);", source, re.S)
    statement = every_queue if queue is None else one_queue
    for n, name in enumerate(("p_worker", "p_now", "p_limit", "p_queue"), start=1):
        statement = re.sub(rf"\b{name}\b", f"${n}", statement)
    with transaction.atomic(), connection.cursor() as cursor:
        for setting in settings:
            cursor.execute("SELECT set_config(%s, %s, true)", setting.split("="))
        cursor.execute(f"PREPARE claim_plan(text, timestamptz, integer, text) AS {statement}")
        cursor.execute("EXPLAIN EXECUTE claim_plan('w1', now(), 10, %s)", [queue])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("DEALLOCATE claim_plan")
        transaction.set_rollback(True)
    return plan


@pytest.mark.parametrize(
    ("queues", "index"),
    [(None, "workers_task_pending"), (["default"], "workers_task_pending_queue")],
)
def test_a_claim_takes_rows_in_index_order_with_statistics_of_an_empty_queue(
    store: DatabaseWorkerStore, sent: Sent, queues: Sequence[str] | None, index: str
) -> None:
    assert len(store.claim("w1", queues, 10, clock.now())) == 10

    _before, claim, _params = claim_statement(sent)
    assert CLAIM_FUNCTION in claim
    plan = function_plan(queues[0] if queues else None)
    assert "Sort" not in plan
    assert f"Index Scan using {index} " in plan
    # The rows are then updated through the primary key, not a join over the table.
    assert "Seq Scan" not in plan
    assert "django_workers_taskrecord_pkey" in plan


def test_the_refill_after_ends_is_ordered_the_same_way(
    store: DatabaseWorkerStore, sent: Sent
) -> None:
    runs = store.claim("w1", None, 3, clock.now())
    ends = [lifecycle.run_end(r, "w1", TaskStatus.COMPLETED, clock.now(), result=1) for r in runs]
    sent.clear()

    won, claimed = store.end_and_claim(ends, "w1", None, 3, clock.now())

    assert (won, len(claimed)) == ([True] * 3, 3)
    _before, claim, _params = claim_statement(sent)
    assert CLAIM_FUNCTION in claim  # whose plan the test above reads


def test_a_claim_of_several_queues_is_left_to_the_planner(
    store: DatabaseWorkerStore, sent: Sent
) -> None:
    # No index holds several queues' rows in claim order; the setting would make the
    # planner walk every pending row of the other queues instead.
    assert len(store.claim("w1", ["default", "other"], 10, clock.now())) == 10
    before, claim, _params = claim_statement(sent)
    assert CLAIM_FUNCTION not in claim
    assert ORDERED not in before


def test_a_claim_inside_a_transaction_changes_no_setting_of_it(
    store: DatabaseWorkerStore, sent: Sent
) -> None:
    with transaction.atomic():
        assert len(store.claim("w1", None, 10, clock.now())) == 10
        with connection.cursor() as cursor:
            cursor.execute("SHOW enable_sort")
            assert cursor.fetchone()[0] == "on"
    before, _claim, _params = claim_statement(sent)
    assert ORDERED not in before


# -- the claim's commit ---------------------------------------------------------------------


def synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


@pytest.mark.parametrize(
    ("queues", "limits"),
    [(None, None), (["default"], None), (["default", "other"], None), (None, {"default": 5})],
)
def test_a_claim_of_its_own_commits_without_waiting_for_the_disk(
    store: DatabaseWorkerStore,
    sent: Sent,
    queues: Sequence[str] | None,
    limits: dict[str, int] | None,
) -> None:
    assert store.claim("w1", queues, 10, clock.now(), limits)
    before, claim, params = claim_statement(sent)
    if CLAIM_RECORDS_FUNCTION in claim:
        assert params[-1] is True  # p_own_commit: the function turns it off
    else:
        assert OWN_COMMIT in before
    assert synchronous_commit() == "on"  # for the claim's transaction only


@pytest.mark.parametrize(("own_commit", "setting"), [(True, "off"), (False, "on")])
def test_the_claim_records_function_turns_the_wait_off_for_its_transaction_when_told(
    own_commit: bool, setting: str
) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT * FROM {CLAIM_RECORDS_FUNCTION}('w1', now(), 1, NULL, %s)", [own_commit]
        )
        assert synchronous_commit() == setting
    assert synchronous_commit() == "on"


@pytest.mark.parametrize("limits", [None, {"default": 5}])
def test_the_refill_after_ends_waits_for_the_disk(
    store: DatabaseWorkerStore, sent: Sent, limits: dict[str, int] | None
) -> None:
    runs = store.claim("w1", None, 3, clock.now(), limits)
    ends = [lifecycle.run_end(r, "w1", TaskStatus.COMPLETED, clock.now(), result=1) for r in runs]
    sent.clear()

    won, claimed = store.end_and_claim(ends, "w1", None, 3, clock.now(), limits)

    assert (won, len(claimed)) == ([True] * 3, 3)
    assert not [sql for sql, _params in sent if OWN_COMMIT in sql]
    assert not own_commit_calls(sent)


def test_a_claim_inside_a_transaction_leaves_its_commit_alone(
    store: DatabaseWorkerStore, sent: Sent
) -> None:
    with transaction.atomic():
        assert store.claim("w1", None, 10, clock.now())
        assert synchronous_commit() == "on"
    assert not [sql for sql, _params in sent if OWN_COMMIT in sql]
    assert not own_commit_calls(sent)


def own_commit_calls(sent: Sent) -> list[str]:
    """The calls of the claim records function sent that told it the claim commits alone."""
    return [sql for sql, params in sent if CLAIM_RECORDS_FUNCTION in sql and list(params)[-1]]


def test_the_read_before_a_limited_claim_walks_the_pending_index(sent: Sent) -> None:
    # Pending rows are the newest, behind the finished history. Expecting one row in
    # ten to be pending, the planner scanned the table from its oldest rows for the
    # first one (15 ms with 100,000 rows) until the read asked for claim order.
    store = DatabaseWorkerStore()
    store.submit_many([NewTaskFactory(global_scope=True) for _ in range(4000)], None)
    TaskRecord.objects.update(status=TaskStatus.COMPLETED, finished_at=clock.now())
    store.submit_many([NewTaskFactory(global_scope=True) for _ in range(400)], None)
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {TABLE}")
    sent.clear()

    assert len(store.claim("w1", None, 10, clock.now(), {"default": 5})) == 5

    sql, params = next((s, p) for s, p in sent if s.startswith("SELECT 1 FROM"))
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan" not in plan
    assert "Index Scan using workers_task_pending " in plan


def test_a_claim_behind_a_full_queue_reads_none_of_its_backlog(store: DatabaseWorkerStore) -> None:
    # The 2,000 pending tasks of the fixture's queue come first in claim order; with
    # that queue full, a claim once read past every one of them to reach the others.
    limits = {"default": 1}
    assert len(store.claim("w0", ["default"], 1, clock.now(), limits)) == 1
    store.submit_many([NewTaskFactory(global_scope=True, queue="other") for _ in range(5)], None)
    text, params, leading = sql_claim._limited_claim_sql("w1", None, 10, clock.now(), limits)
    *before, claim = text.split(";\n")
    assert len(before) == leading
    values_of = [[params[0]], [params[1]]] + [[]] * (len(before) - 2)
    with transaction.atomic(), connection.cursor() as cursor:
        for statement, values in zip(before, values_of, strict=True):
            cursor.execute(statement, values)
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT TEXT) {claim}", params[2:])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)
    assert re.search(r"Update on .*rows=5 loops=1", plan), plan
    removed = [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]
    assert max(removed, default=0) < 10, plan
    assert "Index Scan using workers_task_pending_queue" in plan, plan
