"""PostgreSQL: a claim reads the index of PENDING rows in claim order, whatever the statistics.

With statistics of an empty table (a new site, or one whose retention deleted
every task) the planner read and sorted every pending row at each claim until
autoanalyze caught up. The store sends the claim of every queue, or of one,
after turning sorting off for its transaction.

A claim that is a transaction of its own also commits without waiting for the
disk; every write that ends a run still waits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.db import connection, transaction

from django_workers import TaskStatus, clock, lifecycle
from django_workers.models import TaskRecord
from django_workers.stores.database import DatabaseWorkerStore
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
    sql, params = next((s, p) for s, p in sent if "FOR UPDATE SKIP LOCKED" in s)
    before, _, claim = sql.rpartition(";\n")
    return before, claim, list(params)[-claim.count("%s") :]


def plan_of(before: str, claim: str, params: Any) -> str:
    """The plan the claim ran with, in the same transaction as what preceded it."""
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in before.split(";\n") if before else []:
            if not statement.lstrip().startswith("UPDATE"):  # the ends: nothing to end here
                cursor.execute(statement)
        cursor.execute(f"EXPLAIN {claim}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
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

    before, claim, params = claim_statement(sent)
    assert before.endswith(ORDERED)
    plan = plan_of(before, claim, params)
    assert "Sort" not in plan
    assert f"Index Scan using {index} " in plan


def test_the_refill_after_ends_is_ordered_the_same_way(
    store: DatabaseWorkerStore, sent: Sent
) -> None:
    runs = store.claim("w1", None, 3, clock.now())
    ends = [lifecycle.run_end(r, "w1", TaskStatus.COMPLETED, clock.now(), result=1) for r in runs]
    sent.clear()

    won, claimed = store.end_and_claim(ends, "w1", None, 3, clock.now())

    assert (won, len(claimed)) == ([True] * 3, 3)
    before, claim, params = claim_statement(sent)
    assert before.endswith(ORDERED)
    assert "Sort" not in plan_of(before, claim, params)


def test_a_claim_of_several_queues_is_left_to_the_planner(
    store: DatabaseWorkerStore, sent: Sent
) -> None:
    # No index holds several queues' rows in claim order; the setting would make the
    # planner walk every pending row of the other queues instead.
    assert len(store.claim("w1", ["default", "other"], 10, clock.now())) == 10
    before, _claim, _params = claim_statement(sent)
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
    before, _claim, _params = claim_statement(sent)
    assert OWN_COMMIT in before
    assert synchronous_commit() == "on"  # for the claim's transaction only


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


def test_a_claim_inside_a_transaction_leaves_its_commit_alone(
    store: DatabaseWorkerStore, sent: Sent
) -> None:
    with transaction.atomic():
        assert store.claim("w1", None, 10, clock.now())
        assert synchronous_commit() == "on"
    assert not [sql for sql, _params in sent if OWN_COMMIT in sql]


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
